//! The load generator: many real MCP sinks (`ResourceSource` clients) over
//! loopback, multiplexed over a bounded number of HTTP/2 connections.
//!
//! Every stream subscribes every collection, applies each response (full
//! state or delta) to what it holds (`name hash → entry hash`), records the
//! version, the content digest and the receipt time, and then ACKs it — as a
//! Pilot-like sink does after applying. Commands: `open` (grow to `streams`
//! streams and wait until each holds every collection), `wait` (until every
//! stream holds the given versions), `reset_bytes`. Both answer with a
//! `report`: per collection the distinct (version, digest) states and how
//! many streams hold each, optionally every stream's receipt time, and the
//! bytes received.
//!
//! With `--envelope` (full state only) a stream decodes only each
//! response's envelope and keeps every resource as its encoded bytes
//! (`crate::envelope`); its digest then hashes those bytes, which the hub
//! side's `expected` reports as `raw_digest`.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use meshhub_proto::mcp::resource_source_client::ResourceSourceClient;
use meshhub_proto::mcp::{RequestResources, SinkNode};
use prost::Message as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::{Channel, Endpoint};

use crate::digest::{Digest, name_hash, resource_hash};
use crate::envelope;
use crate::proc::{Commands, emit, now_ns};

/// Largest response a consumer accepts.
const MAX_MESSAGE: usize = 512 * 1024 * 1024;

/// What one stream holds of one collection.
#[derive(Clone, Debug)]
struct Held {
    version: String,
    digest: Digest,
    recv_ns: u64,
}

#[derive(Default)]
struct StreamState {
    collections: HashMap<String, Held>,
    failed: Option<String>,
}

struct Load {
    addr: SocketAddr,
    conns: usize,
    channels: Vec<Channel>,
    collections: Arc<Vec<String>>,
    incremental: bool,
    envelope: bool,
    streams: Vec<Arc<Mutex<StreamState>>>,
    bytes: Arc<AtomicU64>,
}

/// Runs the load generator until stdin closes or says quit.
pub async fn run(
    addr: SocketAddr,
    conns: usize,
    collections: Vec<String>,
    incremental: bool,
    envelope: bool,
) -> Result<()> {
    let mut load = Load {
        addr,
        conns: conns.max(1),
        channels: Vec::new(),
        collections: Arc::new(collections),
        incremental,
        envelope,
        streams: Vec::new(),
        bytes: Arc::new(AtomicU64::new(0)),
    };
    let mut commands = Commands::stdin();
    while let Some(cmd) = commands.next().await? {
        let timeout = Duration::from_millis(cmd["timeout_ms"].as_u64().unwrap_or(60_000));
        let times = cmd["times"].as_bool().unwrap_or(false);
        match cmd["cmd"].as_str() {
            Some("open") => {
                let n = cmd["streams"].as_u64().unwrap_or(1) as usize;
                load.open(n).await?;
                let done = load.wait(&BTreeMap::new(), timeout).await;
                emit(&load.report(done, times));
            }
            Some("wait") => {
                let versions: BTreeMap<String, String> =
                    serde_json::from_value(cmd["versions"].clone()).unwrap_or_default();
                let done = load.wait(&versions, timeout).await;
                emit(&load.report(done, times));
            }
            Some("reset_bytes") => {
                load.bytes.store(0, Ordering::Relaxed);
                emit(&json!({"event": "reset"}));
            }
            other => {
                emit(&json!({"event": "error", "message": format!("unknown command {other:?}")}))
            }
        }
    }
    Ok(())
}

impl Load {
    /// Grows to `n` streams, spread round-robin over at most `conns`
    /// connections (opened as needed).
    async fn open(&mut self, n: usize) -> Result<()> {
        while self.streams.len() < n {
            let i = self.streams.len();
            let c = i % self.conns;
            if c >= self.channels.len() {
                let channel = connect(self.addr).await?;
                self.channels.push(channel);
            }
            let state = Arc::new(Mutex::new(StreamState::default()));
            self.streams.push(state.clone());
            let channel = self.channels[c].clone();
            let collections = self.collections.clone();
            let bytes = self.bytes.clone();
            let incremental = self.incremental;
            let envelope = self.envelope;
            tokio::spawn(async move {
                if let Err(e) = stream(
                    channel,
                    i,
                    collections,
                    incremental,
                    envelope,
                    &state,
                    &bytes,
                )
                .await
                {
                    lock(&state).failed = Some(format!("{e:#}"));
                }
            });
        }
        Ok(())
    }

    /// Waits until every stream holds every collection (at the given
    /// versions, when named) or a stream failed, at most `timeout`.
    async fn wait(&self, versions: &BTreeMap<String, String>, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let done = self.streams.iter().all(|s| {
                let s = lock(s);
                s.failed.is_none()
                    && self.collections.iter().all(|c| {
                        s.collections
                            .get(c)
                            .is_some_and(|h| versions.get(c).is_none_or(|v| *v == h.version))
                    })
            });
            let failed = self.streams.iter().any(|s| lock(s).failed.is_some());
            if done || failed || tokio::time::Instant::now() >= deadline {
                return done;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn report(&self, complete: bool, times: bool) -> Value {
        let mut collections = serde_json::Map::new();
        let mut failures = Vec::new();
        for c in self.collections.iter() {
            let mut states: BTreeMap<String, u64> = BTreeMap::new();
            let mut recv = Vec::new();
            for s in &self.streams {
                let s = lock(s);
                match s.collections.get(c) {
                    Some(h) => {
                        *states
                            .entry(format!("{}|{}", h.version, h.digest.key()))
                            .or_default() += 1;
                        recv.push(h.recv_ns);
                    }
                    None => *states.entry("missing".into()).or_default() += 1,
                }
            }
            let last = recv.iter().copied().max();
            let mut entry = json!({"states": states, "last_recv_ns": last});
            if times {
                entry["recv_ns"] = json!(recv);
            }
            collections.insert(c.clone(), entry);
        }
        for s in &self.streams {
            if let Some(f) = &lock(s).failed {
                failures.push(f.clone());
                if failures.len() >= 5 {
                    break;
                }
            }
        }
        json!({
            "event": "report",
            "complete": complete,
            "streams": self.streams.len(),
            "connections": self.channels.len(),
            "collections": collections,
            "bytes": self.bytes.load(Ordering::Relaxed),
            "failures": failures,
        })
    }
}

fn lock(s: &Mutex<StreamState>) -> std::sync::MutexGuard<'_, StreamState> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// One HTTP/2 connection; every stream cloned from it shares it.
async fn connect(addr: SocketAddr) -> Result<Channel> {
    // The same windows and keepalives as meshhub's own clients.
    let endpoint = meshhub_mcp::transport::tune(Endpoint::from_shared(format!("http://{addr}"))?)
        .connect_timeout(Duration::from_secs(5));
    // The hub may still be binding or starting (P4): retry briefly.
    let mut last = None;
    for _ in 0..500 {
        match endpoint.connect().await {
            Ok(c) => return Ok(c),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(last.map_or_else(|| anyhow::anyhow!("no attempt"), Into::into))
        .context("connecting to the hub")
}

/// One sink stream: subscribe every collection, then apply and ACK each
/// response until the stream ends.
async fn stream(
    channel: Channel,
    id: usize,
    collections: Arc<Vec<String>>,
    incremental: bool,
    envelope: bool,
    state: &Mutex<StreamState>,
    bytes: &AtomicU64,
) -> Result<()> {
    // Unbounded is bounded by the protocol: one ACK per response received.
    let (tx, rx) = mpsc::unbounded_channel();
    for (k, c) in collections.iter().enumerate() {
        tx.send(RequestResources {
            sink_node: (k == 0).then(|| SinkNode {
                id: format!("bench-{id}"),
                annotations: Default::default(),
            }),
            collection: c.clone(),
            incremental,
            ..Default::default()
        })?;
    }
    let requests = UnboundedReceiverStream::new(rx);
    let mut held: HashMap<String, HashMap<u64, u64>> = HashMap::new();
    let mut apply = |collection: String,
                     version: String,
                     nonce: String,
                     full: bool,
                     removed: &mut dyn Iterator<Item = u64>,
                     entries: &mut dyn Iterator<Item = (u64, u64)>|
     -> Result<()> {
        let recv_ns = now_ns();
        let map = held.entry(collection.clone()).or_default();
        if full {
            map.clear();
        }
        for name in removed {
            map.remove(&name);
        }
        map.extend(entries);
        let digest = Digest::of(map.values());
        lock(state).collections.insert(
            collection.clone(),
            Held {
                version,
                digest,
                recv_ns,
            },
        );
        tx.send(RequestResources {
            collection,
            response_nonce: nonce,
            ..Default::default()
        })?;
        Ok(())
    };
    if envelope {
        // Full state only: without names, a delta could not be applied.
        anyhow::ensure!(!incremental, "the envelope consumer asks for full state");
        let mut responses = envelope::open(channel, MAX_MESSAGE, requests)
            .await
            .context("opening the stream")?;
        while let Some(msg) = responses.message().await.context("receiving")? {
            bytes.fetch_add(msg.encoded_len() as u64, Ordering::Relaxed);
            apply(
                msg.collection,
                msg.system_version_info,
                msg.nonce,
                true,
                &mut std::iter::empty(),
                &mut msg
                    .resources
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (i as u64, envelope::raw_hash(r))),
            )?;
        }
    } else {
        let mut client = ResourceSourceClient::new(channel).max_decoding_message_size(MAX_MESSAGE);
        let mut responses = client
            .establish_resource_stream(requests)
            .await
            .context("opening the stream")?
            .into_inner();
        while let Some(msg) = responses.message().await.context("receiving")? {
            bytes.fetch_add(msg.encoded_len() as u64, Ordering::Relaxed);
            apply(
                msg.collection,
                msg.system_version_info,
                msg.nonce,
                !msg.incremental,
                &mut msg.removed_resources.iter().map(|n| name_hash(n)),
                &mut msg.resources.iter().map(resource_hash),
            )?;
        }
    }
    anyhow::bail!("the hub ended the stream")
}

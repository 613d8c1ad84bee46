//! The ADS load generator: many real MCP-over-xDS consumers (Envoy ADS,
//! state of the world) over loopback, multiplexed over a bounded number of
//! HTTP/2 connections — the consumer side of scenario P5 for meshhub's ADS
//! and for the go-control-plane peer alike.
//!
//! Each stream subscribes every type URL (the node on the first request, as
//! istiod sends it), decodes every `Any` of a response as an
//! `istio.mcp.v1alpha1.Resource`, records the type's version, content
//! digest and receipt time, then ACKs (version and nonce of the response).
//! Commands and the `report` are those of the MCP load generator (`load.rs`),
//! keyed by type URL: `open`, `wait`, `reset_bytes`.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use meshhub_proto::ads::client::AggregatedDiscoveryServiceClient;
use meshhub_proto::ads::{DiscoveryRequest, Node};
use meshhub_proto::mcp::Resource;
use prost::Message as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::{Channel, Endpoint};

use crate::digest::{Digest, resource_hash};
use crate::proc::{Commands, emit, now_ns};

/// Largest response a consumer accepts.
const MAX_MESSAGE: usize = 512 * 1024 * 1024;

/// What one stream holds of one type.
struct Held {
    version: String,
    digest: Digest,
    recv_ns: u64,
}

#[derive(Default)]
struct StreamState {
    types: HashMap<String, Held>,
    failed: Option<String>,
}

struct Load {
    addr: SocketAddr,
    conns: usize,
    channels: Vec<Channel>,
    types: Arc<Vec<String>>,
    streams: Vec<Arc<Mutex<StreamState>>>,
    bytes: Arc<AtomicU64>,
}

/// Runs the ADS load generator until stdin closes or says quit.
pub async fn run(addr: SocketAddr, conns: usize, types: Vec<String>) -> Result<()> {
    let mut load = Load {
        addr,
        conns: conns.max(1),
        channels: Vec::new(),
        types: Arc::new(types),
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
    async fn open(&mut self, n: usize) -> Result<()> {
        while self.streams.len() < n {
            let i = self.streams.len();
            let c = i % self.conns;
            if c >= self.channels.len() {
                self.channels.push(connect(self.addr).await?);
            }
            let state = Arc::new(Mutex::new(StreamState::default()));
            self.streams.push(state.clone());
            let channel = self.channels[c].clone();
            let types = self.types.clone();
            let bytes = self.bytes.clone();
            tokio::spawn(async move {
                if let Err(e) = stream(channel, i, types, &state, &bytes).await {
                    lock(&state).failed = Some(format!("{e:#}"));
                }
            });
        }
        Ok(())
    }

    /// Waits until every stream holds every type (at the given versions,
    /// when named) or a stream failed, at most `timeout`.
    async fn wait(&self, versions: &BTreeMap<String, String>, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let done = self.streams.iter().all(|s| {
                let s = lock(s);
                s.failed.is_none()
                    && self.types.iter().all(|t| {
                        s.types
                            .get(t)
                            .is_some_and(|h| versions.get(t).is_none_or(|v| *v == h.version))
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
        for t in self.types.iter() {
            let mut states: BTreeMap<String, u64> = BTreeMap::new();
            let mut recv = Vec::new();
            for s in &self.streams {
                let s = lock(s);
                match s.types.get(t) {
                    Some(h) => {
                        *states
                            .entry(format!("{}|{}", h.version, h.digest.key()))
                            .or_default() += 1;
                        recv.push(h.recv_ns);
                    }
                    None => *states.entry("missing".into()).or_default() += 1,
                }
            }
            let mut entry = json!({"states": states, "last_recv_ns": recv.iter().max()});
            if times {
                entry["recv_ns"] = json!(recv);
            }
            collections.insert(t.clone(), entry);
        }
        let failures: Vec<String> = self
            .streams
            .iter()
            .filter_map(|s| lock(s).failed.clone())
            .take(5)
            .collect();
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

/// One HTTP/2 connection with meshhub's client transport settings.
pub async fn connect(addr: SocketAddr) -> Result<Channel> {
    let endpoint = meshhub_mcp::transport::tune(Endpoint::from_shared(format!("http://{addr}"))?)
        .connect_timeout(Duration::from_secs(5));
    endpoint
        .connect()
        .await
        .with_context(|| format!("connecting to {addr}"))
}

/// The node a benchmark consumer presents (istiod's shape: `sidecar~…`).
pub fn node(id: usize) -> Node {
    Node {
        id: format!("sidecar~10.0.0.1~bench-{id}.bench~bench.svc.cluster.local"),
        ..Default::default()
    }
}

/// One ADS stream: subscribe every type, then apply and ACK each response
/// until the stream ends.
async fn stream(
    channel: Channel,
    id: usize,
    types: Arc<Vec<String>>,
    state: &Mutex<StreamState>,
    bytes: &AtomicU64,
) -> Result<()> {
    let mut client =
        AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE);
    // Unbounded is bounded by the protocol: one ACK per response received.
    let (tx, rx) = mpsc::unbounded_channel();
    for (k, t) in types.iter().enumerate() {
        tx.send(DiscoveryRequest {
            node: (k == 0).then(|| node(id)),
            type_url: t.clone(),
            ..Default::default()
        })?;
    }
    let mut responses = client
        .stream_aggregated_resources(UnboundedReceiverStream::new(rx))
        .await
        .context("opening the stream")?
        .into_inner();
    while let Some(msg) = responses.message().await.context("receiving")? {
        let recv_ns = now_ns();
        bytes.fetch_add(msg.encoded_len() as u64, Ordering::Relaxed);
        let mut entries = Vec::with_capacity(msg.resources.len());
        for any in &msg.resources {
            let r = Resource::decode(&any.value[..]).context("a resource")?;
            entries.push(resource_hash(&r).1);
        }
        lock(state).types.insert(
            msg.type_url.clone(),
            Held {
                version: msg.version_info.clone(),
                digest: Digest::of(&entries),
                recv_ns,
            },
        );
        tx.send(DiscoveryRequest {
            type_url: msg.type_url,
            version_info: msg.version_info,
            response_nonce: msg.nonce,
            ..Default::default()
        })?;
    }
    anyhow::bail!("the server ended the stream")
}

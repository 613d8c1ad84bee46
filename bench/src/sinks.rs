//! Scenario `clusters`' remote clusters: N light sink agents in one process,
//! each a real `istio.mcp.v1alpha1.ResourceSink` gRPC server on its own
//! loopback listener, dialed by the hub on its own connection.
//!
//! Each sink runs the engine's sink side — the same [`SinkServer`] and
//! stream machine the real agent runs — over a light updater that decodes,
//! hashes and keeps `name → (version, hash)` per collection instead of
//! validating and persisting: it subscribes every built-in collection (the
//! agent's default), declares what it holds in `initial_resource_versions`
//! when incremental (as the agent does from its persisted store), applies
//! full state or deltas, and ACKs after applying. Its state outlives its
//! server, like the agent's disk: `restart` stops every server at once and
//! starts them again on the same addresses with what they held.
//!
//! Each also serves the agent's upward source on the same listener (as
//! the agent does on its sink port): a minimal valid report of its cluster
//! (`meshhub_sink_agent::upward::snapshot`) and no exports, so the hub's
//! upward subscriber costs what it costs with a real fleet. With
//! `--sink-only` they serve `ResourceSink` only, as Istio 1.5's sink or an
//! older agent: the hub's subscription is answered UNIMPLEMENTED.
//!
//! Events: `listening` (the sink addresses, in cluster order). Commands:
//! `report` (per cluster, per collection of `collections`, `version|digest`;
//! content bytes received), `mark` (remember each cluster's version of
//! `collection`), `changed` (wait until every cluster in `clusters`, or
//! all, holds a version of `collection` other than the marked one: the
//! times their changes were applied, i.e. ACKed), `synced` (wait until
//! every cluster applied every collection at or after `since_ns`: the
//! times), `restart` (stop every server, wait `down_ms`, start again),
//! `reset_bytes`.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use meshhub_mcp::cache::{SnapshotCache, SnapshotWriter};
use meshhub_mcp::group::SingleGroup;
use meshhub_mcp::ledger::Ledger;
use meshhub_mcp::sink::server::SinkServer;
use meshhub_mcp::sink::{ApplyError, Change, SinkCollection, SinkConfig, Updater};
use meshhub_mcp::source::SourceConfig;
use meshhub_mcp::source::server::{Shared, SourceServer};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::SinkNode;
use meshhub_proto::upward::{ClusterStatus, HeldCollection};
use prost::Message as _;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::digest::{Digest, resource_hash};
use crate::proc::{Commands, emit, now_ns};

/// Largest response a sink accepts (the agent's default is 64 MiB).
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// The name of cluster `i` (its group, its sink's node id).
pub fn cluster_name(i: usize) -> String {
    format!("c-{i:05}")
}

/// What one sink holds of one collection.
#[derive(Default)]
struct Held {
    version: String,
    /// name → (resource version, entry hash).
    entries: HashMap<String, (String, u64)>,
    digest: Digest,
    applied_ns: u64,
}

/// One light sink's store: it outlives the sink's server.
#[derive(Default)]
struct LightStore {
    collections: Mutex<HashMap<String, Held>>,
    bytes: Arc<AtomicU64>,
    /// Set by every apply, cleared by a waiter that reads the store: a
    /// wait re-reads only the stores that changed since its last look
    /// (reading all 10,000 every 20 ms took a fifth of the sinks' CPU
    /// while the hub's fan-out was being measured).
    applied: AtomicBool,
}

impl Updater for LightStore {
    async fn apply(&self, change: Change) -> Result<(), ApplyError> {
        let mut bytes = 0u64;
        let mut hashed = Vec::with_capacity(change.resources.len());
        for r in &change.resources {
            bytes += r.encoded_len() as u64;
            let name = r.metadata.as_ref().map_or("", |m| m.name.as_str());
            let version = r.metadata.as_ref().map_or("", |m| m.version.as_str());
            hashed.push((name.to_owned(), version.to_owned(), resource_hash(r).1));
        }
        bytes += change.removed.iter().map(|n| n.len() as u64).sum::<u64>();
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let mut collections = self.collections.lock().expect("sink store");
        let held = collections.entry(change.collection).or_default();
        if !change.incremental {
            held.entries.clear();
            held.digest = Digest::default();
        }
        for name in &change.removed {
            if let Some((_, h)) = held.entries.remove(name) {
                held.digest.count -= 1;
                held.digest.sum = held.digest.sum.wrapping_sub(h);
            }
        }
        for (name, version, h) in hashed {
            if let Some((_, old)) = held.entries.insert(name, (version, h)) {
                held.digest.count -= 1;
                held.digest.sum = held.digest.sum.wrapping_sub(old);
            }
            held.digest.count += 1;
            held.digest.sum = held.digest.sum.wrapping_add(h);
        }
        held.version = change.version;
        held.applied_ns = now_ns();
        drop(collections);
        self.applied.store(true, Ordering::Release);
        Ok(())
    }

    fn held(&self, collection: &str) -> HashMap<String, String> {
        self.collections
            .lock()
            .expect("sink store")
            .get(collection)
            .map(|h| {
                h.entries
                    .iter()
                    .map(|(n, (v, _))| (n.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl LightStore {
    /// `(version, applied_ns)` of a collection.
    fn version(&self, collection: &str) -> Option<(String, u64)> {
        self.collections
            .lock()
            .expect("sink store")
            .get(collection)
            .map(|h| (h.version.clone(), h.applied_ns))
    }
}

struct Sinks {
    /// The number of the first cluster served (sink `i` is cluster
    /// `first + i`).
    first: usize,
    addrs: Vec<SocketAddr>,
    stores: Vec<Arc<LightStore>>,
    configs: Vec<Arc<SinkConfig>>,
    collections: Vec<String>,
    ledger: Ledger,
    /// The upward snapshots, one group per cluster, and their writer
    /// (`None`: sink only).
    upward: Option<(SnapshotWriter, SnapshotCache)>,
    tasks: TaskTracker,
    /// Stops the current generation of servers.
    stop: CancellationToken,
    bytes: Arc<AtomicU64>,
    marked: Vec<Option<String>>,
}

/// Runs `count` sinks until stdin closes or says quit.
pub async fn run(count: usize, first: usize, incremental: bool, upward: bool) -> Result<()> {
    let collections: Vec<String> = KindTable::builtin()
        .iter()
        .map(|k| k.collection().to_owned())
        .collect();
    let bytes = Arc::new(AtomicU64::new(0));
    let mut sinks = Sinks {
        first,
        addrs: Vec::with_capacity(count),
        stores: (0..count)
            .map(|_| {
                Arc::new(LightStore {
                    bytes: bytes.clone(),
                    ..LightStore::default()
                })
            })
            .collect(),
        configs: (0..count)
            .map(|i| {
                Arc::new(SinkConfig {
                    node: SinkNode {
                        id: cluster_name(first + i),
                        annotations: HashMap::new(),
                    },
                    collections: collections
                        .iter()
                        .map(|c| SinkCollection {
                            name: c.clone(),
                            incremental,
                        })
                        .collect(),
                })
            })
            .collect(),
        collections,
        ledger: Ledger::new(),
        upward: upward.then(|| upward_cache(first, count)),
        tasks: TaskTracker::new(),
        stop: CancellationToken::new(),
        bytes,
        marked: vec![None; count],
    };
    let mut listeners = Vec::with_capacity(count);
    for i in 0..count {
        let l = match TcpListener::bind(sink_addr(first + i)).await {
            Ok(l) => l,
            Err(_) => TcpListener::bind("127.0.0.1:0")
                .await
                .context("binding a sink listener")?,
        };
        sinks.addrs.push(l.local_addr()?);
        listeners.push(l);
    }
    sinks.serve(listeners);
    emit(&json!({"event": "listening", "addrs": sinks.addrs}));

    let mut commands = Commands::stdin();
    while let Some(cmd) = commands.next().await? {
        let timeout = Duration::from_millis(cmd["timeout_ms"].as_u64().unwrap_or(60_000));
        match cmd["cmd"].as_str() {
            Some("report") => emit(&sinks.report(&cmd)),
            Some("mark") => {
                let c = cmd["collection"].as_str().unwrap_or_default();
                sinks.marked = sinks
                    .stores
                    .iter()
                    .map(|s| s.version(c).map(|v| v.0))
                    .collect();
                emit(&json!({"event": "marked"}));
            }
            Some("changed") => emit(&sinks.changed(&cmd, timeout).await),
            Some("synced") => emit(&sinks.synced(&cmd, timeout).await),
            Some("restart") => {
                sinks.stop.cancel();
                let down = Duration::from_millis(cmd["down_ms"].as_u64().unwrap_or(0));
                tokio::time::sleep(down).await;
                let mut listeners = Vec::with_capacity(count);
                for a in &sinks.addrs {
                    listeners.push(
                        TcpListener::bind(a)
                            .await
                            .with_context(|| format!("binding {a} again"))?,
                    );
                }
                sinks.stop = CancellationToken::new();
                let at_ns = now_ns();
                sinks.serve(listeners);
                emit(&json!({"event": "restarted", "at_ns": at_ns}));
            }
            Some("reports") => emit(&sinks.reports()),
            Some("reset_bytes") => {
                sinks.bytes.store(0, Ordering::Relaxed);
                emit(&json!({"event": "reset"}));
            }
            other => {
                emit(&json!({"event": "error", "message": format!("unknown command {other:?}")}))
            }
        }
    }
    sinks.stop.cancel();
    Ok(())
}

/// Where sink `k` listens: a loopback address of its own on a port below
/// the ephemeral range. A listener on an ephemeral port can't always be
/// bound again after a restart (the storm): at 10,000 clusters the hub's
/// own connections hold most of that range, and one of them may have
/// taken the port meanwhile.
fn sink_addr(k: usize) -> SocketAddr {
    let k = u32::try_from(k).unwrap_or(u32::MAX) & 0x00ff_ffff;
    let ip = std::net::Ipv4Addr::from(0x7f00_0000 | ((3 << 16) + k));
    SocketAddr::new(ip.into(), 7001)
}

/// The upward snapshots of `count` clusters: each a minimal valid report
/// of its own (what an agent without `--apply` or istiod address reports
/// before anything arrived) and no exports, until a `reports` command
/// replaces them.
fn upward_cache(first: usize, count: usize) -> (SnapshotWriter, SnapshotCache) {
    let (writer, cache) = meshhub_mcp::cache::new();
    for i in first..first + count {
        let cluster = cluster_name(i);
        let report = ClusterStatus {
            cluster: cluster.clone(),
            ..ClusterStatus::default()
        };
        writer.set(
            &cluster,
            Arc::new(meshhub_sink_agent::upward::snapshot(&cluster, report, &[])),
        );
    }
    (writer, cache)
}

impl Sinks {
    /// One server per listener, until `self.stop`.
    fn serve(&self, listeners: Vec<TcpListener>) {
        for (i, l) in listeners.into_iter().enumerate() {
            let service = SinkServer::new(
                self.stores[i].clone(),
                self.configs[i].clone(),
                self.ledger.clone(),
                self.stop.clone(),
                self.tasks.clone(),
            )
            .into_service(MAX_MESSAGE);
            let upward = self.upward.as_ref().map(|(_, cache)| {
                SourceServer::new(Shared {
                    cache: cache.clone(),
                    groups: Arc::new(SingleGroup(cluster_name(self.first + i).into())),
                    ledger: self.ledger.clone(),
                    config: Arc::new(SourceConfig::default()),
                    shutdown: self.stop.clone(),
                    tasks: self.tasks.clone(),
                })
                .into_service(MAX_MESSAGE)
            });
            let stop = self.stop.clone();
            self.tasks.spawn(async move {
                let served = meshhub_mcp::transport::server()
                    .add_service(service)
                    .add_optional_service(upward)
                    .serve_with_incoming_shutdown(TcpListenerStream::new(l), stop.cancelled_owned())
                    .await;
                if let Err(e) = served {
                    emit(&json!({"event": "error", "message": format!("sink server: {e}")}));
                }
            });
        }
    }

    /// A round of reports: every cluster's agent reports again, now with
    /// what it holds per collection (the hub's version, the one it serves,
    /// how many resources), as a real agent does after a change.
    fn reports(&self) -> Value {
        let Some((writer, _)) = &self.upward else {
            return json!({"event": "error", "message": "sink only: no upward source"});
        };
        let at_ns = now_ns();
        for (i, s) in self.stores.iter().enumerate() {
            let cluster = cluster_name(self.first + i);
            let collections = {
                let held = s.collections.lock().expect("sink store");
                held.iter()
                    .map(|(c, h)| HeldCollection {
                        collection: c.clone(),
                        hub_version: h.version.clone(),
                        served_version: h.version.clone(),
                        acked_version: h.version.clone(),
                        resources: u32::try_from(h.entries.len()).unwrap_or(u32::MAX),
                        ..HeldCollection::default()
                    })
                    .collect()
            };
            let report = ClusterStatus {
                cluster: cluster.clone(),
                observed: Some(std::time::SystemTime::now().into()),
                collections,
                ..ClusterStatus::default()
            };
            writer.set(
                &cluster,
                Arc::new(meshhub_sink_agent::upward::snapshot(&cluster, report, &[])),
            );
        }
        json!({"event": "reported", "at_ns": at_ns, "clusters": self.stores.len()})
    }

    fn report(&self, cmd: &Value) -> Value {
        let wanted: Vec<String> = serde_json::from_value(cmd["collections"].clone())
            .unwrap_or_else(|_| self.collections.clone());
        let mut clusters = serde_json::Map::new();
        for (i, s) in self.stores.iter().enumerate() {
            let held = s.collections.lock().expect("sink store");
            let mut per = serde_json::Map::new();
            for c in &wanted {
                let state = held
                    .get(c)
                    .map_or_else(String::new, |h| format!("{}|{}", h.version, h.digest.key()));
                per.insert(c.clone(), Value::String(state));
            }
            clusters.insert(cluster_name(self.first + i), Value::Object(per));
        }
        json!({
            "event": "report",
            "clusters": clusters,
            "bytes": self.bytes.load(Ordering::Relaxed),
        })
    }

    /// Waits until the selected clusters hold a version of the collection
    /// other than the marked one; their apply (= ACK) times.
    async fn changed(&self, cmd: &Value, timeout: Duration) -> Value {
        let collection = cmd["collection"].as_str().unwrap_or_default();
        // Clusters by number, of this process' range.
        let selected: Vec<usize> = match cmd["clusters"].as_array() {
            Some(list) => list
                .iter()
                .filter_map(Value::as_u64)
                .filter_map(|k| (k as usize).checked_sub(self.first))
                .filter(|&i| i < self.stores.len())
                .collect(),
            None => (0..self.stores.len()).collect(),
        };
        self.wait(
            timeout,
            |i| {
                let (version, at) = self.stores[i].version(collection)?;
                (Some(&version) != self.marked[i].as_ref()).then_some(at)
            },
            &selected,
        )
        .await
    }

    /// Waits until every cluster applied every collection at or after
    /// `since_ns` (a stream started then has answered them all); the time
    /// each cluster's last collection was applied.
    async fn synced(&self, cmd: &Value, timeout: Duration) -> Value {
        let since = cmd["since_ns"].as_u64().unwrap_or(0);
        let all: Vec<usize> = (0..self.stores.len()).collect();
        self.wait(
            timeout,
            |i| {
                let held = self.stores[i].collections.lock().expect("sink store");
                let mut last = 0;
                for c in &self.collections {
                    let at = held.get(c)?.applied_ns;
                    if at < since {
                        return None;
                    }
                    last = last.max(at);
                }
                Some(last)
            },
            &all,
        )
        .await
    }

    /// Polls `done` for each selected cluster until all are done or the
    /// timeout: `at_ns` holds the done clusters' times. After a first look
    /// at every one, only those not done yet whose store applied something
    /// since are looked at again.
    async fn wait(
        &self,
        timeout: Duration,
        done: impl Fn(usize) -> Option<u64>,
        selected: &[usize],
    ) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut times: BTreeMap<usize, u64> = BTreeMap::new();
        let mut remaining: Vec<usize> = selected.to_vec();
        let mut first = true;
        loop {
            remaining.retain(|&i| {
                // Cleared before reading: an apply after the read sets it
                // again and is seen on the next look.
                let applied = self.stores[i].applied.swap(false, Ordering::AcqRel);
                if !(first || applied) {
                    return true;
                }
                match done(i) {
                    Some(t) => {
                        times.insert(i, t);
                        false
                    }
                    None => true,
                }
            });
            first = false;
            let complete = remaining.is_empty();
            if complete || tokio::time::Instant::now() >= deadline {
                let missing: Vec<String> = remaining
                    .iter()
                    .take(5)
                    .map(|&i| cluster_name(self.first + i))
                    .collect();
                return json!({
                    "event": "waited",
                    "complete": complete,
                    "done": times.len(),
                    "missing": missing,
                    "at_ns": times.values().collect::<Vec<_>>(),
                    "bytes": self.bytes.load(Ordering::Relaxed),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

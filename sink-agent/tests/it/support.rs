//! What the agent's tests share: resources encoded as the hub encodes
//! them, a hub that dials the agent and pushes, and a local consumer of the
//! agent's re-serve port.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;

use meshhub_e2e::upstream::encoded;
use meshhub_mcp::cache::{self, SnapshotCache, SnapshotWriter};
use meshhub_mcp::ledger::{CollectionStatus, Ledger, PeerStatus, Role, SyncState};
use meshhub_mcp::sink::client::{SourceTarget, connect_once};
use meshhub_mcp::sink::{InMemoryUpdater, SinkCollection, SinkConfig};
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use meshhub_mcp::source::{SourceConfig, dialer};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::object::Object;
use meshhub_proto::transcode::object_to_resource;
use meshhub_testkit::eventually;
use meshhub_testkit::mcp::node;
use meshhub_testkit::objects::VS;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;

/// The message limit of the test hubs and consumers.
pub const MAX: usize = 16 * 1024 * 1024;

/// Objects encoded as the hub encodes them (once, through the kind
/// table), by collection.
pub fn encode(objects: &[Object]) -> BTreeMap<String, Vec<EncodedResource>> {
    let kinds = KindTable::builtin();
    let mut out: BTreeMap<String, Vec<EncodedResource>> = BTreeMap::new();
    for o in objects {
        let kind = kinds.by_api_version(&o.api_version, &o.kind).unwrap();
        let r = object_to_resource(kind, o).unwrap();
        out.entry(kind.collection().to_owned())
            .or_default()
            .push(encoded(&r));
    }
    out
}

/// A snapshot of these collections.
pub fn snapshot(collections: BTreeMap<String, Vec<EncodedResource>>) -> Arc<Snapshot> {
    let mut s = Snapshot::new();
    for (c, rs) in collections {
        s.insert(c, Arc::new(CollectionSnapshot::new(rs)));
    }
    Arc::new(s)
}

/// The names of `rs`.
pub fn names_of(rs: &[EncodedResource]) -> BTreeSet<String> {
    rs.iter().map(|r| r.name.to_string()).collect()
}

/// The connected peer of `role` in `ledger`.
pub fn peer(ledger: &Ledger, role: Role) -> Option<PeerStatus> {
    ledger
        .view()
        .into_iter()
        .find(|p| p.role == role && p.connected)
}

/// A hub that dials the agent's `ResourceSink` and pushes group `east`, as
/// the real hub's dialer does; stops when dropped.
pub struct PushHub {
    writer: SnapshotWriter,
    ledger: Ledger,
    shutdown: CancellationToken,
}

impl PushHub {
    /// Dials the agent's sink port at `agent`, pushing `initial` first.
    pub fn dial(agent: SocketAddr, initial: Arc<Snapshot>) -> Self {
        let (writer, _) = cache::new();
        writer.set("east", initial);
        let hub = Self {
            writer,
            ledger: Ledger::new(),
            shutdown: CancellationToken::new(),
        };
        let target = dialer::SinkTarget {
            name: "east".into(),
            group: "east".into(),
            endpoint: meshhub_mcp::dial::DialTarget::plaintext(
                Endpoint::from_shared(format!("http://{agent}")).unwrap(),
            ),
            reconnect: Default::default(),
            config: Arc::new(SourceConfig::default()),
            max_message_bytes: MAX,
            replica: None,
        };
        let reader: SnapshotCache = hub.writer.reader();
        tokio::spawn(dialer::run(
            target,
            reader,
            hub.ledger.clone(),
            hub.shutdown.clone(),
        ));
        hub
    }

    /// Publishes a new snapshot of group `east`.
    pub fn publish(&self, s: Arc<Snapshot>) {
        self.writer.set("east", s);
    }

    /// The pushing stream's view of one collection.
    pub fn collection(&self, collection: &str) -> Option<CollectionStatus> {
        peer(&self.ledger, Role::Source).and_then(|p| p.collections.get(collection).cloned())
    }

    /// Whether the agent ACKed `version` of `collection`, and nothing is
    /// pending.
    pub fn acked(&self, collection: &str, version: &str) -> bool {
        self.collection(collection).is_some_and(|c| {
            c.state == SyncState::Synced && c.acked.is_some_and(|a| a.version == version)
        })
    }
}

impl Drop for PushHub {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A local consumer of the agent's re-serve port (as istiod), holding what
/// it received; stops when dropped.
pub struct Consumer {
    /// What it received.
    pub updater: Arc<InMemoryUpdater>,
    shutdown: CancellationToken,
    /// The stream's task: how it ended.
    pub task: tokio::task::JoinHandle<Result<(), meshhub_mcp::transport::DialError>>,
}

impl Consumer {
    /// Subscribes to `collections` at `agent`.
    pub fn connect(agent: SocketAddr, collections: &[&str]) -> Self {
        let target = SourceTarget {
            name: "agent".into(),
            endpoint: meshhub_mcp::dial::DialTarget::plaintext(
                Endpoint::from_shared(format!("http://{agent}")).unwrap(),
            ),
            config: Arc::new(SinkConfig {
                node: node("istiod"),
                collections: collections
                    .iter()
                    .map(|c| SinkCollection {
                        name: (*c).into(),
                        incremental: false,
                    })
                    .collect(),
            }),
            reconnect: Default::default(),
            max_message_bytes: MAX,
        };
        let updater = Arc::new(InMemoryUpdater::new());
        let shutdown = CancellationToken::new();
        let task = {
            let updater = updater.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let record = Ledger::new().register(Role::Sink, "agent", "");
                connect_once(&target, &*updater, &record, &shutdown)
                    .await
                    .map(drop)
            })
        };
        Self {
            updater,
            shutdown,
            task,
        }
    }

    /// The names it holds of `collection`.
    pub fn names(&self, collection: &str) -> BTreeSet<String> {
        self.updater.collection(collection).into_keys().collect()
    }

    /// Waits until it holds exactly `want` of `collection`.
    pub async fn wait_for(&self, collection: &str, want: &BTreeSet<String>) {
        eventually(
            &format!("{collection} = {want:?} at the consumer"),
            async || &self.names(collection) == want,
        )
        .await;
    }

    /// Host names of the virtual services it holds.
    pub fn hosts(&self) -> BTreeSet<String> {
        let kinds = KindTable::builtin();
        let kind = kinds.by_collection(VS).unwrap();
        self.updater
            .collection(VS)
            .values()
            .map(|r| {
                let o = meshhub_proto::transcode::resource_to_object(kind, r).unwrap();
                o.spec().unwrap()["hosts"][0].as_str().unwrap().to_owned()
            })
            .collect()
    }

    /// Waits until it holds `n` virtual services, every host tagged `tag`.
    pub async fn wait_for_tag(&self, tag: &str, n: usize) {
        eventually(
            &format!("{n} services tagged {tag} at the consumer"),
            async || {
                let hosts = self.hosts();
                hosts.len() == n && hosts.iter().all(|h| h.contains(&format!("-{tag}.")))
            },
        )
        .await;
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

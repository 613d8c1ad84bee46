//! The agent over real gRPC on loopback: a hub pushes (or the agent pulls)
//! Bookinfo; the agent validates, ACKs, persists and re-serves it; bad
//! resources are NACKed by name with the last good state kept; a restarted
//! agent serves its persisted state with no hub; a corrupt file is skipped.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use meshhub_mcp::cache::{self, SnapshotCache, SnapshotWriter};
use meshhub_mcp::group::SingleGroup;
use meshhub_mcp::ledger::{Ledger, PeerStatus, Role, SyncState};
use meshhub_mcp::sink::client::{SourceTarget, connect_once};
use meshhub_mcp::sink::{InMemoryUpdater, SinkCollection, SinkConfig};
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use meshhub_mcp::source::server::{Shared, SourceServer};
use meshhub_mcp::source::{SourceConfig, dialer};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::{Metadata, Resource, SinkNode};
use meshhub_proto::object::Object;
use meshhub_proto::transcode::{object_to_resource, parse_yaml};
use meshhub_sink_agent::app::Agent;
use meshhub_sink_agent::config::{Config, Mode};
use meshhub_sink_agent::store::{self, Origin};
use prost::Message as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::{Endpoint, Server};

const VS: &str = "istio/networking/v1alpha3/virtualservices";
const DR: &str = "istio/networking/v1alpha3/destinationrules";
const GW: &str = "istio/networking/v1alpha3/gateways";
const DEADLINE: Duration = Duration::from_secs(15);
const MAX: usize = 16 * 1024 * 1024;
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/istio");

// ---------------------------------------------------------------- fixtures

/// Bookinfo objects of one fixture file, placed in namespace `bookinfo`.
fn bookinfo(file: &str) -> Vec<Object> {
    let path = format!("{FIXTURES}/bookinfo/{file}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    parse_yaml(&text)
        .into_iter()
        .map(|o| {
            let mut o = o.unwrap();
            o.metadata.namespace = Some("bookinfo".into());
            o
        })
        .collect()
}

/// Encodes objects as the hub does (once, through the kind table).
fn encode(objects: &[Object]) -> BTreeMap<String, Vec<EncodedResource>> {
    let kinds = KindTable::builtin();
    let mut out: BTreeMap<String, Vec<EncodedResource>> = BTreeMap::new();
    for o in objects {
        let kind = kinds.by_api_version(&o.api_version, &o.kind).unwrap();
        let r = object_to_resource(kind, o).unwrap();
        out.entry(kind.collection().to_owned())
            .or_default()
            .push(encoded(r));
    }
    out
}

fn encoded(r: Resource) -> EncodedResource {
    let meta = r.metadata.clone().unwrap();
    EncodedResource {
        name: meta.name.into(),
        version: meta.version.into(),
        encoded: Bytes::from(r.encode_to_vec()),
    }
}

fn snapshot(collections: BTreeMap<String, Vec<EncodedResource>>) -> Arc<Snapshot> {
    let mut s = Snapshot::new();
    for (c, rs) in collections {
        s.insert(c, Arc::new(CollectionSnapshot::new(rs)));
    }
    Arc::new(s)
}

/// Virtual services, destination rules and the gateway of Bookinfo.
fn bookinfo_state() -> BTreeMap<String, Vec<EncodedResource>> {
    let mut objects = bookinfo("virtual-service-all-v1.yaml");
    objects.extend(bookinfo("destination-rule-all.yaml"));
    objects.extend(bookinfo("bookinfo-gateway.yaml"));
    encode(&objects)
}

fn names_of(rs: &[EncodedResource]) -> BTreeSet<String> {
    rs.iter().map(|r| r.name.to_string()).collect()
}

/// A virtual service whose body is something else.
fn bad_resource(name: &str, garbage: bool) -> EncodedResource {
    let body = if garbage {
        prost_types::Any {
            type_url: "type.googleapis.com/istio.networking.v1alpha3.VirtualService".into(),
            value: vec![0xff, 0xff, 0xff, 0xff, 0x0f],
        }
    } else {
        prost_types::Any {
            type_url: "type.googleapis.com/istio.networking.v1alpha3.DestinationRule".into(),
            value: vec![],
        }
    };
    encoded(Resource {
        metadata: Some(Metadata {
            name: name.into(),
            version: "bad-1".into(),
            ..Default::default()
        }),
        body: Some(body),
    })
}

// ---------------------------------------------------------------- harness

fn config(data: &Path, mode: Mode) -> Config {
    Config {
        cluster: "east".into(),
        data_dir: data.to_owned(),
        mode,
        grpc_addr: "127.0.0.1:0".parse().unwrap(),
        grpc_tls: None,
        insecure: false,
        sink_allowed_identities: None,
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        admin_token_file: None,
        collections: KindTable::builtin()
            .iter()
            .map(|k| k.collection().to_owned())
            .collect(),
        max_message_bytes: MAX,
        limits: meshhub_mcp::limits::Limits {
            max_message_bytes: MAX,
            ..Default::default()
        },
        incremental: false,
        shutdown_grace: Duration::from_secs(5),
        apply: None,
    }
}

fn push() -> Mode {
    Mode::Push {
        listen: "127.0.0.1:0".parse().unwrap(),
        tls: None,
    }
}

/// A hub that dials the agent's ResourceSink and pushes one group.
struct PushHub {
    writer: SnapshotWriter,
    ledger: Ledger,
    shutdown: CancellationToken,
}

impl PushHub {
    fn new(initial: Arc<Snapshot>) -> Self {
        let (writer, _) = cache::new();
        writer.set("east", initial);
        Self {
            writer,
            ledger: Ledger::new(),
            shutdown: CancellationToken::new(),
        }
    }

    fn dial(&self, agent: SocketAddr) {
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
        let reader: SnapshotCache = self.writer.reader();
        tokio::spawn(dialer::run(
            target,
            reader,
            self.ledger.clone(),
            self.shutdown.clone(),
        ));
    }

    fn publish(&self, s: Arc<Snapshot>) {
        self.writer.set("east", s);
    }

    /// The pushing stream's view of one collection.
    fn collection(&self, collection: &str) -> Option<meshhub_mcp::ledger::CollectionStatus> {
        peer(&self.ledger, Role::Source).and_then(|p| p.collections.get(collection).cloned())
    }
}

impl Drop for PushHub {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn peer(ledger: &Ledger, role: Role) -> Option<PeerStatus> {
    ledger
        .view()
        .into_iter()
        .find(|p| p.role == role && p.connected)
}

/// A hub serving ResourceSource (pull mode).
struct SourceHub {
    addr: SocketAddr,
    writer: SnapshotWriter,
    ledger: Ledger,
    shutdown: CancellationToken,
}

async fn source_hub(initial: Arc<Snapshot>) -> SourceHub {
    let (writer, cache) = cache::new();
    writer.set("hub", initial);
    let ledger = Ledger::new();
    let shutdown = CancellationToken::new();
    let shared = Shared {
        cache,
        groups: Arc::new(SingleGroup("hub".into())),
        ledger: ledger.clone(),
        config: Arc::new(SourceConfig::default()),
        shutdown: shutdown.clone(),
        tasks: TaskTracker::new(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = SourceServer::new(shared).into_service(MAX);
    let stop = shutdown.clone();
    tokio::spawn(async move {
        Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stop.cancelled_owned())
            .await
            .unwrap();
    });
    SourceHub {
        addr,
        writer,
        ledger,
        shutdown,
    }
}

/// A local consumer of the agent's re-serve port.
struct Consumer {
    updater: Arc<InMemoryUpdater>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

impl Consumer {
    fn connect(agent: SocketAddr, collections: &[&str]) -> Self {
        let target = SourceTarget {
            name: "agent".into(),
            endpoint: meshhub_mcp::dial::DialTarget::plaintext(
                Endpoint::from_shared(format!("http://{agent}")).unwrap(),
            ),
            config: Arc::new(SinkConfig {
                node: SinkNode {
                    id: "istiod".into(),
                    annotations: HashMap::new(),
                },
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
                let ledger = Ledger::new();
                let record = ledger.register(Role::Sink, "agent", "");
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

    fn names(&self, collection: &str) -> BTreeSet<String> {
        self.updater.collection(collection).into_keys().collect()
    }

    async fn wait_for(&self, collection: &str, want: &BTreeSet<String>) {
        eventually(&format!("{collection} = {want:?} at the consumer"), || {
            &self.names(collection) == want
        })
        .await;
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn acked(hub: &PushHub, collection: &str, version: &str) -> bool {
    hub.collection(collection).is_some_and(|c| {
        c.state == SyncState::Synced && c.acked.is_some_and(|a| a.version == version)
    })
}

/// `GET path` on the admin port: status code and body.
async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    tokio::time::timeout(DEADLINE, s.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

// ---------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_is_acked_persisted_and_reserved() {
    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(data.path(), push())).await.unwrap();
    let state = bookinfo_state();
    let want_vs = names_of(&state[VS]);
    let want_dr = names_of(&state[DR]);
    assert!(want_vs.contains("bookinfo/reviews"), "{want_vs:?}");
    let snap = snapshot(state);
    let vs_version = snap.collection(VS).version().to_owned();
    let hub = PushHub::new(snap);
    hub.dial(agent.sink_addr().unwrap());

    eventually("the VirtualService push is ACKed", || {
        acked(&hub, VS, &vs_version)
    })
    .await;
    // The agent announced its cluster name as the SinkNode id.
    let sink = peer(agent.ledger(), Role::Sink).unwrap();
    assert_eq!(sink.node_id, "east");

    // Persisted: the file holds exactly what was ACKed, with the version.
    let file = data
        .path()
        .join("v1/collections/istio%2Fnetworking%2Fv1alpha3%2Fvirtualservices.pb");
    assert!(file.is_file(), "{} missing", file.display());
    let (collection, version, resources) =
        store::load_one(&file, VS, &KindTable::builtin()).unwrap();
    assert_eq!(collection, VS);
    assert_eq!(version, vs_version);
    assert_eq!(names_of(&resources), want_vs);

    // Re-served to local consumers.
    let consumer = Consumer::connect(agent.grpc_addr(), &[VS, DR]);
    consumer.wait_for(VS, &want_vs).await;
    consumer.wait_for(DR, &want_dr).await;
    // The bytes served are the hub's bytes, decoded intact.
    let reviews = &consumer.updater.collection(VS)["bookinfo/reviews"];
    let kinds = KindTable::builtin();
    let obj =
        meshhub_proto::transcode::resource_to_object(kinds.by_collection(VS).unwrap(), reviews)
            .unwrap();
    assert_eq!(obj.metadata.namespace.as_deref(), Some("bookinfo"));

    // Status on the admin port.
    let (code, _) = http_get(agent.admin_addr(), "/readyz").await;
    assert_eq!(code, 200);
    let (code, body) = http_get(agent.admin_addr(), "/status").await;
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["cluster"], "east");
    assert_eq!(status["store"]["collections"][VS]["version"], vs_version);
    assert_eq!(status["store"]["collections"][VS]["origin"], "hub");
    assert_eq!(
        status["store"]["collections"][VS]["resources"],
        want_vs.len()
    );
    let (code, metrics) = http_get(agent.admin_addr(), "/metrics").await;
    assert_eq!(code, 200);
    assert!(metrics.contains("meshhub_agent_changes_total"), "{metrics}");

    drop(consumer);
    drop(hub);
    assert!(agent.shutdown().await, "every task ended within the grace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_resources_are_nacked_by_name_and_the_last_good_state_kept() {
    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(data.path(), push())).await.unwrap();
    let good = bookinfo_state();
    let want_vs = names_of(&good[VS]);
    let snap = snapshot(good.clone());
    let good_version = snap.collection(VS).version().to_owned();
    let hub = PushHub::new(snap);
    hub.dial(agent.sink_addr().unwrap());
    eventually("the good push is ACKed", || acked(&hub, VS, &good_version)).await;
    let consumer = Consumer::connect(agent.grpc_addr(), &[VS]);
    consumer.wait_for(VS, &want_vs).await;
    let file = agent.cache().snapshot("east").unwrap();
    let served_before = file.collection(VS).version().to_owned();

    for (name, garbage, expect) in [
        ("bookinfo/wrong-type", false, "body type"),
        ("bookinfo/garbage", true, "undecodable body"),
    ] {
        let mut bad = good.clone();
        bad.get_mut(VS).unwrap().push(bad_resource(name, garbage));
        let snap = snapshot(bad);
        let bad_version = snap.collection(VS).version().to_owned();
        hub.publish(snap);
        eventually(&format!("the NACK of {name}"), || {
            hub.collection(VS).is_some_and(|c| {
                c.state == SyncState::Nacked
                    && c.nacked.as_ref().is_some_and(|n| n.version == bad_version)
            })
        })
        .await;
        let nack = hub.collection(VS).unwrap().nacked.unwrap();
        assert!(
            nack.message.contains(&format!("VirtualService {name}"))
                && nack.message.contains(expect),
            "NACK names the resource and the cause: {}",
            nack.message
        );
        assert_eq!(nack.code, 3, "INVALID_ARGUMENT");

        // The last good state is kept: served, persisted, in the status.
        let served = agent.cache().snapshot("east").unwrap();
        assert_eq!(served.collection(VS).version(), served_before);
        assert_eq!(consumer.names(VS), want_vs);
        let path = data
            .path()
            .join("v1/collections")
            .join(store::file_name(VS));
        let (_, version, resources) = store::load_one(&path, VS, &KindTable::builtin()).unwrap();
        assert_eq!(version, good_version);
        assert_eq!(names_of(&resources), want_vs);
        let status = agent.status().borrow().clone();
        let info = &status.collections[VS];
        assert_eq!(info.version, good_version);
        assert_eq!(info.resources, want_vs.len());
        let refused = info.refused.as_ref().unwrap();
        assert_eq!(refused.version, bad_version);
        assert!(refused.message.contains(name));
    }

    // A corrected version is delivered and ACKed.
    let mut fixed = good.clone();
    fixed
        .get_mut(VS)
        .unwrap()
        .retain(|r| r.name.as_ref() != "bookinfo/ratings");
    let want_fixed = names_of(&fixed[VS]);
    let snap = snapshot(fixed);
    let fixed_version = snap.collection(VS).version().to_owned();
    hub.publish(snap);
    eventually("the corrected version is ACKed", || {
        acked(&hub, VS, &fixed_version)
    })
    .await;
    consumer.wait_for(VS, &want_fixed).await;
    assert!(agent.status().borrow().collections[VS].origin == Origin::Hub);

    drop(consumer);
    drop(hub);
    assert!(agent.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_serves_its_persisted_state_without_a_hub() {
    let data = tempfile::tempdir().unwrap();
    let state = bookinfo_state();
    let want_vs = names_of(&state[VS]);
    let want_gw = names_of(&state[GW]);
    {
        let agent = Agent::start(config(data.path(), push())).await.unwrap();
        let snap = snapshot(state);
        let (vs, gw) = (
            snap.collection(VS).version().to_owned(),
            snap.collection(GW).version().to_owned(),
        );
        let hub = PushHub::new(snap);
        hub.dial(agent.sink_addr().unwrap());
        eventually("both collections ACKed", || {
            acked(&hub, VS, &vs) && acked(&hub, GW, &gw)
        })
        .await;
        drop(hub);
        assert!(agent.shutdown().await);
    }

    // No hub at all this time (pull mode at an address nobody serves).
    let started = Instant::now();
    let nobody = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", nobody.local_addr().unwrap());
    drop(nobody);
    let agent = Agent::start(config(
        data.path(),
        Mode::Pull {
            hub_url: url,
            tls: None,
        },
    ))
    .await
    .unwrap();
    let consumer = Consumer::connect(agent.grpc_addr(), &[VS, GW]);
    consumer.wait_for(VS, &want_vs).await;
    consumer.wait_for(GW, &want_gw).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(1),
        "persisted state served after {elapsed:?}"
    );
    let status = agent.status().borrow().clone();
    assert!(status.loaded && status.load_errors.is_empty());
    assert_eq!(status.collections[VS].origin, Origin::Disk);

    drop(consumer);
    assert!(agent.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_file_is_skipped_and_the_others_load() {
    let data = tempfile::tempdir().unwrap();
    let state = bookinfo_state();
    let want_vs = names_of(&state[VS]);
    {
        let agent = Agent::start(config(data.path(), push())).await.unwrap();
        let snap = snapshot(state);
        let (vs, dr) = (
            snap.collection(VS).version().to_owned(),
            snap.collection(DR).version().to_owned(),
        );
        let hub = PushHub::new(snap);
        hub.dial(agent.sink_addr().unwrap());
        eventually("both collections ACKed", || {
            acked(&hub, VS, &vs) && acked(&hub, DR, &dr)
        })
        .await;
        drop(hub);
        assert!(agent.shutdown().await);
    }
    let dir = data.path().join("v1/collections");
    let dr_file = dir.join(store::file_name(DR));
    std::fs::write(&dr_file, b"\xff\xff\xff not protobuf").unwrap();
    // A crash in the middle of a write leaves a temp file behind.
    let leftover = dir.join(format!("{}.tmp", store::file_name(GW)));
    std::fs::write(&leftover, b"half").unwrap();

    let agent = Agent::start(config(data.path(), push())).await.unwrap();
    let status = agent.status().borrow().clone();
    assert_eq!(status.load_errors.len(), 1, "{:?}", status.load_errors);
    assert!(
        status.load_errors[0].contains(&dr_file.display().to_string()),
        "the error names the file: {}",
        status.load_errors[0]
    );
    assert!(!status.collections.contains_key(DR));
    assert!(!leftover.exists(), "unfinished writes are cleaned up");
    let consumer = Consumer::connect(agent.grpc_addr(), &[VS, DR]);
    consumer.wait_for(VS, &want_vs).await;
    assert!(consumer.names(DR).is_empty());
    let (code, body) = http_get(agent.admin_addr(), "/status").await;
    assert_eq!(code, 200);
    assert!(body.contains("torn"), "{body}");

    drop(consumer);
    assert!(agent.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_mode_subscribes_as_the_cluster_and_applies_deltas() {
    let data = tempfile::tempdir().unwrap();
    let state = bookinfo_state();
    let hub = source_hub(snapshot(state.clone())).await;
    let mut cfg = config(
        data.path(),
        Mode::Pull {
            hub_url: format!("http://{}", hub.addr),
            tls: None,
        },
    );
    cfg.incremental = true;
    let agent = Agent::start(cfg).await.unwrap();
    let consumer = Consumer::connect(agent.grpc_addr(), &[VS]);
    consumer.wait_for(VS, &names_of(&state[VS])).await;
    // The hub saw the cluster name as the SinkNode id.
    eventually("the hub sees node east", || {
        peer(&hub.ledger, Role::Source).is_some_and(|p| p.node_id == "east")
    })
    .await;

    // One removal and one addition: a delta on the wire, the full result
    // served and persisted.
    let mut next = state.clone();
    let vs = next.get_mut(VS).unwrap();
    vs.retain(|r| r.name.as_ref() != "bookinfo/details");
    vs.extend(
        encode(&bookinfo("virtual-service-ratings-db.yaml"))
            .remove(VS)
            .unwrap(),
    );
    let want = names_of(&next[VS]);
    let snap = snapshot(next);
    let version = snap.collection(VS).version().to_owned();
    hub.writer.set("hub", snap);
    consumer.wait_for(VS, &want).await;
    let (_, persisted_version, resources) = store::load_one(
        &data
            .path()
            .join("v1/collections")
            .join(store::file_name(VS)),
        VS,
        &KindTable::builtin(),
    )
    .unwrap();
    assert_eq!(persisted_version, version);
    assert_eq!(names_of(&resources), want);

    drop(consumer);
    hub.shutdown.cancel();
    assert!(agent.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_agent_on_the_same_data_dir_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(data.path(), push())).await.unwrap();
    let err = Agent::start(config(data.path(), push())).await.unwrap_err();
    assert!(
        store::error_chain(&err).contains("in use"),
        "{}",
        store::error_chain(&err)
    );
    assert!(agent.shutdown().await);
    // Released on shutdown.
    let again = Agent::start(config(data.path(), push())).await.unwrap();
    assert!(again.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams_within_the_grace() {
    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(data.path(), push())).await.unwrap();
    let hub = PushHub::new(snapshot(bookinfo_state()));
    hub.dial(agent.sink_addr().unwrap());
    let mut consumer = Consumer::connect(agent.grpc_addr(), &[VS]);
    eventually("both streams open", || {
        peer(agent.ledger(), Role::Sink).is_some() && peer(agent.ledger(), Role::Source).is_some()
    })
    .await;
    let started = Instant::now();
    assert!(agent.shutdown().await, "every stream ended");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The consumer's stream was ended by the agent.
    let ended = tokio::time::timeout(DEADLINE, &mut consumer.task).await;
    assert!(ended.is_ok(), "consumer stream still open");
    drop(hub);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_ads_and_grpc_health_serve_what_was_received() {
    use meshhub_proto::ads::{DiscoveryRequest, Node, client::AggregatedDiscoveryServiceClient};
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(data.path(), push())).await.unwrap();
    let channel = Endpoint::from_shared(format!("http://{}", agent.grpc_addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, ServingStatus::Serving as i32);

    let state = bookinfo_state();
    let want_vs = names_of(&state[VS]);
    let snap = snapshot(state);
    let version = snap.collection(VS).version().to_owned();
    let hub = PushHub::new(snap);
    hub.dial(agent.sink_addr().unwrap());
    eventually("the push is ACKed", || acked(&hub, VS, &version)).await;

    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(DiscoveryRequest {
        node: Some(Node {
            id: "sidecar~10.0.0.1~istiod-0.istio-system~istio-system.svc.cluster.local".into(),
            ..Default::default()
        }),
        type_url: "networking.istio.io/v1/VirtualService".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut stream = AggregatedDiscoveryServiceClient::new(channel)
        .stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let response = tokio::time::timeout(DEADLINE, stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(response.type_url, "networking.istio.io/v1/VirtualService");
    let names: BTreeSet<String> = response
        .resources
        .iter()
        .map(|a| {
            Resource::decode(a.value.as_slice())
                .unwrap()
                .metadata
                .unwrap()
                .name
        })
        .collect();
    assert_eq!(names, want_vs);

    // Delta ADS is served beside it: the same resources, each named with its
    // version.
    let (delta_tx, delta_rx) = tokio::sync::mpsc::channel(4);
    delta_tx
        .send(meshhub_proto::ads::DeltaDiscoveryRequest {
            node: Some(Node {
                id: "sidecar~10.0.0.2~client.default~default.svc.cluster.local".into(),
                ..Default::default()
            }),
            type_url: "networking.istio.io/v1/VirtualService".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut delta = AggregatedDiscoveryServiceClient::new(
        Endpoint::from_shared(format!("http://{}", agent.grpc_addr()))
            .unwrap()
            .connect()
            .await
            .unwrap(),
    )
    .delta_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(delta_rx))
    .await
    .unwrap()
    .into_inner();
    let response = tokio::time::timeout(DEADLINE, delta.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(response.type_url, "networking.istio.io/v1/VirtualService");
    let mut delta_names = BTreeSet::new();
    for r in &response.resources {
        let mcp = Resource::decode(r.resource.as_ref().unwrap().value.as_slice()).unwrap();
        let meta = mcp.metadata.unwrap();
        assert_eq!((&r.name, &r.version), (&meta.name, &meta.version));
        delta_names.insert(r.name.clone());
    }
    assert_eq!(delta_names, want_vs);

    drop(delta);
    drop(delta_tx);
    drop(stream);
    drop(tx);
    drop(hub);
    assert!(agent.shutdown().await);
}

//! The engine over real gRPC on loopback: every role, ACK/NACK rules,
//! dial-out with the trigger probe, reconnect with a delta, ADS, shutdown.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use meshhub_mcp::ads::AdsServer;
use meshhub_mcp::cache::{self, SnapshotCache, SnapshotWriter};
use meshhub_mcp::group::{Consumer, GroupError, GroupIndex};
use meshhub_mcp::ledger::{Ledger, SyncState};
use meshhub_mcp::sink::server::SinkServer;
use meshhub_mcp::sink::{InMemoryUpdater, SinkCollection, SinkConfig};
use meshhub_mcp::snapshot::{EncodedResource, Served, Snapshot};
use meshhub_mcp::source::server::SourceServer;
use meshhub_mcp::source::{SourceConfig, dialer};
use meshhub_proto::RpcStatus;
use meshhub_proto::mcp::{RequestResources, Resource, SinkNode};
use meshhub_testkit::mcp::{self, Subscription, names};
use meshhub_testkit::objects::{DR, VS, any};
use meshhub_testkit::{DEADLINE, eventually};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::{Endpoint, Server};

use crate::support::{self, MAX, encoded};

/// Groups by SinkNode id: "east"/"west" are clusters, "" is default, the
/// rest are refused.
struct ByNode;
impl GroupIndex for ByNode {
    fn group(&self, c: &Consumer) -> Result<cache::Group, GroupError> {
        match c.node.id.as_str() {
            "" => Ok("default".into()),
            "east" | "west" => Ok(c.node.id.as_str().into()),
            // An istiod-style proxy id names no cluster.
            id if id.contains('~') => Ok("default".into()),
            other => Err(GroupError::new(format!("unknown cluster {other:?}"))),
        }
    }
}

/// A resource `name@version` with an empty body.
fn resource(name: &str, version: &str) -> EncodedResource {
    encoded(
        name,
        version,
        Some(any("type.googleapis.com/google.protobuf.Empty", vec![])),
    )
}

fn snapshot(vs: &[(&str, &str)], dr: &[(&str, &str)]) -> Arc<Snapshot> {
    let c = |items: &[(&str, &str)]| items.iter().map(|(n, v)| resource(n, v)).collect();
    support::snapshot(vec![(VS, c(vs)), (DR, c(dr))])
}

struct Hub {
    addr: SocketAddr,
    writer: SnapshotWriter,
    ledger: Ledger,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<()>,
}

async fn start_hub() -> Hub {
    let (writer, shared) = support::shared(ByNode, SourceConfig::default());
    let (ledger, shutdown) = (shared.ledger.clone(), shared.shutdown.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let types: meshhub_mcp::ads::TypeMap = Arc::new(|t: &str| {
        (t == "networking.istio.io/v1/VirtualService"
            || t == "networking.istio.io/v1alpha3/VirtualService")
            .then(|| Served::Collection(VS.to_owned()))
    });
    let source = SourceServer::new(shared.clone()).into_service(MAX);
    let ads = AdsServer::new(shared.clone(), types).into_service(MAX);
    let stop = shutdown.clone();
    let server = tokio::spawn(async move {
        Server::builder()
            .add_service(source)
            .add_service(ads)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stop.cancelled_owned())
            .await
            .unwrap();
    });
    Hub {
        addr,
        writer,
        ledger,
        shutdown,
        server,
    }
}

/// A hand-driven sink of virtual services as node `node`: we send each
/// request ourselves.
async fn raw_sink(addr: SocketAddr, node: &str) -> Result<Subscription, tonic::Status> {
    Subscription::connect(addr, VS, Some(mcp::node(node))).await
}

/// A request for `collection`: a subscription (no nonce), an ACK of
/// `nonce`, or with `nack` a NACK of it.
fn request(collection: &str, nonce: &str, nack: Option<&str>) -> RequestResources {
    RequestResources {
        collection: collection.into(),
        response_nonce: nonce.into(),
        error_detail: nack.map(|m| RpcStatus {
            code: 3,
            message: m.into(),
            details: vec![],
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn serves_every_collection_acks_and_pushes_changes() {
    let hub = start_hub().await;
    hub.writer
        .set("default", snapshot(&[("ns/a", "1")], &[("ns/d", "1")]));
    let mut sink = raw_sink(hub.addr, "").await.unwrap();
    sink.send(request("unknown/collection", "", None)).await;
    sink.send(request(DR, "", None)).await;
    let mut got = HashMap::new();
    for _ in 0..3 {
        let r = sink.recv().await;
        got.insert(r.collection.clone(), r);
    }
    assert_eq!(names(&got[VS]), ["ns/a"]);
    assert_eq!(names(&got[DR]), ["ns/d"]);
    let unknown = &got["unknown/collection"];
    assert!(unknown.resources.is_empty() && !unknown.system_version_info.is_empty());
    let nonces: std::collections::HashSet<_> = got.values().map(|r| r.nonce.clone()).collect();
    assert_eq!(nonces.len(), 3, "nonces are unique");
    for r in got.values() {
        sink.send(request(&r.collection, &r.nonce, None)).await;
    }
    // Only VS changes: only VS is pushed.
    hub.writer.set(
        "default",
        snapshot(&[("ns/a", "2"), ("ns/b", "1")], &[("ns/d", "1")]),
    );
    let r = sink.recv().await;
    assert_eq!(r.collection, VS);
    assert_eq!(names(&r), ["ns/a", "ns/b"]);
    sink.send(request(VS, &r.nonce, None)).await;
    // Every stream watches its whole group: a publish that leaves DR's
    // version alone must still send nothing for DR (the next response is
    // the next VS change, not a DR resend).
    hub.writer.set(
        "default",
        snapshot(&[("ns/a", "3"), ("ns/b", "1")], &[("ns/d", "1")]),
    );
    let r = sink.recv().await;
    assert_eq!(r.collection, VS, "only the changed collection is sent");
    assert_eq!(names(&r), ["ns/a", "ns/b"]);
    sink.send(request(VS, &r.nonce, None)).await;
    eventually("the ledger to show VS synced", async || {
        hub.ledger.view().iter().any(|p| {
            p.connected
                && p.collections.get(VS).is_some_and(|c| {
                    c.state == SyncState::Synced
                        && c.acked.as_ref().unwrap().version == r.system_version_info
                })
        })
    })
    .await;
    hub.shutdown.cancel();
}

#[tokio::test]
async fn nack_is_recorded_and_never_resent_until_the_version_changes() {
    let hub = start_hub().await;
    hub.writer
        .set("default", snapshot(&[("ns/a", "1")], &[("ns/d", "1")]));
    let mut sink = raw_sink(hub.addr, "").await.unwrap();
    sink.send(request(DR, "", None)).await;
    let mut first = HashMap::new();
    for _ in 0..2 {
        let r = sink.recv().await;
        first.insert(r.collection.clone(), r);
    }
    sink.send(request(VS, &first[VS].nonce, Some("ns/a: bad host")))
        .await;
    sink.send(request(DR, &first[DR].nonce, None)).await;
    // A stale ACK is ignored.
    sink.send(request(VS, "12345", None)).await;
    // Republish VS unchanged and change DR: the next message must be DR,
    // which proves VS was not resent.
    hub.writer
        .set("default", snapshot(&[("ns/a", "1")], &[("ns/d", "2")]));
    let r = sink.recv().await;
    assert_eq!(r.collection, DR);
    sink.send(request(DR, &r.nonce, None)).await;
    eventually("the NACK in the ledger", async || {
        hub.ledger.view().iter().any(|p| {
            p.collections.get(VS).is_some_and(|c| {
                c.state == SyncState::Nacked
                    && c.stale == 1
                    && c.nacked
                        .as_ref()
                        .is_some_and(|n| n.message == "ns/a: bad host" && n.code == 3)
            })
        })
    })
    .await;
    // A new VS version is delivered.
    hub.writer
        .set("default", snapshot(&[("ns/a", "fixed")], &[("ns/d", "2")]));
    let r = sink.recv().await;
    assert_eq!(r.collection, VS);
    assert_eq!(r.resources[0].metadata.as_ref().unwrap().version, "fixed");
    hub.shutdown.cancel();
}

#[tokio::test]
async fn unknown_cluster_is_refused_with_a_reason_and_groups_are_separate() {
    let hub = start_hub().await;
    hub.writer
        .set("east", snapshot(&[("ns/east-only", "1")], &[]));
    hub.writer.set("default", snapshot(&[("ns/a", "1")], &[]));
    let mut east = raw_sink(hub.addr, "east").await.unwrap();
    assert_eq!(names(&east.recv().await), ["ns/east-only"]);
    let mut bad = raw_sink(hub.addr, "north").await.unwrap();
    let err = tokio::time::timeout(DEADLINE, bad.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(err.message().contains("north"), "{}", err.message());
    hub.shutdown.cancel();
}

#[tokio::test]
async fn shutdown_ends_open_streams() {
    let hub = start_hub().await;
    hub.writer.set("default", snapshot(&[("ns/a", "1")], &[]));
    let mut sink = raw_sink(hub.addr, "").await.unwrap();
    sink.recv().await;
    hub.shutdown.cancel();
    let end = tokio::time::timeout(DEADLINE, sink.message())
        .await
        .expect("stream ends");
    match end {
        Err(status) => assert_eq!(status.code(), tonic::Code::Unavailable),
        Ok(None) => {}
        Ok(Some(m)) => panic!("unexpected message {m:?}"),
    }
    tokio::time::timeout(DEADLINE, hub.server)
        .await
        .expect("server stops")
        .unwrap();
}

#[tokio::test]
async fn dial_out_pushes_to_a_sink_server_after_the_trigger_probe() {
    let hub = start_hub().await;
    hub.writer
        .set("east", snapshot(&[("ns/a", "1")], &[("ns/d", "1")]));
    // The agent side: a ResourceSink server with an in-memory updater.
    let (updater, mut changes) = InMemoryUpdater::with_changes();
    let updater = Arc::new(updater);
    let agent_ledger = Ledger::new();
    let agent_stop = CancellationToken::new();
    let sink_config = Arc::new(SinkConfig {
        node: SinkNode {
            id: "east".into(),
            annotations: HashMap::new(),
        },
        collections: vec![
            SinkCollection {
                name: VS.into(),
                incremental: false,
            },
            SinkCollection {
                name: DR.into(),
                incremental: true,
            },
        ],
    });
    let service = SinkServer::new(
        updater.clone(),
        sink_config,
        agent_ledger.clone(),
        agent_stop.clone(),
        TaskTracker::new(),
    )
    .into_service(MAX);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent_addr = listener.local_addr().unwrap();
    let stop = agent_stop.clone();
    tokio::spawn(async move {
        Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stop.cancelled_owned())
            .await
            .unwrap();
    });
    let target = dialer::SinkTarget {
        name: "east".into(),
        group: "east".into(),
        endpoint: meshhub_mcp::dial::DialTarget::plaintext(
            Endpoint::from_shared(format!("http://{agent_addr}")).unwrap(),
        ),
        reconnect: Default::default(),
        config: Arc::new(SourceConfig::default()),
        max_message_bytes: MAX,
        replica: Some("hub-0".into()),
    };
    let reader: SnapshotCache = hub.writer.reader();
    tokio::spawn(dialer::run(
        target,
        reader,
        hub.ledger.clone(),
        hub.shutdown.clone(),
    ));
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 2 {
        let c = tokio::time::timeout(DEADLINE, changes.recv())
            .await
            .unwrap()
            .unwrap();
        seen.insert(c.collection);
    }
    assert_eq!(updater.collection(VS).keys().collect::<Vec<_>>(), ["ns/a"]);
    // The agent knows which hub replica pushes (`meshhub-replica`).
    let pushers: Vec<Option<String>> = agent_ledger
        .view()
        .into_iter()
        .filter(|p| p.connected)
        .map(|p| p.replica)
        .collect();
    assert_eq!(pushers, [Some("hub-0".to_owned())]);
    // The probe was NACKed by the agent and dropped by the hub: no error is
    // recorded for it, and both real collections become SYNCED.
    eventually("both collections synced at the hub", async || {
        hub.ledger.view().iter().any(|p| {
            p.peer == "east"
                && p.connected
                && p.collections.len() == 2
                && p.collections.values().all(|c| c.state == SyncState::Synced)
        })
    })
    .await;
    // A change reaches the agent as a delta for the incremental collection.
    hub.writer
        .set("east", snapshot(&[("ns/a", "1")], &[("ns/e", "1")]));
    let c = tokio::time::timeout(DEADLINE, changes.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.collection, DR);
    assert!(c.incremental);
    assert_eq!(c.removed, ["ns/d"]);
    assert_eq!(updater.collection(DR).keys().collect::<Vec<_>>(), ["ns/e"]);
    hub.shutdown.cancel();
    agent_stop.cancel();
}

#[tokio::test]
async fn sink_client_reconnects_with_a_correct_delta() {
    use meshhub_mcp::sink::client::{SourceTarget, connect_once};
    let hub = start_hub().await;
    hub.writer
        .set("default", snapshot(&[("ns/a", "1"), ("ns/b", "1")], &[]));
    let (updater, mut changes) = InMemoryUpdater::with_changes();
    let target = SourceTarget {
        name: "hub".into(),
        endpoint: meshhub_mcp::dial::DialTarget::plaintext(
            Endpoint::from_shared(format!("http://{}", hub.addr)).unwrap(),
        ),
        config: Arc::new(SinkConfig {
            node: SinkNode::default(),
            collections: vec![SinkCollection {
                name: VS.into(),
                incremental: true,
            }],
        }),
        reconnect: Default::default(),
        max_message_bytes: MAX,
    };
    let ledger = Ledger::new();
    let record = ledger.register(meshhub_mcp::ledger::Role::Sink, "hub", "");
    let stop = CancellationToken::new();
    let run = {
        let (t, u, s) = (target.clone(), updater.clone(), stop.clone());
        tokio::spawn(async move {
            connect_once(
                &t,
                &u,
                &ledger.register(meshhub_mcp::ledger::Role::Sink, "hub", ""),
                &s,
            )
            .await
        })
    };
    let first = tokio::time::timeout(DEADLINE, changes.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        !first.incremental,
        "first response without held state is full"
    );
    stop.cancel();
    run.await.unwrap().unwrap();
    // While away: b deleted, c added.
    hub.writer
        .set("default", snapshot(&[("ns/a", "1"), ("ns/c", "1")], &[]));
    let stop = CancellationToken::new();
    let (t, u, s) = (target.clone(), updater.clone(), stop.clone());
    let run = tokio::spawn(async move { connect_once(&t, &u, &record, &s).await });
    let delta = tokio::time::timeout(DEADLINE, changes.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(delta.incremental);
    assert_eq!(delta.removed, ["ns/b"]);
    let upserts: Vec<_> = delta
        .resources
        .iter()
        .map(|r| r.metadata.as_ref().unwrap().name.clone())
        .collect();
    assert_eq!(upserts, ["ns/c"], "ns/a was held already");
    assert_eq!(
        updater.collection(VS).keys().collect::<Vec<_>>(),
        ["ns/a", "ns/c"]
    );
    stop.cancel();
    run.await.unwrap().unwrap();
    hub.shutdown.cancel();
}

#[tokio::test]
async fn ads_answers_the_requested_type_url_with_mcp_resources() {
    use meshhub_proto::ads::{DiscoveryRequest, Node, client::AggregatedDiscoveryServiceClient};
    let hub = start_hub().await;
    hub.writer.set("default", snapshot(&[("ns/a", "1")], &[]));
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{}", hub.addr))
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(16);
    // As istiod: MeshConfig first, every request with a timestamp nonce.
    let req = |t: &str, nonce: &str| DiscoveryRequest {
        node: Some(Node {
            id: "sidecar~10.0.0.1~istiod-0.istio-system~istio-system.svc.cluster.local".into(),
            ..Default::default()
        }),
        type_url: t.into(),
        response_nonce: nonce.into(),
        ..Default::default()
    };
    tx.send(req("core/v1alpha1/MeshConfig", "2026-11-22 04:00:00"))
        .await
        .unwrap();
    tx.send(req(
        "networking.istio.io/v1/VirtualService",
        "2026-11-22 04:00:00",
    ))
    .await
    .unwrap();
    tx.send(req(
        "telemetry.istio.io/v1/Telemetry",
        "2026-11-22 04:00:00",
    ))
    .await
    .unwrap();
    let mut rx = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut got = HashMap::new();
    for _ in 0..2 {
        let r = tokio::time::timeout(DEADLINE, rx.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        got.insert(r.type_url.clone(), r);
    }
    assert!(!got.contains_key("core/v1alpha1/MeshConfig"));
    let vs = &got["networking.istio.io/v1/VirtualService"];
    assert_eq!(vs.resources.len(), 1);
    assert_eq!(
        vs.resources[0].type_url,
        "type.googleapis.com/istio.mcp.v1alpha1.Resource"
    );
    let r = Resource::decode(vs.resources[0].value.as_slice()).unwrap();
    assert_eq!(r.metadata.unwrap().name, "ns/a");
    let tel = &got["telemetry.istio.io/v1/Telemetry"];
    assert!(
        tel.resources.is_empty() && !tel.version_info.is_empty(),
        "unknown types are answered empty"
    );
    // ACK as istiod does, then a change arrives.
    tx.send(DiscoveryRequest {
        version_info: vs.version_info.clone(),
        ..req("networking.istio.io/v1/VirtualService", &vs.nonce)
    })
    .await
    .unwrap();
    hub.writer.set("default", snapshot(&[("ns/a", "2")], &[]));
    let r = tokio::time::timeout(DEADLINE, rx.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(r.type_url, "networking.istio.io/v1/VirtualService");
    assert_ne!(r.version_info, vs.version_info);
    hub.shutdown.cancel();
}

#[tokio::test]
async fn snapshots_published_while_unacked_coalesce_into_the_newest() {
    let hub = start_hub().await;
    hub.writer.set("default", snapshot(&[("ns/a", "1")], &[]));
    let mut sink = raw_sink(hub.addr, "").await.unwrap();
    let first = sink.recv().await;
    assert_eq!(first.resources[0].metadata.as_ref().unwrap().version, "1");
    // Two versions while the first is un-ACKed: neither is sent yet.
    hub.writer.set("default", snapshot(&[("ns/a", "2")], &[]));
    hub.writer.set("default", snapshot(&[("ns/a", "3")], &[]));
    sink.send(request(VS, &first.nonce, None)).await;
    // The next message is the newest; version 2 was never sent.
    let next = sink.recv().await;
    assert_eq!(next.resources[0].metadata.as_ref().unwrap().version, "3");
    sink.send(request(VS, &next.nonce, None)).await;
    eventually("one SYNCED VS after two responses", async || {
        hub.ledger.view().iter().any(|p| {
            p.collections
                .get(VS)
                .is_some_and(|c| c.state == SyncState::Synced && c.acks == 2)
        })
    })
    .await;
    hub.shutdown.cancel();
}

/// Two hub replicas dialing one agent at once (a shard's handover): with
/// one source at a time, the newer stream replaces the older (which ends
/// with ABORTED and is recorded as superseded); the older replica's
/// dialer reconnecting replaces it back while it still dials; once it
/// stops, the remaining replica's stream is the only one and the agent
/// holds what that replica pushes.
#[tokio::test]
async fn with_one_source_at_a_time_the_newer_hub_stream_replaces_the_older() {
    let (a, b) = (start_hub().await, start_hub().await);
    a.writer.set("east", snapshot(&[("ns/old", "1")], &[]));
    b.writer.set("east", snapshot(&[("ns/new", "1")], &[]));
    let updater = Arc::new(InMemoryUpdater::default());
    let agent_ledger = Ledger::new();
    let agent_stop = CancellationToken::new();
    let service = SinkServer::new(
        updater.clone(),
        Arc::new(SinkConfig {
            node: SinkNode {
                id: "east".into(),
                annotations: HashMap::new(),
            },
            collections: vec![SinkCollection {
                name: VS.into(),
                incremental: false,
            }],
        }),
        agent_ledger.clone(),
        agent_stop.clone(),
        TaskTracker::new(),
    )
    .one_source_at_a_time()
    .into_service(MAX);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent_addr = listener.local_addr().unwrap();
    let stop = agent_stop.clone();
    tokio::spawn(async move {
        Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stop.cancelled_owned())
            .await
            .unwrap();
    });
    let dial = |hub: &Hub, replica: &str, stop: CancellationToken| {
        let target = dialer::SinkTarget {
            name: "east".into(),
            group: "east".into(),
            endpoint: meshhub_mcp::dial::DialTarget::plaintext(
                Endpoint::from_shared(format!("http://{agent_addr}")).unwrap(),
            ),
            reconnect: meshhub_mcp::reconnect::ReconnectPolicy {
                initial: std::time::Duration::from_millis(50),
                max: std::time::Duration::from_millis(200),
                ..Default::default()
            },
            config: Arc::new(SourceConfig::default()),
            max_message_bytes: MAX,
            replica: Some(replica.into()),
        };
        tokio::spawn(dialer::run(
            target,
            hub.writer.reader(),
            hub.ledger.clone(),
            stop,
        ))
    };
    let live = |ledger: &Ledger| -> Vec<Option<String>> {
        ledger
            .view()
            .into_iter()
            .filter(|p| p.connected)
            .map(|p| p.replica)
            .collect()
    };
    let holds = |name: &str| updater.collection(VS).keys().any(|k| k == name);

    let stop_a = CancellationToken::new();
    let dialer_a = dial(&a, "hub-a", stop_a.clone());
    eventually("hub-a's content held", async || holds("ns/old")).await;
    let dialer_b = dial(&b, "hub-b", b.shutdown.child_token());
    // hub-b's stream replaces hub-a's: recorded as superseded.
    eventually("hub-a's stream superseded", async || {
        agent_ledger.view().iter().any(|p| {
            p.replica.as_deref() == Some("hub-a")
                && !p.connected
                && p.last_error.as_deref() == Some(meshhub_mcp::sink::server::SUPERSEDED)
        })
    })
    .await;
    // hub-a stops dialing (it lost the shard): hub-b alone, its content.
    stop_a.cancel();
    dialer_a.await.unwrap();
    eventually("hub-b alone, its content held", async || {
        live(&agent_ledger) == [Some("hub-b".to_owned())] && holds("ns/new") && !holds("ns/old")
    })
    .await;
    // At no time were two streams served: each new one ended the other.
    let streams = agent_ledger.view();
    for (i, x) in streams.iter().enumerate() {
        for y in &streams[i + 1..] {
            let (Some(xs), Some(ys)) = (x.connected_since, y.connected_since) else {
                continue;
            };
            let x_end = x.disconnected_at.map(|t| t.0);
            let y_end = y.disconnected_at.map(|t| t.0);
            let overlap_start = xs.0.max(ys.0);
            let overlap_end = match (x_end, y_end) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (Some(a), None) | (None, Some(a)) => Some(a),
                (None, None) => None,
            };
            let overlap = overlap_end
                .map(|e| e.duration_since(overlap_start).unwrap_or_default())
                .expect("at most one stream open");
            assert!(
                overlap < std::time::Duration::from_millis(100),
                "two streams served for {overlap:?}"
            );
        }
    }
    b.shutdown.cancel();
    a.shutdown.cancel();
    dialer_b.await.unwrap();
    agent_stop.cancel();
}

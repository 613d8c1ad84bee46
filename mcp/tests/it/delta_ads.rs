//! Delta ADS (`DeltaAggregatedResources`) over real gRPC on loopback, with
//! a client that decodes with envoy-types' generated (real Envoy) schema.
//!
//! No sleeps: every wait is a response awaited under a deadline. Where a
//! test shows that something is *not* sent, it sends a later request whose
//! answer must come first (the stream answers in order).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use meshhub_mcp::ads::AdsServer;
use meshhub_mcp::cache::SnapshotWriter;
use meshhub_mcp::group::SingleGroup;
use meshhub_mcp::ledger::{Ledger, PeerStatus, SyncState};
use meshhub_mcp::snapshot::{EncodedResource, Served, Snapshot};
use meshhub_mcp::source::SourceConfig;
use meshhub_proto::ads::client::AggregatedDiscoveryServiceClient;
use meshhub_proto::ads::{DeltaDiscoveryRequest, DeltaDiscoveryResponse, Node};
use meshhub_proto::mcp::Resource;
use meshhub_proto::wire::MCP_RESOURCE_TYPE_URL;
use meshhub_testkit::objects::any;
use meshhub_testkit::within;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::Streaming;
use tonic::transport::Server;

use crate::support::{self, MAX, encoded};

const VS_COLLECTION: &str = "istio/networking/v1alpha3/virtualservices";
const VS: &str = "networking.istio.io/v1/VirtualService";
const UNKNOWN: &str = "telemetry.istio.io/v1/Telemetry";
const MESH_CONFIG: &str = "core/v1alpha1/MeshConfig";
const OTHER_UNKNOWN: &str = "example.meshhub.io/v1/Unknown";

/// A virtual service `name@version`, its body naming the last character
/// of its name.
fn resource(name: &str, version: &str) -> EncodedResource {
    let body = format!("\n\x01{}", &name[name.len() - 1..]);
    encoded(
        name,
        version,
        Some(any(
            "type.googleapis.com/istio.networking.v1alpha3.VirtualService",
            body,
        )),
    )
}

fn snapshot(vs: &[(&str, &str)]) -> Arc<Snapshot> {
    support::snapshot(vec![(
        VS_COLLECTION,
        vs.iter().map(|(n, v)| resource(n, v)).collect(),
    )])
}

struct Hub {
    addr: SocketAddr,
    writer: SnapshotWriter,
    ledger: Ledger,
    shutdown: CancellationToken,
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start_hub() -> Hub {
    let (writer, shared) = support::shared(SingleGroup("default".into()), SourceConfig::default());
    let (ledger, shutdown) = (shared.ledger.clone(), shared.shutdown.clone());
    let types: meshhub_mcp::ads::TypeMap =
        Arc::new(|t: &str| (t == VS).then(|| Served::Collection(VS_COLLECTION.to_owned())));
    let ads = AdsServer::new(shared, types).into_service(MAX);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = shutdown.clone();
    tokio::spawn(
        Server::builder()
            .add_service(ads)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stop.cancelled_owned()),
    );
    Hub {
        addr,
        writer,
        ledger,
        shutdown,
    }
}

/// A hand-driven Delta client using Envoy's own generated types.
struct DeltaClient {
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    rx: Streaming<DeltaDiscoveryResponse>,
}

fn node() -> Option<Node> {
    Some(Node {
        id: "sidecar~127.0.0.1~delta-test.default~default.svc.cluster.local".into(),
        ..Default::default()
    })
}

/// The first request of a type (a wildcard unless names are given).
fn subscribe(type_url: &str, names: &[&str]) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        node: node(),
        type_url: type_url.into(),
        resource_names_subscribe: names.iter().map(|n| (*n).into()).collect(),
        ..Default::default()
    }
}

fn ack(type_url: &str, nonce: &str) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: type_url.into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

impl DeltaClient {
    async fn connect(addr: SocketAddr, first: DeltaDiscoveryRequest) -> Self {
        let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let (tx, rx) = mpsc::channel(16);
        tx.send(first).await.unwrap();
        let rx = client
            .delta_aggregated_resources(ReceiverStream::new(rx))
            .await
            .expect("DeltaAggregatedResources is served")
            .into_inner();
        Self { tx, rx }
    }

    async fn send(&self, req: DeltaDiscoveryRequest) {
        self.tx.send(req).await.unwrap();
    }

    async fn recv(&mut self) -> DeltaDiscoveryResponse {
        within("a Delta response", self.rx.message())
            .await
            .expect("no stream error")
            .expect("stream open")
    }
}

/// `name@version` of each resource (checking each is a real MCP resource
/// whose metadata matches its envelope), and the removed names.
fn content(r: &DeltaDiscoveryResponse) -> (Vec<String>, Vec<String>) {
    let resources = r
        .resources
        .iter()
        .map(|x| {
            let any = x.resource.as_ref().expect("resource set");
            assert_eq!(any.type_url, MCP_RESOURCE_TYPE_URL);
            let mcp = Resource::decode(any.value.as_slice()).expect("an MCP Resource");
            let meta = mcp.metadata.expect("metadata");
            assert_eq!((&meta.name, &meta.version), (&x.name, &x.version));
            assert_eq!(
                mcp.body.expect("body").type_url,
                "type.googleapis.com/istio.networking.v1alpha3.VirtualService"
            );
            format!("{}@{}", x.name, x.version)
        })
        .collect();
    (resources, r.removed_resources.clone())
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn delta_peer(ledger: &Ledger) -> PeerStatus {
    ledger
        .view()
        .into_iter()
        .find(|p| p.protocol == meshhub_mcp::ledger::StreamProtocol::DeltaAds)
        .expect("the Delta stream is in the ledger")
}

#[tokio::test]
async fn wildcard_gets_full_state_then_only_changes_and_removals() {
    let hub = start_hub().await;
    hub.writer
        .set("default", snapshot(&[("ns/a", "1"), ("ns/b", "1")]));
    let mut client = DeltaClient::connect(hub.addr, subscribe(VS, &[])).await;

    let first = client.recv().await;
    assert_eq!(first.type_url, VS, "exactly the requested type URL");
    assert!(!first.nonce.is_empty() && !first.system_version_info.is_empty());
    assert_eq!(content(&first), (strings(&["ns/a@1", "ns/b@1"]), vec![]));
    client.send(ack(VS, &first.nonce)).await;

    // An update: only the changed resource.
    hub.writer
        .set("default", snapshot(&[("ns/a", "2"), ("ns/b", "1")]));
    let update = client.recv().await;
    assert_eq!(content(&update), (strings(&["ns/a@2"]), vec![]));
    assert_ne!(update.nonce, first.nonce);
    assert_ne!(update.system_version_info, first.system_version_info);
    client.send(ack(VS, &update.nonce)).await;

    // A deletion: in removed_resources, nothing resent.
    hub.writer.set("default", snapshot(&[("ns/a", "2")]));
    let removal = client.recv().await;
    assert_eq!(content(&removal), (vec![], strings(&["ns/b"])));
    client.send(ack(VS, &removal.nonce)).await;

    // The ledger shows the stream as Delta ADS, synced on the type URL.
    client.send(subscribe(UNKNOWN, &[])).await;
    let _barrier = client.recv().await;
    let peer = delta_peer(&hub.ledger);
    assert!(peer.connected);
    assert!(peer.node_id.contains("delta-test"), "{}", peer.node_id);
    let vs = &peer.collections[VS];
    assert_eq!(vs.state, SyncState::Synced);
    assert_eq!(vs.acks, 3);
}

#[tokio::test]
async fn reconnect_with_initial_versions_gets_only_the_difference() {
    let hub = start_hub().await;
    hub.writer.set(
        "default",
        snapshot(&[("ns/same", "1"), ("ns/changed", "2"), ("ns/new", "1")]),
    );
    // What the client held when its previous stream broke.
    let mut first = subscribe(VS, &[]);
    first.initial_resource_versions = HashMap::from([
        ("ns/same".to_owned(), "1".to_owned()),
        ("ns/changed".to_owned(), "1".to_owned()),
        ("ns/deleted".to_owned(), "1".to_owned()),
    ]);
    let mut client = DeltaClient::connect(hub.addr, first).await;
    let r = client.recv().await;
    assert_eq!(
        content(&r),
        (
            strings(&["ns/changed@2", "ns/new@1"]),
            strings(&["ns/deleted"])
        ),
        "unchanged ns/same is not resent"
    );
}

#[tokio::test]
async fn nack_is_recorded_and_not_resent_until_the_state_changes() {
    let hub = start_hub().await;
    hub.writer.set("default", snapshot(&[("ns/a", "1")]));
    let mut client = DeltaClient::connect(hub.addr, subscribe(VS, &[])).await;
    let first = client.recv().await;
    let mut nack = ack(VS, &first.nonce);
    nack.error_detail = Some(envoy_types::pb::google::rpc::Status {
        code: 3,
        message: "ns/a: bad host".into(),
        details: vec![],
    });
    client.send(nack).await;
    // If the NACKed state were resent it would come before this answer.
    client.send(subscribe(UNKNOWN, &[])).await;
    let next = client.recv().await;
    assert_eq!(next.type_url, UNKNOWN, "the NACKed state was not resent");
    let peer = delta_peer(&hub.ledger);
    let vs = &peer.collections[VS];
    assert_eq!(vs.state, SyncState::Nacked);
    assert_eq!(vs.nacks, 1);
    let rejection = vs.nacked.as_ref().unwrap();
    assert_eq!(rejection.message, "ns/a: bad host");
    assert_eq!(rejection.version, first.system_version_info);

    // New content: sent, as a change from what the client held before the
    // NACK (nothing).
    client.send(ack(UNKNOWN, &next.nonce)).await;
    hub.writer.set("default", snapshot(&[("ns/a", "2")]));
    let fixed = client.recv().await;
    assert_eq!(fixed.type_url, VS);
    assert_eq!(content(&fixed), (strings(&["ns/a@2"]), vec![]));
}

#[tokio::test]
async fn unknown_types_get_an_empty_answer_and_mesh_config_none() {
    let hub = start_hub().await;
    hub.writer.set("default", snapshot(&[("ns/a", "1")]));
    // MeshConfig first, as istiod orders its subscriptions.
    let mut client = DeltaClient::connect(hub.addr, subscribe(MESH_CONFIG, &[])).await;
    client.send(subscribe(UNKNOWN, &[])).await;
    client.send(subscribe(VS, &[])).await;
    // Types are answered independently: in any order, but MeshConfig never.
    let mut answers = std::collections::BTreeMap::new();
    for _ in 0..2 {
        let r = client.recv().await;
        assert_ne!(r.type_url, MESH_CONFIG, "MeshConfig is not answered");
        answers.insert(r.type_url.clone(), r);
    }
    let unknown = &answers[UNKNOWN];
    assert!(unknown.resources.is_empty() && unknown.removed_resources.is_empty());
    assert!(
        !unknown.system_version_info.is_empty() && !unknown.nonce.is_empty(),
        "an empty answer the client can ACK and sync on"
    );
    assert_eq!(content(&answers[VS]).0, strings(&["ns/a@1"]));
    // Still nothing for MeshConfig: the next answer is for a new type.
    client.send(subscribe(OTHER_UNKNOWN, &[])).await;
    assert_eq!(client.recv().await.type_url, OTHER_UNKNOWN);
    let peer = delta_peer(&hub.ledger);
    assert!(!peer.collections.contains_key(MESH_CONFIG));
}

#[tokio::test]
async fn named_subscriptions_get_their_resources_and_missing_names_removed() {
    let hub = start_hub().await;
    hub.writer
        .set("default", snapshot(&[("ns/a", "1"), ("ns/b", "1")]));
    let mut client = DeltaClient::connect(hub.addr, subscribe(VS, &["ns/a", "ns/x"])).await;
    let first = client.recv().await;
    assert_eq!(
        content(&first),
        (strings(&["ns/a@1"]), strings(&["ns/x"])),
        "only ns/a; ns/x does not exist"
    );
    client.send(ack(VS, &first.nonce)).await;
    // A change to an unsubscribed resource sends nothing; subscribing to it
    // sends it at its current version.
    hub.writer
        .set("default", snapshot(&[("ns/a", "1"), ("ns/b", "2")]));
    let mut more = ack(VS, "");
    more.resource_names_subscribe = strings(&["ns/b"]);
    client.send(more).await;
    let next = client.recv().await;
    assert_eq!(content(&next), (strings(&["ns/b@2"]), vec![]));
}

#[tokio::test]
async fn sotw_still_served_beside_delta() {
    use meshhub_proto::ads::DiscoveryRequest;
    let hub = start_hub().await;
    hub.writer.set("default", snapshot(&[("ns/a", "1")]));
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{}", hub.addr))
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(4);
    tx.send(DiscoveryRequest {
        node: node(),
        type_url: VS.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut rx = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let r = within("an ADS response", rx.message())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((r.type_url.as_str(), r.resources.len()), (VS, 1));
    let peers = hub.ledger.view();
    assert!(
        peers
            .iter()
            .any(|p| p.protocol == meshhub_mcp::ledger::StreamProtocol::Ads),
        "{peers:?}"
    );
}

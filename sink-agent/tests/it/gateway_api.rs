//! The Gateway API kinds at the agent: received, stored and re-served to
//! MCP consumers like any kind, but not offered over ADS (istiod's `xds://`
//! config source never asks for them; it reads them from its cluster's
//! API, where the applier puts them).

use std::collections::BTreeSet;

use meshhub_e2e::inproc::{agent_config, push};
use meshhub_proto::ads::{DiscoveryRequest, Node, client::AggregatedDiscoveryServiceClient};
use meshhub_proto::transcode::parse_yaml;
use meshhub_sink_agent::app::Agent;
use meshhub_testkit::DEADLINE;
use tonic::transport::Endpoint;

use crate::support::{Consumer, PushHub, encode, snapshot};

const ROUTES: &str = "k8s/gateway.networking.k8s.io/v1/httproutes";

const ROUTE: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: reviews, namespace: bookinfo}
spec:
  parentRefs: [{name: ingress}]
  rules:
  - backendRefs: [{name: reviews, port: 9080}]
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_are_stored_and_served_over_mcp_but_not_offered_over_ads() {
    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(agent_config("east", data.path(), push()))
        .await
        .unwrap();
    let objects: Vec<_> = parse_yaml(ROUTE).into_iter().map(Result::unwrap).collect();
    let snap = snapshot(encode(&objects));
    let version = snap.collection(ROUTES).version().to_owned();
    let hub = PushHub::dial(agent.sink_addr().unwrap(), snap);
    meshhub_testkit::eventually("the routes ACKed", async || hub.acked(ROUTES, &version)).await;

    // An MCP consumer of the agent's re-serve port gets the route.
    let consumer = Consumer::connect(agent.grpc_addr(), &[ROUTES]);
    consumer
        .wait_for(ROUTES, &BTreeSet::from(["bookinfo/reviews".to_owned()]))
        .await;

    // ADS answers the HTTPRoute's type URL like an unknown one: empty.
    let channel = Endpoint::from_shared(format!("http://{}", agent.grpc_addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(DiscoveryRequest {
        node: Some(Node {
            id: "sidecar~10.0.0.1~istiod-0.istio-system~istio-system.svc.cluster.local".into(),
            ..Default::default()
        }),
        type_url: "gateway.networking.k8s.io/v1/HTTPRoute".into(),
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
        .expect("an answer")
        .unwrap()
        .unwrap();
    assert_eq!(response.type_url, "gateway.networking.k8s.io/v1/HTTPRoute");
    assert!(
        response.resources.is_empty(),
        "not offered over ADS: {} resource(s)",
        response.resources.len()
    );

    drop(stream);
    drop(tx);
    drop(consumer);
    drop(hub);
    assert!(agent.shutdown().await);
}

//! Reflection and health on every gRPC port, and the introspection routes
//! on both admin ports, against an in-process hub (running its embedded
//! default) and sink agent, over real loopback sockets.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use meshhub::app::Hub;
use meshhub::config::Config;
use meshhub_e2e::inproc::{ANY_PORT, agent_config, hub_args, push, ready_hub, start_agent};
use meshhub_sink_agent::app::Agent;
use meshhub_testkit::http;
use meshhub_testkit::mcp::channel;
use prost::Message as _;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

/// One reflection request over a fresh connection.
async fn reflect(addr: SocketAddr, request: MessageRequest) -> MessageResponse {
    let mut client = ServerReflectionClient::new(channel(addr).await);
    let requests = tokio_stream::once(ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    });
    let mut responses = client
        .server_reflection_info(requests)
        .await
        .unwrap()
        .into_inner();
    responses
        .message()
        .await
        .unwrap()
        .expect("one response")
        .message_response
        .expect("a message")
}

async fn services(addr: SocketAddr) -> BTreeSet<String> {
    match reflect(addr, MessageRequest::ListServices(String::new())).await {
        MessageResponse::ListServicesResponse(list) => {
            list.service.into_iter().map(|s| s.name).collect()
        }
        other => panic!("{addr}: not a service list: {other:?}"),
    }
}

/// The file that defines `symbol`, decoded: its name and services.
async fn file_of(addr: SocketAddr, symbol: &str) -> (String, Vec<String>) {
    match reflect(
        addr,
        MessageRequest::FileContainingSymbol(symbol.to_owned()),
    )
    .await
    {
        MessageResponse::FileDescriptorResponse(files) => {
            let file =
                prost_types::FileDescriptorProto::decode(files.file_descriptor_proto[0].as_slice())
                    .unwrap();
            let services = file.service.iter().map(|s| s.name().to_owned()).collect();
            (file.name().to_owned(), services)
        }
        other => panic!("{addr}: no file for {symbol}: {other:?}"),
    }
}

async fn serving(addr: SocketAddr) -> bool {
    let mut client = HealthClient::new(channel(addr).await);
    let r = client
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    r.status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

async fn hub() -> Hub {
    // No --config: the embedded default.
    let config = Config::from_args(hub_args(ANY_PORT, &[])).unwrap();
    assert!(config.embedded.is_some());
    ready_hub(config).await
}

async fn agent(data: &std::path::Path) -> Agent {
    start_agent(agent_config("east", data, push())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_what_each_grpc_port_serves() {
    let hub = hub().await;
    let data = tempfile::tempdir().unwrap();
    let agent = agent(data.path()).await;
    let common = [
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ];
    let source = "istio.mcp.v1alpha1.ResourceSource";
    let sink = "istio.mcp.v1alpha1.ResourceSink";

    // The agent's sink port also serves its cluster's state to the hub
    // (the upward channel, a ResourceSource).
    for (port, addr, own, also) in [
        ("hub", hub.grpc_addr(), source, None),
        ("agent re-serve", agent.grpc_addr(), source, None),
        ("agent sink", agent.sink_addr().unwrap(), sink, Some(source)),
    ] {
        let mut want = set(&common);
        want.insert(own.to_owned());
        want.extend(also.map(str::to_owned));
        assert_eq!(services(addr).await, want, "{port}");
        let (file, services) = file_of(addr, own).await;
        assert_eq!(file, "mcp/v1alpha1/mcp.proto", "{port}");
        assert!(
            services.contains(&own.rsplit('.').next().unwrap().to_owned()),
            "{port}: {services:?}"
        );
        assert!(serving(addr).await, "{port}: health");
    }
    agent.shutdown().await;
    hub.shutdown().await;
}

async fn get_json(addr: SocketAddr, path: &str) -> (u16, serde_json::Value) {
    let (code, body) = http::get(addr, path).await;
    (
        code,
        serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_admin_ports_describe_their_process() {
    let hub = hub().await;
    let data = tempfile::tempdir().unwrap();
    let agent = agent(data.path()).await;
    for (name, addr) in [
        ("meshhub", hub.admin_addr()),
        ("meshhub-sink-agent", agent.admin_addr()),
    ] {
        let (code, p) = get_json(addr, "/debug/process").await;
        assert_eq!(code, 200, "{name}");
        assert_eq!(p["name"], name);
        assert_eq!(p["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(p["pid"], std::process::id());
        let (code, m) = get_json(addr, "/debug/memory").await;
        assert_eq!(code, 200, "{name}");
        assert!(m["rss_bytes"].as_u64().unwrap() > 0, "{name}: {m}");
        // This test process did not install meshhub's logging.
        let (code, l) = get_json(addr, "/debug/logging").await;
        assert_eq!(code, 503, "{name}: {l}");
        let (code, _) = get_json(addr, "/readyz").await;
        assert_eq!(code, 200, "{name}");
    }
    let (_, p) = get_json(hub.admin_addr(), "/debug/process").await;
    assert_eq!(p["config"]["embeddedDefault"], true);
    let (_, p) = get_json(agent.admin_addr(), "/debug/process").await;
    assert_eq!(p["config"]["cluster"], "east");
    agent.shutdown().await;
    hub.shutdown().await;
}

//! The hub's gRPC port with mutual TLS and per-cluster identity lists (real
//! gRPC over loopback, rcgen certificates): a consumer's verified identity
//! decides its group; a certificate for cluster east cannot read west
//! (PERMISSION_DENIED, counted).

use std::path::Path;
use std::time::Duration;

use meshhub::app::Hub;
use meshhub_e2e::inproc::{EAST_ID, mtls_hub};
use meshhub_proto::mcp::resource_source_client::ResourceSourceClient;
use meshhub_proto::mcp::{RequestResources, SinkNode};
use meshhub_testkit::http;
use meshhub_testkit::objects::VS;
use tonic::transport::Endpoint;

/// Subscribes to VS as node `node_id` with the client certificate `who`;
/// the names of the first response, or the refusal's code and message.
async fn first_names(
    hub: &Hub,
    dir: &Path,
    who: &str,
    node_id: &str,
) -> Result<Vec<String>, (tonic::Code, String)> {
    let tls = meshhub_mcp::tls::client_config(
        &dir.join("ca.pem"),
        Some((
            &dir.join(format!("{who}.pem")),
            &dir.join(format!("{who}-key.pem")),
        )),
        Some("localhost"),
    )
    .unwrap();
    let channel = Endpoint::from_shared(format!("https://{}", hub.grpc_addr()))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let request = RequestResources {
        collection: VS.into(),
        sink_node: Some(SinkNode {
            id: node_id.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let outbound =
        tokio_stream::StreamExt::chain(tokio_stream::iter(vec![request]), tokio_stream::pending());
    let status = |s: tonic::Status| (s.code(), s.message().to_owned());
    let mut stream = ResourceSourceClient::new(channel)
        .establish_resource_stream(outbound)
        .await
        .map_err(status)?
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("an answer")
        .map_err(status)?
        .expect("a response");
    Ok(first
        .resources
        .iter()
        .map(|r| r.metadata.as_ref().unwrap().name.clone())
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_east_cannot_read_west() {
    let dir = tempfile::tempdir().unwrap();
    let hub = mtls_hub(dir.path()).await;

    // East's identity reads east, whatever node id it claims (none that
    // names a cluster, or east itself).
    assert_eq!(
        first_names(&hub, dir.path(), "east", "istiod-1")
            .await
            .unwrap(),
        ["east-ns/reviews"]
    );
    assert_eq!(
        first_names(&hub, dir.path(), "east", "east").await.unwrap(),
        ["east-ns/reviews"]
    );
    // Claiming west with east's certificate is refused.
    let (code, message) = first_names(&hub, dir.path(), "east", "west")
        .await
        .unwrap_err();
    assert_eq!(code, tonic::Code::PermissionDenied, "{message}");
    assert!(
        message.contains(EAST_ID) && message.contains("\"west\""),
        "{message}"
    );
    // West's identity reads west.
    assert_eq!(
        first_names(&hub, dir.path(), "west", "west").await.unwrap(),
        ["west-ns/ratings"]
    );
    // The refusal is counted.
    let metrics = http::get(hub.admin_addr(), "/metrics").await.1;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("meshhub_mcp_streams_refused_total")
                && l.contains("reason=\"permission_denied\"")),
        "{metrics}"
    );
    // /status shows the TLS of the port.
    let status = http::get(hub.admin_addr(), "/status").await.1;
    assert!(
        status.contains("\"grpc_tls\":{") && status.contains("\"mutual\":true"),
        "{status}"
    );
    hub.shutdown().await;
}

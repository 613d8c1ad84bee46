//! The hub's gRPC port with mutual TLS and per-cluster identity lists (real
//! gRPC over loopback, rcgen certificates): a consumer's verified identity
//! decides its group; a certificate for cluster east cannot read west
//! (PERMISSION_DENIED, counted).

use std::path::Path;
use std::time::Duration;

use clap::Parser as _;
use meshhub::app::Hub;
use meshhub_proto::mcp::resource_source_client::ResourceSourceClient;
use meshhub_proto::mcp::{RequestResources, SinkNode};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tonic::transport::Endpoint;

const VS: &str = "istio/networking/v1alpha3/virtualservices";
const EAST_ID: &str = "spiffe://east.example/ns/istio-system/sa/istiod";
const WEST_ID: &str = "spiffe://west.example/ns/istio-system/sa/istiod";

const OBJECTS: &str = r#"
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: east-ns}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings, namespace: west-ns}
spec:
  hosts: [ratings]
  http:
  - route:
    - destination: {host: ratings}
"#;

/// A CA, the hub's serving certificate, and client certificates for the
/// east and west identities, in `dir`.
fn pki(dir: &Path) {
    let write = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let root = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    write("ca.pem", root.pem());
    let key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &root)
        .unwrap();
    write("server.pem", server.pem());
    write("server-key.pem", key.serialize_pem());
    for (name, id) in [("east", EAST_ID), ("west", WEST_ID)] {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![SanType::URI(id.try_into().unwrap())];
        let cert = params.signed_by(&key, &root).unwrap();
        write(&format!("{name}.pem"), cert.pem());
        write(&format!("{name}-key.pem"), key.serialize_pem());
    }
}

async fn start_hub(dir: &Path) -> Hub {
    let _ = rustls::crypto::ring::default_provider().install_default();
    pki(dir);
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    std::fs::write(dir.join("objects/vs.yaml"), OBJECTS).unwrap();
    let path = dir.join("meshhub.yaml");
    let text = "\
sources:
  - name: files
    file: {path: objects}
clusters:
  - name: east
    namespaces: [east-ns]
    identities: ['spiffe://east.example/**']
  - name: west
    namespaces: [west-ns]
    identities: ['spiffe://west.example/ns/*/sa/istiod']
grpcTls: {cert: server.pem, key: server-key.pem, clientCa: ca.pem}
debounce: {quiet: 20ms, maxWait: 200ms}
";
    std::fs::write(&path, text).unwrap();
    let args = meshhub::config::Args::parse_from([
        "meshhub",
        "--grpc-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--shutdown-grace",
        "5s",
    ]);
    let config = meshhub::config::Config::from_yaml(&args, &path, text).unwrap();
    assert!(config.access.enforced);
    let hub = Hub::start(config).await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), hub.ready())
        .await
        .expect("hub ready");
    hub
}

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

async fn http_get(hub: &Hub, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(hub.admin_addr())
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_east_cannot_read_west() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start_hub(dir.path()).await;

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
    let metrics = http_get(&hub, "/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("meshhub_mcp_streams_refused_total")
                && l.contains("reason=\"permission_denied\"")),
        "{metrics}"
    );
    // /status shows the TLS of the port.
    let status = http_get(&hub, "/status").await;
    assert!(
        status.contains("\"grpc_tls\":{") && status.contains("\"mutual\":true"),
        "{status}"
    );
    hub.shutdown().await;
}

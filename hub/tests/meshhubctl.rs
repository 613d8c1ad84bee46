//! `meshhubctl watch` against a real ResourceSource on loopback.

use std::sync::Arc;
use std::time::Duration;

use meshhub_mcp::cache;
use meshhub_mcp::group::SingleGroup;
use meshhub_mcp::ledger::Ledger;
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use meshhub_mcp::source::SourceConfig;
use meshhub_mcp::source::server::{Shared, SourceServer};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::transcode;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const REVIEWS: &str = r#"
apiVersion: networking.istio.io/v1alpha3
kind: VirtualService
metadata:
  name: reviews
  namespace: bookinfo
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews, subset: v1}
      weight: 80
    - destination: {host: reviews, subset: v2}
      weight: 20
"#;

async fn run_ctl(args: &[&str]) -> std::process::Output {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_meshhubctl"))
        .args(args)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(30), child)
        .await
        .expect("meshhubctl finishes")
        .expect("meshhubctl runs")
}

#[tokio::test]
async fn watch_once_prints_the_state_of_every_collection() {
    let kinds = KindTable::builtin();
    let obj = transcode::parse_yaml(REVIEWS).remove(0).unwrap();
    let kind = transcode::kind_of(&kinds, &obj).unwrap();
    let resource = transcode::object_to_resource(kind, &obj).unwrap();
    let meta = resource.metadata.clone().unwrap();
    let encoded = transcode::encode_object(kind, &obj).unwrap();
    let mut snapshot = Snapshot::new();
    for k in kinds.iter() {
        snapshot.insert(
            k.collection(),
            Arc::new(CollectionSnapshot::new(Vec::new())),
        );
    }
    snapshot.insert(
        kind.collection(),
        Arc::new(CollectionSnapshot::new(vec![EncodedResource {
            name: meta.name.as_str().into(),
            version: meta.version.as_str().into(),
            encoded,
        }])),
    );
    let (writer, reader) = cache::new();
    writer.set("default", Arc::new(snapshot));
    let shutdown = CancellationToken::new();
    let service = SourceServer::new(Shared {
        cache: reader,
        groups: Arc::new(SingleGroup("default".into())),
        ledger: Ledger::new(),
        config: Arc::new(SourceConfig::default()),
        shutdown: shutdown.clone(),
        tasks: TaskTracker::new(),
    })
    .into_service(16 << 20);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = shutdown.clone();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stop.cancelled_owned()),
    );
    let server = format!("http://{addr}");

    let out = run_ctl(&["watch", "--server", &server, "--once"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("# collection istio/networking/v1alpha3/virtualservices"),
        "{stdout}"
    );
    assert!(stdout.contains("name: reviews"), "{stdout}");
    assert!(stdout.contains("subset: v2"), "{stdout}");
    // Every kind's collection was answered once.
    assert_eq!(
        stdout.matches("# collection ").count(),
        kinds.len(),
        "{stdout}"
    );

    let out = run_ctl(&[
        "watch",
        "--server",
        &server,
        "--once",
        "-o",
        "json",
        "-c",
        kind.collection(),
    ])
    .await;
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .expect("a JSON object");
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["spec"]["http"][0]["route"][1]["weight"], 20);
    shutdown.cancel();
}

#[tokio::test]
async fn watch_fails_clearly_when_it_cannot_connect() {
    // A port nobody listens on: bind, note it, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = format!("http://127.0.0.1:{port}");
    let out = run_ctl(&[
        "watch",
        "--server",
        &server,
        "--once",
        "--connect-timeout",
        "2s",
    ])
    .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot connect to"), "{stderr}");
}

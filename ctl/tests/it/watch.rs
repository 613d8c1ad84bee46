//! `meshhubctl watch` against a real ResourceSource on loopback, and
//! `meshhubctl watch --ads [--delta]` against an in-process hub.

use std::sync::Arc;

use meshhub_e2e::inproc::hub_of_text;
use meshhub_e2e::upstream::Upstream;
use meshhub_e2e::yaml::files_hub;
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::transcode;

use crate::support::meshhubctl;

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
    let upstream = Upstream::start("default", Arc::new(snapshot)).await;
    let addr = upstream.addr;
    let server = format!("http://{addr}");

    let out = meshhubctl(&["watch", "--server", &server, "--once"]).await;
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

    let out = meshhubctl(&[
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
    upstream.shutdown.cancel();
}

#[tokio::test]
async fn watch_fails_clearly_when_it_cannot_connect() {
    // A port nobody listens on: bind, note it, close.
    let port = meshhub_testkit::ports::free_port();
    let server = format!("http://127.0.0.1:{port}");
    let out = meshhubctl(&[
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

/// An in-process hub whose file source holds `REVIEWS`.
async fn start_hub(dir: &std::path::Path) -> meshhub::app::Hub {
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    std::fs::write(dir.join("objects/reviews.yaml"), REVIEWS).unwrap();
    hub_of_text(&dir.join("meshhub.yaml"), &files_hub("objects", "", "")).await
}

#[tokio::test]
async fn watch_ads_once_prints_every_type_as_istiod_subscribes() {
    let dir = tempfile::tempdir().unwrap();
    let hub = start_hub(dir.path()).await;
    let kinds = KindTable::builtin();
    let server = format!("http://{}", hub.grpc_addr());

    let out = meshhubctl(&["watch", "--ads", "--server", &server, "--once"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("# type networking.istio.io/v1/VirtualService version "),
        "answered on the 1.24+ type URL: {stdout}"
    );
    assert!(stdout.contains("name: reviews"), "{stdout}");
    assert!(stdout.contains("subset: v2"), "{stdout}");
    assert_eq!(
        stdout.matches("# type ").count(),
        kinds.iter().filter(|k| k.offered_over_ads()).count(),
        "one full state per type URL istiod asks for (no Gateway API kind): {stdout}"
    );
    assert!(!stdout.contains("gateway.networking.k8s.io"), "{stdout}");

    // Delta: the same state, each resource marked as an addition.
    let out = meshhubctl(&[
        "watch", "--ads", "--delta", "--server", &server, "--once", "-o", "json",
    ])
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.matches("# type ").count(),
        kinds.iter().filter(|k| k.offered_over_ads()).count(),
        "{stdout}"
    );
    assert!(
        stdout.contains("# added bookinfo/reviews version "),
        "{stdout}"
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .expect("a JSON object");
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["spec"]["http"][0]["route"][1]["weight"], 20);

    // Both streams are in the ledger under their protocol, and every type
    // was ACKed.
    let peers = hub.ledger().view();
    for protocol in ["ads", "delta-ads"] {
        let p = peers
            .iter()
            .find(|p| p.protocol.as_str() == protocol)
            .unwrap_or_else(|| panic!("a {protocol} consumer in {peers:?}"));
        assert!(p.node_id.starts_with("sidecar~"), "{}", p.node_id);
        let vs = &p.collections["networking.istio.io/v1/VirtualService"];
        assert_eq!(vs.acks, 1, "{protocol}: {vs:?}");
    }
    // meshhubctl status shows the protocol.
    let admin = format!("http://{}", hub.admin_addr());
    let out = meshhubctl(&["status", "--admin", &admin, "--all", "-o", "json"]).await;
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let protocols: Vec<&str> = report["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["protocol"].as_str())
        .collect();
    assert!(protocols.contains(&"delta-ads"), "{report}");
    assert!(protocols.contains(&"ads"), "{report}");
    hub.shutdown().await;
}

#[tokio::test]
async fn watch_ads_fails_clearly_when_it_cannot_connect() {
    let port = meshhub_testkit::ports::free_port();
    let server = format!("http://127.0.0.1:{port}");
    for delta in [false, true] {
        let mut args = vec!["watch", "--ads", "--server", &server, "--once"];
        if delta {
            args.push("--delta");
        }
        let out = meshhubctl(&args).await;
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("cannot connect to"), "{stderr}");
    }
    // --delta without --ads is refused by the argument parser.
    let out = meshhubctl(&["watch", "--delta", "--server", &server]).await;
    assert!(!out.status.success());
}

//! The hub end to end in-process: files on disk → file source → pipeline →
//! gRPC `ResourceSource` consumer, plus the admin port.

use std::path::Path;

use clap::Parser as _;
use meshhub::app::Hub;
use meshhub::config::{Args, Config};
use meshhub_e2e::inproc::hub_of_text;
use meshhub_e2e::yaml::files_hub;
use meshhub_testkit::mcp::{Subscription, node};
use meshhub_testkit::objects::{VS, vs};
use meshhub_testkit::{eventually, http};

async fn start(dir: &Path, clusters: &str) -> Hub {
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    hub_of_text(
        &dir.join("meshhub.yaml"),
        &files_hub("objects", clusters, ""),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_edits_reach_a_connected_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::write(objects.join("a.yaml"), vs("a", "a")).unwrap();
    let hub = start(dir.path(), "  - name: east\n    namespaces: [bookinfo]\n").await;

    let mut east = Subscription::connect(hub.grpc_addr(), VS, Some(node("east")))
        .await
        .unwrap();
    let v1 = east.until_names(&["bookinfo/a"]).await;

    // Edit in place.
    std::fs::write(objects.join("a.yaml"), vs("a", "a2")).unwrap();
    let v2 = east.until_names(&["bookinfo/a"]).await;
    assert_ne!(v1, v2);

    // A new file in a new subdirectory.
    std::fs::create_dir_all(objects.join("sub/deeper")).unwrap();
    std::fs::write(objects.join("sub/deeper/b.yaml"), vs("b", "b")).unwrap();
    east.until_names(&["bookinfo/a", "bookinfo/b"]).await;

    // An editor's write-to-temp-and-rename replaces exactly that file's objects.
    std::fs::write(objects.join(".b.yaml.swp"), vs("c", "c")).unwrap();
    std::fs::rename(
        objects.join(".b.yaml.swp"),
        objects.join("sub/deeper/b.yaml"),
    )
    .unwrap();
    east.until_names(&["bookinfo/a", "bookinfo/c"]).await;

    // Delete.
    std::fs::remove_file(objects.join("a.yaml")).unwrap();
    east.until_names(&["bookinfo/c"]).await;

    // The ledger knows the consumer.
    let peers = hub.ledger().view();
    assert!(
        peers.iter().any(|p| p.group == "east" && p.connected),
        "{peers:?}"
    );
    assert!(
        hub.shutdown().await,
        "every task ended within the grace period"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_files_and_invalid_objects_are_reported_while_others_flow() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::write(objects.join("a.yaml"), vs("a", "a")).unwrap();
    std::fs::write(objects.join("broken.yaml"), "apiVersion: v1\nkind: [oops\n").unwrap();
    let invalid = format!(
        "{}---\n{}",
        vs("ok", "ok"),
        vs("bad", "bad").replace("hosts:", "hots:")
    );
    std::fs::write(objects.join("mixed.yaml"), invalid).unwrap();
    let hub = start(dir.path(), "").await;

    let mut consumer = Subscription::connect(hub.grpc_addr(), VS, Some(node("anyone")))
        .await
        .unwrap();
    consumer.until_names(&["bookinfo/a", "bookinfo/ok"]).await;

    let (code, body) = http::get(hub.admin_addr(), "/readyz").await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = http::get(hub.admin_addr(), "/status").await;
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let rejected = status["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 2, "{rejected:#?}");
    let text = serde_json::to_string(rejected).unwrap();
    assert!(text.contains("broken.yaml"), "{text}");
    assert!(
        text.contains("VirtualService bookinfo/bad: spec.hots: unknown field"),
        "{text}"
    );
    assert!(
        status["groups"][0]["collections"][VS]["resources"] == 2,
        "{status:#}"
    );

    // A further change still flows, next to the broken file.
    std::fs::write(
        objects.join("more.json"),
        serde_json::to_string(&serde_json::json!({
            "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "metadata": {"name": "json", "namespace": "bookinfo"},
            "spec": {"hosts": ["j"], "http": [{"route": [{"destination": {"host": "j"}}]}]}
        }))
        .unwrap(),
    )
    .unwrap();
    consumer
        .until_names(&["bookinfo/a", "bookinfo/json", "bookinfo/ok"])
        .await;

    // Fixing the broken file clears its report.
    std::fs::write(objects.join("broken.yaml"), vs("fixed", "f")).unwrap();
    consumer
        .until_names(&[
            "bookinfo/a",
            "bookinfo/fixed",
            "bookinfo/json",
            "bookinfo/ok",
        ])
        .await;
    let mut status = hub.status();
    let s = status
        .wait_for(|s| s.rejected.len() == 1)
        .await
        .unwrap()
        .clone();
    assert_eq!(s.rejected[0].name.as_deref(), Some("bookinfo/bad"));

    let (code, metrics) = http::get(hub.admin_addr(), "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        metrics.contains("meshhub_snapshot_publications_total"),
        "{metrics}"
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_and_objects_are_grouped_as_configured() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::write(objects.join("shared.yaml"), vs("shared", "s")).unwrap();
    let west_only = vs("egress", "e").replace(
        "  namespace: bookinfo\n",
        "  namespace: bookinfo\n  annotations:\n    meshhub.io/clusters: west\n",
    );
    std::fs::write(objects.join("west.yaml"), west_only).unwrap();
    let hub = start(
        dir.path(),
        "  - name: east\n    namespaces: [bookinfo]\n  - name: west\n    namespaces: [nowhere]\n",
    )
    .await;

    let mut east = Subscription::connect(hub.grpc_addr(), VS, Some(node("east")))
        .await
        .unwrap();
    assert_eq!(east.next_acked().await.unwrap().1, ["bookinfo/shared"]);
    let mut by_annotation = node("istiod-west-1");
    by_annotation
        .annotations
        .insert("meshhub.io/cluster".to_owned(), "west".to_owned());
    let mut west = Subscription::connect(hub.grpc_addr(), VS, Some(by_annotation))
        .await
        .unwrap();
    assert_eq!(west.next_acked().await.unwrap().1, ["bookinfo/egress"]);
    let mut default = Subscription::connect(hub.grpc_addr(), VS, Some(node("somebody")))
        .await
        .unwrap();
    assert_eq!(default.next_acked().await.unwrap().1, ["bookinfo/shared"]);

    // A consumer naming an unknown cluster is refused with the reason.
    let mut unknown = node("x");
    unknown
        .annotations
        .insert("meshhub.io/cluster".to_owned(), "north".to_owned());
    let refused = match Subscription::connect(hub.grpc_addr(), VS, Some(unknown)).await {
        Err(status) => status,
        Ok(mut c) => c.next_acked().await.expect_err("refused"),
    };
    assert!(refused.message().contains("north"), "{refused:?}");
    assert_eq!(
        meshhub_mcp::group::refusal_reason(&refused).as_deref(),
        Some(meshhub_api::node::UNKNOWN_CLUSTER),
        "the refusal's reason is machine-readable: {refused:?}"
    );

    eventually("the status to list every group", || async {
        let (_, body) = http::get(hub.admin_addr(), "/status").await;
        let s: serde_json::Value = serde_json::from_str(&body).unwrap();
        s["groups"].as_array().is_some_and(|g| g.len() == 3)
    })
    .await;
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_over_max_file_size_is_reported_and_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::write(objects.join("a.yaml"), vs("a", "a")).unwrap();
    // 2 KiB of objects in a source limited to 1 KiB per file.
    let mut huge = String::new();
    while huge.len() < 2048 {
        huge.push_str(&format!("{}---\n", vs(&format!("h{}", huge.len()), "h")));
    }
    std::fs::write(objects.join("huge.yaml"), huge).unwrap();
    let path = dir.path().join("meshhub.yaml");
    let text = "sources:\n  - name: files\n    file: {path: objects, maxFileSize: 1024}\ndebounce:\n  quiet: 20ms\n  maxWait: 200ms\n";
    let hub = hub_of_text(&path, text).await;
    let mut consumer = Subscription::connect(hub.grpc_addr(), VS, Some(node("anyone")))
        .await
        .unwrap();
    consumer.until_names(&["bookinfo/a"]).await;
    let (_, body) = http::get(hub.admin_addr(), "/status").await;
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let text = serde_json::to_string(&status["rejected"]).unwrap();
    assert!(
        text.contains("huge.yaml") && text.contains("exceed maxFileSize (1024 bytes)"),
        "{text}"
    );
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_over_max_object_size_is_reported_and_the_others_served() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    // Document 2 of three is over the 1 KiB per-object limit.
    let mut big = vs("big", "big");
    big.push_str("  gateways:\n");
    while big.len() < 2048 {
        big.push_str(&format!("  - gateway-{}\n", big.len()));
    }
    let file = format!("{}---\n{big}---\n{}", vs("a", "a"), vs("c", "c"));
    std::fs::write(objects.join("mixed.yaml"), file).unwrap();
    let path = dir.path().join("meshhub.yaml");
    let text = "sources:\n  - name: files\n    file: {path: objects, maxObjectSize: 1024}\ndebounce:\n  quiet: 20ms\n  maxWait: 200ms\n";
    let hub = hub_of_text(&path, text).await;
    let mut consumer = Subscription::connect(hub.grpc_addr(), VS, Some(node("anyone")))
        .await
        .unwrap();
    consumer.until_names(&["bookinfo/a", "bookinfo/c"]).await;
    let (_, body) = http::get(hub.admin_addr(), "/status").await;
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let rejected = status["rejected"].as_array().expect("rejected entries");
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    let text = serde_json::to_string(&rejected[0]).unwrap();
    assert!(
        text.contains("mixed.yaml")
            && text.contains("exceed maxObjectSize (1024 bytes); not parsed"),
        "{text}"
    );
    assert_eq!(rejected[0]["origin"]["document"], 2, "{text}");
    hub.shutdown().await;
}

#[test]
fn max_object_size_must_be_positive() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("objects")).unwrap();
    let path = dir.path().join("meshhub.yaml");
    let text = "sources:\n  - file: {path: objects, maxObjectSize: 0}\n";
    let args = Args::parse_from(["meshhub"]);
    let e = Config::from_yaml(&args, &path, text).unwrap_err();
    assert!(
        e.to_string().contains("sources[0].file.maxObjectSize"),
        "{e}"
    );
}

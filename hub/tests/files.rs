//! The hub end to end in-process: files on disk → file source → pipeline →
//! gRPC `ResourceSource` consumer, plus the admin port.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use clap::Parser as _;
use meshhub::app::Hub;
use meshhub::config::{Args, Config};
use meshhub_proto::mcp::resource_source_client::ResourceSourceClient;
use meshhub_proto::mcp::{RequestResources, Resources, SinkNode};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const VS: &str = "istio/networking/v1alpha3/virtualservices";
const DEADLINE: Duration = Duration::from_secs(20);

fn vs(name: &str, host: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: bookinfo\nspec:\n  hosts: [{host}]\n  http:\n  - route:\n    - destination:\n        host: {host}\n"
    )
}

/// Polls `check` until it holds or the deadline passes.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn start(dir: &Path, clusters: &str) -> Hub {
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    let path = dir.join("meshhub.yaml");
    let text = format!(
        "sources:\n  - name: files\n    file: {{path: objects}}\nclusters:\n{clusters}debounce:\n  quiet: 20ms\n  maxWait: 200ms\n"
    );
    std::fs::write(&path, &text).unwrap();
    let args = Args::parse_from([
        "meshhub",
        "--grpc-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--shutdown-grace",
        "5s",
    ]);
    let config = Config::from_yaml(&args, &path, &text).unwrap();
    let hub = Hub::start(config).await.unwrap();
    tokio::time::timeout(DEADLINE, hub.ready())
        .await
        .expect("ready");
    hub
}

/// A consumer of one collection over gRPC, ACKing every response.
struct Consumer {
    requests: mpsc::Sender<RequestResources>,
    responses: tonic::Streaming<Resources>,
    node: SinkNode,
}

impl Consumer {
    async fn connect(hub: &Hub, node: SinkNode) -> Result<Self, tonic::Status> {
        let mut client = ResourceSourceClient::connect(format!("http://{}", hub.grpc_addr()))
            .await
            .unwrap();
        let (requests, rx) = mpsc::channel(8);
        requests
            .send(RequestResources {
                sink_node: Some(node.clone()),
                collection: VS.to_owned(),
                ..Default::default()
            })
            .await
            .unwrap();
        let responses = client
            .establish_resource_stream(ReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(Self {
            requests,
            responses,
            node,
        })
    }

    /// The next response (ACKed): its version and resource names.
    async fn next(&mut self) -> Result<(String, Vec<String>), tonic::Status> {
        let r = tokio::time::timeout(DEADLINE, self.responses.message())
            .await
            .expect("a response in time")?
            .expect("stream open");
        self.requests
            .send(RequestResources {
                sink_node: Some(self.node.clone()),
                collection: VS.to_owned(),
                response_nonce: r.nonce.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        let mut names: Vec<String> = r
            .resources
            .iter()
            .filter_map(|x| x.metadata.as_ref().map(|m| m.name.clone()))
            .collect();
        names.sort();
        Ok((r.system_version_info, names))
    }

    /// Reads responses until one has exactly `names`.
    async fn until(&mut self, names: &[&str]) -> String {
        loop {
            let (v, got) = self.next().await.unwrap();
            if got == names {
                return v;
            }
        }
    }
}

fn node(id: &str) -> SinkNode {
    SinkNode {
        id: id.to_owned(),
        ..Default::default()
    }
}

async fn http_get(hub: &Hub, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(hub.admin_addr())
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out[9..12].parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|x| x.1.to_owned())
        .unwrap_or_default();
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_edits_reach_a_connected_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::write(objects.join("a.yaml"), vs("a", "a")).unwrap();
    let hub = start(dir.path(), "  - name: east\n    namespaces: [bookinfo]\n").await;

    let mut east = Consumer::connect(&hub, node("east")).await.unwrap();
    let v1 = east.until(&["bookinfo/a"]).await;

    // Edit in place.
    std::fs::write(objects.join("a.yaml"), vs("a", "a2")).unwrap();
    let v2 = east.until(&["bookinfo/a"]).await;
    assert_ne!(v1, v2);

    // A new file in a new subdirectory.
    std::fs::create_dir_all(objects.join("sub/deeper")).unwrap();
    std::fs::write(objects.join("sub/deeper/b.yaml"), vs("b", "b")).unwrap();
    east.until(&["bookinfo/a", "bookinfo/b"]).await;

    // An editor's write-to-temp-and-rename replaces exactly that file's objects.
    std::fs::write(objects.join(".b.yaml.swp"), vs("c", "c")).unwrap();
    std::fs::rename(
        objects.join(".b.yaml.swp"),
        objects.join("sub/deeper/b.yaml"),
    )
    .unwrap();
    east.until(&["bookinfo/a", "bookinfo/c"]).await;

    // Delete.
    std::fs::remove_file(objects.join("a.yaml")).unwrap();
    east.until(&["bookinfo/c"]).await;

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

    let mut consumer = Consumer::connect(&hub, node("anyone")).await.unwrap();
    consumer.until(&["bookinfo/a", "bookinfo/ok"]).await;

    let (code, body) = http_get(&hub, "/readyz").await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = http_get(&hub, "/status").await;
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
        .until(&["bookinfo/a", "bookinfo/json", "bookinfo/ok"])
        .await;

    // Fixing the broken file clears its report.
    std::fs::write(objects.join("broken.yaml"), vs("fixed", "f")).unwrap();
    consumer
        .until(&[
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

    let (code, metrics) = http_get(&hub, "/metrics").await;
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

    let mut east = Consumer::connect(&hub, node("east")).await.unwrap();
    assert_eq!(east.next().await.unwrap().1, ["bookinfo/shared"]);
    let mut by_annotation = node("istiod-west-1");
    by_annotation
        .annotations
        .insert("meshhub.io/cluster".to_owned(), "west".to_owned());
    let mut west = Consumer::connect(&hub, by_annotation).await.unwrap();
    assert_eq!(west.next().await.unwrap().1, ["bookinfo/egress"]);
    let mut default = Consumer::connect(&hub, node("somebody")).await.unwrap();
    assert_eq!(default.next().await.unwrap().1, ["bookinfo/shared"]);

    // A consumer naming an unknown cluster is refused with the reason.
    let mut unknown = node("x");
    unknown
        .annotations
        .insert("meshhub.io/cluster".to_owned(), "north".to_owned());
    let refused = match Consumer::connect(&hub, unknown).await {
        Err(status) => status,
        Ok(mut c) => c.next().await.expect_err("refused"),
    };
    assert!(refused.message().contains("north"), "{refused:?}");

    eventually("the status to list every group", || async {
        let (_, body) = http_get(&hub, "/status").await;
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
    std::fs::write(&path, text).unwrap();
    let args = Args::parse_from([
        "meshhub",
        "--grpc-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
    ]);
    let config = Config::from_yaml(&args, &path, text).unwrap();
    let hub = Hub::start(config).await.unwrap();
    tokio::time::timeout(DEADLINE, hub.ready())
        .await
        .expect("ready");
    let mut consumer = Consumer::connect(&hub, node("anyone")).await.unwrap();
    consumer.until(&["bookinfo/a"]).await;
    let (_, body) = http_get(&hub, "/status").await;
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
    std::fs::write(&path, text).unwrap();
    let args = Args::parse_from([
        "meshhub",
        "--grpc-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
    ]);
    let config = Config::from_yaml(&args, &path, text).unwrap();
    let hub = Hub::start(config).await.unwrap();
    tokio::time::timeout(DEADLINE, hub.ready())
        .await
        .expect("ready");
    let mut consumer = Consumer::connect(&hub, node("anyone")).await.unwrap();
    consumer.until(&["bookinfo/a", "bookinfo/c"]).await;
    let (_, body) = http_get(&hub, "/status").await;
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

//! Hostile and broken input in a watched file source, with the hub running
//! in-process: a YAML alias bomb, a 50 MB file, symlink loops, a file with a
//! non-UTF-8 name, a directory replaced by a file. The hub stays up, the
//! other files keep being served (and later edits still arrive), and the
//! bad files are reported on `/status` and in `meshhub_objects_rejected`.

use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::time::Duration;

use clap::Parser as _;
use meshhub::app::Hub;
use meshhub::config::{Args, Config};
use meshhub_proto::mcp::resource_source_client::ResourceSourceClient;
use meshhub_proto::mcp::{RequestResources, Resources};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const VS: &str = "istio/networking/v1alpha3/virtualservices";
const DEADLINE: Duration = Duration::from_secs(30);

fn vs(name: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: bookinfo\nspec:\n  hosts: [{name}]\n  http:\n  - route:\n    - destination:\n        host: {name}\n"
    )
}

async fn start(dir: &Path) -> Hub {
    let path = dir.join("meshhub.yaml");
    let text = "sources:\n  - name: files\n    file: {path: objects}\ndebounce:\n  quiet: 20ms\n  maxWait: 200ms\n";
    std::fs::write(&path, text).unwrap();
    let args = Args::parse_from([
        "meshhub",
        "--grpc-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--shutdown-grace",
        "5s",
    ]);
    let config = Config::from_yaml(&args, &path, text).unwrap();
    let hub = Hub::start(config).await.unwrap();
    tokio::time::timeout(DEADLINE, hub.ready())
        .await
        .expect("ready");
    hub
}

/// A consumer of the virtual services, ACKing every response.
struct Consumer {
    requests: mpsc::Sender<RequestResources>,
    responses: tonic::Streaming<Resources>,
}

impl Consumer {
    async fn connect(hub: &Hub) -> Self {
        let mut client = ResourceSourceClient::connect(format!("http://{}", hub.grpc_addr()))
            .await
            .unwrap();
        let (requests, rx) = mpsc::channel(8);
        requests
            .send(RequestResources {
                collection: VS.to_owned(),
                ..Default::default()
            })
            .await
            .unwrap();
        let responses = client
            .establish_resource_stream(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Self {
            requests,
            responses,
        }
    }

    /// Reads (and ACKs) responses until one holds exactly `names`.
    async fn until(&mut self, names: &[&str]) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        let mut last = Vec::new();
        loop {
            let r = tokio::time::timeout_at(deadline, self.responses.message())
                .await
                .unwrap_or_else(|_| panic!("timed out waiting for {names:?}; last {last:?}"))
                .unwrap()
                .expect("stream open");
            self.requests
                .send(RequestResources {
                    collection: VS.to_owned(),
                    response_nonce: r.nonce.clone(),
                    ..Default::default()
                })
                .await
                .unwrap();
            let mut got: Vec<String> = r
                .resources
                .iter()
                .filter_map(|x| x.metadata.as_ref().map(|m| m.name.clone()))
                .collect();
            got.sort();
            if got == names {
                return;
            }
            last = got;
        }
    }
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
    out.split_once("\r\n\r\n")
        .map(|x| x.1.to_owned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bombs_huge_files_loops_and_odd_names_leave_the_other_files_served() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(objects.join("sub")).unwrap();
    std::fs::write(objects.join("a.yaml"), vs("a")).unwrap();
    std::fs::write(objects.join("sub/c.yaml"), vs("c")).unwrap();
    let hub = start(dir.path()).await;
    let mut consumer = Consumer::connect(&hub).await;
    consumer.until(&["bookinfo/a", "bookinfo/c"]).await;

    // A billion-laughs document.
    let bomb =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/yaml/alias-bomb"))
            .unwrap();
    std::fs::write(objects.join("bomb.yaml"), bomb).unwrap();
    // 50 MB (sparse: the source must refuse it by its size, unread).
    std::fs::File::create(objects.join("big.yaml"))
        .unwrap()
        .set_len(50 * 1024 * 1024)
        .unwrap();
    // Symlink loops: to the directory itself, and to its parent.
    std::os::unix::fs::symlink(".", objects.join("self")).unwrap();
    std::fs::create_dir(objects.join("loop")).unwrap();
    std::os::unix::fs::symlink("..", objects.join("loop/up")).unwrap();
    // A non-UTF-8 file name holding a good object.
    let odd = std::ffi::OsStr::from_bytes(b"n-\xff\xfe.yaml");
    std::fs::write(objects.join(odd), vs("odd")).unwrap();
    // A directory replaced by a file.
    std::fs::remove_dir_all(objects.join("sub")).unwrap();
    std::fs::write(objects.join("sub"), "not a directory any more").unwrap();
    // And a later, ordinary edit.
    std::fs::write(objects.join("b.yaml"), vs("b")).unwrap();

    consumer
        .until(&["bookinfo/a", "bookinfo/b", "bookinfo/odd"])
        .await;

    let status: serde_json::Value = serde_json::from_str(&http_get(&hub, "/status").await).unwrap();
    let rejected = serde_json::to_string(&status["rejected"]).unwrap();
    assert!(
        rejected.contains("big.yaml") && rejected.contains("exceed maxFileSize"),
        "{rejected}"
    );
    assert!(rejected.contains("bomb.yaml"), "{rejected}");
    let metrics = http_get(&hub, "/metrics").await;
    let value = metrics
        .lines()
        .find(|l| l.starts_with("meshhub_objects_rejected "))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok());
    assert!(value.is_some_and(|n| n >= 2.0), "{metrics}");
    hub.shutdown().await;
}

//! `meshhubctl status` against a hub that dials a `ResourceSink` whose
//! updater rejects a resource (real gRPC on loopback): the NACK shows, as a
//! table and as JSON, and an unreachable admin port is named.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshhub::app::Hub;
use meshhub::clusters::is_dialer;
use meshhub_mcp::ledger::{Ledger, PeerStatus, SyncState};
use meshhub_mcp::sink::server::SinkServer;
use meshhub_mcp::sink::{ApplyError, Change, SinkCollection, SinkConfig, Updater};
use meshhub_proto::mcp::SinkNode;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::support::{VS, eventually, start_hub};

fn vs(name: &str, ns: &str, host: &str, labels: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {ns}\n{labels}spec:\n  hosts: [{host}]\n  http:\n  - route:\n    - destination:\n        host: {host}\n"
    )
}

/// A cluster entry of the hub's YAML with an agent at `addr`.
fn cluster(name: &str, selector: &str, addr: impl std::fmt::Display) -> String {
    format!(
        "  - name: {name}\n{selector}    agent:\n      address: http://{addr}\n      connectTimeout: 2s\n      reconnect: {{initial: 50ms, max: 500ms}}\n"
    )
}

fn write_config(path: &Path, clusters: &str) {
    let text = format!(
        "sources:\n  - name: files\n    file: {{path: ../objects}}\nclusters:\n{clusters}debounce:\n  quiet: 20ms\n  maxWait: 200ms\n"
    );
    // Replace atomically, as editors and ConfigMaps do.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A temp tree: `objects/` (the file source) and `etc/meshhub.yaml`.
fn tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("objects")).unwrap();
    std::fs::create_dir_all(dir.path().join("etc")).unwrap();
    let config = dir.path().join("etc/meshhub.yaml");
    (dir, config)
}

/// The live dialer entry of `cluster` in the hub's ledger.
fn dialer(hub: &Hub, cluster: &str) -> Option<PeerStatus> {
    hub.ledger()
        .view()
        .into_iter()
        .find(|p| is_dialer(p) && p.peer == cluster && p.connected)
}

fn vs_state(p: &PeerStatus) -> Option<SyncState> {
    p.collections.get(VS).map(|c| c.state)
}

/// A sink that rejects every virtual service whose name contains "bad"
/// (as an agent whose validation refuses it would), and counts what it was
/// offered per version.
#[derive(Default)]
struct Picky {
    offered: Mutex<HashMap<String, usize>>,
    held: Mutex<HashMap<String, HashMap<String, String>>>,
}

impl Updater for Picky {
    async fn apply(&self, change: Change) -> Result<(), ApplyError> {
        *self
            .offered
            .lock()
            .unwrap()
            .entry(change.version.clone())
            .or_default() += 1;
        for r in &change.resources {
            let name = r.metadata.as_ref().map_or("", |m| m.name.as_str());
            if name.contains("bad") {
                return Err(ApplyError::Invalid(format!(
                    "VirtualService {name}: rejected by the test sink"
                )));
            }
        }
        let map = change
            .resources
            .iter()
            .filter_map(|r| r.metadata.as_ref())
            .map(|m| (m.name.clone(), m.version.clone()))
            .collect();
        self.held
            .lock()
            .unwrap()
            .insert(change.collection.clone(), map);
        Ok(())
    }

    fn held(&self, collection: &str) -> HashMap<String, String> {
        self.held
            .lock()
            .unwrap()
            .get(collection)
            .cloned()
            .unwrap_or_default()
    }
}

async fn ctl(args: &[&str]) -> std::process::Output {
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
async fn a_nack_shows_in_meshhubctl_status_is_not_resent_and_a_fix_is_acked() {
    // The sink: a real ResourceSink server on loopback.
    let picky = Arc::new(Picky::default());
    let shutdown = CancellationToken::new();
    let tasks = TaskTracker::new();
    let sink = SinkServer::new(
        picky.clone(),
        Arc::new(SinkConfig {
            node: SinkNode {
                id: "east".into(),
                annotations: HashMap::new(),
            },
            collections: vec![SinkCollection {
                name: VS.into(),
                incremental: false,
            }],
        }),
        Ledger::new(),
        shutdown.clone(),
        tasks.clone(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sink_addr = listener.local_addr().unwrap();
    let server = tokio::spawn({
        let shutdown = shutdown.clone();
        tonic::transport::Server::builder()
            .add_service(sink.into_service(16 * 1024 * 1024))
            .serve_with_incoming_shutdown(
                TcpListenerStream::new(listener),
                shutdown.cancelled_owned(),
            )
    });

    let (dir, config) = tree();
    let objects = dir.path().join("objects");
    std::fs::write(objects.join("a.yaml"), vs("a", "bookinfo", "a", "")).unwrap();
    write_config(&config, &cluster("east", "", sink_addr));
    let hub = start_hub(&config).await;
    let admin = format!("http://{}", hub.admin_addr());
    eventually("the first version is ACKed", || async {
        dialer(&hub, "east").and_then(|p| vs_state(&p)) == Some(SyncState::Synced)
    })
    .await;

    // A resource the sink rejects.
    std::fs::write(objects.join("bad.yaml"), vs("bad", "bookinfo", "b", "")).unwrap();
    eventually("the NACK", || async {
        dialer(&hub, "east").and_then(|p| vs_state(&p)) == Some(SyncState::Nacked)
    })
    .await;
    let p = dialer(&hub, "east").unwrap();
    let c = &p.collections[VS];
    let nacked = c.nacked.clone().unwrap();
    assert!(
        nacked.message.contains("bookinfo/bad"),
        "{}",
        nacked.message
    );
    assert_eq!(c.sent.as_ref().unwrap().version, nacked.version);

    let out = ctl(&["status", "--admin", &admin]).await;
    assert!(out.status.success(), "{out:?}");
    let table = String::from_utf8(out.stdout).unwrap();
    let row = table
        .lines()
        .find(|l| l.starts_with("east") && l.contains(VS))
        .unwrap_or_else(|| panic!("no east/{VS} row in\n{table}"));
    assert!(row.contains("NACKED"), "{row}");
    assert!(row.contains("rejected by the test sink"), "{row}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("east ") && l.contains("yes")),
        "{table}"
    );

    // JSON for scripts: full versions, the message.
    let out = ctl(&["status", "--admin", &admin, "-o", "json"]).await;
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let vs_row = &json["clusters"][0]["collections"][VS];
    assert_eq!(json["clusters"][0]["name"], "east");
    assert_eq!(json["clusters"][0]["connected"], true);
    assert_eq!(vs_row["state"], "NACKED");
    assert_eq!(vs_row["nacked"], nacked.version.as_str());
    assert!(
        vs_row["message"]
            .as_str()
            .unwrap()
            .contains("rejected by the test sink")
    );

    // Unrelated changes of other collections don't resend the NACKed version.
    std::fs::write(
        objects.join("dr.yaml"),
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: r, namespace: bookinfo}\nspec: {host: r}\n",
    )
    .unwrap();
    eventually("the DR change is published", || async {
        hub.cache().snapshot("east").is_some_and(|s| {
            !s.collection("istio/networking/v1alpha3/destinationrules")
                .is_empty()
        })
    })
    .await;

    // The fix: a new version, delivered and ACKed.
    std::fs::write(objects.join("bad.yaml"), vs("good", "bookinfo", "b", "")).unwrap();
    eventually("the fix is ACKed", || async {
        dialer(&hub, "east").is_some_and(|p| {
            let c = &p.collections[VS];
            c.state == SyncState::Synced && c.acked.as_ref().unwrap().version != nacked.version
        })
    })
    .await;
    assert_eq!(
        picky.offered.lock().unwrap()[&nacked.version],
        1,
        "the NACKed version was offered exactly once"
    );
    let p = dialer(&hub, "east").unwrap();
    assert_eq!(p.streams, 1, "one stream throughout");
    assert_eq!(p.collections[VS].nacks, 1);
    let out = ctl(&["status", "--admin", &admin]).await;
    let table = String::from_utf8(out.stdout).unwrap();
    let row = table
        .lines()
        .find(|l| l.starts_with("east") && l.contains(VS))
        .unwrap();
    assert!(row.contains("SYNCED"), "{row}");

    assert!(hub.shutdown().await);
    shutdown.cancel();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn meshhubctl_status_fails_clearly_when_the_admin_port_is_unreachable() {
    // A port that was just free.
    let addr = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let out = ctl(&[
        "status",
        "--admin",
        &format!("http://{addr}"),
        "--timeout",
        "5s",
    ])
    .await;
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("cannot reach the hub's admin port") && err.contains(&addr.to_string()),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

//! Disk faults under the agent, over real gRPC on loopback: a hub pushes to
//! an agent whose data directory is a small tmpfs that fills up or turns
//! read-only, or whose files were cut short. The agent NACKs what it can't
//! persist with the OS's reason, keeps serving its last good state, reports
//! the failure on `/status` and `/metrics`, and recovers by itself (it asks
//! again, with backoff) once writes succeed. A torn file is never served and
//! the next push repairs it. A second agent is refused with the holder's
//! name. Garbage bytes, an HTTP/1 request and HTTP/2 noise on the sink and
//! re-serve ports leave the hub's stream and a consumer's unaffected.
//!
//! These tests mount tmpfs file systems (under a temp dir, unmounted on
//! drop), so they need root, as on the project's machines and in CI; without
//! it they fail saying so.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use meshhub_mcp::cache::{self, SnapshotCache, SnapshotWriter};
use meshhub_mcp::ledger::{CollectionStatus, Ledger, Role, SyncState};
use meshhub_mcp::sink::client::{SourceTarget, connect_once};
use meshhub_mcp::sink::{InMemoryUpdater, SinkCollection, SinkConfig};
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use meshhub_mcp::source::{SourceConfig, dialer};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::SinkNode;
use meshhub_proto::transcode::{object_to_resource, parse_yaml};
use meshhub_sink_agent::app::Agent;
use meshhub_sink_agent::config::{Config, Mode};
use meshhub_sink_agent::store::{self, Origin};
use prost::Message as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;

const VS: &str = "istio/networking/v1alpha3/virtualservices";
const DR: &str = "istio/networking/v1alpha3/destinationrules";
const DEADLINE: Duration = Duration::from_secs(20);
const MAX: usize = 16 * 1024 * 1024;

// ---------------------------------------------------------------- mounts

/// A tmpfs mounted on a fresh temp dir; unmounted (lazily) on drop.
struct Tmpfs {
    mnt: PathBuf,
    _dir: tempfile::TempDir,
}

fn mount(args: &[&str], mnt: &Path) {
    let out = Command::new("mount")
        .args(args)
        .arg(mnt)
        .output()
        .expect("run mount(8)");
    assert!(
        out.status.success(),
        "this test needs to mount a tmpfs (run it as root, as CI does): mount {args:?} {}: {}",
        mnt.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

impl Tmpfs {
    fn new(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        mount(
            &["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"],
            &mnt,
        );
        Self { mnt, _dir: dir }
    }

    fn read_only(&self, ro: bool) {
        let opt = if ro { "remount,ro" } else { "remount,rw" };
        mount(&["-o", opt], &self.mnt);
    }

    /// Fills the file system: writes `filler` until it is refused.
    fn fill(&self) -> PathBuf {
        use std::io::Write as _;
        let path = self.mnt.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 4096];
        loop {
            if let Err(e) = f.write_all(&chunk).and_then(|()| f.sync_all()) {
                assert_eq!(e.raw_os_error(), Some(28), "ENOSPC expected: {e}");
                return path;
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
    }
}

// ---------------------------------------------------------------- fixtures

/// `n` virtual services `ns/vs-0..n` with host names of `len` characters.
fn services(n: usize, tag: &str) -> Vec<EncodedResource> {
    let kinds = KindTable::builtin();
    let text: String = (0..n)
        .map(|i| {
            format!(
                "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: vs-{i}, namespace: ns}}\nspec:\n  hosts: [h{i}-{tag}.example.com]\n  http:\n  - route:\n    - destination: {{host: h{i}-{tag}}}\n"
            )
        })
        .collect();
    parse_yaml(&text)
        .into_iter()
        .map(|o| {
            let o = o.unwrap();
            let kind = kinds.by_api_version(&o.api_version, &o.kind).unwrap();
            let r = object_to_resource(kind, &o).unwrap();
            let meta = r.metadata.clone().unwrap();
            EncodedResource {
                name: meta.name.into(),
                version: meta.version.into(),
                encoded: Bytes::from(r.encode_to_vec()),
            }
        })
        .collect()
}

fn destination_rules() -> Vec<EncodedResource> {
    let kinds = KindTable::builtin();
    let o = parse_yaml(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: dr, namespace: ns}\nspec: {host: h0}\n",
    )
    .remove(0)
    .unwrap();
    let r = object_to_resource(kinds.by_api_version(&o.api_version, &o.kind).unwrap(), &o).unwrap();
    let meta = r.metadata.clone().unwrap();
    vec![EncodedResource {
        name: meta.name.into(),
        version: meta.version.into(),
        encoded: Bytes::from(r.encode_to_vec()),
    }]
}

fn snapshot(vs: Vec<EncodedResource>) -> Arc<Snapshot> {
    let mut s = Snapshot::new();
    s.insert(VS.to_owned(), Arc::new(CollectionSnapshot::new(vs)));
    s.insert(
        DR.to_owned(),
        Arc::new(CollectionSnapshot::new(destination_rules())),
    );
    Arc::new(s)
}

fn names_of(rs: &[EncodedResource]) -> BTreeSet<String> {
    rs.iter().map(|r| r.name.to_string()).collect()
}

// ---------------------------------------------------------------- harness

fn config(data: &Path) -> Config {
    Config {
        cluster: "east".into(),
        data_dir: data.to_owned(),
        mode: Mode::Push {
            listen: "127.0.0.1:0".parse().unwrap(),
            tls: None,
        },
        grpc_addr: "127.0.0.1:0".parse().unwrap(),
        grpc_tls: None,
        insecure: false,
        sink_allowed_identities: None,
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        admin_token_file: None,
        collections: vec![VS.to_owned(), DR.to_owned()],
        max_message_bytes: MAX,
        limits: meshhub_mcp::limits::Limits {
            max_message_bytes: MAX,
            ..Default::default()
        },
        incremental: false,
        shutdown_grace: Duration::from_secs(5),
        apply: None,
    }
}

/// A hub that dials the agent's ResourceSink and pushes group `east`.
struct PushHub {
    writer: SnapshotWriter,
    ledger: Ledger,
    shutdown: CancellationToken,
}

impl PushHub {
    fn dial(agent: SocketAddr, initial: Arc<Snapshot>) -> Self {
        let (writer, _) = cache::new();
        writer.set("east", initial);
        let hub = Self {
            writer,
            ledger: Ledger::new(),
            shutdown: CancellationToken::new(),
        };
        let target = dialer::SinkTarget {
            name: "east".into(),
            group: "east".into(),
            endpoint: meshhub_mcp::dial::DialTarget::plaintext(
                Endpoint::from_shared(format!("http://{agent}")).unwrap(),
            ),
            reconnect: Default::default(),
            config: Arc::new(SourceConfig::default()),
            max_message_bytes: MAX,
            replica: None,
        };
        let reader: SnapshotCache = hub.writer.reader();
        tokio::spawn(dialer::run(
            target,
            reader,
            hub.ledger.clone(),
            hub.shutdown.clone(),
        ));
        hub
    }

    fn collection(&self, collection: &str) -> Option<CollectionStatus> {
        self.ledger
            .view()
            .into_iter()
            .find(|p| p.role == Role::Source && p.connected)
            .and_then(|p| p.collections.get(collection).cloned())
    }

    fn acked(&self, collection: &str, version: &str) -> bool {
        self.collection(collection).is_some_and(|c| {
            c.state == SyncState::Synced && c.acked.is_some_and(|a| a.version == version)
        })
    }
}

impl Drop for PushHub {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A local consumer of the agent's re-serve port.
struct Consumer {
    updater: Arc<InMemoryUpdater>,
    shutdown: CancellationToken,
}

impl Consumer {
    fn connect(agent: SocketAddr) -> Self {
        let target = SourceTarget {
            name: "agent".into(),
            endpoint: meshhub_mcp::dial::DialTarget::plaintext(
                Endpoint::from_shared(format!("http://{agent}")).unwrap(),
            ),
            config: Arc::new(SinkConfig {
                node: SinkNode {
                    id: "istiod".into(),
                    annotations: HashMap::new(),
                },
                collections: vec![SinkCollection {
                    name: VS.into(),
                    incremental: false,
                }],
            }),
            reconnect: Default::default(),
            max_message_bytes: MAX,
        };
        let updater = Arc::new(InMemoryUpdater::new());
        let shutdown = CancellationToken::new();
        {
            let updater = updater.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let record = Ledger::new().register(Role::Sink, "agent", "");
                let _ = connect_once(&target, &*updater, &record, &shutdown).await;
            });
        }
        Self { updater, shutdown }
    }

    /// Host names of the virtual services the consumer holds.
    fn hosts(&self) -> BTreeSet<String> {
        let kinds = KindTable::builtin();
        let kind = kinds.by_collection(VS).unwrap();
        self.updater
            .collection(VS)
            .values()
            .map(|r| {
                let o = meshhub_proto::transcode::resource_to_object(kind, r).unwrap();
                o.spec().unwrap()["hosts"][0].as_str().unwrap().to_owned()
            })
            .collect()
    }

    async fn wait_for_tag(&self, tag: &str, n: usize) {
        eventually(
            &format!("{n} services tagged {tag} at the consumer"),
            || {
                let hosts = self.hosts();
                hosts.len() == n && hosts.iter().all(|h| h.contains(&format!("-{tag}.")))
            },
        )
        .await;
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `GET path` on the admin port: the body.
async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    tokio::time::timeout(DEADLINE, s.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    out.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The persisted virtual services of `data`, as the store loads them.
fn persisted(data: &Path) -> (String, BTreeSet<String>) {
    let (_, version, rs) = store::load_one(
        &data.join("v1/collections").join(store::file_name(VS)),
        VS,
        &KindTable::builtin(),
    )
    .unwrap();
    (version, names_of(&rs))
}

/// Pushes `a`, breaks writes with `break_disk`, pushes `b` (NACKed with
/// `reason`, `a` still served, the failure reported, retried with backoff),
/// repairs with `repair` and waits for `b` to be ACKed and served with no
/// new version from the hub.
async fn nack_then_recover(
    data: &Path,
    reason: &str,
    break_disk: impl FnOnce(),
    repair: impl FnOnce(),
) {
    let agent = Agent::start(config(data)).await.unwrap();
    let a = snapshot(services(3, "a"));
    let a_version = a.collection(VS).version().to_owned();
    let hub = PushHub::dial(agent.sink_addr().unwrap(), a);
    eventually("a ACKed", || hub.acked(VS, &a_version)).await;
    let consumer = Consumer::connect(agent.grpc_addr());
    consumer.wait_for_tag("a", 3).await;

    break_disk();
    let b = snapshot(services(40, "b"));
    let b_version = b.collection(VS).version().to_owned();
    hub.writer.set("east", b);
    eventually("b NACKed", || {
        hub.collection(VS)
            .and_then(|c| c.nacked)
            .is_some_and(|n| n.version == b_version)
    })
    .await;
    let first_nack = Instant::now();
    let nack = hub.collection(VS).unwrap().nacked.unwrap();
    assert!(
        nack.message.contains("can't persist") && nack.message.contains(reason),
        "the NACK gives the OS's reason: {}",
        nack.message
    );
    // The last good state is still served, and still on disk.
    assert_eq!(consumer.hosts().len(), 3);
    assert_eq!(persisted(data).0, a_version);
    let status = agent.status().borrow().clone();
    let failure = status.persist_failure.clone().expect("reported on /status");
    assert_eq!(
        (failure.collection.as_str(), failure.version.as_str()),
        (VS, b_version.as_str())
    );
    assert!(failure.message.contains(reason), "{}", failure.message);
    assert_eq!(status.collections[VS].version, a_version);
    let body = http_get(agent.admin_addr(), "/status").await;
    assert!(
        body.contains("persist_failure") && body.contains(reason),
        "{body}"
    );
    let metrics = http_get(agent.admin_addr(), "/metrics").await;
    assert_eq!(
        metric(&metrics, "meshhub_agent_persist_failing"),
        Some(1.0),
        "{metrics}"
    );

    // The agent asks again with backoff (0.5 s, 1 s, …), not in a loop:
    // a third failure comes no sooner than 1.5 s after the first.
    eventually("two retries", || {
        agent
            .status()
            .borrow()
            .persist_failure
            .as_ref()
            .is_some_and(|f| f.consecutive >= 3)
    })
    .await;
    assert!(
        first_nack.elapsed() >= Duration::from_millis(1400),
        "retries back off: 3 failures within {:?}",
        first_nack.elapsed()
    );
    assert_eq!(consumer.hosts().len(), 3, "still the last good state");

    // Writes work again: the agent gets `b` by itself.
    repair();
    eventually("b ACKed after the repair", || hub.acked(VS, &b_version)).await;
    consumer.wait_for_tag("b", 40).await;
    assert_eq!(persisted(data), (b_version, names_of(&services(40, "b"))));
    assert!(agent.status().borrow().persist_failure.is_none());
    let metrics = http_get(agent.admin_addr(), "/metrics").await;
    assert_eq!(metric(&metrics, "meshhub_agent_persist_failing"), Some(0.0));

    drop(consumer);
    drop(hub);
    assert!(agent.shutdown().await);
}

// ---------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_nacked_with_enospc_and_recovers_when_space_returns() {
    let fs = Tmpfs::new("512k");
    let data = fs.mnt.join("data");
    let filler = std::sync::Mutex::new(None);
    nack_then_recover(
        &data,
        "No space left on device",
        || *filler.lock().unwrap() = Some(fs.fill()),
        || std::fs::remove_file(filler.lock().unwrap().take().unwrap()).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_data_dir_is_nacked_and_recovers_when_writable() {
    let fs = Tmpfs::new("4m");
    let data = fs.mnt.join("data");
    nack_then_recover(
        &data,
        "Read-only file system",
        || fs.read_only(true),
        || fs.read_only(false),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_starts_on_a_read_only_data_dir_and_serves_it() {
    let fs = Tmpfs::new("4m");
    let data = fs.mnt.join("data");
    {
        let agent = Agent::start(config(&data)).await.unwrap();
        let a = snapshot(services(3, "a"));
        let version = a.collection(VS).version().to_owned();
        let hub = PushHub::dial(agent.sink_addr().unwrap(), a);
        eventually("a ACKed", || hub.acked(VS, &version)).await;
        drop(hub);
        assert!(agent.shutdown().await);
    }
    fs.read_only(true);
    let agent = Agent::start(config(&data)).await.unwrap();
    let consumer = Consumer::connect(agent.grpc_addr());
    consumer.wait_for_tag("a", 3).await;
    drop(consumer);
    assert!(agent.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_file_is_not_served_and_the_next_push_repairs_it() {
    let data = tempfile::tempdir().unwrap();
    let a = snapshot(services(5, "a"));
    let version = a.collection(VS).version().to_owned();
    {
        let agent = Agent::start(config(data.path())).await.unwrap();
        let hub = PushHub::dial(agent.sink_addr().unwrap(), a.clone());
        eventually("a ACKed", || hub.acked(VS, &version)).await;
        drop(hub);
        assert!(agent.shutdown().await);
    }
    // Cut the file at the end of its fourth resource: what is left still
    // decodes as a `Resources`, with four of the five.
    let file = data
        .path()
        .join("v1/collections")
        .join(store::file_name(VS));
    let bytes = std::fs::read(&file).unwrap();
    let last = a.collection(VS).resources().last().unwrap().clone();
    let cut = bytes
        .windows(last.len())
        .position(|w| w == &last[..])
        .unwrap()
        // the field's key and length before the resource
        - 2;
    std::fs::write(&file, &bytes[..cut]).unwrap();
    assert_eq!(
        meshhub_proto::wire::EncodedResources::decode(&bytes[..cut])
            .unwrap()
            .resources
            .len(),
        4,
        "the cut file decodes: only the seal can tell it is torn"
    );

    let agent = Agent::start(config(data.path())).await.unwrap();
    let status = agent.status().borrow().clone();
    assert_eq!(status.load_errors.len(), 1, "{:?}", status.load_errors);
    assert!(
        status.load_errors[0].contains("torn") && status.load_errors[0].contains("no seal"),
        "{}",
        status.load_errors[0]
    );
    assert!(!status.collections.contains_key(VS), "not served torn");
    assert_eq!(
        status.collections[DR].origin,
        Origin::Disk,
        "the others load"
    );
    let metrics = http_get(agent.admin_addr(), "/metrics").await;
    assert!(
        metric(&metrics, "meshhub_agent_load_errors_total").is_some_and(|n| n >= 1.0),
        "{metrics}"
    );

    // The next push repairs it.
    let hub = PushHub::dial(agent.sink_addr().unwrap(), a);
    eventually("a ACKed again", || hub.acked(VS, &version)).await;
    assert_eq!(persisted(data.path()).1.len(), 5);
    let consumer = Consumer::connect(agent.grpc_addr());
    consumer.wait_for_tag("a", 5).await;
    drop(consumer);
    drop(hub);
    assert!(agent.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_agent_is_refused_with_the_holder_named() {
    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(data.path())).await.unwrap();
    let err = store::error_chain(&Agent::start(config(data.path())).await.unwrap_err());
    assert!(
        err.contains("in use by another agent")
            && err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    assert!(agent.shutdown().await);
}

/// Writes `bytes` on a fresh connection and reads until the agent closes it.
async fn raw_tcp(addr: SocketAddr, bytes: &[u8]) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(bytes).await;
    let mut out = Vec::new();
    let read = tokio::time::timeout(DEADLINE, s.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "the agent closes a bad connection in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_sink_and_reserve_ports_leaves_the_streams_unaffected() {
    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(data.path())).await.unwrap();
    let a = snapshot(services(3, "a"));
    let hub = PushHub::dial(agent.sink_addr().unwrap(), a);
    let consumer = Consumer::connect(agent.grpc_addr());
    consumer.wait_for_tag("a", 3).await;

    let noise: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut h2 = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    h2.extend(&noise);
    for port in [agent.sink_addr().unwrap(), agent.grpc_addr()] {
        raw_tcp(port, &noise).await;
        raw_tcp(port, b"POST /istio.mcp.v1alpha1.ResourceSink/EstablishResourceStream HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc").await;
        raw_tcp(port, &h2).await;
    }

    let b = snapshot(services(4, "b"));
    let version = b.collection(VS).version().to_owned();
    hub.writer.set("east", b);
    eventually("b ACKed", || hub.acked(VS, &version)).await;
    consumer.wait_for_tag("b", 4).await;
    drop(consumer);
    drop(hub);
    assert!(agent.shutdown().await);
}

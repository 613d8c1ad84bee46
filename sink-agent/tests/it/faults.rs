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

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use meshhub_e2e::inproc::{agent_config, push};
use meshhub_e2e::upstream::encoded;
use meshhub_mcp::snapshot::{EncodedResource, Snapshot};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::transcode::{object_to_resource, parse_yaml};
use meshhub_sink_agent::app::Agent;
use meshhub_sink_agent::config::Config;
use meshhub_sink_agent::store::{self, Origin};
use meshhub_testkit::net::raw_tcp;
use meshhub_testkit::objects::{DR, VS};
use meshhub_testkit::{eventually, http};
use prost::Message as _;

use crate::support::{self, Consumer, PushHub, names_of};

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
            encoded(&object_to_resource(kind, &o).unwrap())
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
    vec![encoded(&r)]
}

/// `vs` and the destination rule.
fn snapshot(vs: Vec<EncodedResource>) -> Arc<Snapshot> {
    support::snapshot(BTreeMap::from([
        (VS.to_owned(), vs),
        (DR.to_owned(), destination_rules()),
    ]))
}

// ---------------------------------------------------------------- harness

fn config(data: &Path) -> Config {
    Config {
        collections: vec![VS.to_owned(), DR.to_owned()],
        ..agent_config("east", data, push())
    }
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
    eventually("a ACKed", async || hub.acked(VS, &a_version)).await;
    let consumer = Consumer::connect(agent.grpc_addr(), &[VS]);
    consumer.wait_for_tag("a", 3).await;

    break_disk();
    let b = snapshot(services(40, "b"));
    let b_version = b.collection(VS).version().to_owned();
    hub.publish(b);
    eventually("b NACKed", async || {
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
    let body = http::get(agent.admin_addr(), "/status").await.1;
    assert!(
        body.contains("persist_failure") && body.contains(reason),
        "{body}"
    );
    let metrics = http::get(agent.admin_addr(), "/metrics").await.1;
    assert_eq!(
        http::metric(&metrics, "meshhub_agent_persist_failing"),
        Some(1.0),
        "{metrics}"
    );

    // The agent asks again with backoff (0.5 s, 1 s, …), not in a loop:
    // a third failure comes no sooner than 1.5 s after the first.
    eventually("two retries", async || {
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
    eventually("b ACKed after the repair", async || {
        hub.acked(VS, &b_version)
    })
    .await;
    consumer.wait_for_tag("b", 40).await;
    assert_eq!(persisted(data), (b_version, names_of(&services(40, "b"))));
    assert!(agent.status().borrow().persist_failure.is_none());
    let metrics = http::get(agent.admin_addr(), "/metrics").await.1;
    assert_eq!(
        http::metric(&metrics, "meshhub_agent_persist_failing"),
        Some(0.0)
    );

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
        eventually("a ACKed", async || hub.acked(VS, &version)).await;
        drop(hub);
        assert!(agent.shutdown().await);
    }
    fs.read_only(true);
    let agent = Agent::start(config(&data)).await.unwrap();
    let consumer = Consumer::connect(agent.grpc_addr(), &[VS]);
    consumer.wait_for_tag("a", 3).await;
    drop(consumer);
    assert!(agent.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_file_is_not_served_and_the_next_push_repairs_it() {
    let data = tempfile::tempdir().unwrap();
    let a = snapshot(services(5, "a"));
    let version = a.collection(VS).version().to_owned();
    let dr_version = a.collection(DR).version().to_owned();
    {
        let agent = Agent::start(config(data.path())).await.unwrap();
        let hub = PushHub::dial(agent.sink_addr().unwrap(), a.clone());
        eventually("a ACKed", async || hub.acked(VS, &version)).await;
        // Both persisted before the stop: the test reads DR back below.
        eventually("a's DR ACKed", async || hub.acked(DR, &dr_version)).await;
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
    let metrics = http::get(agent.admin_addr(), "/metrics").await.1;
    assert!(
        http::metric(&metrics, "meshhub_agent_load_errors_total").is_some_and(|n| n >= 1.0),
        "{metrics}"
    );

    // The next push repairs it.
    let hub = PushHub::dial(agent.sink_addr().unwrap(), a);
    eventually("a ACKed again", async || hub.acked(VS, &version)).await;
    assert_eq!(persisted(data.path()).1.len(), 5);
    let consumer = Consumer::connect(agent.grpc_addr(), &[VS]);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_sink_and_reserve_ports_leaves_the_streams_unaffected() {
    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(config(data.path())).await.unwrap();
    let a = snapshot(services(3, "a"));
    let hub = PushHub::dial(agent.sink_addr().unwrap(), a);
    let consumer = Consumer::connect(agent.grpc_addr(), &[VS]);
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
    hub.publish(b);
    eventually("b ACKed", async || hub.acked(VS, &version)).await;
    consumer.wait_for_tag("b", 4).await;
    drop(consumer);
    drop(hub);
    assert!(agent.shutdown().await);
}

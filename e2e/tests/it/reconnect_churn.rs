//! Reconnect churn (issue 13): against a real `meshhub` process, four
//! rounds of 5,000 stream open/close cycles and 500 abrupt connection drops
//! (TCP RST mid-stream, through the fault proxy); afterwards the hub's resident
//! memory, live tokio tasks and open file descriptors return to their
//! baseline within a tolerance, the ledger keeps only its bounded history,
//! and a new consumer is served as before.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use meshhub_e2e::chaos::proxy::FaultProxy;
use meshhub_e2e::*;
use meshhub_proto::mcp::resource_source_client::ResourceSourceClient;
use meshhub_proto::mcp::{RequestResources, SinkNode};
use meshhub_testkit::http::get_blocking;
use meshhub_testkit::objects::{VS, vs};
use meshhub_testkit::{DEADLINE, eventually_blocking};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

/// Rounds of churn.
const ROUNDS: usize = 4;
/// Stream open/close cycles per round.
const CYCLES: usize = 5_000;
/// Abrupt connection drops per round.
const DROPS: usize = 500;
/// Streams in flight at once during the graceful cycles.
const PARALLEL: usize = 32;
/// Connections the graceful cycles share.
const CONNECTIONS: usize = 8;
/// Connections dropped together in one abrupt batch.
const DROP_BATCH: usize = 20;

/// The ledger's retention of disconnected peers (`mcp/src/ledger.rs`
/// `RETAINED_DISCONNECTED`).
const RETAINED_DISCONNECTED: usize = 256;

#[derive(Debug, Clone, Copy)]
struct Usage {
    rss: u64,
    tasks: u64,
    fds: usize,
}

fn usage(hub: &HubProc) -> Usage {
    let (_, body) = get_blocking(hub.admin, "/debug/memory").expect("/debug/memory");
    let m: Value = serde_json::from_str(&body).expect("memory JSON");
    let fds = std::fs::read_dir(format!("/proc/{}/fd", hub.proc.pid()))
        .expect("/proc/<pid>/fd")
        .count();
    Usage {
        rss: m["rss_bytes"].as_u64().expect("rss_bytes"),
        tasks: m["tokio_alive_tasks"].as_u64().expect("tokio_alive_tasks"),
        fds,
    }
}

fn request(nonce: String) -> RequestResources {
    RequestResources {
        sink_node: Some(SinkNode {
            id: "east".to_owned(),
            ..Default::default()
        }),
        collection: VS.to_owned(),
        response_nonce: nonce,
        ..Default::default()
    }
}

/// Opens a stream on `channel`, takes the first response and ACKs it;
/// returns the request sender and the response stream.
async fn open(
    channel: Channel,
) -> (
    mpsc::Sender<RequestResources>,
    tonic::Streaming<meshhub_proto::mcp::Resources>,
) {
    let (tx, rx) = mpsc::channel(2);
    tx.send(request(String::new())).await.expect("request");
    let mut responses = ResourceSourceClient::new(channel)
        .establish_resource_stream(ReceiverStream::new(rx))
        .await
        .expect("stream accepted")
        .into_inner();
    let first = tokio::time::timeout(DEADLINE, responses.message())
        .await
        .expect("first response in time")
        .expect("first response")
        .expect("stream open");
    assert!(!first.resources.is_empty(), "the snapshot is served");
    tx.send(request(first.nonce)).await.expect("ACK");
    (tx, responses)
}

/// One graceful cycle: open, take the snapshot, ACK, half-close, and read
/// to the end the hub gives the stream.
async fn graceful(channel: Channel) {
    let (tx, mut responses) = open(channel).await;
    drop(tx);
    let end = tokio::time::timeout(DEADLINE, async {
        while let Ok(Some(_)) = responses.message().await {}
    })
    .await;
    assert!(end.is_ok(), "the hub ends a half-closed stream");
}

async fn connect(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect")
}

fn hub(dir: &std::path::Path) -> HubProc {
    let objects = dir.join("objects");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::create_dir_all(&logs).unwrap();
    for i in 0..20 {
        std::fs::write(
            objects.join(format!("vs{i}.yaml")),
            vs(&format!("vs{i}"), &format!("host{i}")),
        )
        .unwrap();
    }
    let config = dir.join("meshhub.yaml");
    std::fs::write(
        &config,
        format!(
            "sources:\n  - name: files\n    file: {{path: {}}}\nclusters:\n  - name: east\n    namespaces: [bookinfo]\nlimits:\n  newStreamsPerSecond: 100000\n  newStreamsBurst: 100000\n  connectionStreamsPerSecond: 100000\n  connectionStreamsBurst: 100000\n",
            objects.display()
        ),
    )
    .unwrap();
    HubProc::start("hub", &config, &logs)
}

async fn graceful_cycles(addr: SocketAddr, cycles: usize) {
    let mut channels = Vec::new();
    for _ in 0..CONNECTIONS {
        channels.push(connect(addr).await);
    }
    let channels = Arc::new(channels);
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..PARALLEL {
        let channels = channels.clone();
        workers.spawn(async move {
            for i in (w..cycles).step_by(PARALLEL) {
                graceful(channels[i % CONNECTIONS].clone()).await;
            }
        });
    }
    while let Some(r) = workers.join_next().await {
        r.expect("worker");
    }
}

/// `drops` connections, each with a stream that got its snapshot, reset
/// `DROP_BATCH` at a time by the proxy (RST to both ends); every client
/// sees its stream fail.
async fn abrupt_drops(link: &meshhub_e2e::chaos::proxy::Link, drops: usize) {
    for _ in 0..drops / DROP_BATCH {
        let mut open_streams = Vec::new();
        for _ in 0..DROP_BATCH {
            let channel = connect(link.addr()).await;
            open_streams.push(open(channel).await);
        }
        link.drop_all();
        for (_tx, mut responses) in open_streams {
            let end = tokio::time::timeout(DEADLINE, responses.message())
                .await
                .expect("the reset reaches the client");
            assert!(end.is_err(), "a reset stream fails: {end:?}");
        }
    }
}

#[test]
fn churn_leaves_memory_tasks_fds_and_the_ledger_at_baseline() {
    let _turn = turn(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let hub = hub(dir.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let proxy = FaultProxy::new();
    let link = proxy.link("churn", hub.grpc);

    // Warm-up: the paths the churn takes, allocated once.
    rt.block_on(graceful_cycles(hub.grpc, 1000));
    rt.block_on(abrupt_drops(&link, 5 * DROP_BATCH));
    let baseline = eventually_blocking("the warm-up's streams to end", || {
        let u = usage(&hub);
        let peers = hub.status()["consumers"].as_array().map_or(0, Vec::len);
        (peers <= RETAINED_DISCONNECTED).then_some(u)
    });
    eprintln!("churn: baseline {baseline:?}");

    // Rounds of churn: a leak grows in every round; memory the allocator
    // keeps after the bursts settles after the first rounds.
    let mut rounds = Vec::new();
    for round in 1..=ROUNDS {
        let started = Instant::now();
        rt.block_on(graceful_cycles(hub.grpc, CYCLES));
        let graceful_took = started.elapsed();
        let started = Instant::now();
        rt.block_on(abrupt_drops(&link, DROPS));
        let drops_took = started.elapsed();
        // Tasks and fds exactly back: every stream's task and socket gone.
        let after = eventually_blocking("tasks and fds back to baseline", || {
            let u = usage(&hub);
            (u.tasks <= baseline.tasks && u.fds <= baseline.fds).then_some(u)
        });
        eprintln!(
            "churn: round {round}: {} graceful cycles in {graceful_took:?}, {} abrupt drops in {drops_took:?}; after: {after:?}",
            CYCLES, DROPS
        );
        rounds.push(after);
    }
    // RSS within 16 MiB of the baseline, and the growth is not sustained:
    // a leak grows in every round, memory the allocator keeps after the
    // bursts grows in steps and then stays. Measured (debug hub, mimalloc),
    // round-to-round deltas: −0.19, +3.45, +0.01 MB; +1.0, +1.4, 0.0 MB;
    // six rounds +0.24, +1.19, −0.02, −0.10, −0.03 MB. So at least one
    // round must add at most 1 MiB: a leak of ~190 bytes per stream cycle
    // (5,500 per round) or more fails. (Bounding one pair of rounds, as
    // this test first did, failed in CI on a single step of +2.8 and of
    // +3.4 MB that the next round did not repeat.)
    const RSS_TOLERANCE: u64 = 16 << 20;
    const ROUND_TOLERANCE: u64 = 1 << 20;
    let last = rounds[ROUNDS - 1];
    assert!(
        last.rss <= baseline.rss + RSS_TOLERANCE,
        "RSS {} grew over baseline {} + {RSS_TOLERANCE}",
        last.rss,
        baseline.rss
    );
    let deltas: Vec<i64> = rounds
        .windows(2)
        .map(|w| w[1].rss as i64 - w[0].rss as i64)
        .collect();
    assert!(
        deltas.iter().any(|d| *d <= ROUND_TOLERANCE as i64),
        "RSS grew by more than {ROUND_TOLERANCE} in every round: {deltas:?} (a leak?)"
    );

    // The ledger keeps its bounded history only.
    let status = hub.status();
    let peers = status["consumers"].as_array().map_or(0, Vec::len);
    eprintln!("churn: ledger rows after the churn: {peers}");
    assert!(
        peers <= RETAINED_DISCONNECTED,
        "ledger rows {peers} > {RETAINED_DISCONNECTED}"
    );

    // Still serving.
    rt.block_on(async {
        let (_tx, _rx) = open(connect(hub.grpc).await).await;
    });
}

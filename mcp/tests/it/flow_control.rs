//! Flow control of a dial-in port (`limits` + `listen`), over real gRPC on
//! loopback: a flood of new streams is rate-limited while an established
//! consumer keeps getting updates; a consumer that never reads is cut off
//! after the send deadline and its connection closed.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use meshhub_mcp::ledger::Role;
use meshhub_mcp::limits::Limits;
use meshhub_mcp::source::SourceConfig;
use meshhub_testkit::eventually_some;
use meshhub_testkit::mcp::{self, Subscription, channel, first_version};
use meshhub_testkit::objects::VS;
use tonic::transport::{Channel, Endpoint};

use crate::support::Source;

/// A subscription to virtual services on `channel`.
async fn subscribe(channel: Channel) -> Result<Subscription, tonic::Status> {
    Subscription::open(channel, mcp::subscribe(VS, None)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_new_streams_is_limited_while_established_consumers_get_updates() {
    let server = Source::start(
        Limits {
            new_streams_per_second: NonZeroU32::new(1).unwrap(),
            new_streams_burst: NonZeroU32::new(10).unwrap(),
            connection_streams_per_second: NonZeroU32::new(1).unwrap(),
            connection_streams_burst: NonZeroU32::new(3).unwrap(),
            ..Limits::default()
        },
        SourceConfig::default(),
    )
    .await;
    let mut established = subscribe(channel(server.addr).await).await.unwrap();
    let first = established.next().await.unwrap();
    established.ack(&first).await;

    // One connection opening streams as fast as it can: 2 more get in (its
    // burst of 3), the rest are refused at once.
    let flooder = channel(server.addr).await;
    let mut accepted = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..10 {
        match subscribe(flooder.clone()).await {
            Ok(mut s) => match s.next().await {
                Ok(_) => accepted.push(s),
                Err(e) => refused.push(e),
            },
            Err(e) => refused.push(e),
        }
    }
    assert_eq!(accepted.len(), 3, "the connection's burst: {refused:?}");
    assert!(
        refused
            .iter()
            .all(|e| e.code() == tonic::Code::ResourceExhausted
                && e.message().contains("this connection")),
        "{refused:?}"
    );
    // Many connections: the port's bucket (10, of which 4 are used) runs out.
    let mut port_refusals = 0;
    for _ in 0..10 {
        match subscribe(channel(server.addr).await).await {
            Ok(mut s) => {
                if let Err(e) = s.next().await {
                    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
                    assert!(e.message().contains("this server"), "{e:?}");
                    port_refusals += 1;
                }
            }
            Err(e) => {
                assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
                port_refusals += 1;
            }
        }
    }
    assert!(
        port_refusals >= 3,
        "the port's burst is 10: {port_refusals} refusals"
    );

    // The established consumer still gets every update.
    server.publish("2", 10);
    let update = established.next().await.unwrap();
    assert_eq!(first_version(&update), "2");
    server.shutdown.cancel();
}

fn rss_kib() -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_never_reads_is_cut_off() {
    let timeout = Duration::from_millis(300);
    let server = Source::start(
        Limits {
            send_timeout: Some(timeout),
            ..Limits::default()
        },
        SourceConfig::default(),
    )
    .await;
    // 3 MiB: far beyond what HTTP/2 windows let through unread.
    server.publish("big", 3 << 20);
    let rss_before = rss_kib();
    // A client whose windows are the HTTP/2 minimum, that never reads.
    let slow = Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .connect()
        .await
        .unwrap();
    let started = Instant::now();
    let mut stuck = subscribe(slow).await.unwrap();
    // A healthy consumer on its own connection.
    let mut healthy = subscribe(channel(server.addr).await).await.unwrap();
    let big = healthy.next().await.unwrap();
    assert_eq!(first_version(&big), "big");

    // The server gives up on the stuck stream after the deadline.
    let cut = eventually_some("the stuck consumer to be cut", async || {
        server.ledger.view().into_iter().find(|p| {
            p.role == Role::Source
                && !p.connected
                && p.last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("did not read"))
        })
    })
    .await;
    assert!(started.elapsed() >= timeout);
    eprintln!(
        "cut after {:?}: {:?}; RSS before {rss_before:?} KiB, after {:?} KiB",
        started.elapsed(),
        cut.last_error,
        rss_kib()
    );
    // Its connection is closed: reading now fails instead of hanging.
    let mut failed = false;
    for _ in 0..200 {
        match tokio::time::timeout(Duration::from_secs(10), stuck.message()).await {
            Ok(Ok(Some(_))) => continue,
            Ok(Ok(None)) | Ok(Err(_)) => {
                failed = true;
                break;
            }
            Err(_) => break,
        }
    }
    assert!(failed, "the stuck consumer's stream ends");
    // The healthy consumer is untouched.
    healthy.ack(&big).await;
    server.publish("2", 10);
    assert_eq!(first_version(&healthy.next().await.unwrap()), "2");
    server.shutdown.cancel();
}

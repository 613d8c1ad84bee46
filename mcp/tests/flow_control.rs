//! Flow control of a dial-in port (`limits` + `listen`), over real gRPC on
//! loopback: a flood of new streams is rate-limited while an established
//! consumer keeps getting updates; a consumer that never reads is cut off
//! after the send deadline and its connection closed.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use meshhub_mcp::cache::{self, SnapshotWriter};
use meshhub_mcp::group::SingleGroup;
use meshhub_mcp::ledger::{Ledger, Role};
use meshhub_mcp::limits::{Limits, StreamLimitLayer};
use meshhub_mcp::listen;
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use meshhub_mcp::source::SourceConfig;
use meshhub_mcp::source::server::{Shared, SourceServer};
use meshhub_proto::mcp::resource_source_client::ResourceSourceClient;
use meshhub_proto::mcp::{Metadata, RequestResources, Resource, Resources};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::Streaming;
use tonic::transport::{Channel, Endpoint};

const VS: &str = "istio/networking/v1alpha3/virtualservices";

struct Server {
    addr: SocketAddr,
    writer: SnapshotWriter,
    ledger: Ledger,
    shutdown: CancellationToken,
}

impl Server {
    /// Publishes one resource of `size` body bytes at `version`.
    fn publish(&self, version: &str, size: usize) {
        let r = Resource {
            metadata: Some(Metadata {
                name: "ns/a".into(),
                version: version.into(),
                ..Default::default()
            }),
            body: Some(prost_types::Any {
                type_url: "type.googleapis.com/google.protobuf.BytesValue".into(),
                value: vec![7; size],
            }),
        };
        let resource = EncodedResource {
            name: "ns/a".into(),
            version: version.into(),
            encoded: bytes::Bytes::from(prost::Message::encode_to_vec(&r)),
        };
        self.writer.set(
            "east",
            Arc::new(
                Snapshot::new()
                    .with_collection(VS, Arc::new(CollectionSnapshot::new(vec![resource]))),
            ),
        );
    }
}

async fn start(limits: Limits) -> Server {
    let (writer, reader) = cache::new();
    let shutdown = CancellationToken::new();
    let tasks = TaskTracker::new();
    let ledger = Ledger::new();
    let service = SourceServer::new(Shared {
        cache: reader,
        groups: Arc::new(SingleGroup("east".into())),
        ledger: ledger.clone(),
        config: Arc::new(SourceConfig {
            send_timeout: limits.send_timeout,
            ..SourceConfig::default()
        }),
        shutdown: shutdown.clone(),
        tasks: tasks.clone(),
    })
    .into_service(limits.max_message_bytes);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = meshhub_mcp::transport::server_with(&limits)
        .layer(StreamLimitLayer::new(&limits))
        .add_service(service);
    tasks.spawn(listen::serve(
        router,
        listener,
        None,
        "grpc",
        tasks.clone(),
        shutdown.clone(),
    ));
    let server = Server {
        addr,
        writer,
        ledger,
        shutdown,
    };
    server.publish("1", 10);
    server
}

struct Sub {
    requests: mpsc::Sender<RequestResources>,
    responses: Streaming<Resources>,
}

impl Sub {
    async fn next(&mut self) -> Result<Resources, tonic::Status> {
        tokio::time::timeout(Duration::from_secs(10), self.responses.message())
            .await
            .expect("an answer in time")
            .and_then(|m| m.ok_or_else(|| tonic::Status::unavailable("stream ended")))
    }

    async fn ack(&self, r: &Resources) {
        self.requests
            .send(RequestResources {
                collection: VS.into(),
                response_nonce: r.nonce.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
}

async fn subscribe(channel: Channel) -> Result<Sub, tonic::Status> {
    let (requests, rx) = mpsc::channel(4);
    requests
        .send(RequestResources {
            collection: VS.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let responses = ResourceSourceClient::new(channel)
        .establish_resource_stream(ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok(Sub {
        requests,
        responses,
    })
}

fn version(r: &Resources) -> &str {
    &r.resources[0].metadata.as_ref().unwrap().version
}

async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_new_streams_is_limited_while_established_consumers_get_updates() {
    let server = start(Limits {
        new_streams_per_second: NonZeroU32::new(1).unwrap(),
        new_streams_burst: NonZeroU32::new(10).unwrap(),
        connection_streams_per_second: NonZeroU32::new(1).unwrap(),
        connection_streams_burst: NonZeroU32::new(3).unwrap(),
        ..Limits::default()
    })
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
    assert_eq!(version(&update), "2");
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
    let server = start(Limits {
        send_timeout: Some(timeout),
        ..Limits::default()
    })
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
    assert_eq!(version(&big), "big");

    // The server gives up on the stuck stream after the deadline.
    let deadline = started + Duration::from_secs(10);
    let cut = loop {
        let cut = server.ledger.view().into_iter().find(|p| {
            p.role == Role::Source
                && !p.connected
                && p.last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("did not read"))
        });
        if let Some(p) = cut {
            break p;
        }
        assert!(Instant::now() < deadline, "the stuck consumer was not cut");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
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
        match tokio::time::timeout(Duration::from_secs(10), stuck.responses.message()).await {
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
    assert_eq!(version(&healthy.next().await.unwrap()), "2");
    server.shutdown.cancel();
}

//! Hostile and broken input on a dial-in gRPC port (the hub's, and the
//! agent's re-serve port: both are `transport::server_with` +
//! `StreamLimitLayer` + `listen::serve`), over real sockets on loopback,
//! while a healthy consumer streams on the same port: garbage bytes, an
//! HTTP/1 request, an HTTP/2 preface followed by garbage, a stream whose
//! message is not protobuf, one that is too large, and one that sends
//! requests (stale ACKs) faster than allowed. Each bad stream ends with a
//! clear status; the server stays up and the healthy consumer keeps getting
//! every update.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf as _, BufMut as _};
use meshhub_mcp::cache::{self, SnapshotWriter};
use meshhub_mcp::group::SingleGroup;
use meshhub_mcp::ledger::Ledger;
use meshhub_mcp::limits::{Limits, StreamLimitLayer};
use meshhub_mcp::listen;
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use meshhub_mcp::source::SourceConfig;
use meshhub_mcp::source::server::{Shared, SourceServer};
use meshhub_proto::mcp::resource_source_client::ResourceSourceClient;
use meshhub_proto::mcp::{Metadata, RequestResources, Resource, Resources};
use prost::Message as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status, Streaming};

const VS: &str = "istio/networking/v1alpha3/virtualservices";
const PATH: &str = "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream";
const MAX: usize = 64 * 1024;
const DEADLINE: Duration = Duration::from_secs(10);

struct Server {
    addr: SocketAddr,
    writer: SnapshotWriter,
    _shutdown: tokio_util::sync::DropGuard,
}

impl Server {
    fn publish(&self, version: &str) {
        let r = Resource {
            metadata: Some(Metadata {
                name: "ns/a".into(),
                version: version.into(),
                ..Default::default()
            }),
            body: Some(prost_types::Any {
                type_url: "type.googleapis.com/google.protobuf.BytesValue".into(),
                value: vec![7; 10],
            }),
        };
        let resource = EncodedResource {
            name: "ns/a".into(),
            version: version.into(),
            encoded: bytes::Bytes::from(r.encode_to_vec()),
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
    let service = SourceServer::new(Shared {
        cache: reader,
        groups: Arc::new(SingleGroup("east".into())),
        ledger: Ledger::new(),
        config: Arc::new(SourceConfig {
            send_timeout: limits.send_timeout,
            request_rate: Some(limits.request_rate()),
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
        _shutdown: shutdown.drop_guard(),
    };
    server.publish("1");
    server
}

async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// A well-behaved consumer: ACKs every response.
struct Healthy {
    requests: mpsc::Sender<RequestResources>,
    responses: Streaming<Resources>,
}

impl Healthy {
    async fn connect(addr: SocketAddr) -> Self {
        let (requests, rx) = mpsc::channel(4);
        requests
            .send(RequestResources {
                collection: VS.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let responses = ResourceSourceClient::new(channel(addr).await)
            .establish_resource_stream(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Self {
            requests,
            responses,
        }
    }

    /// Waits for the response carrying `version`, ACKing it.
    async fn expect(&mut self, version: &str) {
        let r = tokio::time::timeout(DEADLINE, self.responses.message())
            .await
            .expect("an update in time")
            .expect("the healthy stream is up")
            .expect("the healthy stream is open");
        assert_eq!(r.resources[0].metadata.as_ref().unwrap().version, version);
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

/// Sends raw bytes as gRPC messages; reads responses as raw bytes.
#[derive(Clone, Copy, Default)]
struct Raw;

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Self;
    type Decoder = Self;
    fn encoder(&mut self) -> Self {
        *self
    }
    fn decoder(&mut self) -> Self {
        *self
    }
}

/// Opens a stream that sends `messages` (raw bytes each) and returns how
/// it ended.
async fn raw_stream(addr: SocketAddr, messages: Vec<Vec<u8>>) -> Status {
    let mut grpc = tonic::client::Grpc::new(channel(addr).await)
        .max_encoding_message_size(usize::MAX)
        .max_decoding_message_size(usize::MAX);
    grpc.ready().await.unwrap();
    // Keep the request stream open after the messages: the server, not the
    // client's end of input, must end the stream.
    let (tx, rx) = mpsc::channel(messages.len() + 1);
    for m in messages {
        tx.send(m).await.unwrap();
    }
    let outcome = async {
        let mut responses = grpc
            .streaming(
                tonic::Request::new(ReceiverStream::new(rx)),
                http::uri::PathAndQuery::from_static(PATH),
                Raw,
            )
            .await?
            .into_inner();
        loop {
            if responses.message().await?.is_none() {
                return Err(Status::ok("the server ended the stream without a status"));
            }
        }
    };
    let status: Result<(), Status> = tokio::time::timeout(DEADLINE, outcome)
        .await
        .expect("the bad stream ends in time");
    drop(tx);
    status.unwrap_err()
}

/// Writes `bytes` on a fresh TCP connection and reads until the server
/// closes it; returns what it answered.
async fn raw_tcp(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may close before reading everything: ignore write errors.
    let _ = s.write_all(bytes).await;
    let mut out = Vec::new();
    let read = tokio::time::timeout(DEADLINE, s.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "the server closes a bad connection in time");
    out
}

fn garbage(n: usize, seed: u64) -> Vec<u8> {
    // xorshift: deterministic noise without a dependency.
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x & 0xff) as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_http1_and_bad_frames_leave_the_port_and_its_consumers_unaffected() {
    let server = start(Limits {
        max_message_bytes: MAX,
        ..Limits::default()
    })
    .await;
    let mut healthy = Healthy::connect(server.addr).await;
    healthy.expect("1").await;

    // Noise instead of HTTP/2.
    raw_tcp(server.addr, &garbage(256 * 1024, 7)).await;
    // An HTTP/1 request: refused (HTTP/2 only), connection closed.
    raw_tcp(
        server.addr,
        b"GET /istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    // A valid HTTP/2 preface, then noise instead of frames.
    let mut h2 = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    h2.extend(garbage(64 * 1024, 11));
    raw_tcp(server.addr, &h2).await;

    server.publish("2");
    healthy.expect("2").await;

    // A message that is not a RequestResources.
    let status = raw_stream(server.addr, vec![vec![0xff; 64]]).await;
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(status.message().contains("decode"), "{status:?}");
    // A message larger than the port accepts.
    let status = raw_stream(server.addr, vec![vec![0x0a; MAX * 2]]).await;
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert!(
        status.message().contains("message length too large"),
        "{status:?}"
    );

    server.publish("3");
    healthy.expect("3").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_spams_requests_is_cut_and_the_others_are_not() {
    let server = start(Limits {
        stream_requests_per_second: NonZeroU32::new(20).unwrap(),
        stream_requests_burst: NonZeroU32::new(50).unwrap(),
        max_message_bytes: MAX,
        ..Limits::default()
    })
    .await;
    let mut healthy = Healthy::connect(server.addr).await;
    healthy.expect("1").await;

    // A subscription, then stale ACKs as fast as the socket takes them.
    let spam: Vec<Vec<u8>> = std::iter::once(
        RequestResources {
            collection: VS.into(),
            ..Default::default()
        }
        .encode_to_vec(),
    )
    .chain((0..500).map(|i| {
        RequestResources {
            collection: VS.into(),
            response_nonce: format!("stale-{i}"),
            ..Default::default()
        }
        .encode_to_vec()
    }))
    .collect();
    let status = raw_stream(server.addr, spam).await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("faster than 20/s"), "{status:?}");

    // The healthy stream, at its honest pace, is untouched.
    for v in ["2", "3", "4"] {
        server.publish(v);
        healthy.expect(v).await;
    }
}

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

use bytes::{Buf as _, BufMut as _};
use meshhub_mcp::limits::Limits;
use meshhub_mcp::source::SourceConfig;
use meshhub_proto::mcp::RequestResources;
use meshhub_testkit::mcp::{Subscription, channel, first_version};
use meshhub_testkit::net::{garbage, raw_tcp};
use meshhub_testkit::objects::VS;
use meshhub_testkit::within;
use prost::Message as _;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};

use crate::support::Source;

const PATH: &str = "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream";
const MAX: usize = 64 * 1024;

/// A well-behaved consumer: subscribed to virtual services, ACKing.
async fn healthy(addr: SocketAddr) -> Subscription {
    Subscription::connect(addr, VS, None).await.unwrap()
}

/// Waits for the response carrying `version` on `healthy`, ACKing it.
async fn expect(healthy: &mut Subscription, version: &str) {
    let r = healthy.recv().await;
    assert_eq!(first_version(&r), version);
    healthy.ack(&r).await;
}

/// The port with `limits`, rate-limiting requests per stream as the hub's.
async fn start(limits: Limits) -> Source {
    let config = SourceConfig {
        request_rate: Some(limits.request_rate()),
        ..SourceConfig::default()
    };
    Source::start(limits, config).await
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
    let status: Result<(), Status> = within("the bad stream to end", outcome).await;
    drop(tx);
    status.unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_http1_and_bad_frames_leave_the_port_and_its_consumers_unaffected() {
    let server = start(Limits {
        max_message_bytes: MAX,
        ..Limits::default()
    })
    .await;
    let mut healthy = healthy(server.addr).await;
    expect(&mut healthy, "1").await;

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

    server.publish("2", 10);
    expect(&mut healthy, "2").await;

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

    server.publish("3", 10);
    expect(&mut healthy, "3").await;
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
    let mut healthy = healthy(server.addr).await;
    expect(&mut healthy, "1").await;

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
        server.publish(v, 10);
        expect(&mut healthy, v).await;
    }
}

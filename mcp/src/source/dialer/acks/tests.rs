use std::convert::Infallible;

use bytes::Bytes;
use futures::StreamExt as _;
use http_body::Frame;
use http_body_util::StreamBody;
use meshhub_proto::mcp::RequestResources;
use prost::Message as _;
use tonic::Code;

use super::{Acks, KEEP};

type Frames =
    StreamBody<futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

/// `message` framed as gRPC does it.
fn framed(message: &RequestResources) -> Vec<u8> {
    let body = message.encode_to_vec();
    let mut out = vec![0];
    out.extend_from_slice(&u32::try_from(body.len()).expect("small").to_be_bytes());
    out.extend_from_slice(&body);
    out
}

fn ack(nonce: &str) -> RequestResources {
    RequestResources {
        collection: "istio/networking/v1alpha3/virtualservices".into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

/// A first request declaring `n` resources, as a sink with state sends.
fn declaring(n: usize) -> RequestResources {
    RequestResources {
        collection: "istio/networking/v1alpha3/virtualservices".into(),
        initial_resource_versions: (0..n)
            .map(|i| (format!("default/reviews-{i:05}"), format!("{i:016x}")))
            .collect(),
        ..Default::default()
    }
}

fn trailers(code: i32) -> http::HeaderMap {
    let mut t = http::HeaderMap::new();
    t.insert("grpc-status", code.into());
    t.insert("grpc-message", "said%20so".parse().expect("header"));
    t
}

fn body(data: Vec<Vec<u8>>, end: Option<http::HeaderMap>) -> Frames {
    let mut frames: Vec<Result<Frame<Bytes>, Infallible>> = data
        .into_iter()
        .map(|d| Ok(Frame::data(Bytes::from(d))))
        .collect();
    frames.extend(end.map(|t| Ok(Frame::trailers(t))));
    StreamBody::new(futures::stream::iter(frames))
}

/// Everything `data` and `end` carry, answered with `http` (a 1 MiB
/// message limit).
async fn read(
    data: Vec<Vec<u8>>,
    end: Option<http::HeaderMap>,
    http: http::StatusCode,
) -> (Vec<RequestResources>, Option<tonic::Status>) {
    all(Acks::new(body(data, end), http, 1 << 20)).await
}

async fn all(mut acks: Acks<Frames>) -> (Vec<RequestResources>, Option<tonic::Status>) {
    let mut got = Vec::new();
    while let Some(item) = acks.next().await {
        match item {
            Ok(m) => got.push(m),
            Err(status) => {
                assert!(acks.next().await.is_none(), "nothing after an error");
                return (got, Some(status));
            }
        }
    }
    (got, None)
}

#[tokio::test]
async fn messages_are_read_however_the_frames_cut_them() {
    let sent = [declaring(3), ack("1"), ack("2")];
    let bytes: Vec<u8> = sent.iter().flat_map(framed).collect();
    // One byte per frame, then all in one frame.
    let one_by_one = bytes.iter().map(|b| vec![*b]).collect();
    for data in [one_by_one, vec![bytes.clone()]] {
        let acks = Acks::new(body(data, Some(trailers(0))), http::StatusCode::OK, 1 << 20);
        let (got, end) = all(acks).await;
        assert_eq!(got, sent);
        assert!(end.is_none(), "grpc-status 0 is a clean end: {end:?}");
    }
}

#[tokio::test]
async fn the_buffer_a_large_first_request_grew_is_given_back() {
    let first = framed(&declaring(200));
    assert!(first.len() > 8 * KEEP, "{} bytes", first.len());
    let mut acks = Acks::new(
        body(vec![first, framed(&ack("1"))], None),
        http::StatusCode::OK,
        1 << 20,
    );
    let got = acks.next().await.expect("a message").expect("decodes");
    assert_eq!(got.initial_resource_versions.len(), 200);
    // The ACK behind it is read from the next frame into a small buffer.
    assert_eq!(acks.buf.capacity(), 0, "the large buffer was let go");
    let got = acks.next().await.expect("a message").expect("decodes");
    assert_eq!(got.response_nonce, "1");
    assert!(acks.buf.capacity() <= KEEP, "{}", acks.buf.capacity());
}

#[tokio::test]
async fn a_buffer_grown_by_a_frame_of_many_messages_is_given_back() {
    // The large request and ACKs in one frame; then ACKs in another.
    let mut one: Vec<u8> = framed(&declaring(200));
    for nonce in ["1", "2"] {
        one.extend(framed(&ack(nonce)));
    }
    let mut acks = Acks::new(
        body(vec![one, framed(&ack("3"))], None),
        http::StatusCode::OK,
        1 << 20,
    );
    for _ in 0..3 {
        acks.next().await.expect("a message").expect("decodes");
    }
    assert_eq!(acks.buf.capacity(), 0, "let go once empty");
    let last = acks.next().await.expect("a message").expect("decodes");
    assert_eq!(last.response_nonce, "3");
    assert!(acks.buf.capacity() <= KEEP, "{}", acks.buf.capacity());
}

#[tokio::test]
async fn the_status_comes_from_the_trailers_or_the_http_status() {
    let (got, end) = read(
        vec![framed(&ack("1"))],
        Some(trailers(13)),
        http::StatusCode::OK,
    )
    .await;
    assert_eq!(got.len(), 1);
    let end = end.expect("an error status");
    assert_eq!((end.code(), end.message()), (Code::Internal, "said so"));
    for (http, code) in [
        (http::StatusCode::OK, Code::Unknown),
        (http::StatusCode::SERVICE_UNAVAILABLE, Code::Unavailable),
        (http::StatusCode::NOT_FOUND, Code::Unimplemented),
    ] {
        let (_, end) = read(vec![], None, http).await;
        assert_eq!(
            end.expect("no status is an error").code(),
            code,
            "HTTP {http}"
        );
    }
}

#[tokio::test]
async fn bad_frames_end_the_stream_with_a_clear_status() {
    let mut compressed = framed(&ack("1"));
    compressed[0] = 1;
    let big = framed(&declaring(50));
    let limit = big.len() - 6;
    let mut cut = framed(&ack("1"));
    cut.truncate(cut.len() - 1);
    for (data, limit, code, says) in [
        (compressed, 1 << 20, Code::Internal, "compressed"),
        (
            vec![60, 104, 116, 109, 108, 62],
            1 << 20,
            Code::Internal,
            "flag 60",
        ),
        (big, limit, Code::OutOfRange, "over the limit"),
        (cut, 1 << 20, Code::Internal, "inside a message"),
        (
            vec![0, 0, 0, 0, 2, 0xff, 0xff],
            1 << 20,
            Code::Internal,
            "decoding",
        ),
    ] {
        let (got, end) = all(Acks::new(
            body(vec![data], Some(trailers(0))),
            http::StatusCode::OK,
            limit,
        ))
        .await;
        assert!(got.is_empty());
        let end = end.expect("an error");
        assert_eq!(end.code(), code, "{end:?}");
        assert!(end.message().contains(says), "{end:?}");
    }
}

#[tokio::test]
async fn a_large_request_split_across_frames_leaves_no_large_buffer() {
    // As h2 carries it: frames of at most 16 KiB.
    let mut bytes = framed(&declaring(400));
    assert!(bytes.len() > 16 * 1024, "{} bytes", bytes.len());
    bytes.extend(framed(&ack("1")));
    let frames = bytes.chunks(16 * 1024).map(<[u8]>::to_vec).collect();
    let mut acks = Acks::new(
        body(frames, Some(trailers(0))),
        http::StatusCode::OK,
        1 << 20,
    );
    let first = acks.next().await.expect("a message").expect("decodes");
    assert_eq!(first.initial_resource_versions.len(), 400);
    let second = acks.next().await.expect("a message").expect("decodes");
    assert_eq!(second.response_nonce, "1");
    assert_eq!(acks.buf.capacity(), 0, "let go once empty");
    assert!(acks.next().await.is_none());
}

#[tokio::test]
async fn a_frame_of_many_small_messages_leaves_no_large_buffer() {
    let many: Vec<u8> = (0..40).flat_map(|i| framed(&ack(&i.to_string()))).collect();
    assert!(many.len() > 2 * KEEP, "{} bytes", many.len());
    let mut acks = Acks::new(body(vec![many], None), http::StatusCode::OK, 1 << 20);
    for i in 0..40 {
        let got = acks.next().await.expect("a message").expect("decodes");
        assert_eq!(got.response_nonce, i.to_string());
    }
    assert_eq!(acks.buf.capacity(), 0);
}

#[tokio::test]
async fn the_sinks_status_wins_over_a_cut_message() {
    let mut cut = framed(&ack("1"));
    cut.truncate(cut.len() - 1);
    let (_, end) = read(vec![cut], Some(trailers(14)), http::StatusCode::OK).await;
    assert_eq!(end.expect("an error").code(), Code::Unavailable);
}

#[tokio::test]
async fn an_answer_that_is_not_grpc_is_judged_by_its_http_status() {
    let page = b"<html><body>502 Bad Gateway</body></html>".to_vec();
    let (got, end) = read(vec![page], None, http::StatusCode::BAD_GATEWAY).await;
    assert!(got.is_empty());
    let end = end.expect("an error");
    assert_eq!(end.code(), Code::Unavailable, "{end:?}");
    assert!(end.message().contains("502"), "{end:?}");
    // Trailers without a grpc-status on HTTP 200: unknown, as tonic says.
    let mut bare = http::HeaderMap::new();
    bare.insert("x-other", "1".parse().expect("header"));
    let (_, end) = read(vec![], Some(bare), http::StatusCode::OK).await;
    assert_eq!(end.expect("an error").code(), Code::Unknown);
}

#[tokio::test]
async fn status_details_that_are_not_base64_do_not_end_the_dialer() {
    let mut t = trailers(13);
    t.insert(
        "grpc-status-details-bin",
        "!!!not base64!!!".parse().expect("header"),
    );
    let (_, end) = read(vec![], Some(t), http::StatusCode::OK).await;
    let end = end.expect("an error");
    assert_eq!((end.code(), end.message()), (Code::Internal, "said so"));
}

#[tokio::test]
async fn a_trailers_only_answer_has_no_requests() {
    let (got, end) = all(Acks::empty(body(vec![framed(&ack("1"))], None))).await;
    assert!(got.is_empty() && end.is_none());
}

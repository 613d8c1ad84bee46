use std::sync::Arc;

use bytes::Bytes;
use prost::Message;

use meshhub_proto::wire::SharedResources;

use super::*;

fn resources() -> Vec<Bytes> {
    // Small ones are copied, large ones go out as they are.
    (0..40)
        .map(|i| {
            let len = if i % 7 == 0 {
                ZERO_COPY_MIN + i * 100
            } else {
                10 + i * 31
            };
            Bytes::from(vec![b'a' + (i % 26) as u8; len])
        })
        .collect()
}

fn mcp(nonce: &str) -> EncodedResources {
    EncodedResources {
        system_version_info: "v1".into(),
        collection: "istio/networking/v1alpha3/virtualservices".into(),
        resources: Arc::new(resources().into()),
        removed_resources: vec!["ns/gone".into(), "ns/old".into()],
        nonce: nonce.into(),
        incremental: true,
    }
}

/// Every data frame and the trailers of a body.
async fn drain<B: http_body::Body<Data = Bytes, Error = Status> + Unpin>(
    mut body: B,
) -> (Vec<Bytes>, HeaderMap) {
    let mut data = Vec::new();
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => data.push(d),
                Err(f) => return (data, f.into_trailers().expect("trailers")),
            },
            Some(Err(s)) => panic!("body error {s:?}"),
            None => panic!("no trailers"),
        }
    }
}

fn grpc_frame(msg: &impl Message) -> Vec<u8> {
    let body = msg.encode_to_vec();
    let mut out = vec![0];
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

fn wire(chunks: &[Bytes]) -> Vec<u8> {
    chunks.iter().flat_map(|c| c.iter().copied()).collect()
}

#[tokio::test]
async fn bytes_are_exactly_prosts_encoding_with_grpc_prefixes() {
    let messages = vec![Ok(mcp("1")), Ok(mcp("2"))];
    let body = ResponseBody::new(tokio_stream::iter(messages), usize::MAX);
    let (chunks, trailers) = drain(body).await;
    let mut expected = grpc_frame(&mcp("1"));
    expected.extend(grpc_frame(&mcp("2")));
    assert_eq!(wire(&chunks), expected);
    assert_eq!(trailers.get("grpc-status").unwrap(), "0");
}

#[tokio::test]
async fn every_stream_sends_one_shared_section_of_a_list() {
    // Two streams answering with the same snapshot's list (their versions
    // and nonces differ): each sends head, the section, tail; the section is
    // the same bytes for both.
    let list: SharedResources = Arc::new(resources().into());
    let message = |nonce: &str| EncodedResources {
        resources: list.clone(),
        ..mcp(nonce)
    };
    let section_len = list.section_len(Framing::Mcp);
    let mut sections = Vec::new();
    for nonce in ["1", "2"] {
        let body = ResponseBody::new(tokio_stream::iter(vec![Ok(message(nonce))]), usize::MAX);
        let (chunks, _) = drain(body).await;
        assert_eq!(wire(&chunks), grpc_frame(&message(nonce)));
        assert_eq!(chunks.len(), 3, "head, section, tail");
        assert_eq!(chunks[1].len(), section_len);
        sections.push(chunks[1].clone());
    }
    assert_eq!(
        sections[0].as_ptr(),
        sections[1].as_ptr(),
        "framed once for both streams"
    );
}

#[tokio::test]
async fn a_small_list_is_copied_into_one_chunk() {
    let msg = EncodedResources {
        resources: Arc::new(
            vec![Bytes::from_static(b"ns/a@1"), Bytes::from_static(b"ns/b@1")].into(),
        ),
        ..mcp("3")
    };
    let body = ResponseBody::new(tokio_stream::iter(vec![Ok(msg.clone())]), usize::MAX);
    let (chunks, _) = drain(body).await;
    assert_eq!(chunks.len(), 1);
    assert_eq!(wire(&chunks), grpc_frame(&msg));
}

#[tokio::test]
async fn ads_layout_matches_its_encoding() {
    let msg = EncodedDiscoveryResponse {
        version_info: "v9".into(),
        resources: Arc::new(resources().into()),
        type_url: "networking.istio.io/v1/VirtualService".into(),
        nonce: "7".into(),
    };
    let body = ResponseBody::new(tokio_stream::iter(vec![Ok(msg.clone())]), usize::MAX);
    let (chunks, _) = drain(body).await;
    let wire: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
    assert_eq!(wire, grpc_frame(&msg));
}

#[tokio::test]
async fn delta_ads_layout_matches_its_encoding() {
    use meshhub_proto::mcp::{Metadata, Resource};
    use meshhub_proto::wire::EncodedDeltaResource;
    // Real MCP resources (the envelope repeats their name and version),
    // small and large, so both the copied and the shared path have suffixes.
    let resources = (0..12)
        .map(|i| {
            let body = vec![b'x'; if i % 3 == 0 { ZERO_COPY_MIN * 2 } else { 40 }];
            let r = Resource {
                metadata: Some(Metadata {
                    name: format!("ns/r{i}"),
                    version: format!("{i}"),
                    ..Default::default()
                }),
                body: Some(prost_types::Any {
                    type_url: "type.googleapis.com/google.protobuf.BytesValue".into(),
                    value: body,
                }),
            };
            EncodedDeltaResource::from_mcp(Bytes::from(r.encode_to_vec())).unwrap()
        })
        .collect();
    let msg = EncodedDeltaDiscoveryResponse {
        system_version_info: "v9".into(),
        resources,
        type_url: "networking.istio.io/v1/VirtualService".into(),
        nonce: "7".into(),
        removed_resources: vec!["ns/gone".into()],
    };
    let body = ResponseBody::new(tokio_stream::iter(vec![Ok(msg.clone())]), usize::MAX);
    let (chunks, _) = drain(body).await;
    let wire: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
    assert_eq!(wire, grpc_frame(&msg));
    // Its envelope differs per resource: large resources go out as the
    // shared bytes themselves, copied chunks stay small.
    for r in msg
        .resources
        .iter()
        .filter(|r| r.resource.len() >= ZERO_COPY_MIN)
    {
        assert!(
            chunks.iter().any(|c| c.as_ptr() == r.resource.as_ptr()),
            "sent without a copy"
        );
    }
    assert!(
        chunks
            .iter()
            .all(|c| c.len() <= CHUNK + ZERO_COPY_MIN * 2 + 64)
    );
    let envoy =
        meshhub_proto::ads::DeltaDiscoveryResponse::decode(&wire[5..]).expect("Envoy's type");
    assert_eq!(envoy.resources.len(), 12);
    assert_eq!(envoy.resources[11].name, "ns/r11");
    assert_eq!(envoy.removed_resources, ["ns/gone"]);
}

#[tokio::test]
async fn errors_and_oversized_messages_end_with_their_status() {
    let body = ResponseBody::new(
        tokio_stream::iter(vec![
            Ok(mcp("1")),
            Err(Status::unavailable("server shutting down")),
        ]),
        usize::MAX,
    );
    let (chunks, trailers) = drain(body).await;
    assert!(!chunks.is_empty());
    assert_eq!(trailers.get("grpc-status").unwrap(), "14");
    assert_eq!(
        trailers.get("grpc-message").unwrap(),
        "server%20shutting%20down"
    );

    let body = ResponseBody::new(tokio_stream::iter(vec![Ok(mcp("1"))]), 100);
    let (chunks, trailers) = drain(body).await;
    assert!(chunks.is_empty(), "nothing of an oversized message is sent");
    assert_eq!(trailers.get("grpc-status").unwrap(), "8");
}

/// Every frame of a request body until it ends: its data, and the error
/// that failed it, if any. A request body never sends trailers.
async fn drain_request<B: http_body::Body<Data = Bytes, Error = Status> + Unpin>(
    mut body: B,
) -> (Vec<Bytes>, Option<Status>) {
    let mut data = Vec::new();
    loop {
        match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            Some(Ok(f)) => data.push(f.into_data().expect("a request body sends no trailers")),
            Some(Err(s)) => return (data, Some(s)),
            None => return (data, None),
        }
    }
}

#[tokio::test]
async fn a_request_body_sends_the_same_bytes_ends_without_trailers_and_fails_on_what_cannot_be_sent()
 {
    let body = ResponseBody::request(
        tokio_stream::iter(vec![Ok(mcp("1")), Ok(mcp("2"))]),
        usize::MAX,
    );
    let (chunks, error) = drain_request(body).await;
    assert!(error.is_none(), "{error:?}");
    let mut expected = grpc_frame(&mcp("1"));
    expected.extend(grpc_frame(&mcp("2")));
    assert_eq!(wire(&chunks), expected);

    // An oversized message resets the stream (an error, not trailers).
    let body = ResponseBody::request(tokio_stream::iter(vec![Ok(mcp("1"))]), 100);
    let (chunks, error) = drain_request(body).await;
    assert!(chunks.is_empty(), "nothing of an oversized message is sent");
    assert_eq!(
        error.map(|s| s.code()),
        Some(tonic::Code::ResourceExhausted)
    );

    let body = ResponseBody::request(
        tokio_stream::iter(vec![Ok(mcp("1")), Err(Status::cancelled("stopping"))]),
        usize::MAX,
    );
    let (chunks, error) = drain_request(body).await;
    assert_eq!(wire(&chunks), grpc_frame(&mcp("1")));
    assert_eq!(error.map(|s| s.code()), Some(tonic::Code::Cancelled));
}

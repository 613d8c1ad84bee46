use std::sync::Arc;

use bytes::Bytes;
use prost::Message;

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
        resources: Arc::new(resources()),
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

#[tokio::test]
async fn bytes_are_exactly_prosts_encoding_with_grpc_prefixes() {
    let messages = vec![Ok(mcp("1")), Ok(mcp("2"))];
    let body = ResponseBody::new(tokio_stream::iter(messages), usize::MAX);
    let (chunks, trailers) = drain(body).await;
    let wire: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
    let mut expected = grpc_frame(&mcp("1"));
    expected.extend(grpc_frame(&mcp("2")));
    assert_eq!(wire, expected);
    assert_eq!(trailers.get("grpc-status").unwrap(), "0");
    // Large resources are the shared bytes themselves; copied chunks stay small.
    let large: Vec<Bytes> = resources()
        .into_iter()
        .filter(|r| r.len() >= ZERO_COPY_MIN)
        .collect();
    assert_eq!(large.len(), 6);
    let sent_whole = chunks.iter().filter(|c| large.contains(c)).count();
    assert_eq!(
        sent_whole,
        2 * large.len(),
        "each large resource is a chunk of its own"
    );
    assert!(chunks.iter().all(|c| c.len() <= CHUNK + ZERO_COPY_MIN + 64));
}

#[tokio::test]
async fn zero_copy_shares_the_snapshot_bytes() {
    let msg = mcp("1");
    let shared = msg.resources[0].clone(); // index 0 is large
    let body = ResponseBody::new(tokio_stream::iter(vec![Ok(msg)]), usize::MAX);
    let (chunks, _) = drain(body).await;
    assert!(
        chunks.iter().any(|c| c.as_ptr() == shared.as_ptr()),
        "sent without a copy"
    );
}

#[tokio::test]
async fn ads_layout_matches_its_encoding() {
    let msg = EncodedDiscoveryResponse {
        version_info: "v9".into(),
        resources: Arc::new(resources()),
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

//! The envelope-only consumer (P3): decodes a `Resources` response's
//! version, collection, nonce and flags, and leaves every resource as the
//! bytes it arrived as — so that P3's ratio is the hub's send rate, not the
//! cost of a full prost decode of every `Resource` in the load generator.
//!
//! [`Envelope`] is a hand-written prost message with the field numbers of
//! `istio.mcp.v1alpha1.Resources` (`proto/schema/mcp/v1alpha1/mcp.proto`),
//! field 3 read as `repeated bytes`: prost takes each body as a `Bytes`
//! slice of tonic's receive buffer, without copying it.

use std::hash::{DefaultHasher, Hasher as _};

use anyhow::{Context as _, Result};
use bytes::Bytes;
use meshhub_proto::mcp::RequestResources;
use tonic::codec::Streaming;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

/// `istio.mcp.v1alpha1.Resources` with its resources left encoded.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Envelope {
    /// Field 1: the collection version.
    #[prost(string, tag = "1")]
    pub system_version_info: String,
    /// Field 2: the collection.
    #[prost(string, tag = "2")]
    pub collection: String,
    /// Field 3: each `Resource`, still encoded.
    #[prost(bytes = "bytes", repeated, tag = "3")]
    pub resources: Vec<Bytes>,
    /// Field 4: removed names (incremental only).
    #[prost(string, repeated, tag = "4")]
    pub removed_resources: Vec<String>,
    /// Field 5: the nonce to echo.
    #[prost(string, tag = "5")]
    pub nonce: String,
    /// Field 6: a delta.
    #[prost(bool, tag = "6")]
    pub incremental: bool,
}

const PATH: &str = "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream";

/// Opens one `ResourceSource` stream whose responses decode as [`Envelope`].
pub async fn open(
    channel: Channel,
    max_message: usize,
    requests: impl tonic::IntoStreamingRequest<Message = RequestResources>,
) -> Result<Streaming<Envelope>> {
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(max_message);
    grpc.ready().await.context("channel not ready")?;
    let codec = tonic_prost::ProstCodec::<RequestResources, Envelope>::default();
    let response = grpc
        .streaming(
            requests.into_streaming_request(),
            PathAndQuery::from_static(PATH),
            codec,
        )
        .await?;
    Ok(response.into_inner())
}

/// The oracle's entry hash of a resource left encoded: a hash of its bytes
/// exactly as the hub published them (`crate::server` hashes the snapshot's
/// encoded resources the same way).
pub fn raw_hash(encoded: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    h.write(encoded);
    h.finish()
}

#[cfg(test)]
mod tests {
    use meshhub_proto::mcp::{Metadata, Resource, Resources};
    use prost::Message as _;

    use super::*;

    #[test]
    fn an_envelope_reads_a_resources_message_with_each_resource_as_its_bytes() {
        let resource = |name: &str| Resource {
            metadata: Some(Metadata {
                name: name.into(),
                version: "v1".into(),
                ..Default::default()
            }),
            body: Some(prost_types::Any {
                type_url: "type.googleapis.com/x".into(),
                value: vec![1, 2, 3],
            }),
        };
        let full = Resources {
            system_version_info: "v7".into(),
            collection: "c".into(),
            resources: vec![resource("a"), resource("b/c")],
            removed_resources: vec!["gone".into()],
            nonce: "n1".into(),
            incremental: true,
        };
        let e = Envelope::decode(full.encode_to_vec().as_slice()).unwrap();
        assert_eq!(e.system_version_info, "v7");
        assert_eq!(e.collection, "c");
        assert_eq!(e.nonce, "n1");
        assert!(e.incremental);
        assert_eq!(e.removed_resources, ["gone"]);
        let bodies: Vec<Vec<u8>> = full.resources.iter().map(|r| r.encode_to_vec()).collect();
        assert_eq!(e.resources, bodies);
        assert_eq!(e.encoded_len(), full.encoded_len());
    }
}

//! meshhub's wire definitions.
//!
//! * [`mcp`]: the Mesh Configuration Protocol (`istio.mcp.v1alpha1`) messages
//!   and the generated clients and servers of its services, built from our own
//!   `.proto` files under `schema/` (no `protoc` needed: see `build.rs`).
//! * [`wire`]: twins of `Resources` and Envoy's `DiscoveryResponse` whose
//!   resources are pre-encoded [`bytes::Bytes`], so that a resource is encoded
//!   once and shared by every stream; and the services that send them.
//! * [`ads`]: Envoy's aggregated discovery service types (from `envoy-types`).
//! * [`codec`]: the generated services' codec (prost's, with small starting
//!   buffers).
//! * [`descriptor`]: the descriptor pool of every schema we know, for
//!   schema-driven transcoding.
//! * [`kinds`]: the kind table: Kubernetes GVK ↔ MCP collection ↔ ADS type URL
//!   ↔ body message.
//! * [`transcode`]: Kubernetes object (YAML/JSON) ↔ `istio.mcp.v1alpha1.Resource`.
//! * [`translate`]: a WasmPlugin as the TrafficExtension istiod 1.30+ reads
//!   in its place.
//! * [`error_chain`]: an error and its causes on one line, for every crate
//!   above this one.

pub mod ads;
pub mod codec;
pub mod descriptor;
pub mod error;
pub mod kinds;
pub mod object;
pub mod transcode;
pub mod translate;
pub mod wire;

/// `istio.mcp.v1alpha1`: generated from `schema/mcp/v1alpha1/*.proto`.
pub mod mcp {
    #![allow(clippy::all, missing_docs, unreachable_pub)]
    tonic::include_proto!("istio.mcp.v1alpha1");
}

/// `meshhub.v1alpha1`: the upward channel's messages (what an agent
/// reports about its cluster), generated from
/// `schema/meshhub/v1alpha1/upward.proto`.
pub mod upward {
    #![allow(clippy::all, missing_docs, unreachable_pub)]
    tonic::include_proto!("meshhub.v1alpha1");

    /// The collection of [`ClusterStatus`] (one resource per agent).
    pub const CLUSTER_STATUS: &str = "meshhub/v1alpha1/clusterstatus";
    /// The collection of [`ServiceExport`] (one resource per exported
    /// Service).
    pub const SERVICE_EXPORTS: &str = "meshhub/v1alpha1/serviceexports";
    /// Body message of [`CLUSTER_STATUS`].
    pub const CLUSTER_STATUS_MESSAGE: &str = "meshhub.v1alpha1.ClusterStatus";
    /// Body message of [`SERVICE_EXPORTS`].
    pub const SERVICE_EXPORT_MESSAGE: &str = "meshhub.v1alpha1.ServiceExport";
}

pub use error::error_chain;

/// `google.rpc.Status`, as NACKs carry it.
pub use tonic_types::pb::Status as RpcStatus;

/// Type URL prefix of every `google.protobuf.Any` we write.
pub const TYPE_URL_PREFIX: &str = "type.googleapis.com/";

/// Full protobuf name of the MCP resource envelope.
pub const MCP_RESOURCE_MESSAGE: &str = "istio.mcp.v1alpha1.Resource";

/// `type.googleapis.com/<message>`.
pub fn type_url(message: &str) -> String {
    format!("{TYPE_URL_PREFIX}{message}")
}

/// The message name of a type URL: the part after the last `/`, as Go's
/// `UnmarshalAny` reads it.
pub fn message_name(type_url: &str) -> &str {
    type_url.rsplit('/').next().unwrap_or(type_url)
}

//! Envoy's aggregated discovery service (ADS), used for MCP-over-xDS.
//!
//! The request and response types come from the `envoy-types` crate, which
//! carries Envoy's own definitions (`envoy.service.discovery.v3`). We serve
//! the service from `meshhub-mcp` (`ads.rs`) so that responses carry
//! pre-encoded resources; tests and `meshhubctl` use the generated client
//! re-exported here, which decodes with Envoy's real schema.

pub use envoy_types::pb::envoy::config::core::v3::Node;
pub use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse, Resource,
    aggregated_discovery_service_client as client,
};
/// `google.protobuf.Struct` as envoy-types generates it (`Node.metadata`).
pub use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind as ValueKind};
/// `google.rpc.Status` as envoy-types generates it (a request's
/// `error_detail`).
pub use envoy_types::pb::google::rpc::Status as ErrorDetail;

//! MCP-over-xDS: Envoy's aggregated discovery service (SotW), as current
//! istiod consumes it with `meshConfig.configSources: [xds://…]`.
//!
//! The stream reuses the source machine, keyed by the requested type URL
//! (a GVK string such as `networking.istio.io/v1/VirtualService`), which
//! keeps every MCP rule (one outstanding response per type, NACK parking,
//! coalescing). ADS specifics (reference §3):
//! * a request for a type with no state on the stream is a subscription
//!   whatever its nonce (istiod sends a timestamp);
//! * each response answers exactly the requested type URL, with every
//!   resource as `Any(istio.mcp.v1alpha1.Resource)`, full state every time;
//! * a type we do not know is answered with an empty list, so istiod syncs;
//! * `core/v1alpha1/MeshConfig` is not answered: istiod 1.9–1.11 hang on
//!   an extra response, and meshhub does not own mesh config.

use std::collections::HashMap;
use std::sync::Arc;

use meshhub_proto::RpcStatus;
use meshhub_proto::ads::DiscoveryRequest;
use meshhub_proto::mcp::{RequestResources, SinkNode};
use meshhub_proto::wire::EncodedDiscoveryResponse;
use tonic::{Request, Streaming};

use crate::source::server::{Dialect, Shared, peer_identities, serve};
use crate::source::service::{AdsService, StreamMethod};
use crate::source::{IncrementalPolicy, SourceConfig};

/// The type URL istiod uses for mesh config.
pub const MESH_CONFIG_TYPE_URL: &str = "core/v1alpha1/MeshConfig";

/// Maps a requested type URL to the cache collection that holds it.
pub type TypeMap = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The ADS service.
#[derive(Clone)]
pub struct AdsServer {
    shared: Shared,
    types: TypeMap,
    config: Arc<SourceConfig>,
}

impl AdsServer {
    /// A service over the shared state; `types` maps type URLs to collections.
    pub fn new(shared: Shared, types: TypeMap) -> Self {
        let config = Arc::new(SourceConfig {
            incremental: IncrementalPolicy::Never,
            ..(*shared.config).clone()
        });
        Self {
            shared,
            types,
            config,
        }
    }

    /// The gRPC service, with the given message size limit both ways.
    /// Responses are written from the shared resource bytes.
    pub fn into_service(self, max_message_bytes: usize) -> AdsService {
        let Self {
            shared,
            types,
            config,
        } = self;
        AdsService(StreamMethod::new(
            "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
            Arc::new(move |request: Request<Streaming<DiscoveryRequest>>| {
                let addr = request.remote_addr();
                let identities = peer_identities(&request);
                let types = types.clone();
                let dialect = Dialect {
                    protocol: "ads",
                    node: sink_node,
                    request: translate,
                    response: |r| EncodedDiscoveryResponse {
                        version_info: r.system_version_info,
                        resources: r.resources,
                        type_url: r.collection,
                        nonce: r.nonce,
                    },
                    config: config.clone(),
                    collection_of: Arc::new(move |type_url| {
                        types(type_url).unwrap_or_else(|| type_url.to_owned())
                    }),
                };
                serve(&shared, addr, identities, request.into_inner(), dialect)
            }),
            max_message_bytes,
        ))
    }
}

/// The node as a `SinkNode`: its id, and its string metadata as annotations.
pub fn sink_node(req: &DiscoveryRequest) -> SinkNode {
    let Some(node) = &req.node else {
        return SinkNode::default();
    };
    let mut annotations = HashMap::new();
    if let Some(meta) = &node.metadata {
        for (k, v) in &meta.fields {
            if let Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(s)) = &v.kind {
                annotations.insert(k.clone(), s.clone());
            }
        }
    }
    SinkNode {
        id: node.id.clone(),
        annotations,
    }
}

/// A discovery request as the MCP request the machine understands; `None`
/// for requests we do not answer.
fn translate(req: DiscoveryRequest) -> Option<RequestResources> {
    if req.type_url == MESH_CONFIG_TYPE_URL || req.type_url.is_empty() {
        return None;
    }
    Some(RequestResources {
        sink_node: None,
        collection: req.type_url,
        initial_resource_versions: HashMap::new(),
        response_nonce: req.response_nonce,
        error_detail: req.error_detail.map(|e| RpcStatus {
            code: e.code,
            message: e.message,
            details: vec![],
        }),
        incremental: false,
    })
}

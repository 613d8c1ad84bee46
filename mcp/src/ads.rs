//! MCP-over-xDS: Envoy's aggregated discovery service, as current istiod
//! consumes it with `meshConfig.configSources: [xds://…]` (SotW,
//! `StreamAggregatedResources`), and its incremental variant
//! (`DeltaAggregatedResources`, see [`delta`]; istiod never uses it).
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

pub mod delta;
pub mod extensions;

use std::collections::HashMap;
use std::sync::Arc;

use meshhub_proto::RpcStatus;
use meshhub_proto::ads::{DeltaDiscoveryRequest, DiscoveryRequest, Node};
use meshhub_proto::mcp::{RequestResources, SinkNode};
use meshhub_proto::wire::{EncodedDiscoveryResponse, EncodedResources};
use tonic::{Request, Streaming};

use crate::snapshot::Served;
use crate::source::server::{Dialect, PeerInfo, Shared, serve};
use crate::source::service::{AdsService, StreamMethod};
use crate::source::{IncrementalPolicy, SourceConfig, SourceStream};
use delta::DeltaStream;

/// The type URL istiod uses for mesh config.
pub const MESH_CONFIG_TYPE_URL: &str = "core/v1alpha1/MeshConfig";

/// Maps a requested type URL to what serves it: the cache collection
/// that holds it, or a view of the snapshot (`None`: an unknown type,
/// answered empty).
pub type TypeMap = Arc<dyn Fn(&str) -> Option<Served> + Send + Sync>;

/// The ADS service.
#[derive(Clone)]
pub struct AdsServer {
    shared: Shared,
    types: TypeMap,
}

impl AdsServer {
    /// A service over the shared state; `types` maps type URLs to collections.
    pub fn new(shared: Shared, types: TypeMap) -> Self {
        Self { shared, types }
    }

    /// The gRPC service (both methods), with the given message size limit
    /// both ways. Responses are written from the shared resource bytes.
    pub fn into_service(self, max_message_bytes: usize) -> AdsService {
        let Self { shared, types } = self;
        // SotW: full state every time (istiod deletes what a response lacks).
        let sotw_config = Arc::new(SourceConfig {
            incremental: IncrementalPolicy::Never,
            ..(*shared.config).clone()
        });
        // Delta: always per-resource changes and removals.
        let delta_config = Arc::new(SourceConfig {
            incremental: IncrementalPolicy::Always,
            ..(*shared.config).clone()
        });
        let collection_of = move |types: &TypeMap| -> Arc<dyn Fn(&str) -> Served + Send + Sync> {
            let types = types.clone();
            Arc::new(move |type_url: &str| {
                types(type_url).unwrap_or_else(|| Served::Collection(type_url.to_owned()))
            })
        };
        let (sotw_shared, sotw_types) = (shared.clone(), types.clone());
        let sotw = StreamMethod::new(
            "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
            Arc::new(move |request: Request<Streaming<DiscoveryRequest>>| {
                let addr = request.remote_addr();
                let identities = PeerInfo::of(&request);
                let dialect = Dialect {
                    protocol: crate::ledger::StreamProtocol::Ads,
                    node: |req: &DiscoveryRequest| node_of(req.node.as_ref()),
                    request: translate,
                    response: |r: EncodedResources| EncodedDiscoveryResponse {
                        version_info: r.system_version_info,
                        resources: r.resources,
                        type_url: r.collection,
                        nonce: r.nonce,
                    },
                    machine: SourceStream::new(sotw_config.clone()),
                    collection_of: collection_of(&sotw_types),
                };
                serve(
                    &sotw_shared,
                    addr,
                    identities,
                    request.into_inner(),
                    dialect,
                )
            }),
            max_message_bytes,
        );
        let delta = StreamMethod::new(
            "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources",
            Arc::new(move |request: Request<Streaming<DeltaDiscoveryRequest>>| {
                let addr = request.remote_addr();
                let identities = PeerInfo::of(&request);
                let dialect = Dialect {
                    protocol: crate::ledger::StreamProtocol::DeltaAds,
                    node: |req: &DeltaDiscoveryRequest| node_of(req.node.as_ref()),
                    request: delta::accept,
                    response: |r| r,
                    machine: DeltaStream::new(delta_config.clone()),
                    collection_of: collection_of(&types),
                };
                serve(&shared, addr, identities, request.into_inner(), dialect)
            }),
            max_message_bytes,
        );
        AdsService { sotw, delta }
    }
}

/// The node of a SotW request as a `SinkNode`.
pub fn sink_node(req: &DiscoveryRequest) -> SinkNode {
    node_of(req.node.as_ref())
}

/// An xDS node as a `SinkNode`: its id, and its string metadata as
/// annotations (`GENERATOR`, `ISTIO_VERSION`, …).
pub fn node_of(node: Option<&Node>) -> SinkNode {
    let Some(node) = node else {
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

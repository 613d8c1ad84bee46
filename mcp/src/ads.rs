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

use futures::StreamExt;
use meshhub_proto::RpcStatus;
use meshhub_proto::ads::DiscoveryRequest;
use meshhub_proto::mcp::{RequestResources, SinkNode};
use meshhub_proto::wire::EncodedDiscoveryResponse;
use meshhub_proto::wire::ads_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use crate::group::Consumer;
use crate::ledger::Role;
use crate::source::drive::{Plumbing, drive};
use crate::source::server::Shared;
use crate::source::{IncrementalPolicy, SourceConfig, SourceStream};

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

    /// The tonic service, with the given message size limit.
    pub fn into_service(self, max_message_bytes: usize) -> AggregatedDiscoveryServiceServer<Self> {
        AggregatedDiscoveryServiceServer::new(self)
            .max_decoding_message_size(max_message_bytes)
            .max_encoding_message_size(max_message_bytes)
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

#[tonic::async_trait]
impl AggregatedDiscoveryService for AdsServer {
    type StreamAggregatedResourcesStream = ReceiverStream<Result<EncodedDiscoveryResponse, Status>>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let addr = request.remote_addr();
        let mut incoming = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let s = self.shared.clone();
        let types = self.types.clone();
        let config = self.config.clone();
        let peer = addr.map_or_else(|| "unknown".to_owned(), |a| a.to_string());
        let span = tracing::info_span!("mcp.ads.stream", peer.addr = %peer, node.id = tracing::field::Empty, group = tracing::field::Empty);
        self.shared.tasks.spawn(
            async move {
                let record = s.ledger.register(Role::Source, peer, "");
                let first = tokio::select! {
                    () = s.shutdown.cancelled() => return,
                    first = incoming.next() => match first {
                        Some(Ok(first)) => first,
                        Some(Err(status)) => {
                            record.disconnected(Some(status.message().to_owned()));
                            return;
                        }
                        None => return,
                    },
                };
                let consumer = Consumer {
                    node: sink_node(&first),
                    addr,
                    identities: Vec::new(),
                };
                let group = match s.groups.group(&consumer) {
                    Ok(g) => g,
                    Err(e) => {
                        tracing::warn!(node.id = %consumer.node.id, error = %e, "consumer refused");
                        record.identify(&consumer.node.id, "");
                        record.disconnected(Some(e.to_string()));
                        let _ = tx
                            .send(Err(Status::failed_precondition(e.to_string())))
                            .await;
                        return;
                    }
                };
                tracing::Span::current().record("node.id", consumer.node.id.as_str());
                tracing::Span::current().record("group", &*group);
                record.identify(&consumer.node.id, &group);
                record.connected();
                metrics::gauge!("meshhub_mcp_streams", "role" => "ads").increment(1.0);
                tracing::info!("ADS stream opened");
                let requests = incoming.filter_map(|r| async move {
                    match r {
                        Ok(req) => translate(req).map(Ok),
                        Err(e) => Some(Err(e)),
                    }
                });
                let mut machine = SourceStream::new(config);
                let end = drive(
                    Plumbing {
                        cache: &s.cache,
                        group,
                        record: &record,
                        shutdown: s.shutdown.clone(),
                        collection_of: Arc::new(move |type_url| {
                            types(type_url).unwrap_or_else(|| type_url.to_owned())
                        }),
                    },
                    &mut machine,
                    translate(first),
                    Box::pin(requests),
                    &tx,
                    |r| EncodedDiscoveryResponse {
                        version_info: r.system_version_info,
                        resources: r.resources,
                        type_url: r.collection,
                        nonce: r.nonce,
                    },
                    || {},
                )
                .await;
                metrics::gauge!("meshhub_mcp_streams", "role" => "ads").decrement(1.0);
                tracing::info!(reason = ?end, "ADS stream closed");
                record.disconnected(end.error());
                if let Some(status) = end.status() {
                    let _ = tx.send(Err(status)).await;
                }
            }
            .instrument(span),
        );
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

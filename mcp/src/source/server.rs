//! The `istio.mcp.v1alpha1.ResourceSource` service: sinks (Pilot-like
//! consumers, `meshhubctl`, sink agents in pull mode) dial in and subscribe.

use std::sync::Arc;

use futures::StreamExt;
use meshhub_proto::mcp::RequestResources;
use meshhub_proto::wire::EncodedResources;
use meshhub_proto::wire::source_server::{ResourceSource, ResourceSourceServer};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::drive::{Plumbing, drive};
use super::{SourceConfig, SourceStream};
use crate::cache::SnapshotCache;
use crate::group::{Consumer, GroupIndex};
use crate::ledger::{Ledger, Role};

/// Everything a source-side server needs; shared by every stream.
#[derive(Clone)]
pub struct Shared {
    /// Snapshots to serve.
    pub cache: SnapshotCache,
    /// Places consumers in groups.
    pub groups: Arc<dyn GroupIndex>,
    /// Records every stream.
    pub ledger: Ledger,
    /// Protocol settings.
    pub config: Arc<SourceConfig>,
    /// Ends every stream.
    pub shutdown: CancellationToken,
    /// Owns every stream task.
    pub tasks: TaskTracker,
}

/// The `ResourceSource` service.
#[derive(Clone)]
pub struct SourceServer {
    shared: Shared,
}

/// Responses queued per stream before the stream task waits for the
/// transport (at most one per collection is un-ACKed anyway).
const QUEUE: usize = 16;

impl SourceServer {
    /// A service over the given cache.
    pub fn new(shared: Shared) -> Self {
        Self { shared }
    }

    /// The tonic service, with the given message size limits.
    pub fn into_service(self, max_message_bytes: usize) -> ResourceSourceServer<Self> {
        ResourceSourceServer::new(self)
            .max_decoding_message_size(max_message_bytes)
            .max_encoding_message_size(max_message_bytes)
    }
}

#[tonic::async_trait]
impl ResourceSource for SourceServer {
    type EstablishResourceStreamStream = ReceiverStream<Result<EncodedResources, Status>>;

    async fn establish_resource_stream(
        &self,
        request: Request<Streaming<RequestResources>>,
    ) -> Result<Response<Self::EstablishResourceStreamStream>, Status> {
        let addr = request.remote_addr();
        let mut incoming = request.into_inner();
        let (tx, rx) = mpsc::channel(QUEUE);
        let s = self.shared.clone();
        let peer = addr.map_or_else(|| "unknown".to_owned(), |a| a.to_string());
        let span = tracing::info_span!("mcp.source.stream", peer.addr = %peer, node.id = tracing::field::Empty, group = tracing::field::Empty);
        self.shared.tasks.spawn(
            async move {
                let record = s.ledger.register(Role::Source, peer, "");
                // The first request names the sink; it decides the group.
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
                let node = first.sink_node.clone().unwrap_or_default();
                let consumer = Consumer {
                    node,
                    addr,
                    identities: Vec::new(),
                };
                let group = match s.groups.group(&consumer) {
                    Ok(group) => group,
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
                metrics::gauge!("meshhub_mcp_streams", "role" => "source").increment(1.0);
                tracing::info!("stream opened");
                let mut machine = SourceStream::new(s.config.clone());
                let end = drive(
                    Plumbing {
                        cache: &s.cache,
                        group,
                        record: &record,
                        shutdown: s.shutdown.clone(),
                        collection_of: Arc::new(str::to_owned),
                    },
                    &mut machine,
                    Some(first),
                    incoming,
                    &tx,
                    |r| r,
                    || {},
                )
                .await;
                metrics::gauge!("meshhub_mcp_streams", "role" => "source").decrement(1.0);
                tracing::info!(reason = ?end, "stream closed");
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

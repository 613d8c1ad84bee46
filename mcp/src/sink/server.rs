//! The `istio.mcp.v1alpha1.ResourceSink` service: a source (the hub) dials
//! in and pushes; we subscribe on its stream and answer every response.

use std::sync::Arc;

use meshhub_proto::mcp::resource_sink_server::{ResourceSink, ResourceSinkServer};
use meshhub_proto::mcp::{RequestResources, Resources};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::drive::drive;
use super::{SinkConfig, SinkStream, Updater};
use crate::authz::AllowList;
use crate::ledger::{Ledger, Role};

/// The `ResourceSink` service, applying to `U`.
pub struct SinkServer<U> {
    updater: Arc<U>,
    config: Arc<SinkConfig>,
    ledger: Ledger,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    allowed: Option<AllowList>,
}

impl<U: Updater> SinkServer<U> {
    /// A service applying to `updater`.
    pub fn new(
        updater: Arc<U>,
        config: Arc<SinkConfig>,
        ledger: Ledger,
        shutdown: CancellationToken,
        tasks: TaskTracker,
    ) -> Self {
        Self {
            updater,
            config,
            ledger,
            shutdown,
            tasks,
            allowed: None,
        }
    }

    /// Only sources whose verified client certificate has an identity in
    /// `allowed` may push; others are refused with `PERMISSION_DENIED`.
    pub fn allow_only(mut self, allowed: AllowList) -> Self {
        self.allowed = Some(allowed);
        self
    }

    /// The tonic service, with the given message size limit.
    pub fn into_service(self, max_message_bytes: usize) -> ResourceSinkServer<Self> {
        ResourceSinkServer::new(self)
            .max_decoding_message_size(max_message_bytes)
            .max_encoding_message_size(max_message_bytes)
    }
}

#[tonic::async_trait]
impl<U: Updater> ResourceSink for SinkServer<U> {
    type EstablishResourceStreamStream = ReceiverStream<Result<RequestResources, Status>>;

    async fn establish_resource_stream(
        &self,
        request: Request<Streaming<Resources>>,
    ) -> Result<Response<Self::EstablishResourceStreamStream>, Status> {
        let peer = request
            .remote_addr()
            .map_or_else(|| "unknown".to_owned(), |a| a.to_string());
        if let Some(allowed) = &self.allowed {
            let identities = crate::source::server::peer_identities(&request);
            if !allowed.allows(&identities) {
                metrics::counter!(crate::authz::METRIC_REFUSED, "protocol" => "sink", "reason" => "permission_denied")
                    .increment(1);
                tracing::warn!(peer.addr = %peer, ?identities, "source refused: identity not allowed to push");
                return Err(Status::permission_denied(format!(
                    "identity {} may not push to this sink",
                    if identities.is_empty() {
                        "(none: no client certificate)".to_owned()
                    } else {
                        identities.join(", ")
                    }
                )));
            }
        }
        // A meshhub hub names its replica (leader election); shown on the
        // agent's status.
        let replica = request
            .metadata()
            .get(crate::source::dialer::REPLICA_METADATA)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let incoming = request.into_inner();
        let (tx, rx) = mpsc::channel(64);
        let updater = self.updater.clone();
        let config = self.config.clone();
        let ledger = self.ledger.clone();
        let shutdown = self.shutdown.clone();
        let span = tracing::info_span!("mcp.sink.stream", peer.addr = %peer, peer.replica = replica.as_deref().unwrap_or(""));
        self.tasks.spawn(
            async move {
                let record = ledger.register(Role::Sink, peer, "");
                record.identify(&config.node.id, "");
                if let Some(replica) = &replica {
                    record.replica(replica);
                }
                record.connected();
                metrics::gauge!("meshhub_mcp_streams", "role" => "sink").increment(1.0);
                tracing::info!("source connected");
                let mut machine = SinkStream::new(config);
                let end = drive(
                    &mut machine,
                    &*updater,
                    incoming,
                    &tx,
                    &record,
                    &shutdown,
                    || {},
                )
                .await;
                metrics::gauge!("meshhub_mcp_streams", "role" => "sink").decrement(1.0);
                tracing::info!(reason = ?end, "source disconnected");
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

//! The `istio.mcp.v1alpha1.ResourceSink` service: a source (the hub) dials
//! in and pushes; we subscribe on its stream and answer every response.
//!
//! By default every stream is served on its own. With
//! [`SinkServer::one_source_at_a_time`] (the agent's setting: one hub
//! pushes one cluster's configuration) the newest stream replaces the
//! older one: when a stream arrives while another is open, the older ends
//! with `ABORTED` ("superseded by a newer stream"), so two hub replicas
//! dialing at once during a shard's or the leadership's handover never
//! interleave their pushes; the one that connected last is served, and the
//! content it holds is what it pushes first (its initial response per
//! collection is full state, or a delta against what the sink declared).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

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
    /// With one source at a time: the open stream (its number, its stop).
    current: Option<Arc<Current>>,
}

/// The stream being served when only one is.
#[derive(Default)]
struct Current {
    next: AtomicU64,
    open: Mutex<Option<(u64, CancellationToken)>>,
}

impl Current {
    /// Makes a stream stopped by `stop` the current one; stops the one it
    /// replaces. Returns its number.
    fn replace(&self, stop: CancellationToken) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let previous = self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace((id, stop));
        if let Some((_, older)) = previous {
            older.cancel();
        }
        id
    }

    /// Forgets stream `id` if it is still the current one.
    fn end(&self, id: u64) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.as_ref().is_some_and(|(i, _)| *i == id) {
            *open = None;
        }
    }
}

/// Why a stream replaced by a newer one ended.
pub const SUPERSEDED: &str = "superseded by a newer stream";

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
            current: None,
        }
    }

    /// Serves one stream at a time: a new stream ends the open one (with
    /// `ABORTED`, [`SUPERSEDED`]).
    pub fn one_source_at_a_time(mut self) -> Self {
        self.current = Some(Arc::default());
        self
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
        // The stream's own stop: the server's shutdown, or a newer stream.
        let stop = shutdown.child_token();
        let current = self.current.clone();
        let id = current.as_ref().map(|c| c.replace(stop.clone()));
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
                    &stop,
                    || {},
                )
                .await;
                if let (Some(current), Some(id)) = (&current, id) {
                    current.end(id);
                }
                metrics::gauge!("meshhub_mcp_streams", "role" => "sink").decrement(1.0);
                let superseded = stop.is_cancelled() && !shutdown.is_cancelled();
                if superseded {
                    metrics::counter!("meshhub_mcp_sink_superseded_total").increment(1);
                    tracing::info!("source disconnected: a newer stream replaces this one");
                    record.disconnected(Some(SUPERSEDED.to_owned()));
                    let _ = tx.send(Err(Status::aborted(SUPERSEDED))).await;
                } else {
                    tracing::info!(reason = ?end, "source disconnected");
                    record.disconnected(end.error());
                    if let Some(status) = end.status() {
                        let _ = tx.send(Err(status)).await;
                    }
                }
            }
            .instrument(span),
        );
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

//! The `istio.mcp.v1alpha1.ResourceSource` service: sinks (Pilot-like
//! consumers, `meshhubctl`, sink agents in pull mode) dial in and subscribe.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use meshhub_proto::mcp::{RequestResources, SinkNode};
use meshhub_proto::wire::EncodedResources;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::{Request, Status, Streaming};
use tracing::Instrument;

use super::drive::{End, Machine, Plumbing, Queued, drive};
use super::service::{ResourceSourceService, Responses, StreamMethod, responses};
use super::{SourceConfig, SourceStream};
use crate::cache::SnapshotCache;
use crate::group::{Consumer, GroupIndex};
use crate::ledger::{Ledger, Role};
use crate::limits::SendProgress;
use crate::snapshot::Served;

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

    /// The gRPC service, with the given message size limit both ways.
    /// Responses are written from the shared resource bytes (see `body.rs`).
    pub fn into_service(self, max_message_bytes: usize) -> ResourceSourceService {
        let shared = self.shared;
        ResourceSourceService(StreamMethod::new(
            "/istio.mcp.v1alpha1.ResourceSource/EstablishResourceStream",
            Arc::new(move |request: Request<Streaming<RequestResources>>| {
                let addr = request.remote_addr();
                let identities = PeerInfo::of(&request);
                let dialect = Dialect {
                    protocol: crate::ledger::StreamProtocol::Mcp,
                    node: |req: &RequestResources| req.sink_node.clone().unwrap_or_default(),
                    request: Some,
                    response: |r: EncodedResources| r,
                    machine: SourceStream::new(shared.config.clone()),
                    collection_of: Arc::new(|key: &str| Served::Collection(key.to_owned())),
                };
                serve(&shared, addr, identities, request.into_inner(), dialect)
            }),
            max_message_bytes,
        ))
    }
}

/// How one kind of dial-in stream (MCP `ResourceSource`, ADS or Delta ADS)
/// is read and answered; everything else about serving it is shared.
pub(crate) struct Dialect<In, Out, M: Machine> {
    /// `mcp`, `ads` or `delta-ads`: span field, ledger entry and metric label.
    pub protocol: crate::ledger::StreamProtocol,
    /// Who the peer says it is (from its first message).
    pub node: fn(&In) -> SinkNode,
    /// The request as the stream's machine reads it; `None` to ignore it.
    pub request: fn(In) -> Option<M::Request>,
    /// A response in the stream's own message type.
    pub response: fn(M::Response) -> Out,
    /// The stream's machine, fresh.
    pub machine: M,
    /// What a subscription key serves.
    pub collection_of: Arc<dyn Fn(&str) -> Served + Send + Sync>,
}

/// Serves one dial-in stream in a task owned by `shared.tasks`: reads the
/// first message, places the consumer in its group (refusing it with the
/// reason if it has none), then drives the source machine until the peer
/// leaves, the group is withdrawn or shutdown.
pub(crate) fn serve<In, Out, M>(
    shared: &Shared,
    addr: Option<SocketAddr>,
    peer_info: PeerInfo,
    incoming: Streaming<In>,
    d: Dialect<In, Out, M>,
) -> Responses<Out>
where
    In: Send + 'static,
    Out: Send + 'static,
    M: Machine + Send + 'static,
    M::Request: Send + 'static,
    M::Response: Send,
{
    let (tx, rx) = mpsc::channel::<Queued<Out>>(QUEUE);
    let s = shared.clone();
    let peer = addr.map_or_else(|| "unknown".to_owned(), |a| a.to_string());
    let span = tracing::info_span!(
        "mcp.source.stream",
        protocol = d.protocol.as_str(),
        peer.addr = %peer,
        node.id = tracing::field::Empty,
        group = tracing::field::Empty
    );
    let mut incoming = incoming;
    let PeerInfo {
        identities,
        progress,
        local,
    } = peer_info;
    shared.tasks.spawn(
        async move {
            let record = s.ledger.register(Role::Source, peer, "");
            record.protocol(d.protocol);
            // The first message names the consumer; it decides the group.
            // (Read before translation: an ADS peer may first ask for
            // something we do not answer, with its node.)
            let first = tokio::select! {
                () = s.shutdown.cancelled() => return,
                first = incoming.next() => match first {
                    Some(Ok(first)) => first,
                    Some(Err(status)) => {
                        // A message that does not decode, or is over the
                        // size limit: say so to the peer, not just end.
                        tracing::warn!(code = ?status.code(), error = %status.message(), "bad first message; ending the stream");
                        record.disconnected(Some(status.message().to_owned()));
                        let _ = tx.send(Box::new(Err(status))).await;
                        return;
                    }
                    None => return,
                },
            };
            let node = (d.node)(&first);
            let first = (d.request)(first);
            let request = d.request;
            let requests = incoming.filter_map(move |r| async move {
                match r {
                    Ok(m) => request(m).map(Ok),
                    Err(e) => Some(Err(e)),
                }
            });
            let consumer = Consumer {
                node,
                addr,
                identities,
            };
            let group = match s.groups.group(&consumer) {
                Ok(group) => group,
                Err(e) => {
                    let reason = if e.denied { "permission_denied" } else { "no_group" };
                    metrics::counter!(crate::authz::METRIC_REFUSED, "protocol" => d.protocol.as_str(), "reason" => reason)
                        .increment(1);
                    tracing::warn!(node.id = %consumer.node.id, identities = ?consumer.identities, error = %e, "consumer refused");
                    record.identify(&consumer.node.id, "");
                    record.disconnected(Some(e.to_string()));
                    let _ = tx.send(Box::new(Err(e.status()))).await;
                    return;
                }
            };
            tracing::Span::current().record("node.id", consumer.node.id.as_str());
            tracing::Span::current().record("group", &*group);
            record.identify(&consumer.node.id, &group);
            record.node_meta(&consumer.node.annotations);
            record.connected();
            metrics::gauge!("meshhub_mcp_streams", "role" => d.protocol.as_str()).increment(1.0);
            tracing::info!("stream opened");
            let mut machine = d.machine;
            let stalled = stalled(progress, s.config.send_timeout);
            let driven = drive(
                Plumbing {
                    cache: &s.cache,
                    group,
                    record: &record,
                    shutdown: s.shutdown.clone(),
                    collection_of: d.collection_of,
                    request_rate: s.config.request_rate,
                },
                &mut machine,
                first,
                Box::pin(requests),
                &tx,
                d.response,
                || {},
            );
            let end = tokio::select! {
                end = driven => end,
                waited = stalled => {
                    metrics::counter!(crate::limits::METRIC_CUT, "protocol" => d.protocol.as_str()).increment(1);
                    tracing::warn!(waited = ?waited, "consumer stopped reading; closing its connection");
                    // The response body is stuck behind HTTP/2 flow control
                    // and holds what it was given: only closing the
                    // connection frees it.
                    if let (Some(local), Some(remote)) = (local, addr) {
                        crate::listen::cut(local, remote);
                    }
                    End::Failed(Status::deadline_exceeded(format!(
                        "consumer did not read a response for {}",
                        humantime::format_duration(Duration::from_millis(waited.as_millis() as u64))
                    )))
                }
            };
            metrics::gauge!("meshhub_mcp_streams", "role" => d.protocol.as_str()).decrement(1.0);
            tracing::info!(reason = ?end, "stream closed");
            record.disconnected(end.error());
            if let Some(status) = end.status() {
                let _ = tx.send(Box::new(Err(status))).await;
            }
        }
        .instrument(span),
    );
    responses(rx)
}

/// What is known about a dial-in peer from its request.
pub(crate) struct PeerInfo {
    /// Identities of its verified client certificate.
    pub identities: Vec<String>,
    /// Whether its stream's responses get written (see `limits`).
    pub progress: Option<SendProgress>,
    /// Our address of its connection.
    pub local: Option<SocketAddr>,
}

impl PeerInfo {
    /// From the request's extensions.
    pub fn of<T>(request: &Request<T>) -> Self {
        Self {
            identities: peer_identities(request),
            progress: request.extensions().get::<SendProgress>().cloned(),
            local: request.local_addr(),
        }
    }
}

/// Resolves once a response has waited longer than `timeout` to be
/// written (never without a timeout or progress), with how long it waited.
async fn stalled(progress: Option<SendProgress>, timeout: Option<Duration>) -> Duration {
    let (Some(progress), Some(timeout)) = (progress, timeout) else {
        return std::future::pending().await;
    };
    let mut tick = tokio::time::interval((timeout / 4).max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Some(waited) = progress.waiting().filter(|w| *w >= timeout) {
            return waited;
        }
    }
}

/// The identities of the peer's verified client certificate, if it sent one.
pub(crate) fn peer_identities<T>(request: &Request<T>) -> Vec<String> {
    request
        .peer_certs()
        .map(|chain| crate::tls::identities(&chain))
        .unwrap_or_default()
}

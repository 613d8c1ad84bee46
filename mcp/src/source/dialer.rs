//! Dial-out: the source dials a `ResourceSink` (a sink agent in a remote
//! cluster that cannot dial in) and pushes one group to it, reconnecting
//! with backoff and jitter until shutdown.
//!
//! A hub replica names itself to the sink with the [`REPLICA_METADATA`]
//! request header (when it has an identity: leader election on), so that
//! the agent can show which replica pushes to it.

use std::sync::Arc;

use http::HeaderValue;
use meshhub_proto::wire::EncodedResources;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tonic::transport::Channel;
use tower::ServiceExt as _;
use tracing::Instrument;

mod acks;

use acks::Acks;

use super::body::{Layout, ResponseBody};
use super::drive::{End, Plumbing, Queued, drive, settle};
use super::{SourceConfig, SourceStream, TRIGGER_COLLECTION};
use crate::cache::{Group, SnapshotCache};
use crate::dial::ConnectError;
use crate::ledger::{Ledger, Role};
use crate::reconnect::{Backoff, ReconnectPolicy, reconnect_loop};
use crate::snapshot::Served;
use crate::transport::DialError;

/// The gRPC request metadata carrying the pushing replica's identity.
pub const REPLICA_METADATA: &str = "meshhub-replica";

/// One remote sink to push to.
#[derive(Clone, Debug)]
pub struct SinkTarget {
    /// Name shown in the ledger (the cluster name).
    pub name: String,
    /// The group pushed.
    pub group: Group,
    /// Where the sink listens (with TLS files if any, read per attempt).
    pub endpoint: crate::dial::DialTarget,
    /// Reconnect policy.
    pub reconnect: ReconnectPolicy,
    /// Protocol settings.
    pub config: Arc<SourceConfig>,
    /// gRPC message limit both ways.
    pub max_message_bytes: usize,
    /// Our identity, sent as [`REPLICA_METADATA`] (none: not sent).
    pub replica: Option<String>,
}

/// Pushes `target.group` to the sink until `shutdown`.
pub async fn run(
    target: SinkTarget,
    cache: SnapshotCache,
    ledger: Ledger,
    shutdown: CancellationToken,
) {
    let span = tracing::info_span!("mcp.dialer", cluster = %target.name, endpoint = %target.endpoint.uri());
    async move {
        let record = ledger.register(Role::Source, target.name.clone(), target.group.to_string());
        record.identify("", &target.group);
        let (t, c, r, stop) = (&target, &cache, &record, &shutdown);
        reconnect_loop(
            Backoff::new(target.reconnect.clone()),
            &shutdown,
            move || async move { settle(dial_once(t, c, r, stop).await, r, "sink") },
            |delay| {
                metrics::counter!("meshhub_mcp_reconnects_total", "role" => "source", "peer" => t.name.clone()).increment(1);
                tracing::debug!(?delay, "reconnecting after backoff");
            },
        )
        .await;
    }
    .instrument(span)
    .await
}

/// One connection and stream. Returns how it ended and whether the sink
/// sent anything (a healthy stream resets the backoff).
async fn dial_once(
    target: &SinkTarget,
    cache: &SnapshotCache,
    record: &crate::ledger::PeerRecord,
    shutdown: &CancellationToken,
) -> Result<(End, bool), DialError> {
    let connected = tokio::select! {
        () = shutdown.cancelled() => return Ok((End::Shutdown, false)),
        c = target.endpoint.connect() => c.map_err(|e| match e {
            ConnectError::Prepare(e) => DialError::Endpoint(e.to_string()),
            ConnectError::Connect(e) => DialError::Connect(crate::transport::connect_error(&e)),
        })?,
    };
    let (tx, rx) = mpsc::channel::<Queued<EncodedResources>>(16);
    // Some proxies only open the stream once the client sent something.
    let trigger = EncodedResources {
        collection: TRIGGER_COLLECTION.into(),
        ..Default::default()
    };
    tx.send(Box::new(Ok(trigger)))
        .await
        .map_err(|_| DialError::Internal("queue closed".into()))?;
    let replica = match &target.replica {
        Some(replica) => Some(HeaderValue::from_str(replica).map_err(|_| {
            DialError::Internal(format!(
                "replica identity {replica:?} is not valid gRPC metadata"
            ))
        })?),
        None => None,
    };
    let outgoing =
        tokio_stream::StreamExt::map_while(ReceiverStream::new(rx), |q| (*q).ok().map(Ok));
    let body = ResponseBody::request(outgoing, target.max_message_bytes);
    let response = tokio::select! {
        () = shutdown.cancelled() => return Ok((End::Shutdown, false)),
        r = establish(Channel::clone(&connected.channel), body, replica, target.max_message_bytes) => match r {
            Ok(stream) => stream,
            Err(CallError::Answered(status)) => return Err(DialError::Refused(status)),
            Err(CallError::NoCall(e)) => {
                // The connection could not carry the call.
                target.endpoint.forget(&connected);
                return Err(e);
            }
        },
    };
    record.connected();
    metrics::gauge!("meshhub_mcp_streams", "role" => "dialer").increment(1.0);
    tracing::info!("stream to sink opened");
    let mut healthy = false;
    let mut machine = SourceStream::new(target.config.clone());
    let end = drive(
        Plumbing {
            cache,
            group: target.group.clone(),
            record,
            shutdown: shutdown.clone(),
            collection_of: Arc::new(|key: &str| Served::Collection(key.to_owned())),
            request_rate: target.config.request_rate,
        },
        &mut machine,
        None,
        response,
        &tx,
        |r| r,
        || healthy = true,
    )
    .await;
    metrics::gauge!("meshhub_mcp_streams", "role" => "dialer").decrement(1.0);
    if !matches!(end, End::Shutdown | End::Withdrawn) {
        // The connection may be what ended it: the next attempt opens a
        // new one.
        target.endpoint.forget(&connected);
    }
    Ok((end, healthy))
}

/// Why [`establish`] gave no stream.
enum CallError {
    /// The sink answered with a status (the connection works).
    Answered(Status),
    /// The call could not be made on the connection (with the cause's
    /// whole chain, as a failed connect says it).
    NoCall(DialError),
}

/// The gRPC path of `ResourceSink.EstablishResourceStream`.
const ESTABLISH_PATH: &str = "/istio.mcp.v1alpha1.ResourceSink/EstablishResourceStream";

/// Opens the sink's stream with `body` as the request: what tonic's
/// generated client does, but with our message body, which holds nothing
/// of a sent message once it is written (tonic's encoder keeps a buffer
/// the size of the largest message for the life of the stream: a full
/// snapshot per idle cluster). The answer is read by [`Acks`], with
/// tonic's checks (trailers-only status, HTTP status, message limit) and
/// a receive buffer that does not keep the size of the largest request.
async fn establish<M, S>(
    channel: Channel,
    body: ResponseBody<M, S>,
    replica: Option<HeaderValue>,
    max_message_bytes: usize,
) -> Result<Acks<tonic::body::Body>, CallError>
where
    M: Layout,
    S: futures::Stream<Item = Result<M, Status>> + Unpin + Send + 'static,
{
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .version(http::Version::HTTP_2)
        .uri(ESTABLISH_PATH)
        .header(http::header::TE, "trailers")
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .body(tonic::body::Body::new(body))
        .map_err(|e| {
            CallError::NoCall(DialError::Internal(format!("building the request: {e}")))
        })?;
    if let Some(replica) = replica {
        request.headers_mut().insert(REPLICA_METADATA, replica);
    }
    let response = channel
        .oneshot(request)
        .await
        .map_err(|e| CallError::NoCall(DialError::Connect(crate::transport::connect_error(&e))))?;
    let status_code = response.status();
    // A `grpc-status` among the headers: a trailers-only answer.
    match acks::status_of(response.headers()) {
        Some(status) if status.code() != tonic::Code::Ok => Err(CallError::Answered(status)),
        Some(_) => Ok(Acks::empty(response.into_body())),
        None => Ok(Acks::new(
            response.into_body(),
            status_code,
            max_message_bytes,
        )),
    }
}

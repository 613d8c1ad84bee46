//! Dial-out: the source dials a `ResourceSink` (a sink agent in a remote
//! cluster that cannot dial in) and pushes one group to it, reconnecting
//! with backoff and jitter until shutdown.
//!
//! A hub replica names itself to the sink with the [`REPLICA_METADATA`]
//! request header (when it has an identity: leader election on), so that
//! the agent can show which replica pushes to it.

use std::sync::Arc;

use meshhub_proto::wire::EncodedResources;
use meshhub_proto::wire::sink_client::ResourceSinkClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::drive::{End, Plumbing, Queued, drive, settle};
use super::{SourceConfig, SourceStream, TRIGGER_COLLECTION};
use crate::cache::{Group, SnapshotCache};
use crate::ledger::{Ledger, Role};
use crate::reconnect::{Backoff, ReconnectPolicy, reconnect_loop};
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
    let endpoint = target
        .endpoint
        .endpoint()
        .map_err(|e| DialError::Endpoint(e.to_string()))?;
    let endpoint = crate::transport::tune(endpoint);
    let channel = tokio::select! {
        () = shutdown.cancelled() => return Ok((End::Shutdown, false)),
        c = endpoint.connect() => c.map_err(|e| DialError::Connect(crate::transport::connect_error(&e)))?,
    };
    let mut client = ResourceSinkClient::new(channel)
        .max_decoding_message_size(target.max_message_bytes)
        .max_encoding_message_size(target.max_message_bytes);
    let (tx, rx) = mpsc::channel::<Queued<EncodedResources>>(16);
    // Some proxies only open the stream once the client sent something.
    let trigger = EncodedResources {
        collection: TRIGGER_COLLECTION.into(),
        ..Default::default()
    };
    tx.send(Box::new(Ok(trigger)))
        .await
        .map_err(|_| DialError::Internal("queue closed".into()))?;
    let outgoing = tokio_stream::StreamExt::map_while(ReceiverStream::new(rx), |q| (*q).ok());
    let mut request = tonic::Request::new(outgoing);
    if let Some(replica) = &target.replica {
        let value = replica.parse().map_err(|_| {
            DialError::Internal(format!(
                "replica identity {replica:?} is not valid gRPC metadata"
            ))
        })?;
        request.metadata_mut().insert(REPLICA_METADATA, value);
    }
    let response = tokio::select! {
        () = shutdown.cancelled() => return Ok((End::Shutdown, false)),
        r = client.establish_resource_stream(request) => r.map_err(DialError::Refused)?,
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
            collection_of: Arc::new(str::to_owned),
            request_rate: target.config.request_rate,
        },
        &mut machine,
        None,
        response.into_inner(),
        &tx,
        |r| r,
        || healthy = true,
    )
    .await;
    metrics::gauge!("meshhub_mcp_streams", "role" => "dialer").decrement(1.0);
    Ok((end, healthy))
}

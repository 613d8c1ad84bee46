//! The sink as a client: dials a `ResourceSource` (a hub, or an agent
//! re-serving its state), subscribes and applies what arrives, reconnecting
//! with backoff and jitter until shutdown.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use meshhub_proto::mcp::resource_source_client::ResourceSourceClient;
use meshhub_proto::mcp::{RequestResources, Resources};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{SinkConfig, SinkStream, Updater};
use crate::dial::ConnectError;
use crate::ledger::{Ledger, PeerRecord, Role};
use crate::reconnect::{Backoff, ReconnectPolicy, reconnect_loop};
use crate::source::drive::{End, settle};
use crate::transport::DialError;
use tonic::transport::Channel;

/// A source to subscribe to.
#[derive(Clone, Debug)]
pub struct SourceTarget {
    /// Name shown in the ledger.
    pub name: String,
    /// Where the source listens (with TLS files if any, read per attempt).
    pub endpoint: crate::dial::DialTarget,
    /// What to subscribe to and as whom.
    pub config: Arc<SinkConfig>,
    /// Reconnect policy.
    pub reconnect: ReconnectPolicy,
    /// gRPC message limit both ways.
    pub max_message_bytes: usize,
}

/// Subscribes until shutdown, reconnecting after every failure.
pub async fn run<U: Updater>(
    target: SourceTarget,
    updater: Arc<U>,
    ledger: Ledger,
    shutdown: CancellationToken,
) {
    let span = tracing::info_span!("mcp.sink.client", source = %target.name, endpoint = %target.endpoint.uri());
    async move {
        let record = ledger.register(Role::Sink, target.name.clone(), "");
        record.identify(&target.config.node.id, "");
        let (t, u, r, stop) = (&target, &*updater, &record, &shutdown);
        reconnect_loop(
            Backoff::new(target.reconnect.clone()),
            &shutdown,
            move || async move { settle(connect_once(t, u, r, stop).await, r, "source") },
            |delay| {
                metrics::counter!("meshhub_mcp_reconnects_total", "role" => "sink", "peer" => t.name.clone()).increment(1);
                tracing::debug!(?delay, "reconnecting after backoff");
            },
        )
        .await;
    }
    .instrument(span)
    .await
}

/// Runs one stream against an already established channel (no reconnect).
/// Returns how it ended and whether any response arrived.
pub async fn connect_once<U: Updater>(
    target: &SourceTarget,
    updater: &U,
    record: &PeerRecord,
    shutdown: &CancellationToken,
) -> Result<(End, bool), DialError> {
    let connected = tokio::select! {
        () = shutdown.cancelled() => return Ok((End::Shutdown, false)),
        c = target.endpoint.connect() => c.map_err(|e| match e {
            ConnectError::Prepare(e) => DialError::Endpoint(e.to_string()),
            ConnectError::Connect(e) => DialError::Connect(crate::transport::connect_error(&e)),
        })?,
    };
    let mut client = ResourceSourceClient::new(Channel::clone(&connected.channel))
        .max_decoding_message_size(target.max_message_bytes)
        .max_encoding_message_size(target.max_message_bytes);
    let (tx, rx) = mpsc::channel::<Result<RequestResources, tonic::Status>>(64);
    let outgoing = tokio_stream::StreamExt::map_while(ReceiverStream::new(rx), Result::ok);
    // Open the call first: the opening requests are queued by `drive`.
    let call = client.establish_resource_stream(outgoing);
    let mut machine = SinkStream::new(target.config.clone());
    // `drive` sends the opening requests before reading; the call resolves
    // once the server answered with headers.
    let opening: Vec<_> = machine.initial_requests(|c| updater.held(c));
    for req in opening {
        tx.send(Ok(req))
            .await
            .map_err(|_| DialError::Internal("queue closed".into()))?;
    }
    let response = tokio::select! {
        () = shutdown.cancelled() => return Ok((End::Shutdown, false)),
        r = call => r.map_err(|status| {
            // The connection could not carry the call (an answer of the
            // source, such as UNIMPLEMENTED, says it can).
            if matches!(status.code(), tonic::Code::Unavailable | tonic::Code::Unknown) {
                target.endpoint.forget(&connected);
            }
            DialError::Refused(status)
        })?,
    };
    record.connected();
    tracing::info!("subscribed");
    let mut healthy = false;
    let mut responses = response.into_inner();
    let end = super::drive::answer(
        &mut machine,
        updater,
        &mut responses,
        &tx,
        record,
        shutdown,
        || healthy = true,
    )
    .await;
    let end = match end {
        // An ACK that could not be sent: the source ended the call (Galley
        // ends it for a collection it does not serve). Its status says why.
        End::PeerClosed => final_status(&mut responses).await,
        end => end,
    };
    if !matches!(end, End::Shutdown | End::Withdrawn) {
        // The connection may be what ended it: the next attempt opens a
        // new one.
        target.endpoint.forget(&connected);
    }
    Ok((end, healthy))
}

/// How long the status of a call that is over may take to arrive.
const FINAL_STATUS_WAIT: Duration = Duration::from_secs(1);

/// The status a call ended with, if it ended with an error. Responses
/// still queued before it are passed over: their ACKs can no longer be
/// sent, and the next stream asks again from what is held. (Reading only
/// the next item lost the status behind them: a source that refuses a
/// collection right after answering others — Galley 1.5 does — looked
/// like a peer that closed for no reason, and the refusal was retried.)
async fn final_status<S>(responses: &mut S) -> End
where
    S: futures::Stream<Item = Result<Resources, tonic::Status>> + Unpin,
{
    let status = async {
        while let Some(item) = responses.next().await {
            if let Err(status) = item {
                return End::Failed(status);
            }
        }
        End::PeerClosed
    };
    tokio::time::timeout(FINAL_STATUS_WAIT, status)
        .await
        .unwrap_or(End::PeerClosed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(collection: &str) -> Result<Resources, tonic::Status> {
        Ok(Resources {
            collection: collection.to_owned(),
            ..Resources::default()
        })
    }

    #[tokio::test]
    async fn the_final_status_is_found_behind_queued_responses() {
        let refusal = tonic::Status::invalid_argument("unsupported collection \"x\"");
        let mut responses = futures::stream::iter([answer("a"), answer("b"), Err(refusal)]);
        match final_status(&mut responses).await {
            End::Failed(status) => {
                assert_eq!(status.code(), tonic::Code::InvalidArgument);
                assert!(status.message().contains("unsupported collection"));
            }
            other => panic!("the refusal was lost: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_call_that_ended_cleanly_or_never_ends_is_peer_closed() {
        let mut clean = futures::stream::iter([answer("a")]);
        assert!(matches!(final_status(&mut clean).await, End::PeerClosed));
        tokio::time::pause();
        let mut silent = futures::stream::pending::<Result<Resources, tonic::Status>>();
        assert!(matches!(final_status(&mut silent).await, End::PeerClosed));
    }
}

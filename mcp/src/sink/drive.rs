//! Pumps one sink-side stream: responses from the source go through the
//! [`SinkStream`] machine and the [`Updater`]; exactly one ACK or NACK goes
//! back per response. Shared by the sink client and the `ResourceSink` server.

use futures::{Stream, StreamExt};
use meshhub_proto::mcp::{RequestResources, Resources};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::{SinkStep, SinkStream, Updater};
use crate::ledger::PeerRecord;
use crate::source::drive::End;

/// Sends the opening requests, then answers responses until the stream
/// ends. `on_message` is called on every response received.
pub async fn drive<U: Updater, S>(
    machine: &mut SinkStream,
    updater: &U,
    responses: S,
    tx: &mpsc::Sender<Result<RequestResources, Status>>,
    record: &PeerRecord,
    shutdown: &CancellationToken,
    on_message: impl FnMut(),
) -> End
where
    S: Stream<Item = Result<Resources, Status>> + Unpin,
{
    for req in machine.initial_requests(|c| updater.held(c)) {
        if tx.send(Ok(req)).await.is_err() {
            return End::PeerClosed;
        }
    }
    answer(
        machine, updater, responses, tx, record, shutdown, on_message,
    )
    .await
}

/// Answers responses (the opening requests were already sent) until the
/// stream ends.
pub async fn answer<U: Updater, S>(
    machine: &mut SinkStream,
    updater: &U,
    mut responses: S,
    tx: &mpsc::Sender<Result<RequestResources, Status>>,
    record: &PeerRecord,
    shutdown: &CancellationToken,
    mut on_message: impl FnMut(),
) -> End
where
    S: Stream<Item = Result<Resources, Status>> + Unpin,
{
    loop {
        let response = tokio::select! {
            biased;
            () = shutdown.cancelled() => return End::Shutdown,
            r = responses.next() => match r {
                None => return End::PeerClosed,
                Some(Err(status)) => return End::Failed(status),
                Some(Ok(r)) => r,
            },
        };
        on_message();
        let reply = match machine.on_response(response) {
            SinkStep::Reply(nack) => {
                if nack.collection != crate::source::TRIGGER_COLLECTION {
                    tracing::warn!(collection = %nack.collection, "response for a collection we did not ask for: NACK");
                }
                nack
            }
            SinkStep::Apply(change) => {
                let (collection, version, nonce) = (
                    change.collection.clone(),
                    change.version.clone(),
                    change.nonce.clone(),
                );
                record.sent(&collection, &version, &nonce);
                let resources = change.resources.len();
                // Applying is not interrupted by shutdown: a half-applied
                // change is worse than a slightly later exit.
                let result = updater.apply(change).await;
                match &result {
                    Ok(()) => {
                        tracing::debug!(%collection, %version, resources, "applied; ACK");
                        record.acked(&collection, &version, &nonce);
                    }
                    Err(e) => {
                        tracing::warn!(%collection, %version, error = %e, "rejected; NACK");
                        record.nacked(&collection, &version, super::CODE_INVALID_ARGUMENT, &e.0);
                    }
                }
                machine.on_applied(&collection, &nonce, &result)
            }
        };
        if tx.send(Ok(reply)).await.is_err() {
            return End::PeerClosed;
        }
    }
}

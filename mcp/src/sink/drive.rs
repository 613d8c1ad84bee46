//! Pumps one sink-side stream: responses from the source go through the
//! [`SinkStream`] machine and the [`Updater`]; exactly one ACK or NACK goes
//! back per response. Shared by the sink client and the `ResourceSink` server.
//!
//! A NACK the updater expects to pass ([`ApplyError::Unavailable`] with a
//! `retry_after`, e.g. a full disk) schedules a new request for the
//! collection; the source then
//! resends its current version, so the sink recovers without a new version
//! and without an operator.

use std::collections::BTreeMap;

use futures::{Stream, StreamExt};
use meshhub_proto::mcp::{RequestResources, Resources};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::{ApplyError, SinkStep, SinkStream, Updater};
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
    // Collections to ask for again, and when.
    let mut retries: BTreeMap<String, tokio::time::Instant> = BTreeMap::new();
    loop {
        let next_retry = retries.values().min().copied();
        let response = tokio::select! {
            biased;
            () = shutdown.cancelled() => return End::Shutdown,
            () = until(next_retry) => {
                let now = tokio::time::Instant::now();
                let due: Vec<String> = retries
                    .iter()
                    .filter(|(_, at)| **at <= now)
                    .map(|(c, _)| c.clone())
                    .collect();
                for collection in due {
                    retries.remove(&collection);
                    let Some(req) = machine.request_again(&collection, |c| updater.held(c)) else {
                        continue;
                    };
                    tracing::info!(%collection, "asking again for a change that failed to apply");
                    metrics::counter!(METRIC_REQUESTED_AGAIN).increment(1);
                    if tx.send(Ok(req)).await.is_err() {
                        return End::PeerClosed;
                    }
                }
                continue;
            }
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
                // A newer response supersedes a pending retry.
                retries.remove(&collection);
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
                        record.nacked(
                            &collection,
                            &version,
                            super::CODE_INVALID_ARGUMENT,
                            &e.to_string(),
                        );
                        match e {
                            ApplyError::Invalid(_) => {
                                tracing::warn!(%collection, %version, error = %e, "rejected; NACK");
                            }
                            ApplyError::Unavailable { retry_after, .. } => {
                                tracing::warn!(%collection, %version, error = %e, retry.after = ?retry_after, "can't take it now; NACK");
                                if let Some(after) = retry_after {
                                    retries.insert(
                                        collection.clone(),
                                        tokio::time::Instant::now() + *after,
                                    );
                                }
                            }
                        }
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

/// Counts the requests a sink sent again after a change failed to apply
/// for a reason expected to pass.
pub const METRIC_REQUESTED_AGAIN: &str = "meshhub_mcp_sink_requested_again_total";

/// Waits until `at`, or forever.
async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

//! Pumps one source-side stream: requests from the peer and collection
//! updates from the cache go into a [`Machine`] (the [`SourceStream`], or
//! the Delta ADS machine wrapping it); its responses go to the peer and its
//! events to the ledger. Shared by the `ResourceSource` server, the
//! `ResourceSink` dialer and both ADS variants.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use meshhub_proto::mcp::RequestResources;
use meshhub_proto::wire::EncodedResources;
use tokio::sync::mpsc;
use tokio_stream::StreamMap;
use tokio_stream::wrappers::WatchStream;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::{Event, SourceStream, Step};
use crate::cache::{CollectionState, Group, SnapshotCache};
use crate::ledger::PeerRecord;
use crate::limits::RequestRate;
use crate::snapshot::CollectionSnapshot;

/// A source-side stream machine as the driver sees it: requests and
/// collection updates in, [`Step`]s out. No I/O.
pub trait Machine {
    /// What the peer sends.
    type Request;
    /// What goes back to it.
    type Response;
    /// Handles one request from the peer.
    fn on_request(&mut self, req: &Self::Request) -> Step<Self::Response>;
    /// Feeds the current content of a watched collection (keyed as the
    /// step's `watch` named it).
    fn on_update(&mut self, key: &str, snapshot: Arc<CollectionSnapshot>) -> Step<Self::Response>;
}

impl Machine for SourceStream {
    type Request = RequestResources;
    type Response = EncodedResources;

    fn on_request(&mut self, req: &RequestResources) -> Step {
        SourceStream::on_request(self, req)
    }

    fn on_update(&mut self, key: &str, snapshot: Arc<CollectionSnapshot>) -> Step {
        SourceStream::on_update(self, key, snapshot)
    }
}

/// Most collections one stream may subscribe (bounds what a peer can make
/// us hold).
pub const MAX_SUBSCRIPTIONS: usize = 512;

/// Why a stream ended.
#[derive(Debug)]
pub enum End {
    /// The peer half-closed or went away cleanly.
    PeerClosed,
    /// We are shutting down.
    Shutdown,
    /// The group was removed from the configuration.
    Withdrawn,
    /// The transport failed.
    Failed(Status),
}

impl End {
    /// The status to end the RPC with, if any.
    pub fn status(&self) -> Option<Status> {
        match self {
            Self::PeerClosed => None,
            Self::Shutdown => Some(Status::unavailable("server shutting down")),
            Self::Withdrawn => Some(Status::unavailable(
                "the group this stream served was removed",
            )),
            Self::Failed(s) => Some(s.clone()),
        }
    }

    /// For `PeerRecord::disconnected`.
    pub fn error(&self) -> Option<String> {
        match self {
            Self::PeerClosed => None,
            Self::Shutdown => Some("shutdown".into()),
            Self::Withdrawn => Some("group removed".into()),
            Self::Failed(s) => Some(format!("{}: {}", s.code(), s.message())),
        }
    }
}

/// How a dialer's connection attempt ended, recorded and turned into the
/// reconnect loop's verdict. `peer` names the other side in logs
/// ("sink", "source").
pub fn settle(
    outcome: Result<(End, bool), String>,
    record: &PeerRecord,
    peer: &str,
) -> crate::reconnect::Attempt {
    use crate::reconnect::Attempt;
    match outcome {
        Ok((End::Shutdown, _)) => Attempt::Stop,
        Ok((end, healthy)) => {
            tracing::warn!(reason = ?end, "stream with {peer} ended");
            record.disconnected(end.error().or(Some(format!("{peer} closed the stream"))));
            if healthy {
                Attempt::Healthy
            } else {
                Attempt::Failed
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot reach {peer}");
            record.disconnected(Some(e));
            Attempt::Failed
        }
    }
}

/// What a stream is plugged into.
pub struct Plumbing<'a> {
    /// Where collection updates come from.
    pub cache: &'a SnapshotCache,
    /// The group served.
    pub group: Group,
    /// Where events go.
    pub record: &'a PeerRecord,
    /// Ends the stream.
    pub shutdown: CancellationToken,
    /// Maps a subscription key to the cache collection (identity for MCP;
    /// type URL → collection for ADS).
    pub collection_of: Arc<dyn Fn(&str) -> String + Send + Sync>,
    /// How fast the peer may send requests (`None`: no limit).
    pub request_rate: Option<RequestRate>,
}

/// Runs the stream until the peer leaves, the transport fails, the group is
/// withdrawn or shutdown. `first` is a request already read from the peer.
/// `on_message` is called on every message received (dialers reset their
/// backoff there).
pub async fn drive<M, Out, S>(
    p: Plumbing<'_>,
    machine: &mut M,
    first: Option<M::Request>,
    mut requests: S,
    tx: &mpsc::Sender<Result<Out, Status>>,
    to_out: impl Fn(M::Response) -> Out,
    mut on_message: impl FnMut(),
) -> End
where
    M: Machine,
    S: Stream<Item = Result<M::Request, Status>> + Unpin,
{
    let mut watches: StreamMap<String, WatchStream<CollectionState>> = StreamMap::new();
    let handle = |step: Step<M::Response>,
                  watches: &mut StreamMap<String, WatchStream<CollectionState>>| {
        for event in &step.events {
            p.record.record(event);
            log_event(event);
        }
        if let Some(key) = step.watch {
            if watches.len() >= MAX_SUBSCRIPTIONS {
                tracing::warn!(collection = %key, limit = MAX_SUBSCRIPTIONS, "too many subscriptions on one stream; ignoring");
            } else {
                let collection = (p.collection_of)(&key);
                let rx = p.cache.watch(&p.group, &collection);
                watches.insert(key, WatchStream::new(rx));
            }
        }
        step.responses
    };
    let limiter = p.request_rate.map(|r| r.limiter());
    let mut outgoing = Vec::new();
    if let Some(req) = first {
        outgoing = handle(machine.on_request(&req), &mut watches);
    }
    loop {
        for response in outgoing.drain(..) {
            if tx.send(Ok(to_out(response))).await.is_err() {
                return End::PeerClosed;
            }
        }
        tokio::select! {
            biased;
            () = p.shutdown.cancelled() => return End::Shutdown,
            req = requests.next() => match req {
                None => return End::PeerClosed,
                Some(Err(status)) => return End::Failed(status),
                Some(Ok(req)) => {
                    if let Some(Err(status)) = limiter.as_ref().map(|l| l.check()) {
                        return End::Failed(status);
                    }
                    on_message();
                    outgoing = handle(machine.on_request(&req), &mut watches);
                }
            },
            Some((key, state)) = watches.next(), if !watches.is_empty() => match state {
                CollectionState::Pending => {}
                CollectionState::Withdrawn => return End::Withdrawn,
                CollectionState::Ready(snapshot) => {
                    outgoing = handle(machine.on_update(&key, snapshot), &mut watches);
                }
            },
        }
    }
}

fn log_event(event: &Event) {
    match event {
        Event::Subscribed {
            collection,
            incremental,
            initial_resources,
        } => {
            tracing::debug!(%collection, incremental, initial_resources, "subscribed")
        }
        Event::Sent {
            collection,
            version,
            nonce,
            resources,
            removed,
            incremental,
            bytes,
        } => {
            tracing::debug!(%collection, %version, %nonce, resources, removed, incremental, bytes, "sent")
        }
        Event::Acked {
            collection,
            version,
            ..
        } => tracing::debug!(%collection, %version, "ACK"),
        Event::Nacked {
            collection,
            version,
            code,
            message,
            ..
        } => {
            tracing::warn!(%collection, %version, code, %message, "NACK: version parked until it changes")
        }
        Event::Stale {
            collection,
            nonce,
            nack,
        } => {
            tracing::debug!(%collection, %nonce, nack, "stale ACK/NACK ignored")
        }
        Event::TooLarge {
            collection,
            version,
            bytes,
            limit,
        } => tracing::error!(
            %collection, %version, bytes, limit,
            "response exceeds the peer's message limit; not sent (raise the limit or split the configuration)"
        ),
    }
}

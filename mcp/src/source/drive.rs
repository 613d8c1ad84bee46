//! Pumps one source-side stream: requests from the peer and collection
//! updates from the cache go into a [`Machine`] (the [`SourceStream`], or
//! the Delta ADS machine wrapping it); its responses go to the peer and its
//! events to the ledger. Shared by the `ResourceSource` server, the
//! `ResourceSink` dialer and both ADS variants.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use meshhub_proto::mcp::RequestResources;
use meshhub_proto::wire::EncodedResources;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::{Event, SourceStream, Step};
use crate::cache::{Group, GroupState, SnapshotCache};
use crate::ledger::PeerRecord;
use crate::limits::RequestRate;
use crate::snapshot::{CollectionSnapshot, Served};

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

/// What a stream task queues for its transport. Boxed because a tokio
/// channel allocates its slots 32 at a time: an unboxed response (~130
/// bytes) made that 4 KiB held by every idle stream.
pub type Queued<T> = Box<Result<T, Status>>;

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
    outcome: Result<(End, bool), crate::transport::DialError>,
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
            record.disconnected(Some(e.to_string()));
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
    /// What a subscription key serves (its own collection for MCP; for
    /// ADS the type URL's collection, or a view of the snapshot).
    pub collection_of: Arc<dyn Fn(&str) -> Served + Send + Sync>,
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
    tx: &mpsc::Sender<Queued<Out>>,
    to_out: impl Fn(M::Response) -> Out,
    mut on_message: impl FnMut(),
) -> End
where
    M: Machine,
    S: Stream<Item = Result<M::Request, Status>> + Unpin,
{
    let mut watches = Watches::default();
    let handle = |step: Step<M::Response>, watches: &mut Watches| {
        for event in &step.events {
            p.record.record(event);
            log_event(event);
        }
        if let Some(key) = step.watch {
            let collection = (p.collection_of)(&key);
            watches.add(p.cache, &p.group, key, collection);
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
            if tx.send(Box::new(Ok(to_out(response)))).await.is_err() {
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
            () = watches.changed(), if watches.open() => {
                let Some(updates) = watches.updates() else {
                    return End::Withdrawn;
                };
                for (i, collection) in updates {
                    let step = machine.on_update(&watches.watched[i].key, collection);
                    outgoing.extend(handle(step, &mut watches));
                }
            },
        }
    }
}

/// The collections one stream serves, followed through one watch on its
/// group: each publish wakes the stream, which feeds its machine the
/// collections whose version differs from what it last fed.
#[derive(Default)]
struct Watches {
    group: Option<watch::Receiver<GroupState>>,
    /// Whether the group can still change (its sender is alive).
    live: bool,
    watched: Vec<Watched>,
}

struct Watched {
    /// The subscription key the machine knows it by.
    key: String,
    /// What it serves, when it is not the collection named by the key
    /// (ADS type URLs, views).
    collection: Option<Served>,
    /// What was last fed (kept to compare versions).
    fed: Option<Arc<CollectionSnapshot>>,
    /// Where the group's snapshots hold the collection (their layout
    /// rarely changes): see
    /// [`crate::snapshot::Snapshot::collection_hinted`].
    hint: usize,
}

impl Watches {
    /// Starts serving `key`; its current content is fed on the next turn.
    fn add(&mut self, cache: &SnapshotCache, group: &Group, key: String, collection: Served) {
        if self.watched.len() >= MAX_SUBSCRIPTIONS {
            tracing::warn!(collection = %key, limit = MAX_SUBSCRIPTIONS, "too many subscriptions on one stream; ignoring");
            return;
        }
        let rx = self.group.get_or_insert_with(|| {
            self.live = true;
            cache.watch_group(group)
        });
        rx.mark_changed();
        let collection = match collection {
            Served::Collection(name) if name == key => None,
            other => Some(other),
        };
        self.watched.push(Watched {
            key,
            collection,
            fed: None,
            hint: 0,
        });
    }

    /// Whether there is anything to wait for.
    fn open(&self) -> bool {
        self.live && self.group.is_some()
    }

    /// Resolves when the group changed (or a subscription was added).
    async fn changed(&mut self) {
        let Some(rx) = self.group.as_mut() else {
            return std::future::pending().await;
        };
        if rx.changed().await.is_err() {
            // The cache is gone (shutdown) and its last state was seen:
            // nothing more will come.
            self.live = false;
        }
    }

    /// The collections (indices into `watched`) whose version differs
    /// from what was fed, now marked fed; `None` once the group is
    /// withdrawn.
    fn updates(&mut self) -> Option<Vec<(usize, Arc<CollectionSnapshot>)>> {
        let Some(rx) = self.group.as_mut() else {
            return Some(Vec::new());
        };
        let snapshot = match &*rx.borrow_and_update() {
            GroupState::Pending => return Some(Vec::new()),
            GroupState::Ready(snapshot) => snapshot.clone(),
            GroupState::Withdrawn => return None,
        };
        let mut out = Vec::new();
        for (i, w) in self.watched.iter_mut().enumerate() {
            let c = match &w.collection {
                None => snapshot.collection_hinted(&w.key, &mut w.hint),
                Some(served) => served.read(&snapshot),
            };
            if w.fed
                .as_ref()
                .is_some_and(|f| Arc::ptr_eq(f, &c) || f.version() == c.version())
            {
                continue;
            }
            w.fed = Some(c.clone());
            out.push((i, c));
        }
        Some(out)
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

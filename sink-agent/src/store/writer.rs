//! The store's writer: one task owns what the store holds (the resources
//! of every collection, the published snapshot, the [`SnapshotWriter`],
//! the status) and is the only one to change it. [`super::Store`] handles
//! send it validated changes and wait for its answer; readers use the
//! snapshot cache and the status `watch`, never a lock.
//!
//! The task never waits for the disk or the Kubernetes API itself: a
//! write runs on a blocking thread and a sync on the applier task, and the
//! writer takes the next message meanwhile. Per collection, changes are
//! taken one at a time, in the order they arrived, from start to end
//! (persisted, published, applied to Kubernetes); a change of another
//! collection does not wait for them.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt as _};
use meshhub_mcp::cache::{Group, SnapshotWriter};
use meshhub_mcp::ledger::At;
use meshhub_mcp::sink::ApplyError;
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use meshhub_proto::kinds::Kind;
use meshhub_proto::object::Object;
use meshhub_proto::wire::EncodedResources;
use meshhub_runtime::error_chain;
use prost::Message as _;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::persist::{PersistError, file_name, write_atomic};
use super::seal;
use super::status::{Origin, PersistFailure, StoreStatus, info, refused};
use crate::apply::Applier;
use crate::backoff::Retry;

/// After a change fails to persist, the stream asks for the collection
/// again after this long (to twice as long, jittered)...
pub const RETRY_FIRST: Duration = Duration::from_millis(500);
/// ...doubling on each further failure, never waiting longer than this.
pub const RETRY_MAX: Duration = Duration::from_secs(10);

/// One collection's resources, by name.
pub(super) type Held = BTreeMap<Arc<str>, EncodedResource>;

/// A received change, validated, for the writer to take.
pub(super) struct Change {
    pub(super) collection: String,
    pub(super) kind: Kind,
    /// The hub's `system_version_info`.
    pub(super) version: String,
    /// The upserts (or the whole state), each encoded once; or why they
    /// don't validate.
    pub(super) upserts: Result<Vec<EncodedResource>, ApplyError>,
    pub(super) removed: Vec<String>,
    pub(super) incremental: bool,
    /// The answer: the ACK or the NACK.
    pub(super) reply: oneshot::Sender<Result<(), ApplyError>>,
}

/// What the writer owns.
pub(super) struct Writer {
    pub(super) group: Group,
    pub(super) dir: PathBuf,
    pub(super) applier: Option<Applier>,
    pub(super) cache: SnapshotWriter,
    pub(super) snapshot: Snapshot,
    pub(super) status: watch::Sender<Arc<StoreStatus>>,
    /// What the hub takes the agent to hold: per collection, the state of
    /// the last change ACKed (or loaded at start). A change the cluster's
    /// API refused is still held and served (the applier retries it), but
    /// NACKed: the hub's next delta is from this state, not from that
    /// change, so incremental changes are applied to it.
    pub(super) acked: BTreeMap<String, Held>,
    /// The same as published for [`super::Store`]'s `held` (what a new
    /// stream declares to the hub).
    pub(super) acked_snapshot: Snapshot,
    pub(super) declared: watch::Sender<Arc<Snapshot>>,
}

/// A change between its steps.
struct InFlight {
    collection: String,
    kind: Kind,
    version: String,
    reply: oneshot::Sender<Result<(), ApplyError>>,
}

/// A finished write (on a blocking thread).
struct Written {
    change: InFlight,
    resources: Held,
    result: Result<(), PersistError>,
    elapsed: Duration,
    /// The objects to apply to Kubernetes (decoded on the same thread).
    objects: Option<Vec<Object>>,
}

/// A change at its end: synced to Kubernetes (or nothing to sync), or
/// refused by the API.
struct Finished {
    change: InFlight,
    served_version: String,
    resources: usize,
    result: Result<(), ApplyError>,
    /// What the change left held (the hub's base once it is ACKed).
    held: Held,
    snapshot: Arc<CollectionSnapshot>,
}

/// A collection whose writes fail, and when to ask for it again.
struct Failing {
    consecutive: u32,
    retry: Retry,
}

/// The writer's working state beside what it owns.
struct Run {
    w: Writer,
    /// Collections with a change in progress, each with the changes that
    /// arrived since, in order. Absent: nothing in progress.
    queued: HashMap<String, VecDeque<Change>>,
    writes: JoinSet<Written>,
    syncs: FuturesUnordered<BoxFuture<'static, Finished>>,
    failing: HashMap<String, Failing>,
}

impl Writer {
    /// Takes changes until every [`super::Store`] handle is gone, or
    /// `shutdown`; then finishes the changes already received (a
    /// half-taken change is worse than a slightly later exit) and ends.
    pub(super) async fn run(self, mut rx: mpsc::Receiver<Change>, shutdown: CancellationToken) {
        let mut run = Run {
            w: self,
            queued: HashMap::new(),
            writes: JoinSet::new(),
            syncs: FuturesUnordered::new(),
            failing: HashMap::new(),
        };
        let (mut open, mut closed) = (true, false);
        loop {
            if !open && run.queued.is_empty() {
                break;
            }
            tokio::select! {
                () = shutdown.cancelled(), if !closed => {
                    // Refuse new changes; those already sent are still
                    // received below.
                    closed = true;
                    rx.close();
                }
                change = rx.recv(), if open => match change {
                    Some(change) => run.admit(change),
                    None => open = false,
                },
                Some(done) = run.writes.join_next() => {
                    let done = done.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
                    run.written(done);
                }
                Some(done) = run.syncs.next() => run.finish(done),
                else => break,
            }
        }
        tracing::debug!("store writer stopped");
    }
}

impl Run {
    /// A change arrived: start it, or queue it behind its collection's.
    fn admit(&mut self, change: Change) {
        match self.queued.get_mut(&change.collection) {
            Some(queue) => queue.push_back(change),
            None => {
                self.queued
                    .insert(change.collection.clone(), VecDeque::new());
                self.start(change);
            }
        }
    }

    /// The collection's change ended: start its next one, if any.
    fn next(&mut self, collection: &str) {
        let next = self
            .queued
            .get_mut(collection)
            .and_then(VecDeque::pop_front);
        match next {
            Some(change) => self.start(change),
            None => {
                self.queued.remove(collection);
            }
        }
    }

    fn start(&mut self, change: Change) {
        let Change {
            collection,
            kind,
            version,
            upserts,
            removed,
            incremental,
            reply,
        } = change;
        let upserts = match upserts {
            Ok(u) => u,
            Err(e) => {
                // Invalid content is not asked for again (only a write
                // failure is), whatever failed before.
                self.writes_ok(&collection);
                refused(&self.w.status, &collection, &version, &e.to_string());
                let _ = reply.send(Err(e));
                self.next(&collection);
                return;
            }
        };
        // A delta is from what the hub takes the agent to hold.
        let mut resources = match (incremental, self.w.acked.get(&collection)) {
            (true, Some(h)) => h.clone(),
            _ => BTreeMap::new(),
        };
        for name in &removed {
            resources.remove(name.as_str());
        }
        for r in upserts {
            resources.insert(r.name.clone(), r);
        }
        let path = self.w.dir.join(file_name(&collection));
        let decode_for = self.w.applier.as_ref().map(|_| kind.clone());
        let change = InFlight {
            collection,
            kind,
            version,
            reply,
        };
        // Encoding the file, the write and decoding the objects for the
        // applier are blocking or CPU work proportional to the collection.
        self.writes.spawn_blocking(move || {
            let mut file = EncodedResources {
                system_version_info: change.version.clone(),
                collection: change.collection.clone(),
                resources: Arc::new(resources.values().map(|r| r.encoded.clone()).collect()),
                ..Default::default()
            }
            .encode_to_vec();
            seal::append(&mut file);
            let started = Instant::now();
            let result = write_atomic(&path, &file);
            let elapsed = started.elapsed();
            let objects = match (&result, decode_for) {
                (Ok(()), Some(kind)) => Some(objects_of(&kind, resources.values())),
                _ => None,
            };
            Written {
                change,
                resources,
                result,
                elapsed,
                objects,
            }
        });
    }

    /// A write ended: publish, then hand the objects to the applier; or
    /// NACK, keeping the last good state.
    fn written(&mut self, done: Written) {
        let Written {
            change,
            resources,
            result,
            elapsed,
            objects,
        } = done;
        let collection = change.collection.clone();
        if let Err(e) = result {
            // The ACK promises the state survives a restart: without the file
            // it would not, so refuse and keep the last good state.
            let message = format!("can't persist: {}", error_chain(&e));
            let version = &change.version;
            tracing::error!(%collection, %version, error = %message, "persisting failed; NACK");
            metrics::counter!("meshhub_agent_persist_errors_total").increment(1);
            metrics::gauge!("meshhub_agent_persist_failing").set(1.0);
            let failing = self
                .failing
                .entry(collection.clone())
                .or_insert_with(|| Failing {
                    consecutive: 0,
                    retry: Retry::new(RETRY_FIRST, RETRY_MAX),
                });
            failing.consecutive = failing.consecutive.saturating_add(1);
            let retry_after = failing.retry.next_delay();
            let failure = PersistFailure {
                collection: collection.clone(),
                version: version.clone(),
                message: message.clone(),
                consecutive: failing.consecutive,
                at: At(SystemTime::now()),
            };
            self.w
                .status
                .send_modify(|s| Arc::make_mut(s).persist_failure = Some(failure));
            refused(&self.w.status, &collection, version, &message);
            let _ = change.reply.send(Err(ApplyError::Unavailable {
                message,
                retry_after: Some(retry_after),
            }));
            self.next(&collection);
            return;
        }
        metrics::histogram!("meshhub_agent_persist_seconds").record(elapsed);
        self.writes_ok(&collection);

        let c = Arc::new(CollectionSnapshot::new(
            resources.values().cloned().collect(),
        ));
        let served_version = c.version().to_owned();
        let count = c.len();
        let w = &mut self.w;
        w.snapshot.insert(collection.clone(), c.clone());
        w.cache.set(&w.group, Arc::new(w.snapshot.clone()));
        let now = At(SystemTime::now());
        w.status.send_modify(|s| {
            let s = Arc::make_mut(s);
            let acked = s
                .collections
                .get(&collection)
                .map(|c| c.acked_version.clone())
                .unwrap_or_default();
            s.collections.insert(
                collection.clone(),
                info(&change.version, &c, Origin::Hub, now, None, acked),
            );
        });
        metrics::gauge!("meshhub_agent_collections").set(w.snapshot.collections().count() as f64);
        // Persisted and served locally; now the cluster's API. Its refusal
        // is the NACK's message (the applier keeps retrying on its own).
        match (&w.applier, objects) {
            (Some(applier), Some(objects)) => {
                let sync = applier.sync(&collection, change.kind.clone(), objects);
                self.syncs.push(Box::pin(async move {
                    Finished {
                        result: sync.await,
                        change,
                        served_version,
                        resources: count,
                        held: resources,
                        snapshot: c,
                    }
                }));
            }
            _ => self.finish(Finished {
                change,
                served_version,
                resources: count,
                result: Ok(()),
                held: resources,
                snapshot: c,
            }),
        }
    }

    /// The change is through (or the API refused it): answer it.
    fn finish(&mut self, done: Finished) {
        let Finished {
            change,
            served_version,
            resources,
            result,
            held,
            snapshot,
        } = done;
        let (collection, version) = (&change.collection, &change.version);
        match &result {
            Ok(()) => {
                let w = &mut self.w;
                w.acked.insert(collection.clone(), held);
                w.acked_snapshot.insert(collection.clone(), snapshot);
                w.declared.send_replace(Arc::new(w.acked_snapshot.clone()));
                w.status.send_modify(|s| {
                    if let Some(c) = Arc::make_mut(s).collections.get_mut(collection) {
                        c.acked_version = version.clone();
                    }
                });
                metrics::counter!("meshhub_agent_changes_total", "result" => "accepted")
                    .increment(1);
                tracing::info!(%collection, %version, served.version = %served_version, resources, "accepted and persisted");
            }
            Err(e) => refused(&self.w.status, collection, version, &e.to_string()),
        }
        let collection = change.collection.clone();
        let _ = change.reply.send(result);
        self.next(&collection);
    }

    /// `collection` is not failing to persist (any more): once no
    /// collection is, the failure leaves `/status` and the gauge.
    fn writes_ok(&mut self, collection: &str) {
        if self.failing.remove(collection).is_none() || !self.failing.is_empty() {
            return;
        }
        metrics::gauge!("meshhub_agent_persist_failing").set(0.0);
        self.w
            .status
            .send_modify(|s| Arc::make_mut(s).persist_failure = None);
        tracing::info!(%collection, "no collection fails to persist any more");
    }
}

/// The Kubernetes objects of a collection's resources, each with its MCP
/// version as `resourceVersion` (the applier writes it as an annotation).
pub(super) fn objects_of<'a>(
    kind: &Kind,
    resources: impl Iterator<Item = &'a EncodedResource>,
) -> Vec<Object> {
    resources
        .filter_map(|r| match meshhub_proto::transcode::decode_resource(kind, &r.encoded) {
            Ok(mut o) => {
                o.metadata.resource_version = Some(r.version.to_string());
                Some(o)
            }
            Err(e) => {
                // Validated on receipt: this would be a bug, not bad input.
                tracing::error!(resource = %r.name, error = %e, "can't decode a held resource for applying");
                None
            }
        })
        .collect()
}

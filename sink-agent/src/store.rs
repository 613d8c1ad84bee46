//! The persistent store: the agent's [`Updater`].
//!
//! Every received change is validated first, resource by resource, against
//! the kind table (the body must be the kind's message and decode against
//! its schema; the name must be `namespace/name` or `/name`). One bad
//! resource rejects the whole change: the NACK names it
//! (`VirtualService bookinfo/reviews: …`) and the collection keeps its last
//! good state. A good change is accepted (full state replaces, a delta
//! upserts and removes), persisted atomically, and only then published to
//! the local snapshot cache; the ACK therefore promises durability. With
//! an [`Applier`], the ACK also waits for the change to be applied to the
//! cluster's Kubernetes API ("apply" in this crate means only that).
//!
//! On disk (see `docs/sink-agent.md`): `<data>/v1/collections/<escaped
//! collection>.pb`, each an encoded `istio.mcp.v1alpha1.Resources` with the
//! collection, the hub's `system_version_info` and every resource. Files are
//! replaced by write-to-temp, fsync, rename, fsync of the directory, so a
//! crash leaves the old or the new file, never a torn one. Each file ends
//! with a seal (a SHA-256 of everything before it, see [`seal`]): a file cut
//! short or damaged is skipped on load and reported, never served.
//! `<data>/v1/LOCK` is held (an OS file lock) for the life of the store, so
//! two agents can't share a data directory; it names its holder (process id
//! and start time), and a second agent's refusal quotes it.
//!
//! A change that can't be persisted (a full disk, a read-only directory) is
//! NACKed with the reason and the last good state stays served. The NACK is
//! [`ApplyError::Unavailable`] with a `retry_after` (from [`RETRY_FIRST`],
//! doubling, jittered, at most [`RETRY_MAX`]), so the stream asks again,
//! the hub resends its current version and the agent recovers by itself
//! once writes succeed. Invalid content is [`ApplyError::Invalid`]: it
//! waits for a new version.
//!
//! Each resource is encoded once, on receipt; the same bytes are written to
//! disk, re-read from disk and shared by every local stream.
//!
//! Concurrency: no lock. One task, the [`writer`], owns what the store
//! holds and the [`SnapshotWriter`]; a [`Store`] is a handle that validates
//! a change (on a blocking thread, in parallel with other streams) and
//! sends it to the writer. Per collection, changes are taken one at a time
//! in arrival order; collections don't wait for each other, and the writer
//! never waits for the disk or the Kubernetes API itself. Readers use cheap
//! handles: the snapshot cache and a [`watch::Receiver`] of
//! [`StoreStatus`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use meshhub_mcp::cache::{Group, SnapshotCache, SnapshotWriter};
use meshhub_mcp::ledger::At;
use meshhub_mcp::sink::{ApplyError, Change, Updater};
use meshhub_mcp::snapshot::{CollectionSnapshot, Snapshot};
use meshhub_proto::kinds::KindTable;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::apply::Applier;

mod persist;
pub mod seal;
mod status;
mod validate;
mod writer;

pub use persist::{
    COLLECTIONS_DIR, EXTENSION, FORMAT_DIR, LOCK_FILE, LoadError, PersistError, SEALED_MARKER,
    StoreError, collection_of, file_name, load_one, write_atomic,
};
pub use status::{CollectionInfo, Origin, PersistFailure, Refusal, StoreStatus};
pub use validate::validate;
pub use writer::{RETRY_FIRST, RETRY_MAX};

pub use meshhub_runtime::error_chain;

/// Changes sent to the writer and not yet taken (each sender then waits:
/// backpressure, not a lock).
const QUEUE: usize = 64;

/// What the store needs to know.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// The data directory (created if missing).
    pub data_dir: PathBuf,
    /// How long opening waits for another process holding it.
    pub data_dir_wait: std::time::Duration,
    /// The snapshot group the store publishes (what local consumers see).
    pub group: Group,
    /// The collections accepted; others are refused (and skipped on load).
    pub collections: Vec<String>,
    /// Kinds to validate against.
    pub kinds: KindTable,
    /// Where accepted state is applied to Kubernetes, when enabled.
    pub applier: Option<Applier>,
    /// Where the writer task runs.
    pub tasks: TaskTracker,
    /// Ends the writer: it takes no new change, finishes those it has and
    /// stops.
    pub shutdown: CancellationToken,
}

/// The persistent store: a handle on its writer task. Share it behind an
/// [`Arc`]; dropping the last handle releases the data directory's lock.
#[derive(Debug)]
pub struct Store {
    kinds: KindTable,
    group: Group,
    dir: PathBuf,
    accepted: BTreeSet<String>,
    cache: SnapshotCache,
    status: watch::Receiver<Arc<StoreStatus>>,
    /// What the hub takes the agent to hold (the last ACKed state of each
    /// collection): what a new stream declares.
    declared: watch::Receiver<Arc<Snapshot>>,
    writer: mpsc::Sender<writer::Change>,
    // Held for the store's life: the OS lock on `<data>/v1/LOCK`.
    _lock: File,
}

impl Store {
    /// Opens the data directory (creating it), takes its lock, loads every
    /// persisted collection (skipping, and reporting, files that fail) and
    /// publishes the result at once, so local consumers are served before
    /// the hub is reachable. Then starts the writer.
    pub async fn open(config: StoreConfig, cache: SnapshotWriter) -> Result<Self, StoreError> {
        let started = Instant::now();
        let format_dir = config.data_dir.join(FORMAT_DIR);
        let dir = format_dir.join(COLLECTIONS_DIR);
        let accepted: BTreeSet<String> = config.collections.iter().cloned().collect();
        let (lock, loaded) = {
            let kinds = config.kinds.clone();
            let accepted = accepted.clone();
            let wait = config.data_dir_wait;
            tokio::task::spawn_blocking(move || {
                persist::open_dir(&format_dir, &kinds, &accepted, wait)
            })
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?
        };

        let mut held: BTreeMap<String, writer::Held> = BTreeMap::new();
        let mut snapshot = Snapshot::new();
        let mut status = StoreStatus {
            loaded: true,
            data_dir: config.data_dir.clone(),
            ..Default::default()
        };
        let now = At(SystemTime::now());
        for item in loaded {
            match item {
                Ok((collection, version, resources)) => {
                    let c = CollectionSnapshot::new(resources.clone());
                    status.collections.insert(
                        collection.clone(),
                        status::info(&version, &c, Origin::Disk, now, None, version.clone()),
                    );
                    tracing::info!(%collection, %version, resources = c.len(), "loaded persisted collection");
                    snapshot.insert(collection.clone(), Arc::new(c));
                    held.insert(
                        collection,
                        resources.into_iter().map(|r| (r.name.clone(), r)).collect(),
                    );
                }
                Err(e) => {
                    let message = error_chain(&e);
                    tracing::error!(error = %message, "skipping a persisted collection");
                    metrics::counter!("meshhub_agent_load_errors_total").increment(1);
                    status.load_errors.push(message);
                }
            }
        }
        // Publish at once, even when nothing was persisted: a local consumer
        // then gets every collection (empty or not) without waiting for the
        // hub.
        cache.set(&config.group, Arc::new(snapshot.clone()));
        metrics::gauge!("meshhub_agent_collections").set(held.len() as f64);
        metrics::gauge!("meshhub_agent_persist_failing").set(0.0);
        tracing::info!(
            collections = held.len(),
            errors = status.load_errors.len(),
            elapsed = ?started.elapsed(),
            "persisted state loaded and published"
        );
        // The API may have drifted while the agent was down: reconcile it
        // with what is persisted (results go to the applier's status).
        if let Some(applier) = &config.applier {
            for (collection, resources) in &held {
                if let Some(kind) = config.kinds.by_collection(collection) {
                    let objects = writer::objects_of(kind, resources.values());
                    applier.reconcile(collection, kind.clone(), objects);
                }
            }
        }
        let (status_tx, status_rx) = watch::channel(Arc::new(status));
        let (declared_tx, declared) = watch::channel(Arc::new(snapshot.clone()));
        let reader = cache.reader();
        let (tx, rx) = mpsc::channel(QUEUE);
        let w = writer::Writer {
            group: config.group.clone(),
            dir: dir.clone(),
            applier: config.applier,
            cache,
            acked: held,
            acked_snapshot: snapshot.clone(),
            declared: declared_tx,
            snapshot,
            status: status_tx,
        };
        config.tasks.spawn(tracing::Instrument::instrument(
            w.run(rx, config.shutdown),
            tracing::info_span!("agent.store.writer"),
        ));
        Ok(Self {
            kinds: config.kinds,
            group: config.group,
            dir,
            accepted,
            cache: reader,
            status: status_rx,
            declared,
            writer: tx,
            _lock: lock,
        })
    }

    /// A reader of the store's status.
    pub fn status(&self) -> watch::Receiver<Arc<StoreStatus>> {
        self.status.clone()
    }

    /// A reader of the published snapshots.
    pub fn cache(&self) -> &SnapshotCache {
        &self.cache
    }

    /// The group the store publishes.
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// The file a collection is persisted in.
    pub fn path_of(&self, collection: &str) -> PathBuf {
        self.dir.join(file_name(collection))
    }

    /// Validates a change and has the writer take it: persisted, published
    /// and (with an applier) applied to Kubernetes when this returns `Ok`.
    pub async fn accept(&self, change: Change) -> Result<(), ApplyError> {
        let collection = change.collection;
        let Some(kind) = self
            .accepted
            .contains(&collection)
            .then(|| self.kinds.by_collection(&collection).cloned())
            .flatten()
        else {
            return Err(ApplyError::Invalid(format!(
                "collection {collection:?} is not accepted by this agent"
            )));
        };
        // Decoding and checking every body is CPU work proportional to the
        // collection: keep it off the async workers.
        let checked_kind = kind.clone();
        let resources = change.resources;
        let upserts = tokio::task::spawn_blocking(move || validate(&checked_kind, resources))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        let (reply, answer) = oneshot::channel();
        let sent = self
            .writer
            .send(writer::Change {
                collection,
                kind,
                version: change.version,
                upserts,
                removed: change.removed,
                incremental: change.incremental,
                reply,
            })
            .await;
        if sent.is_err() {
            return Err(stopped());
        }
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }
}

/// The answer once the writer stopped (shutdown).
fn stopped() -> ApplyError {
    ApplyError::Unavailable {
        message: "the store stopped (shutting down)".to_owned(),
        retry_after: None,
    }
}

/// The engine's sink streams hand every received change to the store
/// here: [`Store::accept`].
impl Updater for Store {
    async fn apply(&self, change: Change) -> Result<(), ApplyError> {
        let span = tracing::info_span!(
            "agent.store.accept",
            collection = %change.collection,
            version = %change.version,
            incremental = change.incremental,
        );
        tracing::Instrument::instrument(self.accept(change), span).await
    }

    /// What the hub takes the agent to hold of the collection: its last
    /// ACKed state (what is published, unless the cluster's API refused
    /// the newest change).
    fn held(&self, collection: &str) -> HashMap<String, String> {
        let declared = self.declared.borrow().clone();
        if !declared.contains(collection) {
            return HashMap::new();
        }
        declared
            .collection(collection)
            .keys()
            .iter()
            .map(|k| (k.name.to_string(), k.version.to_string()))
            .collect()
    }
}

#[cfg(test)]
mod tests;

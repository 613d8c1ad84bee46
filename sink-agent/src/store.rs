//! The persistent store: the agent's [`Updater`].
//!
//! Every received change is validated first, resource by resource, against
//! the kind table (the body must be the kind's message and decode against
//! its schema; the name must be `namespace/name` or `/name`). One bad
//! resource rejects the whole change: the NACK names it
//! (`VirtualService bookinfo/reviews: …`) and the collection keeps its last
//! good state. A good change is applied (full state replaces, a delta
//! upserts and removes), persisted atomically, and only then published to
//! the local snapshot cache; the ACK therefore promises durability.
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
//! NACKed with the reason and the last good state stays served. The store
//! then tells the stream to ask again ([`Updater::retry_after`]: after
//! [`RETRY_FIRST`], doubling up to [`RETRY_MAX`]), so the hub resends its
//! current version and the agent recovers by itself once writes succeed.
//!
//! Each resource is encoded once, on receipt; the same bytes are written to
//! disk, re-read from disk and shared by every local stream.
//!
//! Concurrency: the store is the only owner of the [`SnapshotWriter`]. The
//! state sits behind a `tokio::sync::Mutex` (changes from several streams
//! are applied one at a time, across the `.await`s of the blocking file
//! I/O); readers use cheap handles: the snapshot cache and a
//! [`watch::Receiver`] of [`StoreStatus`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use meshhub_mcp::cache::{Group, SnapshotCache, SnapshotWriter};
use meshhub_mcp::ledger::At;
use meshhub_mcp::sink::{ApplyError, Change, Updater};
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use meshhub_proto::kinds::{Kind, KindTable};
use meshhub_proto::mcp::Resource;
use meshhub_proto::transcode::resource_to_object;
use meshhub_proto::wire::EncodedResources;
use prost::Message as _;
use serde::Serialize;
use tokio::sync::watch;

/// The on-disk format's directory under the data directory. A future
/// incompatible format gets `v2` beside it (see `docs/sink-agent.md`).
pub const FORMAT_DIR: &str = "v1";
/// The collections directory inside [`FORMAT_DIR`].
pub const COLLECTIONS_DIR: &str = "collections";
/// The lock file inside [`FORMAT_DIR`].
pub const LOCK_FILE: &str = "LOCK";
/// Marker inside [`FORMAT_DIR`]: every collection file of this directory
/// ends with a seal. Absent (a directory written by an agent before seals
/// existed), unsealed files that decode are accepted once, sealed in
/// place, and then the marker is written.
pub const SEALED_MARKER: &str = "SEALED";
/// Extension of a persisted collection.
pub const EXTENSION: &str = "pb";
/// Suffix of a file being written (removed on start if a crash left one).
const TEMP_SUFFIX: &str = ".tmp";
/// At most this many rejected resources are named in one NACK.
const NAMED_IN_NACK: usize = 3;
/// After a change fails to persist, the stream asks for the collection
/// again after this long...
pub const RETRY_FIRST: Duration = Duration::from_millis(500);
/// ...doubling on each further failure, up to this.
pub const RETRY_MAX: Duration = Duration::from_secs(10);

pub mod seal;

/// What the store needs to know.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// The data directory (created if missing).
    pub data_dir: PathBuf,
    /// The snapshot group the store publishes (what local consumers see).
    pub group: Group,
    /// The collections accepted; others are refused (and skipped on load).
    pub collections: Vec<String>,
    /// Kinds to validate against.
    pub kinds: KindTable,
    /// Where ACKed state is applied to Kubernetes, when enabled.
    pub applier: Option<crate::apply::Applier>,
}

/// Why the store can't open.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A directory can't be created.
    #[error("data directory {path}: can't create")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The lock file can't be opened or locked.
    #[error("data directory {path}: can't lock")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Another process holds the data directory.
    #[error("data directory {path}: in use by another agent ({holder})")]
    InUse {
        /// The lock file.
        path: PathBuf,
        /// What the lock file says of its holder.
        holder: String,
    },
    /// The collections directory can't be listed.
    #[error("data directory {path}: can't list")]
    List {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Why one persisted file was skipped on load (never fatal).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file can't be read.
    #[error("{path}: can't read")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file's seal does not hold: cut short or damaged.
    #[error("{path}: torn")]
    Torn {
        /// The file.
        path: PathBuf,
        /// How.
        #[source]
        source: seal::SealError,
    },
    /// The file is not an encoded `Resources`.
    #[error("{path}: not an encoded istio.mcp.v1alpha1.Resources")]
    Decode {
        /// The file.
        path: PathBuf,
        /// The decoder's complaint.
        #[source]
        source: prost::DecodeError,
    },
    /// The collection inside doesn't match the file name.
    #[error("{path}: holds collection {found:?}, its name says {expected:?}")]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// The collection in the file.
        found: String,
        /// The collection from the file name.
        expected: String,
    },
    /// A resource in the file no longer validates.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Which resource and why.
        message: String,
    },
}

/// Why a validated change could not be persisted.
#[derive(Debug, thiserror::Error)]
#[error("{path}: can't write")]
pub struct PersistError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// Where a collection's current state came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// Loaded from the data directory at start.
    Disk,
    /// Received from the hub since start.
    Hub,
}

/// The last change of a collection the store refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The hub's version of the refused change.
    pub version: String,
    /// The NACK's message.
    pub message: String,
    /// When.
    pub at: At,
}

/// One collection the store holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CollectionInfo {
    /// The hub's `system_version_info` of the state held.
    pub version: String,
    /// The version local consumers are served (a digest of names and
    /// resource versions, stable across restarts).
    pub served_version: String,
    /// Number of resources.
    pub resources: usize,
    /// Total encoded size of the resources.
    pub bytes: usize,
    /// Where the state came from.
    pub origin: Origin,
    /// When it was received, or loaded.
    pub updated_at: At,
    /// The last refused change, if any since start.
    pub refused: Option<Refusal>,
}

/// What the store holds, for `/status` and readiness.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StoreStatus {
    /// The persisted state was loaded and published.
    pub loaded: bool,
    /// The data directory.
    pub data_dir: PathBuf,
    /// Files skipped on load, with the reason.
    pub load_errors: Vec<String>,
    /// Per collection held.
    pub collections: BTreeMap<String, CollectionInfo>,
    /// While writes fail: the last failure (cleared by the next write that
    /// succeeds).
    pub persist_failure: Option<PersistFailure>,
}

/// The last failed write, while writes fail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PersistFailure {
    /// The collection whose change could not be written.
    pub collection: String,
    /// The hub's version of that change.
    pub version: String,
    /// Why (the OS error, e.g. `No space left on device`).
    pub message: String,
    /// Failed writes in a row.
    pub consecutive: u32,
    /// When.
    pub at: At,
}

/// One collection's resources, by name.
type Held = BTreeMap<Arc<str>, EncodedResource>;

struct Inner {
    writer: SnapshotWriter,
    held: BTreeMap<String, Held>,
    snapshot: Snapshot,
    status: watch::Sender<Arc<StoreStatus>>,
}

/// The persistent store. Share it behind an [`Arc`].
pub struct Store {
    kinds: KindTable,
    group: Group,
    dir: PathBuf,
    accepted: BTreeSet<String>,
    cache: SnapshotCache,
    status: watch::Receiver<Arc<StoreStatus>>,
    applier: Option<crate::apply::Applier>,
    inner: tokio::sync::Mutex<Inner>,
    /// Failed writes in a row, per collection (read by
    /// [`Updater::retry_after`], which can't wait for `inner`).
    failing: Mutex<HashMap<String, u32>>,
    // Held for the store's life: the OS lock on `<data>/v1/LOCK`.
    _lock: File,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.dir)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the data directory (creating it), takes its lock, loads every
    /// persisted collection (skipping, and reporting, files that fail) and
    /// publishes the result at once, so local consumers are served before
    /// the hub is reachable.
    pub async fn open(config: StoreConfig, writer: SnapshotWriter) -> Result<Self, StoreError> {
        let started = Instant::now();
        let format_dir = config.data_dir.join(FORMAT_DIR);
        let dir = format_dir.join(COLLECTIONS_DIR);
        let accepted: BTreeSet<String> = config.collections.iter().cloned().collect();
        let (lock, loaded) = {
            let dir = dir.clone();
            let kinds = config.kinds.clone();
            let accepted = accepted.clone();
            tokio::task::spawn_blocking(move || -> Result<_, StoreError> {
                std::fs::create_dir_all(&dir).map_err(|source| StoreError::CreateDir {
                    path: dir.clone(),
                    source,
                })?;
                let lock = lock_dir(&format_dir)?;
                let marker = format_dir.join(SEALED_MARKER);
                let sealed = marker.exists();
                let loaded = load_all(&dir, &kinds, &accepted, sealed)?;
                if !sealed {
                    migrate_to_sealed(&dir, &marker, &loaded);
                }
                let loaded: Vec<Loaded> = loaded.into_iter().map(|l| l.map(|(r, _)| r)).collect();
                Ok((lock, loaded))
            })
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?
        };

        let mut held: BTreeMap<String, Held> = BTreeMap::new();
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
                        info(&version, &c, Origin::Disk, now, None),
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
        writer.set(&config.group, Arc::new(snapshot.clone()));
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
                    applier
                        .reconcile(
                            collection,
                            kind.clone(),
                            objects_of(kind, resources.values()),
                        )
                        .await;
                }
            }
        }
        let (status_tx, status_rx) = watch::channel(Arc::new(status));
        Ok(Self {
            applier: config.applier,
            kinds: config.kinds,
            group: config.group,
            dir,
            accepted,
            cache: writer.reader(),
            status: status_rx,
            inner: tokio::sync::Mutex::new(Inner {
                writer,
                held,
                snapshot,
                status: status_tx,
            }),
            failing: Mutex::new(HashMap::new()),
            _lock: lock,
        })
    }

    /// `collection` is not failing to persist (any more): once no
    /// collection is, the failure leaves `/status` and the gauge.
    fn writes_ok(&self, status: &watch::Sender<Arc<StoreStatus>>, collection: &str) {
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        if failing.remove(collection).is_none() || !failing.is_empty() {
            return;
        }
        metrics::gauge!("meshhub_agent_persist_failing").set(0.0);
        status.send_modify(|s| Arc::make_mut(s).persist_failure = None);
        tracing::info!(%collection, "no collection fails to persist any more");
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

    async fn apply_change(&self, change: Change) -> Result<(), ApplyError> {
        let collection = change.collection.clone();
        let Some(kind) = self
            .accepted
            .contains(&collection)
            .then(|| self.kinds.by_collection(&collection).cloned())
            .flatten()
        else {
            return Err(ApplyError(format!(
                "collection {collection:?} is not accepted by this agent"
            )));
        };
        let Change {
            version,
            resources,
            removed,
            incremental,
            ..
        } = change;
        // Decoding and checking every body is CPU work proportional to the
        // collection: keep it off the async workers.
        let checked_kind = kind.clone();
        let validated = tokio::task::spawn_blocking(move || validate(&checked_kind, resources))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        let mut inner = self.inner.lock().await;
        let upserts = match validated {
            Ok(v) => v,
            Err(e) => {
                // Invalid content is not asked for again (only a write
                // failure is), whatever failed before.
                self.writes_ok(&inner.status, &collection);
                refused(&inner.status, &collection, &version, &e.0);
                return Err(e);
            }
        };
        let mut resources = match (incremental, inner.held.get(&collection)) {
            (true, Some(h)) => h.clone(),
            _ => BTreeMap::new(),
        };
        for name in &removed {
            resources.remove(name.as_str());
        }
        for r in upserts {
            resources.insert(r.name.clone(), r);
        }

        let path = self.path_of(&collection);
        let mut file = EncodedResources {
            system_version_info: version.clone(),
            collection: collection.clone(),
            resources: Arc::new(resources.values().map(|r| r.encoded.clone()).collect()),
            ..Default::default()
        }
        .encode_to_vec();
        seal::append(&mut file);
        let started = Instant::now();
        let written = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || write_atomic(&path, &file))
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
        };
        if let Err(e) = written {
            // The ACK promises the state survives a restart: without the file
            // it would not, so refuse and keep the last good state.
            let message = format!("can't persist: {}", error_chain(&e));
            tracing::error!(%collection, %version, error = %message, "persisting failed; NACK");
            metrics::counter!("meshhub_agent_persist_errors_total").increment(1);
            metrics::gauge!("meshhub_agent_persist_failing").set(1.0);
            let consecutive = {
                let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
                let n = failing.entry(collection.clone()).or_default();
                *n = n.saturating_add(1);
                *n
            };
            let failure = PersistFailure {
                collection: collection.clone(),
                version: version.clone(),
                message: message.clone(),
                consecutive,
                at: At(SystemTime::now()),
            };
            inner
                .status
                .send_modify(|s| Arc::make_mut(s).persist_failure = Some(failure));
            refused(&inner.status, &collection, &version, &message);
            return Err(ApplyError(message));
        }
        metrics::histogram!("meshhub_agent_persist_seconds").record(started.elapsed());
        self.writes_ok(&inner.status, &collection);

        let c = Arc::new(CollectionSnapshot::new(
            resources.values().cloned().collect(),
        ));
        let served_version = c.version().to_owned();
        let count = c.len();
        let objects = self
            .applier
            .as_ref()
            .map(|_| objects_of(&kind, resources.values()));
        let Inner {
            writer,
            held,
            snapshot,
            status,
        } = &mut *inner;
        snapshot.insert(collection.clone(), c.clone());
        writer.set(&self.group, Arc::new(snapshot.clone()));
        held.insert(collection.clone(), resources);
        let now = At(SystemTime::now());
        status.send_modify(|s| {
            let s = Arc::make_mut(s);
            s.collections.insert(
                collection.clone(),
                info(&version, &c, Origin::Hub, now, None),
            );
        });
        metrics::gauge!("meshhub_agent_collections").set(held.len() as f64);
        // Persisted and served locally; now the cluster's API. Its refusal
        // is the NACK's message (the applier keeps retrying on its own).
        if let (Some(applier), Some(objects)) = (&self.applier, objects)
            && let Err(message) = applier.sync(&collection, kind.clone(), objects).await
        {
            refused(status, &collection, &version, &message);
            return Err(ApplyError(message));
        }
        metrics::counter!("meshhub_agent_changes_total", "result" => "applied").increment(1);
        tracing::info!(%collection, %version, served.version = %served_version, resources = count, "applied and persisted");
        Ok(())
    }
}

impl Updater for Store {
    async fn apply(&self, change: Change) -> Result<(), ApplyError> {
        let span = tracing::info_span!(
            "agent.store.apply",
            collection = %change.collection,
            version = %change.version,
            incremental = change.incremental,
        );
        tracing::Instrument::instrument(self.apply_change(change), span).await
    }

    /// A change that failed to persist is asked for again: after
    /// [`RETRY_FIRST`], doubling with each failure in a row, at most
    /// [`RETRY_MAX`]. Invalid changes are not: the hub must send a new
    /// version.
    fn retry_after(&self, collection: &str) -> Option<Duration> {
        let failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        let n = *failing.get(collection)?;
        Some(
            RETRY_FIRST
                .saturating_mul(1 << n.saturating_sub(1).min(16))
                .min(RETRY_MAX),
        )
    }

    /// What is published (and therefore persisted) of the collection.
    fn held(&self, collection: &str) -> HashMap<String, String> {
        match self.cache.snapshot(&self.group) {
            Some(s) if s.contains(collection) => s
                .collection(collection)
                .keys()
                .iter()
                .map(|k| (k.name.to_string(), k.version.to_string()))
                .collect(),
            _ => HashMap::new(),
        }
    }
}

/// The Kubernetes objects of a collection's resources, each with its MCP
/// version as `resourceVersion` (the applier writes it as an annotation).
fn objects_of<'a>(
    kind: &Kind,
    resources: impl Iterator<Item = &'a EncodedResource>,
) -> Vec<meshhub_proto::object::Object> {
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

fn info(
    version: &str,
    c: &CollectionSnapshot,
    origin: Origin,
    at: At,
    refused: Option<Refusal>,
) -> CollectionInfo {
    CollectionInfo {
        version: version.to_owned(),
        served_version: c.version().to_owned(),
        resources: c.len(),
        bytes: c.encoded_bytes(),
        origin,
        updated_at: at,
        refused,
    }
}

/// Records a refused change in the status (the collection's state stays).
fn refused(
    status: &watch::Sender<Arc<StoreStatus>>,
    collection: &str,
    version: &str,
    message: &str,
) {
    metrics::counter!("meshhub_agent_changes_total", "result" => "refused").increment(1);
    let refusal = Refusal {
        version: version.to_owned(),
        message: message.to_owned(),
        at: At(SystemTime::now()),
    };
    status.send_modify(|s| {
        let s = Arc::make_mut(s);
        match s.collections.get_mut(collection) {
            Some(c) => c.refused = Some(refusal),
            None => {
                s.collections.insert(
                    collection.to_owned(),
                    CollectionInfo {
                        version: String::new(),
                        served_version: meshhub_mcp::snapshot::EMPTY.version().to_owned(),
                        resources: 0,
                        bytes: 0,
                        origin: Origin::Hub,
                        updated_at: refusal.at,
                        refused: Some(refusal),
                    },
                );
            }
        }
    });
}

/// Checks every resource against `kind` and encodes each once. The error
/// names the first few rejected resources (by `kind namespace/name`, or by
/// index when the resource has no name).
pub fn validate(kind: &Kind, resources: Vec<Resource>) -> Result<Vec<EncodedResource>, ApplyError> {
    let mut out = Vec::with_capacity(resources.len());
    let mut errors = Vec::new();
    let mut rejected = 0usize;
    for (i, r) in resources.into_iter().enumerate() {
        match check(kind, &r, i) {
            Ok(()) => {
                let meta = r.metadata.as_ref();
                let name: Arc<str> = meta.map_or("", |m| m.name.as_str()).into();
                let version: Arc<str> = meta.map_or("", |m| m.version.as_str()).into();
                out.push(EncodedResource {
                    name,
                    version,
                    encoded: Bytes::from(r.encode_to_vec()),
                });
            }
            Err(message) => {
                rejected += 1;
                if errors.len() < NAMED_IN_NACK {
                    errors.push(message);
                }
            }
        }
    }
    if rejected == 0 {
        return Ok(out);
    }
    let mut message = errors.join("; ");
    if rejected > errors.len() {
        message.push_str(&format!(
            "; and {} more rejected resource(s)",
            rejected - errors.len()
        ));
    }
    Err(ApplyError(message))
}

/// One resource: decodes against the kind's schema, checks the name.
fn check(kind: &Kind, r: &Resource, index: usize) -> Result<(), String> {
    let named = r.metadata.as_ref().is_some_and(|m| !m.name.is_empty());
    resource_to_object(kind, r).map(drop).map_err(|e| {
        let mut m = error_chain(&e);
        if !named {
            m.push_str(&format!(" (resources[{index}])"));
        }
        m
    })
}

/// The file name of a collection: every byte outside `[A-Za-z0-9._-]`
/// percent-encoded (so `/` becomes `%2F`), plus `.pb`. Reversible, and safe
/// on every filesystem.
pub fn file_name(collection: &str) -> String {
    let mut s = String::with_capacity(collection.len() + 8);
    for b in collection.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s.push('.');
    s.push_str(EXTENSION);
    s
}

/// The collection of a file name made by [`file_name`], if it is one.
pub fn collection_of(file_name: &str) -> Option<String> {
    let stem = file_name.strip_suffix(&format!(".{EXTENSION}"))?;
    let bytes = stem.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = stem.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok().filter(|c| !c.is_empty())
}

/// Replaces `path` atomically: write a temp file in the same directory,
/// fsync it, rename it over `path`, fsync the directory (so the rename
/// itself survives a crash).
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), PersistError> {
    let err = |source| PersistError {
        path: path.to_owned(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(TEMP_SUFFIX);
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(err)
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_: &Path) -> std::io::Result<()> {
    // Directories can't be opened for syncing here; the rename is as durable
    // as the platform makes it.
    Ok(())
}

fn lock_dir(format_dir: &Path) -> Result<File, StoreError> {
    let path = format_dir.join(LOCK_FILE);
    // Create it if missing (a read-only directory that has none fails
    // below), then hold it open for reading only: an OS lock needs no write
    // access, and a descriptor open for writing would keep an operator
    // from remounting the data directory read-only.
    let created = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path);
    let file = File::open(&path).map_err(|source| StoreError::Lock {
        path: path.clone(),
        source: created.err().unwrap_or(source),
    })?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            // The holder wrote who it is (below); quote it.
            let holder = std::fs::read_to_string(&path)
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "holder unknown".to_owned());
            return Err(StoreError::InUse { path, holder });
        }
        Err(std::fs::TryLockError::Error(source)) => return Err(StoreError::Lock { path, source }),
    }
    // Name the holder for a second agent's error. Best effort: the lock,
    // not this text, is what keeps a second writer out (and a read-only
    // directory must not stop the agent from serving what it holds).
    let holder = format!(
        "pid {} since {}",
        std::process::id(),
        humantime::format_rfc3339_seconds(SystemTime::now())
    );
    if let Err(e) = std::fs::write(&path, holder.as_bytes()) {
        tracing::warn!(path = %path.display(), error = %e, "can't write the lock holder");
    }
    Ok(file)
}

type Loaded = Result<(String, String, Vec<EncodedResource>), LoadError>;
/// A loaded collection, and the path of its file when it had no seal (a
/// file written before seals existed).
type LoadedFile = Result<((String, String, Vec<EncodedResource>), Option<PathBuf>), LoadError>;

/// Seals in place every unsealed file that loaded, then writes the marker,
/// so that from now on a file without a seal is torn. Failures (a
/// read-only directory) are logged: the next start tries again, and until
/// then unsealed files keep being accepted.
fn migrate_to_sealed(dir: &Path, marker: &Path, loaded: &[LoadedFile]) {
    let mut complete = true;
    for (_, path) in loaded.iter().filter_map(|l| l.as_ref().ok()) {
        let Some(path) = path else { continue };
        let resealed = std::fs::read(path)
            .map_err(|source| PersistError {
                path: path.clone(),
                source,
            })
            .and_then(|mut data| {
                seal::append(&mut data);
                write_atomic(path, &data)
            });
        match resealed {
            Ok(()) => {
                tracing::info!(path = %path.display(), "sealed a file written before seals existed")
            }
            Err(e) => {
                complete = false;
                tracing::warn!(path = %path.display(), error = %error_chain(&e), "can't seal a file written before seals existed; accepted unsealed until it can be");
            }
        }
    }
    let written = complete
        && write_atomic(marker, b"every collection file in collections/ ends with a seal\n")
            .inspect_err(|e| tracing::warn!(path = %marker.display(), error = %error_chain(e), "can't write the seal marker; unsealed files stay accepted until it is written"))
            .is_ok();
    if written {
        tracing::debug!(dir = %dir.display(), "collection files are sealed");
    }
}

/// Reads every persisted collection of `dir`. Leftover temp files (a crash
/// during a write) are removed; files of collections no longer accepted are
/// left alone and not served.
fn load_all(
    dir: &Path,
    kinds: &KindTable,
    accepted: &BTreeSet<String>,
    sealed: bool,
) -> Result<Vec<LoadedFile>, StoreError> {
    let entries = std::fs::read_dir(dir).map_err(|source| StoreError::List {
        path: dir.to_owned(),
        source,
    })?;
    let mut names: Vec<(String, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| StoreError::List {
            path: dir.to_owned(),
            source,
        })?;
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
            tracing::warn!(path = %path.display(), "ignoring a file with a non-UTF-8 name");
            continue;
        };
        if name.ends_with(TEMP_SUFFIX) {
            tracing::warn!(path = %path.display(), "removing an unfinished write");
            let _ = std::fs::remove_file(&path);
            continue;
        }
        names.push((name, path));
    }
    names.sort();
    let mut out = Vec::new();
    for (name, path) in names {
        let Some(collection) = collection_of(&name) else {
            tracing::warn!(path = %path.display(), "ignoring a file that is not a persisted collection");
            continue;
        };
        if !accepted.contains(&collection) {
            tracing::info!(%collection, path = %path.display(), "persisted collection not accepted any more; not served");
            continue;
        }
        out.push(load_file(&path, &collection, kinds, !sealed));
    }
    Ok(out)
}

/// Reads and re-validates one persisted collection (the schema may have
/// changed since it was written). The file must end with its seal.
pub fn load_one(path: &Path, collection: &str, kinds: &KindTable) -> Loaded {
    load_file(path, collection, kinds, false).map(|(loaded, _)| loaded)
}

/// [`load_one`]; with `unsealed_ok`, a file without a seal that decodes is
/// accepted (its path returned, to be sealed).
fn load_file(path: &Path, collection: &str, kinds: &KindTable, unsealed_ok: bool) -> LoadedFile {
    let data = std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    let (content, unsealed) = match seal::check(&data) {
        Ok(content) => (content.len(), None),
        Err(seal::SealError::Missing) if unsealed_ok => (data.len(), Some(path.to_owned())),
        Err(source) => {
            return Err(LoadError::Torn {
                path: path.to_owned(),
                source,
            });
        }
    };
    // Decoding from `Bytes` slices the resources out of the file's buffer:
    // they are served as read, with no copy and no re-encoding.
    let data = Bytes::from(data).slice(..content);
    let file = EncodedResources::decode(data).map_err(|source| LoadError::Decode {
        path: path.to_owned(),
        source,
    })?;
    if file.collection != collection {
        return Err(LoadError::Mismatch {
            path: path.to_owned(),
            found: file.collection,
            expected: collection.to_owned(),
        });
    }
    let invalid = |message: String| LoadError::Invalid {
        path: path.to_owned(),
        message,
    };
    let kind = kinds
        .by_collection(collection)
        .ok_or_else(|| invalid(format!("collection {collection:?} has no kind")))?;
    let mut resources = Vec::with_capacity(file.resources.len());
    for (i, encoded) in file.resources.iter().enumerate() {
        let r = Resource::decode(encoded.clone())
            .map_err(|e| invalid(format!("resources[{i}]: undecodable resource: {e}")))?;
        check(kind, &r, i).map_err(invalid)?;
        let meta = r.metadata.unwrap_or_default();
        resources.push(EncodedResource {
            name: meta.name.into(),
            version: meta.version.into(),
            encoded: encoded.clone(),
        });
    }
    Ok((
        (collection.to_owned(), file.system_version_info, resources),
        unsealed,
    ))
}

pub use meshhub_runtime::error_chain;

#[cfg(test)]
mod tests;

//! Version history per group, and pins.
//!
//! Every snapshot the pipeline publishes for a group is recorded as a
//! **version**: an id (a digest of the group's collection versions, so
//! every replica names the same content alike), a sequence number per
//! group, the time, the source changes that led to it, and per collection
//! the names, versions and body digests of its resources. Bodies are stored
//! once by digest (content-addressed): an unchanged resource costs nothing
//! in the next version. The newest `keep` versions per group are kept; a
//! body no kept version refers to is deleted with the last one. Everything
//! lives in one redb database, `history.redb` under `history.dir`, so it
//! survives restarts.
//!
//! Recording is off the pipeline's hot path: the pipeline queues
//! [`Publication`]s (bounded, [`QUEUE`]) with `try_send` and never waits;
//! one task writes them on a blocking thread. A full queue drops the
//! record, counted in [`METRIC_DROPPED`] and logged.
//!
//! A **pin** makes the pipeline serve a historical version to its group
//! instead of what the sources produce (which is still validated and
//! recorded). The pinned snapshot carries collection versions of its own
//! (`<historical version>.pin-<pin time in ms, hex>`): consumers that saw
//! the historical version before, and engines that never resend a NACKed
//! or answered version, receive it as an ordinary new version. Pins are
//! stored in the same database, so a restarted hub keeps serving the pin;
//! with several replicas (leader election) they are shared through a
//! ConfigMap instead ([`shared`]).

pub mod db;
pub mod diff;
pub mod routes;
pub mod shared;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, debug, info_span, warn};

use self::db::{Db, DbError};
use self::shared::{SharedError, SharedPins};

/// Default `history.dir` (a volume in a container).
pub const DEFAULT_DIR: &str = "/var/lib/meshhub";
/// Default `history.keep`.
pub const DEFAULT_KEEP: usize = 50;
/// Capacity of the queue from the pipeline to the recorder.
pub const QUEUE: usize = 256;
/// The database file's name in `history.dir`.
pub const DB_FILE: &str = "history.redb";
/// Source changes listed per version (the rest are counted).
pub const MAX_ORIGINS: usize = 20;

/// Gauge: versions stored (every group).
pub const METRIC_VERSIONS: &str = "meshhub_history_versions";
/// Gauge: bytes of the bodies stored.
pub const METRIC_BYTES: &str = "meshhub_history_bytes";
/// Counter: publications not recorded because the recorder fell behind.
pub const METRIC_DROPPED: &str = "meshhub_history_dropped_total";
/// Counter: publications that could not be recorded (database errors).
pub const METRIC_ERRORS: &str = "meshhub_history_errors_total";
/// Gauge: groups currently pinned.
pub const METRIC_PINNED: &str = "meshhub_pinned_groups";

/// `history:` as written in the configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawHistory {
    #[serde(default)]
    dir: Option<PathBuf>,
    #[serde(default)]
    keep: Option<usize>,
}

/// Where and how much history is kept (`history:`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistorySpec {
    /// The directory of `history.redb`.
    pub dir: PathBuf,
    /// Versions kept per group.
    pub keep: usize,
}

impl RawHistory {
    /// Checks the block; `base` is the configuration file's directory.
    pub fn check(self, base: &Path) -> Result<HistorySpec, (&'static str, String)> {
        let keep = self.keep.unwrap_or(DEFAULT_KEEP);
        if keep < 2 {
            return Err((
                "keep",
                format!("{keep} leaves nothing to roll back to; at least 2"),
            ));
        }
        Ok(HistorySpec {
            dir: base.join(self.dir.unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))),
            keep,
        })
    }
}

/// One source change behind a version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeOrigin {
    /// The source.
    pub source: String,
    /// The unit (file path, `group/Kind/ns/name`, `collection/name`).
    pub unit: String,
    /// The objects it now defines (`Kind namespace/name`).
    #[serde(default)]
    pub objects: Vec<String>,
    /// The unit is gone (a deleted file or object).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
    /// Entries of the unit that could not be read.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unreadable: usize,
    /// Kubernetes resourceVersion of the (single) object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Who changed it, when the source knows (field manager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_by: Option<String>,
}

impl std::fmt::Display for ChangeOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.source, self.unit)?;
        if self.removed {
            f.write_str(" (removed)")?;
        }
        if self.unreadable > 0 {
            write!(f, " ({} unreadable)", self.unreadable)?;
        }
        if let Some(rv) = &self.resource_version {
            write!(f, " rv={rv}")?;
        }
        if let Some(by) = &self.changed_by {
            write!(f, " by {by}")?;
        }
        Ok(())
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One resource of a stored version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResource {
    /// `namespace/name`.
    pub name: String,
    /// Its resource version.
    pub version: String,
    /// Digest of its encoded body.
    pub digest: String,
}

/// One collection of a stored version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredCollection {
    /// The collection version served then.
    pub version: String,
    /// Its resources, in name order.
    pub resources: Vec<StoredResource>,
}

/// One version of one group, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredVersion {
    /// The group (cluster).
    pub cluster: String,
    /// Sequence number in the group, from 1.
    pub seq: u64,
    /// The id: digest of the collection versions.
    pub id: String,
    /// When it was published (RFC 3339).
    pub time: String,
    /// The source changes of the build that produced it.
    pub origins: Vec<ChangeOrigin>,
    /// Source changes not listed.
    #[serde(default)]
    pub more_origins: usize,
    /// Resources, every collection.
    pub resources: usize,
    /// Per collection.
    pub collections: BTreeMap<String, StoredCollection>,
}

impl StoredVersion {
    fn digests(&self) -> impl Iterator<Item = &str> {
        self.collections
            .values()
            .flat_map(|c| c.resources.iter().map(|r| r.digest.as_str()))
    }

    /// Resources per non-empty collection.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        self.collections
            .iter()
            .filter(|(_, c)| !c.resources.is_empty())
            .map(|(n, c)| (n.clone(), c.resources.len()))
            .collect()
    }
}

/// A group's snapshot as the pipeline published it, queued for recording.
#[derive(Clone, Debug)]
pub struct Publication {
    /// The group.
    pub cluster: Arc<str>,
    /// The snapshot built from the sources.
    pub snapshot: Arc<Snapshot>,
    /// When.
    pub at: SystemTime,
    /// The source changes of this build (shared by every group).
    pub origins: Arc<Vec<ChangeOrigin>>,
    /// Source changes beyond those listed.
    pub more_origins: usize,
}

/// The id of a group snapshot: a digest of its collections' names and
/// versions (12 hex digits).
pub fn version_id(snapshot: &Snapshot) -> String {
    let mut h = Sha256::new();
    for (name, c) in snapshot.collections() {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((c.version().len() as u64).to_le_bytes());
        h.update(c.version().as_bytes());
    }
    hex::encode(&h.finalize()[..6])
}

/// The digest a body is stored under.
pub fn body_digest(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..16])
}

/// A pin as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PinRecord {
    /// The group (cluster).
    pub cluster: String,
    /// The version id served.
    pub version: String,
    /// Its sequence number.
    pub seq: u64,
    /// Since when (RFC 3339).
    pub since: String,
    /// Since when, in ms since the epoch (part of the served versions).
    pub since_unix_ms: u64,
    /// Who pinned it.
    pub by: String,
}

/// A pin in force: the record and the snapshot served.
#[derive(Clone, Debug)]
pub struct ActivePin {
    /// The record.
    pub record: PinRecord,
    /// What the group is served.
    pub snapshot: Arc<Snapshot>,
}

/// Every pin in force, by group.
pub type Pins = Arc<BTreeMap<String, ActivePin>>;

/// Why a history request failed.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The database.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The directory can't be created.
    #[error("can't create the history directory {0}")]
    Dir(String, #[source] std::io::Error),
    /// No such version.
    #[error("cluster {cluster} has no version {version} in its history")]
    NoVersion {
        /// The group.
        cluster: String,
        /// What was asked for.
        version: String,
    },
    /// A prefix matching several versions.
    #[error("version {0} is ambiguous; give more digits")]
    Ambiguous(String),
    /// Unpin of a group that is not pinned.
    #[error("cluster {0} is not pinned")]
    NotPinned(String),
    /// The shared pins (ConfigMap) can't be written.
    #[error(transparent)]
    Shared(#[from] SharedError),
}

struct Inner {
    db: Db,
    keep: usize,
    queue: mpsc::Sender<Publication>,
    pins: watch::Sender<Pins>,
    shared: Option<SharedPins>,
}

/// The history: recording handle for the pipeline, queries and pins for
/// the admin port. Cheap to clone. Every query blocks on the database:
/// call it from a blocking thread.
#[derive(Clone)]
pub struct History {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History")
            .field("keep", &self.inner.keep)
            .finish_non_exhaustive()
    }
}

impl History {
    /// Opens the database (blocking), restores the pins it holds, and
    /// starts the recorder on `tasks` until `shutdown`. With `shared`, pins
    /// are written to and followed from that ConfigMap (several replicas);
    /// the database's pins are only what is served until it is read.
    pub fn open(
        spec: &HistorySpec,
        shared: Option<SharedPins>,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<Self, HistoryError> {
        std::fs::create_dir_all(&spec.dir)
            .map_err(|e| HistoryError::Dir(spec.dir.display().to_string(), e))?;
        let db = Db::open(&spec.dir.join(DB_FILE))?;
        let mut pins = BTreeMap::new();
        for record in db.pins()? {
            match resolve(&db, &record) {
                Ok(snapshot) => {
                    pins.insert(record.cluster.clone(), ActivePin { record, snapshot });
                }
                Err(e) => {
                    warn!(cluster = %record.cluster, version = %record.version, error = %e, "stored pin can't be restored; the group is served its latest version")
                }
            }
        }
        metrics::gauge!(METRIC_PINNED).set(pins.len() as f64);
        let (queue, rx) = mpsc::channel(QUEUE);
        let history = Self {
            inner: Arc::new(Inner {
                db,
                keep: spec.keep,
                queue,
                pins: watch::channel(Arc::new(pins)).0,
                shared: shared.clone(),
            }),
        };
        history.update_metrics();
        metrics::counter!(METRIC_DROPPED).increment(0);
        if let Some(shared) = shared {
            let span = info_span!("shared_pins", configmap = %shared.location());
            tasks.spawn(
                shared
                    .follow(history.clone(), shutdown.clone())
                    .instrument(span),
            );
        }
        tasks.spawn(
            history
                .clone()
                .record_loop(rx, shutdown)
                .instrument(info_span!("history")),
        );
        Ok(history)
    }

    /// Queues a publication for recording; never waits.
    pub fn record(&self, publication: Publication) {
        if let Err(e) = self.inner.queue.try_send(publication) {
            metrics::counter!(METRIC_DROPPED).increment(1);
            if let mpsc::error::TrySendError::Full(p) = e {
                warn!(cluster = %p.cluster, "history recorder behind; this version is not recorded");
            }
        }
    }

    /// The pins in force, following every change.
    pub fn pins(&self) -> watch::Receiver<Pins> {
        self.inner.pins.subscribe()
    }

    async fn record_loop(self, mut rx: mpsc::Receiver<Publication>, shutdown: CancellationToken) {
        loop {
            let p = tokio::select! {
                biased;
                p = rx.recv() => match p { Some(p) => p, None => break },
                _ = shutdown.cancelled() => break,
            };
            let this = self.clone();
            let cluster = p.cluster.clone();
            match tokio::task::spawn_blocking(move || this.append(&p)).await {
                Ok(Ok(Some(seq))) => debug!(cluster = %cluster, seq, "version recorded"),
                Ok(Ok(None)) => {}
                Ok(Err(e)) => {
                    metrics::counter!(METRIC_ERRORS).increment(1);
                    warn!(cluster = %cluster, error = %e, "can't record the version");
                }
                Err(e) => warn!(error = %e, "history recorder failed"),
            }
        }
    }

    /// Records one publication now (blocking).
    pub fn append(&self, p: &Publication) -> Result<Option<u64>, HistoryError> {
        let mut bodies: BTreeMap<String, Bytes> = BTreeMap::new();
        let mut collections = BTreeMap::new();
        let mut total = 0;
        for (name, c) in p.snapshot.collections() {
            let resources = c
                .keys()
                .iter()
                .zip(c.resources().iter())
                .map(|(k, body)| {
                    let digest = body_digest(body);
                    bodies.insert(digest.clone(), body.clone());
                    StoredResource {
                        name: k.name.to_string(),
                        version: k.version.to_string(),
                        digest,
                    }
                })
                .collect::<Vec<_>>();
            total += resources.len();
            collections.insert(
                name.to_owned(),
                StoredCollection {
                    version: c.version().to_owned(),
                    resources,
                },
            );
        }
        let version = StoredVersion {
            cluster: p.cluster.to_string(),
            seq: 0,
            id: version_id(&p.snapshot),
            time: humantime::format_rfc3339_millis(p.at).to_string(),
            origins: p.origins.as_ref().clone(),
            more_origins: p.more_origins,
            resources: total,
            collections,
        };
        let protect = self
            .inner
            .pins
            .borrow()
            .get(p.cluster.as_ref())
            .map(|a| a.record.seq);
        let seq = self.inner.db.append(
            version,
            &|d| bodies.get(d).cloned(),
            self.inner.keep,
            protect,
        )?;
        self.update_metrics();
        Ok(seq)
    }

    fn update_metrics(&self) {
        if let Ok(stats) = self.inner.db.stats() {
            metrics::gauge!(METRIC_VERSIONS).set(stats.versions as f64);
            metrics::gauge!(METRIC_BYTES).set(stats.bytes as f64);
        }
    }

    /// A group's versions, oldest first.
    pub fn list(&self, cluster: &str) -> Result<Vec<StoredVersion>, HistoryError> {
        Ok(self.inner.db.list(cluster)?)
    }

    /// One version: by id, unique id prefix (4 digits at least), or `#N`
    /// for sequence number N.
    pub fn find(&self, cluster: &str, version: &str) -> Result<StoredVersion, HistoryError> {
        let all = self.list(cluster)?;
        let missing = || HistoryError::NoVersion {
            cluster: cluster.to_owned(),
            version: version.to_owned(),
        };
        if let Some(n) = version.strip_prefix('#') {
            let n: u64 = n.parse().map_err(|_| missing())?;
            return all.into_iter().find(|v| v.seq == n).ok_or_else(missing);
        }
        if let Some(v) = all.iter().rev().find(|v| v.id == version) {
            return Ok(v.clone());
        }
        if version.len() < 4 {
            return Err(missing());
        }
        let mut matches = all.iter().rev().filter(|v| v.id.starts_with(version));
        let first = matches.next().ok_or_else(missing)?;
        if matches.any(|v| v.id != first.id) {
            return Err(HistoryError::Ambiguous(version.to_owned()));
        }
        Ok(first.clone())
    }

    /// The encoded body stored under `digest`.
    pub fn body(&self, digest: &str) -> Result<Bytes, HistoryError> {
        Ok(self.inner.db.body(digest)?)
    }

    /// The pin of `cluster` to `version` (see [`History::find`]) for
    /// `by`, starting now (blocking; nothing applied yet).
    pub fn pin_record(
        &self,
        cluster: &str,
        version: &str,
        by: &str,
    ) -> Result<PinRecord, HistoryError> {
        let v = self.find(cluster, version)?;
        let now = SystemTime::now();
        Ok(PinRecord {
            cluster: cluster.to_owned(),
            version: v.id.clone(),
            seq: v.seq,
            since: humantime::format_rfc3339_seconds(now).to_string(),
            since_unix_ms: now
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            by: by.to_owned(),
        })
    }

    /// Serves `record` on this replica and stores it in the database
    /// (blocking).
    pub fn apply_pin(&self, record: PinRecord) -> Result<(), HistoryError> {
        let snapshot = resolve(&self.inner.db, &record)?;
        self.inner.db.set_pin(&record.cluster, Some(&record))?;
        self.inner.pins.send_modify(|pins| {
            Arc::make_mut(pins).insert(record.cluster.clone(), ActivePin { record, snapshot });
            metrics::gauge!(METRIC_PINNED).set(pins.len() as f64);
        });
        Ok(())
    }

    /// Stops serving `cluster`'s pin on this replica (blocking); returns
    /// it.
    pub fn remove_pin(&self, cluster: &str) -> Result<PinRecord, HistoryError> {
        let Some(active) = self.inner.pins.borrow().get(cluster).cloned() else {
            return Err(HistoryError::NotPinned(cluster.to_owned()));
        };
        self.inner.db.set_pin(cluster, None)?;
        self.inner.pins.send_modify(|pins| {
            Arc::make_mut(pins).remove(cluster);
            metrics::gauge!(METRIC_PINNED).set(pins.len() as f64);
        });
        Ok(active.record)
    }

    /// Pins `cluster` to `version` for `by`: on this replica, or, with
    /// shared pins, in the ConfigMap every replica follows.
    pub async fn pin(
        &self,
        cluster: &str,
        version: &str,
        by: &str,
    ) -> Result<PinRecord, HistoryError> {
        let (this, c, v, b) = (
            self.clone(),
            cluster.to_owned(),
            version.to_owned(),
            by.to_owned(),
        );
        let record = blocking(move || this.pin_record(&c, &v, &b)).await?;
        match &self.inner.shared {
            Some(shared) => shared.write(cluster, Some(&record)).await?,
            None => {
                let (this, r) = (self.clone(), record.clone());
                blocking(move || this.apply_pin(r)).await?;
            }
        }
        Ok(record)
    }

    /// Lifts `cluster`'s pin (see [`History::pin`]); returns what it was.
    pub async fn unpin(&self, cluster: &str) -> Result<PinRecord, HistoryError> {
        match &self.inner.shared {
            Some(shared) => {
                let Some(active) = self.inner.pins.borrow().get(cluster).cloned() else {
                    return Err(HistoryError::NotPinned(cluster.to_owned()));
                };
                shared.write(cluster, None).await?;
                Ok(active.record)
            }
            None => {
                let (this, c) = (self.clone(), cluster.to_owned());
                blocking(move || this.remove_pin(&c)).await
            }
        }
    }

    /// Serves exactly the `desired` pins (from the shared ConfigMap),
    /// resolving their versions in this replica's history (blocking).
    /// Returns how many pins changed.
    pub fn reconcile(&self, desired: BTreeMap<String, PinRecord>) -> usize {
        let current = self.inner.pins.borrow().clone();
        let mut changed = 0;
        for (cluster, mut record) in desired.clone() {
            record.cluster.clone_from(&cluster);
            if current.get(&cluster).is_some_and(|a| {
                a.record.version == record.version && a.record.since_unix_ms == record.since_unix_ms
            }) {
                continue;
            }
            // Sequence numbers are per replica: take this one's.
            match self.find(&cluster, &record.version) {
                Ok(v) => record.seq = v.seq,
                Err(e) => {
                    warn!(cluster = %cluster, version = %record.version, error = %e, "shared pin names a version this replica has not recorded; serving the latest");
                    continue;
                }
            }
            match self.apply_pin(record) {
                Ok(()) => changed += 1,
                Err(e) => warn!(cluster = %cluster, error = %e, "can't serve the shared pin"),
            }
        }
        for cluster in current.keys().filter(|c| !desired.contains_key(*c)) {
            if self.remove_pin(cluster).is_ok() {
                changed += 1;
            }
        }
        changed
    }

    /// The pins in force, with how far behind their group's newest
    /// recorded version each is.
    pub fn pin_views(&self) -> Vec<PinView> {
        let pins = self.inner.pins.borrow().clone();
        pins.values()
            .map(|a| {
                let versions = self.list(&a.record.cluster).unwrap_or_default();
                let latest = versions.last();
                PinView {
                    record: a.record.clone(),
                    latest: latest.map(|v| v.id.clone()),
                    behind: versions.iter().filter(|v| v.seq > a.record.seq).count(),
                }
            })
            .collect()
    }
}

/// A pin as `/status` and `/pins` show it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PinView {
    /// The pin.
    #[serde(flatten)]
    pub record: PinRecord,
    /// The newest version the sources produced since (its id).
    pub latest: Option<String>,
    /// How many versions the sources produced after the pinned one.
    pub behind: usize,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, HistoryError> + Send + 'static,
) -> Result<T, HistoryError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// The snapshot a pin serves: the stored version's resources, each
/// collection under a version of its own.
fn resolve(db: &Db, record: &PinRecord) -> Result<Arc<Snapshot>, HistoryError> {
    let v = db
        .list(&record.cluster)?
        .into_iter()
        .rev()
        .find(|v| v.seq == record.seq && v.id == record.version)
        .ok_or_else(|| HistoryError::NoVersion {
            cluster: record.cluster.clone(),
            version: record.version.clone(),
        })?;
    let mut snapshot = Snapshot::new();
    for (name, c) in v.collections {
        let resources = c
            .resources
            .into_iter()
            .map(|r| {
                Ok(EncodedResource {
                    encoded: db.body(&r.digest)?,
                    name: r.name.into(),
                    version: r.version.into(),
                })
            })
            .collect::<Result<Vec<_>, DbError>>()?;
        let version = format!("{}.pin-{:x}", c.version, record.since_unix_ms);
        snapshot.insert(
            name,
            Arc::new(CollectionSnapshot::with_version(version, resources)),
        );
    }
    Ok(Arc::new(snapshot))
}

#[cfg(test)]
mod tests;

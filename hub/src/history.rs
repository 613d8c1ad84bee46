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
//! Recording is off the pipeline's hot path: the pipeline hands over
//! [`Publication`]s and never waits; one task writes them on a blocking
//! thread. Nothing is dropped: what waits is kept per group, and when a
//! group is built again before its previous build was written, the newer
//! one replaces it (counted in [`METRIC_COALESCED`]: a build superseded
//! within the time one write takes). Versions the rollout's decisions
//! refer to ([`History::protect`]) and pinned ones are never pruned.
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

pub mod archive;
pub mod db;
pub mod diff;
pub mod fetch;
pub mod pins;
pub mod routes;
pub mod shared;

pub use self::pins::{ActivePin, Pins};
pub use meshhub_api::history::{ChangeOrigin, PinRecord, PinView, UnresolvedPin};

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use meshhub_mcp::settings::SettingError;
use meshhub_mcp::snapshot::Snapshot;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, debug, info_span, warn};

use self::archive::Archive;
use self::db::{Db, DbError};
use self::shared::{SharedError, SharedPins};

/// Default `history.dir` (a volume in a container).
pub const DEFAULT_DIR: &str = "/var/lib/meshhub";
/// Default `history.keep`.
pub const DEFAULT_KEEP: usize = 50;
/// Default `history.cacheBytes`: the database's page cache. redb's own
/// default is 1 GiB, which a long history fills with pages read for
/// `/history` and diffs — resident memory an operator never asked for.
pub const DEFAULT_CACHE_BYTES: u64 = 64 << 20;
/// The smallest `history.cacheBytes` accepted.
const MIN_CACHE_BYTES: u64 = 1 << 20;
/// The database file's name in `history.dir`.
pub const DB_FILE: &str = "history.redb";
/// Source changes listed per version (the rest are counted).
pub const MAX_ORIGINS: usize = 20;

/// Gauge: versions stored (every group).
pub const METRIC_VERSIONS: &str = "meshhub_history_versions";
/// Gauge: bytes of the bodies stored.
pub const METRIC_BYTES: &str = "meshhub_history_bytes";
/// Counter: builds not recorded because a newer build of the same group
/// replaced them while the recorder was behind.
pub const METRIC_COALESCED: &str = "meshhub_history_coalesced_total";
/// Counter: publications that could not be recorded (database errors).
pub const METRIC_ERRORS: &str = "meshhub_history_errors_total";
/// Gauge: groups currently pinned.
pub const METRIC_PINNED: &str = "meshhub_pinned_groups";
/// Gauge: shared pins this replica can't serve (the version is not in its
/// history).
pub const METRIC_UNRESOLVED_PINS: &str = "meshhub_unresolved_pins";

/// `history:` as written in the configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawHistory {
    #[serde(default)]
    dir: Option<PathBuf>,
    #[serde(default)]
    keep: Option<usize>,
    #[serde(default)]
    cache_bytes: Option<u64>,
}

/// Where and how much history is kept (`history:`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistorySpec {
    /// The directory of `history.redb`.
    pub dir: PathBuf,
    /// Versions kept per group.
    pub keep: usize,
    /// The database's page cache, in bytes.
    pub cache_bytes: u64,
}

impl RawHistory {
    /// Checks the block; `base` is the configuration file's directory.
    pub fn check(self, base: &Path) -> Result<HistorySpec, SettingError> {
        let keep = self.keep.unwrap_or(DEFAULT_KEEP);
        if keep < 2 {
            return Err(SettingError::new(
                "keep",
                format!("{keep} leaves nothing to roll back to; at least 2"),
            ));
        }
        let cache_bytes = self.cache_bytes.unwrap_or(DEFAULT_CACHE_BYTES);
        if cache_bytes < MIN_CACHE_BYTES {
            return Err(SettingError::new(
                "cacheBytes",
                format!(
                    "{cache_bytes} is too small for the database's pages; at least {MIN_CACHE_BYTES} (1 MiB)"
                ),
            ));
        }
        Ok(HistorySpec {
            dir: base.join(self.dir.unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))),
            keep,
            cache_bytes,
        })
    }
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
    /// Why it was held back from its cluster (analysis messages); empty
    /// when it was served.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_back: Vec<String>,
    /// Read from the archive in the cluster's API (another replica built
    /// it: [`archive`]); `seq` is this replica's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_archive: bool,
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
    /// Why it was held back from its cluster (analysis messages); empty
    /// when it was served.
    pub held_back: Vec<String>,
}

/// The id of a group snapshot: a digest of its collections' names and
/// versions (12 hex digits).
pub fn version_id(snapshot: &Snapshot) -> String {
    version_id_of(snapshot.collections().map(|(name, c)| (name, c.version())))
}

/// The id of collections at versions, `(collection, version)` in name
/// order: of a snapshot's every collection, its [`version_id`] (the
/// console names what a consumer was sent by it).
pub fn version_id_of<'a>(collections: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut h = Sha256::new();
    for (name, version) in collections {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((version.len() as u64).to_le_bytes());
        h.update(version.as_bytes());
    }
    hex::encode(&h.finalize()[..6])
}

/// The digest a body is stored under.
pub fn body_digest(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..16])
}

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
    /// The pinned version can't be archived for the other replicas.
    #[error("archiving the pinned version")]
    Archive(#[from] archive::ArchiveError),
}

struct Inner {
    db: Db,
    keep: usize,
    /// Publications waiting to be written, the newest per group.
    pending: std::sync::Mutex<BTreeMap<Arc<str>, Publication>>,
    wake: tokio::sync::Notify,
    /// `(group, version id)` the rollout's decisions refer to, by who
    /// says so (the controller's own decisions, those followed, those
    /// restored): never pruned (and archived by the leader). Each source
    /// writes its own set; the union counts.
    referenced: watch::Sender<BTreeMap<&'static str, HashSet<(String, String)>>>,
    /// Referenced versions already warned about as missing everywhere.
    missing_warned: std::sync::Mutex<HashSet<(String, String)>>,
    pins: watch::Sender<Pins>,
    /// Shared pins this replica could not resolve, by group (written only
    /// by the shared-pins reconciler).
    unresolved: std::sync::Mutex<BTreeMap<String, UnresolvedPin>>,
    shared: Option<SharedPins>,
    /// Where versions this replica lacks are read from (several replicas).
    archive: Option<Archive>,
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
        archive: Option<Archive>,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<Self, HistoryError> {
        std::fs::create_dir_all(&spec.dir)
            .map_err(|e| HistoryError::Dir(spec.dir.display().to_string(), e))?;
        let db = Db::open(&spec.dir.join(DB_FILE), spec.cache_bytes)?;
        let mut pins = BTreeMap::new();
        for record in db.pins()? {
            match pins::resolve(&db, &record) {
                Ok(snapshot) => {
                    pins.insert(record.cluster.clone(), ActivePin { record, snapshot });
                }
                Err(e) => {
                    warn!(cluster = %record.cluster, version = %record.version, error = %e, "stored pin can't be restored; the group is served its latest version")
                }
            }
        }
        metrics::gauge!(METRIC_PINNED).set(pins.len() as f64);
        let history = Self {
            inner: Arc::new(Inner {
                db,
                keep: spec.keep,
                pending: std::sync::Mutex::default(),
                wake: tokio::sync::Notify::new(),
                referenced: watch::channel(BTreeMap::new()).0,
                missing_warned: std::sync::Mutex::default(),
                pins: watch::channel(Arc::new(pins)).0,
                unresolved: std::sync::Mutex::default(),
                shared: shared.clone(),
                archive,
            }),
        };
        history.update_metrics();
        metrics::counter!(METRIC_COALESCED).increment(0);
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
                .record_loop(shutdown)
                .instrument(info_span!("history")),
        );
        Ok(history)
    }

    /// Hands a publication to the recorder; never waits. A build of the
    /// same group still waiting is replaced (coalesced).
    pub fn record(&self, publication: Publication) {
        let replaced = lock(&self.inner.pending)
            .insert(publication.cluster.clone(), publication)
            .is_some();
        if replaced {
            metrics::counter!(METRIC_COALESCED).increment(1);
            debug!("history recorder behind: a newer build replaced one not yet written");
        }
        self.inner.wake.notify_one();
    }

    /// The versions the rollout's decisions refer to, `(group, version
    /// id)`: never pruned while they do.
    /// `source` names the decisions (each source replaces only its own
    /// set: `"decided"`, `"followed"`, `"restored"`).
    pub fn protect(&self, source: &'static str, referenced: HashSet<(String, String)>) {
        self.inner.referenced.send_if_modified(|r| {
            if r.get(source) == Some(&referenced) {
                return false;
            }
            r.insert(source, referenced);
            true
        });
    }

    /// The versions the rollout's decisions refer to ([`History::protect`]),
    /// every source's.
    pub fn referenced(&self) -> HashSet<(String, String)> {
        self.inner
            .referenced
            .borrow()
            .values()
            .flatten()
            .cloned()
            .collect()
    }

    /// Wakes on every change of [`History::referenced`].
    pub fn referenced_changes(
        &self,
    ) -> watch::Receiver<BTreeMap<&'static str, HashSet<(String, String)>>> {
        self.inner.referenced.subscribe()
    }

    /// The pins in force, following every change.
    pub fn pins(&self) -> watch::Receiver<Pins> {
        self.inner.pins.subscribe()
    }

    async fn record_loop(self, shutdown: CancellationToken) {
        loop {
            let stopping = tokio::select! {
                biased;
                () = self.inner.wake.notified() => false,
                () = shutdown.cancelled() => true,
            };
            // Everything waiting, also at shutdown (the last builds are
            // recorded before the process ends).
            let batch = std::mem::take(&mut *lock(&self.inner.pending));
            if !batch.is_empty() {
                let this = self.clone();
                if let Err(e) = tokio::task::spawn_blocking(move || this.append_all(batch)).await {
                    warn!(error = %e, "history recorder failed");
                }
            }
            if stopping {
                break;
            }
        }
    }

    fn append_all(&self, batch: BTreeMap<Arc<str>, Publication>) {
        for (cluster, p) in batch {
            match self.append(&p) {
                Ok(Some(seq)) => debug!(cluster = %cluster, seq, "version recorded"),
                Ok(None) => {}
                Err(e) => {
                    metrics::counter!(METRIC_ERRORS).increment(1);
                    warn!(cluster = %cluster, error = %e, "can't record the version");
                }
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
            held_back: p.held_back.clone(),
            from_archive: false,
        };
        let pinned = self
            .inner
            .pins
            .borrow()
            .get(p.cluster.as_ref())
            .map(|a| a.record.seq);
        let referenced = self.referenced();
        let protect = |v: &StoredVersion| {
            Some(v.seq) == pinned || referenced.contains(&(v.cluster.clone(), v.id.clone()))
        };
        let seq = self.inner.db.append(
            version,
            &|d| bodies.get(d).cloned(),
            self.inner.keep,
            &protect,
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
}

/// `m`, locked; a panic elsewhere while it was held leaves plain data.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;

//! The history database (redb): versions per group, bodies stored once by
//! digest with a reference count, pins. Every method is one transaction
//! and blocking: callers run them on a blocking thread.

use std::path::Path;
use std::time::Duration;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use tracing::warn;

use super::{PinRecord, StoredVersion};

/// Encoded resources by digest.
const BODIES: TableDefinition<&str, &[u8]> = TableDefinition::new("bodies");
/// How many stored versions refer to each body.
const REFS: TableDefinition<&str, u64> = TableDefinition::new("refs");
/// Versions: (group, sequence number) → JSON [`StoredVersion`].
const VERSIONS: TableDefinition<(&str, u64), &str> = TableDefinition::new("versions");
/// Pins: group → JSON [`PinRecord`].
const PINS: TableDefinition<&str, &str> = TableDefinition::new("pins");
/// Counters: `bytes` (body bytes stored).
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// How long opening the database waits for another process to let it go:
/// a pod replaced on the same volume (deleted, evicted, drained) starts
/// while the old one is still stopping, within its grace period (the
/// chart's is 15 s); `Recreate` covers upgrades only.
pub const OPEN_WAIT: Duration = Duration::from_secs(60);

/// Why the history database failed.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The database.
    #[error("history database")]
    Redb(#[from] redb::Error),
    /// A stored record can't be read back.
    #[error("history record")]
    Json(#[from] serde_json::Error),
    /// A body a version refers to is missing.
    #[error("history body {0} is missing")]
    MissingBody(String),
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for DbError {
            fn from(e: $t) -> Self {
                Self::Redb(e.into())
            }
        }
    )*};
}
from_redb!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

/// Sizes, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Versions stored (every group).
    pub versions: u64,
    /// Distinct bodies stored.
    pub bodies: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// The open database.
#[derive(Debug)]
pub struct Db {
    db: Database,
}

impl Db {
    /// Opens (creating) the database file, with a page cache of at most
    /// `cache_bytes`, waiting up to [`OPEN_WAIT`] for a process that holds
    /// it to let it go.
    pub fn open(path: &Path, cache_bytes: u64) -> Result<Self, DbError> {
        Self::open_waiting(path, cache_bytes, OPEN_WAIT)
    }

    /// [`Db::open`], waiting up to `wait` for the file's lock.
    pub fn open_waiting(path: &Path, cache_bytes: u64, wait: Duration) -> Result<Self, DbError> {
        let cache = usize::try_from(cache_bytes).unwrap_or(usize::MAX);
        let db = meshhub_runtime::held::wait_while_held(
            wait,
            || Database::builder().set_cache_size(cache).create(path),
            |e| matches!(e, redb::DatabaseError::DatabaseAlreadyOpen),
            |_| warn!(path = %path.display(), wait = ?wait, "the history database is held by another process (the pod this one replaces, still stopping?); waiting for it"),
        )?;
        let tx = db.begin_write()?;
        tx.open_table(BODIES)?;
        tx.open_table(REFS)?;
        tx.open_table(VERSIONS)?;
        tx.open_table(PINS)?;
        tx.open_table(META)?;
        tx.commit()?;
        Ok(Self { db })
    }

    /// Appends `version` to its group unless the group's newest version has
    /// the same id; stores the bodies it lacks (`body(digest)` gives them)
    /// and drops the oldest versions beyond `keep` (never one `protect`
    /// says: pinned, or referred to by the rollout), with the bodies nobody
    /// refers to any more.
    /// Returns the sequence number given, or `None` if unchanged.
    pub fn append(
        &self,
        mut version: StoredVersion,
        body: &dyn Fn(&str) -> Option<bytes::Bytes>,
        keep: usize,
        protect: &dyn Fn(&StoredVersion) -> bool,
    ) -> Result<Option<u64>, DbError> {
        let tx = self.db.begin_write()?;
        let seq;
        {
            let mut versions = tx.open_table(VERSIONS)?;
            let mut refs = tx.open_table(REFS)?;
            let mut bodies = tx.open_table(BODIES)?;
            let mut meta = tx.open_table(META)?;
            let group = version.cluster.clone();
            let last = versions
                .range((group.as_str(), 0)..=(group.as_str(), u64::MAX))?
                .next_back()
                .transpose()?
                .map(|(_, v)| serde_json::from_str::<StoredVersion>(v.value()))
                .transpose()?;
            if last.as_ref().is_some_and(|l| l.id == version.id) {
                return Ok(None);
            }
            seq = last.map_or(1, |l| l.seq + 1);
            version.seq = seq;
            let mut added = 0u64;
            for digest in version.digests() {
                let n = refs.get(digest)?.map_or(0, |v| v.value());
                if n == 0 {
                    let bytes =
                        body(digest).ok_or_else(|| DbError::MissingBody(digest.to_owned()))?;
                    bodies.insert(digest, bytes.as_ref())?;
                    added += bytes.len() as u64;
                }
                refs.insert(digest, n + 1)?;
            }
            versions.insert(
                (group.as_str(), seq),
                serde_json::to_string(&version)?.as_str(),
            )?;

            // Prune the oldest beyond `keep`.
            let seqs: Vec<u64> = versions
                .range((group.as_str(), 0)..=(group.as_str(), u64::MAX))?
                .map(|r| r.map(|(k, _)| k.value().1))
                .collect::<Result<_, _>>()?;
            // The newest `keep` stay; older ones go unless protected.
            let excess = seqs.len().saturating_sub(keep.max(1));
            let mut freed = 0u64;
            for old in seqs.into_iter().take(excess) {
                let stored: StoredVersion = match versions.get((group.as_str(), old))? {
                    Some(text) => serde_json::from_str(text.value())?,
                    None => continue,
                };
                if protect(&stored) {
                    continue;
                }
                versions.remove((group.as_str(), old))?;
                for digest in stored.digests() {
                    let n = refs.get(digest)?.map_or(0, |v| v.value());
                    if n <= 1 {
                        refs.remove(digest)?;
                        if let Some(b) = bodies.remove(digest)? {
                            freed += b.value().len() as u64;
                        }
                    } else {
                        refs.insert(digest, n - 1)?;
                    }
                }
            }
            let bytes = meta.get("bytes")?.map_or(0, |v| v.value());
            meta.insert("bytes", (bytes + added).saturating_sub(freed))?;
        }
        tx.commit()?;
        Ok(Some(seq))
    }

    /// A group's versions, oldest first.
    pub fn list(&self, group: &str) -> Result<Vec<StoredVersion>, DbError> {
        let tx = self.db.begin_read()?;
        let versions = tx.open_table(VERSIONS)?;
        let mut out = Vec::new();
        for r in versions.range((group, 0)..=(group, u64::MAX))? {
            let (_, v) = r?;
            out.push(serde_json::from_str(v.value())?);
        }
        Ok(out)
    }

    /// One stored body.
    pub fn body(&self, digest: &str) -> Result<bytes::Bytes, DbError> {
        let tx = self.db.begin_read()?;
        let bodies = tx.open_table(BODIES)?;
        let v = bodies
            .get(digest)?
            .ok_or_else(|| DbError::MissingBody(digest.to_owned()))?;
        Ok(bytes::Bytes::copy_from_slice(v.value()))
    }

    /// Every pin.
    pub fn pins(&self) -> Result<Vec<PinRecord>, DbError> {
        let tx = self.db.begin_read()?;
        let pins = tx.open_table(PINS)?;
        let mut out = Vec::new();
        for r in pins.iter()? {
            let (_, v) = r?;
            out.push(serde_json::from_str(v.value())?);
        }
        Ok(out)
    }

    /// Stores a group's pin (`None`: removes it).
    pub fn set_pin(&self, group: &str, pin: Option<&PinRecord>) -> Result<(), DbError> {
        let tx = self.db.begin_write()?;
        {
            let mut pins = tx.open_table(PINS)?;
            match pin {
                Some(p) => {
                    pins.insert(group, serde_json::to_string(p)?.as_str())?;
                }
                None => {
                    pins.remove(group)?;
                }
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Sizes.
    pub fn stats(&self) -> Result<Stats, DbError> {
        let tx = self.db.begin_read()?;
        Ok(Stats {
            versions: tx.open_table(VERSIONS)?.len()?,
            bodies: tx.open_table(BODIES)?.len()?,
            bytes: tx.open_table(META)?.get("bytes")?.map_or(0, |v| v.value()),
        })
    }
}

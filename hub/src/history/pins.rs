//! Pins: which groups are served a historical version instead of their
//! latest, stored in the history database or shared through a ConfigMap
//! ([`super::shared`]), and the snapshot each serves.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use tracing::warn;

use super::db::{Db, DbError};
use super::{
    History, HistoryError, METRIC_PINNED, METRIC_UNRESOLVED_PINS, PinRecord, PinView, UnresolvedPin,
};
use crate::audit::{AuditEvent, AuditLog};

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

impl History {
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

    /// The stored version `id` of `cluster`, as it was served (blocking).
    pub fn snapshot(&self, cluster: &str, id: &str) -> Result<Arc<Snapshot>, HistoryError> {
        load(&self.inner.db, cluster, id, None, None)
    }

    /// Serves `record` on this replica and stores it in the database
    /// (blocking).
    /// `announce` runs once the pin is stored and before it is served (so
    /// the audit log has the pin before the deliveries it causes).
    pub fn apply_pin(
        &self,
        record: PinRecord,
        announce: impl FnOnce(),
    ) -> Result<(), HistoryError> {
        let snapshot = resolve(&self.inner.db, &record)?;
        self.inner.db.set_pin(&record.cluster, Some(&record))?;
        announce();
        self.inner.pins.send_modify(|pins| {
            Arc::make_mut(pins).insert(record.cluster.clone(), ActivePin { record, snapshot });
            metrics::gauge!(METRIC_PINNED).set(pins.len() as f64);
        });
        Ok(())
    }

    /// Stops serving `cluster`'s pin on this replica (blocking); returns
    /// it.
    /// `announce` runs as for [`History::apply_pin`].
    pub fn remove_pin(
        &self,
        cluster: &str,
        announce: impl FnOnce(&PinRecord),
    ) -> Result<PinRecord, HistoryError> {
        let Some(active) = self.inner.pins.borrow().get(cluster).cloned() else {
            return Err(HistoryError::NotPinned(cluster.to_owned()));
        };
        self.inner.db.set_pin(cluster, None)?;
        announce(&active.record);
        self.inner.pins.send_modify(|pins| {
            Arc::make_mut(pins).remove(cluster);
            metrics::gauge!(METRIC_PINNED).set(pins.len() as f64);
        });
        Ok(active.record)
    }

    /// Pins `cluster` to `version` for `by`: on this replica, or, with
    /// shared pins, in the ConfigMap every replica follows. Writes the pin
    /// to `audit`.
    pub async fn pin(
        &self,
        cluster: &str,
        version: &str,
        by: &str,
        audit: &AuditLog,
    ) -> Result<PinRecord, HistoryError> {
        let (this, c, v, b) = (
            self.clone(),
            cluster.to_owned(),
            version.to_owned(),
            by.to_owned(),
        );
        let record = blocking(move || this.pin_record(&c, &v, &b)).await?;
        let event = AuditEvent::Pin {
            cluster: record.cluster.clone(),
            version: record.version.clone(),
            by: by.to_owned(),
        };
        match &self.inner.shared {
            Some(shared) => {
                // Archived before any other replica is told of it: this one
                // has it; one started later may not.
                if let Some(archive) = &self.inner.archive {
                    let (this, c, v) = (self.clone(), cluster.to_owned(), record.version.clone());
                    let exported = blocking(move || this.export(&c, &v)).await?;
                    archive.put(&exported).await?;
                }
                shared.write(cluster, Some(&record)).await?;
                audit.record(event);
            }
            None => {
                let (this, r, audit) = (self.clone(), record.clone(), audit.clone());
                blocking(move || this.apply_pin(r, || audit.record(event))).await?;
            }
        }
        Ok(record)
    }

    /// Lifts `cluster`'s pin (see [`History::pin`]) for `by`; returns what
    /// it was.
    pub async fn unpin(
        &self,
        cluster: &str,
        by: &str,
        audit: &AuditLog,
    ) -> Result<PinRecord, HistoryError> {
        match &self.inner.shared {
            Some(shared) => {
                let Some(active) = self.inner.pins.borrow().get(cluster).cloned() else {
                    return Err(HistoryError::NotPinned(cluster.to_owned()));
                };
                shared.write(cluster, None).await?;
                audit.record(AuditEvent::Unpin {
                    cluster: active.record.cluster.clone(),
                    version: active.record.version.clone(),
                    by: by.to_owned(),
                });
                Ok(active.record)
            }
            None => {
                let (this, c, audit, by) = (
                    self.clone(),
                    cluster.to_owned(),
                    audit.clone(),
                    by.to_owned(),
                );
                blocking(move || {
                    this.remove_pin(&c, |r| {
                        audit.record(AuditEvent::Unpin {
                            cluster: r.cluster.clone(),
                            version: r.version.clone(),
                            by,
                        });
                    })
                })
                .await
            }
        }
    }

    /// Serves exactly the `desired` pins (from the shared ConfigMap),
    /// resolving their versions in this replica's history (blocking).
    /// Returns how many pins changed.
    pub fn reconcile(&self, desired: BTreeMap<String, PinRecord>) -> usize {
        let current = self.inner.pins.borrow().clone();
        let mut unresolved = BTreeMap::new();
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
                    let serving = match current.get(&cluster) {
                        Some(a) => format!("the earlier pin {}", a.record.version),
                        None => "the latest version".to_owned(),
                    };
                    let known = super::lock(&self.inner.unresolved)
                        .get(&cluster)
                        .is_some_and(|u| u.record.version == record.version);
                    if !known {
                        warn!(cluster = %cluster, version = %record.version, error = %e, serving = %serving, "shared pin names a version this replica has not recorded; it keeps serving what it served");
                    }
                    unresolved.insert(
                        cluster,
                        UnresolvedPin {
                            reason: e.to_string(),
                            serving,
                            record,
                        },
                    );
                    continue;
                }
            }
            match self.apply_pin(record, || {}) {
                Ok(()) => changed += 1,
                Err(e) => warn!(cluster = %cluster, error = %e, "can't serve the shared pin"),
            }
        }
        for cluster in current.keys().filter(|c| !desired.contains_key(*c)) {
            if self.remove_pin(cluster, |_| {}).is_ok() {
                changed += 1;
            }
        }
        metrics::gauge!(METRIC_UNRESOLVED_PINS).set(unresolved.len() as f64);
        *self
            .inner
            .unresolved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = unresolved;
        changed
    }

    /// Shared pins this replica can't serve (the version is not in its
    /// history), with what it serves instead.
    pub fn unresolved_pins(&self) -> Vec<UnresolvedPin> {
        self.inner
            .unresolved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// The pins in force, with how far behind their group's newest
    /// recorded version each is.
    pub fn pin_views(&self) -> Vec<PinView> {
        let pins = self.inner.pins.borrow().clone();
        pins.values()
            .map(|a| {
                // Built here: a version read from the archive is not newer
                // than the builds it predates, whatever its number.
                let versions: Vec<_> = self
                    .list(&a.record.cluster)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|v| !v.from_archive)
                    .collect();
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

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, HistoryError> + Send + 'static,
) -> Result<T, HistoryError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// The snapshot a pin serves: the stored version's resources, each
/// collection under a version of its own.
pub(super) fn resolve(db: &Db, record: &PinRecord) -> Result<Arc<Snapshot>, HistoryError> {
    load(
        db,
        &record.cluster,
        &record.version,
        Some(record.seq),
        Some(record.since_unix_ms),
    )
}

/// The stored version `id` of `cluster` (the newest with that id, or the
/// one numbered `seq`) as a snapshot; with `pin_since`, each collection
/// under a version of its own (so a pin is sent even to a peer that holds
/// the same content), otherwise under the versions it was served with.
pub(super) fn load(
    db: &Db,
    cluster: &str,
    id: &str,
    seq: Option<u64>,
    pin_since: Option<u64>,
) -> Result<Arc<Snapshot>, HistoryError> {
    let v = db
        .list(cluster)?
        .into_iter()
        .rev()
        .find(|v| v.id == id && seq.is_none_or(|s| v.seq == s))
        .ok_or_else(|| HistoryError::NoVersion {
            cluster: cluster.to_owned(),
            version: id.to_owned(),
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
        let version = match pin_since {
            Some(since) => format!("{}.pin-{since:x}", c.version),
            None => c.version,
        };
        snapshot.insert(
            name,
            Arc::new(CollectionSnapshot::with_version(version, resources)),
        );
    }
    Ok(Arc::new(snapshot))
}

//! A replica's history completed from the archive ([`super::archive`]):
//! what the leader exports, and what a replica lacking a referenced
//! version imports.

use std::collections::BTreeMap;

use tracing::{info, warn};

use super::archive::{self, Exported};
use super::{History, HistoryError};

impl History {
    /// `cluster`'s version `id` with its bodies, as stored here (blocking).
    pub fn export(&self, cluster: &str, id: &str) -> Result<Exported, HistoryError> {
        let version = self
            .list(cluster)?
            .into_iter()
            .rev()
            .find(|v| v.id == id)
            .ok_or_else(|| HistoryError::NoVersion {
                cluster: cluster.to_owned(),
                version: id.to_owned(),
            })?;
        let mut bodies = BTreeMap::new();
        for d in version.digests() {
            bodies.insert(d.to_owned(), self.body(d)?);
        }
        Ok(Exported { version, bodies })
    }

    /// Adds a version another replica built to this one's history
    /// (blocking): it gets this replica's next sequence number and is
    /// marked [`super::StoredVersion::from_archive`].
    pub fn import(&self, exported: Exported) -> Result<(), HistoryError> {
        let Exported {
            mut version,
            bodies,
        } = exported;
        version.from_archive = true;
        let referenced = self.referenced();
        self.inner.db.append(
            version,
            &|d| bodies.get(d).cloned(),
            self.inner.keep,
            &|v| referenced.contains(&(v.cluster.clone(), v.id.clone())) || self.is_pinned(v),
        )?;
        self.update_metrics();
        Ok(())
    }

    fn is_pinned(&self, v: &super::StoredVersion) -> bool {
        self.inner
            .pins
            .borrow()
            .get(&v.cluster)
            .is_some_and(|a| a.record.seq == v.seq)
    }

    /// Reads every version of `wanted` (`(group, id)`) this replica's
    /// history lacks from the archive, when there is one; returns those
    /// still missing (not archived, or the archive unreadable: tried again
    /// by the caller).
    pub async fn fetch_missing(&self, wanted: Vec<(String, String)>) -> Vec<(String, String)> {
        let this = self.clone();
        let missing = blocking(move || {
            wanted
                .into_iter()
                .filter(|(c, id)| !this.has(c, id))
                .collect::<Vec<_>>()
        })
        .await;
        let Some(archive) = self.inner.archive.clone() else {
            return missing;
        };
        let mut still = Vec::new();
        for (group, id) in missing {
            let exported = match archive.get(&group, &id).await {
                Ok(Some(e)) => e,
                Ok(None) => {
                    if self.first_warning(&group, &id) {
                        warn!(group = %group, version = %id, namespace = archive.namespace(), "a referenced version is neither in this replica's history nor archived (yet); looked for again every few seconds");
                    }
                    still.push((group, id));
                    continue;
                }
                Err(e) => {
                    metrics::counter!(archive::METRIC_ERRORS).increment(1);
                    if self.first_warning(&group, &id) {
                        warn!(group = %group, version = %id, error = %e, "can't read a referenced version from the archive; retrying every few seconds");
                    }
                    still.push((group, id));
                    continue;
                }
            };
            let this = self.clone();
            match blocking(move || this.import(exported)).await {
                Ok(()) => {
                    super::lock(&self.inner.missing_warned).remove(&(group.clone(), id.clone()));
                    metrics::counter!(archive::METRIC_IMPORTED).increment(1);
                    info!(group = %group, version = %id, "version read from the archive into this replica's history");
                }
                Err(e) => {
                    warn!(group = %group, version = %id, error = %e, "can't record a version read from the archive");
                    still.push((group, id));
                }
            }
        }
        still
    }

    /// Whether `(group, id)` is missing for the first time (warned once).
    fn first_warning(&self, group: &str, id: &str) -> bool {
        super::lock(&self.inner.missing_warned).insert((group.to_owned(), id.to_owned()))
    }

    /// Whether version `id` of `cluster` is stored here.
    fn has(&self, cluster: &str, id: &str) -> bool {
        self.list(cluster)
            .is_ok_and(|all| all.iter().any(|v| v.id == id))
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

//! The versions the rollout and the pins refer to, kept in the cluster's
//! API, so that every replica can produce them (issue 37).
//!
//! Each replica records its own history (the chart's default is a
//! per-pod `emptyDir`): a pod started after a change never built the
//! version a held or rolled-back cluster must keep, nor a version an
//! operator pinned long ago. The leader therefore writes every version
//! its decisions or the pins refer to into the API, as immutable
//! ConfigMaps in the leader election's namespace, and deletes it once
//! nothing has referred to it for [`GRACE`]; a replica that lacks a
//! referenced version reads it from there into its own history
//! ([`super::History::fetch_missing`]). A rolling upgrade of every
//! replica — each starting empty — thus keeps every held and rolled-back
//! cluster where it was and every pin served.
//!
//! Why the API and not the replicas fetching from one another: the API
//! outlives every replica (all of them restarting at once included), needs
//! no peer discovery, and its access is already granted and audited.
//!
//! The format (ours): a version is its [`StoredVersion`] (JSON) and the
//! bodies it refers to, as one protobuf message ([`ArchivedVersion`]),
//! gzipped and cut into chunks of at most [`CHUNK`] bytes, one ConfigMap
//! each (`binaryData`), named `meshhub-archive-<group>-<id>-<i>` and
//! labelled with the group and the version id. Each chunk carries the
//! SHA-256 of the whole and the number of chunks; a reader checks both,
//! then every body against its digest, before anything is imported.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use prost::Message as _;
use sha2::{Digest as _, Sha256};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{History, StoredVersion, body_digest};
use crate::leader::LeaderStatus;

/// The label every archive ConfigMap carries (value [`ARCHIVE_KIND`]).
pub const ARCHIVE_LABEL: &str = "meshhub.io/archive";
/// [`ARCHIVE_LABEL`]'s value.
pub const ARCHIVE_KIND: &str = "version";
/// The label naming the version's group.
pub const GROUP_LABEL: &str = "meshhub.io/group";
/// The label naming the version id.
pub const VERSION_LABEL: &str = "meshhub.io/version";
/// The annotation: `<index>/<chunks>`.
pub const CHUNK_ANNOTATION: &str = "meshhub.io/chunk";
/// The annotation: SHA-256 (hex) of the whole archived version.
pub const SHA_ANNOTATION: &str = "meshhub.io/sha256";
/// The key of a chunk's bytes in `binaryData`.
pub const DATA_KEY: &str = "chunk";
/// Bytes per chunk: a ConfigMap holds at most 1 MiB of data.
pub const CHUNK: usize = 900 * 1024;
/// Chunks per version at most (about 56 MiB compressed).
pub const MAX_CHUNKS: usize = 64;
/// The largest archived version read back (decompressed): well under the
/// hub's memory limit (the chart's is 1 GiB), and over any group the hub
/// serves (its messages are capped at 64 MiB per collection).
pub const MAX_DECOMPRESSED: u64 = 256 << 20;
/// How long a version nothing refers to stays archived (a decision that
/// changes back, a replica that reads an older decision meanwhile).
pub const GRACE: Duration = Duration::from_secs(300);
/// The archive format this hub writes (and the newest it reads).
pub const SCHEMA: u32 = 1;

/// Gauge: versions archived (as the leader last saw them).
pub const METRIC_ARCHIVED: &str = "meshhub_archive_versions";
/// Counter: archive reads or writes that failed.
pub const METRIC_ERRORS: &str = "meshhub_archive_errors_total";
/// Counter: versions a replica read from the archive into its history.
pub const METRIC_IMPORTED: &str = "meshhub_archive_imported_total";

/// One archived version (the protobuf message of the blob).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ArchivedVersion {
    /// The format: [`SCHEMA`].
    #[prost(uint32, tag = "1")]
    pub schema: u32,
    /// The [`StoredVersion`], JSON.
    #[prost(string, tag = "2")]
    pub version: String,
    /// The bodies it refers to.
    #[prost(message, repeated, tag = "3")]
    pub bodies: Vec<ArchivedBody>,
}

/// One body of an [`ArchivedVersion`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct ArchivedBody {
    /// Its digest ([`body_digest`]).
    #[prost(string, tag = "1")]
    pub digest: String,
    /// The encoded resource.
    #[prost(bytes = "bytes", tag = "2")]
    pub body: Bytes,
}

/// `(group, version id)`.
pub type Key = (String, String);

/// A chunk as listed: its name, its `chunk` and `sha256` annotations.
type ListedChunk = (String, String, String);

/// An archived version as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Its ConfigMaps.
    pub names: Vec<String>,
    /// Every chunk of one write is there.
    pub complete: bool,
}

/// A version with its bodies, as archived and imported.
#[derive(Clone, Debug, PartialEq)]
pub struct Exported {
    /// The version.
    pub version: StoredVersion,
    /// Its bodies by digest.
    pub bodies: BTreeMap<String, Bytes>,
}

/// Why a version can't be archived or read back.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The API server refused or failed.
    #[error("the archive's API")]
    Api(#[from] kube::Error),
    /// The version does not fit.
    #[error(
        "version {id} of {group} is {bytes} bytes compressed: more than {MAX_CHUNKS} ConfigMaps"
    )]
    TooLarge {
        /// The group.
        group: String,
        /// The version id.
        id: String,
        /// Its compressed size.
        bytes: usize,
    },
    /// Chunks are missing or disagree (a write in progress or cut short).
    #[error("incomplete: {0}")]
    Incomplete(String),
    /// The bytes are not a version this hub can read.
    #[error("damaged: {0}")]
    Damaged(String),
    /// Written by a newer meshhub.
    #[error("archive format {0} is newer than this hub's ({SCHEMA})")]
    Newer(u32),
}

/// Encodes `exported` as the archive's blob (gzipped protobuf).
pub fn encode(exported: &Exported) -> Result<Vec<u8>, ArchiveError> {
    let message = ArchivedVersion {
        schema: SCHEMA,
        version: serde_json::to_string(&exported.version)
            .map_err(|e| ArchiveError::Damaged(e.to_string()))?,
        bodies: exported
            .bodies
            .iter()
            .map(|(digest, body)| ArchivedBody {
                digest: digest.clone(),
                body: body.clone(),
            })
            .collect(),
    };
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&message.encode_to_vec())
        .and_then(|()| gz.finish())
        .map_err(|e| ArchiveError::Damaged(e.to_string()))
}

/// Decodes a blob of [`encode`] and checks it: the version is `group`'s
/// `id`, and every body it refers to is there under its digest.
pub fn decode(blob: &[u8], group: &str, id: &str) -> Result<Exported, ArchiveError> {
    let damaged = |what: String| ArchiveError::Damaged(what);
    let mut raw = Vec::new();
    GzDecoder::new(blob)
        .take(MAX_DECOMPRESSED + 1)
        .read_to_end(&mut raw)
        .map_err(|e| damaged(format!("gzip: {e}")))?;
    if raw.len() as u64 > MAX_DECOMPRESSED {
        return Err(damaged(format!(
            "more than {MAX_DECOMPRESSED} bytes decompressed"
        )));
    }
    let message =
        ArchivedVersion::decode(raw.as_slice()).map_err(|e| damaged(format!("protobuf: {e}")))?;
    if message.schema > SCHEMA {
        return Err(ArchiveError::Newer(message.schema));
    }
    let version: StoredVersion =
        serde_json::from_str(&message.version).map_err(|e| damaged(format!("version: {e}")))?;
    if version.cluster != group || version.id != id {
        return Err(damaged(format!(
            "holds version {} of {}, not {id} of {group}",
            version.id, version.cluster
        )));
    }
    let mut bodies = BTreeMap::new();
    for b in message.bodies {
        if body_digest(&b.body) != b.digest {
            return Err(damaged(format!(
                "body {} does not match its digest",
                b.digest
            )));
        }
        bodies.insert(b.digest, b.body);
    }
    if let Some(d) = version.digests().find(|d| !bodies.contains_key(*d)) {
        return Err(damaged(format!("body {d} is missing")));
    }
    Ok(Exported { version, bodies })
}

/// The ConfigMap name of chunk `index` of `group`'s version `id`.
pub fn chunk_name(group: &str, id: &str, index: usize) -> String {
    format!("meshhub-archive-{group}-{id}-{index}")
}

/// Whether the chunks of one version listed are every chunk of one write.
fn complete(parts: &[ListedChunk]) -> bool {
    let n = parts.len();
    let Some((_, _, sha)) = parts.first() else {
        return false;
    };
    let mut seen = vec![false; n];
    parts.iter().all(|(_, chunk, s)| {
        s == sha
            && chunk
                .split_once('/')
                .and_then(|(i, m)| Some((i.parse::<usize>().ok()?, m.parse::<usize>().ok()?)))
                .is_some_and(|(i, m)| m == n && i < n && !std::mem::replace(&mut seen[i], true))
    })
}

/// The ConfigMaps holding `blob` (see the module's docs).
pub fn chunks(group: &str, id: &str, blob: &[u8]) -> Result<Vec<ConfigMap>, ArchiveError> {
    let parts: Vec<&[u8]> = blob.chunks(CHUNK).collect();
    if parts.len() > MAX_CHUNKS {
        return Err(ArchiveError::TooLarge {
            group: group.to_owned(),
            id: id.to_owned(),
            bytes: blob.len(),
        });
    }
    let sha = hex::encode(Sha256::digest(blob));
    let n = parts.len();
    Ok(parts
        .into_iter()
        .enumerate()
        .map(|(i, part)| {
            let mut labels = meshhub_kube::object::own_labels();
            labels.insert(ARCHIVE_LABEL.to_owned(), ARCHIVE_KIND.to_owned());
            labels.insert(GROUP_LABEL.to_owned(), group.to_owned());
            labels.insert(VERSION_LABEL.to_owned(), id.to_owned());
            ConfigMap {
                metadata: ObjectMeta {
                    name: Some(chunk_name(group, id, i)),
                    labels: Some(labels),
                    annotations: Some(BTreeMap::from([
                        (CHUNK_ANNOTATION.to_owned(), format!("{i}/{n}")),
                        (SHA_ANNOTATION.to_owned(), sha.clone()),
                    ])),
                    ..Default::default()
                },
                binary_data: Some(BTreeMap::from([(
                    DATA_KEY.to_owned(),
                    ByteString(part.to_vec()),
                )])),
                immutable: Some(true),
                ..Default::default()
            }
        })
        .collect())
}

/// The blob the chunks of one version hold, checked (every chunk there,
/// one SHA-256, which the whole matches).
pub fn join(mut found: Vec<ConfigMap>) -> Result<Vec<u8>, ArchiveError> {
    let incomplete = |what: String| ArchiveError::Incomplete(what);
    let annotation = |cm: &ConfigMap, key: &str| {
        cm.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .cloned()
            .unwrap_or_default()
    };
    let mut parts = Vec::new();
    for cm in &found {
        let chunk = annotation(cm, CHUNK_ANNOTATION);
        let parsed = chunk
            .split_once('/')
            .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)));
        let Some((i, n)) = parsed else {
            return Err(ArchiveError::Damaged(format!("chunk annotation {chunk:?}")));
        };
        parts.push((i, n, annotation(cm, SHA_ANNOTATION)));
    }
    let Some((_, n, sha)) = parts.first().cloned() else {
        return Err(incomplete("no chunk".to_owned()));
    };
    if n == 0 || n > MAX_CHUNKS {
        return Err(ArchiveError::Damaged(format!(
            "{n} chunks (1 to {MAX_CHUNKS})"
        )));
    }
    if parts.iter().any(|(_, m, s)| *m != n || *s != sha) {
        return Err(incomplete("chunks of different writes".to_owned()));
    }
    let mut order: Vec<usize> = (0..found.len()).collect();
    order.sort_by_key(|k| parts[*k].0);
    let indices: Vec<usize> = order.iter().map(|k| parts[*k].0).collect();
    if indices.len() != n || indices.iter().enumerate().any(|(k, i)| k != *i) {
        return Err(incomplete(format!("chunks {indices:?} of {n}")));
    }
    let mut blob = Vec::new();
    for k in order {
        let data = found[k]
            .binary_data
            .take()
            .and_then(|mut d| d.remove(DATA_KEY))
            .ok_or_else(|| ArchiveError::Damaged("a chunk without data".to_owned()))?;
        blob.extend_from_slice(&data.0);
    }
    if hex::encode(Sha256::digest(&blob)) != sha {
        return Err(ArchiveError::Damaged(
            "the chunks do not match their SHA-256".to_owned(),
        ));
    }
    Ok(blob)
}

/// The archive in one namespace (the leader election's).
#[derive(Clone)]
pub struct Archive {
    api: Api<ConfigMap>,
    namespace: String,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Archive {
    /// The archive in `namespace`, over `client`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
        }
    }

    /// Its namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn selector(group: Option<&str>, id: Option<&str>) -> ListParams {
        let mut s = format!("{ARCHIVE_LABEL}={ARCHIVE_KIND}");
        if let Some(g) = group {
            s.push_str(&format!(",{GROUP_LABEL}={g}"));
        }
        if let Some(i) = id {
            s.push_str(&format!(",{VERSION_LABEL}={i}"));
        }
        ListParams::default().labels(&s)
    }

    /// The versions archived, `(group, id)` → their ConfigMaps' names,
    /// and whether they are complete (every chunk of one write there: a
    /// writer that stopped half-way, or chunks deleted from outside, leave
    /// an incomplete one, which the leader writes again).
    pub async fn list(&self) -> Result<BTreeMap<Key, Listed>, ArchiveError> {
        let list = self.api.list_metadata(&Self::selector(None, None)).await?;
        let mut chunks: BTreeMap<Key, Vec<ListedChunk>> = BTreeMap::new();
        for m in list.items {
            let labels = m.metadata.labels.unwrap_or_default();
            let annotations = m.metadata.annotations.unwrap_or_default();
            if let (Some(g), Some(v), Some(name)) = (
                labels.get(GROUP_LABEL),
                labels.get(VERSION_LABEL),
                m.metadata.name,
            ) {
                let chunk = annotations
                    .get(CHUNK_ANNOTATION)
                    .cloned()
                    .unwrap_or_default();
                let sha = annotations.get(SHA_ANNOTATION).cloned().unwrap_or_default();
                chunks
                    .entry((g.clone(), v.clone()))
                    .or_default()
                    .push((name, chunk, sha));
            }
        }
        Ok(chunks
            .into_iter()
            .map(|(key, parts)| {
                let complete = complete(&parts);
                let names = parts.into_iter().map(|(name, _, _)| name).collect();
                (key, Listed { names, complete })
            })
            .collect())
    }

    /// `group`'s version `id`, when archived (whole and intact).
    pub async fn get(&self, group: &str, id: &str) -> Result<Option<Exported>, ArchiveError> {
        let found = self
            .api
            .list(&Self::selector(Some(group), Some(id)))
            .await?
            .items;
        if found.is_empty() {
            return Ok(None);
        }
        let blob = join(found)?;
        decode(&blob, group, id).map(Some)
    }

    /// Archives `exported` (idempotent: a chunk written before with the
    /// same content stays; one of another write is replaced). Returns the
    /// names of its ConfigMaps.
    pub async fn put(&self, exported: &Exported) -> Result<Vec<String>, ArchiveError> {
        let (group, id) = (&exported.version.cluster, &exported.version.id);
        let blob = encode(exported)?;
        let mut names = Vec::new();
        for cm in chunks(group, id, &blob)? {
            let name = cm.metadata.name.clone().unwrap_or_default();
            match self.api.create(&PostParams::default(), &cm).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    let sha = |c: &ConfigMap| {
                        c.metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(SHA_ANNOTATION))
                            .cloned()
                    };
                    let existing = self.api.get_metadata_opt(&name).await?;
                    let same = existing
                        .as_ref()
                        .and_then(|m| m.metadata.annotations.as_ref())
                        .and_then(|a| a.get(SHA_ANNOTATION))
                        .cloned()
                        == sha(&cm);
                    if !same {
                        // Immutable: replaced by delete and create.
                        self.delete_name(&name).await?;
                        self.api.create(&PostParams::default(), &cm).await?;
                    }
                }
                Err(e) => return Err(e.into()),
            }
            names.push(name);
        }
        Ok(names)
    }

    async fn delete_name(&self, name: &str) -> Result<(), ArchiveError> {
        match self.api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes the ConfigMaps `names`.
    pub async fn delete(&self, names: &[String]) -> Result<(), ArchiveError> {
        for name in names {
            self.delete_name(name).await?;
        }
        Ok(())
    }
}

/// What the leader keeps archived: the versions the rollout's decisions
/// refer to ([`History::protect`]) and the pins' (resolved or not).
fn wanted(history: &History) -> BTreeSet<(String, String)> {
    let mut out: BTreeSet<(String, String)> = history.referenced().into_iter().collect();
    out.extend(
        history
            .pins()
            .borrow()
            .values()
            .map(|a| (a.record.cluster.clone(), a.record.version.clone())),
    );
    out.extend(
        history
            .unresolved_pins()
            .into_iter()
            .map(|u| (u.record.cluster, u.record.version)),
    );
    out
}

/// While this replica decides (`leader`: the rollout's decider), keeps
/// every version the rollout's decisions and the pins refer to archived,
/// and deletes what nothing referred to for [`GRACE`], until `shutdown`.
/// A version not yet recorded in this replica's history (the recorder
/// runs behind the pipeline) is tried again a few seconds later.
pub async fn keep(
    archive: Archive,
    history: History,
    mut leader: watch::Receiver<LeaderStatus>,
    shutdown: CancellationToken,
) {
    /// How often the leader lists the archive again (chunks deleted or
    /// written by others meanwhile).
    const RELIST: Duration = Duration::from_secs(300);
    metrics::counter!(METRIC_ERRORS).increment(0);
    let mut pins = history.pins();
    let mut referenced = history.referenced_changes();
    // What is archived, as listed (at most RELIST ago) and changed since.
    let mut archived: Option<(Instant, BTreeMap<Key, Listed>)> = None;
    let mut unreferenced_since: HashMap<(String, String), Instant> = HashMap::new();
    let mut warned: BTreeSet<(String, String)> = BTreeSet::new();
    // Versions that can't be archived whatever is tried (too large).
    let mut refused: BTreeSet<(String, String)> = BTreeSet::new();
    // Backed off while something failed or waits (2 s, doubling to 60 s).
    let mut retry: Option<Duration> = None;
    loop {
        let tick = retry.unwrap_or(Duration::from_secs(30));
        tokio::select! {
            changed = referenced.changed() => if changed.is_err() { break },
            changed = pins.changed() => if changed.is_err() { break },
            changed = leader.changed() => if changed.is_err() { break },
            () = tokio::time::sleep(tick) => {}
            () = shutdown.cancelled() => break,
        }
        let mut again = false;
        if !leader.borrow_and_update().is_leader {
            archived = None;
            unreferenced_since.clear();
            retry = None;
            continue;
        }
        referenced.borrow_and_update();
        pins.borrow_and_update();
        let wanted = wanted(&history);
        if archived
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() >= RELIST)
        {
            archived = None;
        }
        let listed = match &mut archived {
            Some((_, a)) => a,
            None => match archive.list().await {
                Ok(a) => &mut archived.insert((Instant::now(), a)).1,
                Err(e) => {
                    metrics::counter!(METRIC_ERRORS).increment(1);
                    warn!(error = %e, namespace = archive.namespace(), "can't list the archived versions; retrying");
                    retry = Some(backoff(retry));
                    continue;
                }
            },
        };
        let absent: Vec<(String, String)> = wanted
            .iter()
            .filter(|k| !refused.contains(*k) && !listed.get(*k).is_some_and(|l| l.complete))
            .cloned()
            .collect();
        for key in &absent {
            let (h, (group, id)) = (history.clone(), key.clone());
            let exported = tokio::task::spawn_blocking(move || h.export(&group, &id))
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            let exported = match exported {
                Ok(e) => e,
                Err(e) => {
                    // Not recorded yet, or never built here (archived by
                    // the leader that decided it, or lost).
                    if warned.insert(key.clone()) {
                        debug!(group = %key.0, version = %key.1, error = %e, "a referenced version is not in this replica's history (yet); it is archived once it is");
                    }
                    again = true;
                    continue;
                }
            };
            // A write cut short: its chunks go first (one of another
            // length would be left over otherwise).
            if let Some(partial) = listed.get(key).filter(|l| !l.complete)
                && let Err(e) = archive.delete(&partial.names).await
            {
                metrics::counter!(METRIC_ERRORS).increment(1);
                warn!(group = %key.0, version = %key.1, error = %e, "can't delete an incomplete archived version; retrying");
                again = true;
                continue;
            }
            match archive.put(&exported).await {
                Ok(names) => {
                    info!(group = %key.0, version = %key.1, chunks = names.len(), "version archived");
                    warned.remove(key);
                    listed.insert(
                        key.clone(),
                        Listed {
                            names,
                            complete: true,
                        },
                    );
                }
                Err(e @ ArchiveError::TooLarge { .. }) => {
                    metrics::counter!(METRIC_ERRORS).increment(1);
                    warn!(group = %key.0, version = %key.1, error = %e, "a referenced version can't be archived; a replica without it fails closed");
                    refused.insert(key.clone());
                }
                Err(e) => {
                    metrics::counter!(METRIC_ERRORS).increment(1);
                    warn!(group = %key.0, version = %key.1, error = %e, "can't archive a referenced version; retrying");
                    again = true;
                }
            }
        }
        refused.retain(|k| wanted.contains(k));
        // Unreferenced for GRACE: deleted.
        let now = Instant::now();
        unreferenced_since.retain(|k, _| !wanted.contains(k));
        let mut gone = Vec::new();
        for (key, l) in listed.iter() {
            if wanted.contains(key) {
                continue;
            }
            let since = *unreferenced_since.entry(key.clone()).or_insert(now);
            // Looked at again at the next tick once its grace ends.
            if now.duration_since(since) >= GRACE {
                gone.push((key.clone(), l.names.clone()));
            }
        }
        for (key, names) in gone {
            match archive.delete(&names).await {
                Ok(()) => {
                    info!(group = %key.0, version = %key.1, "archived version no longer referenced; deleted");
                    listed.remove(&key);
                    unreferenced_since.remove(&key);
                }
                Err(e) => {
                    metrics::counter!(METRIC_ERRORS).increment(1);
                    warn!(group = %key.0, version = %key.1, error = %e, "can't delete an archived version");
                }
            }
        }
        metrics::gauge!(METRIC_ARCHIVED).set(listed.len() as f64);
        retry = again.then(|| backoff(retry));
    }
}

/// The next retry delay after `previous`: 2 s, doubling up to 60 s.
fn backoff(previous: Option<Duration>) -> Duration {
    previous.map_or(Duration::from_secs(2), |d| {
        (d * 2).min(Duration::from_secs(60))
    })
}

#[cfg(test)]
mod tests;

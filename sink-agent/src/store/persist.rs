//! The data directory on disk: collection file names, atomic writes, the
//! directory lock, and loading (with the seal check and the one-time
//! sealing of files written before seals existed). See
//! `docs/sink-agent.md`, "On-disk format".

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use bytes::Bytes;
use meshhub_mcp::snapshot::EncodedResource;
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::Resource;
use meshhub_proto::wire::EncodedResources;
use meshhub_runtime::error_chain;
use prost::Message as _;

use super::seal;
use super::validate::check;

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

/// [`lock_dir`], waiting up to `wait` while another process holds it.
fn lock_dir_waiting(format_dir: &Path, wait: std::time::Duration) -> Result<File, StoreError> {
    meshhub_runtime::held::wait_while_held(
        wait,
        || lock_dir(format_dir),
        |e| matches!(e, StoreError::InUse { .. }),
        |e| tracing::warn!(dir = %format_dir.display(), error = %e, ?wait, "the data directory is held by another agent (the pod this one replaces, still stopping?); waiting for it"),
    )
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

pub(super) type Loaded = Result<(String, String, Vec<EncodedResource>), LoadError>;
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

/// Creates the data directory, takes its lock and loads every accepted
/// collection (sealing, once, the files written before seals existed).
pub(super) fn open_dir(
    format_dir: &Path,
    kinds: &KindTable,
    accepted: &BTreeSet<String>,
    wait: std::time::Duration,
) -> Result<(File, Vec<Loaded>), StoreError> {
    let dir = format_dir.join(COLLECTIONS_DIR);
    std::fs::create_dir_all(&dir).map_err(|source| StoreError::CreateDir {
        path: dir.clone(),
        source,
    })?;
    let lock = lock_dir_waiting(format_dir, wait)?;
    let marker = format_dir.join(SEALED_MARKER);
    let sealed = marker.exists();
    let loaded = load_all(&dir, kinds, accepted, sealed)?;
    if !sealed {
        migrate_to_sealed(&dir, &marker, &loaded);
    }
    let loaded = loaded.into_iter().map(|l| l.map(|(r, _)| r)).collect();
    Ok((lock, loaded))
}

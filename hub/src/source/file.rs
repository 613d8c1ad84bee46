//! The file source: a directory tree of YAML (multi-document) and JSON files
//! holding Kubernetes objects, watched for changes.
//!
//! Watching is deliberately simple and robust rather than clever: any
//! filesystem event under the root starts a short settle period (editors
//! write a temporary file and rename it; `git checkout` touches many files),
//! after which the files the events named are looked at again — or the
//! whole tree is walked again, whenever the events alone can't tell what
//! changed ([`targeted`]). A file is re-read when an event
//! named it, when it is new, or when its size or modification time changed;
//! it is re-parsed and sent only when its content hash changed. Files that
//! disappeared are sent as empty units (their objects are removed). New
//! subdirectories are covered by the recursive watch and by the walk.
//!
//! Files and directories whose name starts with `.` (editor swap files,
//! Kubernetes ConfigMap `..data` internals), ends with `~`, or whose
//! extension is not `yaml`, `yml` or `json` are ignored. Symlinks are
//! followed, so a mounted ConfigMap works.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::FutureExt as _;
use futures::future::BoxFuture;
use meshhub_proto::transcode::{parse_json_limited, parse_yaml_limited};
use notify::{RecursiveMode, Watcher as _};
use rayon::iter::{IntoParallelRefIterator as _, ParallelIterator as _};
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, debug, info, info_span, warn};

use super::{Entry, Origin, Source, SourceError, SourceEvent};

pub mod spec;
mod targeted;

pub use spec::FileSourceSpec;

/// How long the tree must be quiet after an event before it is rescanned.
const SETTLE: Duration = Duration::from_millis(50);
/// Longest a stream of events can delay a rescan.
const SETTLE_MAX: Duration = Duration::from_millis(500);
/// Files read and parsed in parallel before their units are sent.
const READ_BATCH: usize = 16;

/// A watched directory tree.
#[derive(Clone, Debug)]
pub struct FileSource {
    name: Arc<str>,
    root: PathBuf,
    exclude: Vec<PathBuf>,
    max_file_bytes: u64,
    max_object_bytes: u64,
}

/// What is known about one file.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileState {
    len: u64,
    modified: Option<SystemTime>,
    hash: [u8; 32],
}

/// What the last rescan knew of the tree.
#[derive(Clone, Debug, Default)]
struct Known {
    /// The object files, by path relative to the root.
    files: HashMap<PathBuf, FileState>,
    /// Whether the last walk met a symlink (then every rescan walks:
    /// [`targeted`]).
    symlinks: bool,
    /// Whether `files` came from a walk (until one did, every rescan
    /// walks).
    walked: bool,
    /// Every directory holding a known file, and their parents (a path
    /// gone that was one of them took files with it).
    dirs: HashSet<PathBuf>,
}

impl Known {
    /// Records `rel`'s directories.
    fn add_dirs(&mut self, rel: &Path) {
        for dir in rel.ancestors().skip(1) {
            if dir.as_os_str().is_empty() || !self.dirs.insert(dir.to_owned()) {
                break;
            }
        }
    }
}

/// Files never read as objects (the configuration file inside the tree),
/// by canonical path.
///
/// A walk tests every file of the tree, so the test must be cheap:
/// canonicalizing every file took a `readlink` per path component (~4 % of
/// the hub's CPU per change with 1,000 files). A file's canonical path
/// ends in its own name unless the file itself is a symlink, so only files
/// that are symlinks or carry the name of an excluded file are
/// canonicalized.
#[derive(Debug, Default)]
struct Exclude {
    paths: HashSet<PathBuf>,
    names: HashSet<OsString>,
}

impl Exclude {
    /// `paths` as they are now (those that don't exist are dropped).
    fn new(paths: &[PathBuf]) -> Self {
        let paths: HashSet<PathBuf> = paths
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        let names = paths
            .iter()
            .filter_map(|p| p.file_name().map(ToOwned::to_owned))
            .collect();
        Self { paths, names }
    }

    /// Whether the file at `path` (the directory entry `entry`) is
    /// excluded.
    fn excludes(&self, path: &Path, entry: &std::fs::DirEntry) -> bool {
        self.excludes_file(path, entry.file_type().map_or(true, |t| t.is_symlink()))
    }

    /// Whether the file at `path` (a symlink or not) is excluded.
    fn excludes_file(&self, path: &Path, symlink: bool) -> bool {
        if self.paths.is_empty() {
            return false;
        }
        if !symlink && path.file_name().is_none_or(|n| !self.names.contains(n)) {
            return false;
        }
        std::fs::canonicalize(path).is_ok_and(|c| self.paths.contains(&c))
    }
}

/// Which files a rescan must read even if their metadata did not change.
#[derive(Debug, Default)]
struct Force {
    all: bool,
    paths: HashSet<PathBuf>,
}

impl FileSource {
    /// A file source as configured.
    pub fn new(spec: &FileSourceSpec) -> Self {
        Self {
            name: Arc::from(spec.name.as_str()),
            root: spec.root.clone(),
            exclude: spec.exclude.clone(),
            max_file_bytes: spec.max_file_bytes,
            max_object_bytes: spec.max_object_bytes,
        }
    }

    async fn run_inner(
        self,
        events: mpsc::Sender<SourceEvent>,
        shutdown: CancellationToken,
    ) -> Result<(), SourceError> {
        let root = std::fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone());
        let exclude = Arc::new(Exclude::new(&self.exclude));

        // Watch first, so that nothing written during the initial scan is
        // missed.
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut watcher = notify::recommended_watcher(move |res| {
            // The receiver is gone only when the source stops.
            let _ = tx.send(res);
        })
        .map_err(|source| self.watch_error(&root, source))?;
        watcher
            .watch(&root, RecursiveMode::Recursive)
            .map_err(|source| self.watch_error(&root, source))?;

        let send = |ev: SourceEvent| {
            let events = events.clone();
            let shutdown = shutdown.clone();
            let name = self.name.to_string();
            async move {
                match events.send(ev).await {
                    Ok(()) => Ok(()),
                    Err(_) if shutdown.is_cancelled() => Ok(()),
                    Err(_) => Err(SourceError::PipelineGone(name)),
                }
            }
        };

        let mut known = Known::default();
        let force = Force {
            all: true,
            paths: HashSet::new(),
        };
        let gone = || {
            if shutdown.is_cancelled() {
                Ok(())
            } else {
                Err(SourceError::PipelineGone(self.name.to_string()))
            }
        };
        known = match self.rescan(&root, &exclude, known, force, &events).await {
            Some(next) => next,
            None => return gone(),
        };
        info!(files = known.files.len(), "initial scan done");
        send(SourceEvent::Synced {
            source: self.name.clone(),
        })
        .await?;

        loop {
            let mut force = Force::default();
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                ev = rx.recv() => match ev {
                    // Opens and reads (the walk's own among them) wake no
                    // rescan.
                    Some(ev) => if !note(&root, ev, &mut force) { continue },
                    None => return Ok(()),
                },
            }
            // Settle: gather the rest of the burst.
            let deadline = tokio::time::Instant::now() + SETTLE_MAX;
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(SETTLE) => break,
                    _ = tokio::time::sleep_until(deadline) => break,
                    ev = rx.recv() => match ev {
                        Some(ev) => {
                            note(&root, ev, &mut force);
                        }
                        None => return Ok(()),
                    },
                }
            }
            known = match self.rescan(&root, &exclude, known, force, &events).await {
                Some(next) => next,
                None => return gone(),
            };
        }
    }

    fn watch_error(&self, root: &Path, source: notify::Error) -> SourceError {
        SourceError::Watch {
            source_name: self.name.to_string(),
            path: root.display().to_string(),
            source,
        }
    }

    /// Walks the tree off the async threads, sending each changed unit to
    /// the pipeline as soon as it is parsed (so parsing and transcoding
    /// overlap, and at most a queue's worth of parsed files is alive at
    /// once); returns the new file states, or `None` if the pipeline is gone.
    async fn rescan(
        &self,
        root: &Path,
        exclude: &Arc<Exclude>,
        known: Known,
        force: Force,
        events: &mpsc::Sender<SourceEvent>,
    ) -> Option<Known> {
        let name = self.name.clone();
        let root = root.to_owned();
        let exclude = exclude.clone();
        let tx = events.clone();
        let limits = Limits {
            file_bytes: self.max_file_bytes,
            object_bytes: self.max_object_bytes,
        };
        let scanned = tokio::task::spawn_blocking(move || {
            let mut known = known;
            // A panic (a defect reading some file) keeps what is known,
            // as far as it got: files gone since are still found gone by
            // the next walk, which it asks for.
            let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                scan(
                    &name,
                    &root,
                    &exclude,
                    limits,
                    &mut known,
                    &force,
                    &mut |ev| tx.blocking_send(ev).is_ok(),
                )
            }));
            match done {
                Ok(true) => Some(known),
                Ok(false) => None,
                Err(_) => {
                    warn!("rescan failed; the next one walks the whole tree");
                    known.walked = false;
                    Some(known)
                }
            }
        })
        .await;
        // Only a runtime shutting down cancels the task.
        scanned.unwrap_or_default()
    }
}

impl Source for FileSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(
        self: Box<Self>,
        events: mpsc::Sender<SourceEvent>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), SourceError>> {
        let span =
            info_span!("source", source.name = %self.name, source.root = %self.root.display());
        (*self).run_inner(events, shutdown).instrument(span).boxed()
    }
}

/// Whether a watcher event can mean new content. notify's inotify
/// backend also reports every open (`IN_OPEN`): the rescan's own reads of
/// the files it re-reads would wake it again, a loop that re-read and
/// re-hashed the changed files forever (found by issue 29's bench: 0.3
/// cores of an idle hub with 1,000 files). Opens and reads change nothing;
/// a close after writing (`IN_CLOSE_WRITE`) does.
fn may_change(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Records a watcher event: the paths it names must be re-read. Returns
/// whether it may be a change (opens and reads are not).
fn note(root: &Path, ev: notify::Result<notify::Event>, force: &mut Force) -> bool {
    match ev {
        Ok(ev) if !may_change(&ev.kind) && !ev.need_rescan() => return false,
        Ok(ev) => {
            if ev.need_rescan() {
                force.all = true;
            }
            for p in ev.paths {
                match p.strip_prefix(root) {
                    Ok(rel) => {
                        force.paths.insert(rel.to_owned());
                    }
                    Err(_) => force.all = true,
                }
            }
        }
        Err(e) => {
            // Lost events (e.g. an overflowing inotify queue): read it all.
            warn!(error = %e, "watch error; rescanning the whole tree");
            force.all = true;
        }
    }
    true
}

/// Size limits of a file source.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// `maxFileSize`.
    file_bytes: u64,
    /// `maxObjectSize`.
    object_bytes: u64,
}

/// Walks the tree, emitting every unit that changed; returns the new file
/// states, or `None` as soon as `emit` says the receiver is gone.
fn scan(
    source: &Arc<str>,
    root: &Path,
    exclude: &Exclude,
    limits: Limits,
    known: &mut Known,
    force: &Force,
    emit: &mut dyn FnMut(SourceEvent) -> bool,
) -> bool {
    let (found, mut gone) = match targeted::look(root, exclude, known, force) {
        targeted::Look::Files { present, missing } => (present, missing),
        targeted::Look::Tree => {
            let mut walked = Walked::default();
            walk(root, root, exclude, &mut Vec::new(), &mut walked);
            known.symlinks = walked.symlinks;
            known.walked = true;
            known.dirs.clear();
            for (rel, _) in &walked.files {
                known.add_dirs(rel);
            }
            let seen: HashSet<&PathBuf> = walked.files.iter().map(|(rel, _)| rel).collect();
            let gone = known
                .files
                .keys()
                .filter(|k| !seen.contains(k))
                .cloned()
                .collect();
            (walked.files, gone)
        }
    };
    let mut to_read = Vec::new();
    for (rel, meta) in found {
        let modified = meta.modified().ok();
        let prev = known.files.get(&rel).map(|p| (p.len, p.modified, p.hash));
        let must_read = force.all
            || force.paths.contains(&rel)
            || prev.is_none_or(|(len, m, _)| len != meta.len() || m != modified);
        if must_read {
            to_read.push((rel, meta.len(), modified, prev.map(|(_, _, h)| h)));
        }
    }
    // Files are read and parsed on the rayon pool, a batch at a time, and
    // emitted in walk order; a batch bounds how many parsed files are alive
    // beyond the pipeline's queue.
    for batch in to_read.chunks(READ_BATCH) {
        let read: Vec<Read> = batch
            .par_iter()
            .map(|(rel, len, _, prev)| read_file(source, root, rel, *len, *prev, limits))
            .collect();
        for ((rel, len, modified, _), read) in batch.iter().zip(read) {
            let hash = match &read {
                Read::Gone => {
                    // Gone between the walk and the read: the next event says so.
                    if known.files.contains_key(rel) {
                        gone.push(rel.clone());
                    }
                    continue;
                }
                Read::Unchanged(hash) | Read::Changed(hash, _, _) => *hash,
            };
            known.add_dirs(rel);
            known.files.insert(
                rel.clone(),
                FileState {
                    len: *len,
                    modified: *modified,
                    hash,
                },
            );
            let Read::Changed(_, unit, entries) = read else {
                continue;
            };
            debug!(file = %unit, entries = entries.len(), "file changed");
            if !emit(SourceEvent::Unit {
                source: source.clone(),
                unit,
                entries,
            }) {
                return false;
            }
        }
    }
    for rel in gone {
        if known.files.remove(&rel).is_none() {
            continue;
        }
        debug!(file = %rel.display(), "file removed");
        if !emit(SourceEvent::Unit {
            source: source.clone(),
            unit: Arc::from(unit_name(&rel).as_str()),
            entries: Vec::new(),
        }) {
            return false;
        }
    }
    true
}

/// What reading one file found.
enum Read {
    /// It disappeared after the walk.
    Gone,
    /// Same content hash as before: nothing to send.
    Unchanged([u8; 32]),
    /// New content (or unreadable: hash zero and an error entry), with
    /// the file's unit name.
    Changed([u8; 32], Arc<str>, Vec<Entry>),
}

/// Reads, hashes and (if its content changed) parses one file.
fn read_file(
    source: &Arc<str>,
    root: &Path,
    rel: &Path,
    len: u64,
    prev: Option<[u8; 32]>,
    limits: Limits,
) -> Read {
    // Bounded: a huge file is reported, not read.
    let read = if len > limits.file_bytes {
        Err(std::io::Error::other(format!(
            "{len} bytes exceed maxFileSize ({} bytes); not read",
            limits.file_bytes
        )))
    } else {
        std::fs::read(root.join(rel))
    };
    let unit = || Arc::<str>::from(unit_name(rel).as_str());
    match read {
        Ok(bytes) => {
            let hash: [u8; 32] = Sha256::digest(&bytes).into();
            if prev == Some(hash) {
                return Read::Unchanged(hash);
            }
            let max_object = usize::try_from(limits.object_bytes).unwrap_or(usize::MAX);
            let unit = unit();
            let entries = parse_file(source, &unit, rel, &bytes, max_object);
            Read::Changed(hash, unit, entries)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Read::Gone,
        Err(e) => {
            let unit = unit();
            let entries = vec![unit_error(source, &unit, format!("can't read: {e}"))];
            Read::Changed([0; 32], unit, entries)
        }
    }
}

/// What a walk found.
#[derive(Debug, Default)]
struct Walked {
    /// The object files, relative to the root, with their metadata.
    files: Vec<(PathBuf, std::fs::Metadata)>,
    /// Whether any entry was a symlink.
    symlinks: bool,
}

/// Collects the object files below `dir` with their metadata.
/// `ancestors` holds the (device, inode) of every directory being walked
/// above: a symlink back to one of them (a loop) is not followed, or the
/// walk would never end.
fn walk(
    root: &Path,
    dir: &Path,
    exclude: &Exclude,
    ancestors: &mut Vec<(u64, u64)>,
    out: &mut Walked,
) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(here) = std::fs::metadata(dir) else {
        return;
    };
    let id = (here.dev(), here.ino());
    if ancestors.contains(&id) {
        warn!(dir = %dir.display(), "symlink loop: a directory links to one above it; not followed");
        metrics::counter!("meshhub_file_source_symlink_loops_total").increment(1);
        return;
    }
    ancestors.push(id);
    walk_entries(root, dir, exclude, ancestors, out);
    ancestors.pop();
}

fn walk_entries(
    root: &Path,
    dir: &Path,
    exclude: &Exclude,
    ancestors: &mut Vec<(u64, u64)>,
    out: &mut Walked,
) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            if dir == root {
                warn!(error = %e, "can't read the source directory");
            } else {
                debug!(dir = %dir.display(), error = %e, "can't read directory");
            }
            return;
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name.ends_with('~') {
            continue;
        }
        if entry.file_type().map_or(true, |t| t.is_symlink()) {
            out.symlinks = true;
        }
        // Follows symlinks (ConfigMap mounts).
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            walk(root, &path, exclude, ancestors, out);
            continue;
        }
        if !meta.is_file() || !targeted::object_file(&path) {
            continue;
        }
        if exclude.excludes(&path, &entry) {
            continue;
        }
        if let Ok(rel) = path.strip_prefix(root) {
            out.files.push((rel.to_owned(), meta));
        }
    }
}

/// The unit name of a file: its path relative to the root, `/`-separated.
fn unit_name(rel: &Path) -> String {
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

fn unit_error(source: &Arc<str>, unit: &Arc<str>, message: String) -> Entry {
    Entry {
        origin: Origin {
            source: source.clone(),
            unit: unit.clone(),
            document: 0,
            line: None,
        },
        parsed: Err(message),
        changed_by: None,
    }
}

/// Parses one file's bytes into entries; a document longer than
/// `max_object_bytes` is an error entry and is not parsed.
///
/// Objects from files carry no Kubernetes `resourceVersion` (one copied in
/// from `kubectl get -o yaml` would freeze the MCP version while the content
/// changes), so it is cleared and the content version is used.
pub fn parse_file(
    source: &Arc<str>,
    unit: &Arc<str>,
    rel: &Path,
    bytes: &[u8],
    max_object_bytes: usize,
) -> Vec<Entry> {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => return vec![unit_error(source, unit, format!("not UTF-8 text: {e}"))],
    };
    let is_json = rel.extension().is_some_and(|e| e == "json");
    let results = if is_json {
        parse_json_limited(text, max_object_bytes)
    } else {
        parse_yaml_limited(text, max_object_bytes)
    };
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| match r {
            Ok(mut obj) => {
                obj.metadata.resource_version = None;
                Entry {
                    // The parser numbers documents only in errors; an object's
                    // position is its place among the file's objects.
                    origin: Origin {
                        source: source.clone(),
                        unit: unit.clone(),
                        document: i + 1,
                        line: None,
                    },
                    parsed: Ok(obj),
                    changed_by: None,
                }
            }
            Err(e) => Entry {
                origin: Origin {
                    source: source.clone(),
                    unit: unit.clone(),
                    document: e.document,
                    line: e.line.or(Some(e.start_line)),
                },
                parsed: Err(e.message),
                changed_by: None,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests;

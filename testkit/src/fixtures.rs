//! Files the tests read: the Istio fixtures (`../shared/fixtures/istio`
//! beside the repository) and the fuzz corpora (`fuzz/corpus/<target>/`),
//! proptest strategies that mutate a corpus, and writing a file the way
//! editors do.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

/// The repository's root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ has a parent")
        .to_owned()
}

/// The Istio fixtures: `../shared/fixtures/istio` relative to the
/// repository (bookinfo, per-kind valid and invalid sets, every CRD).
pub fn istio() -> PathBuf {
    workspace().join("../shared/fixtures/istio")
}

/// The `.yaml` files directly in `dir` whose name `keep` accepts, sorted.
pub fn yaml_files(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("directory entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.ends_with(".yaml") && keep(name)
        })
        .collect();
    files.sort();
    files
}

/// The fixtures every kind's valid objects are in: all of `bookinfo/` and
/// the `*-valid.yaml` files of `validation/`, sorted.
pub fn valid_objects() -> Vec<PathBuf> {
    let mut files = yaml_files(&istio().join("bookinfo"), |_| true);
    files.extend(yaml_files(&istio().join("validation"), |n| {
        n.ends_with("-valid.yaml")
    }));
    files
}

/// The seed corpus of fuzz target `target`: `(path, bytes)` of every file
/// of `fuzz/corpus/<target>/`, sorted by name.
pub fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = workspace().join("fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, bytes)
        })
        .collect()
}

/// The bytes of every seed of `target`, sorted by file name.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    corpus(target).into_iter().map(|(_, b)| b).collect()
}

/// A seed of `target` with up to 8 bytes overwritten and a random tail of
/// fewer than `tail` bytes: inputs near what the parser accepts, where
/// the bugs are.
pub fn mutated(target: &str, tail: usize) -> impl Strategy<Value = Vec<u8>> + use<> {
    let seeds = seeds(target);
    assert!(!seeds.is_empty(), "{target}: empty corpus");
    (
        0..seeds.len(),
        prop::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        prop::collection::vec(any::<u8>(), 0..tail.max(1)),
    )
        .prop_map(move |(i, flips, tail)| {
            let mut s = seeds[i].clone();
            for (at, b) in flips {
                if s.is_empty() {
                    s.push(b);
                } else {
                    let at = at % s.len();
                    s[at] = b;
                }
            }
            s.extend(tail);
            s
        })
}

/// Writes `text` to `path` atomically (a temporary file renamed over it),
/// as editors and ConfigMap updates do: a watcher never reads half a file.
pub fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp~");
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("{}: {e}", tmp.display()));
    std::fs::rename(&tmp, path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

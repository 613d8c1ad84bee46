//! Hostile input for the agent's configuration parser and on-disk format:
//! every seed of `fuzz/corpus/agent_config` and `fuzz/corpus/agent_store`,
//! then bounded random inputs and mutations (proptest). Each must give a
//! value or an error naming the problem, never a panic.

use std::path::{Path, PathBuf};

use meshhub_proto::kinds::KindTable;
use meshhub_sink_agent::config::{Args, Config};
use meshhub_sink_agent::store::load_one;
use proptest::prelude::*;

const VS: &str = "istio/networking/v1alpha3/virtualservices";

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = Config::from_parts(Args::default(), Some((Path::new("agent.yaml"), &text)));
}

fn store(data: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("file");
    std::fs::write(&path, data).unwrap();
    let _ = load_one(&path, VS, &KindTable::builtin());
}

fn mutated(target: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let seeds = seeds(target);
    (
        0..seeds.len(),
        prop::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        prop::collection::vec(any::<u8>(), 0..32),
    )
        .prop_map(move |(i, flips, tail)| {
            let mut s = seeds[i].clone();
            for (at, b) in flips {
                if let Some(len) = std::num::NonZeroUsize::new(s.len()) {
                    s[at % len] = b;
                }
            }
            s.extend(tail);
            s
        })
}

#[test]
fn seeds_load() {
    for s in seeds("agent_config") {
        config(&s);
    }
    // The on-disk seed is a valid collection file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("file");
    for s in seeds("agent_store") {
        std::fs::write(&path, &s).unwrap();
        let (collection, _, resources) = load_one(&path, VS, &KindTable::builtin()).unwrap();
        assert_eq!(collection, VS);
        assert_eq!(resources.len(), 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(data in prop::collection::vec(any::<u8>(), 0..1024)) {
        config(&data);
        store(&data);
    }

    #[test]
    fn mutated_configs(data in mutated("agent_config")) { config(&data) }

    #[test]
    fn mutated_store_files(data in mutated("agent_store")) { store(&data) }
}

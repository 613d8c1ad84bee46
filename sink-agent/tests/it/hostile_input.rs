//! Hostile input for the agent's configuration parser and on-disk format:
//! every seed of `fuzz/corpus/agent_config` and `fuzz/corpus/agent_store`,
//! then bounded random inputs and mutations (proptest). Each must give a
//! value or an error naming the problem, never a panic.

use std::path::Path;

use meshhub_proto::kinds::KindTable;
use meshhub_sink_agent::config::{Args, Config};
use meshhub_sink_agent::store::load_one;
use meshhub_testkit::fixtures::{mutated, seeds};
use meshhub_testkit::objects::VS;
use proptest::prelude::*;

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
    fn mutated_configs(data in mutated("agent_config", 32)) { config(&data) }

    #[test]
    fn mutated_store_files(data in mutated("agent_store", 32)) { store(&data) }
}

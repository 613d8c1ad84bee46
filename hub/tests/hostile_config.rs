//! Hostile input for the hub's configuration parser: every seed of
//! `fuzz/corpus/hub_config`, then bounded random inputs and mutations
//! (proptest). Each gives a configuration or an error, never a panic.

use std::path::PathBuf;

use clap::Parser as _;
use meshhub::config::{Args, Config};
use proptest::prelude::*;

fn seeds() -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/hub_config");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn parse(data: &[u8]) {
    let args = Args::parse_from(["meshhub"]);
    // The corpus directory as the file's directory: relative paths resolve.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/hub_config/x.yaml");
    let _ = Config::from_yaml(&args, &path, &String::from_utf8_lossy(data));
}

#[test]
fn seeds_parse() {
    for s in seeds() {
        parse(&s);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn random_text(data in prop::collection::vec(any::<u8>(), 0..1024)) { parse(&data) }

    #[test]
    fn mutated_configs(
        i in 0..2usize,
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..8),
    ) {
        let seeds = seeds();
        let mut s = seeds[i % seeds.len()].clone();
        for (at, b) in flips {
            let len = s.len();
            s[at % len] = b;
        }
        parse(&s);
    }
}

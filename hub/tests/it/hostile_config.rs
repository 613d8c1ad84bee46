//! Hostile input for the hub's configuration parser: every seed of
//! `fuzz/corpus/hub_config`, then bounded random inputs and mutations
//! (proptest). Each gives a configuration or an error, never a panic.

use clap::Parser as _;
use meshhub::config::{Args, Config};
use meshhub_testkit::fixtures;
use proptest::prelude::*;

fn parse(data: &[u8]) {
    let args = Args::parse_from(["meshhub"]);
    // The corpus directory as the file's directory: relative paths resolve.
    let path = fixtures::workspace().join("fuzz/corpus/hub_config/x.yaml");
    let _ = Config::from_yaml(&args, &path, &String::from_utf8_lossy(data));
}

#[test]
fn seeds_parse() {
    for s in fixtures::seeds("hub_config") {
        parse(&s);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn random_text(data in prop::collection::vec(any::<u8>(), 0..1024)) { parse(&data) }

    #[test]
    fn mutated_configs(data in fixtures::mutated("hub_config", 0)) { parse(&data) }
}

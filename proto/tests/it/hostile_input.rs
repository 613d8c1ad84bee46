//! Hostile input for every decoder of bytes from the network and the
//! YAML/JSON object parser: each target must return (a value or an error),
//! never panic, hang or allocate without bound.
//!
//! Each target is run on every file of its seed corpus in
//! `fuzz/corpus/<target>/` (kept in the repository; a crash found later
//! goes there as a regression), then on bounded random inputs and random
//! mutations of the seeds (proptest, 64 cases each, seconds in
//! CI).

use std::time::{Duration, Instant};

use meshhub_proto::ads::{DeltaDiscoveryRequest, DiscoveryRequest};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::{RequestResources, Resources};
use meshhub_proto::transcode;
use meshhub_testkit::fixtures::{self, mutated};
use proptest::prelude::*;
use prost::Message as _;

/// One fuzz target: bytes in, no panic.
type Target = fn(&[u8]);

fn mcp_request(data: &[u8]) {
    let _ = RequestResources::decode(data);
}

fn mcp_resources(data: &[u8]) {
    let _ = Resources::decode(data);
}

fn ads_request(data: &[u8]) {
    let _ = DiscoveryRequest::decode(data);
}

fn delta_request(data: &[u8]) {
    let _ = DeltaDiscoveryRequest::decode(data);
}

fn resource_body(data: &[u8]) {
    // Every kind's body decoder (the agent decodes what the hub pushes).
    let kinds = KindTable::builtin();
    for kind in kinds.iter() {
        let _ = transcode::decode_resource(kind, data);
    }
}

fn yaml(data: &[u8]) {
    let _ = transcode::parse_yaml(&String::from_utf8_lossy(data));
}

fn json(data: &[u8]) {
    let _ = transcode::parse_json(&String::from_utf8_lossy(data));
}

const TARGETS: &[(&str, Target)] = &[
    ("mcp_request", mcp_request),
    ("mcp_resources", mcp_resources),
    ("ads_request", ads_request),
    ("delta_request", delta_request),
    ("resource_body", resource_body),
    ("yaml", yaml),
    ("json", json),
];

/// A guard against hangs, not a speed target: the slowest seed (the YAML
/// alias bomb, refused by the parser's budget) takes ~3 s in a debug build
/// on an idle machine and ~8 s on a loaded one.
const HANG_GUARD: Duration = Duration::from_secs(120);

#[test]
fn every_seed_of_every_corpus_is_handled_without_hanging() {
    for (name, target) in TARGETS {
        let seeds = fixtures::corpus(name);
        assert!(!seeds.is_empty(), "{name}: empty corpus");
        for (path, bytes) in seeds {
            let started = Instant::now();
            target(&bytes);
            let took = started.elapsed();
            eprintln!("{}: {took:?}", path.display());
            assert!(took < HANG_GUARD, "{} took {took:?}", path.display());
        }
    }
}

#[test]
fn hostile_yaml_is_refused_with_a_clear_error() {
    let bomb = std::fs::read(fixtures::workspace().join("fuzz/corpus/yaml/alias-bomb")).unwrap();
    let started = Instant::now();
    let out = transcode::parse_yaml(&String::from_utf8_lossy(&bomb));
    assert!(started.elapsed() < HANG_GUARD);
    assert_eq!(out.len(), 1);
    let e = out[0].as_ref().expect_err("10^10 aliases are refused");
    assert!(!e.message.is_empty(), "{e}");

    let deep = format!(
        "apiVersion: v1\nkind: X\nmetadata: {{name: d}}\nspec: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let out = transcode::parse_yaml(&deep);
    let e = out[0].as_ref().expect_err("deep nesting is refused");
    assert!(!e.message.is_empty(), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_crash_a_decoder(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        for (_, target) in TARGETS {
            target(&data);
        }
    }

    #[test]
    fn mutated_mcp_requests(data in mutated("mcp_request", 64)) { mcp_request(&data) }

    #[test]
    fn mutated_mcp_resources(data in mutated("mcp_resources", 64)) { mcp_resources(&data) }

    #[test]
    fn mutated_ads_requests(data in mutated("ads_request", 64)) { ads_request(&data) }

    #[test]
    fn mutated_delta_requests(data in mutated("delta_request", 64)) { delta_request(&data) }

    #[test]
    fn mutated_resource_bodies(data in mutated("resource_body", 64)) { resource_body(&data) }

    #[test]
    fn mutated_json(data in mutated("json", 64)) { json(&data) }
}

proptest! {
    // The alias-bomb seed takes ~0.1 s to refuse in a debug build.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn mutated_yaml(data in mutated("yaml", 64)) { yaml(&data) }
}

//! The validator never panics on hostile input: the seeds of the libFuzzer
//! target `fuzz/fuzz_targets/validate.rs` (`fuzz/corpus/validate`, where a
//! crashing input found by a fuzzing run is added as a regression), fed the
//! same way, then random mutations of them.

use std::path::PathBuf;

use meshhub_proto::kinds::KindTable;
use meshhub_proto::object::{Object, ObjectMeta};
use meshhub_proto::transcode;
use meshhub_testkit::fixtures;
use proptest::prelude::*;
use serde_json::{Map, Value};

fn seeds() -> Vec<(PathBuf, Vec<u8>)> {
    fixtures::corpus("validate")
}

/// What the fuzz target does with one input; how many objects were
/// validated.
fn feed(data: &[u8]) -> usize {
    let mut checked = 0;
    let text = String::from_utf8_lossy(data);
    for obj in transcode::parse_yaml(&text).into_iter().flatten() {
        let _ = meshhub_validate::validate(&obj);
        checked += 1;
    }
    let Ok(spec) = serde_saphyr::from_str::<Value>(&text) else {
        return checked;
    };
    let dry_run = text.lines().next().unwrap_or_default().to_owned();
    let kinds = KindTable::builtin();
    let checked_kinds = kinds
        .iter()
        .filter(|k| meshhub_validate::is_checked_kind(k.group(), k.kind()));
    for k in checked_kinds {
        let mut content = Map::new();
        content.insert("spec".to_owned(), spec.clone());
        let obj = Object {
            api_version: k.api_version(),
            kind: k.kind().to_owned(),
            metadata: ObjectMeta {
                name: "fuzz".to_owned(),
                namespace: Some("fuzz".to_owned()),
                annotations: [("istio.io/dry-run".to_owned(), dry_run.clone())].into(),
                ..ObjectMeta::default()
            },
            content,
        };
        let _ = meshhub_validate::validate(&obj);
        checked += 1;
    }
    checked
}

#[test]
fn seeds_are_validated_as_every_kind() {
    let seeds = seeds();
    assert!(seeds.len() >= 2, "{seeds:?}");
    for (path, bytes) in &seeds {
        // One document or one spec, under each of the 15 checked kinds.
        assert!(feed(bytes) >= 15, "{}", path.display());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn mutated_seeds_never_panic(
        pick in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let seeds = seeds();
        let mut bytes = seeds[pick.index(seeds.len())].1.clone();
        for (at, b) in flips {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        feed(&bytes);
    }
}

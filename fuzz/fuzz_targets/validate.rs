//! The semantic validator (`meshhub_validate::validate`): the input as
//! whole documents, and as the spec of every kind the validator checks
//! (read as YAML, of which JSON is a subset). It must never panic.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use meshhub_proto::kinds::KindTable;
use meshhub_proto::object::{Object, ObjectMeta};
use meshhub_proto::transcode;
use serde_json::{Map, Value};

/// `(apiVersion, kind)` of every kind with semantic rules.
static CHECKED: LazyLock<Vec<(String, String)>> = LazyLock::new(|| {
    KindTable::builtin()
        .iter()
        .filter(|k| meshhub_validate::is_checked_kind(k.group(), k.kind()))
        .map(|k| (k.api_version(), k.kind().to_owned()))
        .collect()
});

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for obj in transcode::parse_yaml(&text).into_iter().flatten() {
        let _ = meshhub_validate::validate(&obj);
    }
    let Ok(spec) = serde_saphyr::from_str::<Value>(&text) else {
        return;
    };
    // The first line doubles as the dry-run annotation, whose rules read
    // the spec too.
    let dry_run = text.lines().next().unwrap_or_default().to_owned();
    for (api_version, kind) in CHECKED.iter() {
        let mut content = Map::new();
        content.insert("spec".to_owned(), spec.clone());
        let obj = Object {
            api_version: api_version.clone(),
            kind: kind.clone(),
            metadata: ObjectMeta {
                name: "fuzz".to_owned(),
                namespace: Some("fuzz".to_owned()),
                annotations: [("istio.io/dry-run".to_owned(), dry_run.clone())].into(),
                ..ObjectMeta::default()
            },
            content,
        };
        let _ = meshhub_validate::validate(&obj);
    }
});

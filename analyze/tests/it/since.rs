//! The since table (`src/since.tsv`) against the facts: the CRDs of every
//! `istio.io/api` release from 1.22 to 1.32, read at test time from the Go
//! module cache (`e2e/peers/istio-api.sh VERSION` downloads a release when
//! missing and prints its directory; nothing is copied into the
//! repository). The table is derived here with the rules it is written by
//! and must equal the shipped one, so it cannot drift. Its value rows
//! (`path in …`) are no CRD's: of them this test checks that the field is
//! there in the row's release (the differential test's Istio lines check
//! the values, e2e/tests/it/validation_parity.rs).
//!
//! Only a machine without Go skips the test, saying so; with `CI` set a
//! missing Go fails it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use meshhub_analyze::since::{OLDEST_MINOR, Row, TABLE_TEXT, What, parse_table};
use serde_json::Value;

/// The first release of each minor the module proxy serves (1.30.0 is
/// not served; 1.30.1 is).
const RELEASES: &[(u32, &str)] = &[
    (22, "v1.22.0"),
    (23, "v1.23.0"),
    (24, "v1.24.0"),
    (25, "v1.25.0"),
    (26, "v1.26.0"),
    (27, "v1.27.0"),
    (28, "v1.28.0"),
    (29, "v1.29.0"),
    (30, "v1.30.1"),
    (31, "v1.31.0"),
    (32, "v1.32.0"),
];

/// The module directory of `version`; `None` where Go is missing.
fn module(version: &str) -> Option<PathBuf> {
    let go = Command::new("go").arg("version").output();
    if !go.is_ok_and(|o| o.status.success()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but there is no Go toolchain to read istio.io/api with"
        );
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../e2e/peers/istio-api.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(version)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("can't run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} {version} failed ({})",
        script.display(),
        out.status
    );
    Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Every field path (`spec.a.b`, `*` for a map's values) and enum value
/// (`spec.a=V`) of every served version's `spec`, by kind.
fn paths(dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let path = dir.join("kubernetes/customresourcedefinitions.gen.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for crd in docs.iter().filter(|d| !d.is_null()) {
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap().to_owned();
        let set = out.entry(kind).or_default();
        for v in crd["spec"]["versions"].as_array().into_iter().flatten() {
            if v["served"] == Value::Bool(false) {
                continue;
            }
            let spec = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
            if spec.is_object() {
                walk(spec, "spec", set);
            }
        }
    }
    out
}

fn walk(s: &Value, path: &str, out: &mut BTreeSet<String>) {
    for e in s["enum"].as_array().into_iter().flatten() {
        if let Some(e) = e.as_str() {
            out.insert(format!("{path}={e}"));
        }
    }
    for (k, v) in s["properties"].as_object().into_iter().flatten() {
        let p = format!("{path}.{k}");
        out.insert(p.clone());
        walk(v, &p, out);
    }
    if s["items"].is_object() {
        walk(&s["items"], path, out);
    }
    if s["additionalProperties"].is_object() {
        walk(&s["additionalProperties"], &format!("{path}.*"), out);
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        for sub in s[key].as_array().into_iter().flatten() {
            walk(sub, path, out);
        }
    }
}

/// The path or field a row's thing hangs from (`spec.a.b` of `spec.a.b.c`
/// and of `spec.a.b=V`); `None` at the top.
fn parent(p: &str) -> Option<&str> {
    if let Some((field, _)) = p.split_once('=') {
        return Some(field);
    }
    p.rsplit_once('.').map(|(head, _)| head)
}

/// The table derived from the releases' CRDs: what appeared after the
/// oldest release, without what its parent (or its kind) implies.
fn derive(by_release: &[(u32, BTreeMap<String, BTreeSet<String>>)]) -> Vec<Row> {
    let mut kind_first: BTreeMap<&str, u32> = BTreeMap::new();
    let mut first: BTreeMap<(&str, &str), u32> = BTreeMap::new();
    for (minor, kinds) in by_release {
        for (kind, paths) in kinds {
            kind_first.entry(kind).or_insert(*minor);
            for p in paths {
                first.entry((kind, p)).or_insert(*minor);
            }
        }
    }
    let mut rows = Vec::new();
    for (kind, since) in &kind_first {
        if *since > OLDEST_MINOR {
            rows.push(row(*since, kind, ""));
        }
    }
    for ((kind, p), since) in &first {
        if *since <= OLDEST_MINOR || kind_first[kind] >= *since {
            continue;
        }
        let mut up = parent(p);
        let implied = loop {
            match up {
                Some(q) if q != "spec" => {
                    // Implied only by a parent new in the same release: a
                    // field added later than its (new) parent is a row of
                    // its own (`retryBudget` 1.27, its `budgetInterval`
                    // 1.31).
                    if let Some(m) = first.get(&(*kind, q)).filter(|m| **m > OLDEST_MINOR) {
                        break m == since;
                    }
                    up = parent(q);
                }
                _ => break false,
            }
        };
        if !implied {
            rows.push(row(*since, kind, p));
        }
    }
    rows
}

fn row(since: u32, kind: &str, what: &str) -> Row {
    let (path, what) = match what.split_once('=') {
        Some((p, v)) => (p.to_owned(), What::Enum(v.to_owned())),
        None => (what.to_owned(), What::Field),
    };
    Row {
        since,
        kind: kind.to_owned(),
        path,
        what,
    }
}

#[test]
fn the_since_table_is_what_the_releases_crds_say() {
    let mut by_release = Vec::new();
    for (minor, version) in RELEASES {
        let Some(dir) = module(version) else {
            eprintln!("skipped: no Go toolchain to read istio.io/api {version} with");
            return;
        };
        by_release.push((*minor, paths(&dir)));
    }
    let derived: BTreeSet<String> = derive(&by_release).iter().map(Row::to_string).collect();
    let table = parse_table(TABLE_TEXT).unwrap();
    let shipped: BTreeSet<String> = table
        .iter()
        .filter(|r| r.in_crds())
        .map(Row::to_string)
        .collect();
    let missing: Vec<&String> = derived.difference(&shipped).collect();
    let extra: Vec<&String> = shipped.difference(&derived).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "since.tsv differs from istio.io/api's CRDs:\nmissing from the table:\n{}\nnot in the CRDs:\n{}",
        missing
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        extra
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    );
    // A value row's field is there in its release (a typo in its path
    // would match nothing and flag nothing).
    let fieldless: Vec<String> = table
        .iter()
        .filter(|r| !r.in_crds())
        .filter(|r| {
            let release = by_release.iter().find(|(m, _)| *m == r.since);
            !release
                .is_some_and(|(_, kinds)| kinds.get(&r.kind).is_some_and(|p| p.contains(&r.path)))
        })
        .map(Row::to_string)
        .collect();
    assert!(
        fieldless.is_empty(),
        "value rows whose field their release's CRDs lack:\n{}",
        fieldless.join("\n")
    );
    eprintln!(
        "since table: {} rows ({} value rows), checked against {} releases",
        table.len(),
        table.len() - shipped.len(),
        RELEASES.len()
    );
}

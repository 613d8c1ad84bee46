//! The size-limit table (`src/limits.tsv`) against the facts: the CRDs of
//! the newest `istio.io/api` release meshhub speaks, read at test time from
//! the Go module cache (`MESHHUB_ISTIO_API_DIR`, or downloaded by
//! `e2e/peers/istio-api.sh`; nothing is copied into the repository). Every
//! `maxItems`/`maxLength`/`maxProperties`/`minItems`/`minLength`/
//! `minProperties` of every served version's `spec` must be a row, and
//! every row such a limit, so the table cannot drift.
//!
//! With `MESHHUB_ISTIO_MODULE_DIR` naming Istio 1.28.3's module (the
//! differential test's older line), its CRDs (`crd-all.gen.yaml`) must not
//! bound a field the table bounds differently: meshhub's one verdict is
//! the newest's, so a difference there would be a disagreement on that
//! line, to be decided and documented before the table changes.
//!
//! Without Go (and outside CI) the test skips, saying so.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use meshhub_testkit::istio_api::{self, Module};
use meshhub_validate::limits::{Limit, Row, TABLE_TEXT, crd_rows, parse_table};
use serde_json::Value;

/// The limits of every CRD in the multi-document YAML file at `path`.
fn limits(path: &Path) -> BTreeSet<Row> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = BTreeSet::new();
    let mut crds = 0;
    for doc in docs.iter().filter(|d| !d.is_null()) {
        if let Some(rows) = crd_rows(doc) {
            crds += 1;
            out.extend(rows);
        }
    }
    assert!(crds >= 14, "{} holds {crds} CRDs", path.display());
    out
}

fn lines(rows: &[&Row]) -> String {
    rows.iter()
        .map(|r| format!("  {r}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_limits_table_is_what_the_newest_istio_api_crds_say() {
    let dir = match istio_api::module() {
        Module::Found(dir) => dir,
        Module::NoGo => {
            eprintln!(
                "skipped: no Go toolchain to download istio.io/api@{} with (install Go, or set {})",
                istio_api::VERSION,
                istio_api::DIR_VAR
            );
            return;
        }
    };
    let derived = limits(&istio_api::crds(&dir));
    let shipped: BTreeSet<Row> = parse_table(TABLE_TEXT).unwrap().into_iter().collect();
    let missing: Vec<&Row> = derived.difference(&shipped).collect();
    let extra: Vec<&Row> = shipped.difference(&derived).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "limits.tsv differs from the CRDs of istio.io/api@{} ({}):\nmissing from the table:\n{}\nnot in the CRDs:\n{}",
        istio_api::VERSION,
        dir.display(),
        lines(&missing),
        lines(&extra)
    );
    let by_limit: BTreeMap<&str, usize> = Limit::ALL
        .iter()
        .map(|l| {
            (
                l.keyword(),
                shipped.iter().filter(|r| r.limit == *l).count(),
            )
        })
        .collect();
    eprintln!(
        "limits table: {} rows, as istio.io/api@{}'s CRDs say ({by_limit:?})",
        shipped.len(),
        istio_api::VERSION
    );
}

#[test]
fn istio_1_28_bounds_no_field_differently() {
    let Some(dir) = std::env::var_os("MESHHUB_ISTIO_MODULE_DIR").filter(|d| !d.is_empty()) else {
        eprintln!("skipped: MESHHUB_ISTIO_MODULE_DIR (Istio 1.28.3's module) is not set");
        return;
    };
    let older = limits(&Path::new(&dir).join("manifests/charts/base/files/crd-all.gen.yaml"));
    let table = parse_table(TABLE_TEXT).unwrap();
    let newest: BTreeMap<(&str, &str, Limit), u64> = table
        .iter()
        .map(|r| ((r.kind.as_str(), r.path.as_str(), r.limit), r.value))
        .collect();
    // A limit of a field both know, with another value or only in 1.28.
    let differs: Vec<&Row> = older
        .iter()
        .filter(|r| newest.get(&(r.kind.as_str(), r.path.as_str(), r.limit)) != Some(&r.value))
        .collect();
    assert!(
        differs.is_empty(),
        "Istio 1.28.3's CRDs bound these fields otherwise than limits.tsv (the newest's); decide by \
         the rule that an object must be valid for the newest and document the difference:\n{}",
        lines(&differs)
    );
    eprintln!(
        "Istio 1.28.3's CRDs: {} limits, each the table's; the table's other {} bound fields and kinds added later",
        older.len(),
        table.len() - older.len()
    );
}

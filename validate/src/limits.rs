//! The size limits of Istio's CRDs (`maxItems`, `maxLength`,
//! `maxProperties` and their `min` counterparts), enforced on Istio's kinds
//! as the API server enforces them, in its words.
//!
//! The limits guard the API server's storage and CEL cost; istiod does not
//! apply them to what it reads over MCP, but an object over one cannot be
//! applied to any cluster, so meshhub refuses it too. The table
//! (`limits.tsv` beside this file) is data written by us from the CRDs of
//! `istio.io/api`, not the CRD files themselves (they are not in this
//! repository and must not be needed at run time); a test derives it again
//! from the newest release's CRDs and fails when the two differ
//! (tests/it/limits.rs).
//!
//! Where one of Istio's own rules (istiod's `pkg/config/validation`)
//! bounds the same field, it counts bytes (Go's `len`) where the API server
//! counts characters: that rule then speaks only for what this table does
//! not refuse ([`over_in_bytes_only`]), so that a field gets one message.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::LazyLock;

use serde_json::Value;

use crate::report::{Report, at, idx, key};

/// The table as shipped.
pub const TABLE_TEXT: &str = include_str!("limits.tsv");

/// What a row bounds: the CRD's keyword.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Limit {
    /// `maxItems`: a list's length.
    MaxItems,
    /// `maxLength`: a string's characters (code points).
    MaxLength,
    /// `maxProperties`: a map's (or message's) entries.
    MaxProperties,
    /// `minItems`.
    MinItems,
    /// `minLength`.
    MinLength,
    /// `minProperties`.
    MinProperties,
}

impl Limit {
    /// Every limit, in the CRD's keyword order.
    pub const ALL: [Limit; 6] = [
        Limit::MaxItems,
        Limit::MaxLength,
        Limit::MaxProperties,
        Limit::MinItems,
        Limit::MinLength,
        Limit::MinProperties,
    ];

    /// The CRD's keyword (`maxItems`).
    pub fn keyword(self) -> &'static str {
        match self {
            Self::MaxItems => "maxItems",
            Self::MaxLength => "maxLength",
            Self::MaxProperties => "maxProperties",
            Self::MinItems => "minItems",
            Self::MinLength => "minLength",
            Self::MinProperties => "minProperties",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.keyword() == s)
    }
}

/// One row of the table: a limit of a kind's field.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Row {
    /// The kind (`ServiceEntry`).
    pub kind: String,
    /// The schema path (`spec.hosts`, `spec.selector.matchLabels.*`).
    pub path: String,
    /// What is bounded.
    pub limit: Limit,
    /// The bound.
    pub value: u64,
}

/// The table's text of a row (`ServiceEntry\tspec.hosts\tmaxItems\t256`).
impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}\t{}\t{}\t{}",
            self.kind,
            self.path,
            self.limit.keyword(),
            self.value
        )
    }
}

/// A line of the table that is not a row.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("limits table line {line}: {why}")]
pub struct TableError {
    /// 1-based.
    pub line: usize,
    /// What is wrong.
    pub why: &'static str,
}

/// Reads a table (`#` comments, blank lines, then rows of
/// `<Kind>\t<path>\t<limit>\t<value>`).
pub fn parse_table(text: &str) -> Result<Vec<Row>, TableError> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let err = |why| TableError { line: i + 1, why };
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let mut cols = line.split('\t');
        let (Some(kind), Some(path), Some(limit), Some(value), None) = (
            cols.next(),
            cols.next(),
            cols.next(),
            cols.next(),
            cols.next(),
        ) else {
            return Err(err("expected four tab-separated columns"));
        };
        if kind.is_empty() {
            return Err(err("no kind"));
        }
        if path != "spec" && !path.starts_with("spec.") {
            return Err(err("a path starts at spec"));
        }
        if path.split('.').any(str::is_empty) {
            return Err(err("an empty path segment"));
        }
        let limit = Limit::parse(limit).ok_or_else(|| err("not a size limit keyword"))?;
        let value = value.parse().map_err(|_| err("not a count"))?;
        rows.push(Row {
            kind: kind.to_owned(),
            path: path.to_owned(),
            limit,
            value,
        });
    }
    Ok(rows)
}

/// Every size limit of a CRD's served versions' `spec` schema, as rows;
/// `None` for what is no CRD. Limits under `oneOf`/`anyOf`/`allOf`/`not`
/// count as the field's (Istio's CRDs have none there).
pub fn crd_rows(crd: &Value) -> Option<BTreeSet<Row>> {
    let kind = crd.pointer("/spec/names/kind")?.as_str()?;
    let mut out = BTreeSet::new();
    for v in crd.pointer("/spec/versions")?.as_array()? {
        if v.get("served") == Some(&Value::Bool(false)) {
            continue;
        }
        if let Some(spec) = v.pointer("/schema/openAPIV3Schema/properties/spec") {
            schema_rows(kind, spec, "spec", &mut out);
        }
    }
    Some(out)
}

fn schema_rows(kind: &str, s: &Value, path: &str, out: &mut BTreeSet<Row>) {
    for limit in Limit::ALL {
        if let Some(value) = s.get(limit.keyword()).and_then(Value::as_u64) {
            out.insert(Row {
                kind: kind.to_owned(),
                path: path.to_owned(),
                limit,
                value,
            });
        }
    }
    for (k, v) in s
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        schema_rows(kind, v, &format!("{path}.{k}"), out);
    }
    if let Some(items) = s.get("items").filter(|i| i.is_object()) {
        schema_rows(kind, items, path, out);
    }
    if let Some(map) = s.get("additionalProperties").filter(|m| m.is_object()) {
        schema_rows(kind, map, &format!("{path}.*"), out);
    }
    for k in ["oneOf", "anyOf", "allOf"] {
        for sub in s.get(k).and_then(Value::as_array).into_iter().flatten() {
            schema_rows(kind, sub, path, out);
        }
    }
    if let Some(not) = s.get("not").filter(|n| n.is_object()) {
        schema_rows(kind, not, path, out);
    }
}

/// One schema node of a kind: its limits and the nodes below that hold
/// any. The walk goes only where a limit is.
#[derive(Debug, Default)]
struct Node {
    limits: Vec<(Limit, u64)>,
    fields: HashMap<String, Node>,
    /// A map's values (`*`).
    values: Option<Box<Node>>,
}

/// The shipped table, by kind; its root nodes are `spec`.
static TABLE: LazyLock<HashMap<String, Node>> = LazyLock::new(|| {
    // The shipped table parses (a unit test says so); were it ever not to,
    // no limit is enforced rather than anything crashing.
    index(&parse_table(TABLE_TEXT).unwrap_or_default())
});

fn index(rows: &[Row]) -> HashMap<String, Node> {
    let mut out: HashMap<String, Node> = HashMap::new();
    for r in rows {
        let mut node = out.entry(r.kind.clone()).or_default();
        for seg in r.path.split('.').skip(1) {
            node = if seg == "*" {
                node.values.get_or_insert_with(Box::default)
            } else {
                node.fields.entry(seg.to_owned()).or_default()
            };
        }
        node.limits.push((r.limit, r.value));
    }
    out
}

/// The number of rows in the shipped table.
pub fn table_rows() -> usize {
    parse_table(TABLE_TEXT).map_or(0, |r| r.len())
}

/// Checks `spec` of an Istio object of `kind` against its CRD's size
/// limits. Null fields and map values are absent (the API server prunes
/// them first); null list items count (it keeps them).
pub(crate) fn check(r: &mut Report, kind: &str, spec: &Value) {
    if let Some(root) = TABLE.get(kind) {
        visit(r, root, "spec", spec);
    }
}

/// Whether `s` is over `max` only when counted in bytes, as istiod counts
/// (Go's `len`): over it in characters too, the CRD's limit (this table)
/// has said so already.
pub(crate) fn over_in_bytes_only(s: &str, max: usize) -> bool {
    s.len() > max && s.chars().count() <= max
}

fn visit(r: &mut Report, node: &Node, path: &str, v: &Value) {
    if let Value::Array(items) = v {
        for &(limit, bound) in &node.limits {
            count(r, path, limit, bound, items.len(), Limit::MaxItems);
        }
        // A list's limits bound the list, its items' the items: a list of
        // lists has no row (no Istio CRD has one).
        for (i, item) in items.iter().enumerate() {
            if !item.is_array() {
                visit(r, node, &idx(path, i), item);
            }
        }
        return;
    }
    match v {
        Value::String(s) => {
            let chars = s.chars().count();
            for &(limit, bound) in &node.limits {
                match limit {
                    Limit::MaxLength if chars as u64 > bound => {
                        r.err(
                            path,
                            format!(
                                "Too long: may not be more than {bound} {}",
                                plural(bound, "byte")
                            ),
                        );
                    }
                    Limit::MinLength if (chars as u64) < bound => {
                        r.err(
                            path,
                            format!("Invalid value: {v}: {path} in body should be at least {bound} chars long"),
                        );
                    }
                    _ => {}
                }
            }
        }
        Value::Object(m) => {
            // The API server prunes null members before it counts (no
            // Istio CRD has a nullable one).
            let members = m.values().filter(|v| !v.is_null()).count();
            for &(limit, bound) in &node.limits {
                count(r, path, limit, bound, members, Limit::MaxProperties);
            }
            for (k, child) in m {
                if let Some(values) = &node.values {
                    visit(r, values, &key(path, k), child);
                }
                if let Some(field) = node.fields.get(k) {
                    visit(r, field, &at(path, k), child);
                }
            }
        }
        _ => {}
    }
}

/// A list's items or a map's entries against `limit`, when it is of the
/// kind `max` says (`MaxItems` for a list, `MaxProperties` for a map).
fn count(r: &mut Report, path: &str, limit: Limit, bound: u64, n: usize, max: Limit) {
    let min = match max {
        Limit::MaxItems => Limit::MinItems,
        _ => Limit::MinProperties,
    };
    let n64 = n as u64;
    if limit == max && n64 > bound {
        // The API server's `field.TooMany`, for maps too.
        r.err(
            path,
            format!(
                "Too many: {n}: must have at most {bound} {}",
                plural(bound, "item")
            ),
        );
    } else if limit == min && n64 < bound {
        let what = if min == Limit::MinItems {
            "items"
        } else {
            "properties"
        };
        r.err(
            path,
            format!("Invalid value: {n}: {path} in body should have at least {bound} {what}"),
        );
    }
}

fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        word.to_owned()
    } else {
        format!("{word}s")
    }
}

#[cfg(test)]
mod tests;

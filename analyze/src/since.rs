//! Which Istio release first knows each kind, field and enum value added
//! after Istio 1.22, and first accepts each value its validation refused
//! before (the "since" table, `since.tsv` beside this file), and what an
//! object needs of that table.
//!
//! An older istiod decodes what it receives over MCP with its own protobuf
//! types and drops a field it does not know without a word (and ACKs); an
//! older CRD schema prunes it on apply. The table lets the hub say, per
//! cluster, which object needs a newer Istio than the cluster runs (MH0002)
//! before the cut happens.
//!
//! The table is data written by us from the CRD schemas of each
//! `istio.io/api` release; a test reads those CRDs from the Go module cache
//! and fails when the table differs (analyze/tests/it/since.rs). Its value
//! rows (`path in …`: values a newer istiod's validation accepts that an
//! older one refuses) are no CRD's to check: they come from Istio's
//! sources and release notes, and the differential test's Istio lines
//! check them (e2e/tests/it/validation_parity.rs: a line older than the
//! row must refuse every object using the values, a line as new as the row
//! is compared with meshhub's verdict on them).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::sync::LazyLock;

use serde_json::Value;

/// The table as shipped.
pub const TABLE_TEXT: &str = include_str!("since.tsv");

/// The oldest Istio minor the table starts from: anything it does not name
/// is known to every release from 1.22 on.
pub const OLDEST_MINOR: u32 = 22;

/// An Istio release (`1.28.3`; the patch may be unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IstioVersion {
    /// `1`.
    pub major: u32,
    /// `28`.
    pub minor: u32,
    /// `3`, when known.
    pub patch: Option<u32>,
}

/// Why a version string is not an Istio version.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is no Istio version (expected MAJOR.MINOR[.PATCH], e.g. 1.28.3)")]
pub struct VersionError {
    /// What was given.
    pub given: String,
}

impl IstioVersion {
    /// `1.28.3`, `1.28`, `v1.28.3`, `1.28.3-distroless` (the suffix after
    /// the numbers is ignored).
    pub fn parse(s: &str) -> Result<Self, VersionError> {
        let err = || VersionError {
            given: s.to_owned(),
        };
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let end = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let mut parts = t[..end].split('.');
        let num = |p: Option<&str>| p.and_then(|p| p.parse::<u32>().ok());
        let major = num(parts.next()).ok_or_else(err)?;
        let minor = num(parts.next()).ok_or_else(err)?;
        let patch = match parts.next() {
            None | Some("") => None,
            Some(p) => Some(p.parse().map_err(|_| err())?),
        };
        if parts.next().is_some_and(|p| !p.is_empty()) {
            return Err(err());
        }
        Ok(Self {
            major,
            minor,
            patch,
        })
    }

    /// Istio's own stand-in for "newest" (`65536.65536.65536`, what its
    /// xDS client announces as `ISTIO_VERSION` when it has none): no
    /// release at all.
    pub fn is_placeholder(&self) -> bool {
        self.major >= 65535
    }

    /// Whether this release knows what appeared in 1.`minor`.
    pub fn knows(&self, minor: u32) -> bool {
        self.major > 1 || (self.major == 1 && self.minor >= minor)
    }
}

impl fmt::Display for IstioVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.patch {
            Some(p) => write!(f, "{}.{}.{}", self.major, self.minor, p),
            None => write!(f, "{}.{}", self.major, self.minor),
        }
    }
}

/// One thing an object uses that not every Istio release knows.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Need {
    /// The first Istio minor (of 1.x) that knows it.
    pub since: u32,
    /// Where in the object (`spec.subsets[0].trafficPolicy.retryBudget`);
    /// empty: the kind itself.
    pub path: String,
    /// The value, when what is new is a value of the field: an enum value
    /// as written (`WAYPOINT`); of a value row, the value as JSON (`0.5`,
    /// `"source.trustDomain"`).
    pub value: Option<String>,
    /// Of a value row: the values releases before `since` refuse (`(0,1)`,
    /// `{source.trustDomain}`).
    pub within: Option<String>,
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The first minor (of 1.x) that knows it.
    pub since: u32,
    /// The kind (`DestinationRule`).
    pub kind: String,
    /// The schema path (`spec.trafficPolicy.retryBudget`, `*` for a map's
    /// values); empty: the kind.
    pub path: String,
    /// What at that path is new.
    pub what: What,
}

/// What a row says a release first knows at its path.
#[derive(Clone, Debug, PartialEq)]
pub enum What {
    /// The field (with an empty path: the kind).
    Field,
    /// One value of an enum the CRD schema lists (`path=V`).
    Enum(String),
    /// Values of the field that istiod's validation first accepts in that
    /// release and refused before (`path in …`); no CRD schema states them.
    Values(Values),
}

impl Row {
    /// Whether the CRD schemas of `istio.io/api` show the row (a kind, a
    /// field, an enum value), so that the table-vs-CRD test can derive it;
    /// a value row is checked by the differential test's Istio lines.
    pub fn in_crds(&self) -> bool {
        !matches!(self.what, What::Values(_))
    }
}

/// The table's text of a row (`1.31\tDestinationRule\tspec.a in (0,1)`).
impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}\t{}\t{}", self.since, self.kind, self.path)?;
        match &self.what {
            What::Field => Ok(()),
            What::Enum(v) => write!(f, "={v}"),
            What::Values(v) => write!(f, " in {v}"),
        }
    }
}

/// The values of a value row.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// `{a,b}`: these strings.
    Strings(Vec<String>),
    /// `(lo,hi)`, `[lo,hi]` or mixed: the numbers between (a wrapper's
    /// `{value: n}` included); an empty bound is unbounded.
    Range {
        /// The lower bound and whether it is included.
        low: Option<(f64, bool)>,
        /// The upper bound and whether it is included.
        high: Option<(f64, bool)>,
    },
}

impl Values {
    /// Reads `{a,b}` or a range (`(0,1)`, `[1,)`).
    fn parse(s: &str) -> Result<Self, &'static str> {
        if let Some(inner) = s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            let items: Vec<String> = inner.split(',').map(|i| i.trim().to_owned()).collect();
            if items.iter().any(String::is_empty) {
                return Err("an empty string in a value set");
            }
            return Ok(Self::Strings(items));
        }
        let open = s.chars().next();
        let close = s.chars().last();
        let (Some(open @ ('(' | '[')), Some(close @ (')' | ']'))) = (open, close) else {
            return Err("values are {a,b} or a range (lo,hi) / [lo,hi]");
        };
        let Some((lo, hi)) = s[1..s.len() - 1].split_once(',') else {
            return Err("a range has two bounds");
        };
        let bound = |b: &str, inclusive: bool| -> Result<Option<(f64, bool)>, &'static str> {
            let b = b.trim();
            if b.is_empty() {
                return Ok(None);
            }
            match b.parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(Some((x, inclusive))),
                _ => Err("a range's bound is a number"),
            }
        };
        let (low, high) = (bound(lo, open == '[')?, bound(hi, close == ']')?);
        match (low, high) {
            (None, None) => Err("a range bounds at least one side"),
            (Some((l, li)), Some((h, hi))) if l > h || (l == h && !(li && hi)) => {
                Err("an empty range")
            }
            _ => Ok(Self::Range { low, high }),
        }
    }

    /// `v` as JSON text when it is one of the values.
    fn matching(&self, v: &Value) -> Option<String> {
        match self {
            Self::Strings(set) => {
                let s = v.as_str()?;
                set.iter().any(|x| x == s).then(|| v.to_string())
            }
            Self::Range { low, high } => {
                let n = match v {
                    Value::Number(n) => n,
                    Value::Object(o) => o.get("value")?.as_number()?,
                    _ => return None,
                };
                let x = n.as_f64()?;
                let above = low.is_none_or(|(l, inc)| if inc { x >= l } else { x > l });
                let below = high.is_none_or(|(h, inc)| if inc { x <= h } else { x < h });
                (above && below).then(|| n.to_string())
            }
        }
    }
}

impl fmt::Display for Values {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Strings(set) => write!(f, "{{{}}}", set.join(",")),
            Self::Range { low, high } => {
                let (open, lo) = match low {
                    Some((l, true)) => ('[', l.to_string()),
                    Some((l, false)) => ('(', l.to_string()),
                    None => ('(', String::new()),
                };
                let (close, hi) = match high {
                    Some((h, true)) => (']', h.to_string()),
                    Some((h, false)) => (')', h.to_string()),
                    None => (')', String::new()),
                };
                write!(f, "{open}{lo},{hi}{close}")
            }
        }
    }
}

/// A line of the table that is not a row.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("since table line {line}: {why}")]
pub struct TableError {
    /// 1-based.
    pub line: usize,
    /// What is wrong.
    pub why: &'static str,
}

/// Reads a table (`#` comments, blank lines, then rows of
/// `1.<minor>\t<Kind>\t<path>[=<value>| in <values>]`).
pub fn parse_table(text: &str) -> Result<Vec<Row>, TableError> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let err = |why| TableError { line: i + 1, why };
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let mut cols = line.split('\t');
        let (Some(version), Some(kind), Some(what), None) =
            (cols.next(), cols.next(), cols.next(), cols.next())
        else {
            return Err(err("expected three tab-separated columns"));
        };
        let v = IstioVersion::parse(version).map_err(|_| err("not a version"))?;
        if v.major != 1 || v.minor <= OLDEST_MINOR {
            return Err(err("not a 1.x release after the oldest"));
        }
        if kind.is_empty() {
            return Err(err("no kind"));
        }
        let (path, what) = if let Some((p, values)) = what.split_once(" in ") {
            (p, What::Values(Values::parse(values).map_err(err)?))
        } else if let Some((p, value)) = what.split_once('=') {
            (p, What::Enum(value.to_owned()))
        } else {
            (what, What::Field)
        };
        if !path.is_empty() && !path.starts_with("spec.") && path != "spec" {
            return Err(err("a path starts at spec"));
        }
        if path.is_empty() && what != What::Field {
            return Err(err("a value belongs to a field"));
        }
        rows.push(Row {
            since: v.minor,
            kind: kind.to_owned(),
            path: path.to_owned(),
            what,
        });
    }
    Ok(rows)
}

/// The table's rows of one kind, indexed.
#[derive(Debug, Default)]
struct KindRows {
    kind: Option<u32>,
    fields: HashMap<String, u32>,
    /// Enum value rows: schema path → value → since.
    values: HashMap<String, HashMap<String, u32>>,
    /// Value rows, by schema path.
    accepts: HashMap<String, Vec<(Values, u32)>>,
    /// Schema paths whose object is a map (its keys are names, not fields).
    maps: HashSet<String>,
    /// Every row's path and each of its prefixes: a walk descends only
    /// where a row may be found (most of an object has none).
    prefixes: HashSet<String>,
}

static TABLE: LazyLock<HashMap<String, KindRows>> = LazyLock::new(|| {
    // The shipped table parses (a unit test says so); were it ever not to,
    // nothing is flagged rather than anything crashing.
    index(&parse_table(TABLE_TEXT).unwrap_or_default())
});

fn index(rows: &[Row]) -> HashMap<String, KindRows> {
    let mut out: HashMap<String, KindRows> = HashMap::new();
    for r in rows {
        let k = out.entry(r.kind.clone()).or_default();
        if r.path.is_empty() {
            k.kind = Some(r.since);
            continue;
        }
        let mut prefix = String::new();
        for seg in r.path.split('.') {
            if seg == "*" {
                k.maps.insert(prefix.clone());
            }
            if !prefix.is_empty() {
                prefix.push('.');
            }
            prefix.push_str(seg);
            k.prefixes.insert(prefix.clone());
        }
        match &r.what {
            What::Field => {
                k.fields.insert(r.path.clone(), r.since);
            }
            What::Enum(v) => {
                k.values
                    .entry(r.path.clone())
                    .or_default()
                    .insert(v.clone(), r.since);
            }
            What::Values(v) => {
                k.accepts
                    .entry(r.path.clone())
                    .or_default()
                    .push((v.clone(), r.since));
            }
        }
    }
    out
}

/// The number of rows in the shipped table.
pub fn table_rows() -> usize {
    parse_table(TABLE_TEXT).map_or(0, |r| r.len())
}

/// The newest minor the table names (what "knows everything" means).
pub fn newest_minor() -> u32 {
    parse_table(TABLE_TEXT)
        .ok()
        .and_then(|rows| rows.iter().map(|r| r.since).max())
        .unwrap_or(OLDEST_MINOR)
}

/// Every field path (`spec.a.b`, `*` for a map's values) and enum value
/// (`spec.a=V`) of a CRD's served versions' `spec` schema, and its kind
/// (`spec.names.kind`); `None` for what is no CRD.
pub fn crd_paths(crd: &Value) -> Option<(String, BTreeSet<String>)> {
    let kind = crd.pointer("/spec/names/kind")?.as_str()?.to_owned();
    let mut out = BTreeSet::new();
    for v in crd.pointer("/spec/versions")?.as_array()? {
        if v.get("served") == Some(&Value::Bool(false)) {
            continue;
        }
        if let Some(spec) = v.pointer("/schema/openAPIV3Schema/properties/spec") {
            schema_paths(spec, "spec", &mut out);
        }
    }
    Some((kind, out))
}

fn schema_paths(s: &Value, path: &str, out: &mut BTreeSet<String>) {
    for e in s
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(e) = e.as_str() {
            out.insert(format!("{path}={e}"));
        }
    }
    for (k, v) in s
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let p = format!("{path}.{k}");
        out.insert(p.clone());
        schema_paths(v, &p, out);
    }
    if let Some(items) = s.get("items").filter(|i| i.is_object()) {
        schema_paths(items, path, out);
    }
    if let Some(map) = s.get("additionalProperties").filter(|m| m.is_object()) {
        schema_paths(map, &format!("{path}.*"), out);
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        for sub in s.get(key).and_then(Value::as_array).into_iter().flatten() {
            schema_paths(sub, path, out);
        }
    }
}

/// The newest Istio minor (of 1.x) whose additions to `kind` a CRD schema
/// with `paths` ([`crd_paths`]) all knows: one below the oldest row it
/// lacks, the table's newest when it lacks none. An API server with that
/// CRD refuses (strict validation) or prunes what a newer row adds. Value
/// rows do not count (no schema shows them): the minor said is the
/// release the CRDs come from as far as their fields tell.
pub fn crd_knows(kind: &str, paths: &BTreeSet<String>) -> u32 {
    let newest = newest_minor();
    let Some(rows) = TABLE.get(kind) else {
        return newest;
    };
    let lacking = rows
        .fields
        .iter()
        .filter(|(p, _)| !paths.contains(*p))
        .map(|(_, since)| *since)
        .chain(
            rows.values
                .iter()
                .flat_map(|(p, by_value)| by_value.iter().map(move |(v, since)| (p, v, since)))
                .filter(|(p, v, _)| !paths.contains(&format!("{p}={v}")))
                .map(|(_, _, since)| *since),
        )
        .min();
    lacking.map_or(newest, |m| m - 1)
}

/// The first Istio minor (of 1.x) that knows `kind`; `None` when every
/// release the table covers knows it (or the kind is not Istio's).
pub fn kind_since(kind: &str) -> Option<u32> {
    TABLE.get(kind).and_then(|rows| rows.kind)
}

/// What an object of `kind` with `spec` needs of the table, in path order.
pub fn needs(kind: &str, spec: &Value) -> Vec<Need> {
    let Some(rows) = TABLE.get(kind) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(since) = rows.kind {
        out.push(Need {
            since,
            path: String::new(),
            value: None,
            within: None,
        });
    }
    if rows.prefixes.contains("spec") {
        walk(
            rows,
            &mut String::from("spec"),
            &mut String::from("spec"),
            spec,
            &mut out,
        );
    }
    out
}

/// Walks `v`, found at the schema path `schema` (map keys as `*`) and
/// shown as `shown` (keys and indexes as they are); both are buffers the
/// walk extends and restores, so that a node costs no allocation unless
/// a row matches it.
fn walk(rows: &KindRows, schema: &mut String, shown: &mut String, v: &Value, out: &mut Vec<Need>) {
    for (values, since) in rows.accepts.get(schema.as_str()).into_iter().flatten() {
        if let Some(value) = values.matching(v) {
            out.push(Need {
                since: *since,
                path: shown.clone(),
                value: Some(value),
                within: Some(values.to_string()),
            });
        }
    }
    match v {
        Value::Object(m) => {
            let map = rows.maps.contains(schema.as_str());
            let (schema_len, shown_len) = (schema.len(), shown.len());
            for (k, child) in m {
                schema.push('.');
                schema.push_str(if map { "*" } else { k.as_str() });
                if rows.prefixes.contains(schema.as_str()) {
                    shown.push('.');
                    shown.push_str(k);
                    if let Some(&since) = rows.fields.get(schema.as_str()) {
                        out.push(Need {
                            since,
                            path: shown.clone(),
                            value: None,
                            within: None,
                        });
                    }
                    walk(rows, schema, shown, child, out);
                    shown.truncate(shown_len);
                }
                schema.truncate(schema_len);
            }
        }
        Value::Array(items) => {
            let shown_len = shown.len();
            for (i, item) in items.iter().enumerate() {
                // Writing to a `String` cannot fail.
                let _ = write!(shown, "[{i}]");
                walk(rows, schema, shown, item, out);
                shown.truncate(shown_len);
            }
        }
        Value::String(s) => {
            if let Some(&since) = rows
                .values
                .get(schema.as_str())
                .and_then(|by_value| by_value.get(s.as_str()))
            {
                out.push(Need {
                    since,
                    path: shown.clone(),
                    value: Some(s.clone()),
                    within: None,
                });
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;

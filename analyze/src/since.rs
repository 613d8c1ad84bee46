//! Which Istio release first knows each kind, field and enum value added
//! after Istio 1.22 (the "since" table, `since.tsv` beside this file), and
//! what an object needs of that table.
//!
//! An older istiod decodes what it receives over MCP with its own protobuf
//! types and drops a field it does not know without a word (and ACKs); an
//! older CRD schema prunes it on apply. The table lets the hub say, per
//! cluster, which object needs a newer Istio than the cluster runs (MH0002)
//! before the cut happens.
//!
//! The table is data written by us from the CRD schemas of each
//! `istio.io/api` release; a test reads those CRDs from the Go module cache
//! and fails when the table differs (analyze/tests/it/since.rs).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
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
    /// The enum value, when what is new is a value of the field.
    pub value: Option<String>,
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The first minor (of 1.x) that knows it.
    pub since: u32,
    /// The kind (`DestinationRule`).
    pub kind: String,
    /// The schema path (`spec.trafficPolicy.retryBudget`, `*` for a map's
    /// values); empty: the kind.
    pub path: String,
    /// The enum value, if the row is about one.
    pub value: Option<String>,
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
/// `1.<minor>\t<Kind>\t<path>[=<value>]`).
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
        let (path, value) = match what.split_once('=') {
            Some((p, v)) => (p, Some(v.to_owned())),
            None => (what, None),
        };
        if !path.is_empty() && !path.starts_with("spec.") && path != "spec" {
            return Err(err("a path starts at spec"));
        }
        rows.push(Row {
            since: v.minor,
            kind: kind.to_owned(),
            path: path.to_owned(),
            value,
        });
    }
    Ok(rows)
}

/// The table's rows of one kind, indexed.
#[derive(Debug, Default)]
struct KindRows {
    kind: Option<u32>,
    fields: HashMap<String, u32>,
    values: HashMap<(String, String), u32>,
    /// Schema paths whose object is a map (its keys are names, not fields).
    maps: HashSet<String>,
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
        }
        match &r.value {
            Some(v) => {
                k.values.insert((r.path.clone(), v.clone()), r.since);
            }
            None => {
                k.fields.insert(r.path.clone(), r.since);
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
/// CRD refuses (strict validation) or prunes what a newer row adds.
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
                .filter(|((p, v), _)| !paths.contains(&format!("{p}={v}")))
                .map(|(_, since)| *since),
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
        });
    }
    walk(rows, "spec", "spec", spec, &mut out);
    out
}

fn walk(rows: &KindRows, schema: &str, shown: &str, v: &Value, out: &mut Vec<Need>) {
    match v {
        Value::Object(m) => {
            let map = rows.maps.contains(schema);
            for (k, child) in m {
                let s = format!("{schema}.{}", if map { "*" } else { k.as_str() });
                let d = format!("{shown}.{k}");
                if let Some(&since) = rows.fields.get(&s) {
                    out.push(Need {
                        since,
                        path: d.clone(),
                        value: None,
                    });
                }
                walk(rows, &s, &d, child, out);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(rows, schema, &format!("{shown}[{i}]"), item, out);
            }
        }
        Value::String(s) => {
            if let Some(&since) = rows.values.get(&(schema.to_owned(), s.clone())) {
                out.push(Need {
                    since,
                    path: shown.to_owned(),
                    value: Some(s.clone()),
                });
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_shipped_table_parses() {
        let rows = parse_table(TABLE_TEXT).unwrap();
        assert!(rows.len() > 50, "{}", rows.len());
        assert!(
            rows.iter()
                .any(|r| r.kind == "TrafficExtension" && r.path.is_empty())
        );
    }

    #[test]
    fn bad_lines_are_named() {
        let e = parse_table("# c\n1.30\tX\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(
            parse_table("1.20\tX\tspec.a\n").is_err(),
            "older than the oldest"
        );
        assert!(parse_table("1.30\tX\tmetadata.a\n").is_err());
    }

    #[test]
    fn versions_parse_as_istio_writes_them() {
        let v = IstioVersion::parse("1.28.3").unwrap();
        assert_eq!((v.major, v.minor, v.patch), (1, 28, Some(3)));
        assert_eq!(IstioVersion::parse("v1.23").unwrap().to_string(), "1.23");
        assert_eq!(
            IstioVersion::parse("1.28.3-distroless")
                .unwrap()
                .to_string(),
            "1.28.3"
        );
        assert!(
            IstioVersion::parse("65536.65536.65536")
                .unwrap()
                .is_placeholder()
        );
        for bad in ["", "1", "x.y", "1.x", "1.2.3.4"] {
            assert!(IstioVersion::parse(bad).is_err(), "{bad}");
        }
        let v = IstioVersion::parse("1.28.3").unwrap();
        assert!(v.knows(28) && !v.knows(29));
    }

    #[test]
    fn an_object_needs_what_it_uses() {
        let spec = json!({
            "host": "reviews",
            "trafficPolicy": {"connectionPool": {"http": {"http2KeepAlive": {"interval": "1s"}}}},
            "subsets": [{"name": "v1", "trafficPolicy": {"retryBudget": {"percent": 10}}}]
        });
        let n = needs("DestinationRule", &spec);
        let got: Vec<(u32, &str)> = n.iter().map(|n| (n.since, n.path.as_str())).collect();
        assert!(
            got.contains(&(31, "spec.trafficPolicy.connectionPool.http.http2KeepAlive")),
            "{got:?}"
        );
        assert!(
            got.contains(&(27, "spec.subsets[0].trafficPolicy.retryBudget")),
            "{got:?}"
        );
        assert!(needs("DestinationRule", &json!({"host": "r"})).is_empty());
    }

    #[test]
    fn a_crd_knows_up_to_the_first_row_it_lacks() {
        let crd = json!({"spec": {"names": {"kind": "DestinationRule"}, "versions": [{
            "served": true,
            "schema": {"openAPIV3Schema": {"properties": {"spec": {"properties": {
                "host": {"type": "string"},
                "trafficPolicy": {"properties": {"loadBalancer": {"properties": {
                    "simple": {"enum": ["ROUND_ROBIN"]}}}}}
            }}}}}
        }]}});
        let (kind, paths) = crd_paths(&crd).unwrap();
        assert_eq!(kind, "DestinationRule");
        assert!(paths.contains("spec.trafficPolicy.loadBalancer.simple=ROUND_ROBIN"));
        // It lacks `warmup` (1.24): it knows 1.23.
        assert_eq!(crd_knows(&kind, &paths), 23);
        // A kind the table has nothing new for is known up to the newest.
        assert_eq!(
            crd_knows("PeerAuthentication", &BTreeSet::new()),
            newest_minor()
        );
        assert!(crd_paths(&json!({"kind": "x"})).is_none());
    }

    #[test]
    fn enum_values_kinds_and_map_values_are_needs() {
        let ef =
            json!({"configPatches": [{"applyTo": "LISTENER", "match": {"context": "WAYPOINT"}}]});
        let n = needs("EnvoyFilter", &ef);
        assert_eq!(n.len(), 1, "{n:?}");
        assert_eq!(n[0].path, "spec.configPatches[0].match.context");
        assert_eq!(n[0].value.as_deref(), Some("WAYPOINT"));
        assert!(
            needs(
                "EnvoyFilter",
                &json!({"configPatches": [{"match": {"context": "SIDECAR_INBOUND"}}]})
            )
            .is_empty()
        );

        let te = needs("TrafficExtension", &json!({}));
        assert_eq!(te.len(), 1);
        assert_eq!((te[0].since, te[0].path.as_str()), (30, ""));

        let t = json!({"tracing": [{"customTags": {"my-tag": {"formatter": {"value": "x"}}}}]});
        let n = needs("Telemetry", &t);
        assert_eq!(n.len(), 1, "{n:?}");
        assert_eq!(n[0].path, "spec.tracing[0].customTags.my-tag.formatter");
    }
}

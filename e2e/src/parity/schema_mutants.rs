//! Seeded mutants directed by the CRDs' own OpenAPI schemas: at a place of
//! a valid object, a value just outside what the schema there allows (one
//! more item than `maxItems`, one more character than `maxLength`, one
//! past `maximum`, a value outside `enum`, another JSON type, a required
//! field removed) or just inside it (a field the object lacks, set to a
//! value of its type). Istio's rules on the same fields are exercised on
//! the way.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};

use super::corpus::Case;
use super::table::truncate;

/// The `spec` schema of every served (group, kind, version), from the CRD
/// file.
#[derive(Debug, Default)]
pub struct SpecSchemas {
    schemas: Vec<((String, String, String), Value)>,
}

impl SpecSchemas {
    /// Reads the CRDs of a `crd-all.gen.yaml`.
    pub fn read(text: &str) -> Self {
        let mut schemas = Vec::new();
        for doc in meshhub_proto::transcode::parse_yaml(text) {
            let Ok(obj) = doc else { continue };
            let spec = &obj.content["spec"];
            let group = spec["group"].as_str().unwrap_or_default();
            let kind = spec["names"]["kind"].as_str().unwrap_or_default();
            for v in spec["versions"].as_array().into_iter().flatten() {
                let schema = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
                if let Some(name) = v["name"].as_str()
                    && schema.is_object()
                {
                    schemas.push((
                        (group.to_owned(), kind.to_owned(), name.to_owned()),
                        schema.clone(),
                    ));
                }
            }
        }
        Self { schemas }
    }

    fn of(&self, case: &Case) -> Option<&Value> {
        self.schemas
            .iter()
            .find(|((g, k, v), _)| g == case.group() && k == case.kind() && v == case.version())
            .map(|(_, s)| s)
    }
}

/// A place in an object with the schema that governs it.
struct Spot {
    path: Vec<String>,
    schema: Value,
    present: bool,
}

/// Every place of `v` under `schema` (and each absent property of its
/// objects), depth first.
fn spots(schema: &Value, v: Option<&Value>, path: &mut Vec<String>, out: &mut Vec<Spot>) {
    out.push(Spot {
        path: path.clone(),
        schema: schema.clone(),
        present: v.is_some(),
    });
    let Some(v) = v else { return };
    if let Some(props) = schema["properties"].as_object() {
        for (k, s) in props {
            path.push(k.clone());
            spots(s, v.get(k), path, out);
            path.pop();
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, item) in arr.iter().enumerate() {
            path.push(format!("#{i}"));
            spots(items, Some(item), path, out);
            path.pop();
        }
    }
    if let (Some(add), Some(m)) = (
        schema.get("additionalProperties").filter(|a| a.is_object()),
        v.as_object(),
    ) {
        for (k, item) in m {
            path.push(k.clone());
            spots(add, Some(item), path, out);
            path.pop();
        }
    }
}

fn show(path: &[String]) -> String {
    let mut s = String::from("spec");
    for p in path {
        match p.strip_prefix('#') {
            Some(i) => s.push_str(&format!("[{i}]")),
            None => s.push_str(&format!(".{p}")),
        }
    }
    s
}

/// Sets (or with `None`, removes) the value at `path` under `spec`,
/// creating objects on the way.
fn put(spec: &mut Value, path: &[String], value: Option<Value>) {
    let (last, parents) = match path.split_last() {
        Some(x) => x,
        None => {
            if let Some(v) = value {
                *spec = v;
            }
            return;
        }
    };
    let mut cur = spec;
    for p in parents {
        cur = match p.strip_prefix('#') {
            Some(i) => match cur.get_mut(i.parse::<usize>().unwrap_or(0)) {
                Some(c) => c,
                None => return,
            },
            None => {
                if !cur.is_object() {
                    *cur = Value::Object(Map::new());
                }
                cur.as_object_mut()
                    .expect("object")
                    .entry(p.clone())
                    .or_insert_with(|| json!({}))
            }
        };
    }
    match (last.strip_prefix('#'), value) {
        (Some(i), Some(v)) => {
            if let Some(slot) = cur.get_mut(i.parse::<usize>().unwrap_or(0)) {
                *slot = v;
            }
        }
        (Some(i), None) => {
            if let Some(a) = cur.as_array_mut() {
                let i = i.parse::<usize>().unwrap_or(0);
                if i < a.len() {
                    a.remove(i);
                }
            }
        }
        (None, Some(v)) => {
            if !cur.is_object() {
                *cur = Value::Object(Map::new());
            }
            cur.as_object_mut().expect("object").insert(last.clone(), v);
        }
        (None, None) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(last);
            }
        }
    }
}

/// A value of `schema`'s type that the schema allows (as far as its
/// keywords say).
fn plausible(schema: &Value, rng: &mut StdRng) -> Value {
    if let Some(e) = schema["enum"].as_array().filter(|e| !e.is_empty()) {
        return e[rng.random_range(0..e.len())].clone();
    }
    match schema["type"].as_str().unwrap_or("") {
        "string" => {
            let choices = [
                "x",
                "1s",
                "10ms",
                "example.com",
                "*",
                "a/b",
                "10.0.0.1",
                "http://a.b/c",
            ];
            json!(choices[rng.random_range(0..choices.len())])
        }
        "integer" => {
            let min = schema["minimum"].as_i64().unwrap_or(0);
            json!(min + rng.random_range(0..3))
        }
        "number" => json!(schema["minimum"].as_f64().unwrap_or(0.0) + 1.0),
        "boolean" => json!(rng.random_bool(0.5)),
        "array" => json!([plausible(&schema["items"], rng)]),
        "object" => {
            let mut m = Map::new();
            if let Some(props) = schema["properties"].as_object()
                && !props.is_empty()
            {
                let keys: Vec<&String> = props.keys().collect();
                let k = keys[rng.random_range(0..keys.len())];
                m.insert(k.clone(), plausible(&props[k], rng));
            } else if schema["additionalProperties"].is_object() {
                m.insert("k".into(), plausible(&schema["additionalProperties"], rng));
            }
            Value::Object(m)
        }
        _ => json!("x"),
    }
}

/// Values at or just past the limits of `schema`, each with a label.
fn edges(
    schema: &Value,
    current: Option<&Value>,
    rng: &mut StdRng,
) -> Vec<(String, Option<Value>)> {
    let mut out: Vec<(String, Option<Value>)> = Vec::new();
    let n = |k: &str| schema[k].as_u64().map(|v| v as usize);
    if let Some(max) = n("maxLength") {
        out.push((
            format!("maxLength {max} + 1"),
            Some(json!("a".repeat(max + 1))),
        ));
        out.push((format!("maxLength {max}"), Some(json!("a".repeat(max)))));
    }
    if let Some(min) = n("minLength").filter(|m| *m > 0) {
        out.push((
            format!("minLength {min} - 1"),
            Some(json!("a".repeat(min - 1))),
        ));
    }
    let first = current
        .and_then(Value::as_array)
        .and_then(|a| a.first().cloned())
        .unwrap_or_else(|| plausible(&schema["items"], rng));
    if let Some(max) = n("maxItems").filter(|m| *m <= 4096) {
        out.push((
            format!("maxItems {max} + 1"),
            Some(Value::Array(vec![first.clone(); max + 1])),
        ));
    }
    if let Some(min) = n("minItems").filter(|m| *m > 0) {
        out.push((
            format!("minItems {min} - 1"),
            Some(Value::Array(vec![first; min - 1])),
        ));
    }
    if let Some(max) = n("maxProperties").filter(|m| *m <= 512) {
        let v = plausible(&schema["additionalProperties"], rng);
        let m: Map<String, Value> = (0..=max).map(|i| (format!("k{i}"), v.clone())).collect();
        out.push((format!("maxProperties {max} + 1"), Some(Value::Object(m))));
    }
    if let Some(max) = schema["maximum"].as_f64() {
        out.push((format!("maximum {max} + 1"), Some(json!(max as i64 + 1))));
        out.push((format!("maximum {max}"), Some(json!(max as i64))));
    }
    if let Some(min) = schema["minimum"].as_f64() {
        out.push((format!("minimum {min} - 1"), Some(json!(min as i64 - 1))));
    }
    if schema["enum"].is_array() {
        out.push(("not in enum".into(), Some(json!("NOT_IN_ENUM"))));
        out.push(("enum as number".into(), Some(json!(1))));
    }
    if schema["pattern"].is_string() {
        out.push(("breaks pattern".into(), Some(json!("Not A Match!"))));
    }
    match schema["type"].as_str() {
        Some("string") => {
            out.push(("string as number".into(), Some(json!(1))));
            for s in ["", "*", "0.5ms", "with space", "a/b/c", "UPPER"] {
                out.push((format!("string {s:?}"), Some(json!(s))));
            }
        }
        Some("integer") => {
            out.push(("integer as string".into(), Some(json!("1"))));
            out.push(("integer 0".into(), Some(json!(0))));
            out.push(("integer 65536".into(), Some(json!(65536))));
            out.push(("integer -1".into(), Some(json!(-1))));
        }
        Some("number") => out.push(("number as string".into(), Some(json!("1.5")))),
        Some("boolean") => out.push(("boolean as string".into(), Some(json!("true")))),
        Some("array") => out.push(("empty array".into(), Some(json!([])))),
        Some("object") => out.push(("empty object".into(), Some(json!({})))),
        _ => {}
    }
    if let Some(req) = schema["required"].as_array()
        && let Some(cur) = current.and_then(Value::as_object)
    {
        for r in req.iter().filter_map(Value::as_str) {
            if cur.contains_key(r) {
                let mut without = cur.clone();
                without.remove(r);
                out.push((
                    format!("required {r} removed"),
                    Some(Value::Object(without)),
                ));
            }
        }
    }
    if current.is_some() {
        out.push(("removed".into(), None));
    }
    out
}

/// `count` schema-directed mutants of `bases`, deterministic for `seed`.
pub fn schema_mutants(bases: &[Case], schemas: &SpecSchemas, count: usize, seed: u64) -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(count);
    let usable: Vec<(&Case, &Value)> = bases
        .iter()
        .filter_map(|c| schemas.of(c).map(|s| (c, s)))
        .collect();
    if usable.is_empty() {
        return out;
    }
    let mut n = 0;
    while out.len() < count && n < count * 4 {
        n += 1;
        let (base, schema) = usable[rng.random_range(0..usable.len())];
        let spec = base.object.get("spec").cloned().unwrap_or(json!({}));
        let mut found = Vec::new();
        spots(schema, Some(&spec), &mut Vec::new(), &mut found);
        found.retain(|s| !s.path.is_empty());
        if found.is_empty() {
            continue;
        }
        let spot = &found[rng.random_range(0..found.len())];
        let mut object = base.object.clone();
        let what = if spot.present {
            let current = spot
                .path
                .iter()
                .try_fold(&spec, |v, p| match p.strip_prefix('#') {
                    Some(i) => v.get(i.parse::<usize>().ok()?),
                    None => v.get(p),
                });
            let choices = edges(&spot.schema, current, &mut rng);
            if choices.is_empty() {
                continue;
            }
            let (label, value) = choices[rng.random_range(0..choices.len())].clone();
            put(&mut object["spec"], &spot.path, value);
            format!("{}: {label}", show(&spot.path))
        } else {
            let value = plausible(&spot.schema, &mut rng);
            let shown = value.to_string();
            put(&mut object["spec"], &spot.path, Some(value));
            format!("{} added: {}", show(&spot.path), truncate(&shown, 60))
        };
        out.push(Case {
            family: "schema-mutant".into(),
            label: format!("schema mutant {} of {}: {what}", out.len(), base.label),
            object,
        });
    }
    out
}

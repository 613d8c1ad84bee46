//! Seeded mutants of valid objects: a leaf (or subtree) replaced by a value
//! of another type or at a boundary, a key or a list element removed, an
//! unknown field added, the name broken. The same seed gives the same
//! mutants.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use super::corpus::Case;
use super::table::truncate;

/// One step of a path into a JSON value.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

fn show(path: &[Step]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            Step::Key(k) if k.contains('.') || k.contains('/') => s.push_str(&format!("[{k:?}]")),
            Step::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Step::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// Every path under `v` (`v` itself excluded), depth first.
fn paths(v: &Value, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                prefix.push(Step::Key(k.clone()));
                out.push(prefix.clone());
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                prefix.push(Step::Index(i));
                out.push(prefix.clone());
                paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn get_mut<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    let mut cur = v;
    for step in path {
        cur = match step {
            Step::Key(k) => cur.get_mut(k)?,
            Step::Index(i) => cur.get_mut(*i)?,
        };
    }
    Some(cur)
}

/// Values that change a leaf's type or sit at a boundary of a rule.
fn generic_values() -> Vec<Value> {
    vec![
        Value::Null,
        json!(true),
        json!(false),
        json!(0),
        json!(-1),
        json!(1),
        json!(100),
        json!(101),
        json!(65535),
        json!(65536),
        json!(4294967296_u64),
        json!(1.5),
        json!(""),
        json!("x"),
        json!("UNKNOWN_VALUE"),
        json!("1"),
        json!([]),
        json!({}),
        json!(["x"]),
        json!({"x": "y"}),
        json!("-1s"),
        json!("0s"),
        json!("0.5ms"),
        json!("1ms"),
        json!("10s"),
        json!("1h"),
        json!("*"),
        json!("*.example.com"),
        json!("foo.*.com"),
        json!("Upper.Example.com"),
        json!(format!("{}.com", "a".repeat(252))),
        json!("http://example.com/x"),
        json!("oci://registry/x:1"),
        json!("ftp://example.com/x"),
        json!("10.0.0.0/33"),
        json!("10.0.0.1"),
        json!("::1"),
        json!("ns/*"),
        json!("./name"),
        json!("request.path == '/'"),
        json!("response.code >= "),
        json!("a".repeat(64)),
        json!(format!("x{}", "-y".repeat(160))),
        json!(vec!["a"; 17]),
        json!(vec![json!({"name": "a"}); 3]),
        json!("\u{00e9}t\u{00e9}"),
        json!("with space"),
        json!({"@type": "type.googleapis.com/google.protobuf.Struct"}),
        json!({"@type": "type.googleapis.com/example.Unknown"}),
    ]
}

/// Values derived from the current one.
fn derived_values(v: &Value) -> Vec<Value> {
    match v {
        Value::String(s) => {
            let mut out = vec![
                json!(s.to_lowercase()),
                json!(format!("{s}-")),
                json!(format!("{s}.")),
                json!(format!("{s}_x")),
                json!(s.len() as u64),
            ];
            if s.chars().all(|c| c.is_ascii_uppercase() || c == '_') && !s.is_empty() {
                // An enum name: its numbers and a wrong case.
                out.extend([json!(0), json!(1), json!(3), json!(42), json!(-1)]);
            }
            if let Some(n) = s.strip_suffix('s').and_then(|n| n.parse::<f64>().ok()) {
                out.extend([json!(format!("{}s", n * 1000.0)), json!(n)]);
            }
            out
        }
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            vec![
                json!(f + 1.0),
                json!(f - 1.0),
                json!(-f),
                json!(f * 1000.0),
                json!(f + 0.5),
                json!(f.to_string()),
            ]
        }
        Value::Bool(b) => vec![json!(!b), json!(b.to_string())],
        _ => Vec::new(),
    }
}

/// Broken (or borderline) object names.
fn names() -> Vec<String> {
    vec![
        "a".repeat(63),
        "a".repeat(64),
        "a".repeat(253),
        "a".repeat(254),
        "Upper".into(),
        "under_score".into(),
        "dot.ted.name".into(),
        "-lead".into(),
        "trail-".into(),
        "a..b".into(),
        "1numeric".into(),
    ]
}

/// `count` mutants of `bases`, deterministic for `seed`. Each is a new
/// case of family `mutant`, labelled with its base and the mutation.
pub fn mutants(bases: &[Case], count: usize, seed: u64) -> Vec<Case> {
    let mut rng = StdRng::seed_from_u64(seed);
    let generic = generic_values();
    let mut out = Vec::with_capacity(count);
    if bases.is_empty() {
        return out;
    }
    for n in 0..count {
        let base = &bases[rng.random_range(0..bases.len())];
        let mut object = base.object.clone();
        let mut spec_paths = Vec::new();
        if let Some(spec) = object.get("spec") {
            paths(spec, &mut vec![Step::Key("spec".into())], &mut spec_paths);
        }
        let roll = rng.random_range(0..100);
        let what = if spec_paths.is_empty() || roll < 5 {
            let list = names();
            let name = list[rng.random_range(0..list.len())].clone();
            let what = format!("metadata.name = {name:?}");
            object["metadata"]["name"] = Value::from(name);
            what
        } else {
            let path = &spec_paths[rng.random_range(0..spec_paths.len())];
            let (parent, last) = path.split_at(path.len() - 1);
            let shown = show(path);
            if roll < 30 {
                // Remove the key or element.
                let parent = get_mut(&mut object, parent).expect("path exists");
                match (&last[0], parent) {
                    (Step::Key(k), Value::Object(m)) => {
                        m.remove(k);
                    }
                    (Step::Index(i), Value::Array(a)) => {
                        a.remove(*i);
                    }
                    _ => {}
                }
                format!("{shown} removed")
            } else if roll < 37 {
                // An unknown field beside it.
                let parent = get_mut(&mut object, parent).expect("path exists");
                match parent {
                    Value::Object(m) => {
                        m.insert("parityUnknownField".into(), json!("x"));
                    }
                    Value::Array(a) => a.push(json!({"parityUnknownField": "x"})),
                    _ => {}
                }
                format!("unknown field beside {shown}")
            } else {
                let target = get_mut(&mut object, path).expect("path exists");
                let derived = derived_values(target);
                let value = if !derived.is_empty() && rng.random_bool(0.4) {
                    derived[rng.random_range(0..derived.len())].clone()
                } else {
                    generic[rng.random_range(0..generic.len())].clone()
                };
                let mut shown_value = value.to_string();
                if shown_value.len() > 60 {
                    shown_value = format!("{}…", truncate(&shown_value, 60));
                }
                *target = value;
                format!("{shown} = {shown_value}")
            }
        };
        out.push(Case {
            family: "mutant".into(),
            label: format!("mutant {n} of {}: {what}", base.label),
            object,
        });
    }
    out
}

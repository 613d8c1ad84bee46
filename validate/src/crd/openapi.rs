//! What the API server does to a custom resource before its CEL rules:
//! fill in defaults, drop `null`s the schema does not allow (Kubernetes'
//! structural defaulting), refuse fields the schema does not know (strict
//! field validation), and check the value against the OpenAPI schema
//! (types, required fields, limits, patterns, enums, formats, list types,
//! `allOf`/`anyOf`/`oneOf`/`not`).

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::formats;
use super::schema::{ListType, Schema, Type};
use crate::report::{Report, at, idx, key};

/// Fills in defaults under `v` and removes `null` fields that neither
/// allow `null` nor have a default, as the API server does when it decodes
/// a custom resource.
pub(crate) fn default(v: &mut Value, s: &Schema) {
    match v {
        Value::Object(m) => {
            for (k, prop) in &s.properties {
                if let Some(d) = &prop.default
                    && m.get(k).is_none_or(|x| x.is_null() && !prop.nullable)
                {
                    m.insert(k.clone(), d.clone());
                }
            }
            m.retain(|k, x| {
                !x.is_null() || s.child(k).is_none_or(|c| c.nullable || c.default.is_some())
            });
            if let Some(add) = s.additional.as_deref()
                && let Some(d) = &add.default
            {
                for (k, x) in m.iter_mut() {
                    if x.is_null() && !add.nullable && !s.properties.contains_key(k) {
                        *x = d.clone();
                    }
                }
            }
            for (k, x) in m.iter_mut() {
                if let Some(c) = s.child(k) {
                    default(x, c);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = s.items.as_deref() {
                for x in items {
                    if x.is_null()
                        && !item.nullable
                        && let Some(d) = &item.default
                    {
                        *x = d.clone();
                    }
                    default(x, item);
                }
            }
        }
        _ => {}
    }
}

/// The checks' findings, and whether any of them blocks the CEL rules:
/// the API server does not evaluate them over an object with a value of
/// the wrong type, a missing required field, a value outside its enum, or
/// a string, list or map over its limit (its `hasBlockingErr`), which also
/// keeps the rules' cost bounded by the schema's limits.
#[derive(Default)]
pub(crate) struct Findings {
    pub(crate) report: Report,
    pub(crate) blocking: bool,
}

impl Findings {
    /// A finding that keeps the CEL rules from running.
    fn block(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.report.err(path, message);
        self.blocking = true;
    }
}

/// Checks `v` at `path` against `s`. `structural` is false inside
/// `allOf`/`anyOf`/`oneOf`/`not`, whose schemas only validate (they name
/// no fields of their own, so they refuse none).
pub(crate) fn check(v: &Value, s: &Schema, path: &str, f: &mut Findings, structural: bool) {
    check_at(v, s, path, f, structural, false);
}

/// The fields the API server never counts as unknown at an object's top
/// level (its `apiVersion`, `kind` and `metadata`, which it handles
/// itself).
const META_FIELDS: &[&str] = &["apiVersion", "kind", "metadata"];

/// Checks the object `v` itself (its top level) against its root schema.
pub(crate) fn check_root(v: &Value, s: &Schema, f: &mut Findings) {
    check_at(v, s, "", f, true, true);
}

fn check_at(v: &Value, s: &Schema, path: &str, f: &mut Findings, structural: bool, root: bool) {
    if v.is_null() {
        if !s.nullable && (s.ty.is_some() || s.int_or_string) {
            let ty = s.ty.map_or("integer or string", Type::name);
            f.block(path, format!("must be of type {ty}, not null"));
        }
        return;
    }
    if let Err(m) = check_type(v, s) {
        f.block(path, m);
        return;
    }
    if let Some(allowed) = &s.enumeration
        && !allowed.iter().any(|a| json_equal(a, v))
    {
        let names: Vec<String> = allowed.iter().map(show).collect();
        f.block(
            path,
            format!(
                "unsupported value {}: must be one of {}",
                show(v),
                names.join(", ")
            ),
        );
    }
    match v {
        Value::String(x) => check_string(x, s, path, f),
        Value::Number(n) => check_number(n.as_f64().unwrap_or(f64::NAN), s, path, f),
        Value::Array(items) => check_array(items, s, path, f, structural),
        Value::Object(m) => check_object(m, s, path, f, structural, root),
        Value::Bool(_) | Value::Null => {}
    }
    for sub in &s.all_of {
        check(v, sub, path, f, false);
    }
    if !s.any_of.is_empty() && !s.any_of.iter().any(|sub| valid(v, sub)) {
        f.report
            .err(path, "must match at least one of the schemas in anyOf");
    }
    if !s.one_of.is_empty() {
        let n = s.one_of.iter().filter(|sub| valid(v, sub)).count();
        if n != 1 {
            f.report.err(
                path,
                format!("must match exactly one of the schemas in oneOf (matches {n})"),
            );
        }
    }
    if let Some(not) = s.not.as_deref()
        && valid(v, not)
    {
        f.report.err(path, "must not match the schema in not");
    }
}

/// Whether `v` passes `s` as a validation-only schema.
fn valid(v: &Value, s: &Schema) -> bool {
    let mut f = Findings::default();
    check(v, s, "", &mut f, false);
    f.report.is_empty()
}

fn check_type(v: &Value, s: &Schema) -> Result<(), String> {
    if s.int_or_string {
        return if v.is_string() || is_integer(v) {
            Ok(())
        } else {
            Err(format!(
                "must be an integer or a string, not {}",
                json_type(v)
            ))
        };
    }
    let Some(ty) = s.ty else { return Ok(()) };
    let ok = match ty {
        Type::Object => v.is_object(),
        Type::Array => v.is_array(),
        Type::String => v.is_string(),
        Type::Integer => is_integer(v),
        Type::Number => v.is_number(),
        Type::Boolean => v.is_boolean(),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "must be of type {}, not {}",
            ty.name(),
            json_type(v)
        ))
    }
}

/// A JSON number without a fraction (the API server takes `1.0` as an
/// integer too).
pub(crate) fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64()
                || n.is_u64()
                || n.as_f64()
                    .is_some_and(|x| x.is_finite() && x.fract() == 0.0)
        }
        _ => false,
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) if is_integer(v) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// JSON equality with numbers compared by value (`1` equals `1.0`).
pub(crate) fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, a)| y.get(k).is_some_and(|b| json_equal(a, b)))
        }
        _ => a == b,
    }
}

/// A value for a message: strings quoted, short.
fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        let cut: String = s.chars().take(77).collect();
        format!("{cut}...")
    } else {
        s
    }
}

fn check_string(x: &str, s: &Schema, path: &str, f: &mut Findings) {
    let len = x.chars().count() as u64;
    if let Some(max) = s.max_length
        && len > max
    {
        f.block(
            path,
            format!("too long: must have at most {max} characters (has {len})"),
        );
    }
    if let Some(min) = s.min_length
        && len < min
    {
        f.report.err(
            path,
            format!("too short: must have at least {min} characters (has {len})"),
        );
    }
    if let Some((p, re)) = &s.pattern
        && !re.is_match(x)
    {
        f.report
            .err(path, format!("{x:?} does not match the pattern {p:?}"));
    }
    if let Some(format) = &s.format
        && !formats::conforms(format, x)
    {
        f.report.err(path, format!("{x:?} is not a valid {format}"));
    }
}

fn check_number(x: f64, s: &Schema, path: &str, f: &mut Findings) {
    if let Some(min) = s.minimum
        && (x < min || (s.exclusive_minimum && x == min))
    {
        let rel = if s.exclusive_minimum {
            "greater than"
        } else {
            "at least"
        };
        f.report.err(path, format!("must be {rel} {min} (is {x})"));
    }
    if let Some(max) = s.maximum
        && (x > max || (s.exclusive_maximum && x == max))
    {
        let rel = if s.exclusive_maximum {
            "less than"
        } else {
            "at most"
        };
        f.report.err(path, format!("must be {rel} {max} (is {x})"));
    }
    if let Some(m) = s.multiple_of
        && m != 0.0
        && (x / m).fract() != 0.0
    {
        f.report
            .err(path, format!("must be a multiple of {m} (is {x})"));
    }
}

fn check_array(items: &[Value], s: &Schema, path: &str, f: &mut Findings, structural: bool) {
    let n = items.len() as u64;
    if let Some(max) = s.max_items
        && n > max
    {
        f.block(
            path,
            format!("too many items: must have at most {max} (has {n})"),
        );
    }
    if let Some(min) = s.min_items
        && n < min
    {
        f.report.err(
            path,
            format!("too few items: must have at least {min} (has {n})"),
        );
    }
    // Uniqueness by each item's JSON text (keys in order, so equal objects
    // print alike): linear, and `1` and `1.0` stay apart as in Go.
    match &s.list_type {
        ListType::Atomic => {}
        ListType::Set => {
            let mut seen = HashSet::with_capacity(items.len());
            for (i, x) in items.iter().enumerate() {
                if !seen.insert(x.to_string()) {
                    f.report
                        .err(idx(path, i), format!("duplicate value {}", show(x)));
                }
            }
        }
        ListType::Map(keys) => {
            let mut seen = HashSet::with_capacity(items.len());
            for (i, x) in items.iter().enumerate() {
                let k: Vec<&Value> = keys
                    .iter()
                    .map(|k| x.get(k).unwrap_or(&Value::Null))
                    .collect();
                if !seen.insert(serde_json::to_string(&k).unwrap_or_default()) {
                    let shown: Vec<String> = keys
                        .iter()
                        .zip(&k)
                        .map(|(name, v)| format!("{name}={}", show(v)))
                        .collect();
                    f.report.err(
                        idx(path, i),
                        format!("duplicate entry with {}", shown.join(", ")),
                    );
                }
            }
        }
    }
    if let Some(item) = s.items.as_deref() {
        for (i, x) in items.iter().enumerate() {
            check(x, item, &idx(path, i), f, structural);
        }
    }
}

fn check_object(
    m: &Map<String, Value>,
    s: &Schema,
    path: &str,
    f: &mut Findings,
    structural: bool,
    root: bool,
) {
    let n = m.len() as u64;
    if let Some(max) = s.max_properties
        && n > max
    {
        f.block(
            path,
            format!("too many fields: must have at most {max} (has {n})"),
        );
    }
    if let Some(min) = s.min_properties
        && n < min
    {
        f.report.err(
            path,
            format!("too few fields: must have at least {min} (has {n})"),
        );
    }
    for r in &s.required {
        if !m.contains_key(r) {
            f.block(at(path, r), "required");
        }
    }
    for (k, x) in m {
        let child_path = if s.properties.contains_key(k) {
            at(path, k)
        } else {
            key(path, k)
        };
        match s.child(k) {
            Some(c) => check(x, c, &child_path, f, structural),
            None if root && META_FIELDS.contains(&k.as_str()) => {}
            None if structural && !s.keeps_unknown() => {
                f.report.err(at(path, k), "unknown field");
            }
            None => {}
        }
    }
}

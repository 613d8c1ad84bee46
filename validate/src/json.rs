//! Lenient access to the JSON form of a spec. Absent, null and wrongly
//! typed fields all read as the proto default, as they would after the
//! schema layer rejected or defaulted them: the rules never fail on shape.

use serde_json::{Map, Value};

use crate::enums::IstioEnum;

/// The field, unless absent or null.
pub(crate) fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v.get(name).filter(|f| !f.is_null())
}

/// Whether the field is present and not null (a set message or oneof).
pub(crate) fn has(v: &Value, name: &str) -> bool {
    field(v, name).is_some()
}

/// A string field, `""` when absent.
pub(crate) fn str_field<'a>(v: &'a Value, name: &str) -> &'a str {
    v.get(name).and_then(Value::as_str).unwrap_or("")
}

/// A repeated field, empty when absent.
pub(crate) fn list<'a>(v: &'a Value, name: &str) -> &'a [Value] {
    v.get(name)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The strings of a repeated string field; other elements are skipped.
pub(crate) fn strings<'a>(v: &'a Value, name: &str) -> Vec<&'a str> {
    list(v, name).iter().filter_map(Value::as_str).collect()
}

/// A map (or message) field.
pub(crate) fn map<'a>(v: &'a Value, name: &str) -> Option<&'a Map<String, Value>> {
    v.get(name).and_then(Value::as_object)
}

/// A map field with string values, as `(key, value)` pairs.
pub(crate) fn string_map<'a>(v: &'a Value, name: &str) -> Vec<(&'a str, &'a str)> {
    map(v, name)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.as_str(), s)))
                .collect()
        })
        .unwrap_or_default()
}

/// An integer from a JSON number or a decimal string (proto JSON allows
/// both). Values beyond `i64` saturate.
pub(crate) fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|_| i64::MAX))
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0)
                    .map(|f| f.clamp(i64::MIN as f64, i64::MAX as f64) as i64)
            }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// An integer field (also the plain form of `Int32Value`/`UInt32Value`).
pub(crate) fn int_field(v: &Value, name: &str) -> Option<i64> {
    v.get(name).and_then(as_int)
}

/// A floating point field.
pub(crate) fn num_field(v: &Value, name: &str) -> Option<f64> {
    match v.get(name)? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A bool field (also the plain form of `BoolValue`), `false` when absent.
pub(crate) fn bool_field(v: &Value, name: &str) -> bool {
    v.get(name).and_then(Value::as_bool).unwrap_or(false)
}

/// An enum field as its name. Enums arrive as names or numbers; a number
/// reads as the name the descriptor pool gives it, an absent field as the
/// enum's default (number 0), an unknown number as `""`.
pub(crate) fn enum_field<'a>(v: &'a Value, name: &str, e: &'static IstioEnum) -> &'a str {
    match v.get(name) {
        Some(Value::String(s)) => s.as_str(),
        Some(n @ Value::Number(_)) => as_int(n)
            .and_then(|i| i32::try_from(i).ok())
            .and_then(|i| e.name_of(i))
            .unwrap_or(""),
        _ => e.default_name(),
    }
}

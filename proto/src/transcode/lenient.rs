//! What Istio reads in a spec that protobuf JSON refuses, rewritten into
//! the protobuf JSON form before a second reading:
//!
//! * a null map value (`labels: {version: null}`, `customTags: {t: null}`)
//!   is absent: the API server prunes it (no Istio CRD has a nullable map
//!   value) and istiod's JSON decoding skips it or reads an empty message;
//! * a `google.protobuf.Duration` in Go's notation (`10ms`, `1m30s`, `1h`):
//!   the CRDs check durations with CEL's `duration()` and istiod decodes
//!   them with Go's `time.ParseDuration`, while protobuf JSON takes only
//!   seconds (`0.010s`).

use prost_reflect::{Kind, MessageDescriptor};
use serde_json::Value;

/// Rewrites `v` (a JSON form of `desc`) in place; whether anything changed.
pub(super) fn relax(desc: &MessageDescriptor, v: &mut Value) -> bool {
    let Some(obj) = v.as_object_mut() else {
        return false;
    };
    let mut changed = false;
    for (name, value) in obj.iter_mut() {
        let Some(f) = desc
            .fields()
            .find(|f| f.json_name() == name || f.name() == name)
        else {
            continue;
        };
        let Kind::Message(m) = f.kind() else { continue };
        if f.is_map() {
            let Some(map) = value.as_object_mut() else {
                continue;
            };
            let before = map.len();
            map.retain(|_, v| !v.is_null());
            changed |= map.len() != before;
            if let Kind::Message(vm) = m.map_entry_value_field().kind() {
                for item in map.values_mut() {
                    changed |= relax_value(&vm, item);
                }
            }
        } else if f.is_list() {
            for item in value.as_array_mut().into_iter().flatten() {
                changed |= relax_value(&m, item);
            }
        } else {
            changed |= relax_value(&m, value);
        }
    }
    changed
}

/// One value of message type `m`.
fn relax_value(m: &MessageDescriptor, v: &mut Value) -> bool {
    match m.full_name() {
        "google.protobuf.Duration" => {
            let Some(s) = v.as_str() else { return false };
            match parse_go_duration(s).map(seconds) {
                Some(pb) if pb != s => {
                    *v = Value::String(pb);
                    true
                }
                _ => false,
            }
        }
        name if name.starts_with("google.protobuf.") => false,
        _ => relax(m, v),
    }
}

/// `ns` nanoseconds as protobuf JSON (`1.500s`, `-0.000000001s`).
fn seconds(ns: i128) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let ns = ns.unsigned_abs();
    let (secs, frac) = (ns / 1_000_000_000, ns % 1_000_000_000);
    if frac == 0 {
        format!("{sign}{secs}s")
    } else {
        format!("{sign}{secs}.{frac:09}s")
    }
}

/// Parses a duration as Go's `time.ParseDuration` does (`1.5s`, `1h30m`,
/// `250ms`, `-1s`, `0`), into nanoseconds; `None` when Go would refuse it.
pub fn parse_go_duration(s: &str) -> Option<i128> {
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        if (int.is_empty() && frac.is_empty()) || frac.contains('.') || int.len() > 20 {
            return None;
        }
        let int_v: i128 = if int.is_empty() { 0 } else { int.parse().ok()? };
        let mut part = int_v.checked_mul(scale)?;
        // Fractions beyond nanosecond resolution are dropped.
        let mut unit_scale = scale;
        for d in frac.bytes().take(18) {
            unit_scale /= 10;
            part = part.checked_add(i128::from(d - b'0') * unit_scale)?;
        }
        total = total.checked_add(part)?;
        rest = tail;
    }
    Some(if neg { -total } else { total })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_become_seconds() {
        assert_eq!(parse_go_duration("1h30m"), Some(5_400_000_000_000));
        assert_eq!(parse_go_duration("10"), None);
        assert_eq!(seconds(10_000_000), "0.010000000s");
        assert_eq!(seconds(-1_500_000_000), "-1.500000000s");
        assert_eq!(seconds(60_000_000_000), "60s");
    }
}

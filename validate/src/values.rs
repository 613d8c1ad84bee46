//! Scalar formats the rules share: durations and percentages.

use serde_json::Value;

use crate::json::{field, int_field, num_field};
use crate::report::{Report, at};

/// Parses a duration: protobuf JSON (`1.5s`) or Go style (`1h30m`, `250ms`),
/// into nanoseconds.
pub(crate) fn parse_duration(s: &str) -> Option<i128> {
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

const MILLI: i128 = 1_000_000;

/// A duration field, if set: at least 1ms, to millisecond precision.
pub(crate) fn check_duration(r: &mut Report, path: &str, v: &Value, name: &str) {
    let Some(d) = field(v, name) else { return };
    let p = at(path, name);
    let Some(s) = d.as_str() else { return };
    match parse_duration(s) {
        None => r.err(p, format!("{s:?} is not a valid duration")),
        Some(ns) if ns < MILLI => r.err(p, "duration must be at least 1ms"),
        Some(ns) if ns % MILLI != 0 => r.err(p, "only durations to ms precision are supported"),
        Some(_) => {}
    }
}

/// A `Percent` message (`{value: 12.5}`): 0, or in [0.0001, 100].
pub(crate) fn check_percent_message(r: &mut Report, path: &str, v: &Value, name: &str) {
    let Some(p) = field(v, name) else { return };
    if let Some(val) = num_field(p, "value")
        && (!(0.0..=100.0).contains(&val) || (val > 0.0 && val < 0.0001))
    {
        r.err(
            at(&at(path, name), "value"),
            format!("percentage {val} is neither 0 nor in the range [0.0001, 100]"),
        );
    }
}

/// An integer percentage in 0..=100.
pub(crate) fn check_int_percent(r: &mut Report, path: &str, v: &Value, name: &str) {
    if let Some(n) = int_field(v, name)
        && !(0..=100).contains(&n)
    {
        r.err(
            at(path, name),
            format!("percentage {n} is not in the range 0..100"),
        );
    }
}

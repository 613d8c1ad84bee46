//! Scalar formats the rules share: durations and percentages.

use serde_json::Value;

use crate::json::{field, int_field, num_field};
use crate::report::{Report, at};

/// Parses a duration: protobuf JSON (`1.5s`) or Go style (`1h30m`, `250ms`),
/// into nanoseconds (as the transcoder reads them).
pub(crate) fn parse_duration(s: &str) -> Option<i128> {
    meshhub_proto::transcode::parse_go_duration(s)
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

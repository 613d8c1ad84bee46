//! Where routes send traffic: destinations (host, subset, port) and the
//! weights of several.

use serde_json::Value;

use crate::json::{field, int_field, str_field};
use crate::names::{is_hostname_label, validate_wildcard_domain};
use crate::net::validate_port;
use crate::report::{Report, at, idx};

/// A destination: a concrete host (a leading wildcard is allowed, `*` is
/// not), a subset name that is a DNS label, a valid port.
pub(crate) fn check_destination(r: &mut Report, path: &str, d: &Value) {
    let host = str_field(d, "host");
    if host == "*" {
        r.err(at(path, "host"), "invalid destination host *");
    } else {
        r.check(at(path, "host"), validate_wildcard_domain(host));
    }
    let subset = str_field(d, "subset");
    if !subset.is_empty() && !is_hostname_label(subset) {
        r.err(
            at(path, "subset"),
            format!("invalid subset name {subset:?}"),
        );
    }
    if let Some(port) = field(d, "port") {
        let n = int_field(port, "number").unwrap_or(0);
        r.check(at(&at(path, "port"), "number"), validate_port(n));
    }
}

/// Weighted destinations. Istio normalises weights, so they need not sum to
/// 100 (Istio 1.5 demanded exactly 100); they must not be negative, and
/// several destinations must not all weigh 0.
pub(crate) fn check_weights(r: &mut Report, path: &str, routes: &[Value]) {
    let mut total: i64 = 0;
    for (i, rd) in routes.iter().enumerate() {
        let w = int_field(rd, "weight").unwrap_or(0);
        if w < 0 {
            r.err(
                at(&idx(path, i), "weight"),
                format!("weight {w} must not be negative"),
            );
        }
        total = total.saturating_add(w);
    }
    if routes.len() > 1 && total == 0 {
        r.err(path, "total destination weight must not be 0");
    }
}

pub(crate) fn check_route_destinations(r: &mut Report, path: &str, routes: &[Value]) {
    for (i, rd) in routes.iter().enumerate() {
        let p = idx(path, i);
        if !rd.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        match field(rd, "destination") {
            None => r.err(at(&p, "destination"), "is required"),
            Some(d) => check_destination(r, &at(&p, "destination"), d),
        }
    }
    check_weights(r, path, routes);
}

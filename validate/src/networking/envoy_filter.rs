//! EnvoyFilter rules: config patches (their values decoded against Envoy's
//! types, see [`crate::envoy`]); the pre-1.6 `filters` API is refused.

use serde_json::Value;

use crate::enums::{APPLY_TO, PATCH_CONTEXT, PATCH_OPERATION};
use crate::http::validate_regex;
use crate::json::{enum_field, field, has, int_field, list, str_field};
use crate::report::{Report, at, idx};
use crate::selectors::check_selector_labels;

/// Envoy's HTTP connection manager filter, old and new names.
const HCM_NAMES: &[&str] = &[
    "envoy.filters.network.http_connection_manager",
    "envoy.http_connection_manager",
];

/// Checks an EnvoyFilter spec.
pub(crate) fn check(r: &mut Report, spec: &Value) {
    if let Some(sel) = field(spec, "workloadSelector") {
        check_selector_labels(r, "spec.workloadSelector", sel, "labels");
    }
    // The CRD: a target reference names its kind (a DNS-label-like word)
    // and its object; an empty or over-long one is the CRD's minLength and
    // maxLength (limits.tsv).
    for (i, t) in list(spec, "targetRefs").iter().enumerate() {
        let p = idx("spec.targetRefs", i);
        let kind = str_field(t, "kind");
        if !has(t, "kind") {
            r.err(at(&p, "kind"), "is required");
        } else if !kind.is_empty() && !is_kind_word(kind) {
            r.err(at(&p, "kind"), format!("{kind:?} is not a valid kind"));
        }
        if !has(t, "name") {
            r.err(at(&p, "name"), "is required");
        }
    }
    for (i, cp) in list(spec, "configPatches").iter().enumerate() {
        check_config_patch(r, &idx("spec.configPatches", i), cp);
    }
    // The pre-1.6 API is gone from Istio's CRD: the API server refuses
    // both fields as unknown (strict field validation).
    for f in ["filters", "workloadLabels"] {
        if has(spec, f) {
            r.err(
                at("spec", f),
                "unknown field (the pre-1.6 EnvoyFilter API is not in Istio's CRD; use configPatches and workloadSelector)",
            );
        }
    }
}

/// `^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`, the CRD's pattern for kinds.
fn is_kind_word(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphabetic)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
}

fn check_config_patch(r: &mut Report, path: &str, cp: &Value) {
    if !cp.is_object() {
        r.err(path, "must not be null");
        return;
    }
    // Istio 1.30+: the CRD's rules on a waypoint match, and istiod checks
    // nothing else of a WAYPOINT patch (its validation skips them).
    if let Some(m) = field(cp, "match") {
        let mp = at(path, "match");
        let waypoint_context = enum_field(m, "context", &PATCH_CONTEXT) == "WAYPOINT";
        if waypoint_context != has(m, "waypoint") {
            r.err(&mp, "only support waypointMatch when context is WAYPOINT");
        }
        if let Some(w) = field(m, "waypoint")
            && has(w, "portNumber")
            && !int_field(w, "portNumber").is_some_and(|n| (1..=65535).contains(&n))
        {
            r.err(
                at(&at(&mp, "waypoint"), "portNumber"),
                "port must be between 1-65535",
            );
        }
        if waypoint_context {
            return;
        }
    }
    let apply_to = enum_field(cp, "applyTo", &APPLY_TO);
    if apply_to == "INVALID" {
        r.err(at(path, "applyTo"), "is required");
        return;
    }
    let Some(patch) = field(cp, "patch") else {
        r.err(at(path, "patch"), "is required");
        return;
    };
    let op = enum_field(patch, "operation", &PATCH_OPERATION);
    if op == "INVALID" {
        r.err(at(&at(path, "patch"), "operation"), "is required");
        return;
    }
    if op != "REMOVE" && !has(patch, "value") {
        r.err(
            at(&at(path, "patch"), "value"),
            "is required for every operation but REMOVE",
        );
        return;
    }
    if let Some(value) = field(patch, "value") {
        crate::envoy::check_patch_value(r, &at(&at(path, "patch"), "value"), apply_to, value);
    }
    let Some(m) = field(cp, "match") else { return };
    let mp = at(path, "match");
    if let Some(proxy) = field(m, "proxy") {
        let v = str_field(proxy, "proxyVersion");
        if !v.is_empty() {
            r.check(at(&at(&mp, "proxy"), "proxyVersion"), validate_regex(v));
        }
    }
    let listener = field(m, "listener");
    let route = field(m, "routeConfiguration");
    let cluster = field(m, "cluster");
    let any_object = listener.is_some() || route.is_some() || cluster.is_some();
    match apply_to {
        "LISTENER" | "FILTER_CHAIN" | "NETWORK_FILTER" | "HTTP_FILTER" if any_object => {
            let Some(l) = listener else {
                r.err(&mp, format!("applyTo {apply_to} needs a listener match"));
                return;
            };
            let Some(filter) = field(l, "filterChain").and_then(|fc| field(fc, "filter")) else {
                return;
            };
            let fp = at(&at(&at(&mp, "listener"), "filterChain"), "filter");
            let name = str_field(filter, "name");
            if name.is_empty() {
                r.err(at(&fp, "name"), "a filter match needs a name");
                return;
            }
            if field(filter, "subFilter").is_some_and(|sf| sf.is_object()) {
                let sp = at(&fp, "subFilter");
                if apply_to != "HTTP_FILTER" {
                    r.err(&sp, "a subFilter match needs applyTo HTTP_FILTER");
                } else if !HCM_NAMES.contains(&name) {
                    r.err(
                        &sp,
                        "a subFilter match needs a filter match on envoy.filters.network.http_connection_manager",
                    );
                } else if field(filter, "subFilter")
                    .is_some_and(|sf| str_field(sf, "name").is_empty())
                {
                    r.err(at(&sp, "name"), "a subFilter match needs a name");
                }
            }
        }
        "ROUTE_CONFIGURATION" | "VIRTUAL_HOST" | "HTTP_ROUTE" if any_object && route.is_none() => {
            r.err(
                &mp,
                format!("applyTo {apply_to} needs a routeConfiguration match"),
            );
        }
        "CLUSTER" if any_object && cluster.is_none() => {
            r.err(&mp, "applyTo CLUSTER needs a cluster match");
        }
        _ => {}
    }
}

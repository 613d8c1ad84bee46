//! DestinationRule rules: host, subsets, traffic policies (outlier
//! detection, load balancing, locality, upstream TLS, tunnels).

use serde_json::Value;

use crate::enums::CLIENT_TLS_MODE;
use crate::hosts::check_export_to;
use crate::json::{
    as_int, bool_field, enum_field, field, has, int_field, list, map, str_field, strings,
};
use crate::names::{is_hostname_label, validate_fqdn, validate_wildcard_domain};
use crate::net::{is_ip, validate_port};
use crate::report::{Report, at, idx, key};
use crate::selectors::{check_labels, check_selector_labels};
use crate::values::{check_duration, check_int_percent};

use super::connection_pool::check_connection_pool;

/// Maglev table sizes must stay below this prime.
const MAGLEV_MAX_TABLE: i64 = 5_000_011;

/// Checks a DestinationRule spec.
pub(crate) fn check(r: &mut Report, spec: &Value, namespace: &str) {
    let host = str_field(spec, "host");
    r.check("spec.host", validate_wildcard_domain(host));
    if let Some(tp) = field(spec, "trafficPolicy") {
        check_traffic_policy(r, "spec.trafficPolicy", tp);
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, subset) in list(spec, "subsets").iter().enumerate() {
        let p = idx("spec.subsets", i);
        if !subset.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        let name = str_field(subset, "name");
        if name.is_empty() {
            r.err(at(&p, "name"), "must not be empty");
        } else if !is_hostname_label(name) {
            r.err(at(&p, "name"), format!("invalid subset name {name:?}"));
        } else if names.contains(&name) {
            r.err(at(&p, "name"), format!("duplicate subset name {name:?}"));
        }
        names.push(name);
        check_labels(r, &p, subset, "labels");
        if let Some(tp) = field(subset, "trafficPolicy") {
            check_traffic_policy(r, &at(&p, "trafficPolicy"), tp);
        }
    }
    check_export_to(r, spec, namespace, false);
    if let Some(sel) = field(spec, "workloadSelector") {
        check_selector_labels(r, "spec.workloadSelector", sel, "matchLabels");
        // A DestinationRule for chosen workloads only makes sense in its
        // own namespace.
        let others = strings(spec, "exportTo")
            .into_iter()
            .any(|e| e != "." && e != namespace);
        if others {
            r.err(
                "spec.exportTo",
                "a destination rule with a workload selector cannot be exported beyond its namespace",
            );
        }
    }
}

fn check_traffic_policy(r: &mut Report, path: &str, tp: &Value) {
    const FIELDS: &[&str] = &[
        "outlierDetection",
        "connectionPool",
        "loadBalancer",
        "tls",
        "portLevelSettings",
        "tunnel",
        "proxyProtocol",
    ];
    // An empty list reads as unset, as it does after Go's JSON decoding.
    let set = |f: &&str| match field(tp, f) {
        Some(Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
        None => false,
    };
    if !FIELDS.iter().any(set) && !has(tp, "retryBudget") {
        r.err(path, "a traffic policy must set at least one field");
        return;
    }
    if has(tp, "tunnel") && has(tp, "proxyProtocol") {
        r.err(path, "tunnel and proxyProtocol must not be set together");
        return;
    }
    check_policy_parts(r, path, tp);
    // The CRD: a retry budget's percent (a DoubleValue) is in 0..100.
    if let Some(pct) = field(tp, "retryBudget").and_then(|b| wrapped_num(b, "percent"))
        && !(0.0..=100.0).contains(&pct)
    {
        r.err(
            at(&at(path, "retryBudget"), "percent"),
            format!("percentage {pct} is not in the range 0..100"),
        );
    }
    for (i, pl) in list(tp, "portLevelSettings").iter().enumerate() {
        let p = idx(&at(path, "portLevelSettings"), i);
        if !pl.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        // Istio checks no range here (the CRD neither): a port outside
        // 1..65535 simply matches nothing.
        if field(pl, "port").is_none() {
            r.err(at(&p, "port"), "a port traffic policy needs a port");
        }
        if !["outlierDetection", "connectionPool", "loadBalancer", "tls"]
            .iter()
            .any(|f| has(pl, f))
        {
            r.err(&p, "a port traffic policy must set at least one field");
        } else {
            check_policy_parts(r, &p, pl);
        }
    }
    if let Some(t) = field(tp, "tunnel") {
        let p = at(path, "tunnel");
        let proto = str_field(t, "protocol");
        if !proto.is_empty() && proto != "CONNECT" && proto != "POST" {
            r.err(at(&p, "protocol"), "must be \"CONNECT\" or \"POST\"");
        }
        let target = str_field(t, "targetHost");
        if validate_fqdn(target).is_err() && !is_ip(target) {
            r.err(at(&p, "targetHost"), "must be a valid FQDN or IP address");
        }
        r.check(
            at(&p, "targetPort"),
            validate_port(int_field(t, "targetPort").unwrap_or(0)),
        );
    }
}

/// The parts a traffic policy and a port-level policy share.
fn check_policy_parts(r: &mut Report, path: &str, tp: &Value) {
    let outlier = field(tp, "outlierDetection");
    if let Some(o) = outlier {
        check_outlier(r, &at(path, "outlierDetection"), o);
    }
    if let Some(cp) = field(tp, "connectionPool") {
        check_connection_pool(r, &at(path, "connectionPool"), cp);
    }
    if let Some(lb) = field(tp, "loadBalancer") {
        check_load_balancer(r, &at(path, "loadBalancer"), lb);
    }
    if let Some(tls) = field(tp, "tls") {
        check_client_tls(r, &at(path, "tls"), tls);
    }
}

fn check_outlier(r: &mut Report, path: &str, o: &Value) {
    check_duration(r, path, o, "baseEjectionTime");
    check_duration(r, path, o, "interval");
    if !bool_field(o, "splitExternalLocalOriginErrors")
        && int_field(o, "consecutiveLocalOriginFailures").is_some_and(|n| n > 0)
    {
        r.err(
            at(path, "consecutiveLocalOriginFailures"),
            "needs splitExternalLocalOriginErrors to be true",
        );
    }
    for f in ["maxEjectionPercent", "minHealthPercent"] {
        check_int_percent(r, path, o, f);
    }
    // Istio 1.30+, the CRD's ranges.
    for (i, code) in list(o, "outlierDetectionHttpErrorCodes").iter().enumerate() {
        if as_int(code).is_some_and(|c| !(100..=599).contains(&c)) {
            r.err(
                idx(&at(path, "outlierDetectionHttpErrorCodes"), i),
                "must be an HTTP status code in the range 100..599",
            );
        }
    }
    if let Some(t) = wrapped_int(o, "failurePercentageThreshold")
        && !(0..=100).contains(&t)
    {
        r.err(
            at(path, "failurePercentageThreshold"),
            format!("percentage {t} is not in the range 0..100"),
        );
    }
}

/// A `UInt32Value` field: an integer, or `{value: n}`.
fn wrapped_int(v: &Value, name: &str) -> Option<i64> {
    match field(v, name)? {
        Value::Object(o) => o.get("value").and_then(as_int),
        other => as_int(other),
    }
}

/// Istio's primality test for Maglev table sizes (which calls 1 prime).
fn is_prime(x: i64) -> bool {
    if x < 1 {
        return false;
    }
    if x < 4 {
        return true;
    }
    if x % 2 == 0 {
        return false;
    }
    let mut f = 3;
    while f * f <= x {
        if x % f == 0 {
            return false;
        }
        f += 2;
    }
    true
}

fn check_load_balancer(r: &mut Report, path: &str, lb: &Value) {
    if let Some(ch) = field(lb, "consistentHash") {
        let p = at(path, "consistentHash");
        if let Some(cookie) = field(ch, "httpCookie")
            && str_field(cookie, "name").is_empty()
        {
            r.err(
                at(&at(&p, "httpCookie"), "name"),
                "is required for httpCookie",
            );
        }
        let min_ring = int_field(ch, "minimumRingSize").unwrap_or(0);
        if min_ring != 0 && (has(ch, "ringHash") || has(ch, "maglev")) {
            r.err(
                &p,
                "only one of minimumRingSize and maglev/ringHash can be set",
            );
        }
        if let Some(m) = field(ch, "maglev") {
            let size = int_field(m, "tableSize").unwrap_or(0);
            let tp = at(&at(&p, "maglev"), "tableSize");
            if size == 0 {
                r.err(tp, "must be set for maglev");
            } else if size >= MAGLEV_MAX_TABLE {
                r.err(tp, "must be less than 5000011 for maglev");
            } else if !is_prime(size) {
                r.err(tp, "must be a prime number for maglev");
            }
        }
    }
    if let Some(l) = field(lb, "localityLbSetting") {
        check_locality_lb(r, &at(path, "localityLbSetting"), l);
    }
    if let Some(z) = field(lb, "zoneAwareLbSetting") {
        if has(lb, "localityLbSetting") {
            r.err(
                path,
                "only one of localityLbSetting and zoneAwareLbSetting can be set",
            );
        }
        check_zone_aware_lb(r, &at(path, "zoneAwareLbSetting"), z);
    }
    check_duration(r, path, lb, "warmupDurationSecs");
    if let Some(w) = field(lb, "warmup") {
        let p = at(path, "warmup");
        if has(w, "duration") {
            check_duration(r, &p, w, "duration");
        } else {
            r.err(at(&p, "duration"), "is required");
        }
        if let Some(pct) = wrapped_num(w, "minimumPercent")
            && !(0.0..=100.0).contains(&pct)
        {
            r.err(at(&p, "minimumPercent"), "must be in the range 0..100");
        }
        // Istio 1.31's rule (istio/istio#60611); releases before refuse
        // values below 1, which analysis says per cluster (MH0002, a value
        // row of the since table) rather than validation for all.
        if let Some(a) = wrapped_num(w, "aggression")
            && a <= 0.0
        {
            r.err(at(&p, "aggression"), "must be greater than 0");
        }
    }
}

/// A `DoubleValue` field: a number, or `{value: n}`.
fn wrapped_num(v: &Value, name: &str) -> Option<f64> {
    match field(v, name)? {
        Value::Number(n) => n.as_f64(),
        Value::Object(o) => o.get("value").and_then(Value::as_f64),
        _ => None,
    }
}

fn check_locality_lb(r: &mut Report, path: &str, l: &Value) {
    let distribute = list(l, "distribute");
    let failover = list(l, "failover");
    if !distribute.is_empty() && !failover.is_empty() {
        r.err(path, "cannot set both distribute and failover");
        return;
    }
    let mut sources = Vec::new();
    for (i, d) in distribute.iter().enumerate() {
        let p = idx(&at(path, "distribute"), i);
        sources.push(str_field(d, "from"));
        let mut total = 0i64;
        let mut targets = Vec::new();
        for (loc, w) in map(d, "to").into_iter().flatten() {
            targets.push(loc.as_str());
            let w = as_int(w).unwrap_or(0);
            if !(1..=100).contains(&w) {
                r.err(
                    key(&at(&p, "to"), loc),
                    "locality weight must be in the range 1..100",
                );
            }
            total = total.saturating_add(w);
        }
        if total != 100 {
            r.err(
                at(&p, "to"),
                format!("total locality weight {total} != 100"),
            );
        }
        r.check(at(&p, "to"), validate_localities(&targets));
    }
    r.check(at(path, "distribute"), validate_localities(&sources));
    for (i, f) in failover.iter().enumerate() {
        let p = idx(&at(path, "failover"), i);
        let (from, to) = (str_field(f, "from"), str_field(f, "to"));
        if from == to {
            r.err(&p, "failover from and to must be different regions");
        }
        if from.contains('/') || to.contains('/') {
            r.err(&p, "failover may only name regions");
        }
        if from.contains('*') || to.contains('*') {
            r.err(&p, "failover regions must not contain a * wildcard");
        }
    }
}

/// Topology labels zone aware load balancing orders by itself, which
/// `failoverPriority` must not name (istiod, 1.30+).
const ZONE_AWARE_TOPOLOGY_LABELS: &[&str] = &[
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.istio.io/subzone",
];

/// Istio's `ValidateZoneAwareLbSetting` (1.30+) and the CRD's minimum of
/// `minClusterSize`. (istiod also warns when failover is set without
/// outlier detection; meshhub reports errors only.)
fn check_zone_aware_lb(r: &mut Report, path: &str, z: &Value) {
    for (i, label) in strings(z, "failoverPriority").iter().enumerate() {
        if ZONE_AWARE_TOPOLOGY_LABELS.contains(label) {
            r.err(
                idx(&at(path, "failoverPriority"), i),
                format!("must not use topology label {label:?}; region- and zone-level routing are handled automatically"),
            );
        }
    }
    for (i, f) in list(z, "failover").iter().enumerate() {
        let p = idx(&at(path, "failover"), i);
        let (from, to) = (str_field(f, "from"), str_field(f, "to"));
        if from == to {
            r.err(&p, "failover from and to must be different regions");
        }
        if from.contains('/') || to.contains('/') {
            r.err(
                &p,
                "failover may only name regions; zone and subzone failover are automatic",
            );
        }
        if from.contains('*') || to.contains('*') {
            r.err(&p, "failover regions must not contain a * wildcard");
        }
    }
    if let Some(n) = wrapped_int(z, "minClusterSize")
        && n < 1
    {
        r.err(at(path, "minClusterSize"), "must be at least 1");
    }
}

/// Localities (`region/zone/subzone`, a trailing `*` allowed) must be well
/// formed and must not overlap each other.
fn validate_localities(locs: &[&str]) -> Result<(), String> {
    let mut seen: Vec<Vec<&str>> = Vec::new();
    for loc in locs {
        let stars = loc.matches('*').count();
        if stars > 1 || (stars == 1 && !loc.ends_with('*')) {
            return Err(format!(
                "locality {loc:?}: at most one wildcard '*', and only at the end"
            ));
        }
        let parts: Vec<&str> = loc.splitn(3, '/').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(format!(
                "locality {loc:?} must not contain empty region/zone/subzone"
            ));
        }
        // Two localities overlap when one is a prefix of the other, `*`
        // standing for everything below its level.
        let covers = |a: &[&str], b: &[&str]| {
            a.iter()
                .zip(b.iter())
                .all(|(x, y)| x == y || *x == "*" || *y == "*")
        };
        if seen.iter().any(|s| covers(s, &parts)) {
            return Err(format!("locality {loc:?} overlaps with a previous one"));
        }
        seen.push(parts);
    }
    Ok(())
}

/// Upstream TLS settings.
fn check_client_tls(r: &mut Report, path: &str, tls: &Value) {
    let mode = enum_field(tls, "mode", &CLIENT_TLS_MODE);
    let s = |f| !str_field(tls, f).is_empty();
    let sans = has(tls, "subjectAltNames");
    if bool_field(tls, "insecureSkipVerify") {
        if mode == "SIMPLE" && (s("caCertificates") || s("credentialName") || sans) {
            r.err(
                path,
                "cannot set caCertificates, credentialName or subjectAltNames when insecureSkipVerify is true",
            );
        }
        if mode == "MUTUAL" && (s("caCertificates") || sans) {
            r.err(
                path,
                "cannot set caCertificates or subjectAltNames when insecureSkipVerify is true",
            );
        }
    }
    if (mode == "SIMPLE" || mode == "MUTUAL") && s("credentialName") {
        if s("clientCertificate") || s("caCertificates") || s("privateKey") || s("caCrl") {
            r.err(
                path,
                "cannot set client certificate, private key, CA certificates or CA CRL when credentialName is set",
            );
        }
        return;
    }
    if mode == "MUTUAL" {
        if !s("clientCertificate") {
            r.err(at(path, "clientCertificate"), "is required for MUTUAL TLS");
        }
        if !s("privateKey") {
            r.err(at(path, "privateKey"), "is required for MUTUAL TLS");
        }
    }
}

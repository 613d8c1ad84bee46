//! Rules for the `networking.istio.io` kinds other than VirtualService:
//! DestinationRule, Gateway, ServiceEntry, Sidecar, EnvoyFilter,
//! WorkloadEntry, WorkloadGroup and ProxyConfig.

use serde_json::Value;

use super::common::{
    Protocol, Report, UNIX_PREFIX, at, bool_field, check_duration, check_export_to, check_labels,
    check_namespaced_host, check_port_field, check_selector_labels, enum_field, field, has, idx,
    int_field, is_dns1123_label, is_ip, key, list, map, str_field, strings, validate_fqdn,
    validate_header_name, validate_ip, validate_ip_subnet, validate_port, validate_port_name,
    validate_protocol, validate_regex, validate_unix_address, validate_wildcard_domain,
};
use super::virtual_service::check_destination;

const SERVER_TLS_MODES: &[&str] = &[
    "PASSTHROUGH",
    "SIMPLE",
    "MUTUAL",
    "AUTO_PASSTHROUGH",
    "ISTIO_MUTUAL",
    "OPTIONAL_MUTUAL",
];
const CLIENT_TLS_MODES: &[&str] = &["DISABLE", "SIMPLE", "MUTUAL", "ISTIO_MUTUAL"];
const RESOLUTIONS: &[&str] = &["NONE", "STATIC", "DNS", "DNS_ROUND_ROBIN"];
const H2_UPGRADE_POLICIES: &[&str] = &["DEFAULT", "DO_NOT_UPGRADE", "UPGRADE"];
const OUTBOUND_MODES: &[&str] = &["REGISTRY_ONLY", "ALLOW_ANY"];
const CAPTURE_MODES: &[&str] = &["DEFAULT", "IPTABLES", "NONE"];
const APPLY_TO: &[&str] = &[
    "INVALID",
    "LISTENER",
    "FILTER_CHAIN",
    "NETWORK_FILTER",
    "HTTP_FILTER",
    "ROUTE_CONFIGURATION",
    "VIRTUAL_HOST",
    "HTTP_ROUTE",
    "CLUSTER",
    "EXTENSION_CONFIG",
    "BOOTSTRAP",
    "LISTENER_FILTER",
];
const PATCH_OPERATIONS: &[&str] = &[
    "INVALID",
    "MERGE",
    "ADD",
    "REMOVE",
    "INSERT_BEFORE",
    "INSERT_AFTER",
    "INSERT_FIRST",
    "REPLACE",
];
const LEGACY_FILTER_TYPES: &[&str] = &["INVALID", "HTTP", "NETWORK"];
const LEGACY_INSERT_INDEX: &[&str] = &["FIRST", "LAST", "BEFORE", "AFTER"];

/// Envoy's HTTP connection manager filter, old and new names.
const HCM_NAMES: &[&str] = &[
    "envoy.filters.network.http_connection_manager",
    "envoy.http_connection_manager",
];

/// Maglev table sizes must stay below this prime.
const MAGLEV_MAX_TABLE: i64 = 5_000_011;

// ---------------------------------------------------------------------------
// DestinationRule

/// Checks a DestinationRule spec.
pub(crate) fn destination_rule(r: &mut Report, spec: &Value, namespace: &str) {
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
        } else if !is_dns1123_label(name) {
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
    if !FIELDS.iter().any(|f| has(tp, f)) {
        r.err(path, "a traffic policy must set at least one field");
        return;
    }
    if has(tp, "tunnel") && has(tp, "proxyProtocol") {
        r.err(path, "tunnel and proxyProtocol must not be set together");
        return;
    }
    check_policy_parts(r, path, tp);
    for (i, pl) in list(tp, "portLevelSettings").iter().enumerate() {
        let p = idx(&at(path, "portLevelSettings"), i);
        if !pl.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        match field(pl, "port") {
            None => r.err(at(&p, "port"), "a port traffic policy needs a port"),
            Some(port) => check_port_field(r, &at(&p, "port"), port, "number"),
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
        super::common::check_int_percent(r, path, o, f);
    }
}

/// Connection pool settings (DestinationRule and Sidecar).
fn check_connection_pool(r: &mut Report, path: &str, cp: &Value) {
    let http = field(cp, "http");
    let tcp = field(cp, "tcp");
    if http.is_none() && tcp.is_none() {
        r.err(path, "a connection pool must set http or tcp");
        return;
    }
    if let Some(h) = http {
        let p = at(path, "http");
        for f in [
            "http1MaxPendingRequests",
            "http2MaxRequests",
            "maxRequestsPerConnection",
            "maxRetries",
            "maxConcurrentStreams",
        ] {
            if int_field(h, f).is_some_and(|n| n < 0) {
                r.err(at(&p, f), "must not be negative");
            }
        }
        check_duration(r, &p, h, "idleTimeout");
        if enum_field(h, "h2UpgradePolicy", H2_UPGRADE_POLICIES) == "UPGRADE"
            && bool_field(h, "useClientProtocol")
        {
            r.err(
                at(&p, "useClientProtocol"),
                "must not be true when h2UpgradePolicy is UPGRADE",
            );
        }
    }
    if let Some(t) = tcp {
        let p = at(path, "tcp");
        if int_field(t, "maxConnections").is_some_and(|n| n < 0) {
            r.err(at(&p, "maxConnections"), "must not be negative");
        }
        for f in ["connectTimeout", "maxConnectionDuration", "idleTimeout"] {
            check_duration(r, &p, t, f);
        }
        if let Some(ka) = field(t, "tcpKeepalive") {
            let kp = at(&p, "tcpKeepalive");
            check_duration(r, &kp, ka, "time");
            check_duration(r, &kp, ka, "interval");
        }
    }
}

/// Envoy's primality test for Maglev table sizes.
fn is_prime(x: i64) -> bool {
    if x < 2 {
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
    check_duration(r, path, lb, "warmupDurationSecs");
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
            let w = super::common::as_int(w).unwrap_or(0);
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
    let mode = enum_field(tls, "mode", CLIENT_TLS_MODES);
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

// ---------------------------------------------------------------------------
// Gateway

/// Checks a Gateway spec; `name` is the object's name, which must be a DNS
/// label because routes refer to it as `namespace/name`.
pub(crate) fn gateway(r: &mut Report, spec: &Value, name: &str) {
    if !is_dns1123_label(name) {
        r.err("metadata.name", format!("invalid gateway name {name:?}"));
    }
    let servers = list(spec, "servers");
    if servers.is_empty() {
        r.err("spec.servers", "a gateway must have at least one server");
    }
    let mut port_names: Vec<&str> = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        let p = idx("spec.servers", i);
        if !server.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        check_server(r, &p, server);
        if let Some(port) = field(server, "port") {
            let pname = str_field(port, "name");
            if port_names.contains(&pname) {
                r.err(
                    at(&at(&p, "port"), "name"),
                    format!("port names of servers must be unique: duplicate {pname:?}"),
                );
            }
            port_names.push(pname);
        }
    }
}

fn check_server(r: &mut Report, path: &str, server: &Value) {
    let hosts = strings(server, "hosts");
    if hosts.is_empty() {
        r.err(at(path, "hosts"), "a server must have at least one host");
    }
    for (i, h) in hosts.iter().enumerate() {
        check_namespaced_host(r, &idx(&at(path, "hosts"), i), h, true);
    }
    let bind = str_field(server, "bind");
    let port = field(server, "port");
    let mut port_ok = true;
    match port {
        None => {
            r.err(at(path, "port"), "is required");
            port_ok = false;
        }
        Some(port) => {
            let pp = at(path, "port");
            let proto = str_field(port, "protocol");
            if Protocol::parse(proto).is_none() {
                r.err(
                    at(&pp, "protocol"),
                    format!("invalid protocol {proto:?}; use HTTP, HTTPS, HTTP2, GRPC, GRPC-WEB, TLS, TCP, MONGO, REDIS or MYSQL"),
                );
                port_ok = false;
            }
            let number = int_field(port, "number").unwrap_or(0);
            if (number != 0 || !bind.starts_with(UNIX_PREFIX))
                && let Err(e) = validate_port(number)
            {
                r.err(at(&pp, "number"), e);
                port_ok = false;
            }
            if int_field(port, "targetPort").is_some_and(|n| n > 0) {
                r.err(
                    at(&pp, "targetPort"),
                    "targetPort has no effect on gateways",
                );
                port_ok = false;
            }
            if str_field(port, "name").is_empty() {
                r.err(at(&pp, "name"), "must be set");
                port_ok = false;
            }
        }
    }
    if let Some(path_part) = bind.strip_prefix(UNIX_PREFIX) {
        r.check(at(path, "bind"), validate_unix_address(path_part));
        if port
            .and_then(|p| int_field(p, "number"))
            .is_some_and(|n| n != 0)
        {
            r.err(
                at(&at(path, "port"), "number"),
                "must be 0 for a unix domain socket bind",
            );
        }
    } else if !bind.is_empty() {
        r.check(at(path, "bind"), validate_ip(bind));
    }
    let tls = field(server, "tls");
    if let Some(t) = tls {
        check_server_tls(r, &at(path, "tls"), t);
    }
    if !port_ok {
        return;
    }
    let Some(proto) = port.and_then(|p| Protocol::parse(str_field(p, "protocol"))) else {
        return;
    };
    match tls {
        None if proto.is_tls() => r.err(
            at(path, "tls"),
            "a server on an HTTPS or TLS port must have TLS settings",
        ),
        Some(t) if !proto.is_tls() => {
            if proto.is_http() {
                // Plain HTTP servers may only carry httpsRedirect.
                let mode = enum_field(t, "mode", SERVER_TLS_MODES);
                let passthrough = mode == "PASSTHROUGH" || mode == "AUTO_PASSTHROUGH";
                let certs = ["caCertificates", "privateKey", "serverCertificate"]
                    .iter()
                    .any(|f| !str_field(t, f).is_empty());
                if !passthrough || certs {
                    r.err(
                        at(path, "tls"),
                        "a server on a plain text HTTP port cannot have TLS settings other than httpsRedirect",
                    );
                }
            } else {
                r.err(
                    at(path, "tls"),
                    "a server on a non-HTTPS/TLS port cannot have TLS settings",
                );
            }
        }
        _ => {}
    }
}

/// Downstream TLS settings (Gateway servers, Sidecar ingress).
fn check_server_tls(r: &mut Report, path: &str, tls: &Value) {
    let mode = enum_field(tls, "mode", SERVER_TLS_MODES);
    let s = |f| !str_field(tls, f).is_empty();
    let credential_sources = usize::from(s("credentialName"))
        + usize::from(!list(tls, "credentialNames").is_empty())
        + usize::from(!list(tls, "tlsCertificates").is_empty());
    if credential_sources > 1 {
        r.err(
            path,
            "only one of credentialName, credentialNames or tlsCertificates can be set",
        );
    }
    if mode == "ISTIO_MUTUAL" {
        for f in [
            "serverCertificate",
            "privateKey",
            "caCertificates",
            "credentialName",
        ] {
            if s(f) {
                r.err(at(path, f), "ISTIO_MUTUAL TLS cannot set it");
            }
        }
        return;
    }
    let mutual = mode == "MUTUAL" || mode == "OPTIONAL_MUTUAL";
    if (mode == "SIMPLE" || mutual) && credential_sources > 0 {
        // The credentials come from a secret (or the listed files).
        return;
    }
    if mode == "SIMPLE" || mutual {
        let label = if mutual { "MUTUAL" } else { "SIMPLE" };
        if !s("serverCertificate") {
            r.err(
                at(path, "serverCertificate"),
                format!("is required for {label} TLS"),
            );
        }
        if !s("privateKey") {
            r.err(
                at(path, "privateKey"),
                format!("is required for {label} TLS"),
            );
        }
        if mutual && !s("caCertificates") {
            r.err(at(path, "caCertificates"), "is required for MUTUAL TLS");
        }
    }
    if s("caCrl") && mode == "SIMPLE" {
        r.err(at(path, "caCrl"), "CRL is not supported with SIMPLE TLS");
    }
}

// ---------------------------------------------------------------------------
// ServiceEntry

/// Checks a ServiceEntry spec.
pub(crate) fn service_entry(r: &mut Report, spec: &Value, namespace: &str) {
    if let Some(sel) = field(spec, "workloadSelector") {
        check_selector_labels(r, "spec.workloadSelector", sel, "labels");
        if has(spec, "endpoints") {
            r.err(
                "spec",
                "only one of workloadSelector and endpoints can be set",
            );
        }
    }
    let hosts = strings(spec, "hosts");
    if hosts.is_empty() {
        r.err("spec.hosts", "must not be empty");
    }
    for (i, h) in hosts.iter().enumerate() {
        let p = idx("spec.hosts", i);
        if *h == "*" {
            r.err(p, "the full wildcard host * is not allowed");
        } else {
            r.check(p, validate_wildcard_domain(h));
        }
    }
    let resolution = enum_field(spec, "resolution", RESOLUTIONS);
    let addresses = strings(spec, "addresses");
    let mut cidr = false;
    for (i, a) in addresses.iter().enumerate() {
        cidr |= a.contains('/');
        r.check(idx("spec.addresses", i), validate_ip_subnet(a));
    }
    if cidr && resolution != "NONE" && resolution != "STATIC" {
        r.err(
            "spec.addresses",
            "CIDR addresses are allowed only for NONE/STATIC resolution",
        );
    }

    let ports = list(spec, "ports");
    let mut names: Vec<&str> = Vec::new();
    let mut numbers: Vec<i64> = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let p = idx("spec.ports", i);
        if !port.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        let name = str_field(port, "name");
        let number = int_field(port, "number").unwrap_or(0);
        if names.contains(&name) {
            r.err(
                at(&p, "name"),
                format!("port name {name:?} is already defined"),
            );
        }
        if numbers.contains(&number) {
            r.err(
                at(&p, "number"),
                format!("port {number} is already defined"),
            );
        }
        names.push(name);
        numbers.push(number);
        if int_field(port, "targetPort").is_some_and(|n| n != 0) {
            check_port_field(r, &p, port, "targetPort");
        }
        r.check(at(&p, "name"), validate_port_name(name));
        r.check(
            at(&p, "protocol"),
            validate_protocol(str_field(port, "protocol")),
        );
        r.check(at(&p, "number"), validate_port(number));
    }

    let endpoints = list(spec, "endpoints");
    match resolution {
        "NONE" => {
            if !endpoints.is_empty() {
                r.err(
                    "spec.endpoints",
                    "no endpoints may be given for resolution NONE",
                );
            }
        }
        "STATIC" => {
            for (i, ep) in endpoints.iter().enumerate() {
                let p = idx("spec.endpoints", i);
                if ep.is_object() {
                    check_workload_entry(r, &p, ep, Some(&names), false);
                } else {
                    r.err(p, "must not be null");
                }
            }
        }
        "DNS" | "DNS_ROUND_ROBIN" => {
            if endpoints.is_empty() {
                for (i, h) in hosts.iter().enumerate() {
                    if validate_fqdn(h).is_err() {
                        r.err(
                            idx("spec.hosts", i),
                            format!("hosts must be FQDNs when no endpoints are given for resolution {resolution}"),
                        );
                    }
                }
            }
            if resolution == "DNS_ROUND_ROBIN" && endpoints.len() > 1 {
                r.err(
                    "spec.endpoints",
                    "resolution DNS_ROUND_ROBIN allows at most one endpoint",
                );
            }
            for (i, ep) in endpoints.iter().enumerate() {
                let p = idx("spec.endpoints", i);
                if !ep.is_object() {
                    r.err(p, "must not be null");
                    continue;
                }
                let addr = str_field(ep, "address");
                if !is_ip(addr) && validate_fqdn(addr).is_err() {
                    r.err(
                        at(&p, "address"),
                        format!("endpoint address {addr:?} is not a valid FQDN or IP address"),
                    );
                }
                check_labels(r, &p, ep, "labels");
                check_endpoint_ports(r, &p, ep, Some(&names));
            }
        }
        other => r.err(
            "spec.resolution",
            format!("unsupported resolution {other:?}"),
        ),
    }

    // Plain TCP cannot tell several hosts apart; HTTP (Host header) and TLS
    // (SNI) can. Resolution NONE ignores hosts.
    if resolution != "NONE" && hosts.len() > 1 {
        let opaque = ports.iter().any(|p| {
            Protocol::parse(str_field(p, "protocol")).is_none_or(|p| !p.is_http() && !p.is_tls())
        });
        if opaque {
            r.err(
                "spec.ports",
                "multiple hosts need HTTP or TLS ports unless resolution is NONE",
            );
        }
    }
    check_export_to(r, spec, namespace, true);
}

fn check_endpoint_ports(r: &mut Report, path: &str, ep: &Value, service_ports: Option<&[&str]>) {
    let pp = at(path, "ports");
    for (name, n) in map(ep, "ports").into_iter().flatten() {
        let p = key(&pp, name);
        if service_ports.is_some_and(|sp| !sp.contains(&name.as_str())) {
            r.err(&p, "port is not defined by the service entry");
        }
        r.check(&p, validate_port_name(name));
        r.check(&p, validate_port(super::common::as_int(n).unwrap_or(0)));
    }
}

/// A workload address: WorkloadEntry, or a ServiceEntry endpoint (where
/// `service_ports` lists the entry's port names and host names are only
/// allowed for DNS resolution).
fn check_workload_entry(
    r: &mut Report,
    path: &str,
    we: &Value,
    service_ports: Option<&[&str]>,
    allow_fqdn: bool,
) {
    let addr = str_field(we, "address");
    if addr.is_empty() && str_field(we, "network").is_empty() {
        r.err(at(path, "address"), "is required unless a network is set");
        return;
    }
    let unix = addr.starts_with(UNIX_PREFIX);
    if let Some(sock) = addr.strip_prefix(UNIX_PREFIX) {
        r.check(at(path, "address"), validate_unix_address(sock));
        if map(we, "ports").is_some_and(|m| !m.is_empty()) {
            r.err(at(path, "ports"), "a unix endpoint must not have ports");
        }
    } else if !addr.is_empty() && !is_ip(addr) {
        if !allow_fqdn {
            r.err(
                at(path, "address"),
                format!("endpoint address {addr:?} is not a valid IP address"),
            );
        } else if validate_fqdn(addr).is_err() {
            r.err(
                at(path, "address"),
                format!("endpoint address {addr:?} is not a valid FQDN or IP address"),
            );
        }
    }
    check_endpoint_ports(r, path, we, service_ports);
    check_labels(r, path, we, "labels");
    if unix && service_ports.is_some_and(|sp| sp.len() != 1) {
        r.err(path, "a unix endpoint needs exactly one service port");
    }
}

// ---------------------------------------------------------------------------
// Sidecar

/// Checks a Sidecar spec.
pub(crate) fn sidecar(r: &mut Report, spec: &Value) {
    if let Some(sel) = field(spec, "workloadSelector") {
        check_selector_labels(r, "spec.workloadSelector", sel, "labels");
    }
    let ingress = list(spec, "ingress");
    let egress = list(spec, "egress");
    // Istio 1.5 demanded an egress listener; later releases accept any of
    // these, which still rejects the data set's empty Sidecar.
    if ingress.is_empty()
        && egress.is_empty()
        && !has(spec, "outboundTrafficPolicy")
        && !has(spec, "inboundConnectionPool")
    {
        r.err(
            "spec",
            "a sidecar must set at least one of egress, ingress, outboundTrafficPolicy or inboundConnectionPool",
        );
        return;
    }

    let mut ports: Vec<i64> = Vec::new();
    for (i, ing) in ingress.iter().enumerate() {
        let p = idx("spec.ingress", i);
        if !ing.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        let Some(port) = field(ing, "port") else {
            r.err(at(&p, "port"), "is required for ingress listeners");
            continue;
        };
        let pp = at(&p, "port");
        if int_field(port, "targetPort").is_some_and(|n| n > 0) {
            r.err(
                at(&pp, "targetPort"),
                "targetPort has no effect on sidecars",
            );
        }
        check_sidecar_port(r, &pp, port);
        let bind = str_field(ing, "bind");
        if !bind.is_empty() {
            r.check(at(&p, "bind"), validate_ip(bind));
        }
        let number = int_field(port, "number").unwrap_or(0);
        if ports.contains(&number) {
            r.err(
                at(&pp, "number"),
                "ports of IP bound listeners must be unique",
            );
        }
        ports.push(number);
        let ep = str_field(ing, "defaultEndpoint");
        if !ep.is_empty() {
            r.check(at(&p, "defaultEndpoint"), validate_default_endpoint(ep));
        }
        if let Some(tls) = field(ing, "tls") {
            let tp = at(&p, "tls");
            if !list(tls, "subjectAltNames").is_empty() {
                r.err(
                    at(&tp, "subjectAltNames"),
                    "not supported on sidecar ingress",
                );
            }
            if bool_field(tls, "httpsRedirect") {
                r.err(at(&tp, "httpsRedirect"), "not supported on sidecar ingress");
            }
            if !str_field(tls, "credentialName").is_empty() {
                r.err(
                    at(&tp, "credentialName"),
                    "not supported on sidecar ingress",
                );
            }
            let mode = enum_field(tls, "mode", SERVER_TLS_MODES);
            if mode == "ISTIO_MUTUAL" || mode == "AUTO_PASSTHROUGH" {
                r.err(
                    at(&tp, "mode"),
                    format!("{mode} is not allowed on sidecar ingress"),
                );
            }
            check_server_tls(r, &tp, tls);
        }
        if let Some(cp) = field(ing, "connectionPool") {
            check_connection_pool(r, &at(&p, "connectionPool"), cp);
        }
    }
    if let Some(cp) = field(spec, "inboundConnectionPool") {
        check_connection_pool(r, "spec.inboundConnectionPool", cp);
    }

    let mut ports: Vec<i64> = Vec::new();
    let mut sockets: Vec<&str> = Vec::new();
    let mut catch_all = false;
    for (i, eg) in egress.iter().enumerate() {
        let p = idx("spec.egress", i);
        if !eg.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        match field(eg, "port") {
            None => {
                // One catch-all listener without a port, and it comes last.
                if catch_all {
                    r.err(&p, "only one egress listener may omit the port");
                    continue;
                } else if i == egress.len() - 1 {
                    catch_all = true;
                } else {
                    r.err(
                        &p,
                        "the egress listener without a port must be the last one",
                    );
                }
            }
            Some(port) => {
                let pp = at(&p, "port");
                if int_field(port, "targetPort").is_some_and(|n| n > 0) {
                    r.err(
                        at(&pp, "targetPort"),
                        "targetPort has no effect on sidecars",
                    );
                }
                let bind = str_field(eg, "bind");
                let number = int_field(port, "number").unwrap_or(0);
                let name = str_field(port, "name");
                if !name.is_empty() {
                    r.check(at(&pp, "name"), validate_port_name(name));
                }
                r.check(
                    at(&pp, "protocol"),
                    validate_protocol(str_field(port, "protocol")),
                );
                if number == 0 {
                    match bind.strip_prefix(UNIX_PREFIX) {
                        None => r.err(
                            at(&p, "bind"),
                            "a listener with port 0 needs a unix domain socket bind address",
                        ),
                        Some(sock) => r.check(at(&p, "bind"), validate_unix_address(sock)),
                    }
                    let capture = enum_field(eg, "captureMode", CAPTURE_MODES);
                    if capture != "DEFAULT" && capture != "NONE" {
                        r.err(
                            at(&p, "captureMode"),
                            "must be DEFAULT or NONE for unix domain socket listeners",
                        );
                    }
                    if sockets.contains(&bind) {
                        r.err(
                            at(&p, "bind"),
                            "unix domain sockets of listeners must be unique",
                        );
                    }
                    sockets.push(bind);
                } else {
                    r.check(at(&pp, "number"), validate_port(number));
                    if !bind.is_empty() {
                        r.check(at(&p, "bind"), validate_ip(bind));
                    }
                    if ports.contains(&number) {
                        r.err(
                            at(&pp, "number"),
                            "ports of IP bound listeners must be unique",
                        );
                    }
                    ports.push(number);
                }
            }
        }
        let hosts = strings(eg, "hosts");
        if hosts.is_empty() {
            r.err(
                at(&p, "hosts"),
                "an egress listener needs at least one host",
            );
        }
        for (j, h) in hosts.iter().enumerate() {
            check_namespaced_host(r, &idx(&at(&p, "hosts"), j), h, false);
        }
    }

    if let Some(tp) = field(spec, "outboundTrafficPolicy") {
        let p = "spec.outboundTrafficPolicy";
        if let Some(proxy) = field(tp, "egressProxy") {
            let pp = at(p, "egressProxy");
            if enum_field(tp, "mode", OUTBOUND_MODES) != "ALLOW_ANY" {
                r.err(&pp, "egressProxy may only be set with mode ALLOW_ANY");
            } else {
                r.check(at(&pp, "host"), validate_fqdn(str_field(proxy, "host")));
                if has(proxy, "port") {
                    check_destination(r, &pp, proxy);
                } else {
                    r.err(at(&pp, "port"), "is required");
                }
            }
        }
    }
}

/// A sidecar listener port: optional DNS-label name, known protocol, valid
/// number.
fn check_sidecar_port(r: &mut Report, path: &str, port: &Value) {
    let name = str_field(port, "name");
    if !name.is_empty() {
        r.check(at(path, "name"), validate_port_name(name));
    }
    r.check(
        at(path, "protocol"),
        validate_protocol(str_field(port, "protocol")),
    );
    r.check(
        at(path, "number"),
        validate_port(int_field(port, "number").unwrap_or(0)),
    );
}

/// Where sidecar ingress forwards to: `unix://path`, or a loopback or
/// unspecified address with a port (`127.0.0.1:8080`, `[::1]:8080`,
/// `0.0.0.0:8080`, `:8080`).
fn validate_default_endpoint(ep: &str) -> Result<(), String> {
    if let Some(sock) = ep.strip_prefix(UNIX_PREFIX) {
        return validate_unix_address(sock);
    }
    let bad = || {
        "must be of the form 127.0.0.1:<port>, 0.0.0.0:<port>, [::1]:<port>, [::]:<port> or unix://<path>"
            .to_string()
    };
    let (host, port) = ep.rsplit_once(':').ok_or_else(bad)?;
    let host = match host.strip_prefix('[') {
        Some(h) => h.strip_suffix(']').ok_or_else(bad)?,
        None if host.contains(':') => return Err(bad()),
        None => host,
    };
    if !matches!(host, "" | "127.0.0.1" | "0.0.0.0" | "::1" | "::") {
        return Err(bad());
    }
    let port: i64 = port
        .parse()
        .map_err(|_| format!("port {port:?} of defaultEndpoint is not a number"))?;
    validate_port(port)
}

// ---------------------------------------------------------------------------
// EnvoyFilter

/// Checks an EnvoyFilter spec.
pub(crate) fn envoy_filter(r: &mut Report, spec: &Value) {
    if let Some(sel) = field(spec, "workloadSelector") {
        check_selector_labels(r, "spec.workloadSelector", sel, "labels");
    }
    for (i, cp) in list(spec, "configPatches").iter().enumerate() {
        check_config_patch(r, &idx("spec.configPatches", i), cp);
    }
    // The pre-1.6 `filters` API (still in the Istio 1.5 data set).
    for (i, f) in list(spec, "filters").iter().enumerate() {
        let p = idx("spec.filters", i);
        if !f.is_object() {
            r.err(p, "must not be null");
            continue;
        }
        if let Some(pos) = field(f, "insertPosition") {
            let index = enum_field(pos, "index", LEGACY_INSERT_INDEX);
            if (index == "BEFORE" || index == "AFTER") && str_field(pos, "relativeTo").is_empty() {
                r.err(
                    at(&at(&p, "insertPosition"), "relativeTo"),
                    "is required with index BEFORE or AFTER",
                );
            }
        }
        if enum_field(f, "filterType", LEGACY_FILTER_TYPES) == "INVALID" {
            r.err(at(&p, "filterType"), "is required (HTTP or NETWORK)");
        }
        if str_field(f, "filterName").is_empty() {
            r.err(at(&p, "filterName"), "is required");
        }
        if !has(f, "filterConfig") {
            r.err(at(&p, "filterConfig"), "is required");
        }
    }
}

fn check_config_patch(r: &mut Report, path: &str, cp: &Value) {
    if !cp.is_object() {
        r.err(path, "must not be null");
        return;
    }
    let apply_to = enum_field(cp, "applyTo", APPLY_TO);
    if apply_to == "INVALID" {
        r.err(at(path, "applyTo"), "is required");
        return;
    }
    let Some(patch) = field(cp, "patch") else {
        r.err(at(path, "patch"), "is required");
        return;
    };
    let op = enum_field(patch, "operation", PATCH_OPERATIONS);
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

// ---------------------------------------------------------------------------
// WorkloadEntry, WorkloadGroup, ProxyConfig

/// Checks a WorkloadEntry spec.
pub(crate) fn workload_entry(r: &mut Report, spec: &Value) {
    check_workload_entry(r, "spec", spec, None, true);
}

/// Checks a WorkloadGroup spec.
pub(crate) fn workload_group(r: &mut Report, spec: &Value) {
    if !has(spec, "template") {
        r.err("spec.template", "is required");
    }
    if let Some(meta) = field(spec, "metadata") {
        check_labels(r, "spec.metadata", meta, "labels");
    }
    let Some(probe) = field(spec, "probe") else {
        return;
    };
    let p = "spec.probe";
    for f in [
        "periodSeconds",
        "initialDelaySeconds",
        "timeoutSeconds",
        "successThreshold",
        "failureThreshold",
    ] {
        if int_field(probe, f).is_some_and(|n| n < 0) {
            r.err(at(p, f), "must not be negative");
        }
    }
    if let Some(h) = field(probe, "httpGet") {
        let hp = at(p, "httpGet");
        r.check(
            at(&hp, "port"),
            validate_port(int_field(h, "port").unwrap_or(0)),
        );
        let scheme = str_field(h, "scheme");
        if !scheme.is_empty() && scheme != "HTTP" && scheme != "HTTPS" {
            r.err(at(&hp, "scheme"), "must be HTTP or HTTPS");
        }
        for (i, hdr) in list(h, "httpHeaders").iter().enumerate() {
            r.check(
                at(&idx(&at(&hp, "httpHeaders"), i), "name"),
                validate_header_name(str_field(hdr, "name")),
            );
        }
    } else if let Some(t) = field(probe, "tcpSocket") {
        r.check(
            at(&at(p, "tcpSocket"), "port"),
            validate_port(int_field(t, "port").unwrap_or(0)),
        );
    } else if let Some(e) = field(probe, "exec") {
        if list(e, "command").is_empty() {
            r.err(at(&at(p, "exec"), "command"), "is required");
        }
    } else {
        r.err(p, "a probe needs one of httpGet, tcpSocket or exec");
    }
}

/// Checks a ProxyConfig spec.
pub(crate) fn proxy_config(r: &mut Report, spec: &Value) {
    if let Some(sel) = field(spec, "selector") {
        check_selector_labels(r, "spec.selector", sel, "matchLabels");
    }
    if int_field(spec, "concurrency").is_some_and(|n| n < 0) {
        r.err("spec.concurrency", "must not be negative");
    }
}

//! Hosts and the namespaces that see them: host overlap, `namespace/host`
//! entries of gateways and sidecars, gateway references, `exportTo`.

use serde_json::Value;

use crate::json::strings;
use crate::names::{
    is_hostname_label, validate_fqdn, validate_partial_wildcard, validate_wildcard_domain,
};
use crate::net::is_ip;
use crate::report::{Report, idx};

/// Istio's `host.Name` is wildcarded when it starts with `*`.
fn is_wildcarded(h: &str) -> bool {
    h.starts_with('*')
}

/// Whether two host names overlap (`*.foo.com` and `a.foo.com`, or two
/// wildcards where one contains the other).
pub(crate) fn hosts_overlap(a: &str, b: &str) -> bool {
    match (is_wildcarded(a), is_wildcarded(b)) {
        (true, true) => {
            let (a, b) = (&a[1..], &b[1..]);
            if a.len() < b.len() {
                b.ends_with(a)
            } else {
                a.ends_with(b)
            }
        }
        (true, false) => b.ends_with(&a[1..]),
        (false, true) => a.ends_with(&b[1..]),
        (false, false) => a == b,
    }
}

/// Whether every name `sub` matches is also matched by `sup`.
pub(crate) fn host_subset_of(sub: &str, sup: &str) -> bool {
    match (is_wildcarded(sub), is_wildcarded(sup)) {
        (true, true) => sub[1..].ends_with(&sup[1..]),
        (true, false) => false,
        (false, true) => sub.ends_with(&sup[1..]),
        (false, false) => sub == sup,
    }
}

/// The host part of a gateway or sidecar `namespace/host` entry: a
/// qualified name (no short names) with at most a leading wildcard;
/// gateways also take IP addresses.
fn validate_slash_host_part(host: &str, is_gateway: bool) -> Vec<String> {
    let mut errs = Vec::new();
    if host != "*" && !host.contains('.') {
        errs.push(format!(
            "short name {host:?} is not allowed; use a fully qualified name"
        ));
    }
    if let Err(e) = validate_wildcard_domain(host)
        && !(is_gateway && is_ip(host))
    {
        errs.push(e);
    }
    if let Err(e) = validate_partial_wildcard(host) {
        errs.push(e);
    }
    errs
}

/// A `namespace/dnsName` host of a Gateway server or Sidecar egress
/// listener. Gateways also accept the older bare `dnsName` form.
pub(crate) fn check_namespaced_host(r: &mut Report, path: &str, host: &str, is_gateway: bool) {
    let Some((ns, name)) = host.split_once('/') else {
        if is_gateway {
            for e in validate_slash_host_part(host, true) {
                r.err(path, e);
            }
        } else {
            r.err(
                path,
                format!("host {host:?} must be of the form namespace/dnsName"),
            );
        }
        return;
    };
    if ns.is_empty() || name.is_empty() {
        r.err(
            path,
            "namespace and dnsName in a host entry must not be empty",
        );
    }
    let ns_ok = ns == "*" || ns == "." || (ns == "~" && !is_gateway) || is_hostname_label(ns);
    if !ns_ok && !ns.is_empty() {
        r.err(path, format!("invalid namespace {ns:?}"));
    }
    if !name.is_empty() {
        for e in validate_slash_host_part(name, is_gateway) {
            r.err(path, e);
        }
    }
}

/// Gateway references: `namespace/name`, or a bare (possibly legacy
/// `name.namespace`) DNS name such as `mesh`.
pub(crate) fn check_gateway_names(r: &mut Report, path: &str, names: &[&str]) {
    for (i, g) in names.iter().enumerate() {
        let p = idx(path, i);
        match g.split_once('/') {
            // istiod (1.28, `validateGatewayNames`) stops at the first name
            // without a namespace: the names after it are not checked.
            None => {
                r.check(p, validate_fqdn(g));
                return;
            }
            Some((ns, name)) => {
                if ns.is_empty() || name.is_empty() {
                    r.err(&p, "namespace and gateway name must not be empty");
                }
                if !is_hostname_label(ns) {
                    r.err(&p, format!("invalid namespace {ns:?}"));
                }
                if !is_hostname_label(name) {
                    r.err(&p, format!("invalid gateway name {name:?}"));
                }
            }
        }
    }
}

/// `exportTo`: `.`, `*` or namespace names, no duplicates, `*` alone; `~`
/// (nobody) only for ServiceEntries, and alone.
pub(crate) fn check_export_to(r: &mut Report, spec: &Value, namespace: &str, allow_none: bool) {
    let entries = strings(spec, "exportTo");
    let mut seen: Vec<&str> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let p = idx("spec.exportTo", i);
        let k = if *e == "." { namespace } else { e };
        if seen.contains(&k) {
            if k == *e {
                r.err(p, format!("duplicate entry {e:?}"));
            } else {
                r.err(
                    p,
                    format!("duplicate entries . and the current namespace {namespace}"),
                );
            }
            continue;
        }
        let ok = match *e {
            "." | "*" => true,
            "~" if allow_none => true,
            "~" => {
                r.err(&p, "~ (nobody) is not allowed for this kind");
                false
            }
            other => {
                if is_hostname_label(other) {
                    true
                } else {
                    r.err(&p, "must be ., * or a valid namespace name");
                    false
                }
            }
        };
        if ok {
            seen.push(k);
        }
    }
    if seen.contains(&"*") && entries.len() > 1 {
        r.err("spec.exportTo", "cannot mix * (public) with other entries");
    }
    if seen.contains(&"~") && entries.len() > 1 {
        r.err("spec.exportTo", "cannot export to nobody (~) and somebody");
    }
}

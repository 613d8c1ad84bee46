//! Gateway analyzers: servers of Gateways with the same selector and port
//! claiming the same host (IST0145), and one certificate served by Gateways
//! on the same workloads (IST0138). After Istio's `analyzers/gateway`.
//!
//! Istio compares selectors that differ by the pods both select; the hub
//! sees no pods, so only equal selectors are compared here.

use std::collections::BTreeMap;

use crate::facts::{Gateway, Tls};
use crate::message::{CONFLICTING_GATEWAYS, GATEWAY_DUPLICATE_CERTIFICATE};
use crate::report::Report;
use crate::set::Set;

/// A selector as Kubernetes prints it: `k1=v1,k2=v2`, keys sorted.
fn selector_text(g: &Gateway) -> String {
    g.selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// IST0145.
pub fn conflicts(set: &Set<'_>, out: &mut Report) {
    // (selector, port) → gateway → host → bind.
    type Hosts = BTreeMap<String, String>;
    let mut known: BTreeMap<(String, u32), BTreeMap<String, Hosts>> = BTreeMap::new();
    for (f, g) in &set.gateways {
        let sel = selector_text(g);
        for s in &g.servers {
            let hosts = known
                .entry((sel.clone(), s.port))
                .or_default()
                .entry(format!("{}/{}", f.namespace, f.name))
                .or_default();
            for h in &s.hosts {
                hosts.insert(h.clone(), s.bind.clone());
            }
        }
    }
    for (f, g) in &set.gateways {
        let me = format!("{}/{}", f.namespace, f.name);
        let sel = selector_text(g);
        for (i, s) in g.servers.iter().enumerate() {
            let Some(others) = known.get(&(sel.clone(), s.port)) else {
                continue;
            };
            let clashing: Vec<&str> = others
                .iter()
                .filter(|(name, hosts)| {
                    **name != me
                        && s.hosts
                            .iter()
                            .any(|h| hosts.get(h).is_some_and(|b| *b == s.bind))
                })
                .map(|(name, _)| name.as_str())
                .collect();
            if !clashing.is_empty() {
                out.push(
                    f,
                    CONFLICTING_GATEWAYS,
                    &format!("spec.servers[{i}]"),
                    format!(
                        "Conflict with gateways {} (workload selector {sel}, port {}, hosts {}).",
                        clashing.join(","),
                        s.port,
                        s.hosts.join(",")
                    ),
                );
            }
        }
    }
}

/// Whether every label of `x` is in `y` with the same value.
fn subset(x: &Gateway, y: &Gateway) -> bool {
    x.selector
        .iter()
        .all(|(k, v)| y.selector.get(k).is_some_and(|w| w == v))
}

/// Istio's `haveSameCertificate`.
fn same_certificate(a: &Tls, b: &Tls) -> bool {
    match (a.credential_name.is_empty(), b.credential_name.is_empty()) {
        (false, false) => a.credential_name == b.credential_name,
        (true, true) => {
            !a.server_certificate.is_empty()
                && a.server_certificate == b.server_certificate
                && !a.private_key.is_empty()
                && a.private_key == b.private_key
        }
        _ => false,
    }
}

/// IST0138.
pub fn duplicate_certificates(set: &Set<'_>, out: &mut Report) {
    for (f, g) in &set.gateways {
        for (other_f, other) in &set.gateways {
            if std::ptr::eq(*f, *other_f) || !subset(g, other) {
                continue;
            }
            let shared = g.servers.iter().filter_map(|s| s.tls.as_ref()).any(|a| {
                other
                    .servers
                    .iter()
                    .filter_map(|s| s.tls.as_ref())
                    .any(|b| same_certificate(a, b))
            });
            if shared {
                out.push(
                    f,
                    GATEWAY_DUPLICATE_CERTIFICATE,
                    "",
                    format!(
                        "Duplicate certificate in multiple gateways [{}/{} {}/{}] may cause 404s if clients re-use HTTP2 connections.",
                        f.namespace, f.name, other_f.namespace, other_f.name
                    ),
                );
            }
        }
    }
}

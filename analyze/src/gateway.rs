//! Gateway analyzers: servers of Gateways with the same selector and port
//! claiming the same host (IST0145), and one certificate served by Gateways
//! on the same workloads (IST0138). After Istio's `analyzers/gateway`.
//!
//! Istio compares selectors that differ by the pods both select; the hub
//! sees no pods, so only equal selectors are compared here.

use std::collections::{BTreeMap, BTreeSet};

use crate::facts::{Gateway, Tls};
use crate::message::{CONFLICTING_GATEWAYS, GATEWAY_DUPLICATE_CERTIFICATE};
use crate::report::{Report, first_names, name_list};
use crate::set::Set;

/// A selector as Kubernetes prints it: `k1=v1,k2=v2`, keys sorted.
fn selector_text(g: &Gateway) -> String {
    g.selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Each gateway's `namespace/name`, in set order.
fn names(set: &Set<'_>) -> Vec<String> {
    set.gateways
        .iter()
        .map(|(f, _)| format!("{}/{}", f.namespace, f.name))
        .collect()
}

/// IST0145.
pub fn conflicts(set: &Set<'_>, out: &mut Report) {
    let names = names(set);
    // (selector, port, host, bind) → the gateways with a server for it.
    let mut claims: BTreeMap<(String, u32, &str, &str), BTreeSet<&str>> = BTreeMap::new();
    let selectors: Vec<String> = set.gateways.iter().map(|(_, g)| selector_text(g)).collect();
    for (i, (_, g)) in set.gateways.iter().enumerate() {
        for s in &g.servers {
            for h in &s.hosts {
                claims
                    .entry((selectors[i].clone(), s.port, h, &s.bind))
                    .or_default()
                    .insert(&names[i]);
            }
        }
    }
    for (i, (f, g)) in set.gateways.iter().enumerate() {
        let sel = &selectors[i];
        for (j, s) in g.servers.iter().enumerate() {
            let lists: Vec<&BTreeSet<&str>> = s
                .hosts
                .iter()
                .filter_map(|h| claims.get(&(sel.clone(), s.port, h.as_str(), s.bind.as_str())))
                .collect();
            let (clashing, total) = first_names(&lists, &names[i]);
            if !clashing.is_empty() {
                out.push(
                    f,
                    CONFLICTING_GATEWAYS,
                    &format!("spec.servers[{j}]"),
                    format!(
                        "Conflict with gateways {} (workload selector {sel}, port {}, hosts {}).",
                        name_list(clashing, total, ","),
                        s.port,
                        s.hosts.join(",")
                    ),
                );
            }
        }
    }
}

/// Whether every label of `x` is in `y` with the same value.
fn subset(x: &BTreeMap<String, String>, y: &BTreeMap<String, String>) -> bool {
    x.iter().all(|(k, v)| y.get(k).is_some_and(|w| w == v))
}

/// What makes two servers' certificates the same (Istio's
/// `haveSameCertificate`): one `credentialName`, or one certificate and key
/// file pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Certificate<'a> {
    /// A `credentialName`.
    Credential(&'a str),
    /// A `serverCertificate` and `privateKey` pair.
    Files(&'a str, &'a str),
}

impl<'a> Certificate<'a> {
    /// The certificate `t` serves, if it names one.
    pub fn of(t: &'a Tls) -> Option<Self> {
        if !t.credential_name.is_empty() {
            Some(Self::Credential(&t.credential_name))
        } else if !t.server_certificate.is_empty() && !t.private_key.is_empty() {
            Some(Self::Files(&t.server_certificate, &t.private_key))
        } else {
            None
        }
    }
}

/// IST0138: a gateway sharing a certificate with gateways whose selector
/// includes its own. Istio reports every pair; here each gateway is
/// reported once, naming the others. Gateways are grouped by certificate
/// and selector first, so the cost follows the distinct selectors, not the
/// pairs.
pub fn duplicate_certificates(set: &Set<'_>, out: &mut Report) {
    let names = names(set);
    // certificate → selector → the gateways serving it with that selector.
    type BySelector<'a> = BTreeMap<&'a BTreeMap<String, String>, BTreeSet<&'a str>>;
    let mut serving: BTreeMap<Certificate<'_>, BySelector<'_>> = BTreeMap::new();
    let certificates: Vec<BTreeSet<Certificate<'_>>> = set
        .gateways
        .iter()
        .map(|(_, g)| {
            g.servers
                .iter()
                .filter_map(|s| s.tls.as_ref().and_then(Certificate::of))
                .collect()
        })
        .collect();
    for (i, (_, g)) in set.gateways.iter().enumerate() {
        for c in &certificates[i] {
            serving
                .entry(*c)
                .or_default()
                .entry(&g.selector)
                .or_default()
                .insert(&names[i]);
        }
    }
    for (i, (f, g)) in set.gateways.iter().enumerate() {
        let lists: Vec<&BTreeSet<&str>> = certificates[i]
            .iter()
            .filter_map(|c| serving.get(c))
            .flat_map(|by_selector| {
                by_selector
                    .iter()
                    .filter(|(selector, _)| subset(&g.selector, selector))
                    .map(|(_, gateways)| gateways)
            })
            .collect();
        let (others, total) = first_names(&lists, &names[i]);
        if !others.is_empty() {
            out.push(
                f,
                GATEWAY_DUPLICATE_CERTIFICATE,
                "",
                format!(
                    "Duplicate certificate in multiple gateways [{} {}] may cause 404s if clients re-use HTTP2 connections.",
                    names[i],
                    name_list(others, total, " ")
                ),
            );
        }
    }
}

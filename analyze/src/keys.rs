//! What one object's set messages can depend on in other objects: its
//! dependency keys, per analyzer ([`keys`]). Incremental analysis
//! (`crate::incremental`) reads them to find the objects a change can
//! reach.
//!
//! The contract each analyzer keeps (its *locality*): the messages it
//! gives about an object `f` of a set `S` are the same in every subset
//! `T` of `S` that holds `f`'s neighbourhood — for the near analyzers the
//! objects sharing a [`Key`] with `f` (radius 1); for the mesh host
//! conflicts (IST0109) the objects within two [`mesh`](Keys::mesh) steps
//! of `f` (radius 2: a conflict's message names every VirtualService
//! claiming a host that overlaps the conflict's host, and two of those
//! need not overlap each other when the conflict's host is a wildcard).
//!
//! | analyzer | object | keys |
//! | --- | --- | --- |
//! | `virtual_service::gateways` (IST0101, IST0132) | VirtualService; Istio Gateway | [`Key::Gateway`] of each bound gateway; of itself |
//! | `virtual_service::subsets` (IST0101) | VirtualService; DestinationRule | [`Key::Subset`]: the service of each destination with a subset; of its host |
//! | `virtual_service::delegates` (IST0101) | VirtualService | [`Key::VirtualService`] of itself and of each delegate |
//! | `virtual_service::mesh_host_conflicts` (IST0109) | VirtualService on the mesh gateway | [`Keys::mesh`]: its exact FQDNs; any wildcard FQDN makes it a neighbour of every mesh VirtualService ([`Keys::mesh_wildcard`]) |
//! | `gateway::conflicts` (IST0145) | Istio Gateway | [`Key::Server`] of each server host |
//! | `gateway::duplicate_certificates` (IST0138) | Istio Gateway | [`Key::Certificate`] of each server certificate |
//! | `selectors::namespace_wide` (IST0111, IST0160) | Sidecar, Telemetry without selector | [`Key::NamespaceSidecar`], [`Key::NamespaceTelemetry`] |
//! | `service_entry::address_conflicts` (MH0001) | ServiceEntry | [`Key::Address`] of each address and port |
//! | `gateway_api::parents` (MH0004) | route; Gateway API Gateway, ListenerSet | [`Key::Parent`] of each parent; of itself |
//! | `gateway_api::grants`, `certificates` (MH0003) | route; Gateway API Gateway, ListenerSet; ReferenceGrant | [`Key::Grants`] of each backend's namespace; of each certificate's; of its own |

use crate::facts::{Body, Facts, GATEWAY_API_GROUP, Kind};
use crate::gateway::Certificate;
use crate::hosts;
use crate::virtual_service::MESH;

/// A key through which one object's messages can depend on another's
/// (two objects sharing one are neighbours).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key<'a> {
    /// An Istio Gateway by namespace and name: one a VirtualService binds,
    /// or the Gateway itself.
    Gateway(&'a str, &'a str),
    /// A service (namespace, name) a destination with a subset names, or a
    /// DestinationRule's host names.
    Subset(&'a str, &'a str),
    /// A VirtualService by namespace and name: one delegated to, or the
    /// VirtualService itself.
    VirtualService(&'a str, &'a str),
    /// A Gateway server's (port, host, bind); IST0145 compares servers of
    /// equal selectors only, so this is coarser than its claims (sound,
    /// and fleets have few gateway selectors).
    Server(u32, &'a str, &'a str),
    /// A certificate a Gateway server serves.
    Certificate(Certificate<'a>),
    /// The namespace of a Sidecar without workload selector.
    NamespaceSidecar(&'a str),
    /// The namespace of a Telemetry without selector.
    NamespaceTelemetry(&'a str),
    /// An address and port a ServiceEntry claims.
    Address(&'a str, u32),
    /// A Gateway API parent (kind, namespace, name): one a route names, or
    /// the parent itself.
    Parent(&'static str, &'a str, &'a str),
    /// A namespace whose ReferenceGrants decide a reference: a
    /// cross-namespace reference's target namespace, or a grant's own.
    Grants(&'a str),
}

/// An object's dependency keys.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Keys<'a> {
    /// The radius-1 keys (every analyzer but IST0109).
    pub near: Vec<Key<'a>>,
    /// Whether it is a VirtualService on the mesh gateway (IST0109 reads
    /// it).
    pub mesh_bound: bool,
    /// Its exact (not wildcard) FQDNs on the mesh gateway.
    pub mesh: Vec<Fqdn<'a>>,
    /// Whether it claims a wildcard FQDN on the mesh gateway: a wildcard
    /// may overlap any host, so it neighbours every mesh VirtualService.
    pub mesh_wildcard: bool,
}

/// An exact FQDN as [`hosts::fqdn`] spells it, borrowed: two are equal
/// exactly when the FQDNs are (`reviews` in `ns` is
/// `reviews.ns.svc.cluster.local`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fqdn<'a> {
    /// `label.rest.svc.cluster.local`: the first label (no dot) and the
    /// rest (a short host's namespace).
    Local(&'a str, &'a str),
    /// Any other.
    Other(&'a str),
}

impl<'a> Fqdn<'a> {
    /// The FQDN of `host` (not a wildcard) in `namespace`.
    pub fn of(namespace: &'a str, host: &'a str) -> Self {
        if !host.contains('.') {
            return Self::Local(host, namespace);
        }
        if let Some(rest) = host.strip_suffix(".svc.cluster.local")
            && let Some((label, rest)) = rest.split_once('.')
        {
            return Self::Local(label, rest);
        }
        Self::Other(host)
    }
}

/// `f`'s dependency keys.
#[cfg(test)]
pub fn keys(f: &Facts) -> Keys<'_> {
    let mut k = Keys::default();
    keys_into(f, &mut k);
    k
}

/// `f`'s dependency keys into `k` (its lists' room kept: one run reads
/// every object's).
pub fn keys_into<'a>(f: &'a Facts, k: &mut Keys<'a>) {
    k.near.clear();
    k.mesh.clear();
    k.mesh_bound = false;
    k.mesh_wildcard = false;
    let ns = f.namespace.as_str();
    match &f.body {
        Body::VirtualService(vs) => {
            for gw in &vs.gateways {
                if gw != MESH {
                    let (gns, name) = gw.split_once('/').unwrap_or((ns, gw));
                    k.near.push(Key::Gateway(gns, name));
                }
            }
            for d in vs.destinations.iter().filter(|d| !d.subset.is_empty()) {
                let (sns, name) = hosts::service_of_ref(ns, &d.host);
                k.near.push(Key::Subset(sns, name));
            }
            k.near.push(Key::VirtualService(ns, &f.name));
            for (_, dns, name) in &vs.delegates {
                k.near.push(Key::VirtualService(dns, name));
            }
            if vs.gateways.is_empty() || vs.gateways.iter().any(|g| g == MESH) {
                k.mesh_bound = true;
                for h in &vs.hosts {
                    if h.starts_with('*') {
                        k.mesh_wildcard = true;
                    } else {
                        k.mesh.push(Fqdn::of(ns, h));
                    }
                }
            }
        }
        Body::DestinationRule { host, .. } => {
            let (sns, name) = hosts::service_of_ref(ns, host);
            k.near.push(Key::Subset(sns, name));
        }
        Body::Gateway(g) => {
            k.near.push(Key::Gateway(ns, &f.name));
            for s in &g.servers {
                for h in &s.hosts {
                    k.near.push(Key::Server(s.port, h, &s.bind));
                }
                if let Some(c) = s.tls.as_ref().and_then(Certificate::of) {
                    k.near.push(Key::Certificate(c));
                }
            }
        }
        Body::ServiceEntry(se) => {
            for a in &se.addresses {
                for p in &se.ports {
                    k.near.push(Key::Address(a, *p));
                }
            }
        }
        Body::Sidecar { selects: false } => k.near.push(Key::NamespaceSidecar(ns)),
        Body::Telemetry { selects: false } => k.near.push(Key::NamespaceTelemetry(ns)),
        Body::Route(r) => {
            for p in r.parents.iter().filter(|p| p.group == GATEWAY_API_GROUP) {
                match p.kind.as_str() {
                    "Gateway" => k.near.push(Key::Parent("Gateway", &p.namespace, &p.name)),
                    "ListenerSet" => k
                        .near
                        .push(Key::Parent("ListenerSet", &p.namespace, &p.name)),
                    _ => {}
                }
            }
            for b in r.backends.iter().filter(|b| b.namespace != ns) {
                k.near.push(Key::Grants(&b.namespace));
            }
        }
        Body::Listeners(l) => {
            let kind = if f.kind == Kind::ListenerSet {
                "ListenerSet"
            } else {
                "Gateway"
            };
            k.near.push(Key::Parent(kind, ns, &f.name));
            for c in l.certificates.iter().filter(|c| c.namespace != ns) {
                k.near.push(Key::Grants(&c.namespace));
            }
        }
        Body::ReferenceGrant(_) => k.near.push(Key::Grants(ns)),
        Body::Sidecar { .. } | Body::Telemetry { .. } | Body::Other => {}
    }
}

//! Gateway API analyzers, per cluster: a route's parent (a Gateway or a
//! ListenerSet, and the listener its `sectionName` names) that the
//! cluster's set lacks (MH0004, a warning: the parent may be created in
//! the cluster itself), and a backend, or a listener's certificate, in
//! another namespace that no ReferenceGrant of the set permits (MH0003).
//! They are what the cluster's istiod would report in the object's status
//! once it holds it (`Accepted=False`, `NoMatchingParent`;
//! `ResolvedRefs=False`, `RefNotPermitted`, on the route or on the
//! listener): analysis says so before the change is sent.
//!
//! A parent of another kind (a Service, for mesh routing) is not checked;
//! a backend Service's existence is checked per cluster from what its
//! agent reports (`crate::cluster`).

use crate::facts::{BackendRef, GATEWAY_API_GROUP};
use crate::message::{GATEWAY_API_PARENT_NOT_FOUND, REFERENCE_NOT_PERMITTED};
use crate::report::Report;
use crate::set::{Grants, Set};

/// MH0004 for a parent Gateway or ListenerSet the set lacks, or one
/// without the listener the reference's `sectionName` names.
pub fn parents(set: &Set<'_>, out: &mut Report) {
    for (f, route) in &set.routes {
        for p in &route.parents {
            if p.group != GATEWAY_API_GROUP {
                continue;
            }
            let kind = match p.kind.as_str() {
                "Gateway" => "Gateway",
                "ListenerSet" => "ListenerSet",
                _ => continue,
            };
            match set
                .parents
                .get(&(kind, p.namespace.as_str(), p.name.as_str()))
            {
                None => out.push(
                    f,
                    GATEWAY_API_PARENT_NOT_FOUND,
                    &p.path,
                    format!(
                        "Referenced {kind} not found: \"{}/{}\"",
                        p.namespace, p.name
                    ),
                ),
                Some(listeners) if !p.section.is_empty() && !listeners.contains(&p.section) => {
                    out.push(
                        f,
                        GATEWAY_API_PARENT_NOT_FOUND,
                        &format!("{}.sectionName", p.path),
                        format!(
                            "Referenced listener not found: {kind} \"{}/{}\" has no listener {:?}",
                            p.namespace, p.name, p.section
                        ),
                    );
                }
                Some(_) => {}
            }
        }
    }
}

/// MH0003 for a backend in another namespace without a ReferenceGrant in
/// that namespace from the route's kind and namespace to the backend.
pub fn grants(set: &Set<'_>, out: &mut Report) {
    for (f, route) in &set.routes {
        for b in &route.backends {
            if b.namespace == f.namespace
                || permitted(&set.grants, f.kind.as_str(), &f.namespace, b)
            {
                continue;
            }
            let group = if b.group.is_empty() { "core" } else { &b.group };
            out.push(
                f,
                REFERENCE_NOT_PERMITTED,
                &b.path,
                format!(
                    "{} {}/{} (group {group}) is in another namespace and no ReferenceGrant in {:?} permits {} references from {:?}",
                    b.kind, b.namespace, b.name, b.namespace, f.kind.as_str(), f.namespace
                ),
            );
        }
    }
}

/// MH0003 for a listener's certificate (a Secret) in another namespace
/// without a ReferenceGrant in that namespace from the Gateway's (or
/// ListenerSet's) kind and namespace to the Secret: istiod leaves the
/// listener `ResolvedRefs=False`, `RefNotPermitted`, and serves no TLS on
/// it with that certificate. A reference to anything but a Secret is
/// istiod's `InvalidCertificateRef`, not a grant's business.
pub fn certificates(set: &Set<'_>, out: &mut Report) {
    for (f, refs) in &set.certificates {
        for c in *refs {
            if !c.group.is_empty() || c.kind != "Secret" || c.namespace == f.namespace {
                continue;
            }
            if permitted(&set.grants, f.kind.as_str(), &f.namespace, c) {
                continue;
            }
            out.push(
                f,
                REFERENCE_NOT_PERMITTED,
                &c.path,
                format!(
                    "certificateRef {}/{} is in another namespace and no ReferenceGrant in {:?} permits {} references from {:?} to it",
                    c.namespace, c.name, c.namespace, f.kind.as_str(), f.namespace
                ),
            );
        }
    }
}

/// Whether a ReferenceGrant of `grants`, in the namespace of `to`, permits
/// objects of `from_kind` (of the Gateway API's group) in `from_ns` to
/// refer to `to` (its group and kind, and its name or any).
pub fn permitted(grants: &Grants<'_>, from_kind: &str, from_ns: &str, to: &BackendRef) -> bool {
    grants.get(to.namespace.as_str()).is_some_and(|grants| {
        grants.iter().any(|g| {
            g.from.iter().any(|(group, kind, ns)| {
                group == GATEWAY_API_GROUP && kind == from_kind && ns == from_ns
            }) && g.to.iter().any(|(group, kind, name)| {
                *group == to.group && *kind == to.kind && (name.is_empty() || *name == to.name)
            })
        })
    })
}

//! Gateway API analyzers, per cluster: a route's parent (a Gateway or a
//! ListenerSet, and the listener its `sectionName` names) that the
//! cluster's set lacks (MH0004, a warning: the parent may be created in
//! the cluster itself), and a backend in another namespace that no
//! ReferenceGrant of the set permits (MH0003). Both are what the
//! cluster's istiod would report in the route's status once it holds it
//! (`Accepted=False`, `NoMatchingParent`; `ResolvedRefs=False`,
//! `RefNotPermitted`): analysis says so before the change is sent.
//!
//! A parent of another kind (a Service, for mesh routing) and a backend's
//! existence are not checked: the hub sees configuration, not the
//! clusters' Services.

use crate::facts::{BackendRef, GATEWAY_API_GROUP};
use crate::message::{GATEWAY_API_PARENT_NOT_FOUND, REFERENCE_NOT_PERMITTED};
use crate::report::Report;
use crate::set::Set;

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
            if b.namespace == f.namespace || permitted(set, f.kind.as_str(), &f.namespace, b) {
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

fn permitted(set: &Set<'_>, route_kind: &str, route_ns: &str, b: &BackendRef) -> bool {
    set.grants.get(b.namespace.as_str()).is_some_and(|grants| {
        grants.iter().any(|g| {
            g.from.iter().any(|(group, kind, ns)| {
                group == GATEWAY_API_GROUP && kind == route_kind && ns == route_ns
            }) && g.to.iter().any(|(group, kind, name)| {
                *group == b.group && *kind == b.kind && (name.is_empty() || *name == b.name)
            })
        })
    })
}

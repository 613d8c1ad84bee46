//! IST0101 ReferencedResourceNotFound, per cluster: a Gateway API route's
//! backend (a `backendRefs` entry, a `requestMirror` filter's backend) of
//! kind Service (core group) whose Service the cluster lacks, as its agent
//! reported the cluster's Services. istiod's route conversion
//! (`buildDestination` in `pilot/pkg/config/kube/gateway/conversion.go`)
//! looks the Service up in its own cluster and, when it is not there,
//! leaves the route `ResolvedRefs=False`, `BackendNotFound`, and its
//! requests to that backend get a 500. Istio has no analyzer code of its
//! own for route backends; IST0101 is the code its analyzers give a
//! missing referenced object (a VirtualService's destination host).
//!
//! As istiod does, a backend in another namespace that no ReferenceGrant
//! permits is not looked up (that is MH0003), nor is a name with a dot
//! (istiod refuses it as a hostname, not a Service name).

use std::collections::{HashMap, HashSet};

use crate::facts::{BackendRef, Body, Facts};
use crate::gateway_api::permitted;
use crate::message::REFERENCED_RESOURCE_NOT_FOUND;
use crate::report::Report;
use crate::set::Grants;

/// A cluster's Services, by name, as its agent reported them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Services {
    by_namespace: HashMap<String, HashSet<String>>,
    len: usize,
    /// Where the list was cut (it holds the Services up to this
    /// `(namespace, name)`, in that order; a later one is unknown);
    /// `None` with `cut`: nothing is known.
    through: Option<(String, String)>,
    cut: bool,
}

impl Services {
    /// The Services `names` (`(namespace, name)`); `complete` when they
    /// are all the cluster has, else they are the first ones in
    /// (namespace, name) order and any later name is unknown.
    pub fn new(names: impl IntoIterator<Item = (String, String)>, complete: bool) -> Self {
        let mut out = Self {
            cut: !complete,
            ..Self::default()
        };
        for (ns, name) in names {
            if !complete
                && out
                    .through
                    .as_ref()
                    .is_none_or(|t| (&ns, &name) > (&t.0, &t.1))
            {
                out.through = Some((ns.clone(), name.clone()));
            }
            if out.by_namespace.entry(ns).or_default().insert(name) {
                out.len += 1;
            }
        }
        out
    }

    /// How many Services it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the cluster has the Service `namespace/name`; `None` when
    /// the list was cut before it.
    pub fn has(&self, namespace: &str, name: &str) -> Option<bool> {
        if self
            .by_namespace
            .get(namespace)
            .is_some_and(|n| n.contains(name))
        {
            return Some(true);
        }
        if self.cut
            && self
                .through
                .as_ref()
                .is_none_or(|(ns, n)| (namespace, name) > (ns.as_str(), n.as_str()))
        {
            return None;
        }
        Some(false)
    }
}

/// IST0101 for every route backend Service of `objects` that `services`
/// lacks.
pub fn check(objects: &[&Facts], services: &Services, out: &mut Report) {
    let mut grants: Grants<'_> = HashMap::new();
    for f in objects {
        if let Body::ReferenceGrant(g) = &f.body {
            grants.entry(f.namespace.as_str()).or_default().push(g);
        }
    }
    for f in objects {
        let Body::Route(route) = &f.body else {
            continue;
        };
        for b in &route.backends {
            if !is_service(b) || b.name.contains('.') {
                continue;
            }
            if b.namespace != f.namespace && !permitted(&grants, f.kind.as_str(), &f.namespace, b) {
                continue;
            }
            if services.has(&b.namespace, &b.name) == Some(false) {
                let what = if b.path.ends_with("requestMirror.backendRef") {
                    "mirror Service"
                } else {
                    "Service"
                };
                out.push(
                    f,
                    REFERENCED_RESOURCE_NOT_FOUND,
                    &b.path,
                    format!(
                        "Referenced {what} not found: \"{}/{}\"",
                        b.namespace, b.name
                    ),
                );
            }
        }
    }
}

fn is_service(b: &BackendRef) -> bool {
    b.group.is_empty() && b.kind == "Service"
}

//! The objects one analysis runs over, indexed by kind (and the kinds
//! others refer to by name, by name: lookups stay O(1) per reference).

use std::collections::{HashMap, HashSet};

use crate::facts::{
    BackendRef, Body, DestinationRule, Facts, Gateway, Kind, ReferenceGrant, Route, ServiceEntry,
    VirtualService,
};

/// ReferenceGrants by namespace.
pub type Grants<'a> = HashMap<&'a str, Vec<&'a ReferenceGrant>>;

/// The objects of one cluster's set, by kind, each list in name order.
#[derive(Debug, Default)]
pub struct Set<'a> {
    pub virtual_services: Vec<(&'a Facts, &'a VirtualService)>,
    pub destination_rules: Vec<(&'a Facts, DestinationRule<'a>)>,
    pub gateways: Vec<(&'a Facts, &'a Gateway)>,
    pub service_entries: Vec<(&'a Facts, &'a ServiceEntry)>,
    /// Sidecars without workload selector labels.
    pub namespace_sidecars: Vec<&'a Facts>,
    /// Telemetries without a selector.
    pub namespace_telemetries: Vec<&'a Facts>,
    /// Gateway API routes.
    pub routes: Vec<(&'a Facts, &'a Route)>,
    /// Gateway API parents (Gateways, ListenerSets) by kind, namespace
    /// and name: their listeners' names.
    pub parents: HashMap<(&'static str, &'a str, &'a str), &'a [String]>,
    /// Gateway API parents with certificate references: their
    /// `tls.certificateRefs`.
    pub certificates: Vec<(&'a Facts, &'a [BackendRef])>,
    /// ReferenceGrants by namespace.
    pub grants: Grants<'a>,
    gateways_by_name: HashMap<(&'a str, &'a str), &'a Gateway>,
    virtual_service_names: HashSet<(&'a str, &'a str)>,
}

impl<'a> Set<'a> {
    /// Indexes `objects`.
    pub fn new(objects: impl IntoIterator<Item = &'a Facts>) -> Self {
        let mut set = Self::default();
        for f in objects {
            match &f.body {
                Body::VirtualService(vs) => set.virtual_services.push((f, vs)),
                Body::DestinationRule { host, subsets } => set
                    .destination_rules
                    .push((f, DestinationRule { host, subsets })),
                Body::Gateway(g) => set.gateways.push((f, g)),
                Body::ServiceEntry(se) => set.service_entries.push((f, se)),
                Body::Sidecar { selects: false } => set.namespace_sidecars.push(f),
                Body::Telemetry { selects: false } => set.namespace_telemetries.push(f),
                Body::Route(r) => set.routes.push((f, r)),
                Body::Listeners(l) => {
                    let kind = if f.kind == Kind::ListenerSet {
                        "ListenerSet"
                    } else {
                        "Gateway"
                    };
                    set.parents.insert(
                        (kind, f.namespace.as_str(), f.name.as_str()),
                        l.names.as_slice(),
                    );
                    if !l.certificates.is_empty() {
                        set.certificates.push((f, l.certificates.as_slice()));
                    }
                }
                Body::ReferenceGrant(g) => {
                    set.grants.entry(f.namespace.as_str()).or_default().push(g)
                }
                Body::Sidecar { .. } | Body::Telemetry { .. } | Body::Other => {}
            }
        }
        let by_name = |a: &Facts, b: &Facts| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name));
        set.virtual_services.sort_by(|a, b| by_name(a.0, b.0));
        set.destination_rules.sort_by(|a, b| by_name(a.0, b.0));
        set.gateways.sort_by(|a, b| by_name(a.0, b.0));
        set.service_entries.sort_by(|a, b| by_name(a.0, b.0));
        set.routes.sort_by(|a, b| by_name(a.0, b.0));
        set.certificates.sort_by(|a, b| by_name(a.0, b.0));
        set.namespace_sidecars.sort_by(|a, b| by_name(a, b));
        set.namespace_telemetries.sort_by(|a, b| by_name(a, b));
        set.gateways_by_name = set
            .gateways
            .iter()
            .map(|(f, g)| ((f.namespace.as_str(), f.name.as_str()), *g))
            .collect();
        set.virtual_service_names = set
            .virtual_services
            .iter()
            .map(|(f, _)| (f.namespace.as_str(), f.name.as_str()))
            .collect();
        set
    }

    /// The Gateway `namespace/name`, if the set holds it.
    pub fn gateway(&self, namespace: &str, name: &str) -> Option<&'a Gateway> {
        self.gateways_by_name.get(&(namespace, name)).copied()
    }

    /// Whether the set holds the VirtualService `namespace/name`.
    pub fn has_virtual_service(&self, namespace: &str, name: &str) -> bool {
        self.virtual_service_names.contains(&(namespace, name))
    }
}

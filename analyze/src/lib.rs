//! Analysis of the objects one cluster receives: the checks that need
//! several objects (Galley's analyzers, today `istioctl analyze`), with
//! Istio's message codes and severities where Istio has one.
//!
//! The hub runs it on each cluster's group after every change, so a
//! VirtualService bound to a Gateway that only another cluster receives is
//! reported for the cluster that lacks it, and not for the one that has it.
//! `meshhubctl analyze` runs it on files.
//!
//! Pure: [`Facts::of`] reads what analysis needs of an object (once per
//! object change); [`analyze`] takes the facts of one set and returns
//! [`Message`]s. No I/O, no clock. [`reanalyze_set`] works out a set's
//! messages from an earlier set's and the objects that differ, running
//! the analyzers only where a change can reach (each analyzer's
//! dependency keys: `keys.rs`; why it is exact: `incremental.rs`).
//!
//! | code | name | severity | raised for |
//! | --- | --- | --- | --- |
//! | IST0101 | ReferencedResourceNotFound | Error | a VirtualService's Gateway, route or mirror subset, or delegate the set lacks; a Gateway API route's backend Service the cluster lacks ([`Cluster`]: its agent's report) |
//! | IST0109 | ConflictingMeshGatewayVirtualServiceHosts | Error | VirtualServices on the mesh gateway defining one host |
//! | IST0111 | MultipleSidecarsWithoutWorkloadSelectors | Error | several namespace-wide Sidecars in a namespace |
//! | IST0132 | VirtualServiceHostNotFoundInGateway | Warning | a VirtualService's hosts that its Gateway does not serve |
//! | IST0138 | GatewayDuplicateCertificate | Warning | Gateways on the same workloads sharing a certificate |
//! | IST0145 | ConflictingGateways | Error | Gateways with equal selectors and port claiming one host |
//! | IST0160 | MultipleTelemetriesWithoutWorkloadSelectors | Error | several namespace-wide Telemetries in a namespace |
//! | IST0176 | GatewayAPICRDVersionBelowMinimum | Warning | a Gateway API CRD of the cluster older than its Istio release requires ([`Cluster`]) |
//! | MH0001 | ServiceEntryAddressConflict | Warning | ServiceEntries for different hosts on one address and port |
//! | MH0002 | IstioVersionSkew | Warning | a kind, field or enum value the cluster's Istio release does not know, or a value its validation refuses that a newer release accepts ([`since`], [`Target`]) |
//! | MH0003 | ReferenceNotPermitted | Error | a Gateway API route's backend, or a Gateway's or ListenerSet's certificate, in another namespace that no ReferenceGrant of the set permits |
//! | MH0004 | GatewayApiParentNotFound | Warning | a Gateway API route's parent Gateway or ListenerSet (or the listener its `sectionName` names) the set lacks |
//!
//! What needs workloads (a selector matching no pod, two selectors on one
//! pod, a destination host that is a Kubernetes Service) is not checked:
//! the hub sees configuration, not the clusters' pods. Of the clusters'
//! Services it knows the names their agents report, which a route's
//! backends are checked against.

mod crd_versions;
mod facts;
mod gateway;
mod gateway_api;
mod hosts;
mod incremental;
mod keys;
mod message;
mod report;
mod selectors;
mod service_entry;
mod services;
mod set;
pub mod since;
mod skew;
mod virtual_service;

#[cfg(test)]
mod tests;

pub use crd_versions::CrdBundle;
pub use facts::{
    BackendRef, Body, Destination, DestinationRule, Facts, GATEWAY_API_GROUP, Gateway, Kind,
    Listeners, ParentRef, ReferenceGrant, Route, Server, ServiceEntry, Tls, VirtualService,
};
pub use message::{
    CODES, CONFLICTING_GATEWAYS, CONFLICTING_MESH_GATEWAY_VIRTUAL_SERVICE_HOSTS, Code,
    GATEWAY_API_CRD_VERSION_BELOW_MINIMUM, GATEWAY_API_PARENT_NOT_FOUND,
    GATEWAY_DUPLICATE_CERTIFICATE, ISTIO_VERSION_SKEW,
    MULTIPLE_SIDECARS_WITHOUT_WORKLOAD_SELECTORS, MULTIPLE_TELEMETRIES_WITHOUT_WORKLOAD_SELECTORS,
    Message, REFERENCE_NOT_PERMITTED, REFERENCED_RESOURCE_NOT_FOUND,
    SERVICE_ENTRY_ADDRESS_CONFLICT, Severity, VIRTUAL_SERVICE_HOST_NOT_FOUND_IN_GATEWAY, find_code,
};

pub use incremental::{Rerun, reanalyze_set};
pub use services::Services;
pub use since::{IstioVersion, Need, VersionError};
pub use skew::Target;

/// What analysis knows of the cluster a set is for, beyond the set: from
/// its agent's report.
#[derive(Clone, Copy, Debug)]
pub struct Cluster<'a> {
    /// The release the version check (MH0002) reads.
    pub target: Target<'a>,
    /// The newest Istio release its istiods run (`None`: none reported):
    /// what IST0176 reads, as the newest istiod requires the most of the
    /// CRDs.
    pub newest: Option<IstioVersion>,
    /// Its Gateway API CRDs (`None`: not reported).
    pub gateway_api_crds: Option<&'a [CrdBundle]>,
    /// Its Services (`None`: not reported; no backend is then judged).
    pub services: Option<&'a Services>,
}

impl<'a> Cluster<'a> {
    /// A cluster known by its target alone.
    pub fn of(target: Target<'a>) -> Self {
        Self {
            target,
            newest: None,
            gateway_api_crds: None,
            services: None,
        }
    }
}

/// Every message about the set `objects` (one cluster's), by object,
/// without a version check.
pub fn analyze<'a>(objects: impl IntoIterator<Item = &'a Facts>) -> Vec<Message> {
    analyze_for(objects, &Target::Unchecked)
}

/// Every message about the set `objects` of a cluster running `target`
/// (MH0002 for what its Istio release does not know), by object.
pub fn analyze_for<'a>(
    objects: impl IntoIterator<Item = &'a Facts>,
    target: &Target<'_>,
) -> Vec<Message> {
    let objects: Vec<&Facts> = objects.into_iter().collect();
    report::Report::from_messages(
        analyze_set(objects.iter().copied())
            .into_iter()
            .chain(skew_for(&objects, target)),
    )
    .into_messages()
}

/// The messages about the set `objects` that do not depend on the cluster
/// receiving it (every analyzer but the version check), by object: what a
/// caller analysing many clusters' identical sets can work out once.
pub fn analyze_set<'a>(objects: impl IntoIterator<Item = &'a Facts>) -> Vec<Message> {
    let set = set::Set::new(objects);
    let mut out = report::Report::default();
    virtual_service::gateways(&set, &mut out);
    virtual_service::subsets(&set, &mut out);
    virtual_service::delegates(&set, &mut out);
    virtual_service::mesh_host_conflicts(&set, &mut out);
    gateway::conflicts(&set, &mut out);
    gateway::duplicate_certificates(&set, &mut out);
    selectors::namespace_wide(&set, &mut out);
    service_entry::address_conflicts(&set, &mut out);
    gateway_api::parents(&set, &mut out);
    gateway_api::grants(&set, &mut out);
    gateway_api::certificates(&set, &mut out);
    out.into_messages()
}

/// The version check alone (MH0002) of `objects` for a cluster running
/// `target`, by object.
pub fn skew_for(objects: &[&Facts], target: &Target<'_>) -> Vec<Message> {
    let mut out = report::Report::default();
    skew::check(objects, target, &mut out);
    out.into_messages()
}

/// What depends on the cluster that receives `objects` ([`Cluster`]): the
/// version check (MH0002), its Gateway API CRDs against its Istio release
/// (IST0176, about the CRDs) and its routes' backend Services (IST0101).
pub fn cluster_for(objects: &[&Facts], cluster: &Cluster<'_>) -> Vec<Message> {
    let mut out = report::Report::default();
    skew::check(objects, &cluster.target, &mut out);
    if let (Some(crds), Some(release)) = (cluster.gateway_api_crds, cluster.newest) {
        crd_versions::check(crds, release, &mut out);
    }
    if let Some(services) = cluster.services {
        services::check(objects, services, &mut out);
    }
    out.into_messages()
}

/// [`analyze_set`]'s messages with [`skew_for`]'s, by object as
/// [`analyze_for`] gives them. The set's messages are shared, not copied:
/// a set's analysis is merged once per cluster that holds it (10,000 at
/// once when a change reaches every cluster).
pub fn merge(set: &[std::sync::Arc<Message>], skew: Vec<Message>) -> Vec<std::sync::Arc<Message>> {
    let mut out: Vec<std::sync::Arc<Message>> = set
        .iter()
        .cloned()
        .chain(skew.into_iter().map(std::sync::Arc::new))
        .collect();
    out.sort_by(|a, b| report::order(a, b));
    out.dedup();
    out
}

//! VirtualService analyzers: references to Gateways, DestinationRule
//! subsets and delegates that the set lacks (IST0101), hosts a bound
//! Gateway does not serve (IST0132), and hosts claimed twice on the mesh
//! gateway (IST0109). After Istio's `analyzers/virtualservice`.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::facts::Facts;
use crate::hosts;
use crate::message::{
    CONFLICTING_MESH_GATEWAY_VIRTUAL_SERVICE_HOSTS, REFERENCED_RESOURCE_NOT_FOUND,
    VIRTUAL_SERVICE_HOST_NOT_FOUND_IN_GATEWAY,
};
use crate::report::{Report, name_list};
use crate::set::Set;

/// The reserved gateway name for the sidecars of the mesh.
pub(crate) const MESH: &str = "mesh";

/// IST0101 for a bound Gateway the set lacks; IST0132 when the bound
/// Gateway (or a missing one: it serves no host) serves none of the
/// VirtualService's hosts.
pub fn gateways(set: &Set<'_>, out: &mut Report) {
    for (f, vs) in &set.virtual_services {
        for (i, gw) in vs.gateways.iter().enumerate() {
            if gw == MESH {
                continue;
            }
            let (ns, name) = gw.split_once('/').unwrap_or((&f.namespace, gw));
            let path = format!("spec.gateways[{i}]");
            let found = set.gateway(ns, name);
            if found.is_none() {
                out.push(
                    f,
                    REFERENCED_RESOURCE_NOT_FOUND,
                    &path,
                    format!("Referenced gateway not found: {gw:?}"),
                );
            }
            let served = found.is_some_and(|g| {
                let gw_hosts = hosts::gateway_hosts_for(
                    g.servers
                        .iter()
                        .flat_map(|s| s.hosts.iter().map(String::as_str)),
                    ns,
                    &f.namespace,
                );
                gw_hosts
                    .iter()
                    .any(|gh| vs.hosts.iter().any(|h| hosts::matches(gh, h)))
            });
            if !served {
                out.push(
                    f,
                    VIRTUAL_SERVICE_HOST_NOT_FOUND_IN_GATEWAY,
                    &path,
                    format!(
                        "one or more host {:?} defined in VirtualService {}/{} not found in Gateway {ns}/{name}.",
                        vs.hosts, f.namespace, f.name
                    ),
                );
            }
        }
    }
}

/// IST0101 for a route or mirror to a subset no DestinationRule of the set
/// defines for that host.
pub fn subsets(set: &Set<'_>, out: &mut Report) {
    let mut defined: BTreeSet<(String, String, &str)> = BTreeSet::new();
    for (f, dr) in &set.destination_rules {
        let (ns, name) = hosts::service_of(&f.namespace, dr.host);
        for s in dr.subsets {
            defined.insert((ns.clone(), name.clone(), s.as_str()));
        }
    }
    for (f, vs) in &set.virtual_services {
        for d in &vs.destinations {
            if d.subset.is_empty() {
                continue;
            }
            let (ns, name) = hosts::service_of(&f.namespace, &d.host);
            if defined.contains(&(ns, name, d.subset.as_str())) {
                continue;
            }
            let what = if d.mirror { "mirror" } else { "host" };
            out.push(
                f,
                REFERENCED_RESOURCE_NOT_FOUND,
                &d.path,
                format!(
                    "Referenced {what}+subset in destinationrule not found: \"{}+{}\"",
                    d.host, d.subset
                ),
            );
        }
    }
}

/// IST0101 for an `http[].delegate` naming a VirtualService the set lacks
/// (meshhub's addition: Istio has no analyzer for delegates, and istiod
/// then drops the route silently).
pub fn delegates(set: &Set<'_>, out: &mut Report) {
    for (f, vs) in &set.virtual_services {
        for (path, ns, name) in &vs.delegates {
            if !set.has_virtual_service(ns, name) {
                out.push(
                    f,
                    REFERENCED_RESOURCE_NOT_FOUND,
                    path,
                    format!("Referenced delegate VirtualService not found: \"{ns}/{name}\""),
                );
            }
        }
    }
}

/// IST0109: VirtualServices bound to the mesh gateway (no `gateways`, or
/// `mesh` among them) that define the same host for the same namespaces
/// (`exportTo`; `*` overlaps every namespace). Each is reported once.
pub fn mesh_host_conflicts(set: &Set<'_>, out: &mut Report) {
    // (scope, fqdn) → the VirtualServices claiming it, in set order.
    let mut claims: BTreeMap<(String, String), Vec<&Facts>> = BTreeMap::new();
    for (f, vs) in &set.virtual_services {
        if !(vs.gateways.is_empty() || vs.gateways.iter().any(|g| g == MESH)) {
            continue;
        }
        let scopes: BTreeSet<String> =
            if vs.export_to.is_empty() || vs.export_to.iter().any(|e| e == "*") {
                ["*".to_owned()].into()
            } else {
                vs.export_to
                    .iter()
                    .map(|e| {
                        if e == "." {
                            f.namespace.clone()
                        } else {
                            e.clone()
                        }
                    })
                    .collect()
            };
        for scope in scopes {
            for h in &vs.hosts {
                let claimants = claims
                    .entry((scope.clone(), hosts::fqdn(&f.namespace, h)))
                    .or_default();
                // A VirtualService's claims are all made in this turn of
                // the loop: one naming a host twice is the last claimant.
                if !claimants.last().is_some_and(|c| std::ptr::eq(*c, *f)) {
                    claimants.push(f);
                }
            }
        }
    }
    // Hosts exported everywhere overlap every scope: exact names by name,
    // wildcards (few) by matching.
    let everywhere: BTreeMap<&str, &Vec<&Facts>> = claims
        .iter()
        .filter(|((scope, _), _)| scope == "*")
        .map(|((_, fqdn), c)| (fqdn.as_str(), c))
        .collect();
    let wildcards: Vec<(&str, &Vec<&Facts>)> = everywhere
        .iter()
        .filter(|(h, _)| h.starts_with('*'))
        .map(|(h, c)| (*h, *c))
        .collect();
    let mut reported: BTreeSet<(&str, &str)> = BTreeSet::new();
    for ((scope, fqdn), claimants) in &claims {
        let mut all = claimants.clone();
        if scope != "*" {
            let overlapping: Vec<&Vec<&Facts>> = if fqdn.starts_with('*') {
                everywhere
                    .iter()
                    .filter(|(h, _)| hosts::matches(fqdn, h))
                    .map(|(_, c)| *c)
                    .collect()
            } else {
                everywhere
                    .get(fqdn.as_str())
                    .into_iter()
                    .copied()
                    .chain(
                        wildcards
                            .iter()
                            .filter(|(h, _)| hosts::matches(fqdn, h))
                            .map(|(_, c)| *c),
                    )
                    .collect()
            };
            let mut seen: HashSet<*const Facts> = all.iter().map(|f| *f as *const Facts).collect();
            for m in overlapping.into_iter().flatten() {
                if seen.insert(*m as *const Facts) {
                    all.push(m);
                }
            }
        }
        if all.len() < 2 {
            continue;
        }
        let mut names: Vec<String> = all
            .iter()
            .map(|f| format!("{}/{}", f.namespace, f.name))
            .collect();
        names.sort();
        let names = name_list(&names, Some(names.len()), ",");
        for f in all {
            if reported.insert((&f.namespace, &f.name)) {
                out.push(
                    f,
                    CONFLICTING_MESH_GATEWAY_VIRTUAL_SERVICE_HOSTS,
                    "spec.hosts",
                    format!(
                        "The VirtualServices {names} associated with mesh gateway define the same host {fqdn} which can lead to undefined behavior. This can be fixed by merging the conflicting VirtualServices into a single resource."
                    ),
                );
            }
        }
    }
}

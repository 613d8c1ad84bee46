//! ServiceEntries for different hosts claiming one address and port
//! (MH0001, meshhub's own code: Istio has no analyzer for it). A sidecar
//! has one outbound listener per address and port, so for protocols
//! routed by address (TCP, TLS without SNI) only one of them is reached.

use std::collections::BTreeMap;

use crate::facts::Facts;
use crate::message::SERVICE_ENTRY_ADDRESS_CONFLICT;
use crate::report::Report;
use crate::set::Set;

/// The entries claiming one address and port, with their hosts.
type Claimants<'a> = Vec<(&'a Facts, &'a [String])>;

/// MH0001.
pub fn address_conflicts(set: &Set<'_>, out: &mut Report) {
    // (address, port) → the entries claiming it, with their hosts.
    let mut claims: BTreeMap<(&str, u32), Claimants<'_>> = BTreeMap::new();
    for (f, se) in &set.service_entries {
        for a in &se.addresses {
            for p in &se.ports {
                claims
                    .entry((a.as_str(), *p))
                    .or_default()
                    .push((f, &se.hosts));
            }
        }
    }
    for ((address, port), list) in claims {
        for (i, (f, hosts)) in list.iter().enumerate() {
            let others: Vec<String> = list
                .iter()
                .enumerate()
                .filter(|(j, (_, h))| *j != i && *h != *hosts)
                .map(|(_, (o, _))| format!("{}/{}", o.namespace, o.name))
                .collect();
            if others.is_empty() {
                continue;
            }
            out.push(
                f,
                SERVICE_ENTRY_ADDRESS_CONFLICT,
                "spec.addresses",
                format!(
                    "Address {address} port {port} is also claimed for other hosts by ServiceEntry {}; traffic routed by address reaches only one of them.",
                    others.join(", ")
                ),
            );
        }
    }
}

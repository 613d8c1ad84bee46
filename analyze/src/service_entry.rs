//! ServiceEntries for different hosts claiming one address and port
//! (MH0001, meshhub's own code: Istio has no analyzer for it). A sidecar
//! has one outbound listener per address and port, so for protocols
//! routed by address (TCP, TLS without SNI) only one of them is reached.

use std::collections::{BTreeMap, HashMap};

use crate::facts::Facts;
use crate::message::SERVICE_ENTRY_ADDRESS_CONFLICT;
use crate::report::{Report, name_list};
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
        if list.len() < 2 {
            continue;
        }
        // Entries with the same hosts do not conflict: number the host
        // lists, count each, and compare numbers.
        let mut ids: HashMap<&[String], usize> = HashMap::new();
        let id_of: Vec<usize> = list
            .iter()
            .map(|(_, hosts)| {
                let next = ids.len();
                *ids.entry(hosts).or_insert(next)
            })
            .collect();
        let mut same = vec![0usize; ids.len()];
        for id in &id_of {
            same[*id] += 1;
        }
        let mut order: Vec<usize> = (0..list.len()).collect();
        let names: Vec<String> = list
            .iter()
            .map(|(o, _)| format!("{}/{}", o.namespace, o.name))
            .collect();
        order.sort_by(|a, b| names[*a].cmp(&names[*b]));
        for (i, (f, _)) in list.iter().enumerate() {
            let total = list.len() - same[id_of[i]];
            if total == 0 {
                continue;
            }
            let others = order
                .iter()
                .filter(|j| id_of[**j] != id_of[i])
                .map(|j| names[*j].as_str());
            out.push(
                f,
                SERVICE_ENTRY_ADDRESS_CONFLICT,
                "spec.addresses",
                format!(
                    "Address {address} port {port} is also claimed for other hosts by ServiceEntry {}; traffic routed by address reaches only one of them.",
                    name_list(others, Some(total), ", ")
                ),
            );
        }
    }
}

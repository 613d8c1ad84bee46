//! Each cluster's exports judged alone, before anything is merged: an
//! export outside its cluster's policy, over its caps, or that would not
//! make a valid ServiceEntry on its own is refused and reported with its
//! cluster, and the other clusters' exports of the same Service make the
//! entry without it (issue 38: one bad contribution used to fail the
//! validation of the *combined* entry, which removed the Service from
//! every cluster).
//!
//! The check of a contribution is the one every generated entry goes
//! through in the pipeline ([`Check`]: the store's transcoding and
//! semantic checks), run on the entry this export alone would generate,
//! after a few checks of our own that the entry's shape would hide (a
//! port the entry would drop as a duplicate, a gateway port out of range).
//!
//! Order: the hub's own, by when it first saw each export ([`FirstSeen`]);
//! the exporting agent's `created` is shown, never used: a cluster could
//! otherwise win every conflict by reporting an old time.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use meshhub_proto::object::Object;
use meshhub_proto::upward::ServiceExport;
use meshhub_validate::names::{is_dns1123_label, is_dns1123_subdomain};

use super::contribution::{Contribution, FirstSeen};
use super::entry;
use crate::clusters::exports::ExportPolicy;

/// The checks every object goes through (the store's: transcoding and
/// semantic checks); the error messages, none when it is valid.
pub type Check = Arc<dyn Fn(Object) -> Vec<String> + Send + Sync>;

/// Why an export is not merged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Outside the cluster's export policy.
    #[error("policy: {0}")]
    Policy(String),
    /// Over one of the cluster's caps.
    #[error("cap: {0}")]
    Cap(String),
    /// It would not make a valid entry.
    #[error("invalid: {0}")]
    Invalid(String),
}

impl Refusal {
    /// Its kind, as the metric's `reason` label.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Policy(_) => "policy",
            Self::Cap(_) => "cap",
            Self::Invalid(_) => "invalid",
        }
    }
}

/// One export, judged.
#[derive(Clone, Debug, PartialEq)]
pub struct Judged {
    /// The export and when the hub first saw it.
    pub contribution: Contribution,
    /// Why it is not merged (`None`: it is).
    pub refusal: Option<Refusal>,
}

/// Our own checks of an export's shape.
fn shape(e: &ServiceExport) -> Result<(), String> {
    if !is_dns1123_label(&e.namespace) || !is_dns1123_label(&e.name) {
        return Err(format!(
            "{}/{} is not a namespace/name of DNS-1123 labels",
            e.namespace, e.name
        ));
    }
    if !matches!(e.r#type.as_str(), "ClusterSetIP" | "Headless") {
        return Err(format!(
            "type {:?} is neither ClusterSetIP nor Headless",
            e.r#type
        ));
    }
    if e.ports.is_empty() {
        return Err("no ports".to_owned());
    }
    let mut numbers = BTreeSet::new();
    for p in &e.ports {
        if !(1..=65535).contains(&p.port) {
            return Err(format!("port {} is out of 1-65535", p.port));
        }
        if !numbers.insert(p.port) {
            return Err(format!("port {} is given twice", p.port));
        }
        if !p.name.is_empty() && !is_dns1123_label(&p.name) {
            return Err(format!("port name {:?} is not a DNS-1123 label", p.name));
        }
    }
    if e.gateways.is_empty() {
        return Err("no gateway address".to_owned());
    }
    for g in &e.gateways {
        if g.port > 65535 {
            return Err(format!("gateway port {} is out of 0-65535", g.port));
        }
        if g.address.parse::<IpAddr>().is_err() && !is_dns1123_subdomain(&g.address) {
            return Err(format!(
                "gateway address {:?} is neither an IP address nor a host name",
                g.address
            ));
        }
    }
    Ok(())
}

/// Judges one cluster's exports (every one of them stamped in `seen`,
/// by `namespace/name`) under its policy, in the order the hub first saw
/// them: the first `max_services` that pass the other checks are merged.
/// Once that many are, the rest are refused over the cap without the
/// validation of their entry (the cheap checks of their shape still say
/// what is wrong with them): a validation costs far more than the rest,
/// and a cluster reporting a flood of exports (issue 38 counts 100,000)
/// must not cost the hub more than its cap's worth of them.
pub fn judge(
    cluster: &str,
    exports: &[ServiceExport],
    seen: &BTreeMap<String, FirstSeen>,
    policy: &ExportPolicy,
    check: &Check,
) -> Vec<Judged> {
    let mut judged: Vec<Judged> = exports
        .iter()
        .map(|e| Judged {
            contribution: Contribution {
                export: e.clone(),
                first_seen: seen
                    .get(&format!("{}/{}", e.namespace, e.name))
                    .copied()
                    .unwrap_or_default(),
            },
            refusal: None,
        })
        .collect();
    judged.sort_by(|a, b| order(a).cmp(&order(b)));
    let mut taken = 0_usize;
    for j in &mut judged {
        let e = &j.contribution.export;
        j.refusal = if let Some(why) = policy.refuses(&e.namespace, &e.name) {
            Some(Refusal::Policy(why))
        } else if e.gateways.len() > policy.max_endpoints {
            Some(Refusal::Cap(format!(
                "{} gateway addresses, more than this cluster's exports.maxEndpoints ({})",
                e.gateways.len(),
                policy.max_endpoints
            )))
        } else if !e.problem.is_empty() {
            // Reported by the agent (no Service, no gateway): nothing to
            // merge, nothing to judge; it counts towards the cap.
            None
        } else if let Err(why) = shape(e) {
            Some(Refusal::Invalid(why))
        } else if taken >= policy.max_services {
            // Not merged whatever the validation would say: not validated.
            Some(over_services(policy))
        } else {
            match entry::contribution_entry(cluster, e) {
                Some(object) => {
                    let errors = check(object);
                    (!errors.is_empty()).then(|| Refusal::Invalid(errors.join("; ")))
                }
                None => Some(Refusal::Invalid("generates no entry".to_owned())),
            }
        };
        if j.refusal.is_none() {
            if taken >= policy.max_services {
                j.refusal = Some(over_services(policy));
            } else {
                taken += 1;
            }
        }
    }
    judged
}

/// The order exports are judged in: first seen by the hub first.
fn order(j: &Judged) -> (u64, &str, &str) {
    let c = &j.contribution;
    (c.first_seen.seq, &c.export.namespace, &c.export.name)
}

/// The refusal of an export past the cluster's `exports.maxServices`.
fn over_services(policy: &ExportPolicy) -> Refusal {
    Refusal::Cap(format!(
        "more than this cluster's exports.maxServices ({}): the hub takes the ones it saw first",
        policy.max_services
    ))
}

#[cfg(test)]
mod tests;

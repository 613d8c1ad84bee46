//! What meshhub writes in a Gateway API object's status: what the
//! clusters' controllers (their istiods) said of the hub's version of it,
//! summed up — "Accepted by 3/3 clusters", or the cluster and reason where
//! not — per parent of a route, or for a Gateway or ListenerSet as a whole
//! ([`meshhub_kube::status::gateway`] says where it goes). Pure: the
//! writer task gathers the inputs.

use std::collections::BTreeMap;

use meshhub_api::upward::{
    ACCEPTED, Acceptance, ConditionStatus, GatewayApiStatusView, ObjectStatusView, ParentRole,
    ParentStatusView,
};
use meshhub_kube::status::gateway::{
    self as shape, FleetStatus, GatewayCondition, ParentEntry, Shape,
};
use meshhub_proto::kinds::gateway_api::GROUP;
use serde_json::Value;

use super::desired::cut;

/// At most this many clusters are named in a message.
const NAMED: usize = 3;

/// What one cluster said of the object (or of one of its parents).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Word {
    /// Accepted at the hub's version.
    Accepted,
    /// Refused: the controller's reason and message.
    Refused(String, String),
    /// Not yet, and why.
    Pending(&'static str),
    /// The cluster can't tell (its agent reports no controller status, or
    /// left the object out past its cap): left out of the tally, as the
    /// rollout does not wait for it.
    Untold,
}

/// What `cluster`'s report says of the whole object.
pub fn object_word(
    reported: Option<&GatewayApiStatusView>,
    collection: &str,
    name: &str,
    version: &str,
) -> Word {
    let Some(o) = applied(reported, collection, name, version) else {
        return pending(reported, collection, name);
    };
    match o.acceptance() {
        Acceptance::Accepted => Word::Accepted,
        Acceptance::Refused {
            at,
            reason,
            message,
            ..
        } => Word::Refused(
            reason,
            if at.is_empty() {
                message
            } else {
                format!("{at}: {message}")
            },
        ),
        Acceptance::Pending => Word::Pending("its controller has not accepted this generation yet"),
        Acceptance::Untold => Word::Untold,
    }
}

/// What the report says of the route's `parent_ref` (as its spec writes
/// it; `namespace` the route's).
pub fn parent_word(
    reported: Option<&GatewayApiStatusView>,
    collection: &str,
    name: &str,
    version: &str,
    parent_ref: &Value,
) -> Word {
    let Some(o) = applied(reported, collection, name, version) else {
        return pending(reported, collection, name);
    };
    let namespace = name.split_once('/').map_or("", |(ns, _)| ns);
    let Some(entry) = o
        .parents
        .iter()
        .find(|p| p.role == ParentRole::Parent && same_parent(p, parent_ref, namespace))
    else {
        return Word::Pending("no controller wrote a status for this parent");
    };
    let current = entry
        .conditions
        .iter()
        .find(|c| c.kind == ACCEPTED && c.observed_generation == o.generation);
    match current {
        Some(c) if c.status == ConditionStatus::True => Word::Accepted,
        Some(c) if c.status == ConditionStatus::False => {
            Word::Refused(c.reason.clone(), c.message.clone())
        }
        _ => Word::Pending("its controller has not accepted this generation yet"),
    }
}

/// The object as the cluster applied it, if at the hub's version.
fn applied<'a>(
    reported: Option<&'a GatewayApiStatusView>,
    collection: &str,
    name: &str,
    version: &str,
) -> Option<&'a ObjectStatusView> {
    reported?
        .object(collection, name)
        .filter(|o| o.version == version)
}

/// What a report says of an object it does not hold at the hub's
/// version of it (`collection`/`name`).
fn pending(reported: Option<&GatewayApiStatusView>, collection: &str, name: &str) -> Word {
    match reported {
        None => Word::Untold,
        Some(r) if r.omitted > 0 && r.object(collection, name).is_none() => Word::Untold,
        Some(_) => Word::Pending("not applied at this version yet"),
    }
}

/// Whether the reported entry `p` is about `parent_ref`, with the API's
/// defaults (group `gateway.networking.k8s.io`, kind `Gateway`, the
/// route's namespace).
fn same_parent(p: &ParentStatusView, parent_ref: &Value, namespace: &str) -> bool {
    let field = |f: &str| {
        parent_ref
            .get(f)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let or = |v: &str, default: &str| {
        if v.is_empty() {
            default.to_owned()
        } else {
            v.to_owned()
        }
    };
    let port = parent_ref
        .get("port")
        .and_then(Value::as_u64)
        .unwrap_or_default();
    or(&p.group, GROUP) == or(field("group"), GROUP)
        && or(&p.kind, "Gateway") == or(field("kind"), "Gateway")
        && or(&p.namespace, namespace) == or(field("namespace"), namespace)
        && p.name == field("name")
        && p.section_name == field("sectionName")
        && u64::from(p.port) == port
}

/// The condition summing up `words` (per cluster receiving the object),
/// about `generation`, of type `type_`; its transition time kept from
/// `before` when its status did not change.
pub fn condition(
    type_: &str,
    words: &BTreeMap<String, Word>,
    generation: i64,
    before: Option<&GatewayCondition>,
    now: &str,
) -> GatewayCondition {
    // Clusters that can't tell are left out of the tally.
    let receiving = words.len();
    let words: BTreeMap<&String, &Word> =
        words.iter().filter(|(_, w)| **w != Word::Untold).collect();
    let total = words.len();
    let accepted = words.values().filter(|w| ***w == Word::Accepted).count();
    let tally = format!("Accepted by {accepted}/{total} clusters");
    let refused: Vec<_> = words
        .iter()
        .filter_map(|(c, w)| match w {
            Word::Refused(reason, message) => Some((c, reason, message)),
            _ => None,
        })
        .collect();
    let (status, reason, message) = if total == 0 {
        (
            "Unknown",
            "Pending".to_owned(),
            if receiving == 0 {
                "served, but no remote cluster receives it".to_owned()
            } else {
                format!(
                    "none of the {receiving} clusters receiving it reports its controllers' status"
                )
            },
        )
    } else if let Some((_, reason, _)) = refused.first() {
        let mut parts: Vec<String> = refused
            .iter()
            .take(NAMED)
            .map(|(c, reason, message)| format!("refused by {c}: {reason}: {}", cut(message)))
            .collect();
        if refused.len() > NAMED {
            parts.push(format!("and {} more", refused.len() - NAMED));
        }
        (
            "False",
            api_reason(reason),
            format!("{}; {tally}", parts.join("; ")),
        )
    } else if accepted == total {
        ("True", "Accepted".to_owned(), tally)
    } else {
        let mut waiting: Vec<String> = words
            .iter()
            .filter_map(|(c, w)| match w {
                Word::Pending(why) => Some(format!("{c} ({why})")),
                _ => None,
            })
            .collect();
        let more = waiting.len().saturating_sub(NAMED);
        waiting.truncate(NAMED);
        if more > 0 {
            waiting.push(format!("and {more} more"));
        }
        (
            "Unknown",
            "Pending".to_owned(),
            format!("{tally}; waiting for {}", waiting.join(", ")),
        )
    };
    let last_transition_time = match before {
        Some(b) if b.status == status && !b.last_transition_time.is_empty() => {
            b.last_transition_time.clone()
        }
        _ => now.to_owned(),
    };
    GatewayCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        observed_generation: generation,
        last_transition_time,
        reason,
        message,
    }
}

/// A controller's reason as the API takes it (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`),
/// else `NotAccepted`.
fn api_reason(reason: &str) -> String {
    let mut chars = reason.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && reason
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':'))
        && !reason.ends_with([',', ':'])
        && reason.len() <= 1024;
    if ok {
        reason.to_owned()
    } else {
        "NotAccepted".to_owned()
    }
}

/// meshhub's part of the status of a Gateway API object of `shape`
/// (`parent_refs`: a route's spec), served at `version` to the clusters of
/// `reports` (each cluster's report of its controllers, `None` when its
/// agent tells none), about `generation`; times kept from `before`.
#[allow(clippy::too_many_arguments)]
pub fn fleet_status(
    shape: Shape,
    parent_refs: &[Value],
    collection: &str,
    name: &str,
    version: &str,
    reports: &BTreeMap<String, Option<&GatewayApiStatusView>>,
    generation: i64,
    before: Option<&FleetStatus>,
    now: &str,
) -> FleetStatus {
    match shape {
        Shape::Conditions => {
            let words = reports
                .iter()
                .map(|(c, r)| (c.clone(), object_word(*r, collection, name, version)))
                .collect();
            FleetStatus::Condition(condition(
                shape::ACCEPTED,
                &words,
                generation,
                before.and_then(|b| b.condition(None)),
                now,
            ))
        }
        Shape::Parents => FleetStatus::Parents(
            parent_refs
                .iter()
                .take(shape::MAX_PARENTS)
                .map(|r| {
                    let words = reports
                        .iter()
                        .map(|(c, rep)| {
                            (c.clone(), parent_word(*rep, collection, name, version, r))
                        })
                        .collect();
                    ParentEntry {
                        parent_ref: r.clone(),
                        condition: condition(
                            shape::ROUTE_ACCEPTED,
                            &words,
                            generation,
                            before.and_then(|b| b.condition(Some(r))),
                            now,
                        ),
                    }
                })
                .collect(),
        ),
    }
}

/// The status of an object the hub does not serve: `why`, for each
/// parent (a route) or as the object's condition.
pub fn not_served(
    shape: Shape,
    parent_refs: &[Value],
    reason: &str,
    why: &str,
    generation: i64,
    before: Option<&FleetStatus>,
    now: &str,
) -> FleetStatus {
    let make = |type_: &str, before: Option<&GatewayCondition>| GatewayCondition {
        type_: type_.to_owned(),
        status: "False".to_owned(),
        observed_generation: generation,
        last_transition_time: match before {
            Some(b) if b.status == "False" && !b.last_transition_time.is_empty() => {
                b.last_transition_time.clone()
            }
            _ => now.to_owned(),
        },
        reason: reason.to_owned(),
        message: cut(why),
    };
    match shape {
        Shape::Conditions => FleetStatus::Condition(make(
            shape::ACCEPTED,
            before.and_then(|b| b.condition(None)),
        )),
        Shape::Parents => FleetStatus::Parents(
            parent_refs
                .iter()
                .take(shape::MAX_PARENTS)
                .map(|r| ParentEntry {
                    parent_ref: r.clone(),
                    condition: make(
                        shape::ROUTE_ACCEPTED,
                        before.and_then(|b| b.condition(Some(r))),
                    ),
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests;

//! The view of what a cluster's Gateway API controllers wrote in the
//! status of the objects its agent applied. A report is input from
//! outside: every list and string is bounded, and the objects are sorted
//! by collection and name (each once) whatever order the agent sent.

use meshhub_api::upward::{
    ConditionStatus, ConditionView, GatewayApiStatusView, ObjectStatusView, ParentRole,
    ParentStatusView,
};
use meshhub_proto::upward::{self as proto, GatewayApiStatus};

use super::{bounded, bounded_to};

/// At most this many objects of one cluster are kept (the agent's own
/// cap).
pub const MAX_OBJECTS: usize = 5_000;
/// At most this many entries per object (the Gateway API allows 32
/// parents and 64 listeners).
const MAX_PARENTS: usize = 64;
/// At most this many conditions per entry.
const MAX_CONDITIONS: usize = 16;
/// At most this many bytes of a condition's message.
const MAX_MESSAGE: usize = 1024;
/// At most this many conditions of one cluster in all: the caps above
/// multiply to millions; past this budget objects are left out (counted in
/// `omitted`).
pub const MAX_CONDITIONS_TOTAL: usize = 50_000;

/// The view of `s`.
pub fn gateway_status_view(s: &GatewayApiStatus) -> GatewayApiStatusView {
    let mut budget = MAX_CONDITIONS_TOTAL;
    let mut objects: Vec<ObjectStatusView> = s
        .objects
        .iter()
        .take(MAX_OBJECTS)
        .take_while(|o| {
            let n = o.conditions.len().min(MAX_CONDITIONS)
                + o.parents
                    .iter()
                    .take(MAX_PARENTS)
                    .map(|p| p.conditions.len().min(MAX_CONDITIONS))
                    .sum::<usize>();
            budget = match budget.checked_sub(n) {
                Some(left) => left,
                None => return false,
            };
            true
        })
        .map(|o| ObjectStatusView {
            collection: bounded(&o.collection),
            name: bounded(&o.name),
            version: bounded(&o.version),
            generation: o.generation,
            parent_refs: o.parent_refs,
            conditions: conditions(&o.conditions),
            parents: o
                .parents
                .iter()
                .take(MAX_PARENTS)
                .map(|p| ParentStatusView {
                    role: match p.role() {
                        proto::ParentRole::Ancestor => ParentRole::Ancestor,
                        proto::ParentRole::Listener => ParentRole::Listener,
                        proto::ParentRole::Parent | proto::ParentRole::Unspecified => {
                            ParentRole::Parent
                        }
                    },
                    group: bounded(&p.group),
                    kind: bounded(&p.kind),
                    namespace: bounded(&p.namespace),
                    name: bounded(&p.name),
                    section_name: bounded(&p.section_name),
                    port: p.port,
                    controller: bounded(&p.controller_name),
                    conditions: conditions(&p.conditions),
                })
                .collect(),
        })
        .collect();
    let sent = objects.len();
    objects.sort_by(|a, b| (&a.collection, &a.name).cmp(&(&b.collection, &b.name)));
    objects.dedup_by(|a, b| a.collection == b.collection && a.name == b.name);
    let dropped = s.objects.len() - sent + (sent - objects.len());
    GatewayApiStatusView {
        objects,
        omitted: s
            .omitted
            .saturating_add(u32::try_from(dropped).unwrap_or(u32::MAX)),
    }
}

fn conditions(cs: &[proto::StatusCondition]) -> Vec<ConditionView> {
    cs.iter()
        .take(MAX_CONDITIONS)
        .map(|c| ConditionView {
            kind: bounded(&c.r#type),
            status: match c.status() {
                proto::ConditionStatus::True => ConditionStatus::True,
                proto::ConditionStatus::False => ConditionStatus::False,
                proto::ConditionStatus::Unknown | proto::ConditionStatus::Unspecified => {
                    ConditionStatus::Unknown
                }
            },
            reason: bounded(&c.reason),
            message: bounded_to(&c.message, MAX_MESSAGE),
            observed_generation: c.observed_generation,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(collection: &str, name: &str) -> proto::GatewayApiObjectStatus {
        proto::GatewayApiObjectStatus {
            collection: collection.into(),
            name: name.into(),
            generation: 2,
            parents: vec![proto::ParentStatus {
                role: proto::ParentRole::Parent.into(),
                name: "gw".into(),
                conditions: vec![proto::StatusCondition {
                    r#type: "Accepted".into(),
                    status: proto::ConditionStatus::False.into(),
                    reason: "NoMatchingParent".into(),
                    message: "x".repeat(10_000),
                    observed_generation: 2,
                    last_transition_time: None,
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn objects_are_sorted_once_each_and_bounded() {
        let s = GatewayApiStatus {
            objects: vec![object("c", "b/r"), object("c", "a/r"), object("c", "b/r")],
            omitted: 3,
        };
        let v = gateway_status_view(&s);
        let names: Vec<_> = v.objects.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["a/r", "b/r"]);
        assert_eq!(v.omitted, 4, "the agent's 3 and the duplicate");
        let c = &v.objects[0].parents[0].conditions[0];
        assert_eq!(c.status, ConditionStatus::False);
        assert!(c.message.len() <= MAX_MESSAGE + 4, "{}", c.message.len());
        assert!(v.object("c", "b/r").is_some());
    }

    #[test]
    fn a_flood_of_conditions_is_cut_to_the_clusters_budget() {
        let mut heavy = object("c", "a/r");
        heavy.parents[0].conditions[0].message.clear();
        heavy.parents = (0..MAX_PARENTS).map(|_| heavy.parents[0].clone()).collect();
        for p in &mut heavy.parents {
            p.conditions = (0..MAX_CONDITIONS)
                .map(|_| p.conditions[0].clone())
                .collect();
        }
        let per_object = MAX_PARENTS * MAX_CONDITIONS;
        let s = GatewayApiStatus {
            objects: (0..MAX_CONDITIONS_TOTAL / per_object + 100)
                .map(|i| proto::GatewayApiObjectStatus {
                    name: format!("ns/{i:06}"),
                    ..heavy.clone()
                })
                .collect(),
            omitted: 0,
        };
        let v = gateway_status_view(&s);
        assert_eq!(v.objects.len(), MAX_CONDITIONS_TOTAL / per_object);
        assert_eq!(
            v.omitted as usize,
            100 + MAX_CONDITIONS_TOTAL / per_object - v.objects.len()
        );
    }

    #[test]
    fn a_flood_is_cut_to_the_cap() {
        let s = GatewayApiStatus {
            objects: (0..MAX_OBJECTS + 10)
                .map(|i| object("c", &format!("ns/{i:06}")))
                .collect(),
            omitted: 0,
        };
        let v = gateway_status_view(&s);
        assert_eq!(v.objects.len(), MAX_OBJECTS);
        assert_eq!(v.omitted, 10);
    }
}

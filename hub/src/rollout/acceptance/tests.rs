use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use meshhub_api::upward::{
    ACCEPTED, ConditionStatus, ConditionView, GatewayApiStatusView, ObjectStatusView, ParentRole,
    ParentStatusView,
};
use meshhub_mcp::cache::Group;
use meshhub_mcp::ledger::Outcome;
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use meshhub_rollout::{Cause, Phase};

use super::{REFUSAL_SETTLE_MS, awaited};
use crate::history::version_id;
use crate::rollout::tests::{
    VS, controller, controller_and_view, delivery, names, policy_of, unlabelled, wave,
};

const ROUTES: &str = "k8s/gateway.networking.k8s.io/v1/httproutes";
const GRANTS: &str = "k8s/gateway.networking.k8s.io/v1/referencegrants";

fn resource(name: &str, version: &str) -> EncodedResource {
    EncodedResource {
        encoded: bytes::Bytes::from(format!("{name}-{version}")),
        name: name.into(),
        version: version.into(),
    }
}

/// A snapshot: virtual service `bookinfo/r` at `vs`, routes `shop/a` at
/// `a` and `shop/b` at 1, a reference grant at `a` (no status: never
/// awaited).
fn snapshot(vs: &str, a: &str) -> Arc<Snapshot> {
    let mut s = Snapshot::new();
    s.insert(
        VS,
        Arc::new(CollectionSnapshot::new(vec![resource("bookinfo/r", vs)])),
    );
    s.insert(
        ROUTES,
        Arc::new(CollectionSnapshot::new(vec![
            resource("shop/a", a),
            resource("shop/b", "1"),
        ])),
    );
    s.insert(
        GRANTS,
        Arc::new(CollectionSnapshot::new(vec![resource("shop/g", a)])),
    );
    Arc::new(s)
}

fn latest(vs: &str, a: &str) -> HashMap<Group, Arc<Snapshot>> {
    let s = snapshot(vs, a);
    ["a", "b", "c", "default"]
        .iter()
        .map(|g| (Group::from(*g), s.clone()))
        .collect()
}

/// `cluster`'s report: its controller's word on route `shop/a` at
/// `version` (generation 2), one parent with `status` at `generation`.
fn report(
    cluster: &str,
    version: &str,
    status: ConditionStatus,
    generation: i64,
) -> crate::upward::Reports {
    let mut r = crate::upward::state::ClusterReport::default();
    r.view.gateway_api_status = Some(GatewayApiStatusView {
        objects: vec![ObjectStatusView {
            collection: ROUTES.into(),
            name: "shop/a".into(),
            version: version.into(),
            generation: 2,
            parent_refs: 1,
            conditions: vec![],
            parents: vec![ParentStatusView {
                role: ParentRole::Parent,
                name: "gw".into(),
                section_name: "https".into(),
                conditions: vec![ConditionView {
                    kind: ACCEPTED.into(),
                    status,
                    reason: "NoMatchingParent".into(),
                    message: "sectionName \"https\" not found".into(),
                    observed_generation: generation,
                }],
                ..Default::default()
            }],
        }],
        omitted: 0,
    });
    Arc::new(BTreeMap::from([(cluster.to_owned(), Arc::new(r))]))
}

fn ack(
    c: &mut crate::rollout::Controller,
    at: u64,
    cluster: &str,
    s: &Snapshot,
) -> crate::rollout::Serve {
    let mut out = c.delivery(at, &delivery(cluster, s, Outcome::Ack));
    let mut routes = delivery(cluster, s, Outcome::Ack);
    routes.collection = ROUTES.into();
    routes.version = s.collection(ROUTES).version().to_owned();
    out.extend(c.delivery(at, &routes));
    let mut grants = routes.clone();
    grants.collection = GRANTS.into();
    grants.version = s.collection(GRANTS).version().to_owned();
    out.extend(c.delivery(at, &grants));
    out
}

#[test]
fn the_objects_awaited_are_the_ones_of_kinds_with_a_status_the_change_brought() {
    let before = snapshot("1", "1");
    let after = snapshot("2", "2");
    let got = awaited(Some(&before), &after, None).objects;
    assert_eq!(
        got,
        BTreeMap::from([((ROUTES.to_owned(), "shop/a".to_owned()), "2".to_owned())]),
        "shop/b is unchanged, a VirtualService and a ReferenceGrant have no controller status"
    );
    assert!(awaited(Some(&after), &after, None).objects.is_empty());
    assert_eq!(
        awaited(None, &after, None).objects.len(),
        2,
        "without the previous version: every route"
    );
    // ... but one its controller refused already at that very version.
    let reports = report("a", "2", ConditionStatus::False, 2);
    assert_eq!(
        awaited(None, &after, Some(&reports["a"])).objects.len(),
        1,
        "shop/a stood refused before: not this rollout's doing"
    );
}

#[test]
fn an_acked_cluster_passes_only_once_its_controller_accepted_the_new_generation() {
    let (mut c, view) = controller_and_view();
    c.built(0, &latest("1", "1"));
    let v2 = latest("2", "2");
    assert_eq!(names(&c.built(10, &v2)), ["a"]);
    let canary = v2[&Group::from("a")].clone();
    // Its controller still speaks of the last generation.
    c.reports(15, &report("a", "2", ConditionStatus::True, 1));
    ack(&mut c, 20, "a", &canary);
    assert!(
        matches!(c.rollout.as_ref().unwrap().phase, Phase::Updating),
        "ACKed but not accepted yet: {:?}",
        c.rollout.as_ref().unwrap().phase
    );
    assert_eq!(
        view.borrow().awaiting_acceptance.get("a"),
        Some(&vec!["httproutes shop/a".to_owned()]),
        "/rollout says what it waits for"
    );
    // Accepted at the live generation: the canary has taken it.
    c.reports(30, &report("a", "2", ConditionStatus::True, 2));
    assert!(
        matches!(c.rollout.as_ref().unwrap().phase, Phase::Baking { .. }),
        "{:?}",
        c.rollout.as_ref().unwrap().phase
    );
    assert!(view.borrow().awaiting_acceptance.is_empty());
}

#[test]
fn a_refusal_by_the_controller_that_stands_rolls_the_canary_back_like_a_nack_once() {
    let (audit, mut records) = crate::audit::AuditLog::capture();
    let policy = policy_of(vec![wave("canary", &["a"]), wave("rest", &["b", "c"])]);
    let mut c = crate::rollout::Controller::new(policy, unlabelled(&["a", "b", "c"]), audit).0;
    let v1 = latest("1", "1");
    c.built(0, &v1);
    let v2 = latest("2", "2");
    c.built(10, &v2);
    let canary = v2[&Group::from("a")].clone();
    ack(&mut c, 20, "a", &canary);
    // A refusal of another version is not this one's.
    assert!(
        c.reports(25, &report("a", "1", ConditionStatus::False, 2))
            .is_empty()
    );
    // A refusal must stand: the first tick after the settle time decides.
    assert!(
        c.reports(30, &report("a", "2", ConditionStatus::False, 2))
            .is_empty()
    );
    assert!(c.next_tick().is_some_and(|t| t <= 30 + REFUSAL_SETTLE_MS));
    assert!(c.tick(30 + REFUSAL_SETTLE_MS - 1).is_empty());
    let serve = c.tick(30 + REFUSAL_SETTLE_MS);
    assert_eq!(names(&serve), ["a"]);
    assert_eq!(version_id(&serve[0].1), version_id(&v1[&Group::from("a")]));
    let Phase::RolledBack { failure } = &c.rollout.as_ref().unwrap().phase else {
        panic!("{:?}", c.rollout)
    };
    assert_eq!(failure.cause, Cause::Nack);
    assert_eq!(failure.cluster.as_deref(), Some("a"));
    assert!(
        failure.message.contains(
            "httproutes shop/a (version 2) not accepted by the cluster's Gateway API controller: Gateway shop/gw (https): NoMatchingParent"
        ),
        "{}",
        failure.message
    );
    // Answered: later reports of the refusal are not judged again.
    while records.try_recv().is_ok() {}
    assert!(
        c.reports(40_000, &report("a", "2", ConditionStatus::False, 1))
            .is_empty()
    );
    assert!(
        c.reports(40_010, &report("a", "2", ConditionStatus::False, 2))
            .is_empty()
    );
    assert!(c.tick(60_000).is_empty());
    assert!(records.try_recv().is_err(), "nothing recorded again");
    assert!(c.awaiting_acceptance().is_empty());
}

#[test]
fn the_acceptance_already_reported_before_the_ack_counts_at_the_ack() {
    let mut c = controller();
    c.built(0, &latest("1", "1"));
    let v2 = latest("2", "2");
    c.built(10, &v2);
    c.reports(15, &report("a", "2", ConditionStatus::True, 2));
    ack(&mut c, 20, "a", &v2[&Group::from("a")]);
    assert!(matches!(
        c.rollout.as_ref().unwrap().phase,
        Phase::Baking { .. }
    ));
}

#[test]
fn an_agent_that_reports_no_controller_status_does_not_hold_its_cluster() {
    let mut c = controller();
    c.built(0, &latest("1", "1"));
    let v2 = latest("2", "2");
    c.built(10, &v2);
    let silent = Arc::new(BTreeMap::from([(
        "a".to_owned(),
        Arc::new(crate::upward::state::ClusterReport::default()),
    )]));
    c.reports(15, &silent);
    ack(&mut c, 20, "a", &v2[&Group::from("a")]);
    assert!(matches!(
        c.rollout.as_ref().unwrap().phase,
        Phase::Baking { .. }
    ));
}

#[test]
fn a_refusal_that_clears_within_the_settle_time_does_not_fail_the_wave() {
    let mut c = controller();
    c.built(0, &latest("1", "1"));
    let v2 = latest("2", "2");
    c.built(10, &v2);
    ack(&mut c, 20, "a", &v2[&Group::from("a")]);
    // The route applied a moment before the listener it names.
    assert!(
        c.reports(30, &report("a", "2", ConditionStatus::False, 2))
            .is_empty()
    );
    c.reports(40, &report("a", "2", ConditionStatus::True, 2));
    assert!(matches!(
        c.rollout.as_ref().unwrap().phase,
        Phase::Baking { .. }
    ));
    c.tick(30 + REFUSAL_SETTLE_MS);
    assert!(!matches!(
        c.rollout.as_ref().unwrap().phase,
        Phase::RolledBack { .. }
    ));
}

#[test]
fn an_object_its_agent_left_out_past_its_cap_does_not_hold_the_cluster() {
    let mut c = controller();
    c.built(0, &latest("1", "1"));
    let v2 = latest("2", "2");
    c.built(10, &v2);
    let mut r = crate::upward::state::ClusterReport::default();
    r.view.gateway_api_status = Some(GatewayApiStatusView {
        objects: vec![],
        omitted: 5_000,
    });
    c.reports(
        15,
        &Arc::new(BTreeMap::from([("a".to_owned(), Arc::new(r))])),
    );
    ack(&mut c, 20, "a", &v2[&Group::from("a")]);
    assert!(matches!(
        c.rollout.as_ref().unwrap().phase,
        Phase::Baking { .. }
    ));
}

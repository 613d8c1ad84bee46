use meshhub_api::upward::{ConditionView, ObjectStatusView, ParentStatusView};
use serde_json::json;

use super::*;

const ROUTES: &str = "k8s/gateway.networking.k8s.io/v1/httproutes";
const NOW: &str = "2026-11-28T12:00:00Z";

fn accepted(status: ConditionStatus, generation: i64, reason: &str) -> ConditionView {
    ConditionView {
        kind: ACCEPTED.into(),
        status,
        reason: reason.into(),
        message: format!("{reason} message"),
        observed_generation: generation,
    }
}

/// A cluster's report: route shop/r at `version`, generation 2, its
/// parent `gw` (section `http`) with `status`.
fn report(version: &str, status: ConditionStatus, reason: &str) -> GatewayApiStatusView {
    GatewayApiStatusView {
        objects: vec![ObjectStatusView {
            collection: ROUTES.into(),
            name: "shop/r".into(),
            version: version.into(),
            generation: 2,
            parent_refs: 1,
            conditions: vec![],
            parents: vec![ParentStatusView {
                role: ParentRole::Parent,
                name: "gw".into(),
                section_name: "http".into(),
                controller: "istio.io/gateway-controller".into(),
                conditions: vec![accepted(status, 2, reason)],
                ..Default::default()
            }],
        }],
        omitted: 0,
    }
}

fn route_status(
    reports: &BTreeMap<String, Option<&GatewayApiStatusView>>,
    before: Option<&FleetStatus>,
) -> GatewayCondition {
    let refs = [json!({"name": "gw", "sectionName": "http"})];
    let FleetStatus::Parents(entries) = fleet_status(
        Shape::Parents,
        &refs,
        ROUTES,
        "shop/r",
        "v2",
        reports,
        7,
        before,
        NOW,
    ) else {
        panic!("a route's status is per parent")
    };
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].parent_ref, refs[0]);
    entries[0].condition.clone()
}

#[test]
fn every_cluster_accepting_the_hubs_version_is_accepted_by_all() {
    let (e, w) = (
        report("v2", ConditionStatus::True, "Accepted"),
        report("v2", ConditionStatus::True, "Accepted"),
    );
    let reports = BTreeMap::from([("east".into(), Some(&e)), ("west".into(), Some(&w))]);
    let c = route_status(&reports, None);
    assert_eq!(
        (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
        ("Accepted", "True", "Accepted")
    );
    assert_eq!(c.message, "Accepted by 2/2 clusters");
    assert_eq!(c.observed_generation, 7, "the primary object's generation");
    assert_eq!(c.last_transition_time, NOW);
}

#[test]
fn one_refusal_names_its_cluster_and_reason_and_an_older_version_waits() {
    let e = report("v2", ConditionStatus::False, "NoMatchingParent");
    let w = report("v1", ConditionStatus::True, "Accepted");
    let n = report("v2", ConditionStatus::True, "Accepted");
    let reports = BTreeMap::from([
        ("east".into(), Some(&e)),
        ("west".into(), Some(&w)),
        ("north".into(), Some(&n)),
    ]);
    let c = route_status(&reports, None);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "NoMatchingParent")
    );
    assert_eq!(
        c.message,
        "refused by east: NoMatchingParent: NoMatchingParent message; Accepted by 1/3 clusters"
    );
    // Without the refusal: west has not applied v2 yet.
    let reports = BTreeMap::from([("west".into(), Some(&w)), ("north".into(), Some(&n))]);
    let c = route_status(&reports, None);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("Unknown", "Pending")
    );
    assert_eq!(
        c.message,
        "Accepted by 1/2 clusters; waiting for west (not applied at this version yet)"
    );
}

#[test]
fn a_parent_no_controller_wrote_about_waits_and_an_agent_that_tells_nothing_is_left_out() {
    let e = report("v2", ConditionStatus::True, "Accepted");
    let reports = BTreeMap::from([("east".into(), Some(&e)), ("old".into(), None)]);
    let refs = [json!({"name": "other"})];
    let FleetStatus::Parents(entries) = fleet_status(
        Shape::Parents,
        &refs,
        ROUTES,
        "shop/r",
        "v2",
        &reports,
        1,
        None,
        NOW,
    ) else {
        panic!()
    };
    let m = &entries[0].condition.message;
    assert_eq!(
        m,
        "Accepted by 0/1 clusters; waiting for east (no controller wrote a status for this parent)",
        "old can't tell: left out of the tally, as the rollout does not wait for it"
    );
    // Every cluster silent: said so, not "no cluster receives it".
    let silent = BTreeMap::from([("old".into(), None)]);
    let FleetStatus::Parents(entries) = fleet_status(
        Shape::Parents,
        &refs,
        ROUTES,
        "shop/r",
        "v2",
        &silent,
        1,
        None,
        NOW,
    ) else {
        panic!()
    };
    assert_eq!(
        entries[0].condition.message,
        "none of the 1 clusters receiving it reports its controllers' status"
    );
}

#[test]
fn parents_match_with_the_apis_defaults() {
    let p = ParentStatusView {
        role: ParentRole::Parent,
        group: "gateway.networking.k8s.io".into(),
        kind: "Gateway".into(),
        namespace: "shop".into(),
        name: "gw".into(),
        ..Default::default()
    };
    assert!(same_parent(&p, &json!({"name": "gw"}), "shop"));
    assert!(!same_parent(
        &p,
        &json!({"name": "gw", "namespace": "infra"}),
        "shop"
    ));
    assert!(!same_parent(
        &p,
        &json!({"name": "gw", "sectionName": "http"}),
        "shop"
    ));
    assert!(!same_parent(
        &p,
        &json!({"name": "gw", "kind": "ListenerSet"}),
        "shop"
    ));
}

#[test]
fn the_transition_time_stays_while_the_status_does() {
    let e = report("v2", ConditionStatus::True, "Accepted");
    let reports = BTreeMap::from([("east".into(), Some(&e))]);
    let first = route_status(&reports, None);
    let before = FleetStatus::Parents(vec![ParentEntry {
        parent_ref: json!({"name": "gw", "sectionName": "http"}),
        condition: GatewayCondition {
            last_transition_time: "earlier".into(),
            ..first
        },
    }]);
    assert_eq!(
        route_status(&reports, Some(&before)).last_transition_time,
        "earlier"
    );
}

#[test]
fn a_gateway_gets_one_condition_of_its_own_type() {
    let gw = GatewayApiStatusView {
        objects: vec![ObjectStatusView {
            collection: "gws".into(),
            name: "infra/gw".into(),
            version: "v1".into(),
            generation: 1,
            parent_refs: 0,
            conditions: vec![accepted(ConditionStatus::True, 1, "Accepted")],
            parents: vec![ParentStatusView {
                role: ParentRole::Listener,
                name: "https".into(),
                conditions: vec![accepted(ConditionStatus::False, 1, "InvalidCertificateRef")],
                ..Default::default()
            }],
        }],
        omitted: 0,
    };
    let reports = BTreeMap::from([("east".into(), Some(&gw))]);
    let FleetStatus::Condition(c) = fleet_status(
        Shape::Conditions,
        &[],
        "gws",
        "infra/gw",
        "v1",
        &reports,
        3,
        None,
        NOW,
    ) else {
        panic!()
    };
    assert_eq!(c.type_, "meshhub.io/Accepted");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "InvalidCertificateRef")
    );
    assert!(
        c.message
            .contains("refused by east: InvalidCertificateRef: listener https"),
        "{}",
        c.message
    );
}

#[test]
fn reasons_the_api_would_refuse_are_replaced() {
    assert_eq!(api_reason("NoMatchingParent"), "NoMatchingParent");
    assert_eq!(api_reason("no such thing"), "NotAccepted");
    assert_eq!(api_reason(""), "NotAccepted");
    assert_eq!(api_reason("Bad:"), "NotAccepted");
}

#[test]
fn an_object_not_served_says_why_on_every_parent() {
    let refs = [json!({"name": "a"}), json!({"name": "b"})];
    let FleetStatus::Parents(entries) = not_served(
        Shape::Parents,
        &refs,
        "Invalid",
        "refused by meshhub's validation: x",
        4,
        None,
        NOW,
    ) else {
        panic!()
    };
    assert_eq!(entries.len(), 2);
    assert!(
        entries
            .iter()
            .all(|e| e.condition.status == "False" && e.condition.reason == "Invalid")
    );
}

use meshhub_mcp::ledger::{Delivery, Outcome, PeerStatus, Role};
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource};
use meshhub_rollout::{Members, OnFailure, Promotion, Wave};

use super::*;

pub(crate) const VS: &str = "istio/networking/v1alpha3/virtualservices";
const DR: &str = "istio/networking/v1alpha3/destinationrules";

/// A snapshot whose virtual service `r` is at `version` (and one fixed
/// destination rule).
pub(crate) fn snapshot(version: &str) -> Arc<Snapshot> {
    let mut s = Snapshot::new();
    let vs = EncodedResource {
        encoded: bytes::Bytes::from(format!("vs-{version}")),
        name: "bookinfo/r".into(),
        version: version.into(),
    };
    let dr = EncodedResource {
        encoded: bytes::Bytes::from_static(b"dr"),
        name: "bookinfo/d".into(),
        version: "1".into(),
    };
    s.insert(VS, Arc::new(CollectionSnapshot::new(vec![vs])));
    s.insert(DR, Arc::new(CollectionSnapshot::new(vec![dr])));
    Arc::new(s)
}

pub(crate) fn wave(name: &str, clusters: &[&str]) -> Wave {
    Wave {
        name: name.into(),
        members: Members::Names(clusters.iter().map(|c| (*c).to_owned()).collect()),
        max_concurrent: None,
        bake_ms: 1_000,
        promotion: Promotion::Automatic,
        metrics: vec![],
    }
}

pub(crate) fn controller() -> Controller {
    controller_and_view().0
}

/// [`controller`] and its view (what `GET /rollout` shows).
pub(crate) fn controller_and_view() -> (Controller, watch::Receiver<Arc<View>>) {
    let policy = policy_of(vec![wave("canary", &["a"]), wave("rest", &["b", "c"])]);
    Controller::new(policy, unlabelled(&["a", "b", "c"]), AuditLog::default())
}

/// A policy of `waves` that rolls back, with a 60 s deadline.
pub(crate) fn policy_of(waves: Vec<Wave>) -> Policy {
    Policy {
        waves,
        progress_deadline_ms: 60_000,
        on_failure: OnFailure::Rollback,
    }
}

/// Dialed clusters `names`, without labels.
pub(crate) fn unlabelled(names: &[&str]) -> Vec<(String, BTreeMap<String, String>)> {
    names
        .iter()
        .map(|n| ((*n).to_owned(), BTreeMap::new()))
        .collect()
}

pub(crate) fn latest(version: &str) -> HashMap<Group, Arc<Snapshot>> {
    let s = snapshot(version);
    ["a", "b", "c", "default"]
        .iter()
        .map(|g| (Group::from(*g), s.clone()))
        .collect()
}

pub(crate) fn names(serve: &Serve) -> Vec<&str> {
    let mut n: Vec<&str> = serve.iter().map(|(g, _)| g.as_ref()).collect();
    n.sort_unstable();
    n
}

pub(crate) fn delivery(cluster: &str, snapshot: &Snapshot, outcome: Outcome) -> Delivery {
    Delivery {
        role: Role::Source,
        peer: cluster.into(),
        node_id: cluster.into(),
        group: cluster.into(),
        collection: VS.into(),
        version: snapshot.collection(VS).version().to_owned(),
        outcome,
        code: None,
        message: (outcome == Outcome::Nack).then(|| "bad route".to_owned()),
    }
}

#[test]
fn first_snapshots_are_served_at_once_and_only_dialed_clusters_are_governed() {
    let mut c = controller();
    assert!(c.governs("a") && !c.governs("default"));
    let serve = c.built(0, &latest("1"));
    assert_eq!(names(&serve), ["a", "b", "c"]);
    assert!(c.rollout.is_none());
    // The same content again: nothing to do.
    assert!(c.built(1, &latest("1")).is_empty());
}

#[test]
fn a_change_reaches_the_canary_first_and_the_rest_after_its_ack_and_bake() {
    let mut c = controller();
    c.built(0, &latest("1"));
    let v2 = latest("2");
    let serve = c.built(10, &v2);
    assert_eq!(names(&serve), ["a"]);
    assert!(Arc::ptr_eq(&serve[0].1, &v2[&Group::from("a")]));
    // The ACK of the unchanged collection's version does not count.
    let mut dr = delivery("a", &v2[&Group::from("a")], Outcome::Ack);
    dr.collection = DR.into();
    assert!(c.delivery(20, &dr).is_empty());
    // A consumer's ACK on the group does not speak for the cluster.
    let mut consumer = delivery("a", &v2[&Group::from("a")], Outcome::Ack);
    consumer.peer = "127.0.0.1:5000".into();
    assert!(c.delivery(20, &consumer).is_empty());
    assert_eq!(c.rollout.as_ref().unwrap().phase, Phase::Updating);

    assert!(
        c.delivery(30, &delivery("a", &v2[&Group::from("a")], Outcome::Ack))
            .is_empty()
    );
    assert_eq!(c.next_tick(), Some(1_030));
    assert!(c.tick(1_029).is_empty());
    let serve = c.tick(1_030);
    assert_eq!(names(&serve), ["b", "c"]);
    for cl in ["b", "c"] {
        c.delivery(40, &delivery(cl, &v2[&Group::from(cl)], Outcome::Ack));
    }
    c.tick(2_040);
    assert_eq!(c.rollout.as_ref().unwrap().phase, Phase::Completed);
    assert_eq!(c.next_tick(), None);
}

#[test]
fn a_nack_in_the_canary_serves_it_its_previous_snapshot_and_the_rest_never_see_the_change() {
    let mut c = controller();
    let v1 = latest("1");
    c.built(0, &v1);
    let v2 = latest("2");
    c.built(10, &v2);
    let serve = c.delivery(20, &delivery("a", &v2[&Group::from("a")], Outcome::Nack));
    assert_eq!(names(&serve), ["a"]);
    assert_eq!(version_id(&serve[0].1), version_id(&v1[&Group::from("a")]));
    let r = c.rollout.as_ref().unwrap();
    let Phase::RolledBack { failure } = &r.phase else {
        panic!("{:?}", r.phase)
    };
    assert!(failure.message.contains("bad route"), "{}", failure.message);
    assert!(c.tick(1_000_000).is_empty(), "b and c stay on v1");
}

#[test]
fn a_newer_change_supersedes_the_rollout_and_starts_from_the_first_wave() {
    let mut c = controller();
    c.built(0, &latest("1"));
    let v2 = latest("2");
    c.built(10, &v2);
    let v3 = latest("3");
    let serve = c.built(20, &v3);
    // a moves on to v3; b and c stay on v1 until their wave. a had v2
    // without an ACK: it goes from v1, the last version it accepted (its
    // answer to v2 is not lost with the old rollout).
    assert_eq!(names(&serve), ["a"]);
    let r = c.rollout.as_ref().unwrap();
    assert_eq!(r.id, 2);
    let v1 = Some(version_id(&latest("1")[&Group::from("b")]));
    assert_eq!(r.targets["b"].step.from, v1);
    assert_eq!(r.targets["a"].step.from, v1);
    // The old rollout's ACK does not count for the new one.
    assert!(
        c.delivery(30, &delivery("a", &v2[&Group::from("a")], Outcome::Ack))
            .is_empty()
    );
    assert_eq!(c.rollout.as_ref().unwrap().phase, Phase::Updating);
}

#[test]
fn missed_deliveries_are_read_from_the_ledger() {
    let mut c = controller();
    c.built(0, &latest("1"));
    let v2 = latest("2");
    c.built(10, &v2);
    let acked = delivery("a", &v2[&Group::from("a")], Outcome::Ack);
    let peer: PeerStatus = serde_json::from_value(serde_json::json!({
        "id": 1, "role": "source", "protocol": "mcp", "peer": "a", "node_id": "a", "group": "a",
        "connected": true, "connected_since": null, "disconnected_at": null, "last_error": null,
        "streams": 1,
        "collections": {VS: {
            "sent": {"version": acked.version, "nonce": "1", "at": "2026-11-24T10:00:00.000Z"},
            "acked": {"version": acked.version, "nonce": "1", "at": "2026-11-24T10:00:00.000Z"},
            "nacked": null, "blocked": null, "acks": 1, "nacks": 0, "stale": 0, "state": "SYNCED"}},
    }))
    .expect("a ledger entry");
    c.reconcile(20, &[peer]);
    assert!(matches!(
        c.rollout.as_ref().unwrap().phase,
        Phase::Baking { .. }
    ));
}

#[test]
fn operators_promote_and_abort_and_a_missing_rollout_is_said() {
    let mut c = controller();
    assert!(matches!(
        c.act(0, Action::Promote, None, "ops"),
        Err(ActionError::NoRollout)
    ));
    let v1 = latest("1");
    c.built(0, &v1);
    c.built(10, &latest("2"));
    let serve = c.act(20, Action::Promote, Some("c"), "ops").unwrap();
    assert_eq!(names(&serve), ["c"]);
    let serve = c.act(30, Action::Abort, None, "ops").unwrap();
    assert_eq!(names(&serve), ["a", "c"]);
    assert!(
        serve
            .iter()
            .all(|(_, s)| version_id(s) == version_id(&v1[&Group::from("a")]))
    );
}

/// The reports with `cluster`'s istiod dropping virtual service
/// `bookinfo/r` at `version`.
pub(crate) fn dropped(cluster: &str, version: &str) -> crate::upward::Reports {
    let mut report = crate::upward::state::ClusterReport::default();
    report.view.istiod = Some(meshhub_api::upward::IstiodView {
        reachable: true,
        dropped: vec![meshhub_api::upward::ObjectProblemView {
            collection: VS.into(),
            name: "bookinfo/r".into(),
            version: version.into(),
            reason: "unknown type".into(),
        }],
        ..Default::default()
    });
    Arc::new(BTreeMap::from([(cluster.to_owned(), Arc::new(report))]))
}

#[test]
fn a_drop_of_the_new_version_by_the_canarys_istiod_rolls_it_back_and_an_old_one_does_not() {
    let mut c = controller();
    let v1 = latest("1");
    c.built(0, &v1);
    c.built(10, &latest("2"));
    c.delivery(
        20,
        &delivery("a", &latest("2")[&Group::from("a")], Outcome::Ack),
    );
    // A drop of the previous version (a stale report) is not this rollout's.
    assert!(c.reports(30, &dropped("a", "1")).is_empty());
    assert!(matches!(
        c.rollout.as_ref().unwrap().phase,
        Phase::Baking { .. }
    ));
    let serve = c.reports(40, &dropped("a", "2"));
    assert_eq!(names(&serve), ["a"]);
    assert_eq!(version_id(&serve[0].1), version_id(&v1[&Group::from("a")]));
    let Phase::RolledBack { failure } = &c.rollout.as_ref().unwrap().phase else {
        panic!("{:?}", c.rollout)
    };
    assert_eq!(failure.cause, meshhub_rollout::Cause::Dropped);
    assert!(
        failure.message.contains("istiod dropped"),
        "{}",
        failure.message
    );
}

/// What a follower reads: `leader`'s newest decisions, signed by
/// `hub-a`, with the snapshots of `known` (its history).
pub(crate) fn mirrored(
    leader: &Controller,
    known: &[&HashMap<Group, Arc<Snapshot>>],
) -> Option<Arc<Mirrored>> {
    let decisions = leader
        .states()
        .borrow()
        .as_deref()
        .cloned()
        .unwrap_or_default();
    let mut snapshots = shared::Snapshots::new();
    for l in known {
        for (g, s) in l.iter() {
            snapshots.insert((g.to_string(), version_id(s)), s.clone());
        }
    }
    Some(Arc::new(Mirrored {
        decisions: Decisions {
            by: Some("hub-a".into()),
            ..decisions
        },
        snapshots,
    }))
}

pub(crate) fn served(serve: &Serve) -> BTreeMap<String, String> {
    serve
        .iter()
        .map(|(g, s)| (g.to_string(), version_id(s)))
        .collect()
}

#[test]
fn a_follower_serves_what_the_leader_decided_and_sends_operators_to_it() {
    let (mut leader, mut follower) = (controller(), controller().following());
    let (v1, v2) = (latest("1"), latest("2"));
    let id = |l: &HashMap<Group, Arc<Snapshot>>| version_id(&l[&Group::from("a")]);
    leader.built(0, &v1);
    // Nothing read from the leader yet: the dialed clusters wait.
    assert!(follower.built(0, &v1).is_empty());
    let serve = follower.follow(mirrored(&leader, &[]));
    assert_eq!(names(&serve), ["a", "b", "c"]);

    leader.built(10, &v2);
    // The follower built v2 too, but only the leader's decision moves it.
    assert!(follower.built(10, &v2).is_empty());
    let serve = follower.follow(mirrored(&leader, &[]));
    assert_eq!(served(&serve), BTreeMap::from([("a".to_owned(), id(&v2))]));
    let view = follower.view.borrow().clone();
    assert!(view.following);
    assert_eq!(view.leader.as_deref(), Some("hub-a"));
    assert_eq!(view.rollout.as_ref().map(|r| r.id), Some(1));

    // Followers decide nothing: operators are sent to the leader; ACKs,
    // ticks and gates are the leader's.
    let Err(ActionError::NotLeader { leader: who }) =
        follower.act(20, Action::Promote, None, "ops")
    else {
        panic!("a follower must refuse operators' actions");
    };
    assert_eq!(who.as_deref(), Some("hub-a"));
    assert!(
        follower
            .delivery(20, &delivery("a", &v2[&Group::from("a")], Outcome::Ack))
            .is_empty()
    );
    assert_eq!(follower.next_tick(), None);
    assert!(follower.tick(1_000_000).is_empty());
}

#[test]
fn a_follower_that_takes_the_lead_continues_the_rollout_where_the_leader_left_it() {
    let (mut leader, mut follower) = (controller(), controller().following());
    let (v1, v2) = (latest("1"), latest("2"));
    leader.built(0, &v1);
    follower.built(0, &v1);
    follower.follow(mirrored(&leader, &[]));
    leader.built(10, &v2);
    leader.delivery(20, &delivery("a", &v2[&Group::from("a")], Outcome::Ack));
    follower.built(10, &v2);
    follower.follow(mirrored(&leader, &[&v1]));
    // The leader is gone; the follower leads: same rollout, same holds.
    let serve = follower.lead(30, 1);
    assert!(
        serve.is_empty(),
        "nothing served changes: {:?}",
        names(&serve)
    );
    let r = follower.rollout.as_ref().unwrap();
    assert_eq!(r.id, 1);
    assert!(matches!(r.phase, Phase::Baking { .. }), "{:?}", r.phase);
    assert!(!follower.view.borrow().following);
    let serve = follower.tick(1_020);
    assert_eq!(names(&serve), ["b", "c"]);
    for cl in ["b", "c"] {
        follower.delivery(40, &delivery(cl, &v2[&Group::from(cl)], Outcome::Ack));
    }
    follower.tick(2_040);
    assert_eq!(follower.rollout.as_ref().unwrap().phase, Phase::Completed);
    // Its decisions are what the next follower reads.
    let shared = follower.states().borrow().clone().unwrap();
    assert_eq!(shared.rollout.as_ref().map(|r| r.id), Some(1));
    assert_eq!(shared.serving["c"], version_id(&v2[&Group::from("c")]));
    assert_eq!(shared.term, 1, "made in the term it leads in");
}

#[test]
fn a_change_the_old_leader_never_rolled_out_goes_through_the_waves_under_the_new_one() {
    let (mut leader, mut follower) = (controller(), controller().following());
    let (v1, v2) = (latest("1"), latest("2"));
    leader.built(0, &v1);
    follower.built(0, &v1);
    follower.follow(mirrored(&leader, &[&v1]));
    // The change reached the follower's sources; the leader died first.
    follower.built(10, &v2);
    let serve = follower.lead(20, 1);
    assert_eq!(names(&serve), ["a"], "only the canary gets it");
    let r = follower.rollout.as_ref().unwrap();
    assert_eq!(r.id, 1);
    assert_eq!(r.targets["c"].state, ClusterState::Held);
}

#[test]
fn a_restarted_hub_serves_what_it_served_and_rolls_out_what_changed_while_it_was_down() {
    let (v1, v2) = (latest("1"), latest("2"));
    let mut before = controller();
    before.built(0, &v1);
    let saved = before.states().borrow().as_deref().cloned().unwrap();
    let snapshots = v1
        .iter()
        .map(|(g, s)| ((g.to_string(), version_id(s)), s.clone()))
        .collect();
    let mut after = controller().restoring(Restored {
        rollout: saved.rollout,
        serving: saved.serving,
        snapshots,
        standing: saved.standing,
        counted_refusals: saved.counted_refusals,
    });
    let serve = after.built(10, &v2);
    let versions = served(&serve);
    assert_eq!(versions["a"], version_id(&v2[&Group::from("a")]));
    for cl in ["b", "c"] {
        assert_eq!(versions[cl], version_id(&v1[&Group::from(cl)]), "{cl} held");
    }
    assert_eq!(
        after.rollout.as_ref().unwrap().targets["b"].state,
        ClusterState::Held
    );
}

/// The reports with `cluster`'s agent having ACKed the hub's `holds`
/// version of the virtual services, its last refused change `refused`.
fn holding(cluster: &str, holds: &str, refused: &str) -> crate::upward::Reports {
    let mut report = crate::upward::state::ClusterReport::default();
    report.view.collections.insert(
        VS.into(),
        meshhub_api::upward::HeldView {
            hub_version: if refused.is_empty() {
                holds.into()
            } else {
                refused.into()
            },
            acked_version: holds.into(),
            refused: if refused.is_empty() {
                String::new()
            } else {
                format!("{refused}: the cluster's API refused it")
            },
            refusal: if refused.is_empty() {
                String::new()
            } else {
                "the cluster's API refused it".into()
            },
            refused_version: refused.into(),
            ..Default::default()
        },
    );
    Arc::new(BTreeMap::from([(cluster.to_owned(), Arc::new(report))]))
}

#[test]
fn an_agents_report_speaks_for_a_cluster_another_replica_dials() {
    let mut c = controller();
    let (v1, v2, v3) = (latest("1"), latest("2"), latest("3"));
    let vs_of = |l: &HashMap<Group, Arc<Snapshot>>| {
        l[&Group::from("a")].collection(VS).version().to_owned()
    };
    c.built(0, &v1);
    c.built(10, &v2);
    // Still the old version: nothing; then the new one held: the ACK.
    assert!(c.reports(20, &holding("a", &vs_of(&v1), "")).is_empty());
    assert_eq!(c.rollout.as_ref().unwrap().phase, Phase::Updating);
    c.reports(30, &holding("a", &vs_of(&v2), ""));
    assert!(matches!(
        c.rollout.as_ref().unwrap().phase,
        Phase::Baking { .. }
    ));

    // The next change refused by the canary's cluster: rolled back.
    c.built(40, &v3);
    let serve = c.reports(50, &holding("a", &vs_of(&v2), &vs_of(&v3)));
    assert_eq!(names(&serve), ["a"]);
    let Phase::RolledBack { failure } = &c.rollout.as_ref().unwrap().phase else {
        panic!("{:?}", c.rollout)
    };
    assert!(
        failure.message.contains("the cluster's API refused it"),
        "{}",
        failure.message
    );
}

#[test]
fn a_round_of_reports_looks_at_the_clusters_whose_report_changed_and_those_rechecked() {
    use super::signals::{Recheck, to_look_at};
    let report = |n: &str| {
        let mut r = crate::upward::ClusterReport::default();
        r.view.unserved = n == "unserved";
        Arc::new(r)
    };
    let first: crate::upward::Reports = Arc::new(BTreeMap::from([
        ("a".to_owned(), report("")),
        ("b".to_owned(), report("")),
        ("c".to_owned(), report("")),
    ]));
    let every = to_look_at(None, &first, &Recheck::none());
    assert_eq!(every, ["a", "b", "c"], "nothing looked at before: all");
    // b replaced (even with equal content), d new; a and c the same.
    let mut next = (*first).clone();
    next.insert("b".into(), report(""));
    next.insert("d".into(), report("unserved"));
    let next = Arc::new(next);
    assert_eq!(
        to_look_at(Some(&first), &next, &Recheck::none()),
        ["b", "d"]
    );
    let mut recheck = Recheck::none();
    recheck.add("c");
    assert_eq!(to_look_at(Some(&first), &next, &recheck), ["b", "c", "d"]);
    assert_eq!(
        to_look_at(Some(&first), &next, &Recheck::Every),
        ["a", "b", "c", "d"]
    );
    assert!(to_look_at(Some(&next), &next, &Recheck::none()).is_empty());
}

#[test]
fn a_report_unchanged_since_before_the_rollout_still_counts_for_it() {
    let mut c = controller();
    let (v1, v2) = (latest("1"), latest("2"));
    let vs2 = v2[&Group::from("a")].collection(VS).version().to_owned();
    c.built(0, &v1);
    // The agent holds v2 already (another replica sent it) before this
    // replica's rollout of it starts: nothing awaited yet.
    let reports = holding("a", &vs2, "");
    assert!(c.reports(5, &reports).is_empty());
    c.built(10, &v2);
    assert_eq!(c.rollout.as_ref().unwrap().phase, Phase::Updating);
    // The same reports again (no cluster's report changed): the new
    // rollout's awaited versions are looked for in them all the same.
    c.reports(20, &reports);
    assert!(
        matches!(c.rollout.as_ref().unwrap().phase, Phase::Baking { .. }),
        "{:?}",
        c.rollout
    );
}

#[test]
fn a_refusal_already_reported_before_does_not_fail_a_new_rollout() {
    let mut c = controller();
    let (v1, v2) = (latest("1"), latest("2"));
    let vs2 = v2[&Group::from("a")].collection(VS).version().to_owned();
    let vs1 = v1[&Group::from("a")].collection(VS).version().to_owned();
    c.built(0, &v1);
    c.built(10, &v2);
    // First seen already refusing v2 (an old refusal): not this rollout's.
    assert!(c.reports(20, &holding("a", &vs1, &vs2)).is_empty());
    assert_eq!(c.rollout.as_ref().unwrap().phase, Phase::Updating);
    // Held while the cluster's API takes it: not yet an ACK.
    let mut applying = holding("a", &vs1, "");
    Arc::make_mut(Arc::make_mut(&mut applying).get_mut("a").unwrap())
        .view
        .collections
        .get_mut(VS)
        .unwrap()
        .hub_version = vs2.clone();
    assert!(c.reports(25, &applying).is_empty());
    assert_eq!(c.rollout.as_ref().unwrap().phase, Phase::Updating);
    // Received again (the refusal cleared) and ACKed.
    c.reports(30, &holding("a", &vs2, ""));
    assert!(matches!(
        c.rollout.as_ref().unwrap().phase,
        Phase::Baking { .. }
    ));
}

/// `latest(version)` with cluster `d` too.
fn latest_with_d(version: &str) -> HashMap<Group, Arc<Snapshot>> {
    let mut l = latest(version);
    let s = l[&Group::from("a")].clone();
    l.insert(Group::from("d"), s);
    l
}

#[test]
fn clusters_added_and_removed_by_a_reload_join_and_leave_the_rollout() {
    let mut c = controller();
    c.built(0, &latest("1"));
    let v2 = latest("2");
    assert_eq!(names(&c.built(10, &v2)), ["a"]);

    // c leaves the configuration mid-rollout and d joins.
    assert!(c.set_clusters(15, unlabelled(&["a", "b", "d"])).is_empty());
    assert!(!c.governs("c") && c.governs("d"));
    let r = c.rollout.as_ref().unwrap();
    assert!(!r.targets.contains_key("c"), "c left the rollout");
    assert!(
        !c.states()
            .borrow()
            .as_ref()
            .unwrap()
            .serving
            .contains_key("c")
    );

    // d's first snapshot is served at once, as any cluster's first.
    let v2d = latest_with_d("2");
    assert_eq!(names(&c.built(16, &v2d)), ["d"]);

    // The rollout in flight completes without c.
    c.delivery(20, &delivery("a", &v2[&Group::from("a")], Outcome::Ack));
    assert_eq!(names(&c.tick(1_020)), ["b"]);
    c.delivery(30, &delivery("b", &v2[&Group::from("b")], Outcome::Ack));
    c.tick(2_030);
    assert_eq!(c.rollout.as_ref().unwrap().phase, Phase::Completed);

    // The next change reaches d only after the policy's waves (no wave
    // names it: the implicit last one takes it).
    let v3 = latest_with_d("3");
    assert_eq!(names(&c.built(3_000, &v3)), ["a"]);
    c.delivery(3_010, &delivery("a", &v3[&Group::from("a")], Outcome::Ack));
    assert_eq!(names(&c.tick(4_010)), ["b"]);
    c.delivery(4_020, &delivery("b", &v3[&Group::from("b")], Outcome::Ack));
    assert_eq!(names(&c.tick(5_020)), ["d"]);
}

#[test]
fn new_labels_place_a_cluster_in_the_waves_of_the_next_rollout() {
    let policy = policy_of(vec![
        Wave {
            members: Members::Labels(BTreeMap::from([("tier".to_owned(), "canary".to_owned())])),
            ..wave("canary", &[])
        },
        wave("rest", &["a", "b", "c"]),
    ]);
    let plain = unlabelled(&["a", "b", "c"]);
    let mut c = Controller::new(policy, plain.clone(), AuditLog::default()).0;
    c.built(0, &latest("1"));
    // Nobody is a canary: the change goes to everyone with "rest".
    assert_eq!(names(&c.built(10, &latest("2"))), ["a", "b", "c"]);

    let mut labelled = plain;
    labelled[1].1.insert("tier".into(), "canary".into());
    c.set_clusters(20, labelled);
    let v2 = latest("2");
    for name in ["a", "b", "c"] {
        c.delivery(25, &delivery(name, &v2[&Group::from(name)], Outcome::Ack));
    }
    assert_eq!(
        names(&c.built(30, &latest("3"))),
        ["b"],
        "b is the canary now"
    );
}

#[test]
fn a_reloaded_policy_governs_the_next_rollout_and_the_one_in_flight_keeps_its_own() {
    let gate = |name: &str| meshhub_rollout::MetricGate {
        name: name.into(),
        query: "up".into(),
        comparison: meshhub_rollout::Comparison::Greater,
        threshold: 0.0,
        during_bake: false,
        on_no_data: meshhub_rollout::NoData::default(),
    };
    let policy = |canary: &str, gate_name: &str| {
        policy_of(vec![
            Wave {
                metrics: vec![gate(gate_name)],
                ..wave("canary", &[canary])
            },
            wave("rest", &["a", "b", "c"]),
        ])
    };
    let (mut c, view) = Controller::new(
        policy("a", "before"),
        unlabelled(&["a", "b", "c"]),
        AuditLog::default(),
    );
    c.built(0, &latest("1"));
    assert_eq!(names(&c.built(10, &latest("2"))), ["a"]);
    c.delivery(
        15,
        &delivery("a", &latest("2")[&Group::from("a")], Outcome::Ack),
    );

    // b becomes the canary, with another gate, while a's rollout runs.
    c.set_policy(policy("b", "after"));
    assert_eq!(
        view.borrow().policy.as_ref().unwrap().waves[0].members,
        Members::Names(vec!["b".into()]),
        "GET /rollout shows the new policy"
    );
    let gates = c.wave_gates(0, false);
    assert_eq!(
        gates[0].name, "before",
        "the rollout in flight keeps its gates"
    );
    assert_eq!(c.rollout.as_ref().unwrap().waves[0].clusters, ["a"]);

    // The next change follows the new policy.
    assert_eq!(names(&c.built(20, &latest("3"))), ["b"]);
    assert_eq!(c.wave_gates(0, false)[0].name, "after");
    // The same policy again: nothing changes.
    c.set_policy(policy("b", "after"));
    assert_eq!(c.wave_gates(0, false)[0].name, "after");
}

/// Decisions saved mid-rollout (v1 → v2, the canary released), with the
/// snapshots of both versions.
fn saved_mid_rollout() -> (Restored, HashMap<Group, Arc<Snapshot>>) {
    let (v1, v2) = (latest("1"), latest("2"));
    let mut before = controller();
    before.built(0, &v1);
    before.built(10, &v2);
    let saved = before.states().borrow().as_deref().cloned().unwrap();
    let snapshots = v1
        .iter()
        .chain(v2.iter())
        .map(|(g, s)| ((g.to_string(), version_id(s)), s.clone()))
        .collect();
    let restored = Restored {
        rollout: saved.rollout,
        serving: saved.serving,
        snapshots,
        standing: saved.standing,
        counted_refusals: saved.counted_refusals,
    };
    (restored, v2)
}

#[test]
fn saved_decisions_wait_for_a_build_with_snapshots() {
    let (restored, v2) = saved_mid_rollout();
    let mut after = controller().restoring(restored);
    // Offered nothing (a reload before the sources' first build): the
    // decisions are kept, not dropped.
    assert!(after.built(5, &HashMap::new()).is_empty());
    let serve = after.built(20, &v2);
    let r = after.rollout.as_ref().expect("the saved rollout goes on");
    assert_eq!(r.id, 1);
    assert_eq!(r.targets["b"].state, ClusterState::Held);
    let versions = served(&serve);
    assert_eq!(versions["a"], version_id(&v2[&Group::from("a")]));
    assert_ne!(versions["b"], version_id(&v2[&Group::from("b")]), "b held");
}

#[test]
fn saved_decisions_naming_a_cluster_no_longer_configured_go_on_without_it() {
    let (restored, v2) = saved_mid_rollout();
    let policy = policy_of(vec![wave("canary", &["a"]), wave("rest", &["b", "c"])]);
    let mut after = Controller::new(policy, unlabelled(&["a", "b"]), AuditLog::default())
        .0
        .restoring(restored);
    let mut without_c = v2.clone();
    without_c.remove(&Group::from("c"));
    after.built(20, &without_c);
    let r = after.rollout.as_ref().unwrap();
    assert_eq!(r.id, 1, "continued, not superseded by a new rollout");
    assert!(!r.targets.contains_key("c"));
    assert_eq!(r.targets["b"].state, ClusterState::Held);
}

mod model;
mod resume;
mod safety;

//! The serving decision's safety under routine operations (issue 37):
//! pins, restarts without history, standing failures and drops.

use meshhub_rollout::serving::Ruling;

use super::*;

/// The snapshot `cluster` is served by the rollout's decision (`None`:
/// nothing, or withdrawn).
pub(super) fn decided(c: &Controller, cluster: &str) -> Option<String> {
    match c.decision(cluster) {
        Ruling::Serve(s) => Some(version_id(&s)),
        Ruling::Keep | Ruling::Withdraw => None,
    }
}

pub(super) fn id(l: &HashMap<Group, Arc<Snapshot>>, cluster: &str) -> String {
    version_id(&l[&Group::from(cluster)])
}

/// `c` after v1 everywhere and v2 NACKed by the canary `a` (rolled back).
fn rolled_back() -> Controller {
    let mut c = controller();
    c.built(0, &latest("1"));
    let v2 = latest("2");
    c.built(10, &v2);
    c.delivery(20, &delivery("a", &v2[&Group::from("a")], Outcome::Nack));
    assert!(matches!(
        c.rollout.as_ref().unwrap().phase,
        Phase::RolledBack { .. }
    ));
    c
}

#[test]
fn pinning_and_unpinning_a_held_cluster_of_a_failed_rollout_keeps_it_on_its_good_version() {
    let mut c = rolled_back();
    let v1 = latest("1");
    c.set_pins(30, BTreeSet::from(["c".to_owned()]));
    assert_eq!(
        c.rollout.as_ref().unwrap().targets["c"].state,
        ClusterState::Pinned {
            before: Box::new(ClusterState::Held)
        }
    );
    // Unpinned: the rollout's decision, not the newest (the failed v2).
    c.set_pins(40, BTreeSet::new());
    assert_eq!(
        c.rollout.as_ref().unwrap().targets["c"].state,
        ClusterState::Held
    );
    assert_eq!(decided(&c, "c"), Some(id(&v1, "c")));
}

#[test]
fn a_pinned_cluster_does_not_hold_up_its_wave() {
    let mut c = controller();
    c.built(0, &latest("1"));
    c.set_pins(5, BTreeSet::from(["a".to_owned()]));
    let v2 = latest("2");
    c.built(10, &v2);
    let r = c.rollout.as_ref().unwrap();
    assert!(matches!(r.targets["a"].state, ClusterState::Pinned { .. }));
    assert!(
        matches!(r.phase, Phase::Baking { .. }),
        "the canary wave only had a pinned cluster: it bakes, {:?}",
        r.phase
    );
    c.tick(2_000);
    let r = c.rollout.as_ref().unwrap();
    assert_eq!(r.wave, 1, "the next wave runs");
    assert!(matches!(
        r.targets["b"].state,
        ClusterState::Released { .. }
    ));
}

#[test]
fn a_restart_without_the_history_fails_closed_and_says_so() {
    let before = rolled_back();
    let saved = before.states().borrow().as_deref().cloned().unwrap();
    let (mut after, view) = controller_and_view();
    // A replica with an empty history: none of the saved versions.
    after = after.restoring(Restored {
        rollout: saved.rollout,
        serving: saved.serving,
        snapshots: shared::Snapshots::new(),
        standing: saved.standing,
        counted_refusals: saved.counted_refusals,
    });
    let v2 = latest("2");
    let serve = after.built(50, &v2);
    assert!(
        serve.is_empty(),
        "nothing is served: not the newest (the failed v2), {:?}",
        served(&serve)
    );
    for cluster in ["a", "b", "c"] {
        assert_eq!(decided(&after, cluster), None, "{cluster}");
    }
    let shown = view.borrow().unavailable.clone();
    assert_eq!(
        shown.keys().map(String::as_str).collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
    assert_eq!(shown["a"], id(&latest("1"), "a"), "the version wanted");
    // The good version built again (the sources went back): served.
    after.built(60, &latest("1"));
    assert_eq!(decided(&after, "a"), Some(id(&latest("1"), "a")));
    assert!(!view.borrow().unavailable.contains_key("a"));
}

/// Waves `[a]`, `[b]`, `[c]`, each baking 1 s.
pub(super) fn three_waves() -> Controller {
    three_waves_audited(AuditLog::default())
}

/// [`three_waves`], recording to `audit`.
pub(super) fn three_waves_audited(audit: AuditLog) -> Controller {
    let policy = policy_of(vec![
        wave("one", &["a"]),
        wave("two", &["b"]),
        wave("three", &["c"]),
    ]);
    Controller::new(policy, unlabelled(&["a", "b", "c"]), audit).0
}

/// `base` with cluster `cluster`'s virtual service at `version`.
pub(super) fn with(
    base: &HashMap<Group, Arc<Snapshot>>,
    cluster: &str,
    version: &str,
) -> HashMap<Group, Arc<Snapshot>> {
    let mut l = base.clone();
    l.insert(Group::from(cluster), snapshot(version));
    l
}

#[test]
fn a_cluster_that_refused_a_version_is_left_out_until_it_changes_and_never_offered_it_again() {
    let mut c = three_waves();
    let v1 = latest("1");
    c.built(0, &v1);
    // A change only a receives, NACKed by a and rolled back.
    let bad = with(&v1, "a", "bad");
    c.built(10, &bad);
    c.delivery(20, &delivery("a", &bad[&Group::from("a")], Outcome::Nack));
    assert_eq!(decided(&c, "a"), Some(id(&v1, "a")));
    // A change for b and c: a is not part of its rollout.
    let next = with(&with(&bad, "b", "2"), "c", "2");
    let serve = c.built(30, &next);
    let r = c.rollout.as_ref().unwrap();
    assert!(!r.targets.contains_key("a"), "{:?}", r.targets);
    assert_eq!(names(&serve), ["b"], "b's wave is the first now");
    c.delivery(40, &delivery("b", &next[&Group::from("b")], Outcome::Ack));
    c.tick(1_040);
    c.delivery(50, &delivery("c", &next[&Group::from("c")], Outcome::Ack));
    c.tick(2_100);
    assert_eq!(c.rollout.as_ref().unwrap().phase, Phase::Completed);
    assert_eq!(decided(&c, "a"), Some(id(&v1, "a")), "never offered again");
    let d = c.states().borrow().as_deref().cloned().unwrap();
    assert_eq!(d.standing["a"].version, id(&bad, "a"), "shown, and saved");
    // a's content changes: it joins the next rollout.
    let fixed = with(&next, "a", "3");
    assert_eq!(names(&c.built(60, &fixed)), ["a"]);
    assert!(c.states().borrow().as_deref().unwrap().standing.is_empty());
}

/// The reports with `cluster`'s istiod dropping the destination rule
/// (unchanged between versions) at version 1.
fn standing_drop(cluster: &str) -> crate::upward::Reports {
    let mut reports = dropped(cluster, "1");
    let r = Arc::make_mut(&mut reports);
    let report = Arc::make_mut(r.get_mut(cluster).unwrap());
    let istiod = report.view.istiod.as_mut().unwrap();
    istiod.dropped[0].collection = DR.into();
    istiod.dropped[0].name = "bookinfo/d".into();
    reports
}

#[test]
fn a_standing_drop_of_an_unchanged_object_does_not_fail_an_unrelated_change() {
    let mut c = controller();
    c.built(0, &latest("1"));
    let v2 = latest("2");
    c.built(10, &v2);
    c.delivery(20, &delivery("a", &v2[&Group::from("a")], Outcome::Ack));
    c.reports(30, &standing_drop("a"));
    let r = c.rollout.as_ref().unwrap();
    assert!(matches!(r.phase, Phase::Baking { .. }), "{:?}", r.phase);
    // A drop of what the change brought still fails it.
    c.reports(40, &dropped("a", "2"));
    assert!(matches!(
        c.rollout.as_ref().unwrap().phase,
        Phase::RolledBack { .. }
    ));
}

#[test]
fn a_cluster_resumed_after_a_rollback_counts_its_new_ack() {
    let mut c = three_waves();
    let v1 = latest("1");
    c.built(0, &v1);
    let v2 = latest("2");
    c.built(10, &v2);
    c.delivery(20, &delivery("a", &v2[&Group::from("a")], Outcome::Ack));
    c.tick(1_020);
    c.delivery(30, &delivery("b", &v2[&Group::from("b")], Outcome::Nack));
    assert!(matches!(
        c.rollout.as_ref().unwrap().phase,
        Phase::RolledBack { .. }
    ));
    c.take_released();
    c.act(40, Action::Resume, None, "ops").unwrap();
    assert!(matches!(
        c.rollout.as_ref().unwrap().targets["a"].state,
        ClusterState::Released { .. }
    ));
    assert_eq!(
        c.take_released().into_iter().collect::<Vec<_>>(),
        ["a"],
        "the pipeline reads a's ACKs already in"
    );
    c.delivery(50, &delivery("a", &v2[&Group::from("a")], Outcome::Ack));
    let r = c.rollout.as_ref().unwrap();
    assert!(
        matches!(r.phase, Phase::Baking { .. }),
        "a's second ACK counts: {:?} {:?}",
        r.phase,
        r.targets["a"].state
    );
}

#[test]
fn pinning_and_unpinning_a_refused_cluster_does_not_offer_it_the_version_again() {
    let mut c = three_waves();
    let v1 = latest("1");
    c.built(0, &v1);
    // b refuses v2 while still held (an earlier offer): REFUSED.
    let v2 = latest("2");
    c.built(10, &v2);
    c.delivery(15, &delivery("b", &v2[&Group::from("b")], Outcome::Nack));
    let state = |c: &Controller| c.rollout.as_ref().unwrap().targets["b"].state.clone();
    assert!(
        matches!(state(&c), ClusterState::Refused { .. }),
        "{:?}",
        state(&c)
    );
    c.set_pins(20, BTreeSet::from(["b".to_owned()]));
    c.set_pins(30, BTreeSet::new());
    assert!(
        matches!(state(&c), ClusterState::Refused { .. }),
        "{:?}",
        state(&c)
    );
    assert_eq!(decided(&c, "b"), Some(id(&v1, "b")));
}

#[test]
fn resuming_a_cluster_left_out_for_a_standing_failure_clears_it() {
    let mut c = three_waves();
    let v1 = latest("1");
    c.built(0, &v1);
    let bad = with(&v1, "a", "bad");
    c.built(10, &bad);
    c.delivery(20, &delivery("a", &bad[&Group::from("a")], Outcome::Nack));
    // A completed rollout without a (b's change), then a retry of a.
    let next = with(&bad, "b", "2");
    c.built(30, &next);
    c.delivery(40, &delivery("b", &next[&Group::from("b")], Outcome::Ack));
    c.tick(2_000);
    assert_eq!(c.rollout.as_ref().unwrap().phase, Phase::Completed);
    assert!(c.act(50, Action::Resume, Some("a"), "ops").is_ok());
    let r = c.rollout.as_ref().unwrap();
    assert!(
        r.targets.contains_key("a"),
        "a is in a new rollout: {:?}",
        r.targets
    );
    assert!(
        c.states().borrow().as_deref().unwrap().standing.is_empty(),
        "its standing failure is cleared"
    );
}

//! An operator's resume of a cluster with a standing failure is not
//! undone by the same refusal told again — by the ledger, by the agent's
//! report (the other channel, or after its stream reconnects), after a
//! restart or under a new leader: the refusals counted are remembered per
//! cluster, collection and version. Only a new refusal makes the cluster
//! stand again; it names the rollout that sent the version, and standing
//! failures made or forgiven so are audited.

use std::time::SystemTime;

use tokio::sync::mpsc;

use super::safety::{decided, id, three_waves, three_waves_audited, with};
use super::*;
use crate::audit::AuditEvent;

type Builds = HashMap<Group, Arc<Snapshot>>;

/// The version of `cluster`'s `collection` in `l`.
fn version_of(l: &Builds, cluster: &str, collection: &str) -> String {
    l[&Group::from(cluster)]
        .collection(collection)
        .version()
        .to_owned()
}

/// `cluster`'s standing failure, as saved and shared.
fn standing_of(c: &Controller, cluster: &str) -> Option<Standing> {
    let d = c.states().borrow().as_deref().cloned().unwrap();
    d.standing.get(cluster).cloned()
}

/// `c` (three waves) with a's change to `bad_a` NACKed (the ledger: a is
/// in rollout 1's first wave) and left standing, rollout 2 (b's change) in
/// flight without a, and an operator's resume of a. Returns the builds
/// `(v1, bad, next)`.
fn resumed_while_another_rollout_runs(
    c: &mut Controller,
    bad_a: Arc<Snapshot>,
) -> (Builds, Builds, Builds) {
    let v1 = latest("1");
    c.built(0, &v1);
    let mut bad = v1.clone();
    bad.insert(Group::from("a"), bad_a);
    c.built(10, &bad);
    c.delivery(20, &delivery("a", &bad[&Group::from("a")], Outcome::Nack));
    let s = standing_of(c, "a").expect("a's refusal stands");
    assert_eq!((s.version, s.rollout), (id(&bad, "a"), 1));
    let next = with(&bad, "b", "2");
    c.built(30, &next);
    let r = c.rollout.as_ref().unwrap();
    assert_eq!(r.id, 2);
    assert!(!r.phase.is_terminal() && !r.targets.contains_key("a"));
    assert!(c.act(40, Action::Resume, Some("a"), "ops").is_ok());
    assert!(standing_of(c, "a").is_none(), "forgiven");
    (v1, bad, next)
}

/// The resume holds: the next rollout (c's change) offers a the version
/// again, as the operator asked.
fn assert_offered_again(c: &mut Controller, bad: &Builds, next: &Builds) {
    assert!(standing_of(c, "a").is_none(), "the resume was undone");
    let later = with(next, "c", "2");
    let serve = c.built(60, &later);
    let r = c.rollout.as_ref().unwrap();
    assert!(r.targets.contains_key("a"), "{:?}", r.targets);
    assert!(names(&serve).contains(&"a"), "{:?}", names(&serve));
    assert_eq!(decided(c, "a"), Some(id(bad, "a")));
}

#[test]
fn the_same_refusal_delivered_again_by_the_ledger_does_not_undo_a_resume() {
    let mut c = three_waves();
    let (_, bad, next) = resumed_while_another_rollout_runs(&mut c, snapshot("bad"));
    // The ledger's record of the refusal counted before the resume, again.
    c.delivery(50, &delivery("a", &bad[&Group::from("a")], Outcome::Nack));
    assert_offered_again(&mut c, &bad, &next);
}

#[test]
fn the_same_refusal_told_again_by_a_report_does_not_undo_a_resume() {
    let mut c = three_waves();
    let (v1, bad, next) = resumed_while_another_rollout_runs(&mut c, snapshot("bad"));
    // a's agent reports the refusal the ledger told (its report lags, or
    // its upward stream reconnected): not a new one.
    let (held, refused) = (version_of(&v1, "a", VS), version_of(&bad, "a", VS));
    c.reports(45, &holding("a", &held, ""));
    c.reports(50, &holding("a", &held, &refused));
    assert_offered_again(&mut c, &bad, &next);
}

#[test]
fn a_refusal_of_a_new_version_after_a_resume_stands_again() {
    let mut c = three_waves();
    let (v1, bad, next) = resumed_while_another_rollout_runs(&mut c, snapshot("bad"));
    let counted = |c: &Controller, l: &Builds| c.counted.contains("a", VS, &version_of(l, "a", VS));
    assert!(counted(&c, &bad));
    // a's content changes again: the next rollout offers it at once (its
    // wave is the first), and a refuses that too.
    let bad2 = with(&next, "a", "bad2");
    assert!(names(&c.built(50, &bad2)).contains(&"a"));
    c.delivery(55, &delivery("a", &bad2[&Group::from("a")], Outcome::Nack));
    let s = standing_of(&c, "a").expect("a new refusal stands");
    assert_eq!(s.version, id(&bad2, "a"));
    assert_eq!(s.rollout, c.rollout.as_ref().unwrap().id);
    // Counted instead of the older version's refusal (one per collection).
    assert!(counted(&c, &bad2) && !counted(&c, &bad));
    // The next rollout leaves a out and never offers it that version.
    let later = with(&bad2, "c", "2");
    c.built(60, &later);
    assert!(!c.rollout.as_ref().unwrap().targets.contains_key("a"));
    assert_eq!(decided(&c, "a"), Some(id(&v1, "a")));
    // Forgotten with their cluster.
    c.set_clusters(70, unlabelled(&["b", "c"]));
    let d = c.states().borrow().as_deref().cloned().unwrap();
    assert!(d.counted_refusals.is_empty(), "{:?}", d.counted_refusals);
}

/// v`version` with both collections (the virtual and the destination
/// rule) changed: a's agent answers each separately.
fn both(version: &str) -> Arc<Snapshot> {
    let mut s = Arc::unwrap_or_clone(snapshot(version));
    let dr = EncodedResource {
        encoded: bytes::Bytes::from(format!("dr-{version}")),
        name: "bookinfo/d".into(),
        version: version.into(),
    };
    s.insert(DR, Arc::new(CollectionSnapshot::new(vec![dr])));
    Arc::new(s)
}

fn drain(records: &mut mpsc::Receiver<(SystemTime, AuditEvent)>) -> Vec<AuditEvent> {
    std::iter::from_fn(|| records.try_recv().ok().map(|(_, e)| e)).collect()
}

#[test]
fn a_refusal_never_counted_arriving_after_a_resume_stands_naming_the_rollout_that_sent_it() {
    let (audit, mut records) = AuditLog::capture();
    let mut c = three_waves_audited(audit);
    let (_, bad, _) = resumed_while_another_rollout_runs(&mut c, both("bad"));
    let bad_id = id(&bad, "a");
    let forgiven: Vec<AuditEvent> = drain(&mut records)
        .into_iter()
        .filter(|e| matches!(e, AuditEvent::StandingForgiven { .. }))
        .collect();
    assert_eq!(
        forgiven,
        [AuditEvent::StandingForgiven {
            cluster: "a".into(),
            version: bad_id.clone(),
            rollout: Some(1),
            by: "ops".into(),
        }]
    );
    // a's answer for the destination rules of rollout 1's push, late:
    // never counted, so a new refusal. It names rollout 1, which sent the
    // version, not the one in flight (2).
    let mut late = delivery("a", &bad[&Group::from("a")], Outcome::Nack);
    late.collection = DR.into();
    late.version = version_of(&bad, "a", DR);
    c.delivery(50, &late);
    let s = standing_of(&c, "a").expect("a new refusal stands");
    assert_eq!((s.version.as_str(), s.rollout), (bad_id.as_str(), 1));
    assert_eq!(c.rollout.as_ref().unwrap().id, 2);
    let made: Vec<AuditEvent> = drain(&mut records)
        .into_iter()
        .filter(|e| matches!(e, AuditEvent::StandingFailure { .. }))
        .collect();
    assert_eq!(
        made,
        [AuditEvent::StandingFailure {
            cluster: "a".into(),
            version: bad_id,
            rollout: Some(1),
            message: format!("{DR} {}: bad route", version_of(&bad, "a", DR)),
        }]
    );
    // Told again: nothing more.
    c.delivery(60, &late);
    assert!(drain(&mut records).is_empty());
}

#[test]
fn a_restarted_hub_and_a_new_leader_still_know_a_refusal_was_counted() {
    let mut before = three_waves();
    let (v1, bad, next) = resumed_while_another_rollout_runs(&mut before, both("bad"));
    let saved = before.states().borrow().as_deref().cloned().unwrap();
    let snapshots: shared::Snapshots = [&v1, &bad, &next]
        .into_iter()
        .flat_map(|l| l.iter())
        .map(|(g, s)| ((g.to_string(), version_id(s)), s.clone()))
        .collect();
    let mut restarted = three_waves().restoring(Restored {
        rollout: saved.rollout.clone(),
        serving: saved.serving.clone(),
        snapshots,
        standing: saved.standing.clone(),
        counted_refusals: saved.counted_refusals.clone(),
    });
    restarted.built(45, &next);
    let mut leader = three_waves().following();
    leader.follow(mirrored(&before, &[&v1, &bad, &next]));
    leader.built(45, &next);
    leader.lead(46, 2);
    let (held, refused) = (version_of(&v1, "a", VS), version_of(&bad, "a", VS));
    for (name, mut c) in [("restarted", restarted), ("new leader", leader)] {
        // Rollout 2 goes on, without a.
        assert!(!c.rollout.as_ref().unwrap().targets.contains_key("a"));
        c.reports(55, &holding("a", &held, ""));
        c.reports(60, &holding("a", &held, &refused));
        assert!(
            standing_of(&c, "a").is_none(),
            "{name}: the resume was undone"
        );
        // A refusal never counted still stands; which rollout sent the
        // version is not known here (rollout 1 is not in the decisions):
        // it says none.
        let mut late = delivery("a", &bad[&Group::from("a")], Outcome::Nack);
        late.collection = DR.into();
        late.version = version_of(&bad, "a", DR);
        c.delivery(65, &late);
        let s = standing_of(&c, "a").expect(name);
        assert_eq!((s.sent_by(), s.version), (None, id(&bad, "a")), "{name}");
    }
}

#[test]
fn a_refusal_a_report_tells_again_is_not_the_answer_to_the_version_sent_again() {
    let mut c = three_waves();
    let (v1, bad, next) = resumed_while_another_rollout_runs(&mut c, snapshot("bad"));
    let (held, refused) = (version_of(&v1, "a", VS), version_of(&bad, "a", VS));
    c.reports(42, &holding("a", &held, ""));
    // The next build: a joins rollout 3 and is sent the version again.
    assert!(names(&c.built(45, &with(&next, "c", "2"))).contains(&"a"));
    // Its report, lagging, tells the refusal the ledger counted: not the
    // answer to this sending.
    c.reports(50, &holding("a", &held, &refused));
    let state = |c: &Controller| c.rollout.as_ref().unwrap().targets["a"].state.clone();
    assert!(
        matches!(state(&c), ClusterState::Released { .. }),
        "{:?}",
        state(&c)
    );
    assert!(standing_of(&c, "a").is_none());
    // The cluster takes it this time (an operator fixed it): its ACK counts.
    c.reports(60, &holding("a", &refused, ""));
    assert!(
        matches!(state(&c), ClusterState::Acked { .. }),
        "{:?}",
        state(&c)
    );
}

#[test]
fn a_report_showing_a_refusal_cleared_then_made_again_counts_it_again() {
    let mut c = controller();
    let (v1, v2) = (latest("1"), latest("2"));
    let (vs1, vs2) = (version_of(&v1, "a", VS), version_of(&v2, "a", VS));
    c.built(0, &v1);
    c.built(10, &v2);
    c.reports(20, &holding("a", &vs1, ""));
    c.reports(30, &holding("a", &vs1, &vs2));
    assert!(matches!(
        c.rollout.as_ref().unwrap().phase,
        Phase::RolledBack { .. }
    ));
    assert!(standing_of(&c, "a").is_some());
    // Given its previous version again, the agent clears its refusal; the
    // operator resumes, the version is sent again and refused anew.
    c.reports(40, &holding("a", &vs1, ""));
    c.act(50, Action::Resume, None, "ops").unwrap();
    assert!(standing_of(&c, "a").is_none());
    c.reports(60, &holding("a", &vs1, &vs2));
    assert!(matches!(
        c.rollout.as_ref().unwrap().phase,
        Phase::RolledBack { .. }
    ));
    assert_eq!(standing_of(&c, "a").map(|s| s.version), Some(id(&v2, "a")));
}

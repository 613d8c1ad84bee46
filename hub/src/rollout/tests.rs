use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource};
use meshhub_rollout::{Members, OnFailure, Promotion, Wave};

use super::*;

const VS: &str = "istio/networking/v1alpha3/virtualservices";
const DR: &str = "istio/networking/v1alpha3/destinationrules";

/// A snapshot whose virtual service `r` is at `version` (and one fixed
/// destination rule).
fn snapshot(version: &str) -> Arc<Snapshot> {
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

fn wave(name: &str, clusters: &[&str]) -> Wave {
    Wave {
        name: name.into(),
        members: Members::Names(clusters.iter().map(|c| (*c).to_owned()).collect()),
        max_concurrent: None,
        bake_ms: 1_000,
        promotion: Promotion::Automatic,
        metrics: vec![],
    }
}

fn controller() -> Controller {
    let policy = Policy {
        waves: vec![wave("canary", &["a"]), wave("rest", &["b", "c"])],
        progress_deadline_ms: 60_000,
        on_failure: OnFailure::Rollback,
    };
    let clusters = ["a", "b", "c"]
        .iter()
        .map(|c| ((*c).to_owned(), BTreeMap::new()))
        .collect();
    Controller::new(policy, clusters, AuditLog::default()).0
}

fn latest(version: &str) -> HashMap<Group, Arc<Snapshot>> {
    let s = snapshot(version);
    ["a", "b", "c", "default"]
        .iter()
        .map(|g| (Group::from(*g), s.clone()))
        .collect()
}

fn names(serve: &Serve) -> Vec<&str> {
    let mut n: Vec<&str> = serve.iter().map(|(g, _)| g.as_ref()).collect();
    n.sort_unstable();
    n
}

fn delivery(cluster: &str, snapshot: &Snapshot, outcome: Outcome) -> Delivery {
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
    // a moves on from v2 to v3; b and c stay on v1 until their wave.
    assert_eq!(names(&serve), ["a"]);
    let r = c.rollout.as_ref().unwrap();
    assert_eq!(r.id, 2);
    assert_eq!(
        r.targets["b"].step.from,
        Some(version_id(&latest("1")[&Group::from("b")]))
    );
    assert_eq!(
        r.targets["a"].step.from,
        Some(version_id(&v2[&Group::from("a")]))
    );
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
fn dropped(cluster: &str, version: &str) -> crate::upward::Reports {
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
    Arc::new(BTreeMap::from([(cluster.to_owned(), report)]))
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

use serde_json::{Value, json};

use super::*;

const VS: &str = "istio/networking/v1alpha3/virtualservices";
const DR: &str = "istio/networking/v1alpha3/destinationrules";
const AT: &str = "2026-11-24T10:00:00.000Z";

/// A collection's ledger entry: `state` with `acked`/`nacked` versions.
fn collection(state: &str, acked: Option<&str>, nacked: Option<&str>) -> Value {
    json!({
        "sent": acked.or(nacked).map(|v| json!({"version": v, "nonce": "n", "at": AT})),
        "acked": acked.map(|v| json!({"version": v, "nonce": "n", "at": AT})),
        "nacked": nacked.map(|v| json!({"version": v, "code": 3, "message": "bad route", "at": AT})),
        "blocked": null, "acks": 0, "nacks": 0, "stale": 0,
        "state": state,
    })
}

/// `/status` with `groups` (cluster → collection → version) and
/// `remotes` (cluster → collection → entry).
fn status(
    groups: &[(&str, &[(&str, &str)])],
    remotes: &[(&str, Vec<(&str, Value)>)],
) -> StatusSummary {
    let groups: Vec<Value> = groups
        .iter()
        .map(|(name, cols)| {
            let collections: serde_json::Map<String, Value> = cols
                .iter()
                .map(|(c, v)| ((*c).to_owned(), json!({"version": v, "resources": 1})))
                .collect();
            json!({"name": name, "published": true, "watches": 0, "collections": collections})
        })
        .collect();
    let remotes: Vec<Value> = remotes
        .iter()
        .map(|(name, cols)| {
            let collections: serde_json::Map<String, Value> = cols
                .iter()
                .map(|(c, v)| ((*c).to_owned(), v.clone()))
                .collect();
            json!({
                "cluster": name, "address": "http://127.0.0.1:1", "connected": true,
                "connected_since": null, "disconnected_at": null, "last_error": null,
                "streams": 1, "collections": collections,
            })
        })
        .collect();
    serde_json::from_value(json!({
        "groups": groups, "config": null, "leader": null, "remotes": remotes,
        "grpc_tls": null,
    }))
    .expect("a /status document")
}

fn named(names: &[&str]) -> Clusters {
    Clusters::Named(names.iter().map(|s| (*s).to_owned()).collect())
}

#[test]
fn acked_when_every_collection_of_the_group_is_acked_at_the_served_version() {
    let s = status(
        &[("east", &[(VS, "v2"), (DR, "d1")])],
        &[(
            "east",
            vec![
                (VS, collection("SYNCED", Some("v2"), None)),
                (DR, collection("STALE", Some("d0"), None)),
            ],
        )],
    );
    let mut awaited = Awaited::default();
    awaited.observe(&s, &Clusters::All).unwrap();
    let report = awaited.assess(&s);
    assert!(
        matches!(&report["east"], Standing::Waiting { reason } if reason.contains("destinationrules: sent, not ACKed")),
        "{report:?}"
    );
    let s = status(
        &[("east", &[(VS, "v2"), (DR, "d1")])],
        &[(
            "east",
            vec![
                (VS, collection("SYNCED", Some("v2"), None)),
                (DR, collection("SYNCED", Some("d1"), None)),
            ],
        )],
    );
    assert_eq!(awaited.assess(&s)["east"], Standing::Acked);
}

#[test]
fn an_older_ack_does_not_count_and_a_newer_version_supersedes() {
    let mut awaited = Awaited::default();
    let before = status(
        &[("east", &[(VS, "v2")])],
        &[("east", vec![(VS, collection("SYNCED", Some("v1"), None))])],
    );
    awaited.observe(&before, &Clusters::All).unwrap();
    assert!(matches!(
        awaited.assess(&before)["east"],
        Standing::Waiting { .. }
    ));
    // The hub moved on to v3 while waiting, and the cluster ACKed it.
    let after = status(
        &[("east", &[(VS, "v3")])],
        &[("east", vec![(VS, collection("SYNCED", Some("v3"), None))])],
    );
    awaited.observe(&after, &Clusters::All).unwrap();
    assert_eq!(awaited.assess(&after)["east"], Standing::Acked);
}

#[test]
fn a_nack_of_the_newest_version_fails_and_a_nack_of_an_older_one_waits() {
    let mut awaited = Awaited::default();
    let s = status(
        &[("east", &[(VS, "v2")])],
        &[("east", vec![(VS, collection("NACKED", None, Some("v2")))])],
    );
    awaited.observe(&s, &Clusters::All).unwrap();
    assert_eq!(
        awaited.assess(&s)["east"],
        Standing::Nacked {
            collection: VS.into(),
            message: "bad route".into()
        }
    );
    let newer = status(
        &[("east", &[(VS, "v3")])],
        &[("east", vec![(VS, collection("NACKED", None, Some("v2")))])],
    );
    awaited.observe(&newer, &Clusters::All).unwrap();
    assert!(matches!(
        awaited.assess(&newer)["east"],
        Standing::Waiting { .. }
    ));
}

#[test]
fn only_the_named_clusters_count_and_an_unknown_name_is_an_error() {
    let s = status(
        &[("east", &[(VS, "v2")]), ("west", &[(VS, "w2")])],
        &[
            ("east", vec![(VS, collection("SYNCED", Some("v2"), None))]),
            ("west", vec![(VS, collection("STALE", Some("w1"), None))]),
        ],
    );
    let mut awaited = Awaited::default();
    awaited.observe(&s, &named(&["east"])).unwrap();
    let report = awaited.assess(&s);
    assert_eq!(report.len(), 1);
    assert_eq!(report["east"], Standing::Acked);
    let err = Awaited::default()
        .observe(&s, &named(&["north"]))
        .unwrap_err();
    assert_eq!(err.known, "east, west");
}

#[test]
fn a_collection_never_sent_waits_and_one_never_requested_does_not_count() {
    let s = status(
        &[("east", &[(VS, "v2"), (DR, "d1")])],
        &[("east", vec![(VS, collection("NOT_SENT", None, None))])],
    );
    let mut awaited = Awaited::default();
    awaited.observe(&s, &Clusters::All).unwrap();
    assert_eq!(
        awaited.assess(&s)["east"],
        Standing::Waiting {
            reason: format!("{VS}: not sent")
        }
    );
    let s = status(
        &[("east", &[(VS, "v2"), (DR, "d1")])],
        &[("east", vec![(VS, collection("SYNCED", Some("v2"), None))])],
    );
    assert_eq!(awaited.assess(&s)["east"], Standing::Acked);
    let s = status(&[("east", &[(VS, "v2")])], &[("east", vec![])]);
    assert!(matches!(
        &awaited.assess(&s)["east"],
        Standing::Waiting { reason } if reason.contains("no collection requested yet")
    ));
}

/// A rollout of two waves (`canary`: east, `rest`: west) in `phase`, east
/// in `east`, west held.
fn rollout(
    phase: meshhub_rollout::Phase,
    east: meshhub_rollout::ClusterState,
) -> meshhub_rollout::Rollout {
    use meshhub_rollout::{OnFailure, PlannedWave, Promotion, Rollout, Step};
    let wave = |name: &str, cluster: &str| PlannedWave {
        name: name.into(),
        clusters: vec![cluster.into()],
        max_concurrent: None,
        bake_ms: 5_000,
        promotion: Promotion::Automatic,
    };
    let steps = ["east", "west"]
        .map(|c| {
            (
                c.to_owned(),
                Step {
                    from: Some("v1".into()),
                    to: "v2".into(),
                },
            )
        })
        .into();
    let (mut r, _) = Rollout::start(
        7,
        0,
        vec![wave("canary", "east"), wave("rest", "west")],
        steps,
        60_000,
        OnFailure::Rollback,
        None,
    );
    r.phase = phase;
    r.targets.get_mut("east").unwrap().state = east;
    r
}

#[test]
fn clusters_a_rollout_holds_or_rolled_back_have_not_acked_the_change() {
    use meshhub_rollout::{Cause, ClusterState, Failure, Phase};
    let acked = || -> Report {
        [
            ("east", Standing::Acked),
            ("west", Standing::Acked),
            ("north", Standing::Acked),
        ]
        .map(|(c, s)| (c.to_owned(), s))
        .into()
    };
    // In flight: west (held on its previous version, which it ACKed) waits.
    let mut report = acked();
    under_rollout(
        &mut report,
        &rollout(
            Phase::Baking { until: 5_000 },
            ClusterState::Acked { at: 1 },
        ),
    );
    assert_eq!(report["east"], Standing::Acked);
    assert_eq!(report["north"], Standing::Acked, "not in the rollout");
    assert!(
        matches!(&report["west"], Standing::Waiting { reason } if reason.contains("held by rollout 7 until its wave rest")),
        "{:?}",
        report["west"]
    );
    // Rolled back after east's NACK: both refused, with the reason.
    let failure = Failure {
        wave: "canary".into(),
        cluster: Some("east".into()),
        cause: Cause::Nack,
        message: "admission denied".into(),
    };
    let mut report = acked();
    under_rollout(
        &mut report,
        &rollout(
            Phase::RolledBack { failure },
            ClusterState::Failed {
                message: "admission denied".into(),
            },
        ),
    );
    assert!(
        matches!(&report["east"], Standing::Nacked { message, .. } if message == "admission denied")
    );
    assert!(
        matches!(&report["west"], Standing::Nacked { message, .. } if message.contains("stopped in wave canary (east): admission denied")),
        "{:?}",
        report["west"]
    );
    // Completed: nothing changes.
    let mut report = acked();
    let mut done = rollout(Phase::Completed, ClusterState::Acked { at: 1 });
    done.targets.get_mut("west").unwrap().state = ClusterState::Acked { at: 2 };
    under_rollout(&mut report, &done);
    assert_eq!(report, acked());
}

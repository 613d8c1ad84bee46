use std::collections::BTreeMap;

use super::*;
use crate::policy::Promotion;

const BAKE: Millis = 5_000;
const DEADLINE: u64 = 60_000;

fn wave(name: &str, clusters: &[&str], max: Option<usize>, promotion: Promotion) -> PlannedWave {
    PlannedWave {
        name: name.into(),
        clusters: clusters.iter().map(|c| (*c).to_owned()).collect(),
        max_concurrent: max,
        bake_ms: BAKE,
        promotion,
    }
}

/// Three waves: canary (a), early (b, c), rest (d); every cluster from
/// `v1` to `v2`.
fn three_waves(on_failure: OnFailure) -> (Rollout, Vec<Command>) {
    start_with(
        vec![
            wave("canary", &["a"], None, Promotion::Automatic),
            wave("early", &["b", "c"], None, Promotion::Automatic),
            wave("rest", &["d"], None, Promotion::Automatic),
        ],
        on_failure,
    )
}

fn start_with(waves: Vec<PlannedWave>, on_failure: OnFailure) -> (Rollout, Vec<Command>) {
    let steps: BTreeMap<String, Step> = waves
        .iter()
        .flat_map(|w| w.clusters.iter())
        .map(|c| {
            (
                c.clone(),
                Step {
                    from: Some("v1".into()),
                    to: "v2".into(),
                },
            )
        })
        .collect();
    Rollout::start(1, 0, waves, steps, DEADLINE, on_failure, None)
}

fn acked(c: &str) -> Input {
    Input::Acked {
        cluster: c.into(),
        version: "v2".into(),
    }
}

fn nack(c: &str) -> Input {
    Input::Rejected {
        cluster: c.into(),
        version: "v2".into(),
        how: Rejection::Nack,
        message: "bad route".into(),
    }
}

fn gates(wave: usize, last: bool, failures: &[(&str, &str)]) -> Input {
    Input::Gates {
        wave,
        last,
        failures: failures
            .iter()
            .map(|(c, g)| GateFailure {
                cluster: (*c).into(),
                gate: (*g).into(),
                message: "error rate 0.2 >= 0.05".into(),
            })
            .collect(),
    }
}

/// The clusters released, held and rolled back by `commands`.
fn released(commands: &[Command]) -> Vec<&str> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Release { cluster, .. } => Some(cluster.as_str()),
            _ => None,
        })
        .collect()
}

fn held(commands: &[Command]) -> Vec<(&str, Option<&str>)> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Hold { cluster, version } => Some((cluster.as_str(), version.as_deref())),
            _ => None,
        })
        .collect()
}

fn rolled_back(commands: &[Command]) -> Vec<&str> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::RollBack { cluster, version } => {
                assert_eq!(
                    version.as_deref(),
                    Some("v1"),
                    "a rollback serves the previous version"
                );
                Some(cluster.as_str())
            }
            _ => None,
        })
        .collect()
}

fn evaluates(commands: &[Command]) -> Option<(usize, Vec<String>)> {
    commands.iter().find_map(|c| match c {
        Command::EvaluateGates { wave, clusters } => Some((*wave, clusters.clone())),
        _ => None,
    })
}

fn events(commands: &[Command]) -> Vec<&Event> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Report(e) => Some(e),
            _ => None,
        })
        .collect()
}

/// Walks wave `w` (all clusters ACK at `now`, bake, gates pass).
fn pass_wave(r: &mut Rollout, now: Millis, clusters: &[&str]) -> Vec<Command> {
    for c in clusters {
        r.handle(now, acked(c));
    }
    assert_eq!(r.phase, Phase::Baking { until: now + BAKE });
    let out = r.handle(now + BAKE, Input::Tick);
    assert_eq!(r.phase, Phase::Gating);
    assert_eq!(evaluates(&out).map(|(w, _)| w), Some(r.wave));
    r.handle(now + BAKE, gates(r.wave, true, &[]))
}

#[test]
fn start_holds_every_cluster_then_releases_the_first_wave() {
    let (r, out) = three_waves(OnFailure::Rollback);
    assert_eq!(
        held(&out),
        vec![
            ("a", Some("v1")),
            ("b", Some("v1")),
            ("c", Some("v1")),
            ("d", Some("v1"))
        ]
    );
    assert_eq!(released(&out), vec!["a"]);
    assert_eq!(r.phase, Phase::Updating);
    assert_eq!(
        events(&out)[0],
        &Event::Started {
            id: 1,
            supersedes: None
        }
    );
}

#[test]
fn a_good_change_walks_every_wave_after_its_bake_and_gates() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    r.handle(1_000, acked("a"));
    assert_eq!(r.phase, Phase::Baking { until: 6_000 });
    // Not before the bake is over.
    assert!(r.handle(5_999, Input::Tick).is_empty());
    let out = r.handle(6_000, Input::Tick);
    assert_eq!(evaluates(&out), Some((0, vec!["a".to_owned()])));
    let out = r.handle(6_100, gates(0, true, &[]));
    assert!(events(&out).contains(&&Event::WavePassed {
        wave: "canary".into()
    }));
    assert_eq!(released(&out), vec!["b", "c"]);
    assert_eq!((r.wave, r.wave_started), (1, 6_100));

    let out = pass_wave(&mut r, 7_000, &["b", "c"]);
    assert_eq!(released(&out), vec!["d"]);
    let out = pass_wave(&mut r, 20_000, &["d"]);
    assert_eq!(r.phase, Phase::Completed);
    assert_eq!(events(&out).last(), Some(&&Event::Completed));
}

#[test]
fn max_concurrent_releases_the_next_cluster_when_one_acks() {
    let (mut r, out) = start_with(
        vec![wave("all", &["a", "b", "c"], Some(2), Promotion::Automatic)],
        OnFailure::Rollback,
    );
    assert_eq!(released(&out), vec!["a", "b"]);
    let out = r.handle(10, acked("b"));
    assert_eq!(released(&out), vec!["c"]);
    assert!(released(&r.handle(20, acked("a"))).is_empty());
    assert_eq!(r.phase, Phase::Updating);
    r.handle(30, acked("c"));
    assert_eq!(r.phase, Phase::Baking { until: 30 + BAKE });
}

#[test]
fn acks_of_other_versions_or_held_clusters_change_nothing() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    let stale = Input::Acked {
        cluster: "a".into(),
        version: "v1".into(),
    };
    assert!(r.handle(1, stale).is_empty());
    assert!(r.handle(1, acked("d")).is_empty(), "d was never sent v2");
    assert!(r.handle(1, acked("nobody")).is_empty());
    assert_eq!(r.phase, Phase::Updating);
    assert_eq!(r.targets["d"].state, ClusterState::Held);
}

#[test]
fn a_nack_in_the_first_wave_rolls_it_back_and_later_waves_never_see_the_version() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    let out = r.handle(500, nack("a"));
    assert_eq!(rolled_back(&out), vec!["a"]);
    let Phase::RolledBack { failure } = &r.phase else {
        panic!("{:?}", r.phase)
    };
    assert_eq!(failure.cause, Cause::Nack);
    assert_eq!(failure.cluster.as_deref(), Some("a"));
    assert_eq!(failure.message, "bad route");
    // Nothing moves any more: later waves stay held.
    assert!(r.handle(600_000, Input::Tick).is_empty());
    for c in ["b", "c", "d"] {
        assert_eq!(r.targets[c].state, ClusterState::Held);
    }
}

#[test]
fn a_nack_in_a_later_wave_rolls_back_every_updated_cluster() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    pass_wave(&mut r, 0, &["a"]);
    r.handle(6_000, acked("b"));
    let out = r.handle(6_001, nack("c"));
    assert_eq!(rolled_back(&out), vec!["a", "b", "c"]);
    assert_eq!(r.targets["d"].state, ClusterState::Held);
    assert!(matches!(
        events(&out).last(),
        Some(Event::Failed { rolled_back, .. }) if rolled_back.len() == 3
    ));
}

#[test]
fn halt_leaves_updated_clusters_as_they_are() {
    let (mut r, _) = three_waves(OnFailure::Halt);
    pass_wave(&mut r, 0, &["a"]);
    let out = r.handle(6_000, nack("b"));
    assert!(rolled_back(&out).is_empty());
    assert!(matches!(r.phase, Phase::Halted { .. }));
    assert!(matches!(r.targets["a"].state, ClusterState::Acked { .. }));
    assert_eq!(r.targets["d"].state, ClusterState::Held);
}

#[test]
fn a_dropped_object_after_the_ack_fails_the_wave_while_it_bakes() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    r.handle(10, acked("a"));
    let out = r.handle(
        20,
        Input::Rejected {
            cluster: "a".into(),
            version: "v2".into(),
            how: Rejection::Dropped,
            message: "EnvoyFilter default/f: unknown type".into(),
        },
    );
    assert_eq!(rolled_back(&out), vec!["a"]);
    assert!(matches!(&r.phase, Phase::RolledBack { failure } if failure.cause == Cause::Dropped));
}

#[test]
fn a_metric_gate_turning_bad_during_the_bake_rolls_back() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    pass_wave(&mut r, 0, &["a"]);
    r.handle(6_000, acked("b"));
    r.handle(6_000, acked("c"));
    // A good evaluation during the bake changes nothing.
    assert!(r.handle(7_000, gates(1, false, &[])).is_empty());
    assert!(matches!(r.phase, Phase::Baking { .. }));
    let out = r.handle(8_000, gates(1, false, &[("c", "error-rate")]));
    assert_eq!(rolled_back(&out), vec!["a", "b", "c"]);
    let Phase::RolledBack { failure } = &r.phase else {
        panic!("{:?}", r.phase)
    };
    assert_eq!(
        failure.cause,
        Cause::Gate {
            name: "error-rate".into()
        }
    );
    assert_eq!(failure.wave, "early");
}

#[test]
fn a_failed_gate_at_the_end_of_the_bake_fails_and_gates_of_other_waves_are_ignored() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    r.handle(0, acked("a"));
    r.handle(BAKE, Input::Tick);
    assert!(r.handle(BAKE, gates(2, true, &[("d", "x")])).is_empty());
    assert_eq!(r.phase, Phase::Gating);
    r.handle(BAKE, gates(0, true, &[("a", "analysis")]));
    assert!(matches!(r.phase, Phase::RolledBack { .. }));
}

#[test]
fn the_progress_deadline_fails_a_wave_that_does_not_ack() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    assert!(r.handle(DEADLINE - 1, Input::Tick).is_empty());
    let out = r.handle(DEADLINE, Input::Tick);
    assert_eq!(rolled_back(&out), vec!["a"]);
    let Phase::RolledBack { failure } = &r.phase else {
        panic!("{:?}", r.phase)
    };
    assert_eq!(failure.cause, Cause::Deadline);
    assert!(
        failure.message.contains("not ACKed: a"),
        "{}",
        failure.message
    );
}

#[test]
fn the_deadline_counts_from_each_wave_start() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    pass_wave(&mut r, 50_000, &["a"]);
    // Wave "early" started at 55,000: not late at 100,000.
    assert!(r.handle(100_000, Input::Tick).is_empty());
    r.handle(55_000 + DEADLINE, Input::Tick);
    assert!(matches!(r.phase, Phase::RolledBack { .. }));
}

#[test]
fn a_manual_wave_waits_for_promotion() {
    let (mut r, _) = start_with(
        vec![
            wave("canary", &["a"], None, Promotion::Manual),
            wave("rest", &["b"], None, Promotion::Automatic),
        ],
        OnFailure::Rollback,
    );
    // Promotion is refused while the wave is updating.
    assert!(matches!(
        r.promote(1, None, "ops"),
        Err(Refused::WrongPhase { .. })
    ));
    let out = pass_wave(&mut r, 0, &["a"]);
    assert!(released(&out).is_empty());
    assert_eq!(r.phase, Phase::AwaitingPromotion);
    // Waiting for an operator is not late.
    assert!(r.handle(10 * DEADLINE, Input::Tick).is_empty());
    let out = r.promote(10 * DEADLINE, None, "ops").unwrap();
    assert_eq!(released(&out), vec!["b"]);
    assert_eq!(r.wave_started, 10 * DEADLINE);
}

#[test]
fn promote_cuts_a_bake_short_and_promote_of_a_cluster_updates_it_ahead_of_its_wave() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    let out = r.promote(1, Some("d"), "ops").unwrap();
    assert_eq!(released(&out), vec!["d"]);
    r.handle(2, acked("d"));
    r.handle(3, acked("a"));
    let out = r.promote(4, None, "ops").unwrap();
    assert_eq!(released(&out), vec!["b", "c"]);
    pass_wave(&mut r, 10, &["b", "c"]);
    // Wave "rest" has only d, already ACKed: straight to its bake.
    assert_eq!(r.wave, 2);
    assert_eq!(
        r.phase,
        Phase::Baking {
            until: 10 + 2 * BAKE
        }
    );
    assert!(matches!(
        r.promote(5, Some("zz"), "ops"),
        Err(Refused::UnknownCluster(_))
    ));
}

#[test]
fn abort_fails_the_rollout_by_the_policy() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    r.handle(1, acked("a"));
    let out = r.abort(2, None, "alice").unwrap();
    assert_eq!(rolled_back(&out), vec!["a"]);
    assert!(matches!(
        &r.phase,
        Phase::RolledBack { failure } if failure.cause == Cause::Aborted { by: "alice".into() }
    ));
    assert!(matches!(
        r.abort(3, None, "alice"),
        Err(Refused::WrongPhase { .. })
    ));
}

#[test]
fn abort_of_one_cluster_rolls_it_back_and_the_wave_goes_on() {
    let (mut r, _) = start_with(
        vec![wave("all", &["a", "b"], None, Promotion::Automatic)],
        OnFailure::Rollback,
    );
    r.handle(1, acked("a"));
    let out = r.abort(2, Some("b"), "ops").unwrap();
    assert_eq!(rolled_back(&out), vec!["b"]);
    assert_eq!(r.targets["b"].state, ClusterState::Excluded);
    assert_eq!(r.phase, Phase::Baking { until: 2 + BAKE });
    let out = r.handle(2 + BAKE, Input::Tick);
    assert_eq!(evaluates(&out), Some((0, vec!["a".to_owned()])));
}

#[test]
fn resume_after_a_rollback_starts_again_at_the_first_wave_not_acked() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    pass_wave(&mut r, 0, &["a"]);
    r.handle(6_000, nack("b"));
    assert!(matches!(
        r.resume(7_000, None, "ops").unwrap().as_slice(),
        [..]
    ));
    // Everything updated was rolled back, so it starts at the canary.
    assert_eq!((r.wave, r.phase.clone()), (0, Phase::Updating));
    assert_eq!(r.targets["a"].state, ClusterState::Released { at: 7_000 });
    assert!(matches!(
        r.resume(8_000, None, "ops"),
        Err(Refused::WrongPhase { .. })
    ));
}

#[test]
fn resume_after_a_halt_updates_the_failed_clusters_again() {
    let (mut r, _) = three_waves(OnFailure::Halt);
    pass_wave(&mut r, 0, &["a"]);
    r.handle(6_000, acked("b"));
    r.handle(6_001, nack("c"));
    let out = r.resume(7_000, None, "ops").unwrap();
    assert_eq!((r.wave, &r.phase), (1, &Phase::Updating));
    assert_eq!(released(&out), vec!["c"]);
}

#[test]
fn resume_of_an_excluded_cluster_updates_it_when_its_wave_passed() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    r.abort(0, Some("a"), "ops").unwrap();
    assert_eq!(r.phase, Phase::Baking { until: BAKE });
    r.handle(BAKE, Input::Tick);
    r.handle(BAKE, gates(0, true, &[]));
    assert_eq!(r.wave, 1);
    let out = r.resume(BAKE + 1, Some("a"), "ops").unwrap();
    assert_eq!(released(&out), vec!["a"]);
}

#[test]
fn a_superseded_rollout_ignores_everything_and_refuses_operators() {
    let (mut old, _) = three_waves(OnFailure::Rollback);
    old.supersede(2);
    assert!(old.handle(1, nack("a")).is_empty());
    assert!(matches!(
        old.promote(1, None, "ops"),
        Err(Refused::Finished { .. })
    ));
    let steps = BTreeMap::from([(
        "a".to_owned(),
        Step {
            from: Some("v2".into()),
            to: "v3".into(),
        },
    )]);
    let (new, out) = Rollout::start(
        2,
        5,
        vec![wave("canary", &["a"], None, Promotion::Automatic)],
        steps,
        DEADLINE,
        OnFailure::Rollback,
        Some(1),
    );
    assert_eq!(
        events(&out)[0],
        &Event::Started {
            id: 2,
            supersedes: Some(1)
        }
    );
    assert_eq!(new.targets["a"].step.from.as_deref(), Some("v2"));
}

#[test]
fn a_restored_rollout_reestablishes_what_each_cluster_is_served_and_goes_on() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    pass_wave(&mut r, 0, &["a"]);
    r.handle(6_000, acked("b"));
    let saved = serde_json::to_string(&r).unwrap();
    let mut back: Rollout = serde_json::from_str(&saved).unwrap();
    assert_eq!(back, r);
    let out = back.restore();
    assert_eq!(released(&out), vec!["a", "b", "c"]);
    assert_eq!(held(&out), vec![("d", Some("v1"))]);
    back.handle(7_000, acked("c"));
    assert_eq!(
        back.phase,
        Phase::Baking {
            until: 7_000 + BAKE
        }
    );
}

#[test]
fn a_restored_rollout_waiting_for_gates_asks_for_them_again() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    r.handle(0, acked("a"));
    r.handle(BAKE, Input::Tick);
    let out = r.restore();
    assert_eq!(evaluates(&out), Some((0, vec!["a".to_owned()])));
}

#[test]
fn a_wave_without_bake_asks_for_its_gates_at_once_and_an_empty_change_completes() {
    let mut w = wave("only", &["a"], None, Promotion::Automatic);
    w.bake_ms = 0;
    let (mut r, _) = start_with(vec![w], OnFailure::Rollback);
    let out = r.handle(3, acked("a"));
    assert_eq!(r.phase, Phase::Gating);
    assert!(evaluates(&out).is_some());

    let (empty, out) = Rollout::start(
        9,
        0,
        vec![],
        BTreeMap::new(),
        DEADLINE,
        OnFailure::Rollback,
        None,
    );
    assert_eq!(empty.phase, Phase::Completed);
    assert_eq!(events(&out).last(), Some(&&Event::Completed));
}

#[test]
fn a_cluster_that_never_had_a_version_is_held_on_nothing() {
    let steps = BTreeMap::from([(
        "new".to_owned(),
        Step {
            from: None,
            to: "v1".into(),
        },
    )]);
    let (_, out) = Rollout::start(
        1,
        0,
        vec![
            wave("one", &["x"], None, Promotion::Automatic),
            wave("two", &["new"], None, Promotion::Automatic),
        ],
        steps,
        DEADLINE,
        OnFailure::Rollback,
        None,
    );
    assert_eq!(held(&out), vec![("new", None)]);
}

#[test]
fn a_cluster_removed_from_the_configuration_leaves_the_rollout_and_its_wave_goes_on() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    let out = pass_wave(&mut r, 1_000, &["a"]);
    assert_eq!(released(&out), vec!["b", "c"]);
    r.handle(7_000, acked("b"));
    assert_eq!(r.phase, Phase::Updating, "c has not ACKed");

    // c leaves: the wave no longer waits for it and bakes.
    let out = r.forget(7_100, "c");
    assert_eq!(
        events(&out),
        vec![&Event::ClusterRemoved {
            cluster: "c".into()
        }]
    );
    assert!(!r.targets.contains_key("c"));
    assert_eq!(r.waves[1].clusters, vec!["b".to_owned()]);
    assert_eq!(
        r.phase,
        Phase::Baking {
            until: 7_100 + BAKE
        }
    );
    // Its gates are evaluated over the clusters left.
    let out = r.handle(7_100 + BAKE, Input::Tick);
    assert_eq!(evaluates(&out), Some((1, vec!["b".to_owned()])));

    // d, alone in the last wave, leaves: that wave is gone, and passing
    // this one completes the rollout.
    r.forget(8_000, "d");
    assert_eq!(r.waves.len(), 2);
    let out = r.handle(12_200, gates(1, true, &[]));
    assert_eq!(r.phase, Phase::Completed);
    assert!(released(&out).is_empty());
    // A cluster the rollout never had: nothing.
    assert!(r.forget(13_000, "zz").is_empty());
}

#[test]
fn a_later_wave_keeps_its_place_when_an_earlier_one_empties() {
    let (mut r, _) = start_with(
        vec![
            wave("canary", &["a"], None, Promotion::Automatic),
            wave("early", &["b"], None, Promotion::Automatic),
            wave("rest", &["c", "d"], None, Promotion::Automatic),
        ],
        OnFailure::Rollback,
    );
    // "early" loses its only cluster before it starts: dropped, and "rest"
    // (now wave 1) follows the canary.
    r.forget(10, "b");
    assert_eq!(
        r.waves.iter().map(|w| w.name.as_str()).collect::<Vec<_>>(),
        ["canary", "rest"]
    );
    assert_eq!(r.wave_of("c"), Some(1));
    let out = pass_wave(&mut r, 1_000, &["a"]);
    assert_eq!(released(&out), vec!["c", "d"]);
}

#[test]
fn a_step_no_wave_names_is_released_with_the_last_wave() {
    let step = Step {
        from: Some("v1".into()),
        to: "v2".into(),
    };
    let steps = BTreeMap::from([("a".to_owned(), step.clone()), ("z".to_owned(), step)]);
    let waves = vec![
        wave("canary", &["a"], None, Promotion::Automatic),
        wave("rest", &[], None, Promotion::Automatic),
    ];
    let (mut r, out) = Rollout::start(1, 0, waves, steps, DEADLINE, OnFailure::Rollback, None);
    assert_eq!(released(&out), vec!["a"]);
    assert_eq!(r.wave_of("z"), Some(1));
    let out = pass_wave(&mut r, 1_000, &["a"]);
    assert_eq!(released(&out), vec!["z"], "not held until the deadline");
}

#[test]
fn resume_of_a_cluster_during_the_bake_of_its_wave_updates_it_and_leaves_no_one_behind() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    pass_wave(&mut r, 10, &["a"]);
    // b is taken out while its wave updates; c ACKs: the wave bakes.
    r.abort(20, Some("b"), "ops").unwrap();
    r.handle(30, acked("c"));
    assert!(matches!(r.phase, Phase::Baking { .. }), "{:?}", r.phase);
    let out = r.resume(40, Some("b"), "ops").unwrap();
    assert_eq!(released(&out), vec!["b"], "updated at once, not left held");
    r.handle(50, acked("b"));
    assert!(matches!(r.targets["b"].state, ClusterState::Acked { .. }));
}

#[test]
fn a_pinned_cluster_leaves_the_waves_and_rejoins_them_when_unpinned() {
    let (mut r, _) = three_waves(OnFailure::Rollback);
    let out = r.pin(1, "a");
    assert!(
        matches!(r.phase, Phase::Baking { .. }),
        "a's wave no longer waits: {out:?}"
    );
    // Unpinned once its wave passed: updated at once.
    r.handle(BAKE + 1, Input::Tick);
    r.handle(BAKE + 1, gates(0, true, &[]));
    assert_eq!(r.wave, 1);
    let out = r.unpin(BAKE + 2, "a");
    assert_eq!(released(&out), vec!["a"]);
    // A held cluster's refusal (of an earlier offer of the version), even
    // after the rollout stopped, keeps it from being offered the version.
    let (mut r, _) = three_waves(OnFailure::Rollback);
    r.handle(1, nack("a"));
    let out = r.handle(2, nack("b"));
    assert!(
        matches!(r.targets["b"].state, ClusterState::Refused { .. }),
        "b refused v2 while held: {:?} {out:?}",
        r.targets["b"].state
    );
}

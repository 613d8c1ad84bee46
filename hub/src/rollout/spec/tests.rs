use super::*;

fn clusters() -> BTreeSet<String> {
    ["east", "west", "north"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
}

fn check_spec(yaml: &str) -> Result<RolloutSpec, SettingError> {
    let raw: RawRollout = serde_saphyr::from_str(yaml).expect("parses");
    raw.check(&clusters(), std::path::Path::new("/etc/meshhub"))
}

fn check(yaml: &str) -> Result<Policy, SettingError> {
    check_spec(yaml).map(|s| s.policy)
}

#[test]
fn a_full_block_is_read_with_its_defaults() {
    let p = check(
        "waves:\n- name: canary\n  clusters: [east]\n  bake: 5s\n  promotion: manual\n- name: eu\n  selector: {region: eu}\n  maxConcurrent: 2\n- name: all\n  rest: true\n",
    )
    .unwrap();
    assert_eq!(p.progress_deadline_ms, 600_000);
    assert_eq!(p.on_failure, OnFailure::Rollback);
    assert_eq!(p.waves.len(), 3);
    assert_eq!(p.waves[0].members, Members::Names(vec!["east".into()]));
    assert_eq!(p.waves[0].bake_ms, 5_000);
    assert_eq!(p.waves[0].promotion, Promotion::Manual);
    assert_eq!(
        p.waves[1].members,
        Members::Labels(BTreeMap::from([("region".into(), "eu".into())]))
    );
    assert_eq!(p.waves[1].max_concurrent, Some(2));
    assert_eq!(p.waves[2].members, Members::Rest);
    assert_eq!(p.waves[2].promotion, Promotion::Automatic);
    let p =
        check("onFailure: halt\nprogressDeadline: 1m\nwaves:\n- {name: a, rest: true}\n").unwrap();
    assert_eq!(
        (p.on_failure, p.progress_deadline_ms),
        (OnFailure::Halt, 60_000)
    );
}

#[test]
fn mistakes_are_named() {
    let cases = [
        ("waves: []\n", "waves", "at least one wave"),
        (
            "waves:\n- {name: a, clusters: [south]}\n",
            "waves[0].clusters[0]",
            "\"south\" is not a cluster with an `agent:`",
        ),
        (
            "waves:\n- {name: a, clusters: [east]}\n- {name: b, clusters: [west, east]}\n",
            "waves[1].clusters[1]",
            "already in an earlier wave",
        ),
        (
            "waves:\n- {name: a, clusters: [east]}\n- {name: a, clusters: [west]}\n",
            "waves[1].name",
            "a name of its own",
        ),
        (
            "waves:\n- {name: a, clusters: [east]}\n- {name: rest, clusters: [west]}\n",
            "waves[1].name",
            "implicit last wave",
        ),
        (
            "waves:\n- {name: a, rest: true}\n- {name: b, clusters: [west]}\n",
            "waves[0].rest",
            "only the last wave",
        ),
        (
            "waves:\n- {name: a, clusters: [east], rest: true}\n",
            "waves[0].clusters",
            "exactly one of",
        ),
        (
            "waves:\n- {name: a}\n",
            "waves[0].clusters",
            "exactly one of",
        ),
        (
            "waves:\n- {name: a, rest: true, maxConcurrent: 0}\n",
            "waves[0].maxConcurrent",
            "at least 1",
        ),
        (
            "progressDeadline: 1m\nwaves:\n- {name: a, rest: true, bake: 1m}\n",
            "waves[0].bake",
            "could never pass",
        ),
        (
            "progressDeadline: 0s\nwaves:\n- {name: a, rest: true}\n",
            "progressDeadline",
            "positive",
        ),
    ];
    for (yaml, field, message) in cases {
        let e = check(yaml).expect_err(yaml);
        assert_eq!(e.field, field, "{yaml}");
        assert!(e.message.contains(message), "{yaml}: {}", e.message);
    }
}

#[test]
fn unknown_keys_and_values_are_refused_by_the_parser() {
    for yaml in [
        "waves:\n- {name: a, rest: true, bakeTime: 5s}\n",
        "onFailure: retry\nwaves:\n- {name: a, rest: true}\n",
        "waves:\n- {name: a, rest: true, promotion: never}\n",
    ] {
        assert!(
            serde_saphyr::from_str::<RawRollout>(yaml).is_err(),
            "{yaml}"
        );
    }
}

#[test]
fn metric_gates_and_their_prometheus_are_read() {
    let spec = check_spec(
        "prometheus:\n  url: http://prometheus:9090/\n  interval: 2s\n  ca: ca.pem\nwaves:\n- name: canary\n  clusters: [east]\n  bake: 1m\n  metrics:\n  - name: errors\n    query: sum(errors{cluster=\"$cluster\"})\n    comparison: \"<=\"\n    threshold: 0.5\n    duringBake: true\n    onNoData: pass\n",
    )
    .unwrap();
    let p = spec.prometheus.unwrap();
    assert_eq!(p.url, "http://prometheus:9090");
    assert_eq!(
        (p.timeout, p.interval),
        (DEFAULT_QUERY_TIMEOUT, Duration::from_secs(2))
    );
    assert_eq!(
        p.ca.as_deref(),
        Some(std::path::Path::new("/etc/meshhub/ca.pem"))
    );
    let g = &spec.policy.waves[0].metrics[0];
    assert_eq!(g.comparison, Comparison::LessOrEqual);
    assert_eq!(g.threshold, 0.5);
    assert!(g.during_bake);
    assert_eq!(g.on_no_data, NoData::Pass);
    assert_eq!(g.query_for("east"), "sum(errors{cluster=\"east\"})");
}

use meshhub_api::rollout::GateReading;
use meshhub_rollout::{
    Comparison, Members, MetricGate, NoData, OnFailure, Phase, PlannedWave, Policy, Promotion,
    Rollout, Wave,
};

use super::*;

fn gate() -> MetricGate {
    MetricGate {
        name: "errors".into(),
        query: "sum(rate(errors{cluster=\"$cluster\"}[1m]))".into(),
        comparison: Comparison::Less,
        threshold: 1.0,
        during_bake: true,
        on_no_data: NoData::Fail,
    }
}

#[test]
fn a_gates_last_values_show_under_it_and_a_failing_one_opens_it() {
    let policy = Policy {
        waves: vec![Wave {
            name: "canary".into(),
            members: Members::Names(vec!["east".into()]),
            max_concurrent: None,
            bake_ms: 60_000,
            promotion: Promotion::Automatic,
            metrics: vec![gate()],
        }],
        progress_deadline_ms: 600_000,
        on_failure: OnFailure::Rollback,
    };
    let rollout = Rollout {
        id: 7,
        started: 0,
        waves: vec![PlannedWave {
            name: "canary".into(),
            clusters: vec!["east".into()],
            max_concurrent: None,
            bake_ms: 60_000,
            promotion: Promotion::Automatic,
        }],
        deadline_ms: 600_000,
        on_failure: OnFailure::Rollback,
        targets: Default::default(),
        wave: 0,
        wave_started: 0,
        phase: Phase::Baking { until: 60_000 },
    };
    let reading = |rollout: u64, value: Option<f64>, passed: bool| GateReading {
        rollout,
        wave: 0,
        gate: "errors".into(),
        cluster: "east".into(),
        value,
        passed,
        at: 1_000,
    };
    let view = View {
        enabled: true,
        policy: Some(policy),
        rollout: Some(rollout),
        // An older rollout's reading is not this one's.
        gates: vec![reading(6, Some(9.0), false), reading(7, Some(3.5), false)],
        ..View::default()
    };
    let html = section(&view).into_string();
    assert!(html.contains("<code>3.5</code>"), "{html}");
    assert!(
        !html.contains("<code>9</code>"),
        "another rollout's value: {html}"
    );
    assert!(
        html.contains(r#"<details id="gates-canary" open>"#),
        "{html}"
    );

    let view = View {
        gates: vec![reading(7, None, true)],
        ..view
    };
    let html = section(&view).into_string();
    assert!(
        html.contains("no sample") && html.contains("passes"),
        "{html}"
    );
    assert!(
        html.contains(r#"<details id="gates-canary">"#),
        "closed when it holds: {html}"
    );
}

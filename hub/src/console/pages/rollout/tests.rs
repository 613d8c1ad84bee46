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

/// A rollout of two waves: `canary` (east, acked; south, failed) passed,
/// `main` (west, held; north, excluded; rb, rolled back; ref, refused;
/// pin, pinned) waits for its promotion — or is in `phase`.
fn two_waves(phase: Phase) -> Rollout {
    use meshhub_rollout::{ClusterState as S, Step, Target};
    let target = |wave: usize, state: S| Target {
        step: Step {
            from: Some("v1".into()),
            to: "v2".into(),
        },
        wave,
        state,
    };
    let targets = [
        ("east", target(0, S::Acked { at: 1 })),
        (
            "south",
            target(
                0,
                S::Failed {
                    message: "nack".into(),
                },
            ),
        ),
        ("west", target(1, S::Held)),
        ("north", target(1, S::Excluded)),
        ("rb", target(1, S::RolledBack)),
        (
            "ref",
            target(
                1,
                S::Refused {
                    message: "earlier".into(),
                },
            ),
        ),
        (
            "pin",
            target(
                1,
                S::Pinned {
                    before: Box::new(S::Held),
                },
            ),
        ),
    ]
    .into_iter()
    .map(|(c, t)| (c.to_owned(), t))
    .collect();
    let wave = |name: &str, clusters: &[&str]| PlannedWave {
        name: name.into(),
        clusters: clusters.iter().map(|c| (*c).to_owned()).collect(),
        max_concurrent: None,
        bake_ms: 0,
        promotion: Promotion::Manual,
    };
    Rollout {
        id: 3,
        started: 0,
        waves: vec![
            wave("canary", &["east", "south"]),
            wave("main", &["west", "north", "rb", "ref", "pin"]),
        ],
        deadline_ms: 600_000,
        on_failure: OnFailure::Halt,
        targets,
        wave: 0,
        wave_started: 0,
        phase,
    }
}

/// The per-cluster buttons of `html`: (action, cluster, URL, accessible
/// name), in the order shown.
fn cluster_buttons_of(html: &str) -> Vec<(String, String, String, String)> {
    let attr = |tag: &str, name: &str| {
        let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        Some(tag[start..].split('"').next()?.replace("&amp;", "&"))
    };
    html.split("<template class=\"cluster-actions\">")
        .skip(1)
        .flat_map(|t| {
            let t = t.split("</template>").next().unwrap_or_default();
            t.split("<button").skip(1).map(|b| {
                let tag = b.split('>').next().unwrap_or_default();
                (
                    attr(tag, "data-action").unwrap_or_default(),
                    attr(tag, "data-cluster").unwrap_or_default(),
                    attr(tag, "data-url").unwrap_or_default(),
                    attr(tag, "aria-label").unwrap_or_default(),
                )
            })
        })
        .collect()
}

#[test]
fn per_cluster_buttons_only_where_the_admin_api_acts_on_the_cluster() {
    let view = |phase| View {
        enabled: true,
        rollout: Some(two_waves(phase)),
        ..View::default()
    };
    let html = section(&view(Phase::AwaitingPromotion)).into_string();
    let mut buttons = cluster_buttons_of(&html);
    buttons.sort();
    let b = |action: &str, cluster: &str, label: &str| {
        (
            action.to_owned(),
            cluster.to_owned(),
            format!("../rollout/{action}?cluster={cluster}"),
            format!("{label} {cluster}"),
        )
    };
    assert_eq!(
        buttons,
        vec![
            // Held, excluded, refused: served the new version now.
            b("promote", "north", "Promote"),
            b("promote", "ref", "Promote"),
            b("promote", "west", "Promote"),
            // Excluded, failed, rolled back, refused: back in the rollout.
            b("resume", "north", "Resume"),
            b("resume", "rb", "Resume"),
            b("resume", "ref", "Resume"),
            b("resume", "south", "Resume"),
        ],
        "{html}"
    );
    // Acked and pinned clusters have none; each button sits in its
    // cluster's item, in a template the script shows only with a token.
    for c in ["east", "pin"] {
        assert!(!buttons.iter().any(|b| b.1 == c), "{c}: {buttons:?}");
    }
    let west = html
        .split("<li>")
        .find(|li| li.contains(">west</a>"))
        .unwrap();
    assert!(
        west.contains("data-url=\"../rollout/promote?cluster=west\""),
        "{west}"
    );
    assert_eq!(
        html.matches(" data-cluster=").count(),
        buttons.len(),
        "every cluster's button is in a template: {html}"
    );
    // The rollout's own buttons post relative URLs too.
    for action in ["promote", "abort", "resume"] {
        assert!(
            html.contains(&format!(
                "data-action=\"{action}\" data-url=\"../rollout/{action}\""
            )),
            "{html}"
        );
    }

    // A halted rollout still takes them; a completed or superseded one
    // refuses every action: none shown.
    let halted = Phase::Halted {
        failure: Failure {
            wave: "canary".into(),
            cluster: Some("south".into()),
            cause: meshhub_rollout::Cause::Nack,
            message: "nack".into(),
        },
    };
    assert_eq!(
        cluster_buttons_of(&section(&view(halted)).into_string()).len(),
        7
    );
    for done in [Phase::Completed, Phase::Superseded { by: 4 }] {
        let html = section(&view(done)).into_string();
        assert!(cluster_buttons_of(&html).is_empty(), "{html}");
    }
}

#[test]
fn a_cluster_name_is_encoded_in_its_buttons_url() {
    let mut r = two_waves(Phase::AwaitingPromotion);
    let t = r.targets.remove("west").unwrap();
    r.targets.insert("we st&x".into(), t);
    r.waves[1].clusters[0] = "we st&x".into();
    let html = section(&View {
        enabled: true,
        rollout: Some(r),
        ..View::default()
    })
    .into_string();
    let buttons = cluster_buttons_of(&html);
    let (_, cluster, url, label) = buttons
        .iter()
        .find(|b| b.0 == "promote" && b.1.starts_with("we"))
        .unwrap();
    assert_eq!(cluster, "we st&x");
    assert_eq!(url, "../rollout/promote?cluster=we+st%26x");
    assert_eq!(label, "Promote we st&x");
}

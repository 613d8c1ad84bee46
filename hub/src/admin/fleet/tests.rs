use std::collections::BTreeMap;

use meshhub_mcp::ledger::Role;
use meshhub_rollout::{OnFailure, PlannedWave, Promotion, Rollout, Step};

use super::*;
use crate::clusters::tests::agent;

fn inputs(
    ledger: &Ledger,
    agents: &[&str],
    rollout: View,
) -> (FleetInputs, Vec<Box<dyn std::any::Any>>) {
    let (agents_tx, agents) = watch::channel(Arc::new(
        agents.iter().map(|c| agent(c)).collect::<Vec<_>>(),
    ));
    let (leader_tx, leader) = watch::channel(LeaderStatus::disabled());
    let (reports_tx, reports) = watch::channel(Reports::default());
    let (rollout_tx, rollout) = watch::channel(Arc::new(rollout));
    let keep: Vec<Box<dyn std::any::Any>> = vec![
        Box::new(agents_tx),
        Box::new(leader_tx),
        Box::new(reports_tx),
        Box::new(rollout_tx),
    ];
    (
        FleetInputs {
            agents,
            leader,
            ledger: ledger.clone(),
            reports,
            rollout,
        },
        keep,
    )
}

fn render(inputs: FleetInputs) -> String {
    let mut text = Text::default();
    section(inputs)(&mut text);
    text.into_string()
}

/// The samples of `text` (no comment lines), for exact comparison.
fn samples(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#')).collect()
}

#[test]
fn each_dialed_cluster_says_connected_synced_and_its_collections_states() {
    let ledger = Ledger::new();
    let east = ledger.register(Role::Source, "east", "east");
    east.connected();
    east.sent("a", "v1", "1");
    east.acked("a", "v1", "1");
    east.sent("b", "v1", "2");
    east.acked("b", "v1", "2");
    let west = ledger.register(Role::Source, "west", "west");
    west.connected();
    west.sent("a", "v1", "1");
    west.acked("a", "v1", "1");
    west.sent("a", "v2", "2");
    west.nacked("a", "v2", 3, "bad route");
    west.sent("b", "v1", "3");
    // A consumer of east's group is not the cluster's agent.
    let consumer = ledger.register(Role::Source, "127.0.0.1:5000", "east");
    consumer.connected();
    let (i, _keep) = inputs(&ledger, &["east", "north", "west"], View::default());
    let text = render(i);
    let mut got: Vec<&str> = samples(&text)
        .into_iter()
        .filter(|l| !l.starts_with("meshhub_cluster_last_ack"))
        .collect();
    got.sort_unstable();
    assert_eq!(
        got,
        [
            "meshhub_cluster_collections{cluster=\"east\",state=\"SYNCED\"} 2",
            "meshhub_cluster_collections{cluster=\"west\",state=\"NACKED\"} 1",
            "meshhub_cluster_collections{cluster=\"west\",state=\"STALE\"} 1",
            "meshhub_cluster_connected{cluster=\"east\"} 1",
            "meshhub_cluster_connected{cluster=\"north\"} 0",
            "meshhub_cluster_connected{cluster=\"west\"} 1",
            "meshhub_cluster_synced{cluster=\"east\"} 1",
            "meshhub_cluster_synced{cluster=\"north\"} 0",
            "meshhub_cluster_synced{cluster=\"west\"} 0",
            "meshhub_clusters 3",
        ],
        "{text}"
    );
    // The last ACK: east and west ACKed, north never did.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let acks: BTreeMap<&str, f64> = samples(&text)
        .into_iter()
        .filter_map(|l| l.strip_prefix("meshhub_cluster_last_ack_timestamp_seconds{cluster=\""))
        .filter_map(|l| l.split_once("\"} "))
        .map(|(c, v)| (c, v.parse().unwrap()))
        .collect();
    assert_eq!(acks.keys().copied().collect::<Vec<_>>(), ["east", "west"]);
    assert!(acks.values().all(|t| (now - t).abs() < 60.0), "{acks:?}");
    // A disconnected agent is not synced, whatever it ACKed before.
    east.disconnected(Some("gone".into()));
    let (i, _keep) = inputs(&ledger, &["east"], View::default());
    let text = render(i);
    assert!(
        text.contains("\nmeshhub_cluster_synced{cluster=\"east\"} 0\n"),
        "{text}"
    );
    // A cluster removed from the configuration has no series left.
    let (i, _keep) = inputs(&ledger, &["north"], View::default());
    let text = render(i);
    assert!(!text.contains("cluster=\"east\""), "{text}");
    assert!(text.contains("\nmeshhub_clusters 1\n"), "{text}");
}

#[test]
fn the_rollout_says_its_clusters_states_and_wave() {
    let ledger = Ledger::new();
    let wave = |name: &str, clusters: &[&str]| PlannedWave {
        name: name.into(),
        clusters: clusters.iter().map(|c| (*c).to_owned()).collect(),
        max_concurrent: None,
        bake_ms: 0,
        promotion: Promotion::default(),
    };
    let steps: BTreeMap<String, Step> = ["a", "b", "c"]
        .iter()
        .map(|c| {
            (
                (*c).to_owned(),
                Step {
                    from: Some("v1".into()),
                    to: "v2".into(),
                },
            )
        })
        .collect();
    let (rollout, _) = Rollout::start(
        7,
        90_000,
        vec![wave("canary", &["a"]), wave("rest", &["b", "c"])],
        steps,
        600_000,
        OnFailure::Rollback,
        None,
    );
    // No policy: no rollout families at all.
    let (i, _keep) = inputs(&ledger, &[], View::default());
    assert!(!render(i).contains("meshhub_rollout"));
    let view = View {
        enabled: true,
        rollout: Some(rollout),
        ..View::default()
    };
    let (i, _keep) = inputs(&ledger, &[], view);
    let text = render(i);
    let got: Vec<&str> = samples(&text)
        .into_iter()
        .filter(|l| l.starts_with("meshhub_rollout"))
        .collect();
    assert_eq!(
        got,
        [
            "meshhub_rollout_standing_failures 0",
            "meshhub_rollout_clusters{state=\"acked\"} 0",
            "meshhub_rollout_clusters{state=\"excluded\"} 0",
            "meshhub_rollout_clusters{state=\"failed\"} 0",
            "meshhub_rollout_clusters{state=\"held\"} 2",
            "meshhub_rollout_clusters{state=\"pinned\"} 0",
            "meshhub_rollout_clusters{state=\"refused\"} 0",
            "meshhub_rollout_clusters{state=\"rolled_back\"} 0",
            "meshhub_rollout_clusters{state=\"updating\"} 1",
            "meshhub_rollout_id 7",
            "meshhub_rollout_wave 1",
            "meshhub_rollout_waves 2",
            "meshhub_rollout_wave_started_timestamp_seconds 90",
            "meshhub_rollout_progress_deadline_seconds 600",
        ],
        "{text}"
    );
}

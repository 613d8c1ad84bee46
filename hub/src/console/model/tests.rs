use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use meshhub_api::status::RemoteView;
use meshhub_mcp::ledger::{At, CollectionStatus, Rejection, SyncState, Versioned};
use meshhub_rollout::{
    Cause, ClusterState, Failure, OnFailure, Phase, PlannedWave, Promotion, Rollout, Step, Target,
};

use super::*;

const VS: &str = "networking.istio.io/v1/VirtualService";
const DR: &str = "networking.istio.io/v1/DestinationRule";

fn at(secs: u64) -> At {
    At(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

fn synced(version: &str) -> CollectionStatus {
    let v = Versioned {
        version: version.into(),
        nonce: "n".into(),
        at: at(100),
    };
    CollectionStatus {
        sent: Some(v.clone()),
        acked: Some(v),
        state: SyncState::Synced,
        ..CollectionStatus::default()
    }
}

fn nacked(version: &str, message: &str) -> CollectionStatus {
    CollectionStatus {
        sent: Some(Versioned {
            version: version.into(),
            nonce: "n2".into(),
            at: at(200),
        }),
        nacked: Some(Rejection {
            version: version.into(),
            code: 3,
            message: message.into(),
            at: at(201),
        }),
        state: SyncState::Nacked,
        ..CollectionStatus::default()
    }
}

fn remote(cluster: &str, connected: bool, collections: &[(&str, CollectionStatus)]) -> RemoteView {
    RemoteView {
        cluster: cluster.into(),
        address: format!("http://{cluster}:15010"),
        connected,
        connected_since: None,
        disconnected_at: None,
        last_error: (!connected).then(|| "connection refused".to_owned()),
        streams: 1,
        shard: None,
        dialed_by: None,
        collections: collections
            .iter()
            .map(|(c, s)| ((*c).to_owned(), s.clone()))
            .collect(),
        dropped: BTreeMap::new(),
        report: None,
    }
}

/// The query of `s`, as the page's extractor reads it.
fn parse(s: &str) -> Result<Query, String> {
    let uri: axum::http::Uri = format!("/console?{s}").parse().unwrap();
    axum::extract::Query::<Query>::try_from_uri(&uri)
        .map(|q| q.0)
        .map_err(|e| e.body_text())
}

fn fleet(remotes: Vec<RemoteView>, rollout: Option<&Rollout>) -> Fleet {
    let labels: BTreeMap<String, BTreeMap<String, String>> = [
        (
            "east".to_owned(),
            [("region".to_owned(), "us".to_owned())].into(),
        ),
        (
            "west".to_owned(),
            [("region".to_owned(), "eu".to_owned())].into(),
        ),
    ]
    .into();
    let served = |c: &str| Some(format!("v-{c}"));
    Fleet::build(Facts {
        remotes,
        labels: &labels,
        rollout,
        standing: &BTreeMap::new(),
        analysis: &[],
        pins: &[],
        served: &served,
        consumers: Vec::new(),
        group: &|_| None,
    })
}

#[test]
fn trouble_comes_first_and_a_nack_carries_its_message() {
    let f = fleet(
        vec![
            remote("alpha", true, &[(VS, synced("1")), (DR, synced("1"))]),
            remote(
                "east",
                true,
                &[(VS, nacked("2", "bad host *.*")), (DR, synced("1"))],
            ),
            remote("west", false, &[(VS, synced("1"))]),
        ],
        None,
    );
    let order: Vec<(&str, Health)> = f
        .rows
        .iter()
        .map(|r| (r.cluster.as_str(), r.health))
        .collect();
    assert_eq!(
        order,
        [
            ("east", Health::Failing),
            ("west", Health::Disconnected),
            ("alpha", Health::Synced)
        ]
    );
    let east = &f.rows[0];
    assert_eq!(
        east.cells[0].state,
        CellState::Nacked,
        "failing cells first"
    );
    assert_eq!(east.cells[0].message, "bad host *.*");
    assert_eq!(east.labels.get("region").map(String::as_str), Some("us"));
    assert_eq!(f.counts.get(&Health::Failing), Some(&1));
    assert_eq!(
        east.last_change,
        Some(at(201).0),
        "the NACK is the last change"
    );
}

#[test]
fn a_cluster_the_rollout_holds_is_held_and_shows_the_newest_version() {
    let targets: BTreeMap<String, Target> = [(
        "east".to_owned(),
        Target {
            step: Step {
                from: Some("v-east".into()),
                to: "v-new".into(),
            },
            wave: 1,
            state: ClusterState::Held,
        },
    )]
    .into();
    let f = fleet(
        vec![remote("east", true, &[(VS, synced("1"))])],
        Some(&rollout(targets, Phase::Updating)),
    );
    let east = &f.rows[0];
    assert_eq!(east.health, Health::Held);
    assert_eq!(east.hold, Some(Hold::Rollout("held")));
    assert_eq!(east.served.as_deref(), Some("v-east"));
    assert_eq!(east.newest.as_deref(), Some("v-new"));
}

fn rollout(targets: BTreeMap<String, Target>, phase: Phase) -> Rollout {
    Rollout {
        id: 1,
        started: 0,
        waves: vec![PlannedWave {
            name: "all".into(),
            clusters: targets.keys().cloned().collect(),
            max_concurrent: None,
            bake_ms: 0,
            promotion: Promotion::Automatic,
        }],
        deadline_ms: 60_000,
        on_failure: OnFailure::Rollback,
        targets,
        wave: 0,
        wave_started: 0,
        phase,
    }
}

#[test]
fn a_rolled_back_rollout_fails_only_the_cluster_that_refused() {
    let target = |state: ClusterState| Target {
        step: Step {
            from: Some("v1".into()),
            to: "v2".into(),
        },
        wave: 0,
        state,
    };
    let targets: BTreeMap<String, Target> = [
        ("east".to_owned(), target(ClusterState::RolledBack)),
        ("west".to_owned(), target(ClusterState::RolledBack)),
    ]
    .into();
    let failure = Failure {
        wave: "all".into(),
        cluster: Some("west".into()),
        cause: Cause::Nack,
        message: "VirtualService bookinfo/reviews: bad host".into(),
    };
    let f = fleet(
        vec![
            remote("east", true, &[(VS, synced("1"))]),
            remote("west", true, &[(VS, synced("1"))]),
        ],
        Some(&rollout(targets, Phase::RolledBack { failure })),
    );
    let west = f.row("west").unwrap();
    assert_eq!(west.health, Health::Failing);
    assert_eq!(
        west.refusal.as_deref(),
        Some("VirtualService bookinfo/reviews: bad host")
    );
    let east = f.row("east").unwrap();
    assert_eq!(east.health, Health::Held, "rolled back, not the culprit");
    assert_eq!(east.hold, Some(Hold::Rollout("rolled back")));
    assert_eq!(east.refusal, None);
}

#[test]
fn filters_and_pages_select_the_rows() {
    let remotes: Vec<RemoteView> = (0..250)
        .map(|i| remote(&format!("c{i:03}"), i % 50 != 0, &[(VS, synced("1"))]))
        .collect();
    let f = fleet(remotes, None);
    let q = |s: &str| parse(s).unwrap();
    let (rows, total) = f.select(&q(""));
    assert_eq!((rows.len(), total), (PAGE_SIZE, 250));
    assert_eq!(rows[0].health, Health::Disconnected, "trouble first");
    let (rows, total) = f.select(&q("page=3"));
    assert_eq!((rows.len(), total), (50, 250));
    let (rows, _) = f.select(&q("page=9"));
    assert_eq!(rows.len(), 50, "beyond the last page: the last");
    let (rows, total) = f.select(&q("state=trouble"));
    assert_eq!((rows.len(), total), (5, 5));
    let (rows, _) = f.select(&q("name=c01"));
    assert_eq!(rows.len(), 10);
    assert!(parse("state=bogus").unwrap_err().contains("unknown state"));
    assert_eq!(
        q("state=held&label=a%3Db&page=2").with_page(3),
        "state=held&label=a%3Db&page=3"
    );
}

#[test]
fn a_label_filter_matches_key_and_value() {
    let f = fleet(
        vec![
            remote("east", true, &[(VS, synced("1"))]),
            remote("west", true, &[(VS, synced("1"))]),
        ],
        None,
    );
    let q = |s: &str| parse(s).unwrap();
    let names =
        |q: Query| -> Vec<String> { f.select(&q).0.iter().map(|r| r.cluster.clone()).collect() };
    assert_eq!(names(q("label=region%3Deu")), ["west"]);
    assert_eq!(names(q("label=region")), ["east", "west"]);
    assert!(names(q("label=zone")).is_empty());
}

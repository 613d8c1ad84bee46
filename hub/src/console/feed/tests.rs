use std::collections::BTreeMap;

use meshhub_mcp::ledger::{Ledger, Role};
use meshhub_runtime::admin::{AdminBase, Identity};

use super::*;
use crate::admin::AdminState;
use crate::clusters::tests::agent;
use crate::groups::GroupRules;
use crate::leader::LeaderStatus;

/// A long while, in paused time.
const WHILE: std::time::Duration = std::time::Duration::from_secs(5);

/// What keeps the inputs' senders alive.
pub(crate) type Keep = Vec<Box<dyn std::any::Any + Send>>;

/// Inputs over `ledger` with `clusters` configured (agents), nothing else.
pub(crate) fn inputs(ledger: &Ledger, clusters: &[&str]) -> (Inputs, Keep) {
    let (status_tx, status) = watch::channel(Arc::new(crate::pipeline::Status::default()));
    let (rules_tx, rules) = watch::channel(GroupRules::new(&[]));
    let (agents_tx, agents) = watch::channel(Arc::new(
        clusters.iter().map(|c| agent(c)).collect::<Vec<_>>(),
    ));
    let (reload_tx, reload) = watch::channel(Arc::new(crate::reload::ReloadStatus::default()));
    let (leader_tx, leader) = watch::channel(LeaderStatus::disabled());
    let (reports_tx, reports) = watch::channel(crate::upward::Reports::default());
    let (rollout_tx, rollout) = watch::channel(Arc::new(crate::rollout::View::default()));
    let (labels_tx, labels) = watch::channel(Arc::new(BTreeMap::new()));
    let (_, cache) = meshhub_mcp::cache::new();
    let admin = AdminState {
        status,
        cache,
        rules,
        agents,
        reload,
        ledger: ledger.clone(),
        leader,
        base: AdminBase::new(
            Arc::new(|| Ok(())),
            Identity::new("meshhub", serde_json::Value::Null),
            None,
            "127.0.0.1:1".parse().unwrap(),
            CancellationToken::new(),
        ),
        kinds: meshhub_proto::kinds::KindTable::builtin(),
        ads: meshhub_runtime::grpc::ads_types(meshhub_proto::kinds::KindTable::builtin()),
        history: None,
        grpc_tls: None,
        reports,
    };
    let keep: Keep = vec![
        Box::new(status_tx),
        Box::new(rules_tx),
        Box::new(agents_tx),
        Box::new(reload_tx),
        Box::new(leader_tx),
        Box::new(reports_tx),
        Box::new(rollout_tx),
        Box::new(labels_tx),
    ];
    (
        Inputs {
            admin,
            rollout,
            labels,
            pins: None,
        },
        keep,
    )
}

/// Lets the feed's task (and its blocking builds) run until it waits for
/// something again.
pub(crate) async fn settle() {
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(1)).await;
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn no_stream_no_build_and_a_burst_of_acks_is_one_build() {
    let ledger = Ledger::new();
    let peers: Vec<_> = (0..50)
        .map(|i| {
            let p = ledger.register(Role::Source, format!("c{i}"), format!("c{i}"));
            p.connected();
            p.sent("a", "v1", "1");
            p
        })
        .collect();
    let names: Vec<String> = (0..50).map(|i| format!("c{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (inputs, _keep) = inputs(&ledger, &names);
    let tasks = tokio_util::task::TaskTracker::new();
    let shutdown = CancellationToken::new();
    let feed = spawn(inputs, &tasks, shutdown.clone());

    // Nobody follows: nothing is built, however long.
    tokio::time::sleep(WHILE * 10).await;
    assert!(feed.current().is_none(), "built with no stream open");
    assert_eq!(*feed.rounds.borrow(), 0);

    // A stream opens: the fleet is built at once.
    let mut rx = feed.subscribe();
    rx.wait_for(Option::is_some).await.unwrap();
    let rounds = *feed.rounds.borrow();
    assert_eq!(rounds, 1);

    // A push: fifty ACKs at once are one build, not fifty.
    let mut built = feed.rounds.subscribe();
    for p in &peers {
        p.acked("a", "v1", "1");
    }
    built.wait_for(|n| *n > rounds).await.unwrap();
    // Nothing else was built for it.
    tokio::time::sleep(SETTLE * 2).await;
    settle().await;
    assert_eq!(*feed.rounds.borrow(), rounds + 1, "one build for the burst");
    let fleet = feed.current().unwrap();
    assert!(
        fleet
            .rows
            .iter()
            .all(|r| r.health == super::super::model::Health::Synced),
        "the build saw every ACK: {:?}",
        fleet
            .rows
            .iter()
            .map(|r| (&r.cluster, r.health))
            .collect::<Vec<_>>()
    );

    // Idle (a stream open, nothing changing): nothing is built.
    tokio::time::sleep(WHILE * 10).await;
    assert_eq!(*feed.rounds.borrow(), rounds + 1, "built while idle");
    // A stream dropped (no ACK, no NACK: the ledger's change signal) is
    // in the fleet one settling later.
    let before = *feed.rounds.borrow();
    peers[0].disconnected(Some("reset by peer".into()));
    built.wait_for(|n| *n > before).await.unwrap();
    assert!(
        feed.current()
            .unwrap()
            .rows
            .iter()
            .any(|r| r.cluster == "c0" && r.health == super::super::model::Health::Disconnected),
        "the dropped stream shows"
    );
    // The stream closes: the feed drops its fleet and builds no more.
    drop(rx);
    tokio::time::sleep(WHILE * 2).await;
    settle().await;
    assert!(feed.current().is_none(), "kept a fleet nobody follows");
    let idle = *feed.rounds.borrow();
    tokio::time::sleep(WHILE * 10).await;
    assert_eq!(*feed.rounds.borrow(), idle, "built with no stream open");

    shutdown.cancel();
    tasks.close();
    tasks.wait().await;
}

#[tokio::test(start_paused = true)]
async fn a_closed_input_does_not_keep_the_others_waiting() {
    let ledger = Ledger::new();
    let peer = ledger.register(Role::Source, "c0", "c0");
    peer.connected();
    peer.sent("a", "v1", "1");
    let (inputs, mut keep) = inputs(&ledger, &["c0"]);
    // Without leader election the hub drops the leader's sender: that
    // input is closed from the start.
    keep.retain(|k| !k.is::<watch::Sender<LeaderStatus>>());
    let tasks = tokio_util::task::TaskTracker::new();
    let shutdown = CancellationToken::new();
    let feed = spawn(inputs, &tasks, shutdown.clone());
    let mut rx = feed.subscribe();
    rx.wait_for(Option::is_some).await.unwrap();
    settle().await;

    // An ACK is in the fleet one settling later.
    let rounds = *feed.rounds.borrow();
    let mut built = feed.rounds.subscribe();
    let start = tokio::time::Instant::now();
    peer.acked("a", "v1", "1");
    built.wait_for(|n| *n > rounds).await.unwrap();
    let took = start.elapsed();
    assert!(took < SETTLE * 2, "the ACK waited {took:?}");
    let fleet = feed.current().unwrap();
    assert_eq!(fleet.rows[0].health, super::super::model::Health::Synced);

    shutdown.cancel();
    tasks.close();
    tasks.wait().await;
}

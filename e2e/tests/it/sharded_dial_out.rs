//! Sharded dial-out with a real kube-apiserver: three hub replicas
//! (processes, running as the hub's ServiceAccount with the RBAC of
//! deploy/rbac/hub.yaml and hub-shards.yaml) share 12 shards of 30
//! clusters: 29 in-process stand-in sinks (the engine's `ResourceSink`,
//! as the agent runs it) and one real `meshhub-sink-agent`.
//!
//! Covered: every replica holds its share (4 of 12) and dials exactly the
//! clusters of its shards, every cluster synced; `/status` names each
//! shard's holder and who dials each cluster, the same on every replica;
//! `meshhub_shard_*` metrics. One replica is SIGKILLed (a real process, so
//! its sockets close as a crashed pod's would and its leases are left to
//! expire): only its shards move, the survivors hold 6 each, and a change
//! written right after the kill reaches every cluster within the lease
//! duration plus a retry period and a margin (printed). Across the whole
//! run, from the sinks' own records of their streams (who pushed, from
//! when to when), no cluster was dialed by two replicas at once for longer
//! than one retry period (printed: the longest, and how many streams a
//! newer one superseded: the sinks serve one hub stream at a time, as the
//! agent does, so a double dial shows as streams replacing each other).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use meshhub_e2e::kube::{ControlPlanes, apply_yaml, rbac_manifest};
use meshhub_e2e::standin::{Picky, StandIn};
use meshhub_e2e::yaml::{cluster, files_hub};
use meshhub_e2e::*;
use meshhub_mcp::ledger::{PeerStatus, Role};
use meshhub_testkit::eventually_blocking;
use meshhub_testkit::fixtures::write_atomic;
use meshhub_testkit::http::get_blocking;
use meshhub_testkit::objects::{VS, vs};
use serde_json::Value;

const SHARDS: u32 = 12;
const STAND_INS: usize = 29;
const LEASE_DURATION: Duration = Duration::from_secs(3);
const RETRY_PERIOD: Duration = Duration::from_millis(500);
const REPLICAS: [&str; 3] = ["hub-a", "hub-b", "hub-c"];

fn config(
    objects: &std::path::Path,
    clusters: &str,
    id: &str,
    kubeconfig: &std::path::Path,
) -> String {
    let leader = format!(
        "leaderElection:\n  enabled: true\n  namespace: meshhub\n  identity: {id}\n  shards: {SHARDS}\n  leaseDuration: 3s\n  renewDeadline: 2s\n  retryPeriod: 500ms\n  kubeconfig: {}\n",
        kubeconfig.display()
    );
    files_hub(objects.display(), clusters, &leader)
}

/// The shards `hub` holds, by its `/status`.
fn held(status: &Value) -> BTreeSet<u64> {
    status["leader"]["shards"]["held"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

/// Shard → holder, by `hub`'s `/status`.
fn holders(status: &Value) -> BTreeMap<u64, String> {
    status["shards"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| Some((s["shard"].as_u64()?, s["holder"].as_str()?.to_owned())))
        .collect()
}

/// Whether `hub` dials exactly the clusters of its shards, every one of
/// them connected and synced (the stand-ins subscribe only `VS`).
fn dials_its_clusters_synced(id: &str, status: &Value) -> bool {
    let mine = held(status);
    let rows = status["remotes"].as_array().cloned().unwrap_or_default();
    rows.len() == STAND_INS + 1
        && rows.iter().all(|r| {
            let cluster = r["cluster"].as_str().unwrap_or_default();
            let ours = r["shard"].as_u64().is_some_and(|s| mine.contains(&s));
            if ours {
                r["dialed_by"] == id && synced(status, cluster, VS)
            } else {
                r["connected"] == false
            }
        })
}

/// One stream a sink saw: who pushed it, from when to when (`None`: still
/// open).
struct Stream {
    replica: String,
    from: SystemTime,
    until: Option<SystemTime>,
}

fn streams(ledger: &[PeerStatus]) -> Vec<Stream> {
    ledger
        .iter()
        .filter(|p| p.role == Role::Sink)
        .filter_map(|p| {
            Some(Stream {
                replica: p.replica.clone()?,
                from: p.connected_since?.0,
                until: if p.connected {
                    None
                } else {
                    p.disconnected_at.map(|a| a.0)
                },
            })
        })
        .collect()
}

/// Streams of one replica less than this apart are one dialing session
/// (the e2e reconnect backoff is at most 1 s).
const SESSION_GAP: Duration = Duration::from_millis(1500);

/// Each replica's dialing sessions of one sink: its streams merged while
/// less than [`SESSION_GAP`] apart. The sinks serve one stream at a time
/// (a newer one ends the older), so two replicas dialing at once show as
/// their streams replacing each other: overlapping sessions.
fn sessions(streams: &[Stream]) -> Vec<(String, SystemTime, SystemTime)> {
    let now = SystemTime::now();
    let mut sorted: Vec<&Stream> = streams.iter().collect();
    sorted.sort_by_key(|s| s.from);
    let mut out: Vec<(String, SystemTime, SystemTime)> = Vec::new();
    for s in sorted {
        let until = s.until.unwrap_or(now);
        let open = out.iter_mut().rev().find(|(r, _, _)| *r == s.replica);
        match open {
            Some((_, _, end)) if s.from.duration_since(*end).unwrap_or_default() < SESSION_GAP => {
                *end = (*end).max(until);
            }
            _ => out.push((s.replica.clone(), s.from, until)),
        }
    }
    out
}

/// The longest time two replicas dialed one sink at once.
fn longest_double_dial(streams: &[Stream]) -> Duration {
    let sessions = sessions(streams);
    let mut longest = Duration::ZERO;
    for (i, (ra, fa, ua)) in sessions.iter().enumerate() {
        for (rb, fb, ub) in &sessions[i + 1..] {
            if ra == rb {
                continue;
            }
            if let Ok(d) = (*ua).min(*ub).duration_since((*fa).max(*fb)) {
                longest = longest.max(d);
            }
        }
    }
    longest
}

// The checks block a worker (as the other process-level tests do); the
// stand-ins run on the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shards_are_shared_out_and_a_lost_replicas_move_within_the_lease() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start_bare(&["primary"]).await;
    let kubeconfig = planes.hub_service_account("primary").await;
    apply_yaml(
        &planes.client("primary").await,
        &rbac_manifest("hub-shards.yaml"),
    )
    .await;

    let ProcTree { dir, logs, objects } = proc_tree("reviews");

    // 29 stand-ins and one real agent.
    let mut sinks: Vec<(String, Arc<Picky>, StandIn)> = Vec::new();
    let mut clusters = String::new();
    for i in 0..STAND_INS {
        let name = format!("c{i:02}");
        let picky = Arc::new(Picky::default());
        let sink = StandIn::start_for(&name, picky.clone()).await;
        clusters.push_str(&cluster(&name, "", format!("http://{}", sink.addr), ""));
        sinks.push((name, picky, sink));
    }
    let agent = AgentProc::start("east", dir.path(), &logs, None);
    clusters.push_str(&cluster("east", "", format!("http://{}", agent.sink), ""));

    let mut hubs: Vec<(&str, HubProc)> = REPLICAS
        .iter()
        .map(|id| {
            let path = dir.path().join(format!("{id}.yaml"));
            std::fs::write(&path, config(&objects, &clusters, id, &kubeconfig)).unwrap();
            (*id, HubProc::start(id, &path, &logs))
        })
        .collect();

    // 1. Balanced: 4 shards each, disjoint, every cluster dialed by the
    // holder of its shard and synced; every replica shows the same holders.
    let settled = Instant::now();
    eventually_blocking("shards balanced, every cluster synced", || {
        let statuses: Vec<Value> = hubs.iter().map(|(_, h)| h.status()).collect();
        let balanced = statuses.iter().all(|s| held(s).len() == 4);
        let all: BTreeSet<u64> = statuses.iter().flat_map(held).collect();
        let same_view = statuses.iter().all(|s| holders(s) == holders(&statuses[0]));
        let dialing = hubs
            .iter()
            .zip(&statuses)
            .all(|((id, _), s)| dials_its_clusters_synced(id, s));
        (balanced && all.len() == SHARDS as usize && same_view && dialing).then_some(())
    });
    println!(
        "three replicas balanced and every cluster synced {:?} after the last start",
        settled.elapsed()
    );
    let before: Vec<Value> = hubs.iter().map(|(_, h)| h.status()).collect();
    for ((id, _), s) in hubs.iter().zip(&before) {
        for (shard, holder) in holders(s) {
            assert_eq!(
                held(s).contains(&shard),
                holder == *id,
                "{id}: shard {shard} held by {holder}"
            );
        }
    }
    let (_, metrics) = get_blocking(hubs[0].1.admin, "/metrics").unwrap();
    let held_lines = metrics
        .lines()
        .filter(|l| l.starts_with("meshhub_shard_held{") && l.ends_with(" 1"))
        .count();
    assert_eq!(held_lines, 4, "{metrics}");
    assert!(metrics.contains("meshhub_shard_clusters{"), "{metrics}");
    assert!(
        metrics.contains("meshhub_shard_transitions_total{"),
        "{metrics}"
    );
    // The real agent names the replica that pushes to it.
    let east_row = remote(&before[0], "east").clone();
    let east_by = east_row["dialed_by"].as_str().unwrap().to_owned();
    eventually_blocking("the agent pushed by its shard's holder", || {
        (agent.status()["hub"]["replica"] == east_by.as_str()).then_some(())
    });

    // 2. SIGKILL of one replica (the one dialing the real agent, so that it
    // moves too); a change written at once must reach every cluster.
    let victim = hubs
        .iter()
        .position(|(id, _)| *id == east_by)
        .expect("east dialed by a replica");
    let victim_id = hubs[victim].0;
    let victim_shards = held(&before[victim]);
    let crashed = Instant::now();
    hubs[victim].1.proc.kill();
    write_atomic(&objects.join("ratings.yaml"), &vs("ratings", "ratings"));
    let survivors: Vec<usize> = (0..hubs.len()).filter(|i| *i != victim).collect();
    let took_over = eventually_blocking("the survivors hold every shard", || {
        let statuses: Vec<Value> = survivors.iter().map(|i| hubs[*i].1.status()).collect();
        let all: BTreeSet<u64> = statuses.iter().flat_map(held).collect();
        (all.len() == SHARDS as usize).then(|| crashed.elapsed())
    });
    let resynced = eventually_blocking("every cluster holds the change", || {
        let stand_ins = sinks
            .iter()
            .all(|(_, p, _)| p.names().iter().any(|n| n == "bookinfo/ratings"));
        let statuses: Vec<Value> = survivors.iter().map(|i| hubs[*i].1.status()).collect();
        let real = survivors
            .iter()
            .zip(&statuses)
            .any(|(i, s)| remote(s, "east")["dialed_by"] == hubs[*i].0 && synced(s, "east", VS));
        (stand_ins && real).then(|| crashed.elapsed())
    });
    println!(
        "after SIGKILL of {victim_id} ({} shards): shards taken over in {took_over:?}, every cluster resynced with a change in {resynced:?} (leaseDuration {LEASE_DURATION:?}, retryPeriod {RETRY_PERIOD:?})",
        victim_shards.len()
    );
    assert!(
        resynced <= LEASE_DURATION + RETRY_PERIOD + Duration::from_secs(2),
        "takeover and resync too slow: {resynced:?}"
    );
    // Only the victim's shards moved; the survivors share them.
    let after: Vec<Value> = survivors.iter().map(|i| hubs[*i].1.status()).collect();
    for (i, s) in survivors.iter().zip(&after) {
        let kept = held(&before[*i]);
        assert!(
            kept.is_subset(&held(s)),
            "{} lost shards: {kept:?} → {:?}",
            hubs[*i].0,
            held(s)
        );
    }
    eventually_blocking("the survivors hold 6 each and dial their clusters", || {
        survivors
            .iter()
            .all(|i| {
                let s = hubs[*i].1.status();
                held(&s).len() == 6 && dials_its_clusters_synced(hubs[*i].0, &s)
            })
            .then_some(())
    });
    eventually_blocking("the agent pushed by a survivor", || {
        let by = agent.status()["hub"]["replica"].as_str().map(str::to_owned);
        by.filter(|b| b != victim_id).map(drop)
    });

    // 3. No cluster had two replicas' streams at once for longer than one
    // retry period, over the whole run.
    let mut longest = (Duration::ZERO, String::new());
    let mut superseded = 0;
    for (name, _, sink) in &sinks {
        let view = sink.ledger.view();
        superseded += view
            .iter()
            .filter(|p| p.last_error.as_deref() == Some(meshhub_mcp::sink::server::SUPERSEDED))
            .count();
        let d = longest_double_dial(&streams(&view));
        if d > longest.0 {
            longest = (d, name.clone());
        }
    }
    let agent_ledger: Vec<PeerStatus> =
        serde_json::from_value(agent.status()["ledger"].clone()).expect("the agent's ledger");
    let d = longest_double_dial(&streams(&agent_ledger));
    if d > longest.0 {
        longest = (d, "east".to_owned());
    }
    println!(
        "longest double dial over the run: {:?} (cluster {:?}; retryPeriod {RETRY_PERIOD:?}); stand-in streams superseded by a newer one: {superseded}",
        longest.0, longest.1
    );
    assert!(
        longest.0 <= RETRY_PERIOD,
        "cluster {} was dialed by two replicas for {:?}",
        longest.1,
        longest.0
    );

    for (_, _, sink) in sinks {
        sink.stop().await;
    }
}

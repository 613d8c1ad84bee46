//! Leader election for the dial-out role with a real kube-apiserver: two
//! hub replicas share one Lease (running as the hub's ServiceAccount, with
//! the RBAC of deploy/rbac/hub.yaml); both serve consumers (both ready),
//! only the leader dials the one agent, and the agent shows which replica
//! pushes to it.
//!
//! Covered: exactly one leader, only it connected to the agent; SIGKILL of
//! the leader → the other takes over once the lease expired (not before,
//! and within leaseDuration + a margin: printed); the killed replica comes
//! back as a follower; SIGTERM of the leader releases the lease → the other
//! takes over well before the lease would have expired (printed).

use std::time::{Duration, Instant};

use ::kube::Api;
use k8s_openapi::api::coordination::v1::Lease;
use meshhub_e2e::kube::ControlPlanes;
use meshhub_e2e::*;
use meshhub_testkit::eventually_blocking;
use meshhub_testkit::fixtures::write_atomic;
use meshhub_testkit::http::get_blocking;
use meshhub_testkit::objects::{VS, vs};
use serde_json::Value;

const LEASE_DURATION: Duration = Duration::from_secs(3);
const RETRY_PERIOD: Duration = Duration::from_millis(500);
const LEASE_NAME: &str = "meshhub-dial-out";

fn leader(status: &Value) -> &Value {
    &status["leader"]
}

fn is_leader(hub: &HubProc) -> bool {
    leader(&hub.status())["is_leader"] == true
}

/// The replica the agent's current hub stream comes from.
fn pushed_by(agent: &AgentProc) -> Option<String> {
    agent.status()["hub"]["replica"].as_str().map(str::to_owned)
}

async fn lease_holder(api: &Api<Lease>) -> Option<String> {
    api.get_opt(LEASE_NAME)
        .await
        .expect("read the lease")
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// Asserts that `leader` leads, dials and has the agent synced, and that
/// `follower` does not dial, while both stay ready.
fn assert_roles(leader_hub: &HubProc, follower: &HubProc, agent: &AgentProc, identity: &str) {
    eventually_blocking(&format!("{identity} synced to the agent"), || {
        let s = leader_hub.status();
        (leader(&s)["is_leader"] == true && synced(&s, "east", VS)).then_some(())
    });
    eventually_blocking(&format!("the agent pushed by {identity}"), || {
        (pushed_by(agent).as_deref() == Some(identity)).then_some(())
    });
    let s = follower.status();
    assert_eq!(leader(&s)["enabled"], true, "{}", s["leader"]);
    assert_eq!(leader(&s)["is_leader"], false, "{}", s["leader"]);
    assert_eq!(leader(&s)["holder"], identity, "{}", s["leader"]);
    let r = remote(&s, "east");
    assert_eq!(r["connected"], false, "a follower does not dial: {r}");
    // Both replicas serve consumers: the follower stays ready.
    assert_eq!(
        get_blocking(follower.admin, "/readyz").map(|r| r.0),
        Some(200)
    );
    assert_eq!(
        get_blocking(leader_hub.admin, "/readyz").map(|r| r.0),
        Some(200)
    );
    // The agent has exactly one live hub stream.
    let live: Vec<Value> = agent.status()["ledger"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["role"] == "sink" && p["connected"] == true)
        .cloned()
        .collect();
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0]["replica"], identity);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_dials_and_another_takes_over() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start_bare(&["primary"]).await;
    let kubeconfig = planes.hub_service_account("primary").await;
    let leases: Api<Lease> = Api::namespaced(planes.client("primary").await, "meshhub");

    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    write_atomic(&objects.join("reviews.yaml"), &vs("reviews", "reviews"));
    let agent = AgentProc::start("east", dir.path(), &logs, None);
    let config = |id: &str| {
        let path = dir.path().join(format!("{id}.yaml"));
        std::fs::write(&path, replica_config(&objects, agent.sink, id, &kubeconfig)).unwrap();
        path
    };
    let (config_a, config_b) = (config("hub-a"), config("hub-b"));
    // Both start (and get ready) whoever leads.
    let mut hubs = [
        ("hub-a", HubProc::start("hub-a", &config_a, &logs)),
        ("hub-b", HubProc::start("hub-b", &config_b, &logs)),
    ];

    // 1. Exactly one leader; only it dials; the agent names it.
    let first = eventually_blocking("one leader", || {
        let leaders: Vec<usize> = (0..2).filter(|i| is_leader(&hubs[*i].1)).collect();
        (leaders.len() == 1).then(|| leaders[0])
    });
    let (leader_id, follower_id) = (hubs[first].0, hubs[1 - first].0);
    assert_roles(&hubs[first].1, &hubs[1 - first].1, &agent, leader_id);
    assert_eq!(lease_holder(&leases).await.as_deref(), Some(leader_id));
    let (_, metrics) = get_blocking(hubs[first].1.admin, "/metrics").unwrap();
    assert!(metrics.contains("meshhub_leader 1"), "{metrics}");
    let (_, metrics) = get_blocking(hubs[1 - first].1.admin, "/metrics").unwrap();
    assert!(metrics.contains("meshhub_leader 0"), "{metrics}");

    // 2. A crash of the leader: the follower takes over once the lease
    // expired on its clock — not before, and within leaseDuration plus a
    // retry period and a margin.
    let crashed = Instant::now();
    hubs[first].1.proc.kill();
    eventually_blocking("the follower takes over", || {
        is_leader(&hubs[1 - first].1).then_some(())
    });
    let takeover = crashed.elapsed();
    println!(
        "takeover after SIGKILL of the leader: {takeover:?} (leaseDuration {LEASE_DURATION:?}, retryPeriod {RETRY_PERIOD:?})"
    );
    assert!(
        takeover >= LEASE_DURATION - RETRY_PERIOD - Duration::from_millis(100),
        "taken over before the lease expired: {takeover:?}"
    );
    assert!(
        takeover <= LEASE_DURATION + RETRY_PERIOD + Duration::from_secs(2),
        "takeover too slow: {takeover:?}"
    );
    eventually_blocking(&format!("the agent pushed by {follower_id}"), || {
        (pushed_by(&agent).as_deref() == Some(follower_id)).then_some(())
    });
    let pushed = crashed.elapsed();
    println!("agent pushed by the new leader {pushed:?} after the crash");

    // 3. The crashed replica comes back as a follower.
    hubs[first].1 = HubProc::start(leader_id, &config(leader_id), &logs);
    assert_roles(&hubs[1 - first].1, &hubs[first].1, &agent, follower_id);
    assert_eq!(lease_holder(&leases).await.as_deref(), Some(follower_id));

    // 4. A graceful stop releases the lease: the other replica takes over
    // at its next retry, well before the lease would have expired.
    let stopped = Instant::now();
    hubs[1 - first].1.proc.signal("TERM");
    eventually_blocking("the other takes over", || {
        is_leader(&hubs[first].1).then_some(())
    });
    let handover = stopped.elapsed();
    println!("handover after SIGTERM of the leader: {handover:?}");
    assert!(
        handover < LEASE_DURATION - RETRY_PERIOD,
        "the lease was not released: handover took {handover:?}"
    );
    assert!(hubs[1 - first].1.proc.wait_exit().success());
    let log = hubs[1 - first].1.proc.stdout() + &hubs[1 - first].1.proc.stderr();
    assert!(log.contains("lease released"), "{log}");
    eventually_blocking(&format!("the agent pushed by {leader_id}"), || {
        (pushed_by(&agent).as_deref() == Some(leader_id)).then_some(())
    });
    eventually_blocking("synced after the handover", || {
        synced(&hubs[first].1.status(), "east", VS).then_some(())
    });
    assert_eq!(lease_holder(&leases).await.as_deref(), Some(leader_id));
}

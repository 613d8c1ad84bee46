//! Staged rollout in-process over real gRPC on loopback: a hub with a
//! `rollout:` policy (canary `a`, then `b` and `c`) dials three stand-in
//! agents. A good change reaches the canary first and the others only
//! after its ACK and bake; a change the canary NACKs is rolled back there
//! and never offered to the others; operators promote and abort through
//! the admin port.

use meshhub_e2e::inproc::dialer;
use meshhub_e2e::standin::Mesh;
use meshhub_mcp::ledger::SyncState;
use meshhub_testkit::eventually;
use meshhub_testkit::objects::{VS, vs};
use serde_json::Value;

/// The clusters, each with a stand-in agent.
const ABC: [&str; 3] = ["a", "b", "c"];

const CANARY_FIRST: &str = "history:\n  dir: history\nrollout:\n  progressDeadline: 30s\n  waves:\n  - name: canary\n    clusters: [a]\n    bake: 400ms\n  - name: rest\n    rest: true\n";

#[tokio::test]
async fn a_good_change_reaches_the_canary_first_and_the_rest_after_its_ack_and_bake() {
    let mesh = Mesh::start(&ABC, CANARY_FIRST).await;
    std::fs::write(mesh.objects.join("two.yaml"), vs("two", "two")).unwrap();
    eventually("the canary holds the change", || async {
        mesh.holds("a", "bookinfo/two")
    })
    .await;
    // The canary's ACK is at most in flight and its bake is 400 ms: the
    // others cannot have been offered the change yet.
    assert!(!mesh.holds("b", "bookinfo/two") && !mesh.holds("c", "bookinfo/two"));
    assert_eq!((mesh.offered("b"), mesh.offered("c")), (1, 1));
    let r = mesh.rollout().await;
    assert_eq!(r["rollout"]["waves"][0]["name"], "canary");
    eventually("the rest hold the change", || async {
        mesh.holds("b", "bookinfo/two") && mesh.holds("c", "bookinfo/two")
    })
    .await;
    eventually("the rollout completes", || async {
        mesh.rollout().await["rollout"]["phase"]["phase"] == "completed"
    })
    .await;
    let r = mesh.rollout().await;
    for c in ["a", "b", "c"] {
        assert_eq!(r["rollout"]["targets"][c]["state"]["state"], "acked", "{r}");
    }
    // Promoting a finished rollout is refused.
    let (code, body) = mesh.post("/rollout/promote").await;
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("completed"), "{body}");
    mesh.stop().await;
}

#[tokio::test]
async fn a_change_the_canary_nacks_is_rolled_back_there_and_never_offered_to_the_rest() {
    let mesh = Mesh::start(&ABC, CANARY_FIRST).await;
    // The sink holds the first version before the hub has read its ACK.
    eventually("a ACKed the first version", || async {
        dialer(&mesh.hub, "a").is_some_and(|p| p.collections[VS].acked.is_some())
    })
    .await;
    let first = dialer(&mesh.hub, "a").unwrap().collections[VS]
        .acked
        .clone()
        .unwrap()
        .version;
    std::fs::write(mesh.objects.join("bad.yaml"), vs("bad", "bad")).unwrap();
    eventually("the rollout is rolled back", || async {
        mesh.rollout().await["rollout"]["phase"]["phase"] == "rolledBack"
    })
    .await;
    let r = mesh.rollout().await;
    let failure = &r["rollout"]["phase"]["failure"];
    assert_eq!(failure["cluster"], "a", "{r}");
    assert_eq!(failure["cause"], "nack", "{r}");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("rejected by the test sink"),
        "{r}"
    );
    // The canary is served its previous version again, and ACKs it.
    eventually("the canary is back on its first version", || async {
        dialer(&mesh.hub, "a").is_some_and(|p| {
            let c = &p.collections[VS];
            c.state == SyncState::Synced && c.acked.as_ref().is_some_and(|a| a.version == first)
        })
    })
    .await;
    assert_eq!(
        (mesh.offered("b"), mesh.offered("c")),
        (1, 1),
        "b and c never saw it"
    );

    // The fix supersedes: a new rollout from the canary, to the end.
    std::fs::remove_file(mesh.objects.join("bad.yaml")).unwrap();
    std::fs::write(mesh.objects.join("good.yaml"), vs("good", "good")).unwrap();
    eventually("every cluster holds the fix", || async {
        ["a", "b", "c"]
            .iter()
            .all(|c| mesh.holds(c, "bookinfo/good"))
    })
    .await;
    assert!(!mesh.holds("b", "bookinfo/bad"));
    mesh.stop().await;
}

#[tokio::test]
async fn operators_promote_a_waiting_wave_and_abort_one_that_runs() {
    let manual = "history:\n  dir: history\nrollout:\n  waves:\n  - name: canary\n    clusters: [a]\n    promotion: manual\n  - name: b\n    clusters: [b]\n    bake: 1m\n  - name: rest\n    rest: true\n";
    let mesh = Mesh::start(&ABC, manual).await;
    let (code, _) = mesh.post("/rollout/promote").await;
    assert_eq!(code, 404, "nothing rolled out yet");
    std::fs::write(mesh.objects.join("two.yaml"), vs("two", "two")).unwrap();
    eventually("the canary passed and waits for promotion", || async {
        mesh.rollout().await["rollout"]["phase"]["phase"] == "awaitingPromotion"
    })
    .await;
    assert!(!mesh.holds("b", "bookinfo/two"));
    let (code, body) = mesh.post("/rollout/promote").await;
    assert_eq!(code, 200, "{body}");
    eventually("b holds the change", || async {
        mesh.holds("b", "bookinfo/two")
    })
    .await;
    // b bakes for a minute: abort rolls a and b back; c never sees it.
    eventually("b baking", || async {
        mesh.rollout().await["rollout"]["phase"]["phase"] == "baking"
    })
    .await;
    let (code, body) = mesh.post("/rollout/abort").await;
    assert_eq!(code, 200, "{body}");
    let r: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(r["rollout"]["phase"]["phase"], "rolledBack", "{r}");
    assert_eq!(
        r["rollout"]["phase"]["failure"]["cause"]["aborted"]["by"], "ops",
        "{r}"
    );
    eventually("a and b are served their first version again", || async {
        !mesh.holds("a", "bookinfo/two") && !mesh.holds("b", "bookinfo/two")
    })
    .await;
    assert_eq!(mesh.offered("c"), 1);
    mesh.stop().await;
}

#[tokio::test]
async fn a_restarted_hub_keeps_holding_the_later_waves_and_goes_on_where_it_was() {
    let policy = "history:\n  dir: history\nrollout:\n  waves:\n  - name: canary\n    clusters: [a]\n    bake: 5m\n  - name: rest\n    rest: true\n";
    let mesh = Mesh::start(&ABC, policy).await;
    std::fs::write(mesh.objects.join("two.yaml"), vs("two", "two")).unwrap();
    eventually("the canary bakes", || async {
        mesh.rollout().await["rollout"]["phase"]["phase"] == "baking"
    })
    .await;
    let before = mesh.rollout().await;

    let mesh = mesh.restart_hub().await;
    // The same rollout, still baking; b and c still held on their first
    // version (never offered the change), a still on the change.
    let after = mesh.rollout().await;
    assert_eq!(after["rollout"]["id"], before["rollout"]["id"], "{after}");
    assert_eq!(
        after["rollout"]["phase"], before["rollout"]["phase"],
        "{after}"
    );
    eventually(
        "every cluster is dialed again and ACKs what it is served",
        || async {
            ["a", "b", "c"].iter().all(|c| {
                dialer(&mesh.hub, c).is_some_and(|p| {
                    p.collections
                        .get(VS)
                        .is_some_and(|v| v.state == SyncState::Synced)
                })
            })
        },
    )
    .await;
    assert!(mesh.holds("a", "bookinfo/two"));
    assert!(!mesh.holds("b", "bookinfo/two") && !mesh.holds("c", "bookinfo/two"));
    assert_eq!((mesh.offered("b"), mesh.offered("c")), (1, 1));

    let (code, body) = mesh.post("/rollout/promote").await;
    assert_eq!(code, 200, "{body}");
    eventually("the rest hold the change", || async {
        mesh.holds("b", "bookinfo/two") && mesh.holds("c", "bookinfo/two")
    })
    .await;
    // Their ACKs count: clusters held at the restart were released after
    // it, and the rollout completes.
    eventually("the rollout completes", || async {
        mesh.rollout().await["rollout"]["phase"]["phase"] == "completed"
    })
    .await;
    mesh.stop().await;
}

/// A canary that waits for promotion, then the rest.
const CANARY_MANUAL: &str = "history:\n  dir: history\nrollout:\n  progressDeadline: 60s\n  waves:\n  - name: canary\n    clusters: [a]\n    promotion: manual\n  - name: rest\n    rest: true\n";

#[tokio::test]
async fn clusters_a_reload_removes_leave_the_rollout_and_ones_it_adds_join_it() {
    let mesh = Mesh::start(&ABC, CANARY_MANUAL).await;
    std::fs::write(mesh.objects.join("two.yaml"), vs("two", "two")).unwrap();
    eventually("the canary passed and waits for promotion", || async {
        mesh.phase().await == "awaitingPromotion"
    })
    .await;
    assert!(!mesh.holds("c", "bookinfo/two"));

    // c leaves the configuration while held for the rest wave, and d, a
    // new cluster, joins.
    let d_picky = std::sync::Arc::new(meshhub_e2e::standin::Picky::default());
    let d = meshhub_e2e::standin::StandIn::start_for("d", d_picky.clone()).await;
    mesh.reconfigure(&["a", "b", "d"], &[("d", d.addr)], CANARY_MANUAL)
        .await;
    eventually("c left the rollout", || async {
        let r = mesh.rollout().await;
        r["rollout"]["targets"].get("c").is_none()
            && !r["rollout"]["waves"][1]["clusters"]
                .as_array()
                .unwrap()
                .contains(&"c".into())
    })
    .await;
    // d's first snapshot is served at once: there is nothing to protect.
    eventually("d holds its first version", || async {
        d_picky.names().contains(&"bookinfo/two".to_owned())
    })
    .await;

    // Promoted, the rest wave completes without waiting for c.
    let (code, body) = mesh.post("/rollout/promote").await;
    assert_eq!(code, 200, "{body}");
    eventually("the rollout completes without c", || async {
        mesh.phase().await == "completed"
    })
    .await;
    assert!(mesh.holds("b", "bookinfo/two"));
    assert!(!mesh.holds("c", "bookinfo/two"), "c is no longer dialed");

    // The next change goes through the waves for d too: held while the
    // canary waits for promotion.
    let offered_to_d = d_picky.offered.lock().unwrap().len();
    std::fs::write(mesh.objects.join("three.yaml"), vs("three", "three")).unwrap();
    eventually("the canary holds the next change", || async {
        mesh.holds("a", "bookinfo/three") && mesh.phase().await == "awaitingPromotion"
    })
    .await;
    let r = mesh.rollout().await;
    assert_eq!(
        r["rollout"]["targets"]["d"]["state"]["state"], "held",
        "{r}"
    );
    assert!(!d_picky.names().contains(&"bookinfo/three".to_owned()));
    assert_eq!(d_picky.offered.lock().unwrap().len(), offered_to_d);
    let (code, body) = mesh.post("/rollout/promote").await;
    assert_eq!(code, 200, "{body}");
    eventually("d holds the change after the promotion", || async {
        d_picky.names().contains(&"bookinfo/three".to_owned())
    })
    .await;
    mesh.stop().await;
    d.stop().await;
}

#[tokio::test]
async fn a_reloaded_policy_governs_the_next_change_without_a_restart() {
    let mesh = Mesh::start(&ABC, CANARY_FIRST).await;
    // The canary now waits for an operator.
    mesh.reconfigure(&ABC, &[], CANARY_MANUAL).await;
    let status = mesh.hub.reload_status().borrow().clone();
    assert!(
        status.pending_restart.is_empty(),
        "the policy needs no restart: {:?}",
        status.pending_restart
    );
    eventually("GET /rollout shows the new policy", || async {
        mesh.rollout().await["policy"]["waves"][0]["promotion"] == "manual"
    })
    .await;
    std::fs::write(mesh.objects.join("two.yaml"), vs("two", "two")).unwrap();
    eventually("the canary passed and waits for promotion", || async {
        mesh.phase().await == "awaitingPromotion"
    })
    .await;
    assert!(!mesh.holds("b", "bookinfo/two") && !mesh.holds("c", "bookinfo/two"));

    // Another Prometheus needs a restart, and says so.
    let with_gates = format!("{CANARY_MANUAL}  prometheus: {{url: 'http://127.0.0.1:9'}}\n");
    mesh.reconfigure(&ABC, &[], &with_gates).await;
    let status = mesh.hub.reload_status().borrow().clone();
    assert_eq!(status.pending_restart, ["rollout.prometheus"]);
    mesh.stop().await;
}

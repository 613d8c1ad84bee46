//! The staged rollout with a real Prometheus server (Debian's package)
//! scraping a target the test controls: a metric gate that turns bad while
//! the canary bakes rolls it back and the later waves never see the
//! change; with the metric good the change walks every wave. Also prints
//! the rollout's figures: change → last wave for three waves with a 5 s
//! bake, and NACK → the canary served its previous version again.

use std::time::{Duration, Instant};

use meshhub_e2e::inproc::dialer;
use meshhub_e2e::prometheus::{Prometheus, Target};
use meshhub_e2e::standin::Mesh;
use meshhub_e2e::turn::turn;
use meshhub_mcp::ledger::SyncState;
use meshhub_testkit::eventually;
use meshhub_testkit::objects::{VS, vs};

#[tokio::test]
async fn a_metric_gate_turning_bad_during_the_bake_rolls_the_canary_back() {
    let _turn = turn(module_path!());
    let target = Target::start(&["a", "b", "c"]).await;
    let prom_dir = tempfile::tempdir().unwrap();
    let prometheus = Prometheus::start(target.addr, prom_dir.path()).await;
    eventually("Prometheus scraped the target", || async {
        prometheus.value("requests_failed{cluster=\"a\"}").await == Some(0.0)
    })
    .await;
    let policy = format!(
        "rollout:\n  prometheus:\n    url: http://{}\n    interval: 300ms\n  waves:\n  - name: canary\n    clusters: [a]\n    bake: 4s\n    metrics:\n    - name: failures\n      query: max(requests_failed{{cluster=\"$cluster\"}})\n      comparison: \"<\"\n      threshold: 1\n      duringBake: true\n  - name: rest\n    rest: true\n",
        prometheus.addr
    );
    let mesh = Mesh::start(
        &["a", "b", "c"],
        &format!("history:\n  dir: history\n{policy}"),
    )
    .await;

    std::fs::write(mesh.objects.join("two.yaml"), vs("two", "two")).unwrap();
    eventually("the canary bakes the change", || async {
        mesh.holds("a", "bookinfo/two") && mesh.phase().await == "baking"
    })
    .await;
    // The canary's failures rise while it bakes.
    target.set("a", 5.0);
    eventually("the gate fails and the canary is rolled back", || async {
        mesh.phase().await == "rolledBack"
    })
    .await;
    let r = mesh.rollout().await;
    let failure = &r["rollout"]["phase"]["failure"];
    assert_eq!(failure["cause"]["gate"]["name"], "failures", "{r}");
    assert_eq!(failure["cluster"], "a", "{r}");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("failures: 5 (wants < 1)"),
        "{r}"
    );
    // The gate's last value, as `/rollout` (and the console) shows it.
    let reading = r["gates"]
        .as_array()
        .and_then(|g| {
            g.iter()
                .find(|g| g["gate"] == "failures" && g["cluster"] == "a")
        })
        .unwrap_or_else(|| panic!("no reading of the gate for a: {r}"));
    assert_eq!(reading["value"], 5.0, "{r}");
    assert_eq!(reading["passed"], false, "{r}");
    assert_eq!(reading["rollout"], r["rollout"]["id"], "{r}");
    eventually("the canary holds its first version again", || async {
        !mesh.holds("a", "bookinfo/two")
    })
    .await;
    assert_eq!(
        (mesh.offered("b"), mesh.offered("c")),
        (1, 1),
        "b and c never saw it"
    );

    // Healthy again, a fix walks every wave through the gate.
    target.set("a", 0.0);
    eventually("Prometheus sees the canary healthy", || async {
        prometheus.value("requests_failed{cluster=\"a\"}").await == Some(0.0)
    })
    .await;
    std::fs::remove_file(mesh.objects.join("two.yaml")).unwrap();
    std::fs::write(mesh.objects.join("three.yaml"), vs("three", "three")).unwrap();
    eventually("the rollout completes", || async {
        mesh.phase().await == "completed"
    })
    .await;
    for c in ["a", "b", "c"] {
        assert!(mesh.holds(c, "bookinfo/three"), "{c}");
    }
    mesh.stop().await;
    drop(prometheus);
}

/// The rollout's figures, printed: a three-wave rollout with a 5 s bake
/// per wave (change → last wave updated, → completed), and a NACK in the
/// canary (→ the canary served and ACKing its previous version again).
#[tokio::test]
async fn rollout_figures() {
    let _turn = turn(module_path!());
    let policy = "rollout:\n  waves:\n  - name: one\n    clusters: [a]\n    bake: 5s\n  - name: two\n    clusters: [b]\n    bake: 5s\n  - name: three\n    clusters: [c]\n    bake: 5s\n";
    let mesh = Mesh::start(
        &["a", "b", "c"],
        &format!("history:\n  dir: history\n{policy}"),
    )
    .await;

    let start = Instant::now();
    std::fs::write(mesh.objects.join("two.yaml"), vs("two", "two")).unwrap();
    let mut first = None;
    let deadline = start + Duration::from_secs(40);
    while !mesh.holds("c", "bookinfo/two") {
        if first.is_none() && mesh.holds("a", "bookinfo/two") {
            first = Some(start.elapsed());
        }
        assert!(Instant::now() < deadline, "the last wave was never updated");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let last_wave = start.elapsed();
    while mesh.phase().await != "completed" {
        assert!(Instant::now() < deadline, "the rollout never completed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let completed = start.elapsed();
    // Two bakes lie between the change and the last wave.
    assert!(last_wave >= Duration::from_secs(10), "{last_wave:?}");

    // The NACK and the rollback's ACK, timed by the ledger itself.
    let a_vs = || dialer(&mesh.hub, "a").unwrap().collections[VS].clone();
    let (before, nacks_before) = (a_vs().acked.unwrap().version, a_vs().nacks);
    let t0 = std::time::SystemTime::now();
    std::fs::write(mesh.objects.join("bad.yaml"), vs("bad", "bad")).unwrap();
    eventually(
        "the canary NACKs and is served its previous version again",
        || async {
            let c = a_vs();
            c.nacks > nacks_before
                && c.state == SyncState::Synced
                && c.acked.as_ref().is_some_and(|a| a.version == before)
        },
    )
    .await;
    let c = a_vs();
    let since = |at: std::time::SystemTime| at.duration_since(t0).unwrap_or_default();
    let nacked = since(c.nacked.unwrap().at.0);
    let rolled_back = since(c.acked.unwrap().at.0);
    println!(
        "rollout figures: three waves, 5 s bake each: change -> canary updated {:.0} ms, -> last wave updated {:.2} s, -> completed {:.2} s; \
         NACK: change -> NACK {:.0} ms, -> canary served and ACKing its previous version {:.0} ms ({:.1} ms after the NACK)",
        first.unwrap_or_default().as_secs_f64() * 1e3,
        last_wave.as_secs_f64(),
        completed.as_secs_f64(),
        nacked.as_secs_f64() * 1e3,
        rolled_back.as_secs_f64() * 1e3,
        rolled_back.saturating_sub(nacked).as_secs_f64() * 1e3,
    );
    mesh.stop().await;
}

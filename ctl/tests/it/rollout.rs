//! `meshhubctl rollout` against a hub with a staged rollout (canary `a`,
//! then `b`) dialing two stand-in agents: the table shows a NACKed change
//! rolled back in the canary and held for `b`; operators' actions the
//! rollout's state refuses are exit 1 with the hub's reason.

use std::sync::Arc;

use meshhub_e2e::inproc::{hub_of_file, tree, write_hub_config};
use meshhub_e2e::yaml::cluster;
use meshhub_testkit::eventually;
use meshhub_testkit::objects::vs;

use crate::support::{Picky, StandIn, meshhubctl};

#[tokio::test]
async fn rollout_status_shows_a_rollback_and_refused_actions_say_why() {
    let mut sinks = Vec::new();
    let mut clusters = String::new();
    for name in ["a", "b"] {
        let picky = Arc::new(Picky::default());
        let sink = StandIn::start_for(name, picky.clone()).await;
        clusters.push_str(&cluster(name, "", format!("http://{}", sink.addr), ""));
        sinks.push((picky, sink));
    }
    let (dir, config) = tree();
    let objects = dir.path().join("objects");
    std::fs::write(objects.join("one.yaml"), vs("one", "one")).unwrap();
    write_hub_config(
        &config,
        &clusters,
        "history:\n  dir: history\nrollout:\n  waves:\n  - name: canary\n    clusters: [a]\n    bake: 1s\n  - name: rest\n    rest: true\n",
    );
    let hub = hub_of_file(&config).await;
    let admin = format!("http://{}", hub.admin_addr());
    let status = || async {
        let out = meshhubctl(&["rollout", "status", "--admin", &admin]).await;
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    eventually("both clusters hold the first version", || async {
        sinks.iter().all(|(p, _)| p.names() == ["bookinfo/one"])
    })
    .await;
    assert_eq!(
        status().await,
        "no rollout yet: nothing changed since the hub started\n"
    );

    std::fs::write(objects.join("bad.yaml"), vs("bad", "bad")).unwrap();
    eventually("the rollback shows", || async {
        status().await.contains("PHASE rolled_back")
    })
    .await;
    let table = status().await;
    assert!(
        table.contains("FAILED in wave canary, cluster a:"),
        "{table}"
    );
    let row = |c: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(c))
            .unwrap_or_else(|| panic!("no row for {c} in\n{table}"))
            .to_owned()
    };
    assert!(row("a").contains("ROLLED-BACK"), "{table}");
    assert!(
        table
            .lines()
            .nth(1)
            .unwrap()
            .contains("rejected by the test sink"),
        "{table}"
    );
    assert!(
        row("b").starts_with("rest") && row("b").contains("HELD"),
        "{table}"
    );

    // Promotion needs a rollout in progress: exit 1 with the hub's reason.
    let out = meshhubctl(&["rollout", "promote", "--admin", &admin, "--as", "ci"]).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "the rollout is rolled_back; promote needs it baking, gating or awaiting promotion"
        ),
        "{stderr}"
    );
    // An unknown cluster is named.
    let out = meshhubctl(&["rollout", "abort", "--cluster", "zz", "--admin", &admin]).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cluster \"zz\" is not part of this rollout"),
        "{out:?}"
    );
    // JSON for scripts.
    let out = meshhubctl(&["rollout", "status", "--admin", &admin, "-o", "json"]).await;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["rollout"]["phase"]["failure"]["cause"], "nack");
    assert_eq!(json["policy"]["waves"][0]["name"], "canary");

    hub.shutdown().await;
    for (_, sink) in sinks {
        sink.stop().await;
    }
}

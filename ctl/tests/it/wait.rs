//! `meshhubctl wait` as a process against a real hub dialing a real
//! `ResourceSink` on loopback: it returns 0 only once the cluster ACKed
//! what the hub served when it started, 1 on a NACK or the timeout, 2 on
//! trouble.

use std::sync::Arc;

use meshhub_e2e::inproc::{dialer, hub_of_file, tree, write_hub_config};
use meshhub_e2e::yaml::cluster;
use meshhub_testkit::objects::{VS, vs};
use meshhub_testkit::{eventually, within};

use crate::support::{Picky, StandIn, meshhubctl};

/// The version of `VS` the hub serves east.
fn served(hub: &meshhub::app::Hub) -> String {
    hub.cache()
        .snapshot("east")
        .map(|s| s.collection(VS).version().to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn wait_returns_once_the_cluster_acked_what_the_hub_served_and_fails_on_a_nack() {
    let picky = Arc::new(Picky::default());
    let sink = StandIn::start(picky.clone()).await;
    let (dir, config) = tree();
    let objects = dir.path().join("objects");
    std::fs::write(objects.join("a.yaml"), vs("a", "a")).unwrap();
    write_hub_config(
        &config,
        &cluster("east", "", format!("http://{}", sink.addr), ""),
        "",
    );
    let hub = hub_of_file(&config).await;
    let admin = format!("http://{}", hub.admin_addr());
    let wait = |extra: &'static [&'static str]| {
        let admin = admin.clone();
        async move {
            let mut args = vec![
                "wait",
                "--admin",
                admin.as_str(),
                "--interval",
                "50ms",
                "--timeout",
                "20s",
            ];
            args.extend_from_slice(extra);
            meshhubctl(&args).await
        }
    };

    // A change the hub already serves: wait returns 0 once it is ACKed,
    // and at that moment the sink holds it.
    std::fs::write(objects.join("b.yaml"), vs("b", "b")).unwrap();
    eventually("the hub serves b", || async {
        hub.cache()
            .snapshot("east")
            .is_some_and(|s| s.collection(VS).len() == 2)
    })
    .await;
    let version = served(&hub);
    let out = wait(&["--cluster", "east"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout} {out:?}");
    assert!(stdout.starts_with("ACKed by 1/1 clusters"), "{stdout}");
    assert_eq!(
        picky.names(),
        ["bookinfo/a", "bookinfo/b"],
        "the sink holds the change"
    );
    let acked = dialer(&hub, "east").unwrap().collections[VS]
        .acked
        .clone()
        .unwrap()
        .version;
    assert_eq!(acked, version);

    // One object, JSON report.
    let out = wait(&["--object", "VirtualService", "bookinfo/b", "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["outcome"], "acked");
    assert_eq!(report["clusters"]["east"]["state"], "acked");

    // A change the sink refuses: exit 1 naming the NACK.
    std::fs::write(objects.join("bad.yaml"), vs("bad", "c")).unwrap();
    eventually("the hub serves bad", || async {
        hub.cache()
            .snapshot("east")
            .is_some_and(|s| s.collection(VS).len() == 3)
    })
    .await;
    let out = wait(&[]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout} {out:?}");
    assert!(stdout.starts_with("NACKed after"), "{stdout}");
    assert!(stdout.contains("rejected by the test sink"), "{stdout}");

    // Trouble: a cluster the hub does not dial, an object it does not
    // know, no hub at all.
    let out = wait(&["--cluster", "north"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        stderr.contains("\"north\" is not a remote cluster of this hub (remote clusters: east)"),
        "{stderr}"
    );
    let out = wait(&["--object", "VirtualService", "bookinfo/nope"]).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let port = meshhub_testkit::ports::free_port();
    let out = within(
        "wait against a closed port",
        meshhubctl(&[
            "wait",
            "--timeout",
            "20s",
            "--admin",
            &format!("http://127.0.0.1:{port}"),
        ]),
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    hub.shutdown().await;
    sink.stop().await;
    drop(dir);
}

#[tokio::test]
async fn wait_times_out_with_exit_1_naming_the_clusters_not_acked() {
    // An agent that is not there: the hub's dialer never connects.
    let port = meshhub_testkit::ports::free_port();
    let (dir, config) = tree();
    std::fs::write(dir.path().join("objects/a.yaml"), vs("a", "a")).unwrap();
    write_hub_config(
        &config,
        &cluster("east", "", format!("http://127.0.0.1:{port}"), ""),
        "",
    );
    let hub = hub_of_file(&config).await;
    let admin = format!("http://{}", hub.admin_addr());
    let out = meshhubctl(&[
        "wait",
        "--admin",
        &admin,
        "--timeout",
        "1s",
        "--interval",
        "100ms",
    ])
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout} {out:?}");
    assert!(stdout.starts_with("timed out after"), "{stdout}");
    assert!(stdout.contains("0/1 clusters ACKed"), "{stdout}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("east"))
        .unwrap_or_default();
    assert!(
        row.contains("WAITING") && row.contains("disconnected"),
        "{stdout}"
    );
    hub.shutdown().await;
}

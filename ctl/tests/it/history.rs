//! Version history, rollback (pin), unpin and the audit log, in-process
//! over real gRPC on loopback: the hub dials a `ResourceSink` whose updater
//! refuses any resource named `bad` (as an agent refuses what it can't
//! validate), and `meshhubctl` drives history, diff, pin and unpin through
//! the admin port.

use std::path::Path;
use std::sync::Arc;

use meshhub::app::Hub;
use meshhub_e2e::inproc::{dialer, hub_of_file, tree, write_hub_config};
use meshhub_e2e::yaml::cluster;
use meshhub_mcp::ledger::SyncState;
use meshhub_mcp::sink::Updater as _;
use meshhub_testkit::eventually;
use meshhub_testkit::objects::{VS, vs};
use serde_json::Value;

use crate::support::{Picky, StandIn, meshhubctl};

/// The hub's configuration: cluster east's agent at `sink`, a history of
/// ten versions and an audit file.
fn write_config(path: &Path, sink: std::net::SocketAddr) {
    write_hub_config(
        path,
        &cluster("east", "", format!("http://{sink}"), ""),
        "history:\n  dir: ../data\n  keep: 10\naudit:\n  file: ../audit/audit.log\n",
    );
}

/// The state of the virtual services with east, and the version ACKed.
fn east_vs(hub: &Hub) -> Option<(SyncState, Option<String>)> {
    let p = dialer(hub, "east")?;
    let c = p.collections.get(VS)?;
    Some((c.state, c.acked.as_ref().map(|a| a.version.clone())))
}

/// `meshhubctl args`: whether it succeeded, its stdout and stderr.
async fn ctl(args: &[&str]) -> (bool, String, String) {
    let out = meshhubctl(args).await;
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `meshhubctl history -o json` of east: the document, or why not.
async fn history(admin: &str) -> Result<Value, String> {
    let (ok, out, err) = ctl(&[
        "history",
        "--admin",
        admin,
        "--cluster",
        "east",
        "-o",
        "json",
    ])
    .await;
    if ok {
        Ok(serde_json::from_str(&out).unwrap())
    } else {
        Err(err)
    }
}

async fn history_json(admin: &str) -> Value {
    history(admin).await.unwrap_or_else(|err| panic!("{err}"))
}

async fn versions(admin: &str) -> usize {
    // 404 until the first version is recorded.
    history(admin)
        .await
        .map_or(0, |h| h["versions"].as_array().map_or(0, Vec::len))
}

fn audit(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("audit/audit.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_nacked_change_is_rolled_back_by_a_pin_unpinned_after_the_fix_all_recorded() {
    let picky = Arc::new(Picky::default());
    let sink = StandIn::start(picky.clone()).await;
    let sink_addr = sink.addr;

    let (dir, config) = tree();
    let objects = dir.path().join("objects");
    std::fs::write(objects.join("a.yaml"), vs("a", "a-v1")).unwrap();
    write_config(&config, sink_addr);
    let hub = hub_of_file(&config).await;
    let admin = format!("http://{}", hub.admin_addr());
    let synced = |hub: &Hub| east_vs(hub).is_some_and(|(s, _)| s == SyncState::Synced);
    eventually("v1 is ACKed", || async { synced(&hub) }).await;

    // 1. A change, ACKed.
    std::fs::write(objects.join("a.yaml"), vs("a", "a-v2")).unwrap();
    eventually("v2 is recorded", || async { versions(&admin).await == 2 }).await;
    eventually("v2 is ACKed", || async {
        synced(&hub) && picky.held(VS).contains_key("bookinfo/a")
    })
    .await;
    let a_v2 = picky.held(VS)["bookinfo/a"].clone();

    // 2. A bad change: NACKed by the cluster. An unreadable file besides
    // it is rejected by validation.
    std::fs::write(objects.join("bad.yaml"), vs("bad", "nowhere")).unwrap();
    std::fs::write(objects.join("broken.yaml"), "kind: [\n").unwrap();
    eventually("the NACK", || async {
        east_vs(&hub).is_some_and(|(s, _)| s == SyncState::Nacked)
    })
    .await;
    eventually("v3 is recorded", || async { versions(&admin).await == 3 }).await;

    // The history lists the three versions with their origins.
    let (ok, table, err) = ctl(&["history", "--admin", &admin, "--cluster", "east"]).await;
    assert!(ok, "{err}");
    eprintln!("meshhubctl history:\n{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("#  VERSION"), "{table}");
    assert!(lines[2].contains("files:a.yaml"), "{table}");
    assert!(lines[3].contains("files:bad.yaml"), "{table}");
    assert!(
        lines[3].contains("files:broken.yaml (1 unreadable)"),
        "{table}"
    );
    assert!(lines[3].contains("virtualservices=2"), "{table}");
    let h = history_json(&admin).await;
    let id = |i: usize| h["versions"][i]["id"].as_str().unwrap().to_owned();
    let (v1, v2, v3) = (id(0), id(1), id(2));

    // The diff between v1 and v2: a changed, with the YAML lines.
    let (ok, out, err) = ctl(&["diff", "--admin", &admin, "--cluster", "east", &v1, &v2]).await;
    assert!(ok, "{err}");
    eprintln!("meshhubctl diff:\n{out}");
    assert!(
        out.contains(&format!("~ changed  {VS} bookinfo/a")),
        "{out}"
    );
    assert!(
        out.contains("-  - a-v1") || out.contains("-  - a-v1"),
        "{out}"
    );
    assert!(out.contains("+  - a-v2"), "{out}");
    let (ok, out, _) = ctl(&["diff", "--admin", &admin, "--cluster", "east", "#2", "#3"]).await;
    assert!(ok);
    assert!(
        out.contains(&format!("+ added    {VS} bookinfo/bad")),
        "{out}"
    );
    // Without versions, diff compares the hub with the cluster's agent,
    // whose re-serve address it needs.
    let (ok, _, err) = ctl(&["diff", "--admin", &admin, "--cluster", "east"]).await;
    assert!(!ok);
    assert!(err.contains("pass it with --agent"), "{err}");

    // 3. Roll back: pin east to v2. The cluster receives v2's content as a
    // new version and ACKs it.
    let (ok, out, err) = ctl(&[
        "pin",
        "--admin",
        &admin,
        "--cluster",
        "east",
        "--to",
        &v2[..8],
        "--as",
        "alice",
    ])
    .await;
    assert!(ok, "{err}");
    assert!(out.contains(&format!("pinned to {v2} (#2)")), "{out}");
    eventually("the pinned version is ACKed", || async {
        east_vs(&hub).is_some_and(|(s, acked)| {
            s == SyncState::Synced && acked.is_some_and(|v| v.contains(".pin-"))
        })
    })
    .await;
    assert_eq!(picky.names(), ["bookinfo/a"], "the old content");
    assert_eq!(picky.held(VS)["bookinfo/a"], a_v2);
    let (ok, status, _) = ctl(&["status", "--admin", &admin]).await;
    assert!(ok);
    eprintln!("meshhubctl status while pinned:\n{status}");
    assert!(
        status.contains(&format!("PINNED: cluster east is served version {v2} (#2)"))
            && status.contains("by alice; 1 version(s) behind"),
        "{status}"
    );

    // 4. The fix, while pinned: validated and recorded, not served.
    std::fs::rename(objects.join("bad.yaml"), objects.join("good.yaml")).unwrap();
    std::fs::write(objects.join("good.yaml"), vs("good", "good")).unwrap();
    eventually("the fix is recorded", || async {
        let h = history_json(&admin).await;
        h["versions"].as_array().unwrap().last().unwrap()["counts"][VS] == 2
            && h["pinned"]["behind"].as_u64() >= Some(2)
    })
    .await;
    assert_eq!(picky.names(), ["bookinfo/a"], "still pinned");

    // 5. Unpin: the latest (the fix) is delivered and ACKed.
    let (ok, out, err) = ctl(&[
        "unpin",
        "--admin",
        &admin,
        "--cluster",
        "east",
        "--as",
        "bob",
    ])
    .await;
    assert!(ok, "{err}");
    assert!(out.contains("unpinned"), "{out}");
    eventually("the latest is ACKed", || async {
        synced(&hub) && picky.names() == ["bookinfo/a", "bookinfo/good"]
    })
    .await;
    let (ok, status, _) = ctl(&["status", "--admin", &admin]).await;
    assert!(ok);
    assert!(!status.contains("PINNED"), "{status}");
    let (ok, _, err) = ctl(&["unpin", "--admin", &admin, "--cluster", "east"]).await;
    assert!(!ok);
    assert!(err.contains("east is not pinned"), "{err}");

    // The audit log tells the whole story.
    eventually("the audit log has the unpin and the last ACK", || async {
        let lines = audit(dir.path());
        let unpin = lines.iter().position(|l| l["event"] == "unpin");
        unpin.is_some_and(|i| lines[i..].iter().any(|l| l["outcome"] == "ACK"))
    })
    .await;
    let lines = audit(dir.path());
    assert!(lines.iter().all(|l| l["schemaVersion"] == 1));
    let find = |pred: &dyn Fn(&Value) -> bool| lines.iter().find(|l| pred(l)).cloned();
    let change = find(&|l| l["event"] == "source_change" && l["unit"] == "bad.yaml").unwrap();
    assert_eq!(change["objects"][0]["name"], "bookinfo/bad");
    let rejected = find(&|l| l["event"] == "rejected").unwrap();
    assert!(
        rejected["origin"].as_str().unwrap().contains("broken.yaml"),
        "{rejected}"
    );
    assert!(
        find(&|l| l["event"] == "published"
            && l["cluster"] == "east"
            && l["version"] == v3.as_str())
        .is_some()
    );
    let nack = find(&|l| l["outcome"] == "NACK").unwrap();
    assert_eq!(nack["peer"], "east");
    assert!(
        nack["message"].as_str().unwrap().contains("bookinfo/bad"),
        "{nack}"
    );
    let pin = find(&|l| l["event"] == "pin").unwrap();
    assert_eq!(
        (
            pin["cluster"].as_str(),
            pin["version"].as_str(),
            pin["by"].as_str()
        ),
        (Some("east"), Some(v2.as_str()), Some("alice"))
    );
    assert!(find(&|l| l["event"] == "published" && l["servedPinned"] == v2.as_str()).is_some());
    assert_eq!(find(&|l| l["event"] == "unpin").unwrap()["by"], "bob");
    let before_restart = history_json(&admin).await["versions"].clone();
    assert_eq!(before_restart.as_array().unwrap().len(), 4);

    // 6. The history survives a restart (and the same content is no new
    // version).
    assert!(hub.shutdown().await);
    let hub = hub_of_file(&config).await;
    let admin = format!("http://{}", hub.admin_addr());
    let after = history_json(&admin).await;
    assert_eq!(after["versions"], before_restart);
    assert!(after["pinned"].is_null());

    assert!(hub.shutdown().await);
    sink.stop().await;
}

#[tokio::test]
async fn a_pin_survives_a_restart_and_history_needs_configuring() {
    let (dir, config) = tree();
    let objects = dir.path().join("objects");
    std::fs::write(objects.join("a.yaml"), vs("a", "one")).unwrap();
    // No agent: the group is served to consumers only.
    let sink: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    write_config(&config, sink);
    let hub = hub_of_file(&config).await;
    let admin = format!("http://{}", hub.admin_addr());
    eventually("v1", || async { versions(&admin).await == 1 }).await;
    let first = hub.cache().snapshot("east").unwrap();
    std::fs::write(objects.join("a.yaml"), vs("a", "two")).unwrap();
    eventually("v2", || async { versions(&admin).await == 2 }).await;
    let (ok, _, err) = ctl(&["pin", "--admin", &admin, "--cluster", "east", "--to", "#1"]).await;
    assert!(ok, "{err}");
    eventually("the pin is served", || async {
        hub.cache().snapshot("east").is_some_and(|s| {
            s.collection(VS).keys() == first.collection(VS).keys()
                && s.collection(VS).version() != first.collection(VS).version()
        })
    })
    .await;
    let served = hub
        .cache()
        .snapshot("east")
        .unwrap()
        .collection(VS)
        .version()
        .to_owned();
    let (ok, _, err) = ctl(&[
        "pin",
        "--admin",
        &admin,
        "--cluster",
        "east",
        "--to",
        "ffffffff",
    ])
    .await;
    assert!(!ok);
    assert!(err.contains("no version ffffffff"), "{err}");
    assert!(hub.shutdown().await);

    // Restarted: still pinned, same served version, caller recorded.
    let hub = hub_of_file(&config).await;
    assert_eq!(
        hub.cache()
            .snapshot("east")
            .unwrap()
            .collection(VS)
            .version(),
        served
    );
    let admin = format!("http://{}", hub.admin_addr());
    let h = history_json(&admin).await;
    assert_eq!(h["pinned"]["seq"], 1);
    assert_eq!(h["pinned"]["by"], "meshhubctl", "no --as, no $USER");
    assert!(hub.shutdown().await);

    // A hub without `history:` has no history routes.
    std::fs::write(
        &config,
        "sources:\n  - name: files\n    file: {path: ../objects}\nclusters:\n  - name: east\n",
    )
    .unwrap();
    let hub = hub_of_file(&config).await;
    let admin = format!("http://{}", hub.admin_addr());
    let (ok, _, err) = ctl(&["history", "--admin", &admin, "--cluster", "east"]).await;
    assert!(!ok);
    assert!(err.contains("is history configured"), "{err}");
    assert!(hub.shutdown().await);
    drop(dir);
}

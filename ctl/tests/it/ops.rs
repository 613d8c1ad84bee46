//! meshhubctl's operator commands — `get`, `diff`, `describe`, `status -o
//! json|yaml` and `--watch`, `completion`, and the errors that say what to
//! do — run as a process against a real hub (and a real sink agent) serving
//! on loopback.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use meshhub::app::Hub;
use meshhub_e2e::inproc::{agent_config, dialer, hub_of_file, push, start_agent, write_hub_config};
use meshhub_e2e::yaml::cluster;
use meshhub_mcp::ledger::SyncState;
use meshhub_sink_agent::app::Agent;
use meshhub_testkit::objects::VS;
use meshhub_testkit::{DEADLINE, eventually, http};
use tokio::io::{AsyncBufReadExt as _, BufReader};

use crate::support::meshhubctl;

fn vs(name: &str, ns: &str, weights: (u32, u32)) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  hosts: [{name}]\n  http:\n  - route:\n    - destination: {{host: {name}, subset: v1}}\n      weight: {}\n    - destination: {{host: {name}, subset: v2}}\n      weight: {}\n",
        weights.0, weights.1
    )
}

/// A virtual service with a misspelt field: rejected (`unknownFields: reject`).
const BROKEN: &str = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: broken\n  namespace: bookinfo\nspec:\n  hosts: [broken]\n  http:\n  - route:\n    - destination: {host: broken}\n      weigth: 100\n";

/// The hub's YAML: cluster east (namespace bookinfo), with an agent at
/// `agent` if given.
fn write_config(path: &Path, agent: Option<std::net::SocketAddr>) {
    let east = match agent {
        Some(a) => cluster(
            "east",
            "    namespaces: [bookinfo]\n",
            format!("http://{a}"),
            "",
        ),
        None => "  - name: east\n    namespaces: [bookinfo]\n".to_owned(),
    };
    write_hub_config(path, &east, "unknownFields: reject\n");
}

/// A temp tree: `objects/` (the file source, holding bookinfo/reviews and
/// other/w) and `etc/meshhub.yaml`.
fn tree() -> (tempfile::TempDir, PathBuf) {
    let (dir, config) = meshhub_e2e::inproc::tree();
    let objects = dir.path().join("objects");
    std::fs::write(
        objects.join("reviews.yaml"),
        vs("reviews", "bookinfo", (80, 20)),
    )
    .unwrap();
    std::fs::write(objects.join("w.yaml"), vs("w", "other", (50, 50))).unwrap();
    (dir, config)
}

async fn east_agent(data: &Path) -> Agent {
    start_agent(agent_config("east", data, push())).await
}

/// Whether the hub's dialer to east is connected and every collection is
/// ACKed.
fn east_synced(hub: &Hub) -> bool {
    dialer(hub, "east").is_some_and(|p| {
        !p.collections.is_empty() && p.collections.values().all(|c| c.state == SyncState::Synced)
    })
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn ctl(args: &[&str]) -> Run {
    let out = meshhubctl(args).await;
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `ctl`, which must succeed.
async fn ctl_ok(args: &[&str]) -> String {
    let r = ctl(args).await;
    assert_eq!(r.code, Some(0), "{args:?}: stderr: {}", r.stderr);
    r.stdout
}

/// An address nobody listens on.
fn closed_port() -> String {
    let port = meshhub_testkit::ports::free_port();
    format!("http://127.0.0.1:{port}")
}

#[tokio::test]
async fn get_prints_a_clusters_objects_as_table_yaml_and_json() {
    let (_dir, config) = tree();
    write_config(&config, None);
    let hub = hub_of_file(&config).await;
    let server = format!("http://{}", hub.grpc_addr());
    let admin = format!("http://{}", hub.admin_addr());
    let at = ["--server", server.as_str(), "--admin", admin.as_str()];

    // Table: east receives bookinfo only; the default group everything.
    let out = ctl_ok(&[&["get", "--cluster", "east"], &at[..]].concat()).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["NAMESPACE", "NAME", "KIND", "VERSION"], "{out}");
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(row[..3], ["bookinfo", "reviews", "VirtualService"], "{out}");
    let version = hub.cache().snapshot("east").unwrap().collection(VS).keys()[0]
        .version
        .to_string();
    assert!(version.starts_with(row[3]), "{version} vs {out}");
    let out = ctl_ok(&[&["get", "VirtualService"], &at[..]].concat()).await;
    assert!(out.contains("other      w "), "default group: {out}");
    assert!(out.contains("bookinfo   reviews "), "default group: {out}");

    // YAML of one object, by its short name and NAMESPACE/NAME.
    let out = ctl_ok(
        &[
            &[
                "get",
                "vs",
                "bookinfo/reviews",
                "--cluster",
                "east",
                "-o",
                "yaml",
            ],
            &at[..],
        ]
        .concat(),
    )
    .await;
    assert!(out.starts_with("---\n"), "{out}");
    assert_eq!(out.matches("---\n").count(), 1, "{out}");
    assert!(out.contains("kind: VirtualService"), "{out}");
    assert!(out.contains("name: reviews"), "{out}");
    assert!(out.contains("weight: 20"), "{out}");

    // JSON: a List.
    let out = ctl_ok(
        &[
            &["get", "virtualservices", "-n", "bookinfo", "-o", "json"],
            &at[..],
        ]
        .concat(),
    )
    .await;
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{out}");
    assert_eq!(items[0]["metadata"]["name"], "reviews");
    assert_eq!(items[0]["spec"]["http"][0]["route"][1]["weight"], 20);

    // Errors that say what to do.
    let r = ctl(&[&["get", "--cluster", "nowhere"], &at[..]].concat()).await;
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr
            .contains("unknown cluster \"nowhere\"; the hub knows: default, east"),
        "{}",
        r.stderr
    );
    let r = ctl(&[&["get", "VirtualSvc"], &at[..]].concat()).await;
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains("unknown kind \"VirtualSvc\""),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("DestinationRule, "), "{}", r.stderr);
    let r = ctl(&[&["get", "vs", "nope", "--cluster", "east"], &at[..]].concat()).await;
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains("no vs named \"nope\" in group east"),
        "{}",
        r.stderr
    );
    hub.shutdown().await;
}

#[tokio::test]
async fn diff_exits_0_when_the_agent_holds_what_the_hub_serves_and_1_naming_what_differs() {
    let (dir, config) = tree();
    let agent = east_agent(&dir.path().join("east")).await;
    write_config(&config, agent.sink_addr());
    let hub = hub_of_file(&config).await;
    let server = format!("http://{}", hub.grpc_addr());
    let admin = format!("http://{}", hub.admin_addr());
    let agent_addr = format!("http://{}", agent.grpc_addr());
    let diff = [
        "diff",
        "--cluster",
        "east",
        "--server",
        &server,
        "--admin",
        &admin,
        "--agent",
        &agent_addr,
    ];
    eventually("east's agent ACKs everything", || async {
        east_synced(&hub)
    })
    .await;

    let r = ctl(&diff).await;
    assert_eq!(r.code, Some(0), "stdout: {} stderr: {}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("holds what the hub serves (1 objects)"),
        "{}",
        r.stdout
    );

    // The hub stops pushing to east (its agent leaves the configuration),
    // then reviews changes and ratings appears: the agent keeps the old.
    write_config(&config, None);
    eventually("the dialer to east stops", || async {
        dialer(&hub, "east").is_none()
    })
    .await;
    let objects = dir.path().join("objects");
    std::fs::write(
        objects.join("reviews.yaml"),
        vs("reviews", "bookinfo", (70, 30)),
    )
    .unwrap();
    std::fs::write(
        objects.join("ratings.yaml"),
        vs("ratings", "bookinfo", (100, 0)),
    )
    .unwrap();
    eventually("east's group has ratings", || async {
        hub.cache()
            .snapshot("east")
            .is_some_and(|s| s.collection(VS).len() == 2)
    })
    .await;

    let r = ctl(&diff).await;
    assert_eq!(r.code, Some(1), "stdout: {} stderr: {}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains(&format!("added    {VS} bookinfo/ratings")),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains(&format!("changed  {VS} bookinfo/reviews")),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("-      weight: 80\n"), "{}", r.stdout);
    assert!(r.stdout.contains("+      weight: 70\n"), "{}", r.stdout);
    assert!(!r.stdout.contains("removed  "), "{}", r.stdout);

    let r = ctl(&[&diff[..], &["-o", "json"]].concat()).await;
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let report: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(report["equal"], false);
    let c = &report["collections"][0];
    assert_eq!(c["collection"], VS);
    assert_eq!(c["added"], serde_json::json!(["bookinfo/ratings"]));
    assert_eq!(c["changed"][0]["name"], "bookinfo/reviews");
    assert!(
        c["changed"][0]["diff"]
            .as_str()
            .unwrap()
            .contains("+      weight: 30")
    );

    // Trouble is 2, with what to do.
    let r = ctl(&[
        "diff",
        "--cluster",
        "east",
        "--server",
        &server,
        "--admin",
        &admin,
    ])
    .await;
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("pass it with --agent"), "{}", r.stderr);
    // With FROM TO, diff reads two historical versions: this hub keeps no
    // history, and says so.
    let r = ctl(&[&diff[..], &["v1", "v2"]].concat()).await;
    assert_eq!(r.code, Some(2));
    assert!(
        r.stderr.contains("is history configured on this hub?"),
        "{}",
        r.stderr
    );
    let closed = closed_port();
    let r = ctl(&[
        "diff",
        "--cluster",
        "east",
        "--server",
        &server,
        "--admin",
        &admin,
        "--agent",
        &closed,
    ])
    .await;
    assert_eq!(r.code, Some(2));
    assert!(
        r.stderr.contains(&format!("cannot connect to {closed}")) && r.stderr.contains("--agent"),
        "{}",
        r.stderr
    );
    hub.shutdown().await;
    agent.shutdown().await;
}

#[tokio::test]
async fn describe_tells_sources_validation_clusters_and_delivery() {
    let (dir, config) = tree();
    std::fs::write(dir.path().join("objects/broken.yaml"), BROKEN).unwrap();
    // A second definition of reviews: it loses to reviews.yaml (smaller).
    std::fs::write(
        dir.path().join("objects/zz-copy.yaml"),
        vs("reviews", "bookinfo", (80, 20)),
    )
    .unwrap();
    let agent = east_agent(&dir.path().join("east")).await;
    write_config(&config, agent.sink_addr());
    let hub = hub_of_file(&config).await;
    let admin = format!("http://{}", hub.admin_addr());
    eventually("east's agent ACKs everything", || async {
        east_synced(&hub)
    })
    .await;

    // Accepted: its file, its groups, ACKed by east's agent.
    let out = ctl_ok(&[
        "describe",
        "vs",
        "bookinfo/reviews",
        "--admin",
        &admin,
        "-o",
        "json",
    ])
    .await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["validation"]["result"], "accepted", "{v}");
    assert_eq!(v["definitions"][0]["state"], "served", "{v}");
    assert_eq!(v["definitions"][0]["origin"]["source"], "files", "{v}");
    assert_eq!(v["definitions"][0]["origin"]["unit"], "reviews.yaml", "{v}");
    assert_eq!(v["definitions"][1]["state"], "ignored", "{v}");
    assert_eq!(v["definitions"][1]["origin"]["unit"], "zz-copy.yaml", "{v}");
    let clusters: Vec<&str> = v["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(clusters, ["default", "east"], "{v}");
    let east = &v["clusters"][1];
    let version = hub
        .cache()
        .snapshot("east")
        .unwrap()
        .collection(VS)
        .version()
        .to_owned();
    assert_eq!(east["collection_version"], version.as_str(), "{v}");
    assert_eq!(east["in_snapshot"], true, "{v}");
    assert_eq!(east["peers"][0]["role"], "agent", "{v}");
    assert_eq!(east["peers"][0]["delivery"], "ACKED", "{v}");
    assert_eq!(east["peers"][0]["acked"], version.as_str(), "{v}");

    // The same as sections, with `-n`.
    let out = ctl_ok(&[
        "describe",
        "VirtualService",
        "reviews",
        "-n",
        "bookinfo",
        "--admin",
        &admin,
    ])
    .await;
    assert!(out.contains("Validation:  Accepted (served)"), "{out}");
    let sources: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.contains("files:"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(sources[0][..2], ["served", "files:reviews.yaml#1"], "{out}");
    assert_eq!(
        sources[1][..2],
        ["ignored", "files:zz-copy.yaml#1"],
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains("east") && l.contains("agent/mcp") && l.contains("ACKED")),
        "{out}"
    );

    // Rejected: the reason, served nowhere.
    let out = ctl_ok(&[
        "describe",
        "vs",
        "bookinfo/broken",
        "--admin",
        &admin,
        "-o",
        "yaml",
    ])
    .await;
    let v: serde_json::Value = serde_saphyr::from_str(&out).unwrap();
    assert_eq!(v["validation"]["result"], "rejected", "{out}");
    let message = v["validation"]["messages"][0].as_str().unwrap();
    assert!(
        message.contains("spec.http[0].route[0].weigth: unknown field"),
        "{out}"
    );
    assert_eq!(v["definitions"][0]["state"], "rejected", "{out}");
    assert_eq!(
        v["definitions"][0]["origin"]["unit"], "broken.yaml",
        "{out}"
    );
    assert_eq!(v["clusters"].as_array().unwrap().len(), 0, "{out}");
    let out = ctl_ok(&["describe", "vs", "bookinfo/broken", "--admin", &admin]).await;
    assert!(
        out.contains("Validation:  Rejected (served to no cluster)"),
        "{out}"
    );
    assert!(
        out.contains("none (the object is served to no cluster)"),
        "{out}"
    );

    // Unknown kind and unknown object.
    let r = ctl(&["describe", "vsvc", "bookinfo/reviews", "--admin", &admin]).await;
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains("unknown kind \"vsvc\"; known kinds: "),
        "{}",
        r.stderr
    );
    let r = ctl(&["describe", "vs", "bookinfo/nope", "--admin", &admin]).await;
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains("no VirtualService bookinfo/nope"),
        "{}",
        r.stderr
    );
    hub.shutdown().await;
    agent.shutdown().await;
}

#[tokio::test]
async fn status_prints_json_and_yaml_and_watch_redraws_on_change() {
    let (_dir, config) = tree();
    write_config(&config, None);
    let hub = hub_of_file(&config).await;
    let server = format!("http://{}", hub.grpc_addr());
    let admin = format!("http://{}", hub.admin_addr());

    let out = ctl_ok(&["status", "--admin", &admin, "-o", "json"]).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["clusters"], serde_json::json!([]), "{out}");
    assert_eq!(v["consumers"], serde_json::json!([]), "{out}");
    let out = ctl_ok(&["status", "--admin", &admin, "-o", "yaml"]).await;
    let v: serde_json::Value = serde_saphyr::from_str(&out).unwrap();
    assert!(v["consumers"].is_array(), "{out}");

    // --watch: a frame now, and a new one when a consumer came and went.
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_meshhubctl"))
        .args([
            "status",
            "--watch",
            "--all",
            "--interval",
            "50ms",
            "--admin",
            &admin,
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    let mut read_until = async |needle: &str| {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while !seen.contains(needle) {
            let line = tokio::time::timeout_at(deadline, lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("no {needle:?} in {seen}"))
                .unwrap()
                .expect("watch keeps running");
            seen.push_str(&line);
            seen.push('\n');
        }
    };
    read_until("no consumers connected").await;
    ctl_ok(&["get", "--server", &server, "--admin", &admin]).await;
    read_until("meshhubctl").await;
    assert!(seen.contains("CONSUMER"), "{seen}");
    // A frame is drawn only when the answer changed.
    let frames: Vec<&str> = seen
        .split("no remote clusters (no cluster has an agent)\n")
        .skip(1)
        .map(str::trim)
        .collect();
    assert!(frames.len() >= 2, "{seen}");
    assert!(frames.windows(2).all(|w| w[0] != w[1]), "{seen}");
    child.kill().await.unwrap();
    hub.shutdown().await;
}

#[tokio::test]
async fn completion_scripts_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let out = ctl_ok(&["completion", shell]).await;
        assert!(out.len() > 1000, "{shell}: {out}");
        for sub in ["get", "diff", "describe", "status", "watch"] {
            assert!(out.contains(sub), "{shell} lacks {sub}");
        }
    }
    let r = ctl(&["completion", "tcsh"]).await;
    assert_eq!(r.code, Some(2), "clap refuses an unknown shell");
}

#[tokio::test]
async fn an_unreachable_hub_is_named_with_the_flag_to_change() {
    let closed = closed_port();
    for cmd in [&["status"][..], &["describe", "vs", "bookinfo/reviews"]] {
        let r = ctl(&[cmd, &["--admin", &closed, "--timeout", "5s"]].concat()).await;
        assert_eq!(r.code, Some(1), "{cmd:?}");
        assert!(
            r.stderr
                .contains(&format!("cannot reach the hub's admin port at {closed}"))
                && r.stderr.contains("--admin"),
            "{cmd:?}: {}",
            r.stderr
        );
    }
    let r = ctl(&["get", "--server", &closed, "--timeout", "5s"]).await;
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains(&format!("cannot connect to {closed}")) && r.stderr.contains("--server"),
        "{}",
        r.stderr
    );
}

#[tokio::test]
async fn debug_object_answers_json_and_404_with_what_to_do() {
    let (_dir, config) = tree();
    write_config(&config, None);
    let hub = hub_of_file(&config).await;
    let admin = hub.admin_addr();

    let (status, body) = http::get(
        admin,
        "/debug/object?kind=VirtualService&namespace=bookinfo&name=reviews",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["name"], "bookinfo/reviews");
    assert_eq!(v["collection"], VS);

    let (status, body) = http::get(admin, "/debug/object?kind=nope&name=x").await;
    assert_eq!(status, 404, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("known kinds: "),
        "{v}"
    );

    let (status, body) = http::get(admin, "/debug/object?kind=vs&name=bookinfo/nope").await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body.contains("no VirtualService bookinfo/nope in any source"),
        "{body}"
    );
    hub.shutdown().await;
}

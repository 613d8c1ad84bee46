//! The real binaries as processes on loopback: one `meshhub` dialing two
//! `meshhub-sink-agent`s (clusters `east` and `west`), `meshhubctl watch`
//! consumers on the agents' re-serve ports, `meshhubctl status` on the hub.
//! Every test bounds its waits ([`eventually`]) and kills its processes
//! when it ends (the guards' `Drop`), pass or fail.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use meshhub_e2e::*;
use meshhub_testkit::eventually_blocking;
use meshhub_testkit::fixtures::write_atomic;
use meshhub_testkit::http::get_blocking;
use meshhub_testkit::objects::{VS, virtual_service, vs};
use serde_json::Value;

/// A hub, two agents, and the files behind them.
struct Mesh {
    dir: tempfile::TempDir,
    logs: PathBuf,
    objects: PathBuf,
    config: PathBuf,
    east: AgentProc,
    west: AgentProc,
    hub: Option<HubProc>,
}

impl Mesh {
    /// Starts both agents, then the hub dialing them, with `files` as the
    /// hub's objects; waits until both agents ACKed every virtual service.
    fn start(files: &[(&str, String)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        let objects = dir.path().join("objects");
        let etc = dir.path().join("etc");
        for d in [&logs, &objects, &etc] {
            std::fs::create_dir_all(d).unwrap();
        }
        for (name, text) in files {
            std::fs::write(objects.join(name), text).unwrap();
        }
        let east = AgentProc::start("east", dir.path(), &logs, None);
        let west = AgentProc::start("west", dir.path(), &logs, None);
        let config = etc.join("meshhub.yaml");
        std::fs::write(&config, hub_config(&objects, east.sink, west.sink)).unwrap();
        let mut mesh = Self {
            dir,
            logs,
            objects,
            config,
            east,
            west,
            hub: None,
        };
        mesh.start_hub();
        mesh.wait_synced(VS);
        mesh
    }

    fn start_hub(&mut self) {
        self.hub = Some(HubProc::start("hub", &self.config, &self.logs));
    }

    fn hub(&self) -> &HubProc {
        self.hub.as_ref().expect("hub running")
    }

    /// Waits until both agents ACKed the hub's current version of
    /// `collection`; returns that status document.
    fn wait_synced(&self, collection: &str) -> Value {
        eventually_blocking(&format!("both agents ACK {collection}"), || {
            let s = self.hub().status();
            (synced(&s, "east", collection) && synced(&s, "west", collection)).then_some(s)
        })
    }

    /// Starts `meshhubctl watch` on `agent`'s re-serve port for the
    /// virtual services, printing JSON.
    fn consumer(&self, agent: &AgentProc) -> Proc {
        let args = [
            "watch",
            "--server",
            &format!("http://{}", agent.grpc),
            "--cluster",
            &agent.cluster,
            "-c",
            VS,
            "-o",
            "json",
        ]
        .map(str::to_owned);
        Proc::spawn(
            &format!("watch-{}", agent.cluster),
            "meshhubctl",
            &args,
            &self.logs,
        )
    }

    fn write(&self, name: &str, text: &str) {
        write_atomic(&self.objects.join(name), text);
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Leave the evidence where it can be read.
            keep_logs(self.dir.path(), "e2e");
        }
    }
}

/// `meshhubctl watch --once` on an agent: the virtual services it serves.
fn served_once(agent: &AgentProc) -> String {
    let (status, out, err) = watch_once(agent.grpc, None);
    assert!(status.success(), "watch --once on {}: {err}", agent.cluster);
    out
}

fn at(v: &Value) -> SystemTime {
    humantime::parse_rfc3339(v.as_str().expect("a time")).expect("RFC 3339")
}

#[test]
fn a_file_change_reaches_both_clusters_and_a_targeted_object_only_its_own() {
    let _turn = turn(module_path!());
    let mesh = Mesh::start(&[("reviews.yaml", vs("reviews", "reviews-v0"))]);
    let east = mesh.consumer(&mesh.east);
    let west = mesh.consumer(&mesh.west);
    for c in [&east, &west] {
        eventually_blocking("consumers get the first state", || {
            c.stdout().contains("reviews-v0").then_some(())
        });
    }

    // File change → both agents ACK, from the hub's ledger timestamps.
    let mut samples = Vec::new();
    for i in 1..=5 {
        let before = group_version(&mesh.hub().status(), "east", VS);
        let written = SystemTime::now();
        mesh.write("reviews.yaml", &vs("reviews", &format!("reviews-v{i}")));
        let s = eventually_blocking("both ACK the change", || {
            let s = mesh.hub().status();
            (group_version(&s, "east", VS) != before
                && synced(&s, "east", VS)
                && synced(&s, "west", VS))
            .then_some(s)
        });
        let acked = ["east", "west"]
            .map(|c| at(&remote(&s, c)["collections"][VS]["acked"]["at"]))
            .into_iter()
            .max()
            .unwrap();
        samples.push(acked.duration_since(written).unwrap_or_default());
    }
    samples.sort();
    eprintln!(
        "e2e: file change -> both agents ACK: {:?} (median {:?}, max {:?}; debounce quiet 20ms)",
        samples,
        samples[samples.len() / 2],
        samples[samples.len() - 1]
    );
    for c in [&east, &west] {
        eventually_blocking("consumers get the last change", || {
            c.stdout().contains("reviews-v5").then_some(())
        });
    }

    // An object that names west reaches west only.
    let east_version = group_version(&mesh.hub().status(), "east", VS);
    mesh.write(
        "only-west.yaml",
        &virtual_service(
            "only-west",
            "bookinfo",
            "only-west",
            "  annotations: {meshhub.io/clusters: west}\n",
        ),
    );
    eventually_blocking("west's consumer gets only-west", || {
        west.stdout().contains("only-west").then_some(())
    });
    let s = mesh.wait_synced(VS);
    assert_eq!(
        group_version(&s, "east", VS),
        east_version,
        "east unchanged"
    );
    assert_eq!(mesh.east.served_version(VS), east_version);
    assert!(!east.stdout().contains("only-west"), "{}", east.stdout());
    assert!(!served_once(&mesh.east).contains("only-west"));

    // SIGHUP re-reads the configuration (unchanged here).
    mesh.hub().proc.signal("HUP");
    eventually_blocking("the reload", || {
        (mesh.hub().status()["config"]["reloads"].as_u64() >= Some(1)).then_some(())
    });
    assert!(mesh.hub().status()["config"]["last_error"].is_null());
}

#[test]
fn a_crashed_agent_serves_its_persisted_state_at_once_then_converges() {
    let _turn = turn(module_path!());
    let mut mesh = Mesh::start(&[("reviews.yaml", vs("reviews", "reviews-v1"))]);

    // With the hub down, crash east and start it again: local consumers get
    // the persisted state without any hub.
    mesh.hub.as_mut().unwrap().proc.kill();
    mesh.hub = None;
    let dir = mesh.dir.path().to_owned();
    mesh.east.crash_and_restart(&dir, &mesh.logs);
    let out = served_once(&mesh.east);
    let served_after = mesh.east.started.elapsed();
    assert!(out.contains("reviews-v1"), "{out}");
    eprintln!(
        "e2e: agent restart (hub down) -> a consumer has the persisted state: {served_after:?}"
    );
    assert!(served_after < Duration::from_secs(10), "{served_after:?}");

    // A change while the hub was down; the hub comes back: both converge.
    mesh.write("reviews.yaml", &vs("reviews", "reviews-v2"));
    mesh.start_hub();
    let s = mesh.wait_synced(VS);
    assert_eq!(mesh.east.served_version(VS), group_version(&s, "east", VS));
    assert!(served_once(&mesh.east).contains("reviews-v2"));

    // With the hub up: crash west, change meanwhile, restart it. The hub's
    // dialer reconnects (backoff 100ms → 1s) and west converges.
    mesh.west.proc.kill();
    eventually_blocking("the hub sees west down", || {
        (remote(&mesh.hub().status(), "west")["connected"] == false).then_some(())
    });
    let before = group_version(&mesh.hub().status(), "east", VS);
    mesh.write("reviews.yaml", &vs("reviews", "reviews-v3"));
    eventually_blocking("east ACKs v3 while west is down", || {
        let s = mesh.hub().status();
        (group_version(&s, "east", VS) != before && synced(&s, "east", VS)).then_some(())
    });
    let west_acked =
        remote(&mesh.hub().status(), "west")["collections"][VS]["acked"]["version"].clone();
    let started = Instant::now();
    mesh.west.crash_and_restart(&dir, &mesh.logs);
    // It started from its persisted (older) state. The hub may reconnect
    // within milliseconds (full-jitter backoff), so what a consumer sees
    // first may already be v3: the start-up log is the deterministic proof.
    let loaded: Vec<Value> = (0..)
        .map_while(|i| mesh.west.proc.log_fields("loaded persisted collection", i))
        .filter(|f| f["collection"] == VS)
        .collect();
    let last = loaded
        .last()
        .expect("west logged its persisted collections");
    assert_eq!(
        last["version"], west_acked,
        "west loaded the version it had ACKed before the crash: {last}"
    );
    let first = served_once(&mesh.west);
    assert!(
        first.contains("reviews-v2") || first.contains("reviews-v3"),
        "west serves at once: {first}"
    );
    let s = mesh.wait_synced(VS);
    eprintln!(
        "e2e: agent restart (hub up) -> ACK of the newer version: {:?}",
        started.elapsed()
    );
    let w = remote(&s, "west");
    assert!(w["streams"].as_u64() >= Some(2), "{w}");
    assert!(w["connected"] == true);
    assert_eq!(mesh.west.served_version(VS), group_version(&s, "west", VS));
    assert!(served_once(&mesh.west).contains("reviews-v3"));
}

#[test]
fn the_hub_restarted_agents_keep_serving_and_converge_with_nothing_lost() {
    let _turn = turn(module_path!());
    let mut mesh = Mesh::start(&[
        ("reviews.yaml", vs("reviews", "reviews-v1")),
        ("ratings.yaml", vs("ratings", "ratings")),
    ]);
    let consumers = [mesh.consumer(&mesh.east), mesh.consumer(&mesh.west)];
    for c in &consumers {
        eventually_blocking("consumers get the first state", || {
            c.stdout().contains("ratings").then_some(())
        });
    }

    mesh.hub.as_mut().unwrap().proc.kill();
    mesh.hub = None;
    // The agents keep serving.
    for agent in [&mesh.east, &mesh.west] {
        assert_eq!(
            get_blocking(agent.admin, "/readyz").map(|r| r.0),
            Some(200),
            "{} ready without its hub",
            agent.cluster
        );
        let out = served_once(agent);
        assert!(
            out.contains("reviews-v1") && out.contains("ratings"),
            "{out}"
        );
    }

    // While the hub is down: a change, a deletion, an addition.
    mesh.write("reviews.yaml", &vs("reviews", "reviews-v2"));
    std::fs::remove_file(mesh.objects.join("ratings.yaml")).unwrap();
    mesh.write("details.yaml", &vs("details", "details"));
    mesh.start_hub();
    let s = mesh.wait_synced(VS);

    // Nothing lost: every collection each agent serves is the hub's.
    for agent in [&mesh.east, &mesh.west] {
        let a = agent.status();
        let groups = s["groups"].as_array().unwrap();
        let g = groups
            .iter()
            .find(|g| g["name"] == agent.cluster.as_str())
            .unwrap();
        let collections = g["collections"].as_object().unwrap();
        for (name, c) in collections {
            eventually_blocking(&format!("{} {name} converged", agent.cluster), || {
                let a = agent.status();
                (a["store"]["collections"][name]["served_version"] == c["version"]).then_some(())
            });
        }
        assert!(a["ready"] == true);
        let out = served_once(agent);
        assert!(
            out.contains("reviews-v2") && out.contains("details") && !out.contains("ratings"),
            "{out}"
        );
    }
    // The long-running consumers followed without ever losing their stream.
    for c in &consumers {
        eventually_blocking("consumers see the new state", || {
            let out = c.stdout();
            let last = out.rsplit("# collection").next().unwrap_or_default();
            (last.contains("reviews-v2") && last.contains("details") && !last.contains("ratings"))
                .then_some(())
        });
        assert!(!c.stderr().contains("stream ended"), "{}", c.stderr());
    }
}

#[test]
fn an_agent_that_cannot_persist_nacks_visibly_retries_with_backoff_and_recovers_by_itself() {
    let _turn = turn(module_path!());
    let mesh = Mesh::start(&[("reviews.yaml", vs("reviews", "reviews-v1"))]);
    let admin = format!("http://{}", mesh.hub().admin);

    // East's volume refuses the write of the virtual services (a directory
    // where its temp file goes): the agent NACKs rather than ACK something
    // that would not survive a restart.
    let blocker = collection_file(&mesh.east.data, VS).with_extension("pb.tmp");
    std::fs::create_dir(&blocker).unwrap();
    mesh.write("reviews.yaml", &vs("reviews", "reviews-v2"));
    let s = eventually_blocking("east NACKs", || {
        let s = mesh.hub().status();
        (remote(&s, "east")["collections"][VS]["state"] == "NACKED" && synced(&s, "west", VS))
            .then_some(s)
    });
    let east = &remote(&s, "east")["collections"][VS];
    let nacked_version = east["nacked"]["version"].as_str().unwrap().to_owned();
    assert_eq!(east["sent"]["version"], nacked_version.as_str());
    assert!(
        east["nacked"]["message"]
            .as_str()
            .unwrap()
            .contains("can't persist"),
        "{east}"
    );

    // meshhubctl status shows it, table and JSON (the agent asks again with
    // backoff, so a snapshot may catch the version in flight: poll).
    let row = |table: &str, peer: &str| {
        table
            .lines()
            .find(|l| l.starts_with(peer) && l.contains(VS))
            .unwrap_or_else(|| panic!("no {peer} {VS} row in\n{table}"))
            .to_owned()
    };
    let table = eventually_blocking("meshhubctl status shows the NACK", || {
        let (ok, table, err) = meshhubctl(&["status", "--admin", &admin]);
        assert!(ok.success(), "{err}");
        let east_row = row(&table, "east");
        (east_row.contains("NACKED") && east_row.contains("can't persist")).then_some(table)
    });
    eprintln!("e2e: meshhubctl status during the NACK:\n{table}");
    assert!(row(&table, "west").contains("SYNCED"));
    eventually_blocking("meshhubctl status -o json shows the NACK", || {
        let (ok, json, _) = meshhubctl(&["status", "--admin", &admin, "-o", "json"]);
        assert!(ok.success());
        let json: Value = serde_json::from_str(&json).unwrap();
        let east_json = json["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "east")
            .cloned()
            .unwrap();
        (east_json["collections"][VS]["state"] == "NACKED"
            && east_json["collections"][VS]["nacked"] == nacked_version.as_str())
        .then_some(())
    });

    // The agent keeps serving its last good state.
    assert!(served_once(&mesh.east).contains("reviews-v1"));

    // The hub never resends a NACKed version by itself; the agent asks for
    // it again because a write failure may pass, with a doubling delay
    // (0.5 s → 10 s): no resend loop. Meanwhile the hub goes on publishing.
    mesh.write(
        "dr.yaml",
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews, namespace: bookinfo}\nspec: {host: reviews}\n",
    );
    let dr = "istio/networking/v1alpha3/destinationrules";
    mesh.wait_synced(dr);
    let nacks = |s: &Value| {
        remote(s, "east")["collections"][VS]["nacks"]
            .as_u64()
            .unwrap()
    };
    // Past the first attempts, retries are at least 2 s apart.
    eventually_blocking("east has retried a few times", || {
        (nacks(&mesh.hub().status()) >= 3).then_some(())
    });
    let before = nacks(&mesh.hub().status());
    let watched = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs(4));
    let after = nacks(&mesh.hub().status());
    assert!(
        after - before <= 2,
        "{} NACKs in {:?}: the failed version is retried in a loop",
        after - before,
        watched.elapsed()
    );

    // The volume is repaired: the agent's next attempt persists and ACKs
    // the version it NACKed — no new version, no operator.
    std::fs::remove_dir(&blocker).unwrap();
    let s = mesh.wait_synced(VS);
    let e = remote(&s, "east");
    assert_eq!(
        e["collections"][VS]["acked"]["version"],
        nacked_version.as_str()
    );
    assert!(served_once(&mesh.east).contains("reviews-v2"));

    // And the next version goes through as usual, on the same stream.
    mesh.write("reviews.yaml", &vs("reviews", "reviews-v3"));
    let s = eventually_blocking("east ACKs the next version", || {
        let s = mesh.hub().status();
        (group_version(&s, "east", VS).as_deref() != Some(nacked_version.as_str())
            && synced(&s, "east", VS))
        .then_some(s)
    });
    let e = remote(&s, "east");
    assert_eq!(e["streams"], 1, "one stream throughout");
    // The agent's fresh request re-subscribes the collection, which starts
    // its counters again: at least v2 (after the repair) and v3.
    assert!(e["collections"][VS]["acks"].as_u64().unwrap() >= 2, "{e}");
    assert_eq!(
        e["collections"][VS]["acked"]["version"],
        e["collections"][VS]["sent"]["version"]
    );
    assert!(served_once(&mesh.east).contains("reviews-v3"));
    let (_, table, _) = meshhubctl(&["status", "--admin", &admin]);
    assert!(row(&table, "east").contains("SYNCED"), "{table}");
}

/// The agent's file for `collection` (its on-disk format v1).
fn collection_file(data: &Path, collection: &str) -> PathBuf {
    data.join("v1/collections")
        .join(format!("{}.pb", collection.replace('/', "%2F")))
}

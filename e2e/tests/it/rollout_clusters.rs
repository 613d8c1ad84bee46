//! The staged rollout with real components end to end: four real
//! kube-apiservers (a primary and three remotes `r1`, `r2`, `r3`, each with
//! Istio's CRDs), the real `meshhub` reading the primary's API, a real
//! `meshhub-sink-agent` per remote applying what it receives to its own
//! API, and a real istiod 1.28 on `r1` watching `r1`'s API (as it does
//! without meshhub). The hub rolls changes out in three waves, one remote
//! each, with a bake time.
//!
//! `r1` has a ValidatingAdmissionPolicy (a real API server's admission
//! check, not one of meshhub's) refusing VirtualServices for hosts named
//! `blocked*`: the hub's validation accepts such an object, `r1`'s API
//! server refuses the agent's apply, and the agent NACKs.
//!
//! Checked, in order, on the remotes' own API servers (and `r1`'s istiod):
//! a. a good change reaches r1, then r2, then r3, never before its wave
//!    started (each observation of a remote's API is checked against the
//!    hub's `/rollout`), and `meshhubctl wait` returns 0 only once the last
//!    wave holds it;
//! b. a change r1 refuses is rolled back there (its API server and its
//!    istiod hold the previous version again) and never reaches r2, r3;
//! c. `meshhubctl rollout promote` starts the next wave before the bake
//!    ends, `meshhubctl rollout abort` rolls r1 and r2 back, r3 never sees
//!    the change;
//! d. the hub killed mid-rollout and started again (its history directory
//!    kept) continues the same rollout where it was.
//!
//! Printed: change → each wave's remote holding it, → completed; and the
//! NACK → r1's API server holding the previous version again.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use meshhub_e2e::istio::{ConfigSource, ISTIOD_START, Istiod, istiod_bin};
use meshhub_e2e::kube::{ControlPlanes, apply_yaml, delete, get, rbac_manifest};
use meshhub_e2e::yaml::cluster;
use meshhub_e2e::*;
use meshhub_testkit::eventually_some;
use meshhub_testkit::objects::{VS, vs};
use serde_json::Value;

const NET: &str = "networking.istio.io/v1";
const REMOTES: [&str; 3] = ["r1", "r2", "r3"];
/// Each wave's bake time.
const BAKE: Duration = Duration::from_secs(5);
/// How long any one step of the test may take (three waves with their
/// bakes fit with room to spare).
const STEP: Duration = Duration::from_secs(60);

fn hub_config(primary: &Path, agents: &[(&str, std::net::SocketAddr)]) -> String {
    let clusters: String = agents
        .iter()
        .map(|(name, addr)| {
            cluster(
                name,
                "    namespaces: [bookinfo]\n",
                format!("http://{addr}"),
                "",
            )
        })
        .collect();
    let waves: String = REMOTES
        .iter()
        .enumerate()
        .map(|(i, r)| {
            format!(
                "  - name: wave{}\n    clusters: [{r}]\n    bake: {}s\n",
                i + 1,
                BAKE.as_secs()
            )
        })
        .collect();
    format!(
        "sources:\n  - name: primary\n    kubernetes:\n      kubeconfig: {}\n      namespaces: [bookinfo]\nclusters:\n{clusters}debounce:\n  quiet: 300ms\n  maxWait: 1s\nhistory:\n  dir: history\nrollout:\n  progressDeadline: 1m\n  waves:\n{waves}",
        primary.display(),
    )
}

/// The first host of VirtualService `bookinfo/<name>` in a cluster's API.
async fn host_of(client: &::kube::Client, name: &str) -> Option<String> {
    get(client, NET, "VirtualService", "bookinfo", name)
        .await
        .and_then(|o| o.data["spec"]["hosts"][0].as_str().map(str::to_owned))
}

/// The hub's `GET /rollout`.
async fn rollout(hub: &HubProc) -> Value {
    let (code, body) = meshhub_testkit::http::get(hub.admin, "/rollout").await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("/rollout is JSON")
}

fn phase(r: &Value) -> &str {
    r["rollout"]["phase"]["phase"].as_str().unwrap_or_default()
}

fn state_of<'a>(r: &'a Value, cluster: &str) -> &'a str {
    r["rollout"]["targets"][cluster]["state"]["state"]
        .as_str()
        .unwrap_or_default()
}

/// `meshhubctl rollout <action> --as ci` against the hub; must succeed.
fn act(hub: &HubProc, action: &str) -> String {
    let admin = format!("http://{}", hub.admin);
    let (status, out, err) = tokio::task::block_in_place(|| {
        meshhubctl(&["rollout", action, "--admin", &admin, "--as", "ci"])
    });
    assert!(status.success(), "rollout {action}: {status} {out} {err}");
    out
}

/// The remotes' API clients.
struct Remotes {
    clients: Vec<(&'static str, ::kube::Client)>,
}

/// What the test saw of one change moving through the remotes.
#[derive(Debug, Default)]
struct Watch {
    /// When each remote's API server was first seen holding the change.
    seen: BTreeMap<&'static str, Instant>,
    /// The rollout's id when last seen.
    id: Option<u64>,
}

impl Remotes {
    async fn hosts(&self, name: &str) -> BTreeMap<&'static str, Option<String>> {
        let mut out = BTreeMap::new();
        for (r, c) in &self.clients {
            out.insert(*r, host_of(c, name).await);
        }
        out
    }

    /// Polls the remotes' API servers for `reviews` with host `host` until
    /// `done` holds for the hub's `/rollout`, checking on every round that
    /// no remote holds it while the rollout still holds that remote back
    /// (the remote's API is read first, then `/rollout`: a cluster's state
    /// never goes back to held within a rollout).
    async fn follow(
        &self,
        hub: &HubProc,
        host: &str,
        start: Instant,
        mut done: impl FnMut(&Value, &Watch) -> bool,
    ) -> Watch {
        let mut w = Watch::default();
        loop {
            let hosts = self.hosts("reviews").await;
            let r = rollout(hub).await;
            let id = r["rollout"]["id"].as_u64();
            for (remote, h) in &hosts {
                if h.as_deref() == Some(host) {
                    let state = state_of(&r, remote);
                    assert_ne!(
                        state, "held",
                        "{remote} holds {host} while the rollout holds it back: {r}"
                    );
                    w.seen.entry(remote).or_insert_with(Instant::now);
                }
            }
            w.id = id.or(w.id);
            if done(&r, &w) {
                return w;
            }
            assert!(
                start.elapsed() < STEP,
                "timed out following {host}: remotes {hosts:?}, rollout {r}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn since(t: Instant, start: Instant) -> f64 {
    t.duration_since(start).as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_walks_three_real_clusters_and_a_refused_one_is_rolled_back() {
    let _turn = turn(module_path!());
    let bin = istiod_bin();
    let all = ["primary", "r1", "r2", "r3"];
    let planes = ControlPlanes::start_bare(&all).await;
    for c in all {
        planes.install_istio_crds(c, &[]).await;
        planes.namespace(c, "bookinfo").await;
    }
    planes.namespace("r1", "istio-system").await;
    let primary = planes.client("primary").await;
    apply_yaml(&primary, &vs("reviews", "v1")).await;

    // r1 refuses VirtualServices for blocked hosts.
    planes.refuse_blocked_hosts("r1").await;

    let hub_kubeconfig = planes.hub_service_account("primary").await;
    let tmp = KeepLogsOnPanic::new("rollout-clusters");
    let dir = tmp.path().to_owned();
    let dir = dir.as_path();
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut agents = Vec::new();
    for r in REMOTES {
        let client = planes.client(r).await;
        planes.namespace(r, "meshhub").await;
        apply_yaml(&client, &rbac_manifest("sink-agent.yaml")).await;
        let kubeconfig = planes
            .service_account_kubeconfig(r, "meshhub", "meshhub-agent")
            .await;
        let flags = [
            "--apply",
            "--apply-kubeconfig",
            &kubeconfig.display().to_string(),
            "--apply-resync",
            "2s",
        ]
        .map(str::to_owned);
        agents.push(tokio::task::block_in_place(|| {
            AgentProc::start_with(r, dir, &logs, None, &flags)
        }));
    }
    let mut istiod = Istiod::spawn(
        "istiod-r1",
        bin,
        &planes.cluster("r1").kubeconfig,
        ConfigSource::Kubernetes,
        dir,
        &logs,
    );
    let config = dir.join("meshhub.yaml");
    let sinks: Vec<(&str, std::net::SocketAddr)> = REMOTES
        .iter()
        .zip(&agents)
        .map(|(r, a)| (*r, a.sink))
        .collect();
    std::fs::write(&config, hub_config(&hub_kubeconfig, &sinks)).unwrap();
    let mut hub = tokio::task::block_in_place(|| HubProc::start("hub", &config, &logs));
    tokio::task::block_in_place(|| istiod.wait_ready(ISTIOD_START));
    let remotes = Remotes {
        clients: {
            let mut v = Vec::new();
            for r in REMOTES {
                v.push((r, planes.client(r).await));
            }
            v
        },
    };
    let istiod_host = |name: &str| {
        istiod
            .config("VirtualService", "bookinfo", name)
            .and_then(|c| c["spec"]["hosts"][0].as_str().map(str::to_owned))
    };

    // The first version reaches every remote at once (nothing to protect).
    eventually_some("v1 in every remote", async || {
        remotes
            .hosts("reviews")
            .await
            .values()
            .all(|h| h.as_deref() == Some("v1"))
            .then_some(())
    })
    .await;
    assert_eq!(phase(&rollout(&hub).await), "", "no rollout yet");

    // a. A good change walks the three waves.
    let start = Instant::now();
    apply_yaml(&primary, &vs("reviews", "v2")).await;
    let rv = get(&primary, NET, "VirtualService", "bookinfo", "reviews")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let admin = format!("http://{}", hub.admin);
    let waiter = {
        let admin = admin.clone();
        std::thread::spawn(move || {
            let out = meshhubctl(&[
                "wait",
                "--object",
                "VirtualService",
                "bookinfo/reviews",
                "--resource-version",
                &rv,
                "--interval",
                "100ms",
                "--timeout",
                "60s",
                "--admin",
                &admin,
            ]);
            (out, Instant::now())
        })
    };
    let w = remotes
        .follow(&hub, "v2", start, |r, _| phase(r) == "completed")
        .await;
    let ((status, out, err), waited) = waiter.join().unwrap();
    assert!(status.success(), "meshhubctl wait: {status} {out} {err}");
    let seen = |r: &str| w.seen[r];
    assert!(seen("r1") < seen("r2") && seen("r2") < seen("r3"), "{w:?}");
    // One bake (less the polls' granularity) between consecutive waves.
    let slack = Duration::from_millis(300);
    for (a, b) in [("r1", "r2"), ("r2", "r3")] {
        assert!(
            seen(b).duration_since(seen(a)) + slack >= BAKE,
            "{b} updated {:?} after {a}, less than the bake {BAKE:?}",
            seen(b).duration_since(seen(a))
        );
    }
    assert!(
        waited + slack >= seen("r3"),
        "meshhubctl wait returned {:.2}s after the change, before r3 held it ({:.2}s):\n{out}",
        since(waited, start),
        since(seen("r3"), start),
    );
    assert!(
        eventually_some("r1's istiod holds v2", async || {
            (istiod_host("reviews").as_deref() == Some("v2")).then_some(true)
        })
        .await
    );
    let completed = Instant::now();
    println!(
        "rollout e2e (3 real remotes, bake {}s): change -> r1 {:.2}s, -> r2 {:.2}s, -> r3 (last wave) {:.2}s, -> completed {:.2}s; meshhubctl wait returned at {:.2}s",
        BAKE.as_secs(),
        since(seen("r1"), start),
        since(seen("r2"), start),
        since(seen("r3"), start),
        since(completed, start),
        since(waited, start),
    );

    // b. r1's API server refuses a change: the agent NACKs, the hub rolls
    // r1 back to v2, r2 and r3 never see it.
    let generation = || async {
        get(
            &remotes.clients[0].1,
            NET,
            "VirtualService",
            "bookinfo",
            "reviews",
        )
        .await
        .and_then(|o| o.metadata.generation)
        .unwrap()
    };
    let generation_before = generation().await;
    let start = Instant::now();
    apply_yaml(
        &primary,
        &format!("{}---\n{}", vs("blocked", "blocked-1"), vs("reviews", "v3")),
    )
    .await;
    let w = remotes
        .follow(&hub, "v3", start, |r, _| phase(r) == "rolledBack")
        .await;
    let r = rollout(&hub).await;
    let failure = &r["rollout"]["phase"]["failure"];
    assert_eq!(failure["cluster"], "r1", "{r}");
    assert_eq!(failure["cause"], "nack", "{r}");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("r1 admits no VirtualService for a blocked host"),
        "{r}"
    );
    assert_eq!(state_of(&r, "r1"), "rolledBack", "{r}");
    for c in ["r2", "r3"] {
        assert_eq!(state_of(&r, c), "held", "{r}");
    }
    let back = eventually_some("r1's API server holds v2 again", async || {
        (host_of(&remotes.clients[0].1, "reviews").await.as_deref() == Some("v2"))
            .then(SystemTime::now)
    })
    .await;
    let status = hub.status();
    let nacked_at = remote(&status, "r1")["collections"][VS]["nacked"]["at"]
        .as_str()
        .and_then(|t| humantime::parse_rfc3339(t).ok())
        .unwrap_or_else(|| panic!("r1's NACK in /status: {}", remote(&status, "r1")));
    let hosts = remotes.hosts("reviews").await;
    assert_eq!(
        hosts.values().map(|h| h.as_deref()).collect::<Vec<_>>(),
        [Some("v2"); 3],
        "{w:?}"
    );
    assert_eq!(remotes.hosts("blocked").await.values().flatten().count(), 0);
    assert!(!w.seen.contains_key("r2") && !w.seen.contains_key("r3"));
    assert!(
        eventually_some("r1's istiod holds v2 again", async || {
            (istiod_host("reviews").as_deref() == Some("v2")).then_some(true)
        })
        .await
    );
    assert!(istiod_host("blocked").is_none());
    // r1's API server took the change's valid part (reviews v3: the agent
    // applies what it can) and was rolled back (v2 again): two generations.
    assert_eq!(generation().await, generation_before + 2);
    println!(
        "rollout e2e: NACK at r1 -> r1's API server holding the previous version again: {:.0} ms (seen by polling; r1's reviews went v2 -> v3 -> v2, generation {} -> {})",
        back.duration_since(nacked_at)
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3,
        generation_before,
        generation_before + 2,
    );

    // c. A fix; promoted by hand past r1's bake, then aborted in wave 2:
    // r1 and r2 go back to v2, r3 never sees v4.
    let start = Instant::now();
    assert!(delete(&primary, NET, "VirtualService", "bookinfo", "blocked").await);
    apply_yaml(&primary, &vs("reviews", "v4")).await;
    remotes
        .follow(&hub, "v4", start, |r, w| {
            phase(r) == "baking" && r["rollout"]["wave"] == 0 && w.seen.contains_key("r1")
        })
        .await;
    let promoted = Instant::now();
    act(&hub, "promote");
    let w = remotes
        .follow(&hub, "v4", start, |r, w| {
            phase(r) == "baking" && r["rollout"]["wave"] == 1 && w.seen.contains_key("r2")
        })
        .await;
    assert!(
        w.seen["r2"].duration_since(promoted) < BAKE,
        "promote started wave 2 before r1's bake ended"
    );
    act(&hub, "abort");
    let r = rollout(&hub).await;
    assert_eq!(phase(&r), "rolledBack", "{r}");
    assert_eq!(
        r["rollout"]["phase"]["failure"]["cause"]["aborted"]["by"], "ci",
        "{r}"
    );
    eventually_some("r1 and r2 hold v2 again", async || {
        let h = remotes.hosts("reviews").await;
        (h.values().all(|h| h.as_deref() == Some("v2"))).then_some(())
    })
    .await;
    let r = rollout(&hub).await;
    assert_eq!(state_of(&r, "r3"), "held", "{r}");

    // d. The hub killed in wave 2 and started again continues the same
    // rollout: r1 and r2 keep v5, r3 gets it after its turn.
    let start = Instant::now();
    apply_yaml(&primary, &vs("reviews", "v5")).await;
    let state_file = dir.join("history").join("rollout.json");
    let w = remotes
        .follow(&hub, "v5", start, |r, w| {
            let saved: Option<Value> = std::fs::read(&state_file)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            phase(r) == "baking"
                && r["rollout"]["wave"] == 1
                && w.seen.contains_key("r2")
                && saved.is_some_and(|s| {
                    s["rollout"]["wave"] == 1 && s["rollout"]["phase"]["phase"] == "baking"
                })
        })
        .await;
    let id = w.id.unwrap();
    hub.proc.kill();
    let hub = tokio::task::block_in_place(|| HubProc::start("hub", &config, &logs));
    let r = rollout(&hub).await;
    assert_eq!(
        r["rollout"]["id"], id,
        "the same rollout after the restart: {r}"
    );
    assert_eq!(r["rollout"]["wave"], 1, "{r}");
    assert_eq!(state_of(&r, "r3"), "held", "{r}");
    let hosts = remotes.hosts("reviews").await;
    assert_eq!(hosts["r1"].as_deref(), Some("v5"));
    assert_eq!(hosts["r2"].as_deref(), Some("v5"));
    assert_eq!(hosts["r3"].as_deref(), Some("v2"));
    let w = remotes
        .follow(&hub, "v5", start, |r, _| phase(r) == "completed")
        .await;
    assert_eq!(w.id, Some(id));
    let hosts = remotes.hosts("reviews").await;
    assert!(
        hosts.values().all(|h| h.as_deref() == Some("v5")),
        "{hosts:?}"
    );
    drop(agents);
}

//! The staged rollout shared by two hub replicas, with a real
//! kube-apiserver: both run as the hub's ServiceAccount (the RBAC of
//! deploy/rbac/hub.yaml), elect a leader through the Lease, and share the
//! rollout through the ConfigMap `meshhub-rollout`; three real agents.
//!
//! Covered: the follower shows the leader's rollout (same id, phase and
//! holds) and serves its consumers what the leader decided (a held
//! cluster's previous version), and sends operators to the leader; after
//! a SIGKILL of the leader the follower takes the lead and continues the
//! same rollout — the held clusters stay held until it is promoted there —
//! and completes it. Prints the time from the kill to the new leader
//! deciding.

use std::time::Instant;

use ::kube::Api;
use k8s_openapi::api::core::v1::ConfigMap;
use meshhub_e2e::kube::ControlPlanes;
use meshhub_e2e::yaml::{cluster, files_hub};
use meshhub_e2e::*;
use meshhub_testkit::eventually_blocking;
use meshhub_testkit::fixtures::write_atomic;
use meshhub_testkit::http::get_blocking;
use meshhub_testkit::objects::vs;
use serde_json::Value;

/// `GET /rollout` of `hub`.
fn rollout(hub: &HubProc) -> Value {
    let (code, body) = eventually_blocking("hub /rollout", || get_blocking(hub.admin, "/rollout"));
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("rollout JSON")
}

fn phase(view: &Value) -> String {
    view["rollout"]["phase"]["phase"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The hosts of the virtual services served at `server` to `cluster`.
fn hosts(server: std::net::SocketAddr, cluster: &str) -> Vec<String> {
    let (status, out, _) = watch_once(server, Some(cluster));
    if !status.success() {
        return Vec::new();
    }
    let mut h: Vec<String> = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|o| o["spec"]["hosts"][0].as_str().map(str::to_owned))
        .collect();
    h.sort();
    h
}

/// `meshhubctl rollout <action>` against `hub`'s admin port.
fn rollout_ctl(action: &str, hub: &HubProc) -> (std::process::ExitStatus, String, String) {
    meshhubctl(&[
        "rollout",
        action,
        "--admin",
        &format!("http://{}", hub.admin),
    ])
}

fn is_leader(hub: &HubProc) -> bool {
    hub.status()["leader"]["is_leader"] == true
}

/// Hub replicas (leader election, `shards` if given, each with its own
/// history, a rollout policy) over one real kube-apiserver, and a real
/// agent per name of `clusters`, each holding v1 of the `reviews` route.
struct Replicas {
    planes: ControlPlanes,
    // Removed last: the processes' logs and data live in it.
    _dir: tempfile::TempDir,
    logs: std::path::PathBuf,
    objects: std::path::PathBuf,
    agents: Vec<AgentProc>,
    hubs: Vec<HubProc>,
    /// Each replica's configuration but for its history directory.
    configs: Vec<String>,
}

const IDS: [&str; 2] = ["hub-a", "hub-b"];

/// Canary, then a wave after which an operator promotes, then the rest.
const MANUAL_WAVES: &str = "rollout:\n  waves:\n  - {name: canary, clusters: [a], bake: 1s}\n  - {name: second, clusters: [b], bake: 1s, promotion: manual}\n  - {name: rest, rest: true, bake: 1s}\n";

impl Replicas {
    async fn start(clusters: &[&str], shards: Option<u32>) -> Self {
        Self::start_with(&IDS, clusters, shards, MANUAL_WAVES, None).await
    }

    /// Replicas `ids`; the agent of `refusing` applies what it receives to
    /// the primary API server, which refuses `blocked*` hosts.
    async fn start_with(
        ids: &[&str],
        clusters: &[&str],
        shards: Option<u32>,
        policy: &str,
        refusing: Option<&str>,
    ) -> Self {
        let planes = ControlPlanes::start_bare(&["primary"]).await;
        let kubeconfig = planes.hub_service_account("primary").await;
        if shards.is_some() {
            meshhub_e2e::kube::apply_yaml(
                &planes.client("primary").await,
                &meshhub_e2e::kube::rbac_manifest("hub-shards.yaml"),
            )
            .await;
        }
        let ProcTree { dir, logs, objects } = proc_tree("reviews-v1");
        let mut refusing_flags = Vec::new();
        if let Some(r) = refusing {
            refusing_flags = Self::refusing_cluster(&planes).await;
            assert!(clusters.contains(&r));
        }
        let agents: Vec<AgentProc> = clusters
            .iter()
            .map(|c| {
                let flags = if Some(*c) == refusing {
                    refusing_flags.as_slice()
                } else {
                    &[]
                };
                tokio::task::block_in_place(|| {
                    AgentProc::start_with(c, dir.path(), &logs, None, flags)
                })
            })
            .collect();
        let entries: String = agents
            .iter()
            .map(|a| {
                cluster(
                    &a.cluster,
                    "    namespaces: [bookinfo]\n",
                    format!("http://{}", a.sink),
                    "",
                )
            })
            .collect();
        let shards = shards
            .map(|n| format!("  shards: {n}\n"))
            .unwrap_or_default();
        let configs: Vec<String> = ids
            .iter()
            .map(|id| {
                let extra = format!(
                    "leaderElection:\n  enabled: true\n  namespace: meshhub\n  identity: {id}\n{shards}  leaseDuration: 3s\n  renewDeadline: 2s\n  retryPeriod: 500ms\n  kubeconfig: {}\n{policy}",
                    kubeconfig.display(),
                );
                files_hub(objects.display(), &entries, &extra)
            })
            .collect();
        let mut replicas = Self {
            planes,
            _dir: dir,
            logs,
            objects,
            agents,
            hubs: Vec::new(),
            configs,
        };
        replicas.hubs = ids
            .iter()
            .enumerate()
            .map(|(i, id)| replicas.start_hub(i, id, "history"))
            .collect();
        for agent in &replicas.agents {
            eventually_blocking(&format!("{} holds v1", agent.cluster), || {
                (hosts(agent.grpc, &agent.cluster) == ["reviews-v1"]).then_some(())
            });
        }
        replicas
    }

    /// Starts replica `i` (identity `id`) with its history in the
    /// directory `<history>-<id>` (a new name: an empty history).
    fn start_hub(&self, i: usize, id: &str, history: &str) -> HubProc {
        let dir = self._dir.path();
        let path = dir.join(format!("{id}-{history}.yaml"));
        let config = format!(
            "{}history:\n  dir: {}\n",
            self.configs[i],
            dir.join(format!("{history}-{id}")).display()
        );
        std::fs::write(&path, config).unwrap();
        tokio::task::block_in_place(|| HubProc::start(id, &path, &self.logs))
    }

    /// Istio's CRDs and the refusing policy in the primary API server;
    /// the flags of an agent applying there as its ServiceAccount.
    async fn refusing_cluster(planes: &ControlPlanes) -> Vec<String> {
        planes.install_istio_crds("primary", &[]).await;
        planes.namespace("primary", "bookinfo").await;
        planes.refuse_blocked_hosts("primary").await;
        let admin = planes.client("primary").await;
        meshhub_e2e::kube::apply_yaml(&admin, &meshhub_e2e::kube::rbac_manifest("sink-agent.yaml"))
            .await;
        let kubeconfig = planes
            .service_account_kubeconfig("primary", "meshhub", "meshhub-agent")
            .await;
        [
            "--apply",
            "--apply-kubeconfig",
            &kubeconfig.display().to_string(),
            "--apply-resync",
            "2s",
        ]
        .map(str::to_owned)
        .to_vec()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_the_rollout_and_a_new_leader_continues_it() {
    let _turn = turn(module_path!());
    let Replicas {
        planes,
        _dir,
        objects,
        agents,
        mut hubs,
        ..
    } = Replicas::start(&["a", "b", "c"], None).await;
    let ids = IDS;
    let li = eventually_blocking("a leader", || hubs.iter().position(is_leader));
    let (leader_id, follower_id) = (ids[li], ids[1 - li]);

    let (leader, follower) = (&hubs[li], &hubs[1 - li]);
    // A change: the canary and the second wave get it, the rest waits for
    // an operator.
    write_atomic(&objects.join("reviews.yaml"), &vs("reviews", "reviews-v2"));
    eventually_blocking("the last wave awaits promotion", || {
        (phase(&rollout(leader)) == "awaitingPromotion").then_some(())
    });
    let decided = rollout(leader);
    let id = decided["rollout"]["id"].clone();
    assert_eq!(decided["following"], Value::Null, "{decided}");
    // The follower shows the leader's rollout, and who decided it.
    let seen = eventually_blocking("the follower shows the leader's rollout", || {
        let v = rollout(follower);
        (phase(&v) == "awaitingPromotion").then_some(v)
    });
    assert_eq!(seen["following"], true, "{seen}");
    assert_eq!(seen["leader"], leader_id, "{seen}");
    assert_eq!(seen["rollout"], decided["rollout"], "the same rollout");
    // Both replicas serve each cluster's group what the rollout allows:
    // consumers dialing the follower see the held clusters' v1 too.
    for (cluster, want) in [
        ("a", "reviews-v2"),
        ("b", "reviews-v2"),
        ("c", "reviews-v1"),
    ] {
        for hub in [leader, follower] {
            eventually_blocking(&format!("{cluster} served {want}"), || {
                (hosts(hub.grpc, cluster) == [want]).then_some(())
            });
        }
    }
    assert_eq!(hosts(agents[1].grpc, "b"), ["reviews-v2"]);
    assert_eq!(hosts(agents[2].grpc, "c"), ["reviews-v1"]);
    // The decisions are in the ConfigMap, signed by the leader.
    let cms: Api<ConfigMap> = Api::namespaced(planes.client("primary").await, "meshhub");
    let cm = cms.get("meshhub-rollout").await.unwrap();
    let shared: Value = serde_json::from_str(&cm.data.unwrap()["decisions"]).unwrap();
    assert_eq!(shared["by"], leader_id);
    assert_eq!(shared["rollout"]["id"], id);
    // Operators are sent to the leader.
    let (status, _, err) = rollout_ctl("promote", follower);
    assert!(!status.success());
    assert!(
        err.contains("does not lead the rollout") && err.contains(leader_id),
        "{err}"
    );
    let (status, out, err) = rollout_ctl("status", follower);
    assert!(status.success(), "{err}");
    assert!(
        out.contains(&format!("decided by the leader {leader_id}")),
        "{out}"
    );

    // The leader dies mid-rollout: the follower leads and continues it.
    let killed = Instant::now();
    hubs[li].proc.kill();
    let follower = &hubs[1 - li];
    let took_over = eventually_blocking("the follower leads the rollout", || {
        let v = rollout(follower);
        (v["following"] == Value::Null && is_leader(follower)).then_some(killed.elapsed())
    });
    let continued = rollout(follower);
    assert_eq!(
        continued["rollout"]["id"], id,
        "the same rollout: {continued}"
    );
    assert_eq!(phase(&continued), "awaitingPromotion", "{continued}");
    eventually_blocking("the new leader dials the canary", || {
        synced(&follower.status(), "a", meshhub_testkit::objects::VS).then_some(())
    });
    // The held cluster stays held under the new leader.
    assert_eq!(hosts(agents[2].grpc, "c"), ["reviews-v1"]);
    assert_eq!(
        continued["rollout"]["targets"]["c"]["state"]["state"], "held",
        "{continued}"
    );
    let (status, _, err) = meshhubctl(&[
        "rollout",
        "promote",
        "--as",
        "ops",
        "--admin",
        &format!("http://{}", follower.admin),
    ]);
    assert!(status.success(), "{err}");
    eventually_blocking("the rollout completes under the new leader", || {
        (phase(&rollout(follower)) == "completed").then_some(())
    });
    for agent in &agents {
        assert_eq!(
            hosts(agent.grpc, &agent.cluster),
            ["reviews-v2"],
            "{}",
            agent.cluster
        );
    }
    let cm = cms.get("meshhub-rollout").await.unwrap();
    let shared: Value = serde_json::from_str(&cm.data.unwrap()["decisions"]).unwrap();
    assert_eq!(shared["by"], follower_id);
    assert_eq!(shared["rollout"]["phase"]["phase"], "completed");
    println!(
        "rollout replicas: leader SIGKILLed -> the other replica leads the same rollout in {:.2} s (lease 3 s)",
        took_over.as_secs_f64()
    );
}

/// With sharded dial-out the replica deciding the rollout (the holder of
/// `<leaseName>-rollout`) does not dial every cluster: it hears the others
/// through their agents' reports, and the replica dialing them pushes what
/// it decided. Six real agents, two replicas, four shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_replicas_roll_out_clusters_the_decider_does_not_dial() {
    let _turn = turn(module_path!());
    let names = ["a", "b", "c", "d", "e", "f"];
    // Every field bound: what is not would end with the statement (the
    // API server with `planes`).
    let Replicas {
        planes,
        _dir,
        objects,
        agents,
        mut hubs,
        ..
    } = Replicas::start(&names, Some(4)).await;
    let ids = IDS;
    // Every cluster dialed by one replica; one replica decides.
    let dialer = |cluster: &str| -> Option<String> {
        hubs.iter().find_map(|h| {
            let s = h.status();
            let r = remote(&s, cluster);
            (r["connected"] == true).then(|| r["dialed_by"].as_str().map(str::to_owned))?
        })
    };
    let di = eventually_blocking("one replica decides, the other follows", || {
        let views: Vec<Value> = hubs.iter().map(rollout).collect();
        let leading: Vec<usize> = (0..2)
            .filter(|i| views[*i]["following"].is_null())
            .collect();
        (leading.len() == 1 && views[1 - leading[0]]["following"] == true).then(|| leading[0])
    });
    let (decider, follower) = (&hubs[di], &hubs[1 - di]);
    let dialed_by = shard_dialers(&hubs, 2, &names);
    let theirs: Vec<&str> = names
        .iter()
        .zip(&dialed_by)
        .filter(|(_, d)| d.as_str() == ids[1 - di])
        .map(|(c, _)| *c)
        .collect();
    // The clusters' shards are fixed by their names, and each replica holds
    // two shards: the follower dials some of them (a or b: their waves'
    // ACKs come through reports; the rest: it holds them back as decided).
    assert!(
        !theirs.is_empty(),
        "the follower must dial a cluster for this test to mean anything: {dialed_by:?}"
    );
    println!(
        "sharded rollout: the follower ({}) dials {theirs:?}",
        ids[1 - di]
    );
    for agent in &agents {
        eventually_blocking(&format!("{} holds v1", agent.cluster), || {
            (hosts(agent.grpc, &agent.cluster) == ["reviews-v1"]).then_some(())
        });
    }

    write_atomic(&objects.join("reviews.yaml"), &vs("reviews", "reviews-v2"));
    eventually_blocking("the last wave awaits promotion", || {
        (phase(&rollout(decider)) == "awaitingPromotion").then_some(())
    });
    let seen = eventually_blocking("the follower shows it", || {
        let v = rollout(follower);
        (phase(&v) == "awaitingPromotion").then_some(v)
    });
    assert_eq!(seen["leader"], ids[di], "{seen}");
    for agent in &agents {
        let want = if ["a", "b"].contains(&agent.cluster.as_str()) {
            "reviews-v2"
        } else {
            "reviews-v1"
        };
        assert_eq!(
            hosts(agent.grpc, &agent.cluster),
            [want],
            "{} (dialed by {:?})",
            agent.cluster,
            dialer(&agent.cluster)
        );
    }
    let (status, _, err) = rollout_ctl("promote", decider);
    assert!(status.success(), "{err}");
    let done = eventually_blocking("the rollout completes", || {
        let v = rollout(decider);
        (phase(&v) == "completed").then_some(v)
    });
    for c in &theirs {
        assert_eq!(
            done["rollout"]["targets"][*c]["state"]["state"], "acked",
            "{c}, dialed by the follower, ACKed through its report: {done}"
        );
    }
    for agent in &agents {
        assert_eq!(
            hosts(agent.grpc, &agent.cluster),
            ["reviews-v2"],
            "{}",
            agent.cluster
        );
    }

    // A replica stopping deletes its membership Lease (the next pod has
    // another identity: left behind, they would pile up).
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(planes.client("primary").await, "meshhub");
    let members = || async {
        let params = ::kube::api::ListParams::default().labels("meshhub.io/lease-role=member");
        leases.list(&params).await.unwrap().items.len()
    };
    assert_eq!(members().await, 2, "one membership per replica");
    let follower = &mut hubs[1 - di];
    follower.proc.signal("TERM");
    follower.proc.wait_exit();
    assert_eq!(
        members().await,
        1,
        "the stopped replica's membership is gone"
    );
}

/// Keeps a failed test's logs (`keep_logs`).
struct KeepLogs(std::path::PathBuf);

impl Drop for KeepLogs {
    fn drop(&mut self) {
        if std::thread::panicking() {
            keep_logs(&self.0, "rollout-replicas");
        }
    }
}

/// Which of `clusters` ever held a `blocked*` route, seen from their
/// agents, polled until `stop`.
fn watch_for_blocked(
    agents: Vec<(String, std::net::SocketAddr)>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<(usize, Vec<String>)> {
    std::thread::spawn(move || {
        let (mut looks, mut seen) = (0, Vec::new());
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            // A look every 50 ms per agent (polling what the agents serve,
            // not synchronisation: a delivery holds until the next change).
            std::thread::sleep(std::time::Duration::from_millis(50));
            for (cluster, grpc) in &agents {
                let h = hosts(*grpc, cluster);
                looks += 1;
                if h.iter().any(|h| h.starts_with("blocked")) {
                    seen.push(format!("{cluster}: {h:?}"));
                }
            }
        }
        (looks, seen)
    })
}

/// Item 7 of issue 37, with real parts: three replicas, each with its own
/// empty history, over one real kube-apiserver (Leases, shared decisions,
/// the archive); real agents, `a`'s applying to a real API server that
/// refuses the change. A change NACKed in wave 1 is rolled back; then every
/// replica is restarted, one by one, each with a new, empty history (a
/// rolling upgrade with `emptyDir`); then a held cluster is pinned and
/// unpinned. The held clusters never receive the failed version (read from
/// their agents throughout), `/rollout` stays truthful, every replica can
/// serve the rolled-back version (none shows it unavailable), and a fix
/// afterwards completes in wave order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_with_empty_histories_and_a_pin_never_hand_held_clusters_the_failed_version()
 {
    let _turn = turn(module_path!());
    let ids = ["hub-a", "hub-b", "hub-c"];
    let waves = "rollout:\n  waves:\n  - {name: canary, clusters: [a], bake: 1s}\n  - {name: second, clusters: [b], bake: 1s}\n  - {name: rest, rest: true, bake: 1s}\n";
    let mut r = Replicas::start_with(&ids, &["a", "b", "c"], None, waves, Some("a")).await;
    // Dropped before `r`: a failure keeps the processes' logs.
    let _logs = KeepLogs(r.logs.clone());
    let leader =
        |hubs: &[HubProc]| eventually_blocking("a leader", || hubs.iter().position(is_leader));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = watch_for_blocked(
        r.agents[1..]
            .iter()
            .map(|a| (a.cluster.clone(), a.grpc))
            .collect(),
        stop.clone(),
    );

    // A change a's API server refuses: NACKed in wave 1, rolled back.
    write_atomic(
        &r.objects.join("reviews.yaml"),
        &vs("reviews", "blocked-v2"),
    );
    let li = leader(&r.hubs);
    let failed = eventually_blocking("the rollout rolls back", || {
        let v = rollout(&r.hubs[li]);
        (phase(&v) == "rolledBack").then_some(v)
    });
    assert_eq!(
        failed["rollout"]["phase"]["failure"]["cause"], "nack",
        "{failed}"
    );
    assert_eq!(
        failed["rollout"]["phase"]["failure"]["cluster"], "a",
        "{failed}"
    );
    let id = failed["rollout"]["id"].clone();
    let v1 = failed["rollout"]["targets"]["c"]["step"]["from"]
        .as_str()
        .expect("c's previous version")
        .to_owned();
    eventually_blocking("a holds v1 again", || {
        (hosts(r.agents[0].grpc, "a") == ["reviews-v1"]).then_some(())
    });

    // The rolling restart: each replica stopped as a pod is (SIGTERM) and
    // started again with an empty history.
    let mut restarts = Vec::new();
    for (i, id_i) in ids.iter().enumerate() {
        let stopped = Instant::now();
        r.hubs[i].proc.signal("TERM");
        r.hubs[i].proc.wait_exit();
        r.hubs[i] = r.start_hub(i, id_i, "upgraded");
        // Every replica serves the held clusters v1 and can produce it: the
        // restarted one read it from the archive (its sources build only
        // the blocked version).
        for (j, hub) in r.hubs.iter().enumerate() {
            let v = eventually_blocking(&format!("{} shows the rollout", ids[j]), || {
                let v = rollout(hub);
                (phase(&v) == "rolledBack"
                    && v["rollout"]["id"] == id
                    && v["unavailable"].as_object().is_none_or(|u| u.is_empty()))
                .then_some(v)
            });
            assert_eq!(v["standing"]["a"]["rollout"], id, "a's failure stands: {v}");
            for c in ["a", "b", "c"] {
                eventually_blocking(&format!("{} serves {c} v1", ids[j]), || {
                    (hosts(hub.grpc, c) == ["reviews-v1"]).then_some(())
                });
            }
        }
        restarts.push(stopped.elapsed());
    }
    for agent in &r.agents {
        assert_eq!(
            hosts(agent.grpc, &agent.cluster),
            ["reviews-v1"],
            "{}",
            agent.cluster
        );
    }
    // The versions are archived in the API, found by their labels.
    let cms: Api<ConfigMap> = Api::namespaced(r.planes.client("primary").await, "meshhub");
    let archived = cms
        .list(&::kube::api::ListParams::default().labels("meshhub.io/archive=version"))
        .await
        .unwrap();
    assert!(
        archived.items.iter().any(|cm| {
            cm.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l["meshhub.io/version"] == v1)
        }),
        "v1 ({v1}) archived"
    );

    // Pin a held cluster to its version, then unpin it: it never gets the
    // failed version, and rejoins the rolled-back rollout held.
    let li = leader(&r.hubs);
    let admin = format!("http://{}", r.hubs[li].admin);
    let (status, _, err) = meshhubctl(&["pin", "--admin", &admin, "--cluster", "c", "--to", &v1]);
    assert!(status.success(), "{err}");
    eventually_blocking("c is pinned in /rollout", || {
        let v = rollout(&r.hubs[li]);
        (v["rollout"]["targets"]["c"]["state"]["state"] == "pinned").then_some(())
    });
    let (status, _, err) = meshhubctl(&["unpin", "--admin", &admin, "--cluster", "c"]);
    assert!(status.success(), "{err}");
    let back = eventually_blocking("c rejoins the rollout", || {
        let v = rollout(&r.hubs[li]);
        (v["rollout"]["targets"]["c"]["state"]["state"] != "pinned").then_some(v)
    });
    assert_eq!(phase(&back), "rolledBack", "{back}");
    assert_eq!(hosts(r.agents[2].grpc, "c"), ["reviews-v1"]);

    // A fix: a new rollout, in wave order.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (looks, seen) = watcher.join().unwrap();
    assert!(
        seen.is_empty(),
        "held clusters received the failed version: {seen:?}"
    );
    assert!(
        looks > 20,
        "the agents were looked at throughout ({looks} looks)"
    );
    write_atomic(
        &r.objects.join("reviews.yaml"),
        &vs("reviews", "reviews-v3"),
    );
    let mut first_v3: Vec<Option<Instant>> = vec![None; 3];
    eventually_blocking("every cluster holds the fix", || {
        for (i, agent) in r.agents.iter().enumerate() {
            if first_v3[i].is_none() && hosts(agent.grpc, &agent.cluster) == ["reviews-v3"] {
                first_v3[i] = Some(Instant::now());
            }
        }
        first_v3.iter().all(Option::is_some).then_some(())
    });
    let at: Vec<Instant> = first_v3.into_iter().flatten().collect();
    assert!(
        at[0] <= at[1] && at[1] <= at[2],
        "wave order a, b, c: {at:?}"
    );
    let done = eventually_blocking("the fix's rollout completes", || {
        let v = rollout(&r.hubs[li]);
        (phase(&v) == "completed").then_some(v)
    });
    assert_ne!(done["rollout"]["id"], id, "a new rollout");
    println!(
        "rolling restart with empty histories: each replica back and serving the held clusters v1 in {:?}",
        restarts
            .iter()
            .map(|d| format!("{:.1} s", d.as_secs_f64()))
            .collect::<Vec<_>>()
    );
}

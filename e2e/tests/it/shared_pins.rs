//! Pins shared by hub replicas through the Kubernetes API, with a real
//! kube-apiserver: two hub processes (leader election on, each with its
//! own history directory, running as the hub's ServiceAccount with the
//! RBAC of deploy/rbac/hub.yaml) and one agent. A pin sent to one replica
//! is served by both (the agent, pushed by whichever leads, gets the
//! pinned content), and an unpin sent to the other lifts it on both.

use ::kube::Api;
use k8s_openapi::api::core::v1::ConfigMap;
use meshhub_e2e::kube::ControlPlanes;
use meshhub_e2e::*;
use meshhub_testkit::eventually_blocking;
use meshhub_testkit::fixtures::write_atomic;
use meshhub_testkit::objects::{VS, vs};
use serde_json::Value;

fn versions(hub: &HubProc) -> Vec<String> {
    let admin = format!("http://{}", hub.admin);
    let (status, out, _) = meshhubctl(&[
        "history",
        "--admin",
        &admin,
        "--cluster",
        "east",
        "-o",
        "json",
    ]);
    if !status.success() {
        return Vec::new();
    }
    let v: Value = serde_json::from_str(&out).unwrap();
    v["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

fn pin_of(hub: &HubProc) -> Option<Value> {
    hub.status()["pins"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["cluster"] == "east").cloned())
}

/// The hosts of the virtual services the agent serves.
fn agent_hosts(agent: &AgentProc) -> Vec<String> {
    let server = format!("http://{}", agent.grpc);
    let (status, out, _) = meshhubctl(&[
        "watch",
        "--server",
        &server,
        "--cluster",
        "east",
        "-c",
        VS,
        "--once",
        "-o",
        "json",
    ]);
    if !status.success() {
        return Vec::new();
    }
    out.lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|o| o["spec"]["hosts"][0].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_sent_to_one_replica_is_served_by_every_replica() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start_bare(&["primary"]).await;
    let kubeconfig = planes.hub_service_account("primary").await;

    let ProcTree { dir, logs, objects } = proc_tree("reviews-v1");
    let agent = AgentProc::start("east", dir.path(), &logs, None);
    let config = |id: &str| {
        let path = dir.path().join(format!("{id}.yaml"));
        let history = dir.path().join(format!("history-{id}"));
        std::fs::write(
            &path,
            replica_config(&objects, agent.sink, id, &kubeconfig)
                + &format!("history:\n  dir: {}\n", history.display()),
        )
        .unwrap();
        path
    };
    let a = HubProc::start("hub-a", &config("hub-a"), &logs);
    let b = HubProc::start("hub-b", &config("hub-b"), &logs);

    eventually_blocking("both recorded v1", || {
        (versions(&a).len() == 1 && versions(&b).len() == 1).then_some(())
    });
    write_atomic(&objects.join("reviews.yaml"), &vs("reviews", "reviews-v2"));
    eventually_blocking("both recorded v2", || {
        (versions(&a).len() == 2 && versions(&b).len() == 2).then_some(())
    });
    let (va, vb) = (versions(&a), versions(&b));
    assert_eq!(va, vb, "replicas name equal content alike");
    eventually_blocking("the agent serves v2", || {
        (agent_hosts(&agent) == ["reviews-v2"]).then_some(())
    });

    // Pin through replica a: both serve v1, whichever dials the agent.
    let admin_a = format!("http://{}", a.admin);
    let (status, out, err) = meshhubctl(&[
        "pin",
        "--admin",
        &admin_a,
        "--cluster",
        "east",
        "--to",
        &va[0],
        "--as",
        "alice",
    ]);
    assert!(status.success(), "{err}");
    assert!(out.contains("pinned to"), "{out}");
    for hub in [&a, &b] {
        let pin = eventually_blocking("the pin on both replicas", || pin_of(hub));
        assert_eq!(pin["version"], va[0].as_str());
        assert_eq!(pin["by"], "alice");
        assert_eq!(pin["behind"], 1);
    }
    let served = |hub: &HubProc| -> Option<String> {
        hub.status()["groups"]
            .as_array()?
            .iter()
            .find(|g| g["name"] == "east")?["collections"][VS]["version"]
            .as_str()
            .map(str::to_owned)
    };
    let (sa, sb) = (served(&a).unwrap(), served(&b).unwrap());
    assert!(sa.contains(".pin-"), "{sa}");
    assert_eq!(sa, sb, "both replicas serve the same pinned version");
    eventually_blocking("the agent serves the pinned v1", || {
        (agent_hosts(&agent) == ["reviews-v1"]).then_some(())
    });
    let cms: Api<ConfigMap> = Api::namespaced(planes.client("primary").await, "meshhub");
    let cm = cms.get("meshhub-pins").await.unwrap();
    let stored: Value = serde_json::from_str(&cm.data.unwrap()["east"]).unwrap();
    assert_eq!(stored["version"], va[0].as_str());

    // Unpin through replica b: lifted on both; the agent gets v2 again.
    let admin_b = format!("http://{}", b.admin);
    let (status, _, err) = meshhubctl(&["unpin", "--admin", &admin_b, "--cluster", "east"]);
    assert!(status.success(), "{err}");
    for hub in [&a, &b] {
        eventually_blocking("unpinned on both replicas", || {
            pin_of(hub).is_none().then_some(())
        });
    }
    eventually_blocking("the agent serves v2 again", || {
        (agent_hosts(&agent) == ["reviews-v2"]).then_some(())
    });
    let cm = cms.get("meshhub-pins").await.unwrap();
    assert!(!cm.data.unwrap_or_default().contains_key("east"));
}

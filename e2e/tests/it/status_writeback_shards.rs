//! Status write-back with sharded dial-out: two hub processes (4 shards,
//! the hub's ServiceAccount with the RBAC of deploy/rbac/hub.yaml,
//! hub-shards.yaml and hub-status-writeback.yaml) watch one real
//! kube-apiserver and dial six real agents, each replica some of them. One
//! replica writes (the holder of `<leaseName>-rollout`): the statuses count
//! every cluster — "ACKed by 6/6" — including those the other replica
//! dials, heard through their agents' reports; a spec change is ACKed by
//! 6/6 at its new generation. The other replica writes nothing.

use ::kube::Client;
use meshhub_e2e::kube::{ControlPlanes, apply_yaml, get, rbac_manifest};
use meshhub_e2e::yaml::cluster;
use meshhub_e2e::*;
use meshhub_testkit::eventually_blocking;
use meshhub_testkit::http::get_blocking;
use meshhub_testkit::objects::vs;
use serde_json::Value;

const NET: &str = "networking.istio.io/v1";
const IDS: [&str; 2] = ["hub-a", "hub-b"];
const CLUSTERS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

/// The `Distributed` condition of `bookinfo/reviews` once it is about the
/// object's generation.
async fn distributed(client: &Client) -> Option<Value> {
    let obj = get(client, NET, "VirtualService", "bookinfo", "reviews").await?;
    let obj = serde_json::to_value(obj).ok()?;
    let generation = &obj["metadata"]["generation"];
    let c = obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Distributed")?
        .clone();
    (c["observedGeneration"] == *generation).then_some(c)
}

/// The status writes `hub` made.
fn writes(hub: &HubProc) -> f64 {
    let (_, text) = eventually_blocking("hub /metrics", || get_blocking(hub.admin, "/metrics"));
    text.lines()
        .filter(|l| l.starts_with("meshhub_status_writeback_writes_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_replicas_write_statuses_that_count_every_cluster() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start_bare(&["primary"]).await;
    planes.install_istio_crds("primary", &[]).await;
    planes.namespace("primary", "bookinfo").await;
    let admin = planes.client("primary").await;
    let kubeconfig = planes.hub_service_account("primary").await;
    for rbac in ["hub-shards.yaml", "hub-status-writeback.yaml"] {
        apply_yaml(&admin, &rbac_manifest(rbac)).await;
    }
    apply_yaml(&admin, &vs("reviews", "reviews-v1")).await;

    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let agents: Vec<AgentProc> = CLUSTERS
        .iter()
        .map(|c| AgentProc::start(c, dir.path(), &logs, None))
        .collect();
    let entries: String = agents
        .iter()
        .map(|a| cluster(&a.cluster, "", format!("http://{}", a.sink), ""))
        .collect();
    let hubs: Vec<HubProc> = IDS
        .iter()
        .map(|id| {
            let path = dir.path().join(format!("{id}.yaml"));
            let text = format!(
                "sources:\n  - name: primary\n    kubernetes:\n      kubeconfig: {kc}\n      namespaces: [bookinfo]\n      statusWriteBack: {{enabled: true}}\nclusters:\n{entries}leaderElection:\n  enabled: true\n  namespace: meshhub\n  identity: {id}\n  shards: 4\n  leaseDuration: 3s\n  renewDeadline: 2s\n  retryPeriod: 500ms\n  kubeconfig: {kc}\ndebounce:\n  quiet: 20ms\n  maxWait: 200ms\n",
                kc = kubeconfig.display(),
            );
            std::fs::write(&path, text).unwrap();
            HubProc::start(id, &path, &logs)
        })
        .collect();

    // Both replicas dial some of the clusters.
    let dialed_by = shard_dialers(&hubs, 2, &CLUSTERS);
    for id in IDS {
        assert!(
            dialed_by.iter().any(|d| d == id),
            "{id} dials none of the clusters: {dialed_by:?}"
        );
    }

    // Every cluster counted, whichever replica dials it.
    let c = meshhub_testkit::eventually_some("reviews ACKed by 6/6", async || {
        distributed(&admin).await.filter(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(c["message"], "ACKed by 6/6 clusters", "{c}");

    // One replica writes; the other never does.
    let (wa, wb) = (writes(&hubs[0]), writes(&hubs[1]));
    assert!(
        (wa > 0.0) != (wb > 0.0),
        "exactly one replica writes: {IDS:?} wrote {wa} and {wb}"
    );
    let writer = if wa > 0.0 { 0 } else { 1 };
    println!(
        "status writer: {}; clusters dialed by the other replica: {:?}",
        IDS[writer],
        CLUSTERS
            .iter()
            .zip(&dialed_by)
            .filter(|(_, d)| d.as_str() != IDS[writer])
            .map(|(c, _)| *c)
            .collect::<Vec<_>>()
    );

    // A spec change: ACKed by every cluster at its new generation.
    apply_yaml(&admin, &vs("reviews", "reviews-v2")).await;
    let c = meshhub_testkit::eventually_some("the change ACKed by 6/6", async || {
        distributed(&admin)
            .await
            .filter(|c| c["observedGeneration"] == 2 && c["status"] == "True")
    })
    .await;
    assert_eq!(c["message"], "ACKed by 6/6 clusters", "{c}");
    assert_eq!(writes(&hubs[1 - writer]), 0.0, "the other replica wrote");
    drop(hubs);
    drop(agents);
    drop(planes);
}

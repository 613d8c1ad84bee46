//! Three real Kubernetes clusters (a primary and two remotes, each a real
//! kube-apiserver) with the real binaries: the hub watches the primary's
//! API; a sink agent per remote applies what it receives to its own API.
//!
//! Covered: create, update, delete (prune), targeting one cluster, an
//! invalid object reaching no one, a hand edit repaired, a kind whose CRD
//! is missing in one remote (NACKed there, SYNCED in the other), a remote
//! API server stopped and restarted losing nothing, and the latency from a
//! primary write to the object in both remote APIs (printed).

use std::path::Path;
use std::time::{Duration, Instant};

use ::kube::api::{Api, DynamicObject, Patch, PatchParams};
use meshhub_e2e::kube::{ControlPlanes, apply_yaml, delete, get, rbac_manifest};
use meshhub_e2e::yaml::cluster;
use meshhub_e2e::*;
use meshhub_testkit::objects::{virtual_service, vs};
use meshhub_testkit::{DEADLINE, eventually_some};
use serde_json::Value;

const NET: &str = "networking.istio.io/v1";
const GW: &str = "istio/networking/v1alpha3/gateways";

async fn host_of(client: &::kube::Client, name: &str) -> Option<String> {
    get(client, NET, "VirtualService", "bookinfo", name)
        .await
        .and_then(|o| o.data["spec"]["hosts"][0].as_str().map(str::to_owned))
}

fn hub_config(primary: &Path, east: std::net::SocketAddr, west: std::net::SocketAddr) -> String {
    let bookinfo = "    namespaces: [bookinfo]\n";
    format!(
        "sources:\n  - name: primary\n    kubernetes:\n      kubeconfig: {}\n      namespaces: [bookinfo]\nclusters:\n{}{}debounce:\n  quiet: 20ms\n  maxWait: 200ms\n",
        primary.display(),
        cluster("east", bookinfo, format!("http://{east}"), ""),
        cluster("west", bookinfo, format!("http://{west}"), "")
    )
}

fn remote_collection<'a>(status: &'a Value, cluster: &str, collection: &str) -> &'a Value {
    &remote(status, cluster)["collections"][collection]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_objects_reach_the_remote_apis() {
    let _turn = turn(module_path!());
    let mut planes = ControlPlanes::start_bare(&["primary", "east", "west"]).await;
    planes.install_istio_crds("primary", &[]).await;
    planes.install_istio_crds("east", &[]).await;
    // west lacks the Gateway CRD: Gateways are NACKed there.
    planes.install_istio_crds("west", &["Gateway"]).await;
    for c in ["primary", "east", "west"] {
        planes.namespace(c, "bookinfo").await;
    }
    let primary = planes.client("primary").await;
    let east_kube = planes.client("east").await;
    let west_kube = planes.client("west").await;
    apply_yaml(&primary, &vs("reviews", "reviews")).await;

    // The hub and the agents run as ServiceAccounts bound by the RBAC
    // shipped in deploy/rbac/, with tokens from the TokenRequest API: that
    // RBAC is enough for everything below.
    let hub_kubeconfig = planes.hub_service_account("primary").await;
    let mut agent_kubeconfigs = std::collections::BTreeMap::new();
    for (name, client) in [("east", &east_kube), ("west", &west_kube)] {
        planes.namespace(name, "meshhub").await;
        apply_yaml(client, &rbac_manifest("sink-agent.yaml")).await;
        agent_kubeconfigs.insert(
            name,
            planes
                .service_account_kubeconfig(name, "meshhub", "meshhub-agent")
                .await,
        );
    }
    // ... and no more: the hub's account cannot write.
    let as_hub = meshhub_e2e::kube::client_from_kubeconfig(&hub_kubeconfig).await;
    let probe = get(&as_hub, NET, "VirtualService", "bookinfo", "reviews")
        .await
        .expect("the hub's account reads VirtualServices");
    let api = meshhub_e2e::kube::api_for(&as_hub, &probe).await;
    let denied = api
        .patch(
            "reviews",
            &PatchParams::apply("intruder"),
            &Patch::Apply(serde_json::json!({
                "apiVersion": NET, "kind": "VirtualService",
                "metadata": {"name": "reviews", "namespace": "bookinfo"},
                "spec": {"hosts": ["evil"]},
            })),
        )
        .await;
    assert!(
        matches!(&denied, Err(::kube::Error::Api(s)) if s.code == 403),
        "the hub's account must not write: {denied:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    // west's periodic resync is far away: what repairs its storage loss
    // (step 8) is the re-list when its watch comes back, not the timer.
    let agent = |name: &str, resync: &str| {
        let kubeconfig = agent_kubeconfigs[name].display().to_string();
        AgentProc::start_with(
            name,
            dir.path(),
            &logs,
            None,
            &[
                "--apply".to_owned(),
                "--apply-kubeconfig".to_owned(),
                kubeconfig,
                "--apply-resync".to_owned(),
                resync.to_owned(),
            ],
        )
    };
    let east = agent("east", "2s");
    let west = agent("west", "1h");
    let config = dir.path().join("meshhub.yaml");
    std::fs::write(&config, hub_config(&hub_kubeconfig, east.sink, west.sink)).unwrap();
    let hub = HubProc::start("hub", &config, &logs);

    // 1. The primary's object lands in both remote APIs, marked as ours.
    for (name, client) in [("east", &east_kube), ("west", &west_kube)] {
        let obj = eventually_some(&format!("reviews in {name}"), async || {
            get(client, NET, "VirtualService", "bookinfo", "reviews").await
        })
        .await;
        let labels = obj.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels["app.kubernetes.io/managed-by"], "meshhub", "{name}");
        let annotations = obj.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations["meshhub.io/source-cluster"], "primary");
        let primary_rv = get(&primary, NET, "VirtualService", "bookinfo", "reviews")
            .await
            .unwrap()
            .metadata
            .resource_version;
        assert_eq!(
            annotations.get("meshhub.io/hub-version"),
            primary_rv.as_ref(),
            "{name}: the hub version is the primary's resourceVersion"
        );
        let managers: Vec<String> = obj
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| m.manager)
            .collect();
        assert!(
            managers.iter().any(|m| m == "meshhub"),
            "{name}: {managers:?}"
        );
    }

    // 2. An update propagates.
    apply_yaml(&primary, &vs("reviews", "reviews-v2")).await;
    for (name, client) in [("east", &east_kube), ("west", &west_kube)] {
        eventually_some(&format!("the update in {name}"), async || {
            (host_of(client, "reviews").await.as_deref() == Some("reviews-v2")).then_some(())
        })
        .await;
    }

    // 3. Targeting: only east receives it.
    apply_yaml(
        &primary,
        &virtual_service(
            "east-only",
            "bookinfo",
            "east-only",
            "  annotations: {meshhub.io/clusters: east}\n",
        ),
    )
    .await;
    eventually_some("east-only in east", async || {
        host_of(&east_kube, "east-only").await
    })
    .await;

    // 4. An invalid object is reported by the hub and reaches no one.
    apply_yaml(
        &primary,
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: broken, namespace: bookinfo}\nspec:\n  hosts: [broken]\n  http:\n  - route:\n    - destination: {host: broken}\n      weight: -5\n",
    )
    .await;
    let status = eventually_some("the hub reports the invalid object", async || {
        let s = hub.status();
        s["rejected"]
            .as_array()?
            .iter()
            .any(|r| r["name"] == "bookinfo/broken")
            .then_some(s)
    })
    .await;
    assert!(
        status["rejected"]
            .to_string()
            .contains("must not be negative")
    );

    // 5. A Gateway: east applies it, west has no CRD for it and NACKs.
    apply_yaml(
        &primary,
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: ingress, namespace: bookinfo}\nspec:\n  selector: {istio: ingressgateway}\n  servers:\n  - port: {number: 80, name: http, protocol: HTTP}\n    hosts: ['*']\n",
    )
    .await;
    eventually_some("the Gateway in east", async || {
        get(&east_kube, NET, "Gateway", "bookinfo", "ingress").await
    })
    .await;
    let status = eventually_some("west NACKs the Gateways, east is SYNCED", async || {
        let s = hub.status();
        (remote_collection(&s, "west", GW)["state"] == "NACKED" && synced(&s, "east", GW))
            .then_some(s)
    })
    .await;
    let nack = remote_collection(&status, "west", GW)["nacked"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        nack.contains("does not serve networking.istio.io/Gateway"),
        "{nack}"
    );
    // The targeted and invalid objects never reached west; everything else
    // in it is in sync.
    assert!(host_of(&west_kube, "east-only").await.is_none());
    assert!(host_of(&west_kube, "broken").await.is_none());
    assert!(host_of(&east_kube, "broken").await.is_none());
    // meshhubctl shows the NACK.
    let (ok, out, err) = meshhubctl(&["status", "--admin", &format!("http://{}", hub.admin)]);
    assert!(ok.success(), "{err}");
    assert!(out.contains("NACKED"), "{out}");

    // 6. A delete prunes, everywhere.
    assert!(delete(&primary, NET, "VirtualService", "bookinfo", "east-only").await);
    eventually_some("east-only pruned from east", async || {
        host_of(&east_kube, "east-only")
            .await
            .is_none()
            .then_some(())
    })
    .await;

    // 7. A hand edit in a remote is repaired.
    let api: Api<DynamicObject> = {
        let probe = get(&east_kube, NET, "VirtualService", "bookinfo", "reviews")
            .await
            .unwrap();
        meshhub_e2e::kube::api_for(&east_kube, &probe).await
    };
    api.patch(
        "reviews",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"hosts": ["hand-edited"]}})),
    )
    .await
    .unwrap();
    eventually_some("the hand edit repaired", async || {
        (host_of(&east_kube, "reviews").await.as_deref() == Some("reviews-v2")).then_some(())
    })
    .await;

    // 8. A remote API server loses `reviews` from its storage while it is
    // down (a restore of an older etcd backup). No watch event names that,
    // nothing is sent meanwhile, and west's periodic resync is an hour
    // away: the agent's re-list when its watch comes back must repair it.
    planes.stop("west");
    assert_eq!(
        planes
            .delete_from_etcd(
                "west",
                "networking.istio.io/virtualservices/bookinfo/reviews"
            )
            .await,
        1,
        "reviews was in west's etcd"
    );
    planes.restart("west").await;
    let west_kube = planes.client("west").await;
    eventually_some("reviews, lost from west's storage, repaired", async || {
        (host_of(&west_kube, "reviews").await.as_deref() == Some("reviews-v2")).then_some(())
    })
    .await;

    // A remote API server stops; changes made meanwhile arrive once it is
    // back.
    planes.stop("west");
    apply_yaml(&primary, &vs("while-down", "while-down")).await;
    eventually_some("while-down in east", async || {
        host_of(&east_kube, "while-down").await
    })
    .await;
    planes.restart("west").await;
    let west_kube = planes.client("west").await;
    eventually_some("while-down in west after its API restarted", async || {
        host_of(&west_kube, "while-down").await
    })
    .await;
    assert_eq!(
        host_of(&west_kube, "reviews").await.as_deref(),
        Some("reviews-v2")
    );

    // 9. Latency: primary write → object in both remote APIs.
    let mut samples = Vec::new();
    for i in 0..20 {
        let host = format!("latency-{i}");
        let started = Instant::now();
        apply_yaml(&primary, &vs("latency", &host)).await;
        let (mut e, mut w) = (None, None);
        let end = Instant::now() + DEADLINE;
        while e.is_none() || w.is_none() {
            if e.is_none() && host_of(&east_kube, "latency").await.as_deref() == Some(host.as_str())
            {
                e = Some(started.elapsed());
            }
            if w.is_none() && host_of(&west_kube, "latency").await.as_deref() == Some(host.as_str())
            {
                w = Some(started.elapsed());
            }
            assert!(
                Instant::now() < end,
                "timed out waiting for the latency change {i}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        samples.push(e.unwrap().max(w.unwrap()));
    }
    samples.sort();
    let pct = |p: f64| samples[((samples.len() as f64 * p).ceil() as usize).min(samples.len()) - 1];
    println!(
        "kube e2e latency (primary write -> both remote APIs, n={}, debounce 20ms/200ms): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        samples.len(),
        pct(0.50).as_secs_f64() * 1e3,
        pct(0.99).as_secs_f64() * 1e3,
        samples.last().unwrap().as_secs_f64() * 1e3,
    );

    // 10. Drift made while an agent was down is repaired when it starts,
    // from its persisted state alone (the hub is gone: no push helps).
    let mut hub = hub;
    hub.proc.kill();
    let mut east = east;
    east.proc.kill();
    api.patch(
        "reviews",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"hosts": ["edited-while-down"]}})),
    )
    .await
    .unwrap();
    east.crash_and_restart(dir.path(), &logs);
    eventually_some("the drift repaired at the agent's start", async || {
        (host_of(&east_kube, "reviews").await.as_deref() == Some("reviews-v2")).then_some(())
    })
    .await;
    drop(west);
}

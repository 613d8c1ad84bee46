//! The figure of issue 39: the time from a route written in the primary
//! to its `Accepted` written back there from three clusters. Real parts:
//! four kube-apiservers (a primary and three remotes, each with the
//! Gateway API CRDs of the module meshhub tracks, read from the Go module
//! cache at test time), a real agent with `--apply` and a real istiod
//! 1.28.3 reading its own cluster's API in each remote, and the real hub
//! watching the primary with status write-back. Each route is written,
//! then timed until the primary's object carries meshhub's `status.parents`
//! entry "Accepted by 3/3 clusters" — through the hub's debounce and
//! fan-out, each agent's apply, each istiod's status write, each agent's
//! report and the hub's write-back. Printed, not asserted (a benchmark's
//! figure on shared cores).

use std::time::{Duration, Instant};

use meshhub_e2e::gateway_api::{GATEWAY, applying_agent, prepare_remote};
use meshhub_e2e::istio::{ConfigSource, ISTIOD_START, Istiod, istiod_bin};
use meshhub_e2e::kube::{ControlPlanes, apply_yaml, get, rbac_manifest};
use meshhub_e2e::yaml::cluster;
use meshhub_e2e::*;
use meshhub_testkit::eventually_some;
use serde_json::Value;

const REMOTES: [&str; 3] = ["c1", "c2", "c3"];
/// Routes written and timed one after another.
const ROUTES: usize = 10;

fn route(name: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: bookinfo}}
spec:
  parentRefs: [{{name: ingress}}]
  hostnames: [{name}.example.com]
  rules:
  - backendRefs: [{{name: reviews, port: 9080}}]
"
    )
}

/// meshhub's `Accepted` condition on the primary's route `name`.
async fn written_back(primary: &::kube::Client, name: &str) -> Option<Value> {
    let obj = get(
        primary,
        "gateway.networking.k8s.io/v1",
        "HTTPRoute",
        "bookinfo",
        name,
    )
    .await?;
    obj.data["status"]["parents"]
        .as_array()?
        .iter()
        .find(|p| p["controllerName"] == "meshhub.io/hub")
        .map(|p| p["conditions"][0].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_written_in_the_primary_is_accepted_by_three_clusters_istiods_and_written_back() {
    let _turn = turn(module_path!());
    let mut names = vec!["primary"];
    names.extend(REMOTES);
    let planes = ControlPlanes::start_bare(&names).await;
    for c in &names {
        planes.install_istio_crds(c, &[]).await;
        planes.namespace(c, "bookinfo").await;
        meshhub_e2e::gateway_api::install(&planes, c, "standard").await;
    }
    let primary = planes.client("primary").await;
    let hub_kubeconfig = planes.hub_service_account("primary").await;
    apply_yaml(&primary, &rbac_manifest("hub-status-writeback.yaml")).await;
    apply_yaml(&primary, GATEWAY).await;

    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut agents = Vec::new();
    let mut clusters = String::new();
    for r in REMOTES {
        let kubeconfig = prepare_remote(&planes, r).await;
        let agent = applying_agent(r, dir.path(), &logs, &kubeconfig);
        clusters.push_str(&cluster(
            r,
            "    namespaces: [bookinfo]\n",
            format!("http://{}", agent.sink),
            "",
        ));
        agents.push(agent);
    }
    let config = dir.path().join("meshhub.yaml");
    std::fs::write(
        &config,
        format!(
            "sources:\n  - name: primary\n    kubernetes:\n      kubeconfig: {}\n      namespaces: [bookinfo]\n      statusWriteBack: {{enabled: true, qps: 50, burst: 50}}\nclusters:\n{clusters}debounce:\n  quiet: 20ms\n  maxWait: 200ms\n",
            hub_kubeconfig.display()
        ),
    )
    .unwrap();
    let _hub = HubProc::start("hub", &config, &logs);
    let mut istiods: Vec<Istiod> = REMOTES
        .iter()
        .map(|r| {
            Istiod::spawn(
                &format!("istiod-{r}"),
                istiod_bin(),
                &planes.cluster(r).kubeconfig,
                ConfigSource::Kubernetes,
                dir.path(),
                &logs,
            )
        })
        .collect();
    tokio::task::block_in_place(|| {
        for i in &mut istiods {
            i.wait_ready(ISTIOD_START);
        }
    });
    // Every istiod has taken the Gateway: what follows times routes only.
    eventually_some("the Gateway accepted by 3/3 clusters", async || {
        let obj = get(
            &primary,
            "gateway.networking.k8s.io/v1",
            "Gateway",
            "bookinfo",
            "ingress",
        )
        .await?;
        obj.data["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| {
                c["type"] == "meshhub.io/Accepted"
                    && c["status"] == "True"
                    && c["message"] == "Accepted by 3/3 clusters"
            })
            .cloned()
    })
    .await;

    let mut took: Vec<Duration> = Vec::with_capacity(ROUTES);
    for i in 0..ROUTES {
        let name = format!("r{i}");
        let started = Instant::now();
        apply_yaml(&primary, &route(&name)).await;
        let c = eventually_some(
            "the route accepted by 3/3 clusters, written back",
            async || {
                written_back(&primary, &name)
                    .await
                    .filter(|c| c["status"] == "True")
            },
        )
        .await;
        took.push(started.elapsed());
        assert_eq!(c["message"], "Accepted by 3/3 clusters", "{c}");
        assert_eq!(c["reason"], "Accepted", "{c}");
        // meshhub's entry names the parent as the route's spec does.
        let obj = get(
            &primary,
            "gateway.networking.k8s.io/v1",
            "HTTPRoute",
            "bookinfo",
            &name,
        )
        .await
        .unwrap();
        let ours = obj.data["status"]["parents"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["controllerName"] == "meshhub.io/hub"))
            .unwrap_or_else(|| panic!("{:?}", obj.data["status"]));
        assert_eq!(ours["parentRef"]["name"], "ingress", "{ours}");
    }
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "e2e figure: route written in the primary → Accepted by 3/3 clusters' istiods written back ({ROUTES} routes, one at a time): p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms",
        ms(took[ROUTES / 2]),
        ms(took[ROUTES * 9 / 10]),
        ms(took[ROUTES - 1])
    );
    drop(istiods);
    drop(agents);
}

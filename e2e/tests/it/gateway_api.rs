//! The Kubernetes Gateway API as built-in kinds (issue 39, first slice),
//! with real parts: three real kube-apiservers (a primary and two remotes),
//! the Gateway API CRDs of the module meshhub tracks (read from the Go
//! module cache at test time) installed in the primary and in `east` but
//! not in `bare`, the real hub watching the primary and a real agent with
//! `--apply` per remote, all through the RBAC shipped in deploy/rbac/.
//!
//! Covered: a Gateway and an HTTPRoute written to the primary reach
//! east's API, applied and managed by meshhub; `bare`'s agent reports
//! that its cluster lacks the CRDs, so the hub withholds the Gateway API
//! collections from it (served empty and ACKed, not NACKed) and says so
//! per cluster on `/status` and in `meshhubctl status`, while its Istio
//! objects still arrive.
//!
//! The real status comes back (item 4): a real istiod 1.28.3 in east reads
//! east's own API (no `configSources`: the Gateway API never travels over
//! MCP), accepts the route and writes its status; east's agent reports it,
//! and the hub's `/status` and `meshhubctl describe` say east accepted the
//! route, with the conditions istiod wrote. A route naming a listener its
//! Gateway lacks is refused by that istiod (`Accepted=False`), and
//! `describe` says where and why. Status write-back puts it on the
//! primary's objects in the Gateway API's own shape: a `status.parents`
//! entry per parent under controller `meshhub.io/hub` ("Accepted by 1/1
//! clusters", or east's refusal), beside any other controller's, and a
//! `meshhub.io/Accepted` condition on the Gateway; the time from a route
//! written in the primary to its `Accepted` written back is printed.
//!
//! The staged rollout gates on it (east is the canary): a change of the
//! route that east's istiod refuses (`Accepted=False`) fails the wave and
//! rolls east back to the route it accepted.

use std::path::Path;

use meshhub_e2e::gateway_api::{GATEWAY, applying_agent, prepare_remote};
use meshhub_e2e::istio::{ConfigSource, ISTIOD_START, Istiod, istiod_bin};
use meshhub_e2e::kube::{ControlPlanes, apply_yaml, get, rbac_manifest};
use meshhub_e2e::yaml::cluster;
use meshhub_e2e::*;
use meshhub_testkit::eventually_some;
use meshhub_testkit::objects::vs;
use serde_json::Value;

const GATEWAY_API: &str = "gateway.networking.k8s.io/v1";
const NET: &str = "networking.istio.io/v1";
const ROUTES: &str = "k8s/gateway.networking.k8s.io/v1/httproutes";
const GATEWAYS: &str = "k8s/gateway.networking.k8s.io/v1/gateways";
const VS: &str = "istio/networking/v1alpha3/virtualservices";

const ROUTE: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: reviews, namespace: bookinfo}
spec:
  parentRefs: [{name: ingress}]
  hostnames: [reviews.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /reviews}}]
    backendRefs: [{name: reviews, port: 9080}]
";

/// A route naming a listener its parent Gateway lacks (istiod refuses it:
/// a route whose parent Gateway does not exist at all gets no status from
/// istiod, which can't tell whether that parent would be its own).
const ORPHAN: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: orphan, namespace: bookinfo}
spec:
  parentRefs: [{name: ingress, sectionName: https}]
  rules:
  - backendRefs: [{name: reviews, port: 9080}]
";

fn hub_config(primary: &Path, east: std::net::SocketAddr, bare: std::net::SocketAddr) -> String {
    let bookinfo = "    namespaces: [bookinfo]\n";
    format!(
        "sources:\n  - name: primary\n    kubernetes:\n      kubeconfig: {}\n      namespaces: [bookinfo]\n      statusWriteBack: {{enabled: true, qps: 50, burst: 50}}\nclusters:\n{}{}debounce:\n  quiet: 20ms\n  maxWait: 200ms\nhistory:\n  dir: history\nrollout:\n  progressDeadline: 1m\n  waves:\n  - name: canary\n    clusters: [east]\n    bake: 1s\n  - name: others\n    clusters: [bare]\n    bake: 1s\n",
        primary.display(),
        cluster("east", bookinfo, format!("http://{east}"), ""),
        cluster("bare", bookinfo, format!("http://{bare}"), "")
    )
}

/// The `/status` rows withholding `collection` from `cluster`.
fn withheld<'a>(status: &'a Value, cluster: &str, collection: &str) -> Option<&'a Value> {
    status["withheld"]
        .as_array()?
        .iter()
        .find(|w| w["cluster"] == cluster && w["collection"] == collection)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_api_objects_reach_clusters_with_the_crds_and_are_withheld_from_the_others() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start_bare(&["primary", "east", "bare"]).await;
    for c in ["primary", "east", "bare"] {
        planes.install_istio_crds(c, &[]).await;
        planes.namespace(c, "bookinfo").await;
    }
    for c in ["primary", "east"] {
        meshhub_e2e::gateway_api::install(&planes, c, "standard").await;
    }
    let primary = planes.client("primary").await;
    let east_kube = planes.client("east").await;
    let bare_kube = planes.client("bare").await;
    apply_yaml(&primary, GATEWAY).await;
    apply_yaml(&primary, ROUTE).await;
    apply_yaml(&primary, ORPHAN).await;
    apply_yaml(&primary, &vs("reviews", "reviews")).await;

    let hub_kubeconfig = planes.hub_service_account("primary").await;
    apply_yaml(&primary, &rbac_manifest("hub-status-writeback.yaml")).await;
    let mut agent_kubeconfigs = std::collections::BTreeMap::new();
    for name in ["east", "bare"] {
        agent_kubeconfigs.insert(name, prepare_remote(&planes, name).await);
    }
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let agent = |name: &str| applying_agent(name, dir.path(), &logs, &agent_kubeconfigs[name]);
    let east = agent("east");
    let bare = agent("bare");
    let config = dir.path().join("meshhub.yaml");
    std::fs::write(&config, hub_config(&hub_kubeconfig, east.sink, bare.sink)).unwrap();
    let hub = HubProc::start("hub", &config, &logs);
    // east's istiod reads east's own API, as istiod does without meshhub:
    // the Gateway API reaches it only through the agent's applier.
    let mut istiod = Istiod::spawn(
        "istiod-east",
        istiod_bin(),
        &planes.cluster("east").kubeconfig,
        ConfigSource::Kubernetes,
        dir.path(),
        &logs,
    );
    tokio::task::block_in_place(|| istiod.wait_ready(ISTIOD_START));

    // 1. The Gateway and the route land in east's API, managed by meshhub,
    //    their spec as written in the primary.
    let route = eventually_some("the HTTPRoute in east", async || {
        get(&east_kube, GATEWAY_API, "HTTPRoute", "bookinfo", "reviews").await
    })
    .await;
    let labels = route.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "meshhub");
    assert_eq!(route.data["spec"]["parentRefs"][0]["name"], "ingress");
    assert_eq!(
        route.data["spec"]["hostnames"][0], "reviews.example.com",
        "{route:?}"
    );
    let gateway = eventually_some("the Gateway in east", async || {
        get(&east_kube, GATEWAY_API, "Gateway", "bookinfo", "ingress").await
    })
    .await;
    assert_eq!(gateway.data["spec"]["gatewayClassName"], "istio");
    assert_eq!(gateway.data["spec"]["listeners"][0]["port"], 80);

    // 2. bare's agent reports no Gateway API CRD: the hub withholds both
    //    collections there (served empty: SYNCED, not NACKED), says why,
    //    and bare's Istio objects arrive all the same.
    let status = eventually_some("the Gateway API withheld from bare", async || {
        let s = hub.status();
        (withheld(&s, "bare", ROUTES).is_some()
            && withheld(&s, "bare", GATEWAYS).is_some()
            && synced(&s, "bare", ROUTES)
            && synced(&s, "bare", GATEWAYS)
            && synced(&s, "east", ROUTES)
            && synced(&s, "bare", VS))
        .then_some(s)
    })
    .await;
    let row = withheld(&status, "bare", ROUTES).unwrap();
    assert_eq!(row["objects"], 2, "{row}");
    let reason = row["reason"].as_str().unwrap();
    assert!(
        reason.contains("cluster bare lacks the CRD httproutes.gateway.networking.k8s.io"),
        "{reason}"
    );
    assert!(
        withheld(&status, "east", ROUTES).is_none(),
        "east has the CRDs: {}",
        status["withheld"]
    );
    let group = |name: &str| {
        status["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(group("bare")["collections"][ROUTES]["resources"], 0);
    assert_eq!(group("east")["collections"][ROUTES]["resources"], 2);
    // What each agent reported of its CRDs.
    let crds = |name: &str| -> Vec<String> {
        remote(&status, name)["report"]["gateway_api"]["crds"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        crds("east").contains(&"httproutes.gateway.networking.k8s.io".to_owned()),
        "{:?}",
        crds("east")
    );
    assert!(crds("bare").is_empty(), "{:?}", crds("bare"));
    assert!(
        remote(&status, "bare")["report"]["gateway_api"].is_object(),
        "bare reported (an empty list)"
    );
    eventually_some("the VirtualService in bare", async || {
        get(&bare_kube, NET, "VirtualService", "bookinfo", "reviews").await
    })
    .await;
    assert_eq!(
        remote_state(&status, "bare", ROUTES),
        "SYNCED",
        "withheld, not refused"
    );

    // 3. meshhubctl says it per cluster.
    let (ok, out, err) = meshhubctl(&["status", "--admin", &format!("http://{}", hub.admin)]);
    assert!(ok.success(), "{err}");
    assert!(
        out.contains(&format!(
            "WITHHELD: 2 object(s) of {ROUTES} from cluster bare: cluster bare lacks the CRD"
        )),
        "{out}"
    );
    let admin = format!("http://{}", hub.admin);
    let (ok, out, err) = meshhubctl(&[
        "describe",
        "HTTPRoute",
        "bookinfo/reviews",
        "--admin",
        &admin,
    ]);
    assert!(ok.success(), "{err}");
    assert!(
        out.contains("WITHHELD from bare: cluster bare lacks the CRD"),
        "{out}"
    );
    assert!(!out.contains("WITHHELD from east"), "{out}");

    // 4. east's istiod accepts the route and writes its status; the agent
    //    reports it and the hub shows it per cluster.
    let accepted = |s: &Value, name: &str| -> Option<Value> {
        remote(s, "east")["report"]["gateway_api_status"]["objects"]
            .as_array()?
            .iter()
            .find(|o| o["collection"] == ROUTES && o["name"] == name)
            .cloned()
    };
    let reviews = eventually_some("east's istiod accepting the route", async || {
        let s = hub.status();
        accepted(&s, "bookinfo/reviews").filter(|o| {
            o["parents"][0]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Accepted" && c["status"] == "True")
            })
        })
    })
    .await;
    let parent = &reviews["parents"][0];
    assert_eq!(parent["name"], "ingress", "{reviews}");
    assert_eq!(
        parent["controller"], "istio.io/gateway-controller",
        "{reviews}"
    );
    assert!(
        reviews["version"].as_str().is_some_and(|v| !v.is_empty()),
        "the hub's version of the route: {reviews}"
    );
    let orphan = eventually_some("east's istiod refusing the orphan route", async || {
        let s = hub.status();
        accepted(&s, "bookinfo/orphan").filter(|o| {
            o["parents"][0]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Accepted" && c["status"] == "False")
            })
        })
    })
    .await;
    let (ok, out, err) = meshhubctl(&[
        "describe",
        "HTTPRoute",
        "bookinfo/reviews",
        "--admin",
        &admin,
    ]);
    assert!(ok.success(), "{err}");
    assert!(out.contains("ACCEPTED"), "{out}");
    let reported = out
        .split_once("Reported by the clusters:")
        .map(|(_, r)| r)
        .unwrap_or_else(|| panic!("no reported section: {out}"));
    let east_row = reported
        .lines()
        .find(|l| l.trim_start().starts_with("east "))
        .unwrap_or_else(|| panic!("east's row: {out}"));
    assert!(east_row.trim_end().ends_with("yes"), "{east_row}");
    assert!(
        out.contains("Gateway bookinfo/ingress") && out.contains("Accepted=True"),
        "{out}"
    );
    let (ok, out, err) = meshhubctl(&[
        "describe",
        "HTTPRoute",
        "bookinfo/orphan",
        "--admin",
        &admin,
    ]);
    assert!(ok.success(), "{err}");
    // The analysis flagged it per cluster before istiod did.
    assert!(
        out.contains("east: Warning [MH0004]") && out.contains("has no listener \"https\""),
        "{out}"
    );
    // east has no Service `reviews` (its agent lists east's Services):
    // IST0101 there, as istiod's `ResolvedRefs=False` `BackendNotFound`.
    let out = eventually_some("IST0101 for east's missing backend", async || {
        let (ok, out, _) = meshhubctl(&[
            "describe",
            "HTTPRoute",
            "bookinfo/orphan",
            "--admin",
            &admin,
        ]);
        (ok.success()
            && out.contains("east: Error [IST0101]")
            && out.contains("Referenced Service not found: \"bookinfo/reviews\""))
        .then_some(out)
    })
    .await;
    assert!(
        out.contains("no: Gateway bookinfo/ingress (https): NoMatchingParent"),
        "the refusal names the parent: {out}\n{orphan}"
    );
    let (ok, status_text, err) = meshhubctl(&["status", "--admin", &admin]);
    assert!(ok.success(), "{err}");
    assert!(
        status_text.contains("NOT ACCEPTED in cluster east: httproutes bookinfo/orphan: Gateway bookinfo/ingress (https): NoMatchingParent"),
        "{status_text}"
    );
    // bare is withheld the route: nothing there to accept.
    let bare_row = out
        .split_once("Reported by the clusters:")
        .and_then(|(_, r)| r.lines().find(|l| l.trim_start().starts_with("bare ")))
        .unwrap_or_else(|| panic!("bare's row: {out}"));
    assert!(bare_row.trim_end().ends_with('-'), "{bare_row}");

    // 5. Written back on the primary's objects, in the API's own shape.
    let ours = |obj: &Value| -> Option<Value> {
        obj["status"]["parents"]
            .as_array()?
            .iter()
            .find(|p| p["controllerName"] == "meshhub.io/hub")
            .map(|p| p["conditions"][0].clone())
    };
    let route_status = |name: &'static str, want: &'static str| {
        let primary = primary.clone();
        async move {
            eventually_some(
                &format!("{name}'s Accepted={want} written back"),
                async || {
                    let obj = get(&primary, GATEWAY_API, "HTTPRoute", "bookinfo", name).await?;
                    let obj = serde_json::to_value(obj).ok()?;
                    ours(&obj).filter(|c| c["status"] == want)
                },
            )
            .await
        }
    };
    let c = route_status("reviews", "True").await;
    assert_eq!(c["reason"], "Accepted", "{c}");
    assert_eq!(
        c["message"], "Accepted by 1/1 clusters",
        "bare is withheld: {c}"
    );
    let c = route_status("orphan", "False").await;
    assert_eq!(c["reason"], "NoMatchingParent", "{c}");
    assert!(
        c["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("refused by east: NoMatchingParent")),
        "{c}"
    );
    let gateway = eventually_some("the Gateway's meshhub.io/Accepted", async || {
        let obj = get(&primary, GATEWAY_API, "Gateway", "bookinfo", "ingress").await?;
        obj.data["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "meshhub.io/Accepted" && c["status"] == "True")
            .cloned()
    })
    .await;
    assert_eq!(gateway["message"], "Accepted by 1/1 clusters", "{gateway}");

    // 6. A route written now: the time until the primary says east's
    //    istiod accepted it.
    let started = std::time::Instant::now();
    apply_yaml(&primary, &ROUTE.replace("name: reviews,", "name: timed,")).await;
    route_status("timed", "True").await;
    println!(
        "e2e figure: a route written in the primary to Accepted written back from 1 cluster's istiod: {} ms",
        started.elapsed().as_millis()
    );

    // 7. A change east's istiod refuses fails its wave and rolls it back.
    apply_yaml(
        &primary,
        &ROUTE.replace(
            "parentRefs: [{name: ingress}]",
            "parentRefs: [{name: ingress, sectionName: https}]",
        ),
    )
    .await;
    let r = eventually_some("the rollout rolled back", async || {
        let (code, body) = meshhub_testkit::http::get(hub.admin, "/rollout").await;
        let r: Value = serde_json::from_str(&body).ok()?;
        (code == 200 && r["rollout"]["phase"]["phase"] == "rolledBack").then_some(r)
    })
    .await;
    let failure = &r["rollout"]["phase"]["failure"];
    assert_eq!(failure["cluster"], "east", "{r}");
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|m| m.contains("httproutes bookinfo/reviews")
                && m.contains("not accepted by the cluster's Gateway API controller")
                && m.contains("NoMatchingParent")),
        "{r}"
    );
    // east's API holds the route it accepted again.
    eventually_some("east's route rolled back", async || {
        let route = get(&east_kube, GATEWAY_API, "HTTPRoute", "bookinfo", "reviews").await?;
        route.data["spec"]["parentRefs"][0]
            .get("sectionName")
            .is_none()
            .then_some(())
    })
    .await;
    drop(istiod);
}

fn remote_state<'a>(status: &'a Value, cluster: &str, collection: &str) -> &'a str {
    remote(status, cluster)["collections"][collection]["state"]
        .as_str()
        .unwrap_or_default()
}

/// The carried kinds agree with the CRDs of the Gateway API module meshhub
/// tracks (its experimental channel, which serves every version): plural,
/// scope and served versions. XListenerSet is gone from it (ListenerSet
/// replaced it in v1.5) and is checked by name only.
#[test]
fn carried_kinds_agree_with_the_gateway_api_crds() {
    use meshhub_proto::kinds::gateway_api::KINDS;
    let mut seen = std::collections::BTreeSet::new();
    for file in meshhub_e2e::gateway_api::crd_files("experimental") {
        let text = std::fs::read_to_string(&file).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("the CRDs parse");
        for crd in docs {
            let spec = &crd["spec"];
            let (Some(group), Some(kind)) =
                (spec["group"].as_str(), spec["names"]["kind"].as_str())
            else {
                continue;
            };
            let Some(ours) = KINDS.iter().find(|k| k.group == group && k.kind == kind) else {
                continue;
            };
            assert_eq!(
                spec["names"]["plural"].as_str(),
                Some(ours.plural),
                "{kind}"
            );
            assert_eq!(spec["scope"], "Namespaced", "{kind}");
            let served: std::collections::BTreeSet<&str> = spec["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["served"] == true)
                .filter_map(|v| v["name"].as_str())
                .collect();
            let carried: std::collections::BTreeSet<&str> = ours.versions.iter().copied().collect();
            assert_eq!(served, carried, "{kind}");
            seen.insert(kind.to_owned());
        }
    }
    let missing: Vec<&str> = KINDS
        .iter()
        .map(|k| k.kind)
        .filter(|k| *k != "XListenerSet" && !seen.contains(*k))
        .collect();
    assert!(missing.is_empty(), "no CRD for {missing:?}");
}

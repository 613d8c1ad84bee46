//! The upward channel as a trust boundary, end to end (issue 38): a rogue
//! agent — written for the test, speaking the upward protocol directly
//! (`meshhub_e2e::rogue`) — reports, one step after another, exports in a
//! namespace it may not export (`istio-system`), an export of a Service
//! another cluster exports with a forged old `created` (and a type and a
//! port name that conflict), port 0, a bad gateway address, too many
//! gateway addresses, a report naming another cluster, a restart after
//! which it is still listing (an incomplete report lacking most of its
//! exports), and 100,000 exports. Meanwhile a well-behaved cluster, west
//! (a real sink agent on a real kube-apiserver), exports `shop/cart`,
//! `shop/orders` and `shop/payments`.
//!
//! Checked, with continuous consumers of east's and west's agents (every
//! state they were served, not a poll) and a real istiod 1.28 on east
//! (`/debug/configz`): every other cluster's ServiceEntries stay exactly as
//! they were, but for one thing the rogue's export policy grants it — it
//! may export `shop/cart` too, so its gateway joins cart's endpoints (and
//! west, no longer cart's only exporter, receives cart) while cart's ports,
//! type and hosts stay west's, the export the hub saw first. Each refusal
//! shows on the hub's `/status` (`remotes[].report.exports[].refused`; the
//! report for another cluster as the NACK of the rogue's upward stream),
//! and once the rogue exports nothing again, every entry is byte for byte
//! what it was before.
//!
//! The flood costs the hub its cap's worth of work: measured in a debug
//! build on two cores, the hub takes the 100,000 exports (the marker after
//! them at east's istiod) 3–4 s after they are sent, and `/status`, with
//! every refusal counted and the first 100 listed, reads in milliseconds
//! (it listed all 100,000: about 30 MB, 4–5 s); before exports past
//! the cap went unvalidated, it took 46 s, past this test's bounds. The
//! whole test runs in about 20 s.
//!
//! Ordering without sleeps: each step waits for the hub's ACK or NACK of
//! the rogue's responses (the update is then queued to the hub's state
//! task), then west exports a marker Service; once the marker reaches
//! east's agent (and istiod), the hub has taken the step and generated
//! from it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use meshhub_e2e::istio::{ConfigSource, ISTIOD_START, Istiod, istiod_bin, tail};
use meshhub_e2e::kube::{ControlPlanes, apply_yaml};
use meshhub_e2e::mcs::{install_mcs_crds, service, service_export};
use meshhub_e2e::rogue::{Publication, Rogue};
use meshhub_e2e::watcher::{Watcher, object};
use meshhub_e2e::yaml::{cluster, files_hub};
use meshhub_e2e::*;
use meshhub_proto::mcp::Resource;
use meshhub_proto::upward::{
    CLUSTER_STATUS, GatewayAddress, SERVICE_EXPORTS, ServiceExport, ServicePort,
};
use meshhub_testkit::DEADLINE;
use meshhub_testkit::http::get_large_blocking;
use serde_json::{Value, json};

const SE: &str = "istio/networking/v1alpha3/serviceentries";
/// West's gateway (its agent's `--mcs-gateways`).
const WEST_GATEWAY: &str = "192.0.2.20";
/// The rogue's gateway.
const ROGUE_GATEWAY: &str = "192.0.2.66";
/// The exports of the flood.
const FLOOD: usize = 100_000;

/// An export by the rogue: `ports` (name, number), through its gateway
/// unless `gateways` says otherwise.
fn export(
    ns: &str,
    name: &str,
    r#type: &str,
    ports: &[(&str, u32)],
    gateways: &[(&str, u32)],
) -> ServiceExport {
    ServiceExport {
        namespace: ns.into(),
        name: name.into(),
        r#type: r#type.into(),
        ports: ports
            .iter()
            .map(|(n, p)| ServicePort {
                name: (*n).into(),
                port: *p,
                protocol: "TCP".into(),
                app_protocol: String::new(),
            })
            .collect(),
        gateways: gateways
            .iter()
            .map(|(a, p)| GatewayAddress {
                address: (*a).into(),
                port: *p,
            })
            .collect(),
        created: Some(SystemTime::now().into()),
        problem: String::new(),
    }
}

/// The rogue's hostile exports (step 1).
fn hostile_exports() -> Vec<ServiceExport> {
    let gw = [(ROGUE_GATEWAY, 15443)];
    let many: Vec<(String, u32)> = (0..17)
        .map(|i| (format!("192.0.2.{}", 100 + i), 15443))
        .collect();
    let many: Vec<(&str, u32)> = many.iter().map(|(a, p)| (a.as_str(), *p)).collect();
    vec![
        // Outside the default policy: a system namespace.
        export(
            "istio-system",
            "istiod",
            "ClusterSetIP",
            &[("grpc-xds", 15010)],
            &gw,
        ),
        // West's cart, "created" in 1970, Headless, port 80 named grpc:
        // were the agent's time the conflict order, it would redefine cart.
        ServiceExport {
            created: Some((SystemTime::UNIX_EPOCH + Duration::from_secs(1)).into()),
            ..export("shop", "cart", "Headless", &[("grpc", 80)], &gw)
        },
        // Invalid contributions to Services west exports.
        export("shop", "orders", "ClusterSetIP", &[("http", 0)], &gw),
        export(
            "shop",
            "payments",
            "ClusterSetIP",
            &[("http", 80)],
            &[("not an address!", 15443)],
        ),
        // More gateway addresses than exports.maxEndpoints (16).
        export("shop", "reviews", "ClusterSetIP", &[("http", 80)], &many),
    ]
}

/// A state of an agent's ServiceEntries without the markers.
fn entries(state: &BTreeMap<String, Resource>) -> BTreeMap<String, Resource> {
    state
        .iter()
        .filter(|(k, _)| !k.starts_with("shop/mark-"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The ServiceEntries istiod holds (but the markers): spec, labels and
/// annotations by `namespace/name`.
fn istiod_entries(istiod: &Istiod) -> BTreeMap<String, Value> {
    istiod
        .configz()
        .into_iter()
        .filter(|c| c["kind"] == "ServiceEntry")
        .map(|c| {
            let m = &c["metadata"];
            (
                format!(
                    "{}/{}",
                    m["namespace"].as_str().unwrap_or(""),
                    m["name"].as_str().unwrap_or("")
                ),
                json!({"spec": c["spec"], "labels": m["labels"], "annotations": m["annotations"]}),
            )
        })
        .filter(|(k, _)| !k.starts_with("shop/mark-"))
        .collect()
}

/// `/status`, read whole however large (the flood's refusals are on it).
fn status(hub: &HubProc) -> Value {
    let (code, body) = get_large_blocking(hub.admin, "/status", Duration::from_secs(300))
        .expect("the hub's /status answers");
    assert_eq!(code, 200);
    serde_json::from_slice(&body).expect("status JSON")
}

/// The export `ns/name` of `cluster` on `/status`.
fn shown<'a>(status: &'a Value, cluster: &str, ns: &str, name: &str) -> &'a Value {
    remote(status, cluster)["report"]["exports"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["namespace"] == ns && e["name"] == name))
        .unwrap_or_else(|| panic!("no export {ns}/{name} of {cluster} on /status"))
}

/// The spec of an agent's ServiceEntry resource.
fn spec(r: &Resource) -> Value {
    object(SE, r).spec().expect("a spec").clone()
}

/// Test step `n` is over: west exports `shop/mark-<n>`, and it reached
/// east's agent and east's istiod.
async fn barrier(n: u32, west: &::kube::Client, east: &mut Watcher, istiod: &Istiod) -> Duration {
    let started = Instant::now();
    let name = format!("mark-{n}");
    apply_yaml(west, &service("shop", &name)).await;
    apply_yaml(west, &service_export("shop", &name)).await;
    let key = format!("shop/{name}-clusterset");
    east.wait(&format!("{key} at east's agent"), |m| m.contains_key(&key))
        .await;
    tokio::task::block_in_place(|| {
        let deadline = Instant::now() + DEADLINE;
        while istiod
            .config("ServiceEntry", "shop", &format!("{name}-clusterset"))
            .is_none()
        {
            assert!(
                Instant::now() < deadline,
                "{key} not in east's istiod after {DEADLINE:?}; it holds {:?}\n{}",
                istiod_entries(istiod).keys().collect::<Vec<_>>(),
                tail(&istiod.proc.stderr(), 30)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    started.elapsed()
}

/// Polls `check` (istiod gives no signal) until it holds, at most
/// [`DEADLINE`].
fn eventually_until(what: &str, check: impl Fn() -> bool) {
    meshhub_testkit::eventually_blocking(what, || check().then_some(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_agent_changes_no_other_clusters_service_entries() {
    let _turn = turn(module_path!());
    let test_started = Instant::now();
    let bin = istiod_bin();
    let planes = ControlPlanes::start_bare(&["east", "west"]).await;
    planes.install_istio_crds("east", &[]).await;
    planes.namespace("east", "istio-system").await;
    install_mcs_crds(&planes, "west").await;
    planes.namespace("west", "shop").await;
    let west_kube = planes.client("west").await;
    for name in ["cart", "orders", "payments"] {
        apply_yaml(&west_kube, &service("shop", name)).await;
        apply_yaml(&west_kube, &service_export("shop", name)).await;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let logs = dir.join("logs");
    let objects = dir.join("objects");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::create_dir_all(&objects).unwrap();

    // The rogue starts as a well-behaved agent (a complete, empty set).
    let mut rogue = Rogue::start(&Publication::complete("rogue", "empty", Vec::new())).await;
    let east_agent = AgentProc::start("east", dir, &logs, None);
    let west_kubeconfig = planes.cluster("west").kubeconfig.display().to_string();
    let west_gateway = format!("{WEST_GATEWAY}:15443");
    let flags = [
        "--mcs",
        "--mcs-kubeconfig",
        &west_kubeconfig,
        "--mcs-gateways",
        &west_gateway,
    ]
    .map(str::to_owned);
    let west_agent = AgentProc::start_with("west", dir, &logs, None, &flags);
    let mut istiod = Istiod::spawn(
        "istiod-east",
        bin,
        &planes.cluster("east").kubeconfig,
        ConfigSource::Xds(east_agent.grpc),
        dir,
        &logs,
    );
    // The rogue may export from any namespace but the system ones (the
    // default) and one Service at most: the flood is all over the cap, so
    // none of it becomes an entry (with the default cap, 1,000, the first
    // thousand would, by design).
    let clusters = cluster("east", "", format!("http://{}", east_agent.sink), "")
        + &cluster("west", "", format!("http://{}", west_agent.sink), "")
        + &cluster(
            "rogue",
            "    exports: {maxServices: 1}\n",
            format!("http://{}", rogue.addr),
            "",
        );
    let config = dir.join("hub.yaml");
    std::fs::write(&config, files_hub(objects.display(), &clusters, "")).unwrap();
    let hub = tokio::task::block_in_place(|| {
        istiod.wait_ready(ISTIOD_START);
        HubProc::start("hub", &config, &logs)
    });
    let mut east = Watcher::start(east_agent.grpc, "watch-east", SE, true);
    let mut west = Watcher::start(west_agent.grpc, "watch-west", SE, true);
    let names = ["cart", "orders", "payments"].map(|n| format!("shop/{n}-clusterset"));
    east.wait("west's three exports at east's agent", |m| {
        names.iter().all(|n| m.contains_key(n))
    })
    .await;
    tokio::task::block_in_place(|| {
        eventually_until("west's three exports in east's istiod", || {
            istiod_entries(&istiod).len() == 3
        })
    });
    let before = entries(&east.current());
    let before_istiod = tokio::task::block_in_place(|| istiod_entries(&istiod));
    let settled = east.history().len() - 1;
    assert_eq!(before.len(), 3, "{:?}", before.keys());
    assert!(west.current().is_empty(), "west is the only exporter");
    let west_settled = west.history().len();
    let cart = &names[0];
    let before_cart = spec(&before[cart]);
    assert_eq!(before_cart["endpoints"].as_array().unwrap().len(), 1);
    println!("setup: {:.1} s", test_started.elapsed().as_secs_f64());

    // 1. The hostile exports. Only cart is merged (the policy allows
    // shop): its gateway joins cart's endpoints; the rest is refused.
    let (s1, e1) = rogue.publish(&Publication::complete(
        "rogue",
        "hostile",
        hostile_exports(),
    ));
    assert_eq!(rogue.reply(SERVICE_EXPORTS, &e1).await.nack, None);
    assert_eq!(rogue.reply(CLUSTER_STATUS, &s1).await.nack, None);
    east.wait("the rogue's gateway in cart's endpoints", |m| {
        m.get(cart).is_some_and(|r| {
            spec(r)["endpoints"]
                .as_array()
                .is_some_and(|e| e.len() == 2)
        })
    })
    .await;
    let took = barrier(1, &west_kube, &mut east, &istiod).await;
    println!(
        "step 1 (hostile exports) taken; barrier {:.0} ms",
        took.as_secs_f64() * 1e3
    );
    let with_rogue = entries(&east.current());
    for (k, r) in &before {
        if k != cart {
            assert_eq!(with_rogue.get(k), Some(r), "{k} changed");
        }
    }
    assert_eq!(with_rogue.len(), 3, "{:?}", with_rogue.keys());
    let rogue_cart = spec(&with_rogue[cart]);
    for field in ["hosts", "ports", "resolution", "location"] {
        assert_eq!(
            rogue_cart[field], before_cart[field],
            "cart's {field} changed: {rogue_cart}"
        );
    }
    let endpoints = rogue_cart["endpoints"].as_array().unwrap();
    assert_eq!(endpoints[0], before_cart["endpoints"][0], "{rogue_cart}");
    assert_eq!(endpoints[1]["address"], ROGUE_GATEWAY, "{rogue_cart}");
    assert_eq!(endpoints[1]["labels"]["topology.istio.io/cluster"], "rogue");
    let istiod_now = tokio::task::block_in_place(|| istiod_entries(&istiod));
    for (k, v) in &before_istiod {
        if k != "shop/cart-clusterset" {
            assert_eq!(istiod_now.get(k), Some(v), "{k} changed in istiod");
        }
    }
    let istiod_cart = &istiod_now["shop/cart-clusterset"]["spec"];
    let istiod_before_cart = &before_istiod["shop/cart-clusterset"]["spec"];
    for field in ["hosts", "ports", "resolution"] {
        assert_eq!(
            istiod_cart[field], istiod_before_cart[field],
            "istiod: {istiod_cart}"
        );
    }
    assert_eq!(istiod_cart["endpoints"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        west.names(),
        BTreeSet::from([cart.clone()]),
        "west, no longer cart's only exporter, receives cart"
    );
    let s = tokio::task::block_in_place(|| status(&hub));
    let refused = |s: &Value, ns: &str, name: &str| {
        shown(s, "rogue", ns, name)["refused"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let r = refused(&s, "istio-system", "istiod");
    assert!(
        r.starts_with("policy:") && r.contains("istio-system"),
        "{r}"
    );
    let r = refused(&s, "shop", "orders");
    assert!(r.starts_with("invalid:") && r.contains("port 0"), "{r}");
    let r = refused(&s, "shop", "payments");
    assert!(
        r.starts_with("invalid:") && r.contains("gateway address"),
        "{r}"
    );
    let r = refused(&s, "shop", "reviews");
    assert!(r.starts_with("cap:") && r.contains("maxEndpoints"), "{r}");
    let rogue_cart_shown = shown(&s, "rogue", "shop", "cart");
    assert_eq!(rogue_cart_shown.get("refused"), None, "{rogue_cart_shown}");
    assert!(
        rogue_cart_shown["created"]
            .as_str()
            .is_some_and(|c| c.starts_with("1970-")),
        "{rogue_cart_shown}"
    );
    let conflict = rogue_cart_shown["conflict"].as_str().unwrap_or("");
    assert!(
        conflict.contains("Headless") && conflict.contains("port 80"),
        "the forged export is the one in conflict: {rogue_cart_shown}"
    );
    let west_cart = shown(&s, "west", "shop", "cart");
    assert_eq!(west_cart.get("conflict"), None, "{west_cart}");
    assert_eq!(west_cart.get("refused"), None, "{west_cart}");

    // 2. A report for another cluster, vouching for an empty set: NACKed,
    // and the set it vouches for is not trusted (cart keeps the rogue's
    // endpoint: the last complete set stands).
    let (s2, e2) = rogue.publish(&Publication::complete("west", "forged", Vec::new()));
    let nack = rogue.reply(CLUSTER_STATUS, &s2).await.nack;
    assert!(
        nack.as_deref().is_some_and(|m| m.contains("\"west\"")),
        "the report naming west is refused: {nack:?}"
    );
    assert_eq!(rogue.reply(SERVICE_EXPORTS, &e2).await.nack, None);
    barrier(2, &west_kube, &mut east, &istiod).await;
    assert_eq!(
        entries(&east.current()),
        with_rogue,
        "after the forged report"
    );
    let s = tokio::task::block_in_place(|| status(&hub));
    let upward = s["ledger"]
        .as_array()
        .and_then(|l| l.iter().find(|p| p["peer"] == "upward/rogue"))
        .expect("the rogue's upward stream in the ledger");
    let nacked = &upward["collections"][CLUSTER_STATUS]["nacked"];
    assert!(
        nacked["message"]
            .as_str()
            .is_some_and(|m| m.contains("\"west\"")),
        "the refusal shows on /status: {upward}"
    );
    assert!(
        refused(&s, "istio-system", "istiod").starts_with("policy:"),
        "the rogue's last report stands"
    );
    let shown_west = remote(&s, "west")["report"]["exports"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        shown_west, 5,
        "west's own exports (3 and two markers) are west's"
    );
    assert_eq!(
        remote(&s, "rogue")["report"]["exports_state"]["stale"],
        true
    );

    // 3. The rogue restarts and reports while it lists: incomplete, with
    // one export of five. Nothing is withdrawn; the hub shows it.
    let partial = vec![hostile_exports().remove(0)];
    let (s3, e3) = rogue
        .restart(&Publication::incomplete(
            "rogue",
            "listing",
            partial,
            &["services"],
        ))
        .await;
    assert_eq!(rogue.reply(SERVICE_EXPORTS, &e3).await.nack, None);
    assert_eq!(rogue.reply(CLUSTER_STATUS, &s3).await.nack, None);
    barrier(3, &west_kube, &mut east, &istiod).await;
    assert_eq!(entries(&east.current()), with_rogue, "after the restart");
    let s = tokio::task::block_in_place(|| status(&hub));
    let state = &remote(&s, "rogue")["report"]["exports_state"];
    assert_eq!(state["completeness"], "incomplete", "{state}");
    assert_eq!(state["stale"], true, "{state}");
    assert_eq!(state["waiting_for"], json!(["services"]), "{state}");
    assert_eq!(
        remote(&s, "rogue")["report"]["exports"]
            .as_array()
            .map(Vec::len),
        Some(5),
        "the last complete set is shown"
    );

    // 4. The flood: the hostile five and 100,000 more, complete. All of
    // them over the cap (the hub takes the exports it saw first: cart).
    let mut flood = hostile_exports();
    flood.extend((0..FLOOD).map(|i| {
        export(
            "bulk",
            &format!("svc-{i:06}"),
            "ClusterSetIP",
            &[("http", 80)],
            &[(ROGUE_GATEWAY, 15443)],
        )
    }));
    let sent = Instant::now();
    let (s4, e4) = rogue.publish(&Publication::complete("rogue", "flood", flood));
    assert_eq!(rogue.reply(SERVICE_EXPORTS, &e4).await.nack, None);
    let acked = sent.elapsed();
    assert_eq!(rogue.reply(CLUSTER_STATUS, &s4).await.nack, None);
    let took = barrier(4, &west_kube, &mut east, &istiod).await;
    let taken = sent.elapsed();
    assert_eq!(entries(&east.current()), with_rogue, "after the flood");
    let read = Instant::now();
    let s = tokio::task::block_in_place(|| status(&hub));
    let read = read.elapsed();
    // Every refusal counted by reason; the list bounded: the export
    // merged and the first 100 refused (the hostile four seen first).
    let report = &remote(&s, "rogue")["report"];
    let counted = &report["exports_refused"];
    assert_eq!(counted["count"], FLOOD + 4, "{counted}");
    assert!(
        counted["by_reason"]["cap"]
            .as_u64()
            .is_some_and(|n| n >= FLOOD as u64),
        "every export of the flood is refused over the cap: {counted}"
    );
    assert_eq!(counted["listed"], 100, "{counted}");
    let exports = report["exports"].as_array().unwrap();
    assert_eq!(exports.len(), 1 + 100);
    let over = exports
        .iter()
        .filter(|e| e["namespace"] == "bulk")
        .filter(|e| {
            e["refused"]
                .as_str()
                .is_some_and(|r| r.starts_with("cap:") && r.contains("maxServices"))
        })
        .count();
    assert_eq!(over, 100 - 4, "the flood's first refusals listed");
    assert!(
        refused(&s, "istio-system", "istiod").starts_with("policy:"),
        "the refusals seen first are listed"
    );
    assert_eq!(shown(&s, "rogue", "shop", "cart").get("refused"), None);
    println!(
        "flood of {FLOOD} exports: ACKed by the hub after {:.2} s, taken (the marker after it at east's istiod) after {:.2} s (barrier {:.2} s); /status read in {:.2} s",
        acked.as_secs_f64(),
        taken.as_secs_f64(),
        took.as_secs_f64(),
        read.as_secs_f64()
    );

    // 5. The rogue exports nothing: every entry is what it was before.
    let (s5, e5) = rogue.publish(&Publication::complete("rogue", "nothing", Vec::new()));
    assert_eq!(rogue.reply(SERVICE_EXPORTS, &e5).await.nack, None);
    assert_eq!(rogue.reply(CLUSTER_STATUS, &s5).await.nack, None);
    east.wait("cart as it was before the rogue", |m| entries(m) == before)
        .await;
    west.wait("west without cart", BTreeMap::is_empty).await;
    tokio::task::block_in_place(|| {
        eventually_until("istiod's entries as they were", || {
            istiod_entries(&istiod) == before_istiod
        })
    });

    // Every state east's agent served since it held west's three exports
    // was `before` or `with_rogue`; west's, nothing or cart.
    for (i, state) in east.history().iter().enumerate().skip(settled) {
        let state = entries(state);
        assert!(
            state == before || state == with_rogue,
            "east's agent served state {i} with other entries: {:?}",
            state.keys().collect::<Vec<_>>()
        );
    }
    for (i, state) in west.history().iter().enumerate().skip(west_settled) {
        let names: Vec<&String> = state.keys().collect();
        assert!(
            names.is_empty() || names == [cart],
            "west's agent served state {i}: {names:?}"
        );
        if let Some(r) = state.get(cart) {
            assert_eq!(spec(r), rogue_cart, "west's cart is east's");
        }
    }
    assert!(east.running().is_ok() && west.running().is_ok());
    println!(
        "hostile agent: {} states at east's agent, {} at west's; whole test {:.1} s",
        east.changes(),
        west.changes(),
        test_started.elapsed().as_secs_f64()
    );
    assert!(test_started.elapsed() < 6 * DEADLINE, "bounded");
    drop((hub, east_agent, west_agent, istiod));
}

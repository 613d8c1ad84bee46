//! Status write-back with a real API server: the hub watches a primary
//! kube-apiserver (Istio's CRDs, the hub's ServiceAccount with the RBAC of
//! deploy/rbac/hub.yaml and hub-status-writeback.yaml) with
//! `statusWriteBack` on, and dials two stand-in agents that NACK any
//! virtual service named "bad". Read back through the API, as `kubectl get
//! vs -o yaml` shows it: `status.conditions` says "ACKed by 2/2" exactly
//! when `/status` has both clusters SYNCED on the version holding it, the
//! analysis messages about an object are its `validationMessages`, a
//! NACKed object is `False` naming the cluster and the reason while the
//! objects the clusters still hold stay `True`, a spec change moves
//! `observedGeneration`, and a status already right is not written again.

use std::path::Path;
use std::sync::Arc;

use meshhub_e2e::kube::{ControlPlanes, apply_yaml, get, rbac_manifest};
use meshhub_e2e::standin::{Picky, StandIn};
use meshhub_e2e::yaml::cluster;
use meshhub_e2e::*;
use meshhub_testkit::eventually_some;
use meshhub_testkit::objects::{VS, virtual_service, vs};
use serde_json::Value;

const NET: &str = "networking.istio.io/v1";

fn config(kubeconfig: &Path, east: &StandIn, west: &StandIn) -> String {
    format!(
        "sources:\n  - name: primary\n    kubernetes:\n      kubeconfig: {}\n      namespaces: [bookinfo]\n      statusWriteBack: {{enabled: true, qps: 20, burst: 20}}\nclusters:\n{}{}debounce:\n  quiet: 20ms\n  maxWait: 200ms\n",
        kubeconfig.display(),
        cluster("east", "", format!("http://{}", east.addr), ""),
        cluster("west", "", format!("http://{}", west.addr), ""),
    )
}

/// The live object `bookinfo/name`.
async fn live(client: &::kube::Client, name: &str) -> Value {
    let obj = get(client, NET, "VirtualService", "bookinfo", name)
        .await
        .unwrap_or_else(|| panic!("VirtualService bookinfo/{name} exists"));
    serde_json::to_value(obj).unwrap()
}

/// The `Distributed` condition of the live object, once its
/// `observedGeneration` is the object's generation and `pred` holds.
async fn distributed(
    client: &::kube::Client,
    name: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> (Value, Value) {
    eventually_some(what, async || {
        let obj = live(client, name).await;
        let generation = &obj["metadata"]["generation"];
        let status = &obj["status"];
        let c = status["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Distributed")?
            .clone();
        (status["observedGeneration"] == *generation
            && c["observedGeneration"] == *generation
            && pred(&c))
        .then(|| (c, obj.clone()))
    })
    .await
}

async fn hub_status(hub: &meshhub::app::Hub) -> Value {
    let (code, body) = meshhub_testkit::http::get(hub.admin_addr(), "/status").await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_carry_their_distribution_in_their_status() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start_bare(&["primary"]).await;
    planes.install_istio_crds("primary", &[]).await;
    planes.namespace("primary", "bookinfo").await;
    let primary = planes.client("primary").await;
    let kubeconfig = planes.hub_service_account("primary").await;
    apply_yaml(&primary, &rbac_manifest("hub-status-writeback.yaml")).await;

    apply_yaml(&primary, &vs("reviews", "reviews")).await;
    // A gateway that does not exist: IST0101 from the analysis.
    apply_yaml(
        &primary,
        &virtual_service("ratings", "bookinfo", "ratings", "")
            .replace("spec:\n", "spec:\n  gateways: [missing-gateway]\n"),
    )
    .await;

    let (east_picky, west_picky) = (Arc::new(Picky::default()), Arc::new(Picky::default()));
    let east = StandIn::start_for("east", east_picky.clone()).await;
    let west = StandIn::start_for("west", west_picky.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let hub = inproc::hub_of_text(
        &dir.path().join("meshhub.yaml"),
        &config(&kubeconfig, &east, &west),
    )
    .await;

    // ACKed by both: True, and /status agrees.
    let (c, obj) = distributed(&primary, "reviews", "reviews ACKed by 2/2", |c| {
        c["status"] == "True"
    })
    .await;
    assert_eq!(c["reason"], "Acked");
    assert_eq!(c["message"], "ACKed by 2/2 clusters");
    assert!(c["lastTransitionTime"].is_string(), "{c}");
    let status = hub_status(&hub).await;
    for cluster in ["east", "west"] {
        assert!(
            synced(&status, cluster, VS),
            "/status: {cluster} has the current version ACKed: {}",
            remote(&status, cluster)
        );
    }
    // Written by meshhub's own field manager, to the status subresource.
    let managers = obj["metadata"]["managedFields"].as_array().unwrap();
    assert!(
        managers
            .iter()
            .any(|m| m["manager"] == "meshhub-status" && m["subresource"] == "status"),
        "{managers:?}"
    );

    // The analysis message about ratings is in its validationMessages, as
    // /status's analysis has it.
    let (_, ratings) = distributed(&primary, "ratings", "ratings analysed", |c| {
        c["status"] == "True"
    })
    .await;
    let messages = eventually_some("ratings' validationMessages", async || {
        let obj = live(&primary, "ratings").await;
        obj["status"]["validationMessages"]
            .as_array()
            .filter(|m| !m.is_empty())
            .cloned()
    })
    .await;
    assert_eq!(messages[0]["type"]["code"], "IST0101", "{messages:?}");
    assert_eq!(messages[0]["level"], "ERROR");
    assert_eq!(
        messages[0]["documentationUrl"],
        "https://istio.io/latest/docs/reference/config/analysis/ist0101/"
    );
    let analysis = hub_status(&hub).await["analysis"].clone();
    assert!(
        analysis.as_array().unwrap().iter().any(|a| a["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["code"] == "IST0101" && m["origin"] == "VirtualService bookinfo/ratings")),
        "{analysis}"
    );
    assert!(
        live(&primary, "reviews").await["status"]
            .get("validationMessages")
            .is_none(),
        "no message about reviews"
    );

    // A spec change: the new generation is distributed in turn, and the
    // other object's status, already right, is not written again.
    let ratings_version = ratings["metadata"]["resourceVersion"].clone();
    apply_yaml(&primary, &vs("reviews", "reviews-v2")).await;
    let (c, _) = distributed(&primary, "reviews", "reviews' generation 2 ACKed", |c| {
        c["status"] == "True"
    })
    .await;
    assert_eq!(c["observedGeneration"], 2);
    assert_eq!(
        live(&primary, "ratings").await["metadata"]["resourceVersion"],
        ratings_version,
        "ratings' status was not written again"
    );

    // A virtual service both clusters refuse: False, with the cluster and
    // its reason; what they hold from before stays True.
    apply_yaml(&primary, &vs("bad-route", "bad")).await;
    let (c, _) = distributed(&primary, "bad-route", "bad-route NACKed", |c| {
        c["status"] == "False"
    })
    .await;
    assert_eq!(c["reason"], "Nacked");
    let message = c["message"].as_str().unwrap();
    assert!(
        message.contains("NACKed by east: ") && message.contains("NACKed by west: "),
        "{message}"
    );
    assert!(message.contains("rejected by the test sink"), "{message}");
    assert!(message.ends_with("ACKed by 0/2 clusters"), "{message}");
    let status = hub_status(&hub).await;
    assert_eq!(
        remote(&status, "east")["collections"][VS]["state"],
        "NACKED",
        "/status agrees"
    );
    let (c, _) = distributed(&primary, "reviews", "reviews still held", |_| true).await;
    assert_eq!(c["status"], "True", "{c}");

    hub.shutdown().await;
    east.stop().await;
    west.stop().await;
}

/// CPU seconds used so far by process `pid` (user + system).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime and
    // stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    if f.len() < 13 {
        return 0.0;
    }
    // Clock ticks per second: 100 on Linux.
    (f[11] + f[12]) / 100.0
}

/// The sum of every sample of `metric` whose labels contain `labels`.
fn metric(text: &str, metric: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.starts_with(metric) && l[metric.len()..].starts_with(['{', ' ']) && l.contains(labels)
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// The cost of status write-back: `MESHHUB_WRITEBACK_OBJECTS` (10,000 by
/// default) virtual services in the primary, two stand-in clusters, the
/// default rate limit; prints the writes per second achieved, the time to
/// converge and the API server's CPU. Run with
/// `cargo test -p meshhub-e2e --test it status_writeback::cost -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a cost figure (minutes): run by hand"]
async fn cost_of_writing_back_10000_statuses() {
    let _turn = turn(module_path!());
    let n: usize = std::env::var("MESHHUB_WRITEBACK_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let planes = ControlPlanes::start_bare(&["primary"]).await;
    planes.install_istio_crds("primary", &[]).await;
    planes.namespace("primary", "bookinfo").await;
    let primary = planes.client("primary").await;
    let started = std::time::Instant::now();
    let mut creators = tokio::task::JoinSet::new();
    for worker in 0..16 {
        let client = primary.clone();
        creators.spawn(async move {
            for i in (worker..n).step_by(16) {
                apply_yaml(&client, &vs(&format!("vs-{i:05}"), &format!("h{i}"))).await;
            }
        });
    }
    while let Some(r) = creators.join_next().await {
        r.unwrap();
    }
    println!(
        "created {n} VirtualServices in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let (east_picky, west_picky) = (Arc::new(Picky::default()), Arc::new(Picky::default()));
    let east = StandIn::start_for("east", east_picky).await;
    let west = StandIn::start_for("west", west_picky).await;
    let dir = tempfile::tempdir().unwrap();
    let text = config(&planes.cluster("primary").kubeconfig, &east, &west)
        .replace(", qps: 20, burst: 20", "");
    let pid = planes
        .apiserver_pid("primary")
        .expect("the API server runs");
    let cpu_before = cpu_seconds(pid);
    let t0 = std::time::Instant::now();
    let hub = inproc::hub_of_text(&dir.path().join("meshhub.yaml"), &text).await;
    let ready = t0.elapsed();
    let mut first_write = None;
    let (converged, metrics) = loop {
        let (_, text) = meshhub_testkit::http::get(hub.admin_addr(), "/metrics").await;
        let written = metric(
            &text,
            "meshhub_status_writeback_writes_total",
            "result=\"written\"",
        );
        if written > 0.0 && first_write.is_none() {
            first_write = Some(t0.elapsed());
        }
        let depth = metric(&text, "meshhub_status_writeback_queue_depth", "");
        let flying = metric(&text, "meshhub_status_writeback_in_flight", "");
        if written >= n as f64 && depth == 0.0 && flying == 0.0 {
            break (t0.elapsed(), text);
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(1800),
            "no convergence in 30 minutes: {written} written"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    let cpu = cpu_seconds(pid) - cpu_before;
    let written = metric(
        &metrics,
        "meshhub_status_writeback_writes_total",
        "result=\"written\"",
    );
    let errors = metric(&metrics, "meshhub_status_writeback_errors_total", "");
    let latency_sum = metric(&metrics, "meshhub_status_writeback_write_seconds_sum", "");
    let latency_count = metric(&metrics, "meshhub_status_writeback_write_seconds_count", "");
    // Every object says so through the API.
    let list = ::kube::Api::<::kube::api::DynamicObject>::namespaced_with(
        primary.clone(),
        "bookinfo",
        &::kube::api::ApiResource {
            group: "networking.istio.io".into(),
            version: "v1".into(),
            api_version: NET.into(),
            kind: "VirtualService".into(),
            plural: "virtualservices".into(),
        },
    )
    .list(&Default::default())
    .await
    .unwrap();
    let acked = list
        .items
        .iter()
        .filter(|o| o.data["status"]["conditions"][0]["message"] == "ACKed by 2/2 clusters")
        .count();
    let first = first_write.unwrap_or_default();
    let writing = converged.saturating_sub(first).as_secs_f64();
    println!("objects: {n}; statuses ACKed by 2/2 through the API: {acked}");
    println!(
        "hub ready after {:.1} s; first status write at {:.1} s; converged at {:.1} s",
        ready.as_secs_f64(),
        first.as_secs_f64(),
        converged.as_secs_f64()
    );
    println!(
        "writes: {} ({} errors) in {writing:.1} s: {:.1} writes/s (default limit 50/s, burst 100)",
        written as u64,
        errors as u64,
        written / writing.max(0.001)
    );
    println!(
        "mean write latency: {:.1} ms",
        1000.0 * latency_sum / latency_count.max(1.0)
    );
    println!(
        "kube-apiserver CPU from hub start to convergence: {cpu:.1} s over {:.1} s ({:.0}% of one core)",
        converged.as_secs_f64(),
        100.0 * cpu / converged.as_secs_f64()
    );
    assert_eq!(acked, n, "every object says ACKed by 2/2");
    let passes = metric(
        &metrics,
        "meshhub_status_writeback_work_out_seconds_count",
        "",
    );
    for scope in ["all", "seen"] {
        let label = format!("scope=\"{scope}\"");
        let count = metric(
            &metrics,
            "meshhub_status_writeback_work_out_seconds_count",
            &label,
        );
        let sum = metric(
            &metrics,
            "meshhub_status_writeback_work_out_seconds_sum",
            &label,
        );
        println!(
            "passes over {scope} objects until convergence: {count}, {:.1} ms each, {sum:.1} s in all",
            1000.0 * sum / count.max(1.0)
        );
    }
    // At rest: every status written, nothing changing. The hub runs in
    // this process: its CPU is this process's.
    let idle = std::time::Duration::from_secs(20);
    let cpu_at_rest = cpu_seconds(std::process::id());
    tokio::time::sleep(idle).await;
    let rest_cpu = cpu_seconds(std::process::id()) - cpu_at_rest;
    let (_, text) = meshhub_testkit::http::get(hub.admin_addr(), "/metrics").await;
    let rest_passes = metric(&text, "meshhub_status_writeback_work_out_seconds_count", "") - passes;
    println!(
        "at rest for {} s: {rest_passes} passes, hub CPU {rest_cpu:.2} s ({:.1}% of one core)",
        idle.as_secs(),
        100.0 * rest_cpu / idle.as_secs_f64()
    );
    hub.shutdown().await;
    east.stop().await;
    west.stop().await;
}

//! Per-cluster analysis in the running hub: each cluster's group is
//! analysed on what it receives, results on `/status`, `/metrics` and
//! `/history`, and `analysis.holdBack` keeps a version carrying a chosen
//! code from its cluster, which keeps its last good version.

use std::path::Path;

use meshhub::app::Hub;
use meshhub_api::analysis::ClusterAnalysis;
use meshhub_api::history::HistoryView;
use meshhub_api::status::StatusSummary;
use meshhub_e2e::inproc::hub_of_text;
use meshhub_e2e::yaml::files_hub;
use meshhub_testkit::fixtures::write_atomic;
use meshhub_testkit::{eventually_some, http};

use crate::support::virtual_services;

/// Gateway `bookinfo/bookinfo-gateway`, delivered to `clusters` only.
fn gateway(clusters: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: bookinfo-gateway
  namespace: bookinfo
  annotations: {{meshhub.io/clusters: \"{clusters}\"}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: 80, name: http, protocol: HTTP}}
    hosts: [bookinfo.example.com]
"
    )
}

/// VirtualService `bookinfo/bookinfo` (both clusters receive it), bound to
/// the gateway or not.
fn virtual_service(bound: bool) -> String {
    let gateways = if bound {
        "  gateways: [bookinfo-gateway]\n"
    } else {
        ""
    };
    format!(
        "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: bookinfo, namespace: bookinfo}}
spec:
  hosts: [bookinfo.example.com]
{gateways}  http:
  - route:
    - destination: {{host: productpage, port: {{number: 9080}}}}
"
    )
}

/// A hub with clusters `east` and `west` (both receive namespace
/// bookinfo), history, and `analysis.holdBack: [hold_back]`. The metrics
/// recorder is the process's: tests that read metrics use their own
/// cluster names (`west`, `other`).
async fn start(dir: &Path, west: &str, hold_back: &str) -> Hub {
    let clusters = format!(
        "  - name: east\n    namespaces: [bookinfo]\n  - name: {west}\n    namespaces: [bookinfo]\n"
    );
    let extra = format!(
        "history:\n  dir: history\naudit:\n  file: audit.log\nanalysis:\n  holdBack: [{hold_back}]\n"
    );
    hub_of_text(
        &dir.join("meshhub.yaml"),
        &files_hub("objects", &clusters, &extra),
    )
    .await
}

async fn analysis(hub: &Hub, cluster: &str) -> Option<ClusterAnalysis> {
    let (code, body) = http::get(hub.admin_addr(), "/status").await;
    assert_eq!(code, 200, "{body}");
    let status: StatusSummary = serde_json::from_str(&body).unwrap();
    status.analysis.into_iter().find(|a| a.cluster == cluster)
}

fn codes(a: &ClusterAnalysis) -> Vec<String> {
    a.messages
        .iter()
        .map(|m| format!("{} {} {}", m.code, m.origin, m.path))
        .collect()
}

fn vs_version(hub: &Hub, cluster: &str) -> Option<String> {
    virtual_services(hub.cache(), cluster).remove("bookinfo/bookinfo")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_only_one_cluster_receives_is_reported_for_the_other_and_holds_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::write(objects.join("gateway.yaml"), gateway("east")).unwrap();
    std::fs::write(objects.join("vs.yaml"), virtual_service(false)).unwrap();
    let hub = start(dir.path(), "west", "IST0101").await;

    // Clean: both clusters are served the unbound VirtualService.
    let good = eventually_some("west is served the first version", async || {
        vs_version(&hub, "west")
    })
    .await;
    let west = eventually_some("west analysed", async || analysis(&hub, "west").await).await;
    assert!(
        west.messages.is_empty() && west.held_back.is_none(),
        "{west:?}"
    );

    // Bound to the gateway: east has it, west does not.
    // (Written atomically: a half-written file would be a build of its own.)
    write_atomic(&objects.join("vs.yaml"), &virtual_service(true));
    let west = eventually_some("west's new build analysed", async || {
        analysis(&hub, "west")
            .await
            .filter(|a| a.held_back.is_some())
    })
    .await;
    assert_eq!(
        codes(&west),
        [
            "IST0101 VirtualService bookinfo/bookinfo spec.gateways[0]",
            "IST0132 VirtualService bookinfo/bookinfo spec.gateways[0]",
        ]
    );
    let east = analysis(&hub, "east").await.unwrap();
    assert!(east.messages.is_empty(), "{east:?}");
    assert!(east.held_back.is_none());
    // East is served the new version; west keeps its last good one.
    let east_vs = eventually_some("east is served the bound version", async || {
        vs_version(&hub, "east").filter(|v| *v != good)
    })
    .await;
    assert_eq!(vs_version(&hub, "west").as_deref(), Some(good.as_str()));
    let held = west.held_back.clone().unwrap();
    let held_version = held.version.clone();
    assert_eq!(held.codes, ["IST0101"]);
    assert_eq!(held.version, west.version);
    assert!(held.serving.is_some(), "{held:?}");

    // History says why; metrics count the messages and the hold-back.
    // (The history is written off the pipeline's path: wait for it.)
    let history = eventually_some("the held-back version is recorded", async || {
        // 404 until the first version is written.
        let (_, body) = http::get(hub.admin_addr(), "/history?cluster=west").await;
        let history: HistoryView = serde_json::from_str(&body).ok()?;
        history
            .versions
            .last()
            .is_some_and(|v| v.id == held.version)
            .then_some(history)
    })
    .await;
    let last = history.versions.last().unwrap();
    assert_eq!(last.held_back.len(), 1, "{last:?}");
    assert!(last.held_back[0].contains("IST0101"), "{last:?}");
    assert!(
        history
            .versions
            .iter()
            .any(|v| Some(&v.id) == held.serving.as_ref() && v.held_back.is_empty())
    );
    let (_, metrics) = http::get(hub.admin_addr(), "/metrics").await;
    assert!(
        metrics.contains(
            r#"meshhub_analysis_messages{cluster="west",code="IST0101",severity="Error"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"meshhub_analysis_held_back{cluster="west"} 1"#),
        "{metrics}"
    );

    // Delivering the gateway to west too releases the version.
    write_atomic(&objects.join("gateway.yaml"), &gateway("east,west"));
    eventually_some("west is served the bound version", async || {
        vs_version(&hub, "west").filter(|v| *v == east_vs)
    })
    .await;
    let west = analysis(&hub, "west").await.unwrap();
    assert!(
        west.messages.is_empty() && west.held_back.is_none(),
        "{west:?}"
    );
    assert!(hub.shutdown().await);

    // The audit log: west's analysis as it changed (found, then clean
    // again), and the publication held back with why.
    let audit = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    let records: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let west_analysis: Vec<usize> = records
        .iter()
        .filter(|r| r["event"] == "analysis" && r["cluster"] == "west")
        .map(|r| r["messages"].as_array().unwrap().len())
        .collect();
    assert!(west_analysis.ends_with(&[2, 0]), "{audit}");
    let held: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| {
            r["event"] == "published" && r["cluster"] == "west" && r.get("heldBack").is_some()
        })
        .collect();
    assert_eq!(held.len(), 1, "{audit}");
    assert_eq!(
        held[0]["version"],
        serde_json::json!(held_version),
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_hold_back_the_version_is_served_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::write(objects.join("gateway.yaml"), gateway("east")).unwrap();
    std::fs::write(objects.join("vs.yaml"), virtual_service(true)).unwrap();
    let hub = start(dir.path(), "other", "").await;
    let other = eventually_some("other analysed", async || analysis(&hub, "other").await).await;
    assert_eq!(codes(&other).len(), 2, "{other:?}");
    assert!(other.held_back.is_none());
    eventually_some("other is served the bound version", async || {
        vs_version(&hub, "other")
    })
    .await;
    assert!(analysis(&hub, "east").await.unwrap().messages.is_empty());
    assert!(hub.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_never_had_a_good_version_is_served_nothing_until_one_comes() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::write(objects.join("gateway.yaml"), gateway("east")).unwrap();
    std::fs::write(objects.join("vs.yaml"), virtual_service(true)).unwrap();
    let hub = start(dir.path(), "third", "IST0101").await;
    let third = eventually_some("third analysed", async || analysis(&hub, "third").await).await;
    let held = third.held_back.expect("held back from the start");
    assert_eq!(held.serving, None);
    assert!(hub.cache().snapshot("third").is_none(), "nothing is served");
    assert!(vs_version(&hub, "east").is_some());
    // The first good build is served at once.
    write_atomic(&objects.join("vs.yaml"), &virtual_service(false));
    eventually_some("third is served its first good version", async || {
        vs_version(&hub, "third")
    })
    .await;
    assert!(analysis(&hub, "third").await.unwrap().held_back.is_none());
    assert!(hub.shutdown().await);
}

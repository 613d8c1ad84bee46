//! The hub's Kubernetes source against a real kube-apiserver (the e2e
//! crate's harness): initial list, readiness, resourceVersion as the MCP
//! version, updates, deletes, invalid objects reported and never served,
//! a CRD installed after start, extra kinds as `Struct` bodies, and a
//! restarted API server.

use std::path::Path;

use meshhub::app::Hub;
use meshhub_e2e::inproc::{self, hub_config};
use meshhub_e2e::kube::{ControlPlanes, apply_yaml, delete, get};
use meshhub_proto::mcp::Resource;
use meshhub_testkit::objects::{GW, VS, vs};
use meshhub_testkit::{DEADLINE, eventually, within};
use prost::Message as _;

const CM: &str = "k8s/core/v1/configmaps";

/// name → (version, decoded resource) of `collection` in group `east`.
fn served(hub: &Hub, collection: &str) -> Vec<(String, String, Resource)> {
    let Some(s) = hub.cache().snapshot("east") else {
        return Vec::new();
    };
    s.collection(collection)
        .resources()
        .iter()
        .map(|b| {
            let r = Resource::decode(b.as_ref()).unwrap();
            let m = r.metadata.clone().unwrap();
            (m.name, m.version, r)
        })
        .collect()
}

fn names(hub: &Hub, collection: &str) -> Vec<String> {
    served(hub, collection)
        .into_iter()
        .map(|(n, _, _)| n)
        .collect()
}

async fn start_hub(dir: &Path, kubeconfig: &Path) -> Hub {
    let text = format!(
        "sources:\n  - name: primary\n    kubernetes:\n      kubeconfig: {}\n      namespaces: [bookinfo]\n      discoveryInterval: 1h\n      extraKinds:\n        - {{version: v1, kind: ConfigMap}}\nclusters:\n  - name: east\n    namespaces: [bookinfo]\ndebounce:\n  quiet: 20ms\n  maxWait: 200ms\n",
        kubeconfig.display()
    );
    inproc::start_hub(hub_config(&dir.join("meshhub.yaml"), &text)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_objects_flow_into_snapshots() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut planes = ControlPlanes::start_bare(&["primary"]).await;
    // Every Istio CRD but Gateway's: that one arrives after the hub started.
    planes.install_istio_crds("primary", &["Gateway"]).await;
    planes.namespace("primary", "bookinfo").await;
    planes.namespace("primary", "other").await;
    let kube = planes.client("primary").await;
    apply_yaml(&kube, &vs("reviews", "reviews")).await;
    apply_yaml(&kube, &vs("ratings", "ratings")).await;
    // Not in a watched namespace.
    apply_yaml(
        &kube,
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: elsewhere, namespace: other}\nspec: {hosts: [x]}\n",
    )
    .await;
    apply_yaml(
        &kube,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: mesh-extra, namespace: bookinfo}\ndata: {key: value}\n",
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let hub = start_hub(dir.path(), &planes.cluster("primary").kubeconfig).await;
    within("ready after the initial lists", hub.ready()).await;

    // The initial list, with resourceVersion as the version.
    let vss = served(&hub, VS);
    let got: Vec<&str> = vss.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(got, ["bookinfo/ratings", "bookinfo/reviews"]);
    let live = get(
        &kube,
        "networking.istio.io/v1",
        "VirtualService",
        "bookinfo",
        "reviews",
    )
    .await
    .unwrap();
    let reviews = &vss[1];
    assert_eq!(
        Some(reviews.1.as_str()),
        live.metadata.resource_version.as_deref()
    );
    assert!(reviews.2.metadata.as_ref().unwrap().create_time.is_some());
    // The extra kind travels as a Struct.
    let cms = served(&hub, CM);
    assert_eq!(cms.len(), 1);
    let body = cms[0].2.body.as_ref().unwrap();
    assert_eq!(body.type_url, "type.googleapis.com/google.protobuf.Struct");
    let s = prost_types::Struct::decode(body.value.as_slice()).unwrap();
    assert!(s.fields.contains_key("data"), "{s:?}");

    // An update.
    apply_yaml(&kube, &vs("reviews", "reviews-v2")).await;
    eventually("the update", || async {
        served(&hub, VS)
            .iter()
            .any(|(n, v, _)| n == "bookinfo/reviews" && *v != reviews.1)
    })
    .await;

    // A delete.
    assert!(
        delete(
            &kube,
            "networking.istio.io/v1",
            "VirtualService",
            "bookinfo",
            "ratings"
        )
        .await
    );
    eventually("the delete", || async {
        names(&hub, VS) == ["bookinfo/reviews"]
    })
    .await;

    // An object the API server accepts but Istio would not: reported with
    // its origin, never served; the good ones stay.
    apply_yaml(
        &kube,
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: broken, namespace: bookinfo}\nspec:\n  hosts: [broken]\n  http:\n  - route:\n    - destination: {host: broken}\n      weight: -5\n",
    )
    .await;
    let mut status = hub.status();
    let rejected = tokio::time::timeout(
        DEADLINE,
        status.wait_for(|s| {
            s.rejected
                .iter()
                .any(|r| r.name.as_deref() == Some("bookinfo/broken"))
        }),
    )
    .await
    .expect("the invalid object is reported")
    .unwrap()
    .clone();
    let r = rejected
        .rejected
        .iter()
        .find(|r| r.name.as_deref() == Some("bookinfo/broken"))
        .unwrap();
    assert_eq!(
        r.origin.as_ref().unwrap().to_string(),
        "primary:networking.istio.io/VirtualService/bookinfo/broken"
    );
    assert!(!r.reasons.is_empty());
    assert_eq!(names(&hub, VS), ["bookinfo/reviews"]);

    // A CRD installed after start is discovered without a restart.
    assert!(served(&hub, GW).is_empty());
    planes.install_istio_crds("primary", &[]).await;
    apply_yaml(
        &kube,
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: ingress, namespace: bookinfo}\nspec:\n  selector: {istio: ingressgateway}\n  servers:\n  - port: {number: 80, name: http, protocol: HTTP}\n    hosts: ['*']\n",
    )
    .await;
    eventually("the Gateway of a CRD installed after start", || async {
        names(&hub, GW) == ["bookinfo/ingress"]
    })
    .await;

    // The API server restarts: the hub reports the failing watches, keeps
    // serving, and picks up what changed meanwhile.
    planes.stop("primary");
    eventually("the watch problem on /status", || async {
        hub.status()
            .borrow()
            .sources
            .iter()
            .any(|s| !s.problems.is_empty())
    })
    .await;
    assert_eq!(names(&hub, VS), ["bookinfo/reviews"]);
    planes.restart("primary").await;
    let kube = planes.client("primary").await;
    apply_yaml(&kube, &vs("details", "details")).await;
    eventually("a change after the restart", || async {
        names(&hub, VS) == ["bookinfo/details", "bookinfo/reviews"]
    })
    .await;
    eventually("the problems cleared", || async {
        hub.status()
            .borrow()
            .sources
            .iter()
            .all(|s| s.problems.is_empty())
    })
    .await;
    assert!(hub.shutdown().await, "clean shutdown");
}

//! The Kubernetes harness itself: real kube-apiservers on one etcd, each
//! its own cluster.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use meshhub_e2e::kube::{ControlPlanes, apply_yaml, get};
use meshhub_e2e::turn;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_on_one_etcd_are_isolated_and_serve_istio_crds() {
    let _turn = turn(module_path!());
    let mut planes = ControlPlanes::start_bare(&["one", "two"]).await;
    planes.install_istio_crds("one", &["Gateway"]).await;
    let one = planes.client("one").await;
    let two = planes.client("two").await;

    // CRDs installed in one are served there only.
    planes.namespace("one", "bookinfo").await;
    apply_yaml(
        &one,
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews, namespace: bookinfo}\nspec: {hosts: [reviews]}\n",
    )
    .await;
    let vs = get(
        &one,
        "networking.istio.io/v1",
        "VirtualService",
        "bookinfo",
        "reviews",
    )
    .await
    .expect("the VirtualService exists in one");
    assert_eq!(vs.data["spec"]["hosts"][0], "reviews");
    // Listed under v1alpha3 too (the CRD serves both).
    assert!(
        get(
            &one,
            "networking.istio.io/v1alpha3",
            "VirtualService",
            "bookinfo",
            "reviews"
        )
        .await
        .is_some()
    );
    let groups = two.list_api_groups().await.unwrap();
    assert!(
        !groups
            .groups
            .iter()
            .any(|g| g.name == "networking.istio.io"),
        "cluster two serves no Istio group"
    );
    // The excepted CRD is absent.
    let resources = one
        .list_api_group_resources("networking.istio.io/v1")
        .await
        .unwrap();
    assert!(
        resources
            .resources
            .iter()
            .any(|r| r.name == "virtualservices")
    );
    assert!(!resources.resources.iter().any(|r| r.name == "gateways"));

    // Objects are per cluster; a restarted API server keeps its data.
    planes.namespace("two", "bookinfo").await;
    let cms: Api<ConfigMap> = Api::namespaced(two.clone(), "bookinfo");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("only-in-two".to_owned());
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let in_one: Api<ConfigMap> = Api::namespaced(one.clone(), "bookinfo");
    assert!(in_one.get_opt("only-in-two").await.unwrap().is_none());
    planes.restart("two").await;
    let two = planes.client("two").await;
    let cms: Api<ConfigMap> = Api::namespaced(two, "bookinfo");
    assert!(cms.get_opt("only-in-two").await.unwrap().is_some());
}

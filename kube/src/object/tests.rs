use meshhub_proto::kinds::KindTable;
use serde_json::json;

use super::*;
use crate::discovery::resource;

fn dynamic(json: Value) -> DynamicObject {
    serde_json::from_value(json).unwrap()
}

#[test]
fn objects_keep_identity_version_and_spec_but_not_status_or_kubectl_copies() {
    let vs = resource(
        "networking.istio.io",
        "v1",
        "VirtualService",
        "virtualservices",
    );
    let obj = dynamic(json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {
            "name": "reviews", "namespace": "bookinfo", "resourceVersion": "4711",
            "creationTimestamp": "2026-11-23T10:00:00Z",
            "labels": {"app": "reviews"},
            "annotations": {LAST_APPLIED: "{...}", "team": "b"},
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {"hosts": ["reviews"]},
        "status": {"observedGeneration": 1},
    }));
    let o = to_object(&vs, obj);
    assert_eq!(o.api_version, "networking.istio.io/v1");
    assert_eq!(o.kind, "VirtualService");
    assert_eq!(o.metadata.name, "reviews");
    assert_eq!(o.metadata.namespace.as_deref(), Some("bookinfo"));
    assert_eq!(o.metadata.resource_version.as_deref(), Some("4711"));
    assert_eq!(
        o.metadata.creation_timestamp.as_deref(),
        Some("2026-11-23T10:00:00Z")
    );
    assert_eq!(o.metadata.labels["app"], "reviews");
    assert!(!o.metadata.annotations.contains_key(LAST_APPLIED));
    assert_eq!(o.metadata.annotations["team"], "b");
    assert!(!o.content.contains_key("status"));
    assert_eq!(o.content["spec"]["hosts"][0], "reviews");

    // The transcoder takes it: resourceVersion is the MCP version.
    let table = KindTable::builtin();
    let kind = meshhub_proto::transcode::kind_of(&table, &o).unwrap();
    let r = meshhub_proto::transcode::object_to_resource(kind, &o).unwrap();
    let meta = r.metadata.unwrap();
    assert_eq!(meta.name, "bookinfo/reviews");
    assert_eq!(meta.version, "4711");
    assert!(meta.create_time.is_some());
}

#[test]
fn core_objects_keep_their_data() {
    let cm = resource("", "v1", "ConfigMap", "configmaps");
    let obj = dynamic(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "mesh", "namespace": "istio-system"},
        "data": {"k": "v"},
    }));
    let o = to_object(&cm, obj);
    assert_eq!(o.api_version, "v1");
    assert_eq!(o.content["data"]["k"], "v");
}

#[test]
fn the_last_manager_is_the_newest_managed_fields_entry() {
    let obj = dynamic(json!({
        "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
        "metadata": {"name": "r", "namespace": "ns", "resourceVersion": "7",
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "time": "2026-11-01T10:00:00Z"},
                {"manager": "argocd-controller", "operation": "Apply", "time": "2026-11-02T10:00:00Z"},
                {"manager": "kubectl-edit", "operation": "Update", "time": "2026-10-30T10:00:00Z"}
            ]},
        "spec": {"hosts": ["r"]}
    }));
    assert_eq!(last_manager(&obj).as_deref(), Some("argocd-controller"));
    let none = dynamic(json!({
        "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
        "metadata": {"name": "r", "namespace": "ns"}
    }));
    assert_eq!(last_manager(&none), None);
}

fn desired() -> Object {
    serde_json::from_value(json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {
            "name": "reviews", "namespace": "bookinfo",
            "labels": {"app.kubernetes.io/managed-by": "meshhub"},
            "annotations": {"meshhub.io/hub-version": "7"},
        },
        "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews"}, "weight": 100}]}]},
    }))
    .unwrap()
}

#[test]
fn live_objects_with_server_defaults_match_but_hand_edits_do_not() {
    let base = json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {
            "name": "reviews", "namespace": "bookinfo", "resourceVersion": "99",
            "labels": {"app.kubernetes.io/managed-by": "meshhub", "extra": "x"},
            "annotations": {"meshhub.io/hub-version": "7"},
        },
        "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews"}, "weight": 100.0}]}]},
        "status": {},
    });
    assert!(holds(&dynamic(base.clone()), &desired()));

    let mut edited = base.clone();
    edited["spec"]["hosts"][0] = json!("evil");
    assert!(!holds(&dynamic(edited), &desired()));

    let mut longer = base.clone();
    longer["spec"]["hosts"] = json!(["reviews", "more"]);
    assert!(!holds(&dynamic(longer), &desired()));

    let mut relabelled = base.clone();
    relabelled["metadata"]["annotations"]["meshhub.io/hub-version"] = json!("6");
    assert!(!holds(&dynamic(relabelled), &desired()));

    let mut no_spec = base;
    no_spec.as_object_mut().unwrap().remove("spec");
    assert!(!holds(&dynamic(no_spec), &desired()));
}

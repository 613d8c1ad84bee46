use serde_json::json;

use super::*;

fn live(json: Value) -> DynamicObject {
    serde_json::from_value(json).unwrap()
}

fn desired() -> Object {
    serde_json::from_value(json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {
            "name": "reviews", "namespace": "bookinfo",
            "labels": {MANAGED_BY: MANAGED_BY_VALUE},
            "annotations": {HUB_VERSION: "7"},
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
            "labels": {MANAGED_BY: MANAGED_BY_VALUE, "extra": "x"},
            "annotations": {HUB_VERSION: "7"},
        },
        "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews"}, "weight": 100.0}]}]},
        "status": {},
    });
    assert!(matches(&desired(), &live(base.clone())));

    let mut edited = base.clone();
    edited["spec"]["hosts"][0] = json!("evil");
    assert!(!matches(&desired(), &live(edited)));

    let mut longer = base.clone();
    longer["spec"]["hosts"] = json!(["reviews", "more"]);
    assert!(!matches(&desired(), &live(longer)));

    let mut relabelled = base.clone();
    relabelled["metadata"]["annotations"][HUB_VERSION] = json!("6");
    assert!(!matches(&desired(), &live(relabelled)));

    let mut no_spec = base;
    no_spec.as_object_mut().unwrap().remove("spec");
    assert!(!matches(&desired(), &live(no_spec)));
}

#[test]
fn failures_are_summed_up_in_one_nack_message() {
    let failures: Vec<String> = (0..8)
        .map(|i| format!("VirtualService bookinfo/v{i}: no"))
        .collect();
    let s = summary(&failures);
    assert!(
        s.starts_with("applying to Kubernetes failed: VirtualService bookinfo/v0: no; "),
        "{s}"
    );
    assert!(s.ends_with("; and 3 more"), "{s}");
    assert!(!s.contains("v5"), "{s}");
}

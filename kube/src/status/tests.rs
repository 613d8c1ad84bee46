use std::sync::{Arc, Mutex};

use kube::api::{ApiResource, DynamicObject};
use serde_json::{Value, json};

use super::*;

fn vs_resource() -> ApiResource {
    ApiResource {
        group: "networking.istio.io".into(),
        version: "v1".into(),
        api_version: "networking.istio.io/v1".into(),
        kind: "VirtualService".into(),
        plural: "virtualservices".into(),
    }
}

fn distributed(status: &str, time: Option<&str>) -> Condition {
    Condition {
        type_: "Distributed".into(),
        status: status.into(),
        last_transition_time: time.map(str::to_owned),
        reason: "Acked".into(),
        message: "ACKed by 2/2 clusters".into(),
        observed_generation: Some(3),
        ..Condition::default()
    }
}

#[test]
fn a_live_status_reads_with_generations_as_numbers_or_strings() {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
        "metadata": {"name": "r", "namespace": "ns"},
        "spec": {},
        "status": {
            "observedGeneration": "3",
            "conditions": [{"type": "Distributed", "status": "True", "observedGeneration": 3,
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "validationMessages": [{"type": {"code": "IST0101"}, "level": "ERROR",
                                    "documentationUrl": "https://istio.io/latest/docs/reference/config/analysis/ist0101/"}]
        }
    }))
    .unwrap();
    let s = observed(&obj).unwrap();
    assert_eq!(s.observed_generation, Some(3));
    assert_eq!(s.conditions[0].observed_generation, Some(3));
    assert_eq!(s.validation_messages[0].type_.code, "IST0101");
    assert_eq!(s.validation_messages[0].type_.name, "");
    let none: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "X", "metadata": {"name": "r"}
    }))
    .unwrap();
    assert_eq!(observed(&none), None);
}

#[test]
fn statuses_compare_without_the_conditions_times() {
    let a = IstioStatus {
        conditions: vec![distributed("True", Some("2026-01-01T00:00:00Z"))],
        validation_messages: vec![ValidationMessage::new(
            "IST0101",
            "ReferencedResourceNotFound",
            "Error",
        )],
        observed_generation: Some(3),
    };
    let mut b = a.clone();
    b.conditions[0].last_transition_time = Some("2026-02-02T00:00:00Z".into());
    b.conditions[0].last_probe_time = Some("2026-02-02T00:00:00Z".into());
    assert!(a.same_as(&b));
    b.conditions[0].status = "False".into();
    assert!(!a.same_as(&b));
    let mut c = a.clone();
    c.observed_generation = Some(4);
    assert!(!a.same_as(&c));
    let mut d = a.clone();
    d.validation_messages.clear();
    assert!(!a.same_as(&d));
}

#[test]
fn validation_messages_read_as_istiod_writes_them() {
    let m = ValidationMessage::new("IST0101", "ReferencedResourceNotFound", "Error");
    assert_eq!(
        serde_json::to_value(&m).unwrap(),
        json!({
            "type": {"code": "IST0101", "name": "ReferencedResourceNotFound"},
            "level": "ERROR",
            "documentationUrl": "https://istio.io/latest/docs/reference/config/analysis/ist0101/"
        })
    );
}

#[test]
fn the_apply_body_names_the_object_and_holds_only_the_status() {
    let status = IstioStatus {
        conditions: vec![distributed("True", None)],
        validation_messages: Vec::new(),
        observed_generation: Some(3),
    };
    let body = apply_body(&vs_resource(), Some("ns"), "r", &status);
    assert_eq!(
        body,
        json!({
            "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "metadata": {"name": "r", "namespace": "ns"},
            "status": {
                "observedGeneration": 3,
                "conditions": [{"type": "Distributed", "status": "True", "reason": "Acked",
                                "message": "ACKed by 2/2 clusters", "observedGeneration": 3}]
            }
        })
    );
}

/// Requests seen: method, path and query, body.
type Asked = Arc<Mutex<Vec<(String, String, Value)>>>;

/// A fake API server answering every request with `status` and `body`; it
/// records every request.
fn fake_api(status: u16, body: Value) -> (kube::Client, Asked) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let log = log.clone();
        let body = body.clone();
        async move {
            let (parts, req_body) = req.into_parts();
            let bytes = http_body_util::BodyExt::collect(req_body)
                .await
                .unwrap()
                .to_bytes();
            log.lock().unwrap().push((
                parts.method.to_string(),
                parts.uri.to_string(),
                serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            ));
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            )
        }
    });
    (kube::Client::new(service, "default"), asked)
}

#[tokio::test]
async fn apply_patches_the_status_subresource_as_our_field_manager() {
    let (client, asked) = fake_api(
        200,
        json!({"apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
               "metadata": {"name": "r", "namespace": "ns", "resourceVersion": "42"}}),
    );
    let status = IstioStatus {
        observed_generation: Some(1),
        ..IstioStatus::default()
    };
    let out = apply(client, &vs_resource(), Some("ns"), "r", &status)
        .await
        .unwrap();
    assert_eq!(out, Applied::Written(Some("42".into())));
    let asked = asked.lock().unwrap();
    let (method, uri, body) = &asked[0];
    assert_eq!(method, "PATCH");
    assert!(
        uri.starts_with("/apis/networking.istio.io/v1/namespaces/ns/virtualservices/r/status?"),
        "{uri}"
    );
    assert!(uri.contains("fieldManager=meshhub-status"), "{uri}");
    assert!(uri.contains("force=true"), "{uri}");
    assert_eq!(body["status"]["observedGeneration"], 1);
}

#[tokio::test]
async fn an_object_deleted_meanwhile_is_not_an_error() {
    let (client, _) = fake_api(
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "not found", "reason": "NotFound", "code": 404}),
    );
    let out = apply(
        client,
        &vs_resource(),
        Some("ns"),
        "r",
        &IstioStatus::default(),
    )
    .await
    .unwrap();
    assert_eq!(out, Applied::Gone);
}

#[tokio::test]
async fn other_failures_are_errors_to_retry() {
    let (client, _) = fake_api(
        429,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "slow down", "reason": "TooManyRequests", "code": 429}),
    );
    let err = apply(
        client,
        &vs_resource(),
        Some("ns"),
        "r",
        &IstioStatus::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 429));
}

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt as _;
use meshhub_proto::kinds::KindTable;
use meshhub_testkit::pki::Leaf;
use serde_json::{Value, json};
use tower::ServiceExt as _;

use super::*;
use crate::store::UnknownFields;

fn validator(policy: UnknownFields) -> Validator {
    Validator::new(
        KindTable::builtin(),
        policy,
        crate::validation::semantic_check(&meshhub_validate::Validator::default()),
    )
}

fn vs(host: &str) -> Value {
    json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "reviews", "namespace": "bookinfo", "uid": "x", "resourceVersion": "7"},
        "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": host}}]}]},
        "status": {"validationMessages": []}
    })
}

fn review(operation: &str, group: &str, kind: &str, object: Option<Value>) -> Vec<u8> {
    let mut request = json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": format!("{}s", kind.to_lowercase())},
        "name": "reviews",
        "namespace": "bookinfo",
        "operation": operation,
        "userInfo": {"username": "admin"},
    });
    if let Some(o) = object {
        request["object"] = o;
    }
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": request,
    }))
    .unwrap()
}

const UID: &str = "705ab4f5-6393-11e8-b7cc-42010a800002";

#[test]
fn a_valid_object_is_allowed_and_the_uid_echoed() {
    let d = validator(UnknownFields::Reject)
        .review(&review(
            "CREATE",
            "networking.istio.io",
            "VirtualService",
            Some(vs("reviews")),
        ))
        .unwrap();
    assert!(d.allowed, "{d:?}");
    let out = d.to_json();
    assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(out["kind"], "AdmissionReview");
    assert_eq!(out["response"]["uid"], UID);
    assert_eq!(out["response"]["allowed"], true);
    assert!(out["response"].get("status").is_none(), "{out}");
    assert!(out["response"].get("warnings").is_none(), "{out}");
}

#[test]
fn an_invalid_object_is_denied_with_the_field_named() {
    let d = validator(UnknownFields::Reject)
        .review(&review(
            "UPDATE",
            "networking.istio.io",
            "VirtualService",
            Some(vs("")),
        ))
        .unwrap();
    assert!(!d.allowed);
    let out = d.to_json();
    assert_eq!(out["response"]["uid"], UID);
    assert_eq!(out["response"]["allowed"], false);
    assert_eq!(out["response"]["status"]["code"], 422);
    let message = out["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "VirtualService bookinfo/reviews: spec.http[0].route[0].destination.host: "
        ),
        "{message}"
    );
    // The same message the store reports for the same object from a source.
    let store_reasons = crate::store::verdict(
        &KindTable::builtin(),
        UnknownFields::Reject,
        &crate::validation::semantic_check(&meshhub_validate::Validator::default()),
        serde_json::from_value(vs("")).unwrap(),
    )
    .error_messages();
    assert_eq!(message, store_reasons.join("; "));
}

#[test]
fn a_missing_destination_is_named() {
    let mut obj = vs("reviews");
    obj["spec"]["http"][0]["route"][0] = json!({"weight": 100});
    let d = validator(UnknownFields::Reject)
        .review(&review(
            "CREATE",
            "networking.istio.io",
            "VirtualService",
            Some(obj),
        ))
        .unwrap();
    assert!(!d.allowed);
    assert!(
        d.message()
            .contains("spec.http[0].route[0].destination: is required"),
        "{}",
        d.message()
    );
}

#[test]
fn unknown_fields_follow_the_policy() {
    let mut obj = vs("reviews");
    obj["spec"]["bogus"] = json!(1);
    let body = review("CREATE", "networking.istio.io", "VirtualService", Some(obj));
    let rejected = validator(UnknownFields::Reject).review(&body).unwrap();
    assert!(!rejected.allowed);
    assert!(rejected.message().contains("spec.bogus"), "{rejected:?}");

    let pruned = validator(UnknownFields::Prune).review(&body).unwrap();
    assert!(pruned.allowed, "{pruned:?}");
    assert_eq!(pruned.warnings.len(), 1, "{pruned:?}");
    assert!(pruned.warnings[0].contains("spec.bogus"), "{pruned:?}");
    assert_eq!(
        pruned.to_json()["response"]["warnings"][0],
        json!(pruned.warnings[0])
    );
}

#[test]
fn delete_is_allowed_whatever_the_object() {
    let d = validator(UnknownFields::Reject)
        .review(&review(
            "DELETE",
            "networking.istio.io",
            "VirtualService",
            None,
        ))
        .unwrap();
    assert!(d.allowed);
    assert_eq!(d.to_json()["response"]["uid"], UID);
}

#[test]
fn unknown_kinds_are_allowed() {
    let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "reviews"}, "spec": {"nonsense": true}});
    let d = validator(UnknownFields::Reject)
        .review(&review("CREATE", "apps", "Deployment", Some(obj)))
        .unwrap();
    assert!(d.allowed, "{d:?}");
    assert!(d.warnings.is_empty());
}

#[test]
fn status_updates_are_allowed() {
    let mut body: Value = serde_json::from_slice(&review(
        "UPDATE",
        "networking.istio.io",
        "VirtualService",
        Some(vs("")),
    ))
    .unwrap();
    body["request"]["subResource"] = json!("status");
    let d = validator(UnknownFields::Reject)
        .review(&serde_json::to_vec(&body).unwrap())
        .unwrap();
    assert!(d.allowed);
}

#[test]
fn malformed_reviews_are_errors() {
    let v = validator(UnknownFields::Reject);
    assert!(matches!(
        v.review(b"not json"),
        Err(ReviewError::Malformed(_))
    ));
    let v1beta1 =
        json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}});
    assert!(matches!(
        v.review(&serde_json::to_vec(&v1beta1).unwrap()),
        Err(ReviewError::WrongType { .. })
    ));
    let no_request = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"});
    assert!(matches!(
        v.review(&serde_json::to_vec(&no_request).unwrap()),
        Err(ReviewError::NoRequest)
    ));
    let mut no_uid: Value = serde_json::from_slice(&review(
        "CREATE",
        "networking.istio.io",
        "VirtualService",
        Some(vs("a")),
    ))
    .unwrap();
    no_uid["request"]["uid"] = json!("");
    assert!(matches!(
        v.review(&serde_json::to_vec(&no_uid).unwrap()),
        Err(ReviewError::NoUid)
    ));
    assert!(matches!(
        v.review(&review(
            "CREATE",
            "networking.istio.io",
            "VirtualService",
            None
        )),
        Err(ReviewError::NoObject { .. })
    ));
}

async fn post(app: Router, path: &str, body: Vec<u8>) -> (StatusCode, String) {
    let response = app
        .oneshot(
            Request::post(path)
                .header("content-type", "application/json")
                .body(Body::from(body))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn http_answers_reviews_and_refuses_garbage_with_400() {
    let app = router("/validate", validator(UnknownFields::Reject));
    let (code, body) = post(
        app.clone(),
        "/validate",
        review(
            "CREATE",
            "networking.istio.io",
            "VirtualService",
            Some(vs("")),
        ),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let out: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(out["response"]["uid"], UID);
    assert_eq!(out["response"]["allowed"], false);

    let (code, body) = post(app.clone(), "/validate", b"{\"kind\": 1}".to_vec()).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(body.starts_with("not an AdmissionReview"), "{body}");

    let (code, _) = post(app, "/elsewhere", b"{}".to_vec()).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
}

/// A self-signed certificate and key for `name`, as PEM.
fn self_signed(name: &str) -> (String, String) {
    let leaf = Leaf::self_signed(&[name]);
    (leaf.cert, leaf.key)
}

#[test]
fn certificates_reload_and_bad_ones_are_refused() {
    use meshhub_mcp::tls::reload::Reloaded;

    let dir = tempfile::tempdir().unwrap();
    let spec = WebhookSpec {
        addr: "127.0.0.1:0".parse().unwrap(),
        path: "/validate".into(),
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    let (cert, key) = (&spec.cert, &spec.key);
    let (c1, k1) = self_signed("one.example");
    std::fs::write(cert, &c1).unwrap();
    std::fs::write(key, &k1).unwrap();
    let load = |spec: &WebhookSpec| {
        ReloadingServerTls::load_with_alpn(TLS_PORT, spec.tls_files(), ALPN_H2_HTTP1)
    };
    let certs = load(&spec).unwrap();
    let first = certs.current();
    assert_eq!(certs.reload().unwrap(), Reloaded::Unchanged);

    // A new certificate with the old key: refused, the old one stays.
    let (c2, k2) = self_signed("two.example");
    std::fs::write(cert, &c2).unwrap();
    assert!(matches!(certs.reload(), Err(TlsLoadError::Unusable { .. })));
    assert!(Arc::ptr_eq(&certs.current(), &first));
    // Garbage: refused too.
    std::fs::write(key, "not a key").unwrap();
    assert!(matches!(certs.reload(), Err(TlsLoadError::Empty { .. })));
    assert!(Arc::ptr_eq(&certs.current(), &first));

    // The matching key arrives: served, still offering HTTP/1.1 and h2.
    std::fs::write(key, &k2).unwrap();
    assert_eq!(certs.reload().unwrap(), Reloaded::Replaced);
    assert!(!Arc::ptr_eq(&certs.current(), &first));
    assert_eq!(
        certs.current().alpn_protocols,
        [b"h2".to_vec(), b"http/1.1".to_vec()]
    );

    // Missing files: an error at start.
    let missing = WebhookSpec {
        cert: dir.path().join("nope"),
        ..spec.clone()
    };
    assert!(matches!(load(&missing), Err(TlsLoadError::Read { .. })));
}

use std::sync::{Arc, Mutex};

use meshhub_proto::kinds::KindTable;
use serde_json::{Value, json};

use super::*;

/// A fake API server answering discovery from `routes` (path → status and
/// body); it records every path asked for.
fn fake_api(routes: Vec<(&'static str, u16, Value)>) -> (kube::Client, Arc<Mutex<Vec<String>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let path = req.uri().path().to_owned();
        log.lock().unwrap().push(path.clone());
        let (status, body) = routes
            .iter()
            .find(|(p, _, _)| *p == path)
            .map_or((404, not_found()), |(_, s, b)| (*s, b.clone()));
        async move {
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

fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "the server could not find the requested resource", "reason": "NotFound", "code": 404})
}

fn group(name: &str, versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": versions, "preferredVersion": versions[0]})
}

fn resources(group_version: &str, list: &[(&str, &str, bool)]) -> Value {
    let resources: Vec<Value> = list
        .iter()
        .map(|(plural, kind, namespaced)| json!({"name": plural, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": ["get", "list", "watch"]}))
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
}

fn kinds(names: &[(&str, &str)]) -> Vec<Kind> {
    let table = KindTable::builtin();
    names
        .iter()
        .map(|(g, k)| table.by_group_kind(g, k).unwrap().clone())
        .collect()
}

#[tokio::test]
async fn each_kind_is_served_in_its_first_served_version_and_each_list_is_asked_once() {
    let (client, asked) = fake_api(vec![
        (
            "/apis",
            200,
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                group("networking.istio.io", &["v1beta1", "v1alpha3"]),
                group("security.istio.io", &["v1"]),
            ]}),
        ),
        (
            "/apis/networking.istio.io/v1beta1",
            200,
            resources(
                "networking.istio.io/v1beta1",
                &[("virtualservices", "VirtualService", true)],
            ),
        ),
        (
            "/api/v1",
            200,
            resources(
                "v1",
                &[
                    ("configmaps", "ConfigMap", true),
                    ("namespaces", "Namespace", false),
                ],
            ),
        ),
        // `/apis/security.istio.io/v1` answers 404: its CRDs are going.
    ]);
    let mut wanted = kinds(&[
        ("networking.istio.io", "VirtualService"),
        ("networking.istio.io", "Gateway"),
        ("security.istio.io", "AuthorizationPolicy"),
        ("telemetry.istio.io", "Telemetry"),
    ]);
    wanted.push(Kind::schemaless("", "v1", "ConfigMap", "configmaps", true).unwrap());
    wanted.push(Kind::schemaless("", "v1", "Namespace", "namespaces", false).unwrap());

    let served = discover(&client, &wanted).await.unwrap();
    let seen: Vec<(&str, &str, bool)> = served
        .iter()
        .map(|s| {
            (
                s.resource.kind.as_str(),
                s.resource.api_version.as_str(),
                s.namespaced,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("VirtualService", "networking.istio.io/v1beta1", true),
            ("ConfigMap", "v1", true),
            ("Namespace", "v1", false),
        ]
    );
    assert_eq!(served[0].resource.plural, "virtualservices");
    assert_eq!(served[0].resource.group, "networking.istio.io");
    assert_eq!(served[0].resource.version, "v1beta1");
    // v1 of networking is not listed: never asked; the Gateway, missing
    // from v1beta1, is looked for in v1alpha3; telemetry's group is not
    // served at all: never asked. Each list is asked for once.
    assert_eq!(
        *asked.lock().unwrap(),
        [
            "/apis",
            "/apis/networking.istio.io/v1beta1",
            "/apis/networking.istio.io/v1alpha3",
            "/apis/security.istio.io/v1",
            "/api/v1",
        ]
    );
}

#[tokio::test]
async fn a_failing_resource_list_fails_discovery() {
    let (client, _) = fake_api(vec![
        (
            "/apis",
            200,
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group("networking.istio.io", &["v1"])]}),
        ),
        (
            "/apis/networking.istio.io/v1",
            503,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "etcd is down", "reason": "ServiceUnavailable", "code": 503}),
        ),
    ]);
    let wanted = kinds(&[("networking.istio.io", "VirtualService")]);
    let e = discover(&client, &wanted).await.unwrap_err();
    assert_eq!(
        crate::error_text(&e),
        "etcd is down (503 ServiceUnavailable)"
    );
}

#[test]
fn core_resources_have_no_group_in_their_api_version() {
    assert_eq!(
        resource("", "v1", "ConfigMap", "configmaps").api_version,
        "v1"
    );
    let r = resource("networking.istio.io", "v1", "Gateway", "gateways");
    assert_eq!(r.api_version, "networking.istio.io/v1");
    assert_eq!(
        (r.kind.as_str(), r.plural.as_str()),
        ("Gateway", "gateways")
    );
}

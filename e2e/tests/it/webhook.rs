//! Galley's webhook role, verified by a real kube-apiserver calling the
//! real hub binary over TLS: a `ValidatingWebhookConfiguration` points at
//! meshhub's admission webhook, and writes of Istio objects through the API
//! server are admitted or refused with meshhub's own messages.
//!
//! Covered: an invalid VirtualService refused with the field named, a valid
//! one created, an update breaking it refused (the stored object intact),
//! the denial counted on `/metrics`, a graceful stop, and with the hub
//! gone: writes refused under `failurePolicy: Fail`, accepted under
//! `Ignore`.

use ::kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use meshhub_e2e::kube::{ControlPlanes, TEST_MANAGER, get};
use meshhub_e2e::*;
use meshhub_testkit::eventually_some;
use meshhub_testkit::fixtures::write_atomic;
use meshhub_testkit::http::get_blocking;
use meshhub_testkit::pki::Ca;
use serde_json::{Value, json};

const NET: &str = "networking.istio.io/v1";
const WEBHOOK: &str = "meshhub-e2e";
/// meshhub's message for the broken destination below.
const HOST_MESSAGE: &str = "spec.http[0].route[0].destination.host";

fn vs(name: &str, host: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": NET,
        "kind": "VirtualService",
        "metadata": {"name": name, "namespace": "bookinfo"},
        "spec": {"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": host}}]}]}
    }))
    .unwrap()
}

fn vs_api(client: &::kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "networking.istio.io".into(),
        version: "v1".into(),
        api_version: NET.into(),
        kind: "VirtualService".into(),
        plural: "virtualservices".into(),
    };
    Api::namespaced_with(client.clone(), "bookinfo", &resource)
}

/// The API server's error text, or `None` when the write succeeded.
fn error_text<T>(r: Result<T, ::kube::Error>) -> Option<String> {
    match r {
        Ok(_) => None,
        Err(::kube::Error::Api(s)) => Some(format!("{} ({})", s.message, s.code)),
        Err(e) => Some(e.to_string()),
    }
}

fn webhook_configuration(url: &str, ca: &str, failure_policy: &str) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK},
        "webhooks": [{
            "name": "validation.meshhub.io",
            "clientConfig": {"url": url, "caBundle": ByteString(ca.as_bytes().to_vec())},
            "rules": [{
                "apiGroups": ["networking.istio.io", "security.istio.io"],
                "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["*"],
                "scope": "*",
            }],
            "failurePolicy": failure_policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        }]
    })
}

async fn register(client: &::kube::Client, config: Value) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let typed: ValidatingWebhookConfiguration = serde_json::from_value(config).unwrap();
    api.patch(
        WEBHOOK,
        &PatchParams::apply(TEST_MANAGER).force(),
        &Patch::Apply(&typed),
    )
    .await
    .expect("webhook configuration applied");
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_asks_meshhub_and_keeps_invalid_objects_out() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start(&["main"]).await;
    planes.namespace("main", "bookinfo").await;
    let client = planes.client("main").await;
    let vss = vs_api(&client);

    let dir = tempfile::tempdir().unwrap();
    // A CA and a serving certificate for 127.0.0.1 signed by it.
    let ca = Ca::new("meshhub-webhook-e2e-ca");
    ca.server(&["127.0.0.1"])
        .write(&dir.path().join("tls.crt"), &dir.path().join("tls.key"));
    let ca = ca.pem();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    let config = dir.path().join("meshhub.yaml");
    write_atomic(
        &config,
        &format!(
            "sources:\n  - file: {{path: {}}}\nwebhook:\n  addr: 127.0.0.1:0\n  tls:\n    cert: tls.crt\n    key: tls.key\n",
            objects.display()
        ),
    );
    let mut hub = HubProc::start("hub", &config, planes.logs());
    let started = hub.proc.log_fields("meshhub started", 0).unwrap();
    let addr: std::net::SocketAddr = started["webhook.addr"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no webhook.addr in {started}"));
    let url = format!("https://127.0.0.1:{}/validate", addr.port());
    register(&client, webhook_configuration(&url, &ca, "Fail")).await;

    // The API server loads webhook configurations asynchronously: wait
    // (with dry runs, which change nothing) until meshhub answers.
    let denial = eventually_some("the webhook to be called", async || {
        error_text(vss.create(&dry_run(), &vs("bad", "")).await)
            .filter(|e| e.contains("denied the request"))
    })
    .await;
    assert!(denial.contains(HOST_MESSAGE), "{denial}");

    // An invalid VirtualService is refused with meshhub's message.
    let refused = error_text(vss.create(&PostParams::default(), &vs("bad", "")).await)
        .expect("an invalid VirtualService is refused");
    assert!(
        refused.contains("denied the request")
            && refused.contains(&format!("VirtualService bookinfo/bad: {HOST_MESSAGE}")),
        "{refused}"
    );
    assert!(refused.ends_with("(422)"), "{refused}");
    assert!(
        get(&client, NET, "VirtualService", "bookinfo", "bad")
            .await
            .is_none()
    );

    // A valid one is created.
    vss.create(&PostParams::default(), &vs("reviews", "reviews"))
        .await
        .expect("a valid VirtualService is admitted");

    // An update breaking it is refused; the stored object is intact.
    let broken = json!({"spec": {"http": [{"route": [{"destination": {"host": ""}}]}]}});
    let refused = error_text(
        vss.patch("reviews", &PatchParams::default(), &Patch::Merge(&broken))
            .await,
    )
    .expect("a breaking update is refused");
    assert!(refused.contains(HOST_MESSAGE), "{refused}");
    let stored = get(&client, NET, "VirtualService", "bookinfo", "reviews")
        .await
        .expect("still there");
    assert_eq!(
        stored.data["spec"]["http"][0]["route"][0]["destination"]["host"],
        "reviews"
    );
    // A harmless update passes.
    let fine = json!({"spec": {"hosts": ["reviews", "reviews.bookinfo"]}});
    vss.patch("reviews", &PatchParams::default(), &Patch::Merge(&fine))
        .await
        .expect("a valid update is admitted");

    // Denials are counted and logged.
    let (code, metrics) = get_blocking(hub.admin, "/metrics").expect("metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.lines().any(|l| l.starts_with(
            "meshhub_webhook_requests_total{kind=\"VirtualService\",allowed=\"false\"}"
        )),
        "{metrics}"
    );
    assert!(metrics.contains("meshhub_webhook_request_duration_seconds"));
    let logged = hub.proc.log_fields("denied", 0).expect("denial logged");
    assert!(
        logged["reason"]
            .as_str()
            .unwrap_or("")
            .contains(HOST_MESSAGE),
        "{logged}"
    );

    // A graceful stop.
    hub.proc.signal("TERM");
    assert!(hub.proc.wait_exit().success());

    // Hub gone, failurePolicy Fail: writes are refused.
    let refused = error_text(
        vss.create(&PostParams::default(), &vs("while-down", "reviews"))
            .await,
    )
    .expect("refused while the webhook is down (Fail)");
    assert!(refused.contains("failed calling webhook"), "{refused}");

    // failurePolicy Ignore: accepted (once the API server has the change).
    register(&client, webhook_configuration(&url, &ca, "Ignore")).await;
    eventually_some("failurePolicy Ignore in effect", async || {
        vss.create(&dry_run(), &vs("while-down", "reviews"))
            .await
            .ok()
    })
    .await;
    vss.create(&PostParams::default(), &vs("while-down", "reviews"))
        .await
        .expect("accepted while the webhook is down (Ignore)");
}

//! The Helm charts of `deploy/charts/`, rendered by real Helm (built from
//! its Go module by `e2e/peers/helm.sh`) and applied to real kube-apiservers:
//!
//! * both charts lint and render with the common settings, and every object
//!   is accepted by the API server, first with a server-side dry run, then
//!   for real; the secure defaults are in the rendered Deployments;
//! * running the real hub with the chart's rendered configuration and a
//!   token of the chart's ServiceAccount, the chart's RBAC lets it list and
//!   watch what it serves (it becomes ready and serves a new object) and
//!   hold its Lease, and denies what it must not do (write Istio objects,
//!   read Secrets or Pods, other namespaces' Leases);
//! * the same for the sink agent with `apply.enabled` on a second cluster:
//!   it applies what the hub pushes, in the namespaces it was given, and is
//!   refused everywhere else.

use std::path::Path;

use ::kube::api::{Api, DynamicObject, ListParams, PostParams};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use meshhub_e2e::helm::{apply, key, lint, objects, template};
use meshhub_e2e::kube::{ControlPlanes, applied_through_the_mesh, client_from_kubeconfig};
use meshhub_e2e::*;
use meshhub_testkit::fixtures::write_atomic;
use meshhub_testkit::pki::{Ca, Leaf};
use serde_json::{Value, json};

const NS: &str = "meshhub";
const NET: &str = "networking.istio.io/v1";

/// The Prometheus Operator's ServiceMonitor and PrometheusRule kinds, as
/// much of their schema as the charts use (written here: the operator's
/// CRDs are not fetched): the fields' types, what is required, the
/// duration pattern of `for`.
const MONITORING_CRDS: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        required: [spec]
        properties:
          spec:
            type: object
            required: [selector]
            properties:
              jobLabel: {type: string}
              selector: {type: object, x-kubernetes-preserve-unknown-fields: true}
              endpoints:
                type: array
                items:
                  type: object
                  properties:
                    port: {type: string}
                    path: {type: string}
                    interval: {type: string, pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$'}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: prometheusrules.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: PrometheusRule, listKind: PrometheusRuleList, plural: prometheusrules, singular: prometheusrule}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        required: [spec]
        properties:
          spec:
            type: object
            properties:
              groups:
                type: array
                items:
                  type: object
                  required: [name, rules]
                  properties:
                    name: {type: string, minLength: 1}
                    interval: {type: string}
                    rules:
                      type: array
                      items:
                        type: object
                        required: [expr]
                        properties:
                          alert: {type: string}
                          record: {type: string}
                          expr: {x-kubernetes-int-or-string: true}
                          for: {type: string, pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$'}
                          labels: {type: object, additionalProperties: {type: string}}
                          annotations: {type: object, additionalProperties: {type: string}}
"#;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn base64(text: &str) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = text.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, c)| n | (u32::from(*c) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn find<'a>(objs: &'a [DynamicObject], kind: &str) -> Vec<&'a DynamicObject> {
    objs.iter()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == kind))
        .collect()
}

fn kinds(objs: &[DynamicObject]) -> Vec<String> {
    let mut k: Vec<String> = objs
        .iter()
        .filter_map(|o| o.types.as_ref().map(|t| t.kind.clone()))
        .collect();
    k.sort();
    k.dedup();
    k
}

/// Applies with a dry run first (nothing may be refused), then for real.
async fn install(client: &::kube::Client, objs: &[DynamicObject]) {
    let refused = apply(client, objs, NS, true).await;
    assert!(refused.is_empty(), "dry run refused: {refused:#?}");
    let refused = apply(client, objs, NS, false).await;
    assert!(refused.is_empty(), "apply refused: {refused:#?}");
}

fn forbidden<T: std::fmt::Debug>(what: &str, r: Result<T, ::kube::Error>) {
    match r {
        Err(::kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_charts_render_and_every_object_is_accepted_by_a_real_api_server() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start(&["primary"]).await;
    planes.install_istio_crds("primary", &[]).await;
    planes.namespace("primary", NS).await;
    planes.namespace("primary", "bookinfo").await;
    let client = planes.client("primary").await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // The chart's ServiceMonitor and PrometheusRule are applied too.
    let monitoring_crds = dir.join("monitoring-crds.yaml");
    std::fs::write(&monitoring_crds, MONITORING_CRDS).unwrap();
    planes
        .install_crds_file("primary", &monitoring_crds, &[])
        .await;

    let ca = Ca::new("meshhub-helm-e2e-ca");
    let Leaf { cert, key: key_pem } = ca.server(&["meshhub.meshhub.svc"]);
    let ca = ca.pem();
    let ca_file = write(dir, "ca.pem", &ca);
    let cert_file = write(dir, "cert.pem", &cert);
    let key_file = write(dir, "key.pem", &key_pem);
    let hub_values = write(
        dir,
        "hub-values.yaml",
        &format!(
            "replicaCount: 2\nleaderElection: {{enabled: true}}\npodDisruptionBudget: {{enabled: true}}\nserviceMonitor: {{enabled: true}}\nprometheusRule: {{enabled: true, alerts: {{MeshhubClusterNotSynced: {{for: 30m}}}}}}\ndashboards: {{enabled: true}}\nhistory: {{enabled: true, keep: 20}}\naudit: {{enabled: true, file: true}}\nwebhook:\n  enabled: true\n  certSecret: meshhub-webhook-tls\n  caBundle: {}\nconfig:\n  sources:\n    - name: kubernetes\n      kubernetes: {{namespaces: [bookinfo]}}\n  clusters:\n    - name: east\n      namespaces: [bookinfo]\n      agent:\n        address: https://agent.east.example:9911\n        tls: {{ca: /etc/meshhub/tls/ca.crt, cert: /etc/meshhub/tls/tls.crt, key: /etc/meshhub/tls/tls.key}}\n",
            base64(&ca)
        ),
    );
    let (ca_set, cert_set, key_set) = (
        format!("tls.ca={ca_file}"),
        format!("tls.cert={cert_file}"),
        format!("tls.key={key_file}"),
    );
    let hub_args = [
        "-f",
        hub_values.as_str(),
        "--set-file",
        &ca_set,
        "--set-file",
        &cert_set,
        "--set-file",
        &key_set,
    ];
    tokio::task::block_in_place(|| lint("meshhub", &hub_args)).expect("hub chart lints");
    let rendered = tokio::task::block_in_place(|| template("meshhub", "meshhub", NS, &hub_args))
        .expect("renders");
    let hub = objects(&rendered);
    for kind in [
        "ConfigMap",
        "Deployment",
        "Service",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Secret",
        "PodDisruptionBudget",
        "ValidatingWebhookConfiguration",
        "ServiceMonitor",
        "PrometheusRule",
    ] {
        assert!(
            !find(&hub, kind).is_empty(),
            "no {kind} in {:?}",
            kinds(&hub)
        );
    }
    // The configuration and one ConfigMap per Grafana dashboard.
    let dashboards = find(&hub, "ConfigMap")
        .into_iter()
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("grafana_dashboard"))
                .is_some_and(|v| v == "1")
        })
        .count();
    assert_eq!(
        dashboards,
        4,
        "{:?}",
        find(&hub, "ConfigMap")
            .iter()
            .map(|c| key(c))
            .collect::<Vec<_>>()
    );

    // Secure defaults, probes and the shutdown grace in the Deployment.
    let deploy = serde_json::to_value(find(&hub, "Deployment")[0]).unwrap();
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{pod}");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{c}");
    assert_eq!(
        c["securityContext"]["allowPrivilegeEscalation"], false,
        "{c}"
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz", "{c}");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz", "{c}");
    assert!(c["resources"]["requests"]["memory"].is_string(), "{c}");
    assert_eq!(pod["terminationGracePeriodSeconds"], 15, "{pod}");
    assert!(
        c["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--shutdown-grace=10s"),
        "{c}"
    );
    let svc = serde_json::to_value(find(&hub, "Service")[0]).unwrap();
    assert!(
        svc["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("grpc-") || n.starts_with("https-"))),
        "Istio port naming: {svc}"
    );
    // The configuration carries the chart-owned blocks.
    let cm = find(&hub, "ConfigMap")
        .into_iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .find(|c| c["data"]["meshhub.yaml"].is_string())
        .expect("the configuration's ConfigMap");
    let config = cm["data"]["meshhub.yaml"].as_str().unwrap();
    assert!(
        config.contains("leaderElection:") && config.contains("webhook:"),
        "{config}"
    );
    assert!(config.contains("name: east"), "{config}");
    // History and audit: the hub's blocks, each on its own volume.
    let parsed: serde_json::Value = serde_saphyr::from_str(config).unwrap();
    assert_eq!(parsed["history"]["dir"], "/var/lib/meshhub", "{config}");
    assert_eq!(parsed["history"]["keep"], 20, "{config}");
    assert_eq!(
        parsed["audit"]["file"], "/var/log/meshhub/audit.log",
        "{config}"
    );
    assert_eq!(parsed["audit"]["stdout"], true, "{config}");
    let mounts: Vec<&str> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    assert!(
        mounts.contains(&"/var/lib/meshhub") && mounts.contains(&"/var/log/meshhub"),
        "{mounts:?}"
    );
    let volumes = pod["volumes"].as_array().unwrap();
    let history = volumes.iter().find(|v| v["name"] == "history").unwrap();
    assert!(
        history["emptyDir"].is_object(),
        "per-pod with 2 replicas: {history}"
    );

    install(&client, &hub).await;
    for obj in &hub {
        // Namespaced kinds live in the release namespace; api_for ignores
        // the namespace of cluster-scoped ones.
        let mut o = obj.clone();
        o.metadata.namespace.get_or_insert_with(|| NS.to_owned());
        let api = meshhub_e2e::kube::api_for(&client, &o).await;
        assert!(
            api.get_opt(obj.metadata.name.as_deref().unwrap())
                .await
                .unwrap()
                .is_some(),
            "{} was not stored",
            key(obj)
        );
    }

    // The agent chart, applying to two namespaces, with mutual TLS.
    let agent_args = [
        "--set",
        "cluster=east",
        "--set",
        "apply.enabled=true",
        "--set",
        "apply.namespaces={bookinfo,meshhub}",
        "--set",
        "podDisruptionBudget.enabled=true",
        "--set-file",
        &format!("tls.cert={cert_file}"),
        "--set-file",
        &format!("tls.key={key_file}"),
        "--set-file",
        &format!("tls.clientCa={ca_file}"),
    ];
    tokio::task::block_in_place(|| lint("meshhub-sink-agent", &agent_args))
        .expect("agent chart lints");
    let rendered = tokio::task::block_in_place(|| {
        template("meshhub-sink-agent", "meshhub-sink-agent", NS, &agent_args)
    })
    .expect("renders");
    let agent = objects(&rendered);
    for kind in [
        "Deployment",
        "Service",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Secret",
        "PersistentVolumeClaim",
        "PodDisruptionBudget",
    ] {
        assert!(
            !find(&agent, kind).is_empty(),
            "no {kind} in {:?}",
            kinds(&agent)
        );
    }
    assert!(
        find(&agent, "ClusterRole").is_empty(),
        "namespaced apply needs no ClusterRole"
    );
    assert_eq!(find(&agent, "Role").len(), 2);
    let deploy = serde_json::to_value(find(&agent, "Deployment")[0]).unwrap();
    let args: Vec<&str> = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for a in [
        "--cluster=east",
        "--apply",
        "--sink-tls-client-ca=/etc/meshhub/tls/ca.crt",
    ] {
        assert!(args.contains(&a), "{a} not in {args:?}");
    }
    assert_eq!(deploy["spec"]["strategy"]["type"], "Recreate");
    install(&client, &agent).await;

    // Optional parts are left out unless asked (the hub above asked for
    // every one), and missing required values are clear errors.
    let with_monitor = tokio::task::block_in_place(|| {
        template(
            "meshhub",
            "meshhub",
            NS,
            &["--set", "serviceMonitor.enabled=true"],
        )
    })
    .unwrap();
    assert!(!find(&objects(&with_monitor), "ServiceMonitor").is_empty());
    assert!(find(&objects(&with_monitor), "PrometheusRule").is_empty());
    assert_eq!(find(&objects(&with_monitor), "ConfigMap").len(), 1);
    // Status write-back: `patch` on the Istio kinds' status, only when a
    // Kubernetes source of the configuration turns it on.
    let status_rule = |rendered: &str| {
        find(&objects(rendered), "ClusterRole")
            .iter()
            .flat_map(|r| r.data["rules"].as_array().cloned().unwrap_or_default())
            .any(|rule| {
                rule["resources"] == json!(["*/status"]) && rule["verbs"] == json!(["patch"])
            })
    };
    assert!(!status_rule(&with_monitor), "no status rule by default");
    let with_write_back = tokio::task::block_in_place(|| {
        template(
            "meshhub",
            "meshhub",
            NS,
            &[
                "--set-json",
                r#"config.sources=[{"name":"kubernetes","kubernetes":{"statusWriteBack":{"enabled":true}}}]"#,
            ],
        )
    })
    .unwrap();
    assert!(status_rule(&with_write_back), "{with_write_back}");
    let err =
        tokio::task::block_in_place(|| template("x", "meshhub-sink-agent", NS, &[])).unwrap_err();
    assert!(err.contains("cluster"), "{err}");
    let err = tokio::task::block_in_place(|| {
        template(
            "meshhub",
            "meshhub",
            NS,
            &[
                "--set",
                "webhook.enabled=true",
                "--set",
                "webhook.certSecret=s",
            ],
        )
    })
    .unwrap_err();
    assert!(err.contains("webhook.caBundle"), "{err}");
    // Replicas can't share one history database.
    let err = tokio::task::block_in_place(|| {
        template(
            "meshhub",
            "meshhub",
            NS,
            &[
                "--set",
                "replicaCount=2",
                "--set",
                "history.enabled=true",
                "--set",
                "history.persistence.existingClaim=meshhub-history",
            ],
        )
    })
    .unwrap_err();
    assert!(err.contains("existingClaim needs replicaCount 1"), "{err}");
    // One replica on a history claim: the old pod must release the
    // database's lock before the new one opens it (Recreate; a rolling
    // update crash-loops, as the kind test found). The admin token from a
    // Secret, for promote, pin and log-level on the pod's address.
    let rendered = tokio::task::block_in_place(|| {
        template(
            "meshhub",
            "meshhub",
            NS,
            &[
                "--set",
                "history.enabled=true",
                "--set",
                "history.persistence.existingClaim=meshhub-history",
                "--set",
                "admin.tokenSecret=meshhub-admin-token",
            ],
        )
    })
    .expect("the hub chart renders");
    let deploy = find(&objects(&rendered), "Deployment")[0].data.clone();
    assert_eq!(deploy["spec"]["strategy"]["type"], "Recreate", "{deploy}");
    let pod = &deploy["spec"]["template"]["spec"];
    assert!(
        pod["containers"][0]["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--admin-token-file=/etc/meshhub/admin-token/token")),
        "{pod}"
    );
    assert!(
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["secret"]["secretName"] == "meshhub-admin-token"),
        "{pod}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_charts_rbac_lets_the_hub_and_agent_work_and_denies_the_rest() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start(&["primary", "east"]).await;
    for cluster in ["primary", "east"] {
        planes.install_istio_crds(cluster, &[]).await;
        for ns in [NS, "bookinfo", "other"] {
            planes.namespace(cluster, ns).await;
        }
    }
    let primary = planes.client("primary").await;
    let east = planes.client("east").await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    // The agent's chart in east, applying to bookinfo only.
    let rendered = tokio::task::block_in_place(|| {
        template(
            "meshhub-sink-agent",
            "meshhub-sink-agent",
            NS,
            &[
                "--set",
                "cluster=east",
                "--set",
                "apply.enabled=true",
                "--set",
                "apply.namespaces={bookinfo}",
            ],
        )
    })
    .unwrap();
    let agent_objects = objects(&rendered);
    install(&east, &agent_objects).await;
    let agent_kubeconfig = planes
        .service_account_kubeconfig("east", NS, "meshhub-sink-agent")
        .await;
    // The agent runs with the chart's applying flags (addresses and data
    // directory are the harness's), as the chart's ServiceAccount.
    let deploy = serde_json::to_value(find(&agent_objects, "Deployment")[0]).unwrap();
    let mut extra: Vec<String> = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|a| a.starts_with("--apply"))
        .map(str::to_owned)
        .collect();
    assert!(
        extra.contains(&"--apply-namespaces=bookinfo".to_owned()),
        "{extra:?}"
    );
    extra.push(format!("--apply-kubeconfig={}", agent_kubeconfig.display()));
    let agent =
        tokio::task::block_in_place(|| AgentProc::start_with("east", dir, dir, None, &extra));

    // The hub's chart in primary, with leader election and cluster east.
    let clusters = json!([{
        "name": "east",
        "namespaces": ["bookinfo"],
        "agent": {"address": format!("http://{}", agent.sink), "reconnect": {"initial": "100ms", "max": "1s"}}
    }]);
    let rendered = tokio::task::block_in_place(|| {
        template(
            "meshhub",
            "meshhub",
            NS,
            &[
                "--set",
                "leaderElection.enabled=true",
                "--set-json",
                &format!("config.clusters={clusters}"),
            ],
        )
    })
    .unwrap();
    let hub_objects = objects(&rendered);
    install(&primary, &hub_objects).await;
    let hub_kubeconfig = planes
        .service_account_kubeconfig("primary", NS, "meshhub")
        .await;

    // The hub runs the chart's configuration as the chart's ServiceAccount
    // (the kubeconfig stands in for the in-cluster token).
    let cm = serde_json::to_value(find(&hub_objects, "ConfigMap")[0]).unwrap();
    let rendered_config = cm["data"]["meshhub.yaml"].as_str().unwrap().to_owned();
    let kc = hub_kubeconfig.display().to_string();
    let config_text = rendered_config
        .replace(
            "kubernetes: {}",
            &format!("kubernetes: {{kubeconfig: {kc}}}"),
        )
        .replace(
            "leaderElection:\n",
            &format!("leaderElection:\n  kubeconfig: {kc}\n"),
        );
    assert_ne!(config_text, rendered_config, "{rendered_config}");
    let config = dir.join("hub.yaml");
    write_atomic(
        &config,
        &format!("{config_text}debounce: {{quiet: 20ms, maxWait: 200ms}}\n"),
    );
    let hub = tokio::task::block_in_place(|| HubProc::start("hub", &config, dir));

    // Allowed: list/watch (the hub is ready and serves a new object, which
    // the agent applies in east with its own token) and its Lease.
    applied_through_the_mesh(&primary, &east, "reviews").await;
    let hub_sa = client_from_kubeconfig(&hub_kubeconfig).await;
    let leases: Api<Lease> = Api::namespaced(hub_sa.clone(), NS);
    let lease = leases
        .get("meshhub-dial-out")
        .await
        .expect("the hub reads its Lease");
    assert!(
        lease
            .spec
            .and_then(|s| s.holder_identity)
            .is_some_and(|h| !h.is_empty())
    );
    assert!(
        hub.status()["sources"][0]["synced"] == true,
        "{}",
        hub.status()
    );

    // Denied to the hub: writing Istio objects, Secrets, Pods, other
    // namespaces' Leases, listing Leases.
    let vs_obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": NET, "kind": "VirtualService",
        "metadata": {"name": "intruder", "namespace": "bookinfo"},
        "spec": {"hosts": ["x"]}
    }))
    .unwrap();
    let vs_api = meshhub_e2e::kube::api_for(&hub_sa, &vs_obj).await;
    forbidden(
        "hub creates a VirtualService",
        vs_api.create(&PostParams::default(), &vs_obj).await,
    );
    forbidden(
        "hub lists Secrets",
        Api::<Secret>::namespaced(hub_sa.clone(), NS)
            .list(&ListParams::default())
            .await,
    );
    forbidden(
        "hub lists Pods",
        Api::<Pod>::all(hub_sa.clone())
            .list(&ListParams::default())
            .await,
    );
    forbidden(
        "hub reads a Lease elsewhere",
        Api::<Lease>::namespaced(hub_sa.clone(), "other")
            .get("meshhub-dial-out")
            .await,
    );
    forbidden(
        "hub lists Leases",
        leases.list(&ListParams::default()).await,
    );

    // Denied to the agent in east: other namespaces, Secrets, Pods.
    let agent_sa = client_from_kubeconfig(&agent_kubeconfig).await;
    let mut elsewhere = vs_obj.clone();
    elsewhere.metadata.namespace = Some("other".to_owned());
    let api = meshhub_e2e::kube::api_for(&agent_sa, &elsewhere).await;
    forbidden(
        "agent creates in another namespace",
        api.create(&PostParams::default(), &elsewhere).await,
    );
    forbidden(
        "agent lists Secrets",
        Api::<Secret>::namespaced(agent_sa.clone(), "bookinfo")
            .list(&ListParams::default())
            .await,
    );
    forbidden(
        "agent lists Pods",
        Api::<Pod>::all(agent_sa.clone())
            .list(&ListParams::default())
            .await,
    );
    drop(hub);
}

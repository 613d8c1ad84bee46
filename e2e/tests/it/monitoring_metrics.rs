//! Every metric the chart's dashboards and alerts query is one a real hub
//! exports (`deploy/charts/meshhub/dashboards/*.json`,
//! `files/alerts.yaml`; see `chart_monitoring.rs` for their other checks).
//!
//! The real `meshhub` binary runs with everything its metrics describe:
//! a file source and two Kubernetes sources on a real kube-apiserver with
//! status write-back (one of them allowed to write statuses, one not, so
//! writes succeed and fail), leader election, history, audit, analysis
//! (an object naming a missing gateway), TLS on its gRPC port, stream
//! limits, and a staged rollout with a metric gate (answered by a
//! stand-in Prometheus query API). It dials stand-in agents `east` and
//! `west` (the engine's `ResourceSink`, refusing objects named `bad-*`),
//! a real `meshhub-sink-agent` for `north` (which reports its cluster up
//! to the hub) and `south`, where nothing listens. The test then provokes
//! what only events create: a rollout through its gate to completion, a
//! NACK that fails and rolls back the next one, a plaintext handshake on
//! the TLS port, streams over the rate limit. Then it scrapes `/metrics`
//! and fails naming every metric a query selects that is not exposed.
//!
//! A few names can't appear in one process and are allowed when the hub's
//! sources name them ([`NOT_IN_THIS_RUN`], each with why).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;

use meshhub_e2e::kube::{ControlPlanes, apply_yaml};
use meshhub_e2e::promql::{exposed_families, is_exposed, metric_names, variable_query_names};
use meshhub_e2e::standin::{Picky, StandIn};
use meshhub_e2e::yaml::cluster;
use meshhub_e2e::*;
use meshhub_testkit::http::get_blocking;
use meshhub_testkit::objects::{virtual_service, vs};
use meshhub_testkit::pki::{Ca, Leaf};
use meshhub_testkit::{DEADLINE, eventually_blocking};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::chart_monitoring::{alert_rules, dashboards, panel_queries, variable_queries};

/// Series Prometheus makes itself, never a target's.
const FROM_PROMETHEUS: &[&str] = &["up"];

/// Families this run can't show, each with why; each must be named in the
/// hub's sources (checked).
const NOT_IN_THIS_RUN: &[(&str, &str)] = &[
    (
        "meshhub_shard_held",
        "sharded leader election only; this hub runs one Lease (meshhub_leader), which excludes shards",
    ),
    (
        "meshhub_rollout_state_write_errors_total",
        "a single hub's rollout.json; with leader election (this run) decisions go to a ConfigMap instead (meshhub_rollout_shared_write_errors_total)",
    ),
    (
        "meshhub_mcp_streams_cut_total",
        "a consumer that stops reading for limits.sendTimeout: needs an HTTP/2 peer stalled with a full window",
    ),
];

/// A stand-in Prometheus query API: every query answers one sample of 0.
async fn fake_prometheus() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let body = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"0"]}]}}"#;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            });
        }
    });
    addr
}

/// The hub's configuration (see the module's documentation).
fn config(
    dir: &Path,
    admin: &Path,
    restricted: &Path,
    sinks: &[(&str, String)],
    prometheus: SocketAddr,
    tls: (&Path, &Path),
) -> String {
    let mut clusters = String::new();
    for (name, address) in sinks {
        let selector = if *name == "south" {
            "    namespaces: [nowhere]\n"
        } else {
            "    namespaces: [bookinfo, other]\n"
        };
        clusters.push_str(&cluster(name, selector, address, ""));
    }
    format!(
        "sources:
  - name: files
    file: {{path: {objects}}}
  - name: primary
    kubernetes:
      kubeconfig: {admin}
      namespaces: [bookinfo]
      statusWriteBack: {{enabled: true}}
  - name: restricted
    kubernetes:
      kubeconfig: {restricted}
      namespaces: [other]
      statusWriteBack: {{enabled: true}}
clusters:
{clusters}debounce: {{quiet: 20ms, maxWait: 200ms}}
history: {{dir: {history}}}
audit: {{file: {audit}}}
analysis: {{enabled: true}}
grpcTls: {{cert: {cert}, key: {key}}}
limits: {{newStreamsPerSecond: 1, newStreamsBurst: 1}}
leaderElection:
  enabled: true
  namespace: meshhub
  identity: hub-a
  leaseDuration: 3s
  renewDeadline: 2s
  retryPeriod: 500ms
  kubeconfig: {admin}
rollout:
  progressDeadline: 2m
  waves:
  - name: canary
    clusters: [east]
    bake: 1s
    metrics:
    - name: failures
      query: 'requests_failed{{cluster=\"$cluster\"}}'
      comparison: \"<\"
      threshold: 1
  - name: rest
    rest: true
  prometheus:
    url: http://{prometheus}
    interval: 1s
",
        objects = dir.join("objects").display(),
        admin = admin.display(),
        restricted = restricted.display(),
        history = dir.join("history").display(),
        audit = dir.join("audit.log").display(),
        cert = tls.0.display(),
        key = tls.1.display(),
    )
}

/// Waits until the hub's `/rollout` says `phase`; says what it says
/// otherwise.
fn wait_phase(hub: &HubProc, phase: &str) {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let body = get_blocking(hub.admin, "/rollout")
            .map(|(_, body)| body)
            .unwrap_or_default();
        let now = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["rollout"]["phase"]["phase"].as_str().map(str::to_owned));
        if now.as_deref() == Some(phase) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no rollout {phase} within {DEADLINE:?}: {body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Every metric name the dashboards and alerts select, with where.
fn queried() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (file, d) in dashboards() {
        for (title, expr) in panel_queries(&d) {
            for m in metric_names(&expr) {
                out.push((m, format!("dashboards/{file}: panel {title:?}")));
            }
        }
        for (var, query) in variable_queries(&d) {
            for m in variable_query_names(&query) {
                out.push((m, format!("dashboards/{file}: variable {var}")));
            }
        }
    }
    for rule in alert_rules() {
        for m in metric_names(rule["expr"].as_str().unwrap()) {
            out.push((m, format!("files/alerts.yaml: {}", rule["alert"])));
        }
    }
    out
}

/// Whether the hub's (non-test) sources name `metric` as a string.
fn in_sources(metric: &str) -> bool {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let quoted = format!("\"{metric}\"");
    let mut dirs: Vec<_> = ["hub/src", "mcp/src", "runtime/src"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs")
                && !p.ends_with("tests.rs")
                && std::fs::read_to_string(&p).unwrap().contains(&quoted)
            {
                return true;
            }
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread")]
async fn every_metric_the_dashboards_and_alerts_query_is_exported_by_a_real_hub() {
    let _turn = turn(module_path!());
    let wanted = queried();
    for (m, why) in NOT_IN_THIS_RUN {
        assert!(
            in_sources(m),
            "{m} is allowed ({why}) but no source names it"
        );
        assert!(
            wanted.iter().any(|(w, _)| w == m),
            "{m} is allowed but nothing queries it: drop it from the list"
        );
    }

    let planes = ControlPlanes::start(&["primary"]).await;
    for ns in ["bookinfo", "other", "meshhub"] {
        planes.namespace("primary", ns).await;
    }
    let primary = planes.client("primary").await;
    // Read-only: its source's status writes are refused (errors counted).
    let restricted = planes.hub_service_account("primary").await;
    let admin = planes.cluster("primary").kubeconfig.clone();
    apply_yaml(&primary, &vs("reviews", "reviews")).await;
    apply_yaml(
        &primary,
        &virtual_service("ratings", "other", "ratings", ""),
    )
    .await;

    let tree = proc_tree("reviews");
    let dir = tree.dir.path();
    // An object naming a gateway nobody defines: analysis IST0101.
    std::fs::write(
        tree.objects.join("details.yaml"),
        virtual_service("details", "bookinfo", "details", "")
            .replace("spec:\n", "spec:\n  gateways: [missing-gateway]\n"),
    )
    .unwrap();
    let ca = Ca::new("meshhub-monitoring-e2e-ca");
    let Leaf { cert, key } = ca.server(&["localhost", "127.0.0.1"]);
    let (cert_file, key_file, ca_file) =
        (dir.join("tls.crt"), dir.join("tls.key"), dir.join("ca.crt"));
    std::fs::write(&cert_file, cert).unwrap();
    std::fs::write(&key_file, key).unwrap();
    std::fs::write(&ca_file, ca.pem()).unwrap();

    let (east_picky, west_picky) = (
        std::sync::Arc::new(Picky::default()),
        std::sync::Arc::new(Picky::default()),
    );
    let east = StandIn::start_for("east", east_picky).await;
    let west = StandIn::start_for("west", west_picky).await;
    let north = tokio::task::block_in_place(|| AgentProc::start("north", dir, &tree.logs, None));
    let nobody = meshhub_testkit::ports::free_addr();
    let prometheus = fake_prometheus().await;
    let config_file = dir.join("meshhub.yaml");
    std::fs::write(
        &config_file,
        config(
            dir,
            &admin,
            &restricted,
            &[
                ("east", format!("http://{}", east.addr)),
                ("west", format!("http://{}", west.addr)),
                ("north", format!("http://{}", north.sink)),
                ("south", format!("http://{nobody}")),
            ],
            prometheus,
            (&cert_file, &key_file),
        ),
    )
    .unwrap();
    let hub = tokio::task::block_in_place(|| HubProc::start("hub", &config_file, &tree.logs));

    // Everyone but south in sync.
    tokio::task::block_in_place(|| {
        eventually_blocking("east, west and north synced", || {
            let status = hub.status();
            ["east", "west", "north"]
                .iter()
                .all(|c| {
                    let r = remote(&status, c);
                    r["connected"] == true
                        && r["collections"]
                            .as_object()
                            .is_some_and(|cs| cs.values().all(|s| s["state"] == "SYNCED"))
                })
                .then_some(())
        })
    });

    // A good change walks the waves (through the canary's gate) to the end.
    std::fs::write(tree.objects.join("good.yaml"), vs("good", "good")).unwrap();
    let mut waited = std::time::Instant::now();
    tokio::task::block_in_place(|| wait_phase(&hub, "completed"));
    // A change east refuses fails the next rollout and rolls it back.
    std::fs::write(tree.objects.join("bad.yaml"), vs("bad-route", "bad")).unwrap();
    tokio::task::block_in_place(|| wait_phase(&hub, "rolledBack"));

    // A plaintext client on the TLS port; streams over the limit.
    let mut tcp = tokio::net::TcpStream::connect(hub.grpc).await.unwrap();
    let _ = tcp
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n garbage")
        .await;
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, tcp.read_to_end(&mut sink)).await;
    let server = format!("https://127.0.0.1:{}", hub.grpc.port());
    let ca_arg = ca_file.display().to_string();
    for _ in 0..3 {
        let _ = tokio::task::block_in_place(|| {
            meshhubctl(&[
                "watch",
                "--server",
                &server,
                "--tls-ca",
                &ca_arg,
                "-c",
                meshhub_testkit::objects::VS,
                "--once",
                "-o",
                "json",
                "--connect-timeout",
                "5s",
            ])
        });
    }

    // Every name queried is exposed (some families are written a moment
    // after their event: the page is read again until the deadline).
    waited = waited.max(std::time::Instant::now());
    let mut missing: BTreeSet<(String, String)>;
    let mut page;
    loop {
        page = get_blocking(hub.admin, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        let families = exposed_families(&page);
        missing = wanted
            .iter()
            .filter(|(m, _)| {
                !is_exposed(m, &families)
                    && !FROM_PROMETHEUS.contains(&m.as_str())
                    && !NOT_IN_THIS_RUN.iter().any(|(n, _)| n == m)
            })
            .cloned()
            .collect();
        if missing.is_empty() || waited.elapsed() > DEADLINE {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    if !missing.is_empty() {
        keep_logs(tree.dir.path(), "monitoring-metrics");
    }
    assert!(
        missing.is_empty(),
        "queried but not exported by the hub:\n{}\n\n/metrics:\n{page}",
        missing
            .iter()
            .map(|(m, w)| format!("  {m} ({w})"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // And the families the allow-list excuses are indeed absent here (else
    // the list is stale).
    let families = exposed_families(&page);
    for (m, _) in NOT_IN_THIS_RUN {
        assert!(
            !is_exposed(m, &families),
            "{m} is exposed: drop it from NOT_IN_THIS_RUN"
        );
    }
    drop(hub);
    east.stop().await;
    west.stop().await;
}

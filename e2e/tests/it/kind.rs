//! meshhub in real Kubernetes clusters: three kind clusters (podman
//! provider, `meshhub_e2e::kind`), the charts installed with real Helm, the
//! image run by real kubelets. What the kube-apiserver tests can't show:
//! the charts' probes, security settings enforced by a container runtime,
//! the mounted ServiceAccount token and in-cluster configuration, Service
//! networking across clusters (the hub dials each agent's NodePort),
//! PersistentVolumeClaims surviving pods, Deployment rollouts.
//!
//! One test, in steps that share the clusters (creating them is most of
//! the cost); each scenario's failure names it, and the clusters are
//! deleted however the test ends:
//!
//! a. install: the pods become Ready under the charts' own probes, confined
//!    as the charts ask (uid 10001, read-only root, ...: checked in the
//!    node's kernel); the hub dials both agents; a VirtualService created,
//!    edited and deleted in the primary follows in both remotes' APIs,
//!    written by the agents' appliers;
//! b. an agent pod deleted with kubectl comes back and restores what it
//!    held from its volume: the hub resends nothing it held and the
//!    remote's object is never rewritten;
//! c. a staged rollout (a canary wave, then a manual gate) holds a remote;
//!    the hub's pod deleted meanwhile, the new pod (history on a claim)
//!    keeps it held; a promotion then releases it;
//! d. `helm upgrade` of the hub with a changed value rolls out a new pod
//!    while both remotes keep their objects throughout.
//!
//! e. istiod (our pilot-discovery in an image, installed with Istio's own
//!    `istiod` chart from the module cache) in remote1, its
//!    `meshConfig.configSources` the agent's Service (`xds://`), holds the
//!    objects the hub sent there in `/debug/configz`, and a new one.
//!
//! Skipped (`SKIPPED:` on stderr) where podman, buildah, kind or the node
//! image can't be had, unless `MESHHUB_KIND_REQUIRED=1` (CI), where that
//! fails the test.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use meshhub_e2e::istio::{istio_module_dir, istiod_bin};
use meshhub_e2e::kind::{
    Clusters, WAIT, istiod_image, required, restarts, sampling, tools, wait_for,
};
use meshhub_e2e::kube::istio_crds_file;
use meshhub_e2e::turn;
use meshhub_testkit::http::get_large_blocking;
use serde_json::Value;

const NS: &str = "meshhub";
const REMOTES: [&str; 2] = ["remote1", "remote2"];
const HUB: &str = "app.kubernetes.io/name=meshhub";
const AGENT: &str = "app.kubernetes.io/name=meshhub-sink-agent";
const VS_COLLECTION: &str = "istio/networking/v1alpha3/virtualservices";
/// The padding annotation of scenario b's object: a resend of it would
/// cost at least this many bytes.
const PADDING: usize = 30_000;
/// How long a change may take from the primary's API to the remotes'.
const FLOW: Duration = Duration::from_secs(60);

/// The clusters with meshhub installed, and what the scenarios share.
struct Mesh {
    clusters: Clusters,
    /// The hub's Helm values (a file in the test's directory).
    hub_values: std::path::PathBuf,
    image: Vec<String>,
    _dir: tempfile::TempDir,
}

/// Runs one scenario; a failure panics naming it.
fn scenario(name: &str, f: impl FnOnce()) {
    let start = Instant::now();
    eprintln!("kind e2e: scenario {name}");
    if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(f)) {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        panic!("kind e2e: scenario {name} failed: {message}");
    }
    eprintln!(
        "kind e2e: scenario {name} passed in {:.0?}",
        start.elapsed()
    );
}

#[test]
fn kind_clusters_run_the_charts() {
    let _turn = turn(module_path!());
    let start = Instant::now();
    // Skipped only where the tools are missing; with them, clusters that
    // cannot be made (a broken node image, configuration or image load)
    // fail the test.
    let tools = match tools() {
        Ok(t) => t,
        Err(why) if !required() => {
            eprintln!("SKIPPED: the kind tests need podman, kind and a node image: {why}");
            return;
        }
        Err(why) => panic!("MESHHUB_KIND_REQUIRED=1 and no kind tools: {why}"),
    };
    let clusters = Clusters::create(tools, "meshhub-e2e-", &["primary", "remote1", "remote2"])
        .unwrap_or_else(|why| panic!("the kind clusters could not be made: {why}"));
    eprintln!(
        "kind e2e: three clusters Ready, meshhub's image loaded, in {:.0?}",
        start.elapsed()
    );
    let (repository, tag) = clusters.image();
    let dir = tempfile::tempdir().unwrap();
    let mut mesh = Mesh {
        hub_values: dir.path().join("hub-values.yaml"),
        image: vec![
            "--set".into(),
            format!("image.repository={repository}"),
            "--set".into(),
            format!("image.tag={tag}"),
            "--set".into(),
            "image.pullPolicy=Never".into(),
        ],
        clusters,
        _dir: dir,
    };
    scenario(
        "a (install, Ready, confined, a change flows to both remotes)",
        || install(&mut mesh),
    );
    eprintln!(
        "kind e2e: memory of the three clusters, installed:\n{}",
        mesh.clusters.stats()
    );
    scenario(
        "b (agent pod deleted: back, restored from its volume, no resend)",
        || agent_restart(&mesh),
    );
    scenario(
        "c (hub pod deleted during a staged rollout: the held remote stays held)",
        || hub_restart_in_rollout(&mesh),
    );
    scenario(
        "d (helm upgrade of the hub: no remote loses its objects)",
        || hub_upgrade(&mesh),
    );
    scenario("e (istiod in remote1 reads its agent over xds://)", || {
        istiod_reads_the_agent(&mesh)
    });
    eprintln!(
        "kind e2e: memory of the three clusters at the end (istiod in remote1):\n{}",
        mesh.clusters.stats()
    );
    eprintln!("kind e2e: the module took {:.0?}", start.elapsed());
}

fn helm_install(mesh: &Mesh, cluster: &str, release: &str, chart: &str, args: &[&str]) {
    let chart = meshhub_e2e::helm::chart(chart);
    let mut all = vec![
        "upgrade",
        "--install",
        release,
        chart.to_str().unwrap(),
        "-n",
        NS,
        "--create-namespace",
        "--wait",
        "--timeout",
        "200s",
    ];
    all.extend(mesh.image.iter().map(String::as_str));
    all.extend(args);
    if let Err(e) = mesh.clusters.helm(cluster, &all) {
        let selector = format!("app.kubernetes.io/instance={release}");
        panic!("{e}\n{}", mesh.clusters.observe(cluster, NS, &selector));
    }
}

/// Asserts the pod is Ready and runs as the chart sets, in its spec and
/// in its node's kernel.
fn assert_pod_confined(mesh: &Mesh, cluster: &str, pod: &Value) {
    let name = pod["metadata"]["name"].as_str().unwrap();
    let spec = &pod["spec"];
    assert_eq!(
        spec["securityContext"]["runAsUser"], 10001,
        "{name}: {spec}"
    );
    assert_eq!(
        spec["securityContext"]["runAsNonRoot"], true,
        "{name}: {spec}"
    );
    let container = &spec["containers"][0];
    assert_eq!(
        container["securityContext"]["readOnlyRootFilesystem"], true,
        "{name}: {container}"
    );
    assert!(
        container["readinessProbe"].is_object() && container["livenessProbe"].is_object(),
        "{name}: the chart's probes: {container}"
    );
    let status = &pod["status"]["containerStatuses"][0];
    assert_eq!(status["ready"], true, "{name}: {status}");
    assert_eq!(status["restartCount"], 0, "{name}: {status}");
    // The pod's ServiceAccount token, mounted by the kubelet.
    assert!(
        container["volumeMounts"].as_array().is_some_and(|ms| ms
            .iter()
            .any(|m| m["mountPath"] == meshhub_e2e::pod::SERVICE_ACCOUNT_DIR)),
        "{name}: no ServiceAccount token mounted: {container}"
    );
    let (proc_status, mountinfo) = mesh.clusters.container_process(cluster, pod);
    meshhub_e2e::pod::assert_confined(
        &format!("{cluster}/{name}"),
        &proc_status,
        &mountinfo,
        10001,
    );
}

/// `meshhubctl <args…>` in the hub's pod.
fn meshhubctl(mesh: &Mesh, args: &[&str]) -> String {
    let mut all = vec!["-n", NS, "exec", "deploy/meshhub", "--", "meshhubctl"];
    all.extend(args);
    mesh.clusters
        .try_kubectl("primary", &all, None)
        .unwrap_or_else(|e| e)
}

/// Waits until the hub shows both remotes connected and their
/// VirtualServices ACKed: its `meshhubctl status`.
fn until_synced(mesh: &Mesh) -> String {
    wait_for(
        "the hub connected to both agents, their VirtualServices ACKed",
        WAIT,
        || {
            let status = meshhubctl(mesh, &["status"]);
            REMOTES
                .iter()
                .all(|r| {
                    status.lines().any(|l| {
                        let f: Vec<&str> = l.split_whitespace().collect();
                        f.len() > 2 && f[0] == *r && f[2] == "yes"
                    }) && status.lines().any(|l| {
                        let f: Vec<&str> = l.split_whitespace().collect();
                        f.len() > 2 && f[0] == *r && f[1] == VS_COLLECTION && f[2] == "SYNCED"
                    })
                })
                .then_some(status)
        },
        || {
            format!(
                "{}\n{}",
                meshhubctl(mesh, &["status"]),
                mesh.clusters.observe("primary", NS, HUB)
            )
        },
    )
}

fn virtual_service(name: &str, hosts: &[&str], annotations: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: bookinfo\n  annotations: {{{annotations}}}\nspec:\n  hosts: {hosts:?}\n  http:\n  - route:\n    - destination: {{host: {}}}\n",
        hosts[0]
    )
}

/// The VirtualService `bookinfo/<name>` in `cluster`, if any.
fn get_vs(mesh: &Mesh, cluster: &str, name: &str) -> Option<Value> {
    let out = mesh
        .clusters
        .try_kubectl(
            cluster,
            &[
                "-n",
                "bookinfo",
                "get",
                "virtualservice",
                name,
                "-o",
                "json",
                "--ignore-not-found",
            ],
            None,
        )
        .unwrap_or_else(|e| panic!("{cluster}: {e}"));
    (!out.trim().is_empty()).then(|| serde_json::from_str(&out).expect("kubectl's JSON"))
}

fn hosts(vs: &Value) -> Vec<String> {
    vs["spec"]["hosts"]
        .as_array()
        .map(|h| {
            h.iter()
                .filter_map(|h| h.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until `remote` holds `bookinfo/<name>` with `want` hosts (`None`:
/// until it is gone): the object, applied by the agent.
fn until_remote(mesh: &Mesh, remote: &str, name: &str, want: Option<&[&str]>) -> Option<Value> {
    wait_for(
        &format!("{remote}: VirtualService {name} with hosts {want:?}"),
        FLOW,
        || {
            let vs = get_vs(mesh, remote, name);
            match (want, vs) {
                (None, None) => Some(None),
                (Some(want), Some(vs)) if hosts(&vs) == want => Some(Some(vs)),
                _ => None,
            }
        },
        || {
            format!(
                "{remote} holds {:?}\nthe hub: {}\n{}",
                get_vs(mesh, remote, name),
                meshhubctl(mesh, &["status"]),
                mesh.clusters.observe(remote, NS, AGENT)
            )
        },
    )
}

fn install(mesh: &mut Mesh) {
    let crds = istio_crds_file();
    let crds = crds.to_str().unwrap();
    for cluster in ["primary", "remote1", "remote2"] {
        mesh.clusters
            .kubectl(cluster, &["apply", "--server-side", "-f", crds]);
        mesh.clusters.kubectl(
            cluster,
            &[
                "wait",
                "--for=condition=Established",
                "crd",
                "--all",
                "--timeout=120s",
            ],
        );
        mesh.clusters
            .kubectl(cluster, &["create", "namespace", "bookinfo"]);
    }

    // Each remote's agent: applies what the hub sends to its API (in
    // bookinfo), its data on a claim of kind's default StorageClass, its
    // sink port a NodePort the hub dials across the clusters' network.
    let mut agents = String::new();
    for remote in REMOTES {
        helm_install(
            mesh,
            remote,
            "meshhub-sink-agent",
            "meshhub-sink-agent",
            &[
                "--set",
                &format!("cluster={remote}"),
                "--set",
                "apply.enabled=true",
                "--set",
                "apply.namespaces={bookinfo}",
                "--set",
                "persistence.enabled=true",
                "--set",
                "service.type=NodePort",
            ],
        );
        let port = mesh.clusters.kubectl(
            remote,
            &[
                "-n",
                NS,
                "get",
                "service",
                "meshhub-sink-agent",
                "-o",
                "jsonpath={.spec.ports[?(@.name==\"grpc-mcp-sink\")].nodePort}",
            ],
        );
        let claim = mesh
            .clusters
            .get_json(remote, &["pvc", "-n", NS, "meshhub-sink-agent-data"]);
        assert_eq!(claim["status"]["phase"], "Bound", "{remote}: {claim}");
        agents.push_str(&format!(
            "    - name: {remote}\n      namespaces: [bookinfo]\n      agent:\n        address: http://{}:{}\n        reconnect: {{initial: 200ms, max: 2s}}\n",
            mesh.clusters.node_ip(remote),
            port.trim()
        ));
    }

    // The hub in the primary: reads its API in-cluster, history on a claim.
    mesh.clusters
        .kubectl("primary", &["create", "namespace", NS]);
    mesh.clusters.apply(
        "primary",
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: meshhub-history, namespace: meshhub}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n",
    );
    // The admin token the rollout's promotion needs (the admin port
    // listens on the pod's address, where writes need a token).
    let token = format!("{:032x}", rand::random::<u128>());
    mesh.clusters.kubectl(
        "primary",
        &[
            "-n",
            NS,
            "create",
            "secret",
            "generic",
            "meshhub-admin-token",
            &format!("--from-literal=token={token}"),
        ],
    );
    std::fs::write(
        &mesh.hub_values,
        format!(
            "admin: {{tokenSecret: meshhub-admin-token}}\nhistory:\n  enabled: true\n  persistence: {{existingClaim: meshhub-history}}\nconfig:\n  sources:\n    - name: kubernetes\n      kubernetes: {{namespaces: [bookinfo]}}\n  clusters:\n{agents}"
        ),
    )
    .unwrap();
    let values = mesh.hub_values.to_str().unwrap().to_owned();
    helm_install(mesh, "primary", "meshhub", "meshhub", &["-f", &values]);

    // Ready under the charts' probes, confined as the charts ask.
    let hub = mesh.clusters.ready_pod("primary", NS, HUB, &[]);
    assert_pod_confined(mesh, "primary", &hub);
    for remote in REMOTES {
        let agent = mesh.clusters.ready_pod(remote, NS, AGENT, &[]);
        assert_pod_confined(mesh, remote, &agent);
    }
    until_synced(mesh);

    // A change in the primary's API reaches both remotes' APIs.
    mesh.clusters
        .apply("primary", &virtual_service("kind-e2e", &["ratings"], ""));
    for remote in REMOTES {
        let vs = until_remote(mesh, remote, "kind-e2e", Some(&["ratings"])).unwrap();
        assert_eq!(
            vs["metadata"]["labels"]["app.kubernetes.io/managed-by"], "meshhub",
            "{remote}: {vs}"
        );
    }
    mesh.clusters.apply(
        "primary",
        &virtual_service("kind-e2e", &["ratings", "ratings.bookinfo"], ""),
    );
    for remote in REMOTES {
        until_remote(
            mesh,
            remote,
            "kind-e2e",
            Some(&["ratings", "ratings.bookinfo"]),
        );
    }
    mesh.clusters.kubectl(
        "primary",
        &["-n", "bookinfo", "delete", "virtualservice", "kind-e2e"],
    );
    for remote in REMOTES {
        until_remote(mesh, remote, "kind-e2e", None);
    }
}

/// The hub's metrics (its admin port, through the API server's proxy).
fn hub_metric(mesh: &Mesh, name: &str, label: &str) -> f64 {
    let pod = mesh.clusters.ready_pod("primary", NS, HUB, &[]);
    let pod = pod["metadata"]["name"].as_str().unwrap();
    let text = mesh.clusters.kubectl(
        "primary",
        &[
            "get",
            "--raw",
            &format!("/api/v1/namespaces/{NS}/pods/{pod}:9902/proxy/metrics"),
        ],
    );
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn agent_restart(mesh: &Mesh) {
    // An object a resend could not hide: 30 KB of annotation.
    let padding = format!("e2e.meshhub.io/padding: {}", "x".repeat(PADDING));
    mesh.clusters.apply(
        "primary",
        &virtual_service("reviews", &["reviews"], &padding),
    );
    for remote in REMOTES {
        until_remote(mesh, remote, "reviews", Some(&["reviews"]));
    }
    until_synced(mesh);
    let before = get_vs(mesh, "remote1", "reviews").unwrap();
    let label = format!("collection=\"{VS_COLLECTION}\"");
    let (bytes, responses) = (
        hub_metric(mesh, "meshhub_mcp_response_bytes_sum", &label),
        hub_metric(mesh, "meshhub_mcp_response_bytes_count", &label),
    );

    let old = mesh.clusters.ready_pod("remote1", NS, AGENT, &[]);
    let old = old["metadata"]["name"].as_str().unwrap().to_owned();
    mesh.clusters.kubectl(
        "remote1",
        &["-n", NS, "delete", "pod", &old, "--timeout=120s"],
    );
    let new = mesh.clusters.ready_pod("remote1", NS, AGENT, &[&old]);
    let new_name = new["metadata"]["name"].as_str().unwrap();
    // Started while the old pod still stopped, on the same volume: it
    // waited for the data directory's lock instead of failing on it.
    assert_eq!(restarts(&new), 0, "the new agent's container restarted");
    // The new hub stream answered and ACKed.
    wait_for(
        "the hub's response to the restarted agent",
        WAIT,
        || (hub_metric(mesh, "meshhub_mcp_response_bytes_count", &label) > responses).then_some(()),
        || meshhubctl(mesh, &["status"]),
    );
    until_synced(mesh);

    let logs = mesh
        .clusters
        .kubectl("remote1", &["-n", NS, "logs", new_name]);
    let restored = logs
        .lines()
        .find(|l| l.contains("loaded persisted collection") && l.contains(VS_COLLECTION));
    let restored =
        restored.unwrap_or_else(|| panic!("no restore from disk in {new_name}:\n{logs}"));
    assert!(restored.contains("\"resources\":1"), "{restored}");
    let sent = hub_metric(mesh, "meshhub_mcp_response_bytes_sum", &label) - bytes;
    let count = hub_metric(mesh, "meshhub_mcp_response_bytes_count", &label) - responses;
    eprintln!(
        "kind e2e: after the agent's restart the hub sent {count} VirtualService responses, {sent} bytes"
    );
    assert!(
        sent < PADDING as f64,
        "the hub resent what the agent held: {sent} bytes in {count} responses"
    );
    // Never deleted nor rewritten in the remote's API.
    let after = get_vs(mesh, "remote1", "reviews").unwrap();
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    assert_eq!(
        after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "rewritten after the restart: {after}"
    );
}

fn rollout_status(mesh: &Mesh) -> String {
    meshhubctl(mesh, &["rollout", "status"])
}

/// Whether `rollout status` shows `cluster` in `state`.
fn rollout_shows(status: &str, cluster: &str, state: &str) -> bool {
    status.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 2 && f[1] == cluster && f[2] == state
    })
}

fn hub_restart_in_rollout(mesh: &Mesh) {
    // A rollout: remote1 first, then remote2 after a manual promotion.
    let mut values = std::fs::read_to_string(&mesh.hub_values).unwrap();
    values.push_str(
        "  rollout:\n    waves:\n      - {name: canary, clusters: [remote1], promotion: manual}\n      - {name: rest, rest: true}\n",
    );
    std::fs::write(&mesh.hub_values, values).unwrap();
    let old = mesh.clusters.ready_pod("primary", NS, HUB, &[]);
    let old = old["metadata"]["name"].as_str().unwrap().to_owned();
    let values = mesh.hub_values.to_str().unwrap();
    helm_install(mesh, "primary", "meshhub", "meshhub", &["-f", values]);
    mesh.clusters.ready_pod("primary", NS, HUB, &[&old]);
    until_synced(mesh);

    mesh.clusters.apply(
        "primary",
        &virtual_service("reviews", &["reviews", "reviews.canary"], ""),
    );
    until_remote(
        mesh,
        "remote1",
        "reviews",
        Some(&["reviews", "reviews.canary"]),
    );
    wait_for(
        "remote2 held by the rollout",
        FLOW,
        || {
            let s = rollout_status(mesh);
            (s.contains("awaiting_promotion") && rollout_shows(&s, "remote2", "HELD")).then_some(())
        },
        || rollout_status(mesh),
    );
    assert_eq!(
        hosts(&get_vs(mesh, "remote2", "reviews").unwrap()),
        ["reviews"]
    );

    // The hub's pod deleted: the new one reads the rollout from its claim.
    // remote2 is sampled all along, and 10 s after the new hub synced (an
    // ACK comes before its agent's write to the API): never the new hosts.
    let pod = mesh.clusters.ready_pod("primary", NS, HUB, &[]);
    let pod = pod["metadata"]["name"].as_str().unwrap().to_owned();
    let held = || {
        let hosts = get_vs(mesh, "remote2", "reviews").map(|vs| hosts(&vs));
        (hosts.as_deref() != Some(&["reviews".to_owned()][..]))
            .then(|| format!("remote2 holds {hosts:?}"))
    };
    sampling("the hub's restart", held, || {
        mesh.clusters.kubectl(
            "primary",
            &["-n", NS, "delete", "pod", &pod, "--timeout=120s"],
        );
        let new = mesh.clusters.ready_pod("primary", NS, HUB, &[&pod]);
        eprintln!(
            "kind e2e: the hub's new pod {} is Ready",
            new["metadata"]["name"]
        );
        // It waited for the history database the old pod still held.
        assert_eq!(restarts(&new), 0, "the new hub's container restarted");
        until_synced(mesh);
        std::thread::sleep(Duration::from_secs(10));
    });
    let status = rollout_status(mesh);
    assert!(
        status.contains("awaiting_promotion") && rollout_shows(&status, "remote2", "HELD"),
        "the new hub forgot the hold:\n{status}"
    );
    assert_eq!(
        hosts(&get_vs(mesh, "remote2", "reviews").unwrap()),
        ["reviews"],
        "the held remote got the new version"
    );
    assert_eq!(
        hosts(&get_vs(mesh, "remote1", "reviews").unwrap()),
        ["reviews", "reviews.canary"],
        "the canary lost the new version"
    );

    // Promoted, the held remote gets it.
    let mut promote = vec!["-n", NS, "exec", "deploy/meshhub", "--", "meshhubctl"];
    promote.extend([
        "rollout",
        "promote",
        "--token-file",
        "/etc/meshhub/admin-token/token",
    ]);
    mesh.clusters.kubectl("primary", &promote);
    until_remote(
        mesh,
        "remote2",
        "reviews",
        Some(&["reviews", "reviews.canary"]),
    );
}

fn hub_upgrade(mesh: &Mesh) {
    let old = mesh.clusters.ready_pod("primary", NS, HUB, &[]);
    let old = old["metadata"]["name"].as_str().unwrap().to_owned();
    // No comma: `--set` would split the value there.
    let level = "meshhub=debug";
    // Both remotes' objects, sampled until the upgrade is through.
    let lost = || {
        let lost: Vec<_> = REMOTES
            .into_iter()
            .filter(|r| get_vs(mesh, r, "reviews").is_none())
            .collect();
        (!lost.is_empty()).then(|| format!("{lost:?} lost bookinfo/reviews"))
    };
    sampling("the upgrade", lost, || {
        let set = format!("log.level={level}");
        helm_install(
            mesh,
            "primary",
            "meshhub",
            "meshhub",
            &["--reuse-values", "--set", &set],
        );
    });
    let new = mesh.clusters.ready_pod("primary", NS, HUB, &[&old]);
    let env = &new["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "MESHHUB_LOG" && e["value"] == level),
        "the new pod's environment: {env}"
    );
    until_synced(mesh);
    for remote in REMOTES {
        assert!(get_vs(mesh, remote, "reviews").is_some(), "{remote}");
    }
}

/// The VirtualService `bookinfo/<name>` in istiod's `/debug/configz`.
fn istiod_vs(istiod: &meshhub_e2e::kind::PortForward, name: &str) -> Option<Value> {
    let (code, body) = get_large_blocking(istiod.addr, "/debug/configz", Duration::from_secs(30))?;
    let configs: Vec<Value> = (code == 200).then(|| serde_json::from_slice(&body).ok())??;
    configs.into_iter().find(|c| {
        c["kind"] == "VirtualService"
            && c["metadata"]["namespace"] == "bookinfo"
            && c["metadata"]["name"] == name
    })
}

fn istiod_reads_the_agent(mesh: &Mesh) {
    let image = istiod_image(istiod_bin()).unwrap_or_else(|e| panic!("istiod's image: {e}"));
    mesh.clusters
        .load_image(&["remote1"], &image)
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = meshhub_e2e::container::run_bounded("podman", &["rmi", &image]);
    let chart = istio_module_dir().join("manifests/charts/istio-control/istio-discovery");
    let values = mesh.hub_values.with_file_name("istiod-values.yaml");
    std::fs::write(
        &values,
        format!(
            "image: {image}\nautoscaleEnabled: false\nresources: {{requests: {{cpu: 100m, memory: 256Mi}}}}\nglobal:\n  imagePullPolicy: Never\n  configValidation: false\nmeshConfig:\n  configSources:\n    - address: xds://meshhub-sink-agent.{NS}.svc:9912\n"
        ),
    )
    .unwrap();
    let installed = mesh.clusters.helm(
        "remote1",
        &[
            "upgrade",
            "--install",
            "istiod",
            chart.to_str().unwrap(),
            "-n",
            "istio-system",
            "--create-namespace",
            "-f",
            values.to_str().unwrap(),
            "--wait",
            "--timeout",
            "200s",
        ],
    );
    if let Err(e) = installed {
        panic!(
            "{e}\n{}",
            mesh.clusters
                .observe("remote1", "istio-system", "app=istiod")
        );
    }
    mesh.clusters
        .ready_pod("remote1", "istio-system", "app=istiod", &[]);
    // Its debug port answers on its loopback only.
    let istiod = mesh
        .clusters
        .port_forward("remote1", "istio-system", "deploy/istiod", 8080);
    let observed = || {
        format!(
            "istiod holds {:?}\n{}",
            istiod_vs(&istiod, "reviews").map(|v| v["spec"].clone()),
            mesh.clusters
                .observe("remote1", "istio-system", "app=istiod")
        )
    };
    let held = wait_for(
        "istiod's configz: bookinfo/reviews from the agent",
        FLOW,
        || istiod_vs(&istiod, "reviews"),
        observed,
    );
    assert_eq!(hosts(&held), ["reviews", "reviews.canary"], "{held}");
    // The agent's copy, not remote1's API's (istiod reads its
    // configSources only): the applier labels what it writes there.
    let applied = get_vs(mesh, "remote1", "reviews").expect("remote1's API copy");
    let label = |vs: &Value| vs["metadata"]["labels"]["app.kubernetes.io/managed-by"].clone();
    assert_eq!(label(&applied), "meshhub", "{applied}");
    assert!(
        label(&held).is_null(),
        "istiod holds the API's copy: {held}"
    );
    // A new object: remote1 is the rollout's canary, so it gets it at once.
    mesh.clusters
        .apply("primary", &virtual_service("details", &["details"], ""));
    wait_for(
        "istiod's configz: bookinfo/details, new in the primary",
        FLOW,
        || istiod_vs(&istiod, "details"),
        || {
            format!(
                "{}\nrollout: {}",
                mesh.clusters
                    .observe("remote1", "istio-system", "app=istiod"),
                rollout_status(mesh)
            )
        },
    );
}

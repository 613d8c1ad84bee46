//! meshhub's image (`deploy/image/Containerfile`, built by
//! `deploy/image/build.sh`, which CI runs first) run with podman and runc,
//! without Docker:
//!
//! * the hub and agent charts' pods, rendered by real Helm, run from the
//!   image as the kubelet would run them (`meshhub_e2e::pod`): uid 10001,
//!   read-only root filesystem, no capabilities, no privilege escalation,
//!   the chart's arguments, environment, ConfigMap and volumes (history and
//!   audit for the hub, the data directory for the agent), and the chart's
//!   ServiceAccount token with the chart's RBAC, in-cluster, against real
//!   kube-apiservers: the hub reads one, the agent applies to the other. A
//!   change flows hub → agent → API server, `meshhubctl` from the image
//!   reads the hub, both stop cleanly on SIGTERM within the chart's grace;
//! * `podman run IMAGE` alone serves the embedded examples;
//! * the image holds only the three static binaries, passwd, group, the CA
//!   bundle and /tmp, runs as uid 10001, carries its OCI labels and stays
//!   within its size budget.
//!
//! Skipped, with the reason on stderr, where podman or buildah is missing.

use std::path::Path;

use ::kube::api::{Api, DynamicObject};
use k8s_openapi::api::coordination::v1::Lease;
use meshhub_e2e::container::{self, Container, image_file, image_files, podman, run_once};
use meshhub_e2e::helm::{apply, objects, template};
use meshhub_e2e::kube::{ControlPlanes, applied_through_the_mesh};
use meshhub_e2e::pod::{Pod, ServiceAccountMount};
use meshhub_e2e::*;
use meshhub_testkit::eventually_blocking;
use meshhub_testkit::http::get_blocking;
use meshhub_testkit::ports::free_port;
use serde_json::{Value, json};

const NS: &str = "meshhub";
/// deploy/image/build.sh's default budget (`MESHHUB_IMAGE_BUDGET_MIB`).
const BUDGET_MIB: u64 = 96;

/// The image under test, or `None` (with the reason printed) when this
/// machine can't build or run it.
fn image() -> Option<&'static str> {
    if let Err(why) = container::available() {
        eprintln!("SKIPPED: the image tests need podman and buildah: {why}");
        return None;
    }
    Some(tokio::task::block_in_place(container::image))
}

fn deployment(objs: &[DynamicObject]) -> Value {
    let d = objs
        .iter()
        .find(|o| o.types.as_ref().is_some_and(|t| t.kind == "Deployment"))
        .expect("a Deployment");
    serde_json::to_value(d).unwrap()
}

/// Waits for the pod's readiness probe to answer 200 from the container
/// itself (not from whoever else may hold its port); `Err` with its exit
/// code and logs when it exits first.
fn wait_ready(pod: &Pod, c: &Container) -> Result<(), (String, String)> {
    let (addr, path) = pod.probe("readinessProbe");
    eventually_blocking(&format!("{} {path} on {addr}", c.name), || {
        if !c.running() {
            return Some(Err((c.inspect("{{.State.ExitCode}}"), c.logs())));
        }
        get_blocking(addr, &path)
            .filter(|(code, _)| *code == 200 && listens_on(c.pid(), addr.port()))
            .map(|_| Ok(()))
    })
}

/// The process's identity and privileges as the kernel holds them.
fn process_status(pid: u32) -> std::collections::BTreeMap<String, String> {
    meshhub_e2e::pod::proc_status(&std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap())
}

fn assert_confined(c: &Container, uid: u32) {
    let pid = c.pid();
    meshhub_e2e::pod::assert_confined(
        &c.name,
        &std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap(),
        &std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap(),
        uid,
    );
}

/// Every regular file under `dir` (relative paths).
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// `meshhubctl <args…>` from the image, on the host network.
fn meshhubctl_image(image: &str, args: &[&str]) -> (bool, String, String) {
    let (status, out, err) = run_once(
        &[
            "--network",
            "host",
            "--read-only",
            "--cap-drop",
            "ALL",
            "--entrypoint",
            "/usr/local/bin/meshhubctl",
        ],
        image,
        args,
    );
    (status.success(), out, err)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_charts_pods_run_from_the_image_under_their_own_security_settings() {
    let _turn = turn(module_path!());
    let Some(image) = image() else { return };
    let planes = ControlPlanes::start(&["primary", "east"]).await;
    for cluster in ["primary", "east"] {
        for ns in [NS, "bookinfo"] {
            planes.namespace(cluster, ns).await;
        }
    }
    let primary = planes.client("primary").await;
    let east = planes.client("east").await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    // The agent's chart in east, applying to bookinfo, on ports chosen for
    // it (new ones when one was taken before it bound it).
    let mut attempts = PortAttempts::new("the agent's pod");
    let mut attempt = 0;
    let (sink, agent_deploy, agent_pod, agent) = loop {
        attempt += 1;
        let (sink, agent_grpc, agent_admin) = (free_port(), free_port(), free_port());
        let agent_values = [
            "cluster=east".to_owned(),
            "apply.enabled=true".to_owned(),
            "apply.namespaces={bookinfo}".to_owned(),
            format!("sink.port={sink}"),
            format!("grpc.port={agent_grpc}"),
            format!("admin.port={agent_admin}"),
        ];
        let args: Vec<&str> = agent_values
            .iter()
            .flat_map(|v| ["--set", v.as_str()])
            .collect();
        let rendered = tokio::task::block_in_place(|| {
            template("meshhub-sink-agent", "meshhub-sink-agent", NS, &args)
        })
        .expect("the agent chart renders");
        let agent_objects = objects(&rendered);
        let refused = apply(&east, &agent_objects, NS, false).await;
        assert!(refused.is_empty(), "{refused:#?}");
        let agent_deploy = deployment(&agent_objects);
        let sa = agent_deploy["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .unwrap();
        let agent_sa = ServiceAccountMount {
            token: planes.service_account_token("east", NS, sa).await,
            ca_file: planes.cluster("east").ca_file(),
            api_server: planes.cluster("east").addr,
        };
        let agent_pod = Pod::from_deployment(
            &agent_deploy,
            &agent_objects,
            "meshhub-sink-agent-e2e",
            NS,
            &dir.join(format!("agent-{attempt}")),
            Some(&agent_sa),
        );
        let agent = agent_pod.start("agent", image);
        match tokio::task::block_in_place(|| wait_ready(&agent_pod, &agent)) {
            Ok(()) => break (sink, agent_deploy, agent_pod, agent),
            Err((code, logs)) => attempts.exited(&format!("exit code {code}"), &logs),
        }
    };

    // The hub's chart in primary: its Kubernetes source in-cluster, leader
    // election, history and the audit file on their volumes.
    let mut attempts = PortAttempts::new("the hub's pod");
    let mut attempt = 0;
    let (hub_grpc, hub_admin, hub_deploy, hub_pod, hub) = loop {
        attempt += 1;
        let (hub_grpc, hub_admin) = (free_port(), free_port());
        let clusters = json!([{
            "name": "east",
            "namespaces": ["bookinfo"],
            "agent": {"address": format!("http://127.0.0.1:{sink}"), "reconnect": {"initial": "100ms", "max": "1s"}}
        }]);
        let hub_values = [
            "leaderElection.enabled=true".to_owned(),
            "history.enabled=true".to_owned(),
            "audit.enabled=true".to_owned(),
            "audit.file=true".to_owned(),
            format!("grpc.port={hub_grpc}"),
            format!("admin.port={hub_admin}"),
        ];
        let clusters_json = format!("config.clusters={clusters}");
        let mut args: Vec<&str> = hub_values
            .iter()
            .flat_map(|v| ["--set", v.as_str()])
            .collect();
        args.extend([
            "--set-json",
            &clusters_json,
            "--set-json",
            r#"config.debounce={"quiet":"20ms","maxWait":"200ms"}"#,
        ]);
        let rendered = tokio::task::block_in_place(|| template("meshhub", "meshhub", NS, &args))
            .expect("the hub chart renders");
        let hub_objects = objects(&rendered);
        let refused = apply(&primary, &hub_objects, NS, false).await;
        assert!(refused.is_empty(), "{refused:#?}");
        let hub_deploy = deployment(&hub_objects);
        let sa = hub_deploy["spec"]["template"]["spec"]["serviceAccountName"]
            .as_str()
            .unwrap();
        let hub_sa = ServiceAccountMount {
            token: planes.service_account_token("primary", NS, sa).await,
            ca_file: planes.cluster("primary").ca_file(),
            api_server: planes.cluster("primary").addr,
        };
        let hub_pod = Pod::from_deployment(
            &hub_deploy,
            &hub_objects,
            "meshhub-e2e",
            NS,
            &dir.join(format!("hub-{attempt}")),
            Some(&hub_sa),
        );
        assert!(
            hub_pod
                .args
                .iter()
                .any(|a| a == "--config=/etc/meshhub/meshhub.yaml"),
            "{:?}",
            hub_pod.args
        );
        let hub = hub_pod.start("hub", image);
        match tokio::task::block_in_place(|| wait_ready(&hub_pod, &hub)) {
            Ok(()) => break (hub_grpc, hub_admin, hub_deploy, hub_pod, hub),
            Err((code, logs)) => attempts.exited(&format!("exit code {code}"), &logs),
        }
    };

    // Both run as the charts say, whatever the image's defaults, and
    // answer their liveness probes too.
    for (c, pod) in [(&hub, &hub_pod), (&agent, &agent_pod)] {
        assert_eq!(pod.uid, 10001);
        assert_confined(c, pod.uid);
        let (addr, path) = pod.probe("livenessProbe");
        assert_eq!(
            get_blocking(addr, &path).map(|(code, _)| code),
            Some(200),
            "{}: {path}",
            c.name
        );
    }

    // A change flows: primary's API → hub → agent → east's API.
    applied_through_the_mesh(&primary, &east, "reviews").await;

    // meshhubctl from the image reads the hub: east is connected and
    // synced, its group holds the object, the history has versions.
    let admin = format!("http://127.0.0.1:{hub_admin}");
    let server = format!("http://127.0.0.1:{hub_grpc}");
    let status = tokio::task::block_in_place(|| {
        eventually_blocking("meshhubctl status: east SYNCED", || {
            let (ok, out, err) =
                meshhubctl_image(image, &["status", "--admin", &admin, "-o", "json"]);
            assert!(ok, "meshhubctl status: {err}");
            let v: Value = serde_json::from_str(&out).expect("JSON");
            let east = v["clusters"]
                .as_array()?
                .iter()
                .find(|c| c["name"] == "east")?
                .clone();
            let synced = east["connected"] == true
                && east["collections"]
                    .as_object()?
                    .iter()
                    .any(|(k, c)| k.contains("virtualservices") && c["state"] == "SYNCED");
            synced.then_some(v)
        })
    });
    assert!(status["clusters"].is_array(), "{status}");
    let (ok, out, err) = tokio::task::block_in_place(|| {
        meshhubctl_image(
            image,
            &[
                "get",
                "VirtualService",
                "--cluster",
                "east",
                "--server",
                &server,
                "--admin",
                &admin,
                "-o",
                "yaml",
            ],
        )
    });
    assert!(ok && out.contains("name: reviews"), "{out}\n{err}");
    let (ok, out, err) = tokio::task::block_in_place(|| {
        meshhubctl_image(
            image,
            &[
                "history",
                "--cluster",
                "east",
                "--admin",
                &admin,
                "-o",
                "json",
            ],
        )
    });
    assert!(ok, "meshhubctl history: {err}");
    let history: Value = serde_json::from_str(&out).expect("history JSON");
    assert!(
        history["versions"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v["resources"].as_u64() >= Some(1))),
        "{history}"
    );

    // The hub holds the dial-out Lease under its pod name (the downward
    // API's POD_NAME, the chart's RBAC through the in-cluster token).
    let lease = Api::<Lease>::namespaced(primary.clone(), NS)
        .get("meshhub-dial-out")
        .await
        .expect("the hub's Lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("meshhub-e2e")
    );

    // It wrote only to its volumes: history and audit files there, its
    // logs in JSON (the chart's environment), nothing in the image's
    // filesystem.
    let history_files = files(&hub_pod.volumes["history"]);
    assert!(
        history_files.iter().any(|f| f.ends_with(".redb")),
        "{history_files:?}"
    );
    let audit = std::fs::read_to_string(hub_pod.volumes["audit"].join("audit.log"))
        .expect("the audit log on its volume");
    assert!(
        audit
            .lines()
            .any(|l| serde_json::from_str::<Value>(l).is_ok() && l.contains("reviews")),
        "{audit}"
    );
    assert!(
        hub.logs().contains(r#""message":"meshhub started""#),
        "{}",
        hub.logs()
    );
    assert!(
        !files(&agent_pod.volumes["data"]).is_empty(),
        "the agent persisted nothing"
    );
    for c in [&hub, &agent] {
        let writes = c.writes_outside_volumes();
        assert!(
            writes.is_empty(),
            "{} wrote to its root filesystem: {writes:?}",
            c.name
        );
    }

    // SIGTERM (as the kubelet stops a pod): both exit 0 within the chart's
    // grace period.
    for (c, deploy) in [(&hub, &hub_deploy), (&agent, &agent_deploy)] {
        let grace = deploy["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            .as_u64()
            .unwrap();
        let code = tokio::task::block_in_place(|| c.stop(grace));
        assert_eq!(code, 0, "{} on SIGTERM:\n{}", c.name, c.logs());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_alone_serves_the_embedded_examples() {
    let _turn = turn(module_path!());
    let Some(image) = image() else { return };
    // No arguments, no user, no volumes, podman's default network: the
    // image's defaults (only the flags this machine kind needs). The hub
    // listens on 127.0.0.1 in the container's network namespace, so
    // meshhubctl runs beside it in the same container.
    let c = Container::run("embedded", &[], image, &[]);
    let listed = tokio::task::block_in_place(|| {
        eventually_blocking("meshhubctl get in the container", || {
            assert!(c.running(), "exited:\n{}", c.logs());
            let (status, out, _) = c.exec(&[
                "/usr/local/bin/meshhubctl",
                "get",
                "VirtualService",
                "--cluster",
                "east",
                "-o",
                "yaml",
            ]);
            (status.success() && out.contains("name: reviews")).then_some(out)
        })
    });
    assert!(listed.contains("namespace: bookinfo"), "{listed}");
    assert!(
        c.logs()
            .contains("serving the example configuration embedded"),
        "{}",
        c.logs()
    );
    assert_confined_default(&c);
}

/// The image's own user, without --user: 10001, never root.
fn assert_confined_default(c: &Container) {
    let s = process_status(c.pid());
    assert_eq!(s["Uid"], "10001 10001 10001 10001", "{s:?}");
    assert_eq!(s["Gid"], "10001 10001 10001 10001", "{s:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_is_static_non_root_labelled_and_within_its_budget() {
    let _turn = turn(module_path!());
    let Some(image) = image() else { return };
    let inspect: Value =
        serde_json::from_str(&podman(&["image", "inspect", image])).expect("inspect JSON");
    let config = &inspect[0]["Config"];
    assert_eq!(config["User"], "10001:10001", "{config}");
    assert_eq!(
        config["Entrypoint"],
        json!(["/usr/local/bin/meshhub"]),
        "{config}"
    );
    let labels = &config["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION"),
        "{labels}"
    );
    let revision = labels["org.opencontainers.image.revision"]
        .as_str()
        .unwrap_or_default();
    assert!(
        revision.len() >= 40 && revision[..40].chars().all(|c| c.is_ascii_hexdigit()),
        "revision {revision:?}"
    );
    assert!(
        labels["org.opencontainers.image.source"]
            .as_str()
            .is_some_and(|s| s.starts_with("https://")),
        "{labels}"
    );

    // Exactly these files: no shell, no package manager, no libc.
    let listing = tokio::task::block_in_place(|| image_files(image));
    let mut regular: Vec<&str> = listing
        .iter()
        .filter(|(_, mode, _)| mode.starts_with('-'))
        .map(|(p, _, _)| p.as_str())
        .collect();
    regular.sort_unstable();
    assert_eq!(
        regular,
        [
            "etc/group",
            "etc/passwd",
            "etc/ssl/certs/ca-certificates.crt",
            "usr/local/bin/meshhub",
            "usr/local/bin/meshhub-sink-agent",
            "usr/local/bin/meshhubctl",
        ],
        "{listing:?}"
    );
    let tmp = listing.iter().find(|(p, _, _)| p == "tmp").expect("/tmp");
    assert_eq!(tmp.1, "drwxrwxrwt", "{tmp:?}");
    let passwd = String::from_utf8(tokio::task::block_in_place(|| {
        image_file(image, "/etc/passwd")
    }))
    .unwrap();
    assert!(passwd.contains(":10001:10001:"), "{passwd}");
    let bundle =
        tokio::task::block_in_place(|| image_file(image, "/etc/ssl/certs/ca-certificates.crt"));
    let certs = String::from_utf8_lossy(&bundle)
        .matches("-----BEGIN CERTIFICATE-----")
        .count();
    assert!(certs > 100, "{certs} CA certificates");

    // Static: each binary runs on `scratch` (no loader, no libc).
    for bin in ["meshhub", "meshhub-sink-agent", "meshhubctl"] {
        let entrypoint = format!("/usr/local/bin/{bin}");
        let (status, out, err) = tokio::task::block_in_place(|| {
            run_once(
                &["--network=none", "--entrypoint", &entrypoint],
                image,
                &["--version"],
            )
        });
        assert!(
            status.success() && out.contains(env!("CARGO_PKG_VERSION")),
            "{bin} --version: {status}\n{out}{err}"
        );
    }

    let size: u64 = inspect[0]["Size"].as_u64().expect("image size");
    eprintln!("e2e: image {image}: {} MiB", size >> 20);
    assert!(
        size <= BUDGET_MIB << 20,
        "{image} is {size} bytes, over its budget of {BUDGET_MIB} MiB"
    );
}

//! A Deployment rendered by a chart, run as the kubelet would run its pod,
//! with podman on the host network: the pod's and container's security
//! context (user and group, non-root, read-only root filesystem, no
//! privilege escalation, dropped capabilities, seccomp), its command and
//! arguments, environment (including the downward API's pod name and
//! namespace), volumes (ConfigMaps of the same rendering as files,
//! `emptyDir` and claims as fresh directories owned by the `fsGroup`), the
//! memory limit, and the service account token mounted where in-cluster
//! clients look for it, with `KUBERNETES_SERVICE_HOST`/`PORT` pointing at a
//! test API server.
//!
//! Anything in the spec this translation does not know fails the test
//! rather than being dropped silently.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use kube::api::DynamicObject;
use serde_json::Value;

use crate::container::Container;

/// Where in-cluster clients find their service account.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The service account a pod's in-cluster client uses.
#[derive(Debug, Clone)]
pub struct ServiceAccountMount {
    /// Its token (TokenRequest API).
    pub token: String,
    /// The PEM CA of the API server.
    pub ca_file: PathBuf,
    /// The API server (`KUBERNETES_SERVICE_HOST`/`PORT`).
    pub api_server: SocketAddr,
}

/// A pod of a rendered Deployment, ready to run.
#[derive(Debug)]
pub struct Pod {
    /// `podman run` flags: security, environment, volumes, entrypoint.
    pub flags: Vec<String>,
    /// The container's arguments.
    pub args: Vec<String>,
    /// Host directory of each volume, by volume name.
    pub volumes: BTreeMap<String, PathBuf>,
    /// Container ports by name.
    pub ports: BTreeMap<String, u16>,
    /// The uid the container runs as.
    pub uid: u32,
    /// The container spec, as rendered.
    pub container: Value,
}

fn bool_at(v: &Value, key: &str) -> Option<bool> {
    v.get(key).and_then(Value::as_bool)
}

fn u32_at(v: &Value, key: &str) -> Option<u32> {
    v.get(key)
        .and_then(Value::as_u64)
        .map(|n| u32::try_from(n).expect("a 32-bit id"))
}

/// A Kubernetes memory quantity as podman's `--memory` takes it.
fn memory(quantity: &str) -> String {
    for (suffix, unit) in [("Ki", "k"), ("Mi", "m"), ("Gi", "g")] {
        if let Some(n) = quantity.strip_suffix(suffix) {
            return format!("{n}{unit}");
        }
    }
    assert!(
        quantity.chars().all(|c| c.is_ascii_digit()),
        "memory quantity {quantity:?} is not handled here"
    );
    quantity.to_owned()
}

/// A directory the pod's user can write: owned by the `fsGroup` and
/// group-writable with the set-gid bit, as the kubelet prepares volumes;
/// world-writable like a plain `emptyDir` without one (or when this test
/// may not change owners).
fn volume_dir(path: &Path, fs_group: Option<u32>) {
    std::fs::create_dir_all(path).expect("volume dir");
    let owned = fs_group.is_some_and(|g| std::os::unix::fs::chown(path, None, Some(g)).is_ok());
    let mode = if owned { 0o2775 } else { 0o777 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

impl Pod {
    /// The pod of `deployment` (a rendered object as JSON): files of its
    /// volumes under `dir`, ConfigMaps looked up in `objects` (the same
    /// rendering), the downward API answering `pod_name` in `namespace`,
    /// and `service_account` mounted unless the spec turns the token off.
    pub fn from_deployment(
        deployment: &Value,
        objects: &[DynamicObject],
        pod_name: &str,
        namespace: &str,
        dir: &Path,
        service_account: Option<&ServiceAccountMount>,
    ) -> Self {
        let spec = &deployment["spec"]["template"]["spec"];
        let containers = spec["containers"].as_array().expect("containers");
        assert_eq!(containers.len(), 1, "one container per pod is handled");
        let c = &containers[0];
        assert!(
            spec.get("initContainers").is_none() && spec.get("hostNetwork").is_none(),
            "init containers and hostNetwork are not handled: {spec}"
        );
        let psc = &spec["securityContext"];
        let csc = &c["securityContext"];
        let mut flags: Vec<String> = vec!["--network".into(), "host".into()];

        // Security context: the container's settings win over the pod's.
        let uid = u32_at(csc, "runAsUser").or_else(|| u32_at(psc, "runAsUser"));
        let gid = u32_at(csc, "runAsGroup").or_else(|| u32_at(psc, "runAsGroup"));
        let non_root = bool_at(csc, "runAsNonRoot")
            .or_else(|| bool_at(psc, "runAsNonRoot"))
            .unwrap_or(false);
        let uid = match uid {
            Some(uid) => uid,
            None => {
                assert!(!non_root, "runAsNonRoot without runAsUser: not handled");
                0
            }
        };
        assert!(!non_root || uid != 0, "runAsNonRoot with uid 0: {spec}");
        flags.push(format!(
            "--user={uid}{}",
            gid.map(|g| format!(":{g}")).unwrap_or_default()
        ));
        let fs_group = u32_at(psc, "fsGroup");
        if let Some(g) = fs_group {
            flags.push(format!("--group-add={g}"));
        }
        assert!(
            !bool_at(csc, "privileged").unwrap_or(false),
            "privileged is not handled"
        );
        if bool_at(csc, "readOnlyRootFilesystem").unwrap_or(false) {
            // The kubelet mounts nothing writable by itself: only the spec's
            // volumes (podman would add tmpfs on /tmp, /var/tmp and /run).
            flags.push("--read-only".into());
            flags.push("--read-only-tmpfs=false".into());
        }
        if bool_at(csc, "allowPrivilegeEscalation") == Some(false) {
            flags.push("--security-opt=no-new-privileges".into());
        }
        for cap in csc["capabilities"]["drop"].as_array().into_iter().flatten() {
            flags.push(format!(
                "--cap-drop={}",
                cap.as_str().expect("a capability")
            ));
        }
        for cap in csc["capabilities"]["add"].as_array().into_iter().flatten() {
            flags.push(format!("--cap-add={}", cap.as_str().expect("a capability")));
        }
        let seccomp = csc["seccompProfile"]["type"]
            .as_str()
            .or_else(|| psc["seccompProfile"]["type"].as_str());
        match seccomp {
            // podman's default profile is the runtime's default.
            None | Some("RuntimeDefault") => {}
            Some("Unconfined") => flags.push("--security-opt=seccomp=unconfined".into()),
            Some(other) => panic!("seccompProfile {other} is not handled"),
        }
        if let Some(limit) = c["resources"]["limits"]["memory"].as_str() {
            flags.push(format!("--memory={}", memory(limit)));
        }

        // Environment: literal values and the downward API's pod identity.
        for e in c["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().expect("env name");
            let value = if let Some(v) = e["value"].as_str() {
                v.to_owned()
            } else {
                match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    Some("metadata.name") => pod_name.to_owned(),
                    Some("metadata.namespace") => namespace.to_owned(),
                    _ => panic!("env {e} is not handled"),
                }
            };
            flags.push(format!("--env={name}={value}"));
        }

        // Volumes.
        let declared: BTreeMap<&str, &Value> = spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| (v["name"].as_str().expect("volume name"), v))
            .collect();
        let mut volumes = BTreeMap::new();
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            let name = m["name"].as_str().expect("mount name");
            let target = m["mountPath"].as_str().expect("mountPath");
            let v = declared
                .get(name)
                .unwrap_or_else(|| panic!("mount of undeclared volume {name}"));
            let host = dir.join("volumes").join(name);
            if !volumes.contains_key(name) {
                if let Some(cm) = v["configMap"]["name"].as_str() {
                    write_config_map(&host, cm, objects);
                } else if v.get("emptyDir").is_some() || v.get("persistentVolumeClaim").is_some() {
                    volume_dir(&host, fs_group);
                } else {
                    panic!("volume {v} is not handled");
                }
                volumes.insert(name.to_owned(), host.clone());
            }
            let source = match m["subPath"].as_str() {
                Some(sub) => host.join(sub),
                None => host,
            };
            let ro = if bool_at(m, "readOnly").unwrap_or(false) {
                ":ro"
            } else {
                ""
            };
            flags.push(format!("--volume={}:{target}{ro}", source.display()));
        }

        // The service account, unless the pod turns its token off.
        if let Some(sa) = service_account {
            flags.push(format!(
                "--env=KUBERNETES_SERVICE_HOST={}",
                sa.api_server.ip()
            ));
            flags.push(format!(
                "--env=KUBERNETES_SERVICE_PORT={}",
                sa.api_server.port()
            ));
            if bool_at(spec, "automountServiceAccountToken").unwrap_or(true) {
                let sa_dir = dir.join("serviceaccount");
                std::fs::create_dir_all(&sa_dir).expect("token dir");
                std::fs::write(sa_dir.join("token"), &sa.token).expect("token");
                std::fs::write(sa_dir.join("namespace"), namespace).expect("namespace");
                std::fs::copy(&sa.ca_file, sa_dir.join("ca.crt")).expect("ca.crt");
                for f in ["token", "namespace", "ca.crt"] {
                    std::fs::set_permissions(
                        sa_dir.join(f),
                        std::fs::Permissions::from_mode(0o644),
                    )
                    .expect("chmod");
                }
                flags.push(format!(
                    "--volume={}:{SERVICE_ACCOUNT_DIR}:ro",
                    sa_dir.display()
                ));
            }
        }

        if let Some(command) = c["command"].as_array() {
            flags.push(format!("--entrypoint={}", Value::Array(command.clone())));
        }
        let args = c["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| a.as_str().expect("string args").to_owned())
            .collect();
        let ports = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                (
                    p["name"].as_str().expect("port name").to_owned(),
                    u16::try_from(p["containerPort"].as_u64().expect("containerPort"))
                        .expect("a port"),
                )
            })
            .collect();
        Self {
            flags,
            args,
            volumes,
            ports,
            uid,
            container: c.clone(),
        }
    }

    /// The loopback address and path of a probe (`readinessProbe`,
    /// `livenessProbe`): an HTTP GET on a named or numbered port.
    pub fn probe(&self, which: &str) -> (SocketAddr, String) {
        let get = &self.container[which]["httpGet"];
        let port = match &get["port"] {
            Value::String(name) => *self
                .ports
                .get(name)
                .unwrap_or_else(|| panic!("{which}: no port {name}")),
            Value::Number(n) => u16::try_from(n.as_u64().expect("a port")).expect("a port"),
            other => panic!("{which}: port {other}"),
        };
        let path = get["path"].as_str().expect("probe path").to_owned();
        (SocketAddr::from(([127, 0, 0, 1], port)), path)
    }

    /// Starts the pod's container from `image`.
    pub fn start(&self, name: &str, image: &str) -> Container {
        Container::run(name, &self.flags, image, &self.args)
    }
}

/// Writes the data of the rendered ConfigMap `name` as files under `dir`,
/// readable by any user (the kubelet's default mode 0644).
fn write_config_map(dir: &Path, name: &str, objects: &[DynamicObject]) {
    let cm = objects
        .iter()
        .find(|o| {
            o.types.as_ref().is_some_and(|t| t.kind == "ConfigMap")
                && o.metadata.name.as_deref() == Some(name)
        })
        .unwrap_or_else(|| panic!("no ConfigMap {name} in the rendering"));
    std::fs::create_dir_all(dir).expect("config dir");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for (file, text) in cm.data["data"].as_object().expect("ConfigMap data") {
        let path = dir.join(file);
        std::fs::write(&path, text.as_str().expect("string data")).expect("config file");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
}

/// The fields of a `/proc/<pid>/status` text (values with their
/// whitespace collapsed).
pub fn proc_status(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| {
            (
                k.to_owned(),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            )
        })
        .collect()
}

/// Asserts that a process (`name` for messages; its `/proc/<pid>/status`
/// and `/proc/<pid>/mountinfo` texts) runs as the charts' pods must, as the
/// kernel holds it: uid and gid `uid`, no capabilities, no_new_privs, a
/// seccomp filter, its root filesystem mounted read-only.
pub fn assert_confined(name: &str, status: &str, mountinfo: &str, uid: u32) {
    let s = proc_status(status);
    let id = format!("{uid} {uid} {uid} {uid}");
    assert_eq!(s["Uid"], id, "{name}: {s:?}");
    assert_eq!(s["Gid"], id, "{name}: {s:?}");
    assert_eq!(s["CapEff"], "0000000000000000", "{name}: {s:?}");
    assert_eq!(s["CapPrm"], "0000000000000000", "{name}: {s:?}");
    assert_eq!(s["CapBnd"], "0000000000000000", "{name}: {s:?}");
    assert_eq!(s["NoNewPrivs"], "1", "{name}: {s:?}");
    assert_eq!(s["Seccomp"], "2", "{name}: seccomp filter mode: {s:?}");
    // Its root filesystem, as its own mount table says: read-only.
    let root = mountinfo
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(4) == Some(&"/"))
        .expect("a root mount");
    assert!(
        root[5].split(',').any(|o| o == "ro"),
        "{name}: root mounted {}",
        root[5]
    );
}

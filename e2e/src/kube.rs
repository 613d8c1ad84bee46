//! Real Kubernetes control planes on loopback, without Docker: one etcd
//! (Debian's) and one `kube-apiserver` per cluster, built from the
//! `k8s.io/kubernetes` Go module by `e2e/peers/kube.sh` and cached outside
//! the repository. Every cluster has its own `--etcd-prefix` on the shared
//! etcd, so clusters are isolated (a CRD created in one is absent from the
//! others) while costing one etcd.
//!
//! Certificates are generated per control plane (rcgen): a CA, a serving
//! certificate for `127.0.0.1`/`localhost` signed by it, and an ECDSA
//! service-account signing key. Clients authenticate with a static admin
//! token (`system:masters`); authorization is RBAC, as in real clusters,
//! so tests can also act as a ServiceAccount with a token from the
//! TokenRequest API.
//!
//! Ports are chosen with [`meshhub_testkit::ports::free_port`]; etcd and
//! an API server that exit because another process took one in the
//! meantime are started again on new ones ([`crate::PortAttempts`]).
//!
//! Everything started here is killed when the [`ControlPlanes`] guard drops.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use meshhub_testkit::pki::{self, Ca};
use meshhub_testkit::ports::{free_addr, free_port};

use crate::istio::tail;
use crate::{PortAttempts, Proc};

/// How long a control plane may take to become ready.
pub const START_DEADLINE: Duration = Duration::from_secs(90);
/// The field manager tests write with (never meshhub's own).
pub const TEST_MANAGER: &str = "meshhub-e2e";

/// The admin token every cluster accepts.
const ADMIN_TOKEN: &str = "meshhub-e2e-admin-token";

/// The RBAC manifests shipped in `deploy/rbac/` (`hub.yaml`,
/// `sink-agent.yaml`).
pub fn rbac_manifest(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/rbac")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Where the Istio CRDs are (the shared fixtures beside the repository).
pub fn istio_crds_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/istio/crds/crd-all.gen.yaml")
}

/// The directory holding `kube-apiserver`: `MESHHUB_KUBE_BIN_DIR` if set,
/// else what `e2e/peers/kube.sh` prints (it builds the binary on first use,
/// about 5 minutes on 2 cores, and reuses its cache afterwards; it also
/// installs Debian's etcd when missing). Runs once per test process.
pub fn kube_bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("MESHHUB_KUBE_BIN_DIR") {
            return PathBuf::from(dir);
        }
        let dir = crate::peer_script(
            "kube.sh",
            &[],
            "the Kubernetes tests need kube-apiserver and etcd",
        );
        assert!(
            dir.join("kube-apiserver").is_file(),
            "e2e/peers/kube.sh printed {}, which holds no kube-apiserver",
            dir.display()
        );
        dir
    })
}

/// The etcd binary: `MESHHUB_ETCD` if set, else `etcd` on the PATH or
/// Debian's `/usr/bin/etcd`.
pub fn etcd_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("MESHHUB_ETCD") {
        return PathBuf::from(p);
    }
    kube_bin_dir(); // installs etcd when missing
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("etcd"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"))
}

/// One cluster: a kube-apiserver on its own etcd prefix.
#[derive(Debug)]
pub struct Cluster {
    /// Its name (also its etcd prefix).
    pub name: String,
    /// The HTTPS address it serves on.
    pub addr: SocketAddr,
    /// An admin kubeconfig (CA file, server, token).
    pub kubeconfig: PathBuf,
    dir: PathBuf,
    proc: Option<Proc>,
}

/// A set of clusters on one etcd. Dropping it kills every process.
#[derive(Debug)]
pub struct ControlPlanes {
    dir: tempfile::TempDir,
    logs: PathBuf,
    etcd_url: String,
    clusters: BTreeMap<String, Cluster>,
    // Killed after the API servers.
    _etcd: Proc,
    // Declared after etcd: removed once etcd is gone. On tmpfs this is RAM,
    // so it must never outlive the test (kept dirs once filled /dev/shm).
    _etcd_data: Option<tempfile::TempDir>,
}

impl ControlPlanes {
    /// Starts etcd and one API server per name, waits until each answers
    /// `/readyz`, and installs the Istio CRDs in each.
    pub async fn start(names: &[&str]) -> Self {
        let planes = Self::start_bare(names).await;
        for name in names {
            planes.install_istio_crds(name, &[]).await;
        }
        planes
    }

    /// Like [`ControlPlanes::start`] without installing any CRD.
    pub async fn start_bare(names: &[&str]) -> Self {
        let apiserver = kube_bin_dir().join("kube-apiserver");
        let etcd = etcd_bin();
        let dir = tempfile::tempdir().expect("temp dir");
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&logs).expect("logs dir");

        // etcd's data on tmpfs when there is one: its fsyncs are most of a
        // control plane's start time on a slow disk.
        let shm = Path::new("/dev/shm");
        let etcd_tmpfs = shm
            .is_dir()
            .then(|| {
                tempfile::Builder::new()
                    .prefix("meshhub-etcd-")
                    .tempdir_in(shm)
                    .ok()
            })
            .flatten();
        let etcd_data = etcd_tmpfs
            .as_ref()
            .map_or_else(|| dir.path().join("etcd"), |d| d.path().to_path_buf());
        let (etcd, etcd_url) = start_etcd(&etcd, &etcd_data, &logs).await;

        let mut planes = Self {
            clusters: BTreeMap::new(),
            etcd_url,
            logs,
            _etcd: etcd,
            _etcd_data: etcd_tmpfs,
            dir,
        };
        for name in names {
            let cdir = planes.dir.path().join(name);
            std::fs::create_dir_all(&cdir).expect("cluster dir");
            write_pki(&cdir);
            let cluster = Cluster {
                name: (*name).to_owned(),
                addr: free_addr(),
                kubeconfig: cdir.join("kubeconfig"),
                dir: cdir,
                proc: None,
            };
            cluster.write_kubeconfig();
            planes.clusters.insert((*name).to_owned(), cluster);
        }
        let started = Instant::now();
        for name in names {
            planes.spawn_apiserver(name, &apiserver);
        }
        for name in names {
            planes
                .wait_ready(
                    name,
                    &apiserver,
                    PortAttempts::new(&format!("kube-apiserver {name}")),
                )
                .await;
        }
        eprintln!(
            "e2e: {} kube-apiserver(s) ready in {:.1}s",
            names.len(),
            started.elapsed().as_secs_f64()
        );
        planes
    }

    fn spawn_apiserver(&mut self, name: &str, apiserver: &Path) {
        let etcd_url = self.etcd_url.clone();
        let logs = self.logs.clone();
        let c = self.clusters.get_mut(name).expect("known cluster");
        let d = |f: &str| c.dir.join(f).display().to_string();
        let args: Vec<String> = vec![
            format!("--etcd-servers={etcd_url}"),
            format!("--etcd-prefix=/{name}"),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--advertise-address=127.0.0.1"),
            format!("--secure-port={}", c.addr.port()),
            format!("--cert-dir={}", d("certs")),
            format!("--tls-cert-file={}", d("serving.crt")),
            format!("--tls-private-key-file={}", d("serving.key")),
            format!("--client-ca-file={}", d("ca.crt")),
            format!("--token-auth-file={}", d("tokens.csv")),
            "--authorization-mode=RBAC".to_owned(),
            "--service-account-issuer=https://kubernetes.default.svc".to_owned(),
            format!("--service-account-key-file={}", d("sa.pub")),
            format!("--service-account-signing-key-file={}", d("sa.key")),
            "--service-cluster-ip-range=10.96.0.0/16".to_owned(),
            // Nothing here runs pods: skip what would wait for nodes.
            "--enable-priority-and-fairness=false".to_owned(),
            "--profiling=false".to_owned(),
            "--v=1".to_owned(),
        ];
        c.proc = Some(Proc::spawn_program(
            &format!("kube-apiserver-{name}"),
            apiserver,
            &args,
            &[],
            &logs,
        ));
    }

    /// Waits until cluster `name`'s API server is ready; when it exits
    /// because its port was taken, moves it to a new one (`attempts`
    /// permitting) and starts it again.
    async fn wait_ready(&mut self, name: &str, apiserver: &Path, mut attempts: PortAttempts) {
        let mut client = self.client(name).await;
        let mut deadline = Instant::now() + START_DEADLINE;
        loop {
            let req = http::Request::get("/readyz").body(Vec::new()).unwrap();
            match client.request_text(req).await {
                Ok(body) if body.trim() == "ok" => return,
                _ => {}
            }
            let c = self.clusters.get_mut(name).expect("known cluster");
            let proc = c.proc.as_mut().expect("started");
            if let Some(status) = proc.exited() {
                attempts.exited(&status, &proc.output());
                c.addr = free_addr();
                c.write_kubeconfig();
                self.spawn_apiserver(name, apiserver);
                client = self.client(name).await;
                deadline = Instant::now() + START_DEADLINE;
                continue;
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver {name} not ready after {START_DEADLINE:?}:\n{}",
                tail(&proc.stderr(), 40)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The cluster called `name`.
    pub fn cluster(&self, name: &str) -> &Cluster {
        self.clusters
            .get(name)
            .unwrap_or_else(|| panic!("no cluster {name}"))
    }

    /// The process id of cluster `name`'s kube-apiserver (for its CPU
    /// time, in cost figures).
    pub fn apiserver_pid(&self, name: &str) -> Option<u32> {
        self.cluster(name).proc.as_ref().map(Proc::pid)
    }

    /// An admin client of cluster `name`, built from its kubeconfig.
    pub async fn client(&self, name: &str) -> kube::Client {
        client_from_kubeconfig(&self.cluster(name).kubeconfig).await
    }

    /// The directory where every process writes its logs.
    pub fn logs(&self) -> &Path {
        &self.logs
    }

    /// Stops cluster `name`'s API server (SIGKILL). Its data stays in etcd.
    pub fn stop(&mut self, name: &str) {
        let c = self.clusters.get_mut(name).expect("known cluster");
        if let Some(mut p) = c.proc.take() {
            p.kill();
        }
    }

    /// Starts cluster `name`'s API server again, on the same port and etcd
    /// prefix, and waits until it is ready.
    pub async fn restart(&mut self, name: &str) {
        self.stop(name);
        let apiserver = kube_bin_dir().join("kube-apiserver");
        self.spawn_apiserver(name, &apiserver);
        let attempts = PortAttempts::fixed(
            &format!("kube-apiserver {name}"),
            "a restart keeps its address, which clients hold",
        );
        self.wait_ready(name, &apiserver, attempts).await;
    }

    /// Deletes the object stored under `key` (`networking.istio.io/virtualservices/bookinfo/reviews`:
    /// group, resource, namespace, name) of cluster `name` from etcd itself, behind its API
    /// server's back (as a restore from an older backup would lose it); returns how many keys
    /// etcd deleted. Through etcd's JSON gateway (`/v3/kv/deleterange`).
    pub async fn delete_from_etcd(&self, name: &str, key: &str) -> u64 {
        use base64::Engine as _;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let full = format!("/{name}/{key}");
        let body = serde_json::json!({
            "key": base64::engine::general_purpose::STANDARD.encode(full.as_bytes())
        })
        .to_string();
        let addr = self.etcd_url.trim_start_matches("http://").to_owned();
        let mut s = tokio::net::TcpStream::connect(&addr)
            .await
            .unwrap_or_else(|e| panic!("etcd at {addr}: {e}"));
        s.write_all(
            format!(
                "POST /v3/kv/deleterange HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .expect("etcd request");
        let mut raw = String::new();
        s.read_to_string(&mut raw).await.expect("etcd answer");
        let answer = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).trim();
        // Chunked or not, the JSON object is the body's one `{…}`.
        let json = match (answer.find('{'), answer.rfind('}')) {
            (Some(a), Some(b)) if a < b => &answer[a..=b],
            _ => panic!("etcd deleterange {full}: no JSON object in the answer: {raw}"),
        };
        let v: serde_json::Value = serde_json::from_str(json)
            .unwrap_or_else(|e| panic!("etcd deleterange {full}: {e}: {raw}"));
        v["deleted"]
            .as_str()
            .and_then(|d| d.parse().ok())
            .unwrap_or(0)
    }

    /// Installs the Istio CRDs of the shared fixtures into cluster `name`
    /// (server-side apply, so it is idempotent), except the kinds named in
    /// `except` (`Gateway`), and waits until each is established.
    pub async fn install_istio_crds(&self, name: &str, except: &[&str]) {
        self.install_crds_file(name, &istio_crds_file(), except)
            .await;
    }

    /// Installs the CRDs of `file` (a `crd-all.gen.yaml`) into cluster
    /// `name` like [`ControlPlanes::install_istio_crds`].
    pub async fn install_crds_file(&self, name: &str, file: &Path, except: &[&str]) {
        let client = self.client(name).await;
        let api: Api<CustomResourceDefinition> = Api::all(client);
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the shared fixtures must be beside the repository)",
                file.display()
            )
        });
        let mut names = Vec::new();
        for doc in meshhub_proto::transcode::parse_yaml(&text) {
            let obj = doc.expect("the CRD fixtures parse");
            let value = serde_json::to_value(&obj).expect("CRD as JSON");
            let crd: CustomResourceDefinition =
                serde_json::from_value(value).expect("a CustomResourceDefinition");
            if except.contains(&crd.spec.names.kind.as_str()) {
                continue;
            }
            let crd_name = obj.metadata.name.clone();
            api.patch(
                &crd_name,
                &PatchParams::apply(TEST_MANAGER).force(),
                &Patch::Apply(&crd),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: CRD {crd_name}: {e}"));
            names.push(crd_name);
        }
        for crd_name in names {
            let established = kube::runtime::wait::await_condition(
                api.clone(),
                &crd_name,
                kube::runtime::conditions::is_crd_established(),
            );
            tokio::time::timeout(START_DEADLINE, established)
                .await
                .unwrap_or_else(|_| panic!("{name}: CRD {crd_name} not established"))
                .unwrap_or_else(|e| panic!("{name}: CRD {crd_name}: {e}"));
        }
    }

    /// A kubeconfig for ServiceAccount `ns/sa` of cluster `name` (which
    /// must exist), with a one-hour token from the TokenRequest API: what a
    /// pod running as that account would hold.
    pub async fn service_account_kubeconfig(&self, name: &str, ns: &str, sa: &str) -> PathBuf {
        let token = self.service_account_token(name, ns, sa).await;
        self.cluster(name)
            .kubeconfig_with_token(&format!("kubeconfig-{ns}-{sa}"), &token)
    }

    /// A one-hour token of ServiceAccount `ns/sa` of cluster `name` from the
    /// TokenRequest API (audience: the API server): what the kubelet mounts
    /// into a pod running as that account.
    pub async fn service_account_token(&self, name: &str, ns: &str, sa: &str) -> String {
        use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
        use k8s_openapi::api::core::v1::ServiceAccount;
        let api: Api<ServiceAccount> = Api::namespaced(self.client(name).await, ns);
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec!["https://kubernetes.default.svc".to_owned()],
                expiration_seconds: Some(3600),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create_token_request(sa, &Default::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("{name}: token for {ns}/{sa}: {e}"))
            .status
            .expect("a token")
            .token
    }

    /// What a hub running in cluster `name` holds: namespace `meshhub`, the
    /// RBAC of deploy/rbac/hub.yaml, and the kubeconfig of its
    /// ServiceAccount (`meshhub/meshhub`).
    pub async fn hub_service_account(&self, name: &str) -> PathBuf {
        self.namespace(name, "meshhub").await;
        apply_yaml(&self.client(name).await, &rbac_manifest("hub.yaml")).await;
        self.service_account_kubeconfig(name, "meshhub", "meshhub")
            .await
    }

    /// Makes cluster `name`'s API server refuse VirtualServices for hosts
    /// named `blocked*` (a ValidatingAdmissionPolicy: a real API server's
    /// admission check, not one of meshhub's), and waits until it is in
    /// force (a dry-run apply is refused). Its message: `<name> admits no
    /// VirtualService for a blocked host`. Istio's CRDs and the namespace
    /// `bookinfo` must be there.
    pub async fn refuse_blocked_hosts(&self, name: &str) {
        let client = self.client(name).await;
        apply_yaml(
            &client,
            &format!(
                "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: no-blocked-hosts}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [networking.istio.io]
      apiVersions: ['*']
      operations: [CREATE, UPDATE]
      resources: [virtualservices]
  validations:
  - expression: \"!object.spec.hosts.exists(h, h.startsWith('blocked'))\"
    message: {name} admits no VirtualService for a blocked host
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: no-blocked-hosts}}
spec:
  policyName: no-blocked-hosts
  validationActions: [Deny]
"
            ),
        )
        .await;
        let probe: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
            "metadata": {"name": "probe", "namespace": "bookinfo"},
            "spec": {"hosts": ["blocked-probe"]},
        }))
        .expect("a VirtualService");
        let api = api_for(&client, &probe).await;
        meshhub_testkit::eventually_some(
            &format!("{name}'s admission policy in force"),
            async || {
                api.patch(
                    "probe",
                    &PatchParams::apply("probe").dry_run(),
                    &Patch::Apply(&probe),
                )
                .await
                .err()
                .filter(|e| {
                    e.to_string()
                        .contains("admits no VirtualService for a blocked host")
                })
            },
        )
        .await;
    }

    /// Creates namespace `ns` in cluster `name` (no-op if it exists).
    pub async fn namespace(&self, name: &str, ns: &str) {
        let api: Api<Namespace> = Api::all(self.client(name).await);
        let obj = serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}
        });
        api.patch(
            ns,
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: namespace {ns}: {e}"));
    }
}

/// An admin-capable client from a kubeconfig file.
pub async fn client_from_kubeconfig(path: &Path) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", path.display()));
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", path.display()));
    kube::Client::try_from(config).expect("kube client")
}

/// The API of an object's kind (found by discovery), namespaced when the
/// kind is.
pub async fn api_for(client: &kube::Client, obj: &DynamicObject) -> Api<DynamicObject> {
    let types = obj.types.as_ref().expect("apiVersion and kind");
    let gvk = GroupVersionKind::try_from(types).expect("a GVK");
    let (resource, caps) = discovery::pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("discovery of {gvk:?}: {e}"));
    match (caps.scope, obj.metadata.namespace.as_deref()) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
        (Scope::Namespaced, None) => Api::default_namespaced_with(client.clone(), &resource),
        (Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
    }
}

/// Applies every object of a YAML text (server-side apply as
/// [`TEST_MANAGER`], forcing), like `kubectl apply --server-side`.
pub async fn apply_yaml(client: &kube::Client, text: &str) {
    for doc in meshhub_proto::transcode::parse_yaml(text) {
        let obj = doc.expect("test YAML parses");
        let value = serde_json::to_value(&obj).expect("object as JSON");
        let dynamic: DynamicObject = serde_json::from_value(value).expect("a Kubernetes object");
        let api = api_for(client, &dynamic).await;
        let name = obj.metadata.name.clone();
        api.patch(
            &name,
            &PatchParams::apply(TEST_MANAGER).force(),
            &Patch::Apply(&dynamic),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {} {name}: {e}", obj.kind));
    }
}

/// Deletes one object (`group/version`, kind, namespace, name); true if it
/// existed.
pub async fn delete(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> bool {
    let dynamic: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": ns}
    }))
    .expect("object");
    let api = api_for(client, &dynamic).await;
    match api.delete(name, &Default::default()).await {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 404 => false,
        Err(e) => panic!("delete {kind} {ns}/{name}: {e}"),
    }
}

/// Gets one object, or `None` when it does not exist.
pub async fn get(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Option<DynamicObject> {
    let dynamic: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": ns}
    }))
    .expect("object");
    let api = api_for(client, &dynamic).await;
    match api.get_opt(name).await {
        Ok(o) => o,
        Err(e) => panic!("get {kind} {ns}/{name}: {e}"),
    }
}

/// Writes a cluster's PKI into `dir`: `ca.crt`, `serving.crt`/`.key`
/// (for 127.0.0.1 and localhost), `sa.key`/`sa.pub` (service-account
/// signing key pair, ECDSA P-256) and `tokens.csv`.
fn write_pki(dir: &Path) {
    let ca = Ca::new("meshhub-e2e-ca");
    ca.write(&dir.join("ca.crt"));
    ca.server(&["localhost", "127.0.0.1"])
        .write(&dir.join("serving.crt"), &dir.join("serving.key"));
    let (sa_key, sa_pub) = pki::key_pair();
    std::fs::write(dir.join("sa.key"), sa_key).unwrap();
    std::fs::write(dir.join("sa.pub"), sa_pub).unwrap();
    std::fs::write(
        dir.join("tokens.csv"),
        format!("{ADMIN_TOKEN},admin,admin,system:masters\n"),
    )
    .unwrap();
}

/// Creates `bookinfo/<name>` (a VirtualService) in `primary` and waits
/// until an agent applied the hub's copy of it in `remote`: what the chart
/// and image tests check the whole chain with (primary API, hub, agent,
/// remote API). The applied object, labelled as meshhub's.
pub async fn applied_through_the_mesh(
    primary: &kube::Client,
    remote: &kube::Client,
    name: &str,
) -> DynamicObject {
    apply_yaml(primary, &meshhub_testkit::objects::vs(name, name)).await;
    let applied = meshhub_testkit::eventually_some(
        "the agent applies the hub's object in the remote cluster",
        async || {
            get(
                remote,
                "networking.istio.io/v1",
                "VirtualService",
                "bookinfo",
                name,
            )
            .await
        },
    )
    .await;
    assert_eq!(
        applied.metadata.labels.as_ref().expect("labels")["app.kubernetes.io/managed-by"],
        "meshhub"
    );
    applied
}

/// A kubeconfig for `addr` trusting the cluster's CA, with `token`.
pub fn kubeconfig_text(name: &str, addr: SocketAddr, dir: &Path, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: https://{addr}\n    certificate-authority: {ca}\nusers:\n- name: {name}-user\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}-user\ncurrent-context: {name}\n",
        ca = dir.join("ca.crt").display(),
    )
}

/// Starts etcd on two ports chosen for it (client, peer) with its data in
/// `data` (emptied before each attempt), and waits until it listens on
/// both: the process and its client URL.
async fn start_etcd(program: &Path, data: &Path, logs: &Path) -> (Proc, String) {
    let mut attempts = PortAttempts::new("etcd");
    loop {
        let _ = std::fs::remove_dir_all(data);
        std::fs::create_dir_all(data).expect("etcd data dir");
        let (client, peer) = (free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let args: Vec<String> = [
            "--name",
            "e2e",
            "--data-dir",
            &data.display().to_string(),
            "--listen-client-urls",
            &etcd_url,
            "--advertise-client-urls",
            &etcd_url,
            "--listen-peer-urls",
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
            "--initial-cluster",
            &format!("e2e={peer_url}"),
            "--log-level",
            "warn",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let mut etcd = Proc::spawn_program("etcd", program, &args, &[], logs);
        // Its own sockets: whoever else holds a port would answer in its
        // place, and the API servers would be handed its URL.
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if etcd.listens_on(client) && etcd.listens_on(peer) {
                return (etcd, etcd_url);
            }
            if let Some(status) = etcd.exited() {
                attempts.exited(&status, &etcd.output());
                break;
            }
            assert!(
                Instant::now() < deadline,
                "etcd does not listen on {client} and {peer} after {START_DEADLINE:?}:\n{}",
                tail(&etcd.output(), 40)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Cluster {
    /// Writes its admin kubeconfig (for its current address).
    fn write_kubeconfig(&self) {
        std::fs::write(
            &self.kubeconfig,
            kubeconfig_text(&self.name, self.addr, &self.dir, ADMIN_TOKEN),
        )
        .expect("kubeconfig");
    }

    /// The CA certificate (PEM) that verifies this API server's serving
    /// certificate: what a pod finds as its service account's `ca.crt`.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// A kubeconfig for this cluster with another bearer token (a
    /// ServiceAccount's), written beside the admin one as `<file>`.
    pub fn kubeconfig_with_token(&self, file: &str, token: &str) -> PathBuf {
        let path = self.dir.join(file);
        std::fs::write(
            &path,
            kubeconfig_text(&self.name, self.addr, &self.dir, token),
        )
        .expect("kubeconfig");
        path
    }
}

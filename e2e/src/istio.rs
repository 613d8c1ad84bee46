//! Real Istio programs on loopback, built from Istio's Go sources by
//! `e2e/peers/istio.sh` and cached outside the repository:
//!
//! * [`Istiod`]: `pilot-discovery` of a current release, consuming a
//!   meshhub ADS address through `meshConfig.configSources: [xds://…]`.
//!   istiod needs a Kubernetes API server even then (it panics at start
//!   without one), so it runs against a harness kube-apiserver
//!   ([`crate::kube::ControlPlanes`]) with the Istio CRDs installed.
//! * [`Galley`]: Istio 1.5's Galley serving a directory of files over
//!   classic MCP (`ResourceSource`).
//! * [`mcpc`]: Istio 1.5's MCP test client, a sink that dials a source.
//! * [`McpSink15`]: Istio 1.5's `ResourceSink` server library behind a
//!   small main of ours (`e2e/peers/mcpsink15`), for the hub's dial-out.
//!
//! Every process is killed when its guard drops.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use meshhub_testkit::eventually_blocking;
use meshhub_testkit::http::{get_blocking, get_large_blocking};
use serde_json::Value;

use meshhub_testkit::ports::free_port;

use crate::{PortAttempts, Proc};

/// How long istiod may take to start serving its debug endpoints.
pub const ISTIOD_START: Duration = Duration::from_secs(90);

/// `e2e/peers/istio.sh <target>`: the path it printed.
fn peer_script(target: &str) -> PathBuf {
    crate::peer_script(
        "istio.sh",
        &[target],
        "the Istio interop tests need the Istio peers",
    )
}

/// `pilot-discovery` of Istio 1.28 (GVK type URLs in `v1`):
/// `MESHHUB_ISTIOD_BIN` if set, else what `e2e/peers/istio.sh istiod`
/// builds (about 6 minutes cold on 2 cores, cached afterwards). Runs once
/// per test process.
pub fn istiod_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| istiod_from("MESHHUB_ISTIOD_BIN", "istiod"))
}

/// `pilot-discovery` of Istio 1.23, the last release before the type URLs
/// moved to `v1`: `MESHHUB_ISTIOD_1_23_BIN` if set, else what
/// `e2e/peers/istio.sh istiod-1.23` builds.
pub fn istiod_1_23_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| istiod_from("MESHHUB_ISTIOD_1_23_BIN", "istiod-1.23"))
}

/// The Go module of the Istio release [`istiod_bin`] is built from, in the
/// Go module cache (its CRDs at `manifests/charts/base/files/
/// crd-all.gen.yaml`, its test data under `pkg/config/...`):
/// `MESHHUB_ISTIO_MODULE_DIR` if set, else what `e2e/peers/istio.sh module`
/// prints (it downloads the module when the cache lacks it, whether or not
/// istiod was built here). Read at test time, never committed.
pub fn istio_module_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| module_from("MESHHUB_ISTIO_MODULE_DIR", "module"))
        .clone()
}

/// `pilot-discovery` of the newest Istio the module proxy serves (Istio
/// master, pinned in `e2e/peers/istio.sh`): `MESHHUB_ISTIOD_NEWEST_BIN` if
/// set, else what `e2e/peers/istio.sh istiod-newest` builds (about 7
/// minutes cold on 2 cores, cached afterwards).
pub fn istiod_newest_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| istiod_from("MESHHUB_ISTIOD_NEWEST_BIN", "istiod-newest"))
}

/// The Go module [`istiod_newest_bin`] is built from (its CRDs at
/// `manifests/charts/base/files/crd-all.gen.yaml`):
/// `MESHHUB_ISTIO_NEWEST_MODULE_DIR` if set, else what
/// `e2e/peers/istio.sh module-newest` prints. Read at test time, never
/// committed.
pub fn istio_newest_module_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| module_from("MESHHUB_ISTIO_NEWEST_MODULE_DIR", "module-newest"))
        .clone()
}

/// A module directory: the environment variable `var` if set and not
/// empty, else what `e2e/peers/istio.sh <target>` prints.
fn module_from(var: &str, target: &str) -> PathBuf {
    let dir = std::env::var_os(var)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| peer_script(target));
    assert!(
        dir.is_dir(),
        "Istio's module is not at {} (${var}, e2e/peers/istio.sh {target})",
        dir.display()
    );
    dir
}

/// The CRDs of Istio 1.23 (`manifests/charts/base/crds/crd-all.gen.yaml`
/// of the module [`istiod_1_23_bin`] is built from): `MESHHUB_ISTIO_1_23_CRDS`
/// if set, else read from the Go module cache through the scratch module
/// `e2e/peers/istio.sh` built istiod 1.23 in (beside its `bin`). Read at
/// test time, never committed.
pub fn istio_1_23_crds() -> PathBuf {
    if let Some(file) = std::env::var_os("MESHHUB_ISTIO_1_23_CRDS").filter(|f| !f.is_empty()) {
        return PathBuf::from(file);
    }
    let module = istiod_1_23_bin()
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("module"))
        .filter(|d| d.join("go.mod").is_file())
        .unwrap_or_else(|| {
            panic!(
                "no scratch module beside {} (set MESHHUB_ISTIO_1_23_CRDS)",
                istiod_1_23_bin().display()
            )
        });
    // `go mod download` (not `go list -m`, whose Dir is empty when the
    // module cache lacks the module: a cached istiod with a fresh cache)
    // fetches the version the scratch module requires and says where.
    let out = std::process::Command::new("go")
        .args(["mod", "download", "-json", "istio.io/istio"])
        .current_dir(&module)
        .env("GOFLAGS", "-mod=mod")
        .env("GOSUMDB", "off")
        .output()
        .unwrap_or_else(|e| panic!("go mod download in {}: {e}", module.display()));
    assert!(
        out.status.success(),
        "go mod download in {}: {}{}",
        module.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("go mod download -json in {}: {e}", module.display()));
    let dir = info["Dir"]
        .as_str()
        .unwrap_or_else(|| panic!("go mod download -json gave no Dir: {info}"));
    let file = PathBuf::from(dir).join("manifests/charts/base/crds/crd-all.gen.yaml");
    assert!(file.is_file(), "no Istio 1.23 CRDs at {}", file.display());
    file
}

fn istiod_from(var: &str, target: &str) -> PathBuf {
    let bin = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| peer_script(target));
    assert!(bin.is_file(), "no pilot-discovery at {}", bin.display());
    bin
}

/// The directory of Istio 1.5's `galley`, `mcpc` and `mcpsink15`:
/// `MESHHUB_ISTIO15_BIN_DIR` if set, else what `e2e/peers/istio.sh
/// istio15` builds (about 3 minutes cold). Runs once per test process.
pub fn istio15_bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::var_os("MESHHUB_ISTIO15_BIN_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| peer_script("istio15"));
        for bin in ["galley", "mcpc", "mcpsink15"] {
            assert!(
                dir.join(bin).is_file(),
                "no {bin} in {} (e2e/peers/istio.sh istio15)",
                dir.display()
            );
        }
        dir
    })
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A running istiod.
#[derive(Debug)]
pub struct Istiod {
    /// The process.
    pub proc: Proc,
    /// Its plaintext xDS address (`--grpcAddr`, 15010 in a mesh), where it
    /// serves its own config to `GENERATOR=api` clients too.
    pub grpc: SocketAddr,
    /// Its HTTP (debug) address.
    pub http: SocketAddr,
    /// Its monitoring (metrics) address.
    pub monitoring: SocketAddr,
    /// Its HTTPS address (`--httpsAddr`), where it serves its validating
    /// webhook at `/validate`.
    pub https: SocketAddr,
    /// How it was started, to start it again on new ports when one was
    /// taken.
    spec: IstiodSpec,
}

/// What an [`Istiod`] is started with, besides its ports.
#[derive(Debug, Clone)]
struct IstiodSpec {
    name: String,
    bin: PathBuf,
    kubeconfig: PathBuf,
    mesh: PathBuf,
    logs: PathBuf,
    /// The HTTP port when its caller chose it (and told someone): it stays.
    http: Option<u16>,
}

/// Where an [`Istiod`] reads its Istio configuration from.
#[derive(Debug, Clone, Copy)]
pub enum ConfigSource {
    /// `meshConfig.configSources: [xds://<address>]`: MCP-over-xDS from a
    /// meshhub ADS address.
    Xds(SocketAddr),
    /// No `configSources`: istiod watches the Istio CRDs of its own
    /// cluster, as it does without meshhub.
    Kubernetes,
}

impl Istiod {
    /// Starts `pilot-discovery discovery` in namespace `istio-system` of the
    /// cluster behind `kubeconfig`, with a mesh config whose only config
    /// source is `xds://<xds>`, and waits until it is ready (at most
    /// [`ISTIOD_START`]). The namespace and the Istio CRDs must exist.
    /// Every port is loopback and chosen here (several may run at once).
    /// `bin`: [`istiod_bin`] or [`istiod_1_23_bin`].
    pub fn start(
        name: &str,
        bin: &Path,
        kubeconfig: &Path,
        xds: SocketAddr,
        dir: &Path,
        logs: &Path,
    ) -> Self {
        let mut istiod = Self::spawn(name, bin, kubeconfig, ConfigSource::Xds(xds), dir, logs);
        istiod.wait_ready(ISTIOD_START);
        istiod
    }

    /// Starts `pilot-discovery discovery` like [`Istiod::start`], reading
    /// its configuration from `source`, and returns at once (see
    /// [`Istiod::wait_ready`]).
    pub fn spawn(
        name: &str,
        bin: &Path,
        kubeconfig: &Path,
        source: ConfigSource,
        dir: &Path,
        logs: &Path,
    ) -> Self {
        Self::spawn_with(name, bin, kubeconfig, source, dir, logs, None)
    }

    /// [`Istiod::spawn`] with its HTTP (debug) port chosen by the caller,
    /// who must tell it to someone before istiod runs (a sink agent
    /// comparing what it serves with istiod's `/debug/configz`). Its other
    /// ports may change when it is started again (see
    /// [`Istiod::wait_ready`]); that one does not.
    pub fn spawn_at(
        name: &str,
        bin: &Path,
        kubeconfig: &Path,
        source: ConfigSource,
        dir: &Path,
        logs: &Path,
        http: u16,
    ) -> Self {
        Self::spawn_with(name, bin, kubeconfig, source, dir, logs, Some(http))
    }

    fn spawn_with(
        name: &str,
        bin: &Path,
        kubeconfig: &Path,
        source: ConfigSource,
        dir: &Path,
        logs: &Path,
        http: Option<u16>,
    ) -> Self {
        let mesh = dir.join(format!("{name}-mesh.yaml"));
        let sources = match source {
            ConfigSource::Xds(xds) => format!("configSources:\n- address: xds://{xds}\n"),
            ConfigSource::Kubernetes => String::new(),
        };
        std::fs::write(&mesh, format!("{sources}rootNamespace: istio-system\n"))
            .expect("mesh config");
        Self::launch(IstiodSpec {
            name: name.to_owned(),
            bin: bin.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            mesh,
            logs: logs.to_owned(),
            http,
        })
    }

    /// Starts it as `spec` says, on ports chosen now.
    fn launch(spec: IstiodSpec) -> Self {
        let http = spec.http.unwrap_or_else(free_port);
        let (grpc, monitoring, https, ctrlz) = (free_port(), free_port(), free_port(), free_port());
        let args: Vec<String> = [
            "discovery",
            "--kubeconfig",
            &spec.kubeconfig.display().to_string(),
            "--meshConfig",
            &spec.mesh.display().to_string(),
            "--grpcAddr",
            &format!("127.0.0.1:{grpc}"),
            "--httpAddr",
            &format!("127.0.0.1:{http}"),
            "--monitoringAddr",
            &format!("127.0.0.1:{monitoring}"),
            "--httpsAddr",
            &format!("127.0.0.1:{https}"),
            "--ctrlz_port",
            &ctrlz.to_string(),
            "--ctrlz_address",
            "127.0.0.1",
            "--secureGRPCAddr",
            "",
            "--domain",
            "cluster.local",
        ]
        .map(str::to_owned)
        .to_vec();
        let proc = Proc::spawn_program(
            &spec.name,
            &spec.bin,
            &args,
            &[
                ("POD_NAMESPACE", "istio-system"),
                ("POD_NAME", &spec.name),
                ("PILOT_ENABLE_CONFIG_DISTRIBUTION_TRACKING", "false"),
            ],
            &spec.logs,
        );
        Self {
            proc,
            grpc: loopback(grpc),
            http: loopback(http),
            monitoring: loopback(monitoring),
            https: loopback(https),
            spec,
        }
    }

    /// Waits until istiod answers `/ready` (its caches, the MCP-over-xDS
    /// store or the Kubernetes informers among them, have synced), failing
    /// if it exits first or `within` passes. When it exits because a port
    /// chosen for it was taken, it is started again on new ones (its
    /// addresses here change; an HTTP port its caller chose does not).
    pub fn wait_ready(&mut self, within: Duration) {
        let mut attempts = PortAttempts::new(&format!("istiod {}", self.spec.name));
        let mut end = Instant::now() + within;
        loop {
            // Its own port: another istiod's /ready is no answer.
            if self.proc.listens_on(self.http.port())
                && matches!(get_blocking(self.http, "/ready"), Some((200, _)))
            {
                return;
            }
            if let Some(status) = self.proc.exited() {
                let output = self.proc.output();
                if self
                    .spec
                    .http
                    .is_some_and(|p| std::net::TcpListener::bind(loopback(p)).is_err())
                {
                    PortAttempts::fixed(
                        &format!("istiod {}", self.spec.name),
                        "its HTTP port was chosen by its caller",
                    )
                    .exited(&status, &output);
                }
                attempts.exited(&status, &output);
                *self = Self::launch(self.spec.clone());
                end = Instant::now() + within;
                continue;
            }
            assert!(
                Instant::now() < end,
                "istiod not ready after {within:?}\n{}",
                tail(&self.proc.stderr(), 40)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `/debug/configz`: every config istiod holds, as it holds it. Read
    /// over HTTP/1.0: to HTTP/1.1, istiod answers a body larger than a few
    /// KiB chunked, which the plain client does not decode.
    pub fn configz(&self) -> Vec<Value> {
        let Some((200, body)) =
            get_large_blocking(self.http, "/debug/configz", Duration::from_secs(30))
        else {
            return Vec::new();
        };
        match serde_json::from_slice(&body) {
            Ok(Value::Array(items)) => items,
            _ => Vec::new(),
        }
    }

    /// How many configs of the `kinds` (API group, kind) istiod holds, from
    /// one `/debug/configz` (read whole, whatever its size).
    pub fn count_configs(
        &self,
        kinds: &[(String, String)],
        timeout: Duration,
    ) -> Result<usize, String> {
        #[derive(serde::Deserialize)]
        struct Item {
            #[serde(rename = "apiVersion")]
            api_version: String,
            kind: String,
        }
        let (code, body) = get_large_blocking(self.http, "/debug/configz", timeout)
            .ok_or("istiod's /debug/configz did not answer")?;
        if code != 200 {
            return Err(format!("istiod's /debug/configz answered {code}"));
        }
        let items: Vec<Item> =
            serde_json::from_slice(&body).map_err(|e| format!("/debug/configz: {e}"))?;
        Ok(items
            .iter()
            .filter(|i| {
                let group = i.api_version.rsplit_once('/').map_or("", |(g, _)| g);
                kinds.iter().any(|(g, k)| g == group && *k == i.kind)
            })
            .count())
    }

    /// The config of `kind` `namespace/name`, if istiod holds it.
    pub fn config(&self, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        self.configz().into_iter().find(|c| {
            c["kind"] == kind
                && c["metadata"]["namespace"] == namespace
                && c["metadata"]["name"] == name
        })
    }
}

/// The consumer row of a hub's (or agent's) `/status` whose node id is
/// istiod `pod`'s (`sidecar~…~<pod>.istio-system~…`), connected.
pub fn istiod_row(status: &Value, pod: &str) -> Option<Value> {
    let rows = status["consumers"]
        .as_array()
        .or_else(|| status["ledger"].as_array())?;
    rows.iter()
        .find(|c| {
            c["connected"] == true
                && c["node_id"]
                    .as_str()
                    .is_some_and(|id| id.starts_with("sidecar~") && id.contains(pod))
        })
        .cloned()
}

/// Waits for `check` against `istiod` with the tests' deadline, failing
/// with istiod's log tail; returns the time it took.
pub fn until_istiod(istiod: &Istiod, what: &str, check: impl Fn(&Istiod) -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if check(istiod) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < meshhub_testkit::DEADLINE,
            "timed out waiting for {what}\nistiod log:\n{}",
            tail(&(istiod.proc.stderr() + &istiod.proc.stdout()), 30)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A running Galley 1.5 serving a directory over MCP.
#[derive(Debug)]
pub struct Galley {
    /// The process.
    pub proc: Proc,
    /// Its MCP (`ResourceSource`) address.
    pub mcp: SocketAddr,
}

impl Galley {
    /// Starts `galley server` on the files of `config_dir` (Istio 1.5
    /// apiVersions: `networking.istio.io/v1alpha3`, `security.istio.io/
    /// v1beta1`), with validation and webhook reconciliation off, plaintext
    /// on loopback, and the default new-stream rate limit. Galley needs a
    /// reachable Kubernetes API even for files: `kubeconfig`. `port`: 0 for
    /// a free one (or a port to restart on).
    pub fn start(
        name: &str,
        config_dir: &Path,
        kubeconfig: &Path,
        port: u16,
        dir: &Path,
        logs: &Path,
    ) -> Self {
        let mesh = dir.join(format!("{name}-mesh.yaml"));
        let access = dir.join(format!("{name}-access.yaml"));
        std::fs::write(&mesh, "{}\n").expect("mesh config");
        std::fs::write(&access, "allowed: []\n").expect("access list");
        let mut attempts = PortAttempts::new(name);
        loop {
            let mcp = if port == 0 { free_port() } else { port };
            let args: Vec<String> = [
                "server",
                "--configPath",
                &config_dir.display().to_string(),
                "--kubeconfig",
                &kubeconfig.display().to_string(),
                "--meshConfigFile",
                &mesh.display().to_string(),
                "--insecure",
                "--enable-validation=false",
                "--enable-reconcileWebhookConfiguration=false",
                "--accessListFile",
                &access.display().to_string(),
                "--livenessProbePath",
                &dir.join(format!("{name}-live")).display().to_string(),
                "--readinessProbePath",
                &dir.join(format!("{name}-ready")).display().to_string(),
                "--server-address",
                &format!("tcp://127.0.0.1:{mcp}"),
                "--disableResourceReadyCheck",
                "--monitoringPort",
                &free_port().to_string(),
                "--ctrlz_port",
                &free_port().to_string(),
                "--ctrlz_address",
                "127.0.0.1",
            ]
            .map(str::to_owned)
            .to_vec();
            let mut proc =
                Proc::spawn_program(name, &istio15_bin_dir().join("galley"), &args, &[], logs);
            let end = Instant::now() + Duration::from_secs(60);
            // Its own socket: whoever else holds the port would accept too.
            let listening = loop {
                if proc.listens_on(mcp) {
                    break true;
                }
                if let Some(status) = proc.exited() {
                    let output = proc.output();
                    if port != 0 && std::net::TcpListener::bind(loopback(port)).is_err() {
                        PortAttempts::fixed(name, "restarted on its port").exited(&status, &output);
                    }
                    attempts.exited(&status, &output);
                    break false;
                }
                assert!(
                    Instant::now() < end,
                    "galley does not listen on {mcp}\n{}",
                    tail(&proc.output(), 40)
                );
                std::thread::sleep(Duration::from_millis(50));
            };
            if listening {
                return Self {
                    proc,
                    mcp: loopback(mcp),
                };
            }
        }
    }
}

/// A running Istio 1.5 `mcpc`: a sink that dials a `ResourceSource`.
#[derive(Debug)]
pub struct Mcpc {
    /// The process (its standard output is what it received).
    pub proc: Proc,
}

impl Mcpc {
    /// Starts `mcpc` against `server` as sink `id` for Istio 1.5's
    /// well-known Pilot collections, printing with `-output <output>`.
    pub fn start(server: SocketAddr, id: &str, output: &str, logs: &Path) -> Self {
        let args: Vec<String> = [
            "-server",
            &server.to_string(),
            "-use-wkt-pilot",
            "-id",
            id,
            "-output",
            output,
        ]
        .map(str::to_owned)
        .to_vec();
        let name = format!("mcpc-{id}");
        Self {
            proc: Proc::spawn_program(&name, &istio15_bin_dir().join("mcpc"), &args, &[], logs),
        }
    }

    /// Waits (checking every 100 ms, up to `deadline`) until `until` holds
    /// for its standard output, and returns that output; fails if it exits.
    pub fn wait_for(&mut self, deadline: Duration, until: impl Fn(&str) -> bool) -> String {
        let end = Instant::now() + deadline;
        loop {
            let out = self.proc.stdout();
            if until(&out) {
                return out;
            }
            if let Some(status) = self.proc.exited() {
                panic!(
                    "mcpc exited ({status})\nstdout:\n{}\nstderr:\n{}",
                    tail(&out, 40),
                    tail(&self.proc.stderr(), 40)
                );
            }
            assert!(
                Instant::now() < end,
                "mcpc: condition not met after {deadline:?}\nstdout:\n{}\nstderr:\n{}",
                tail(&out, 60),
                tail(&self.proc.stderr(), 20)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A running `mcpsink15`: Istio 1.5's `ResourceSink` server.
#[derive(Debug)]
pub struct McpSink15 {
    /// The process.
    pub proc: Proc,
    /// Where sources dial (`ResourceSink`).
    pub grpc: SocketAddr,
    /// Its state endpoint.
    pub http: SocketAddr,
}

impl McpSink15 {
    /// Starts it accepting `collections`; `reject` names a resource
    /// (`ns/name`) whose changes it refuses (NACKs).
    pub fn start(name: &str, collections: &[&str], reject: Option<&str>, logs: &Path) -> Self {
        let mut args: Vec<String> = [
            "-addr",
            "127.0.0.1:0",
            "-http",
            "127.0.0.1:0",
            "-collections",
            &collections.join(","),
            "-id",
            name,
        ]
        .map(str::to_owned)
        .to_vec();
        if let Some(r) = reject {
            args.extend(["-reject".to_owned(), r.to_owned()]);
        }
        let mut proc =
            Proc::spawn_program(name, &istio15_bin_dir().join("mcpsink15"), &args, &[], logs);
        let line = eventually_blocking("mcpsink15 to listen", || {
            if let Some(status) = proc.exited() {
                panic!("mcpsink15 exited ({status})\n{}", proc.stderr());
            }
            proc.stdout()
                .lines()
                .find(|l| l.starts_with("mcpsink15 grpc="))
                .map(str::to_owned)
        });
        let field = |key: &str| -> SocketAddr {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("no {key} in {line:?}"))
        };
        Self {
            grpc: field("grpc="),
            http: field("http="),
            proc,
        }
    }

    /// What it holds: collection → items (`name`, `version`, `typeUrl`,
    /// `body` as JSON).
    pub fn state(&self) -> Value {
        match get_blocking(self.http, "/state") {
            Some((200, body)) => serde_json::from_str(&body).unwrap_or(Value::Null),
            _ => Value::Null,
        }
    }
}

//! Real Kubernetes clusters in containers, for the kind e2e tests
//! (`tests/it/kind.rs`): kind (`e2e/peers/kind.sh`, or `MESHHUB_KIND_BIN`)
//! driving podman, on the node image `e2e/peers/kind-node.sh` builds from
//! the package registries (or `MESHHUB_KIND_NODE_IMAGE`), with the cluster
//! configuration and containers.conf of `deploy/kind/` that
//! `deploy/kind/up.sh` uses too. kubectl is the one `e2e/peers/kube.sh`
//! builds, Helm the chart tests' ([`crate::helm::helm_bin`]).
//!
//! The clusters' credentials live in a private kubeconfig in a temporary
//! directory: a developer's own clusters and `~/.kube/config` are never
//! touched. Clusters are deleted when the [`Clusters`] guard drops (also
//! when a test panics, after printing what their pods were doing), and
//! leftovers of a killed run (the same names) before new ones are created.
//!
//! Every command and every wait is bounded; a wait that times out says
//! what it saw (the pods' `describe` and logs).

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::container;

/// How long one command (a cluster's creation, a Helm install with
/// `--wait`, ...) or one wait for a pod may take.
pub const WAIT: Duration = Duration::from_secs(240);

/// Whether failing to get the clusters fails the tests instead of
/// skipping them (`MESHHUB_KIND_REQUIRED=1`, set by CI).
pub fn required() -> bool {
    std::env::var("MESHHUB_KIND_REQUIRED").is_ok_and(|v| v == "1")
}

/// The programs and images the clusters are made of.
#[derive(Debug, Clone)]
pub struct Tools {
    /// kind.
    pub kind: PathBuf,
    /// The node image (a podman image name).
    pub node_image: String,
    /// kubectl.
    pub kubectl: PathBuf,
    /// meshhub's image (a podman image name).
    pub image: String,
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// What the kind tests need, or why this machine can't run them: podman
/// and buildah with meshhub's image ([`container::available`]), kind,
/// `/lib/modules` (kind mounts it), the node image and kubectl (each
/// named by its variable, `MESHHUB_KIND_BIN`, `MESHHUB_KIND_NODE_IMAGE`,
/// `MESHHUB_KUBECTL`, else from its peer script). Builds
/// what is missing and buildable (cached peers: kind about 1.5 min, the
/// node image 35-60 min cold, 0.1 s reused).
pub fn tools() -> Result<Tools, String> {
    container::available()?;
    let kind = match std::env::var_os("MESHHUB_KIND_BIN") {
        Some(bin) => PathBuf::from(bin),
        None => crate::try_peer_script("kind.sh", &[])?,
    };
    match Command::new(&kind).arg("version").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            return Err(format!(
                "{} version failed ({})",
                kind.display(),
                out.status
            ));
        }
        Err(e) => return Err(format!("can't run kind ({}): {e}", kind.display())),
    }
    if !Path::new("/lib/modules").is_dir() {
        std::fs::create_dir_all("/lib/modules")
            .map_err(|e| format!("kind mounts /lib/modules, which is missing: {e}"))?;
    }
    let node_image = match std::env::var("MESHHUB_KIND_NODE_IMAGE") {
        Ok(image) => image,
        Err(_) => crate::try_peer_script("kind-node.sh", &[])?
            .display()
            .to_string(),
    };
    let kubectl = match std::env::var_os("MESHHUB_KUBECTL") {
        Some(bin) => PathBuf::from(bin),
        None => crate::try_peer_script("kube.sh", &["kubectl"])?.join("kubectl"),
    };
    Ok(Tools {
        kind,
        node_image,
        kubectl,
        image: container::image().to_owned(),
    })
}

/// Runs a command to completion within `timeout` (killed beyond it), with
/// `stdin` as its input: its stdout, or why it failed (with its stderr).
pub fn run(
    command: &mut Command,
    stdin: Option<&str>,
    timeout: Duration,
) -> Result<String, String> {
    let what = format!("{command:?}");
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("can't start {what}: {e}"))?;
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        let text = text.to_owned();
        std::thread::spawn(move || {
            let _ = pipe.write_all(text.as_bytes());
        });
    }
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default(),
    );
    match status {
        Some(s) if s.success() => Ok(stdout),
        Some(s) => Err(format!("{what} failed ({s}):\n{stderr}{stdout}")),
        None => Err(format!(
            "{what} did not finish within {timeout:?}:\n{stderr}{stdout}"
        )),
    }
}

/// Polls `check` every half second until it returns `Some`; after
/// `timeout`, panics naming `what` with what `observed` says then.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Option<T>,
    observed: impl FnOnce() -> String,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        if Instant::now() > deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}; observed:\n{}",
                observed()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Runs `step` while `violation` is sampled over and over (each sample a
/// few kubectl calls): panics with the violations seen, if any, or when
/// none was sampled at all.
pub fn sampling(what: &str, violation: impl Fn() -> Option<String>, step: impl FnOnce() + Send) {
    let done = std::sync::atomic::AtomicBool::new(false);
    let (mut samples, mut seen) = (0, Vec::new());
    std::thread::scope(|s| {
        let step = s.spawn(|| {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(step));
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            result
        });
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            seen.extend(violation());
            samples += 1;
        }
        if let Err(panic) = step.join().unwrap() {
            std::panic::resume_unwind(panic);
        }
    });
    eprintln!("kind e2e: {samples} samples during {what}");
    assert!(samples > 0, "nothing sampled during {what}");
    assert!(seen.is_empty(), "during {what}: {seen:?}");
}

/// How many times a pod's containers restarted.
pub fn restarts(pod: &Value) -> u64 {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["restartCount"].as_u64())
        .sum()
}

/// An image of a dynamically linked `pilot-discovery` (what
/// `e2e/peers/istio.sh` builds): the binary and the libraries `ldd` lists,
/// `FROM scratch`, uid 1337, as Istio's `pilot` image runs it for its
/// `istiod` chart. Tagged `localhost/meshhub/istiod-e2e:dev` (built again
/// each time: seconds).
pub fn istiod_image(bin: &Path) -> Result<String, String> {
    const TAG: &str = "localhost/meshhub/istiod-e2e:dev";
    let bin = bin.to_str().expect("a UTF-8 path");
    let libs = run(Command::new("ldd").arg(bin), None, WAIT)?;
    let ctr = run(
        Command::new("buildah").args(["from", "scratch"]),
        None,
        WAIT,
    )?;
    let ctr = ctr.trim();
    let buildah = |args: &[&str]| run(Command::new("buildah").args(args), None, WAIT);
    let built = (|| {
        buildah(&["copy", ctr, bin, "/usr/local/bin/pilot-discovery"])?;
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)",
        // "/lib64/ld-linux-x86-64.so.2 (0x…)"
        for lib in libs
            .lines()
            .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')))
        {
            buildah(&["copy", ctr, lib, lib])?;
        }
        buildah(&[
            "config",
            "--entrypoint",
            r#"["/usr/local/bin/pilot-discovery"]"#,
            "--user",
            "1337:1337",
            ctr,
        ])?;
        buildah(&["commit", "-q", ctr, TAG])
    })();
    let _ = buildah(&["rm", ctr]);
    built.map(|_| TAG.to_owned())
}

/// A `kubectl port-forward`: ended when dropped.
#[derive(Debug)]
pub struct PortForward {
    child: Child,
    /// The local end.
    pub addr: SocketAddr,
}

impl Drop for PortForward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Clusters made by kind: deleted when dropped.
#[derive(Debug)]
pub struct Clusters {
    tools: Tools,
    /// kind's cluster names.
    names: Vec<String>,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    /// The machine's kind e2e lock, held until the clusters are deleted
    /// (dropped after [`Drop::drop`]): another run (another branch's CI, a
    /// developer's) waits instead of deleting these clusters as leftovers.
    _machine: std::fs::File,
}

/// Takes the machine-wide lock of the kind e2e tests
/// (`~/.cache/meshhub/kind-e2e.lock`), waiting for a run holding it.
fn machine_lock() -> Result<std::fs::File, String> {
    let dir = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(".cache/meshhub");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("kind-e2e.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if file.try_lock().is_err() {
        eprintln!(
            "kind e2e: another run holds {}; waiting for it",
            path.display()
        );
        file.lock()
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(file)
}

/// Whether podman has kind's network.
fn kind_network_exists() -> bool {
    Command::new("podman")
        .args(["network", "exists", "kind"])
        .env(
            "CONTAINERS_CONF",
            repo("deploy/kind/podman-containers.conf"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Clusters {
    /// Creates one single-node cluster per name (`<prefix><name>`), in
    /// parallel, each Ready (`kind create cluster --wait`), after deleting
    /// clusters of these names left by an earlier run; the error is kind's
    /// output. The image archive of [`Tools::image`] is loaded into each.
    pub fn create(tools: Tools, prefix: &str, names: &[&str]) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let kubeconfig = dir.path().join("kubeconfig");
        let clusters = Self {
            tools,
            names: names.iter().map(|n| format!("{prefix}{n}")).collect(),
            dir,
            kubeconfig,
            _machine: machine_lock()?,
        };
        let existing = clusters.kind(&["get", "clusters"])?;
        for leftover in existing
            .lines()
            .filter(|l| clusters.names.iter().any(|n| n == l))
        {
            eprintln!("kind e2e: deleting cluster {leftover}, left by an earlier run");
            clusters.kind(&["delete", "cluster", "--name", leftover])?;
        }
        let config = repo("deploy/kind/cluster-meshhub-node.yaml");
        let config = config.to_str().expect("a UTF-8 path");
        let create = |name: &str| {
            clusters.kind(&[
                "create",
                "cluster",
                "--name",
                name,
                "--image",
                &clusters.tools.node_image,
                "--config",
                config,
                "--wait",
                "180s",
            ])
        };
        let created: Vec<Result<String, String>> = std::thread::scope(|s| {
            // The first creates kind's network if missing: kind creates it
            // when it finds none and fails on "already exists", so clusters
            // created at once on a machine without it race. The others
            // start once it exists (or the first is done, failed or not).
            let (first, rest) = clusters.names.split_first().expect("a cluster");
            let first = s.spawn(move || create(first));
            let deadline = Instant::now() + WAIT;
            while !first.is_finished() && !kind_network_exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
            }
            let rest: Vec<_> = rest
                .iter()
                .map(|name| s.spawn(move || create(name)))
                .collect();
            std::iter::once(first)
                .chain(rest)
                .map(|h| h.join().expect("kind create"))
                .collect()
        });
        for result in created {
            result?;
        }
        clusters.load_image(names, &clusters.tools.image)?;
        Ok(clusters)
    }

    /// Copies podman's `image` into the nodes of `clusters` (`kind load
    /// image-archive` of one `podman save`: kind's `docker-image` loads from
    /// Docker only).
    pub fn load_image(&self, clusters: &[&str], image: &str) -> Result<(), String> {
        let archive = self.dir.path().join("image.tar");
        let archive = archive.to_str().expect("a UTF-8 path");
        let _ = std::fs::remove_file(archive);
        run(
            Command::new("podman").args([
                "save",
                "--format",
                "docker-archive",
                "-o",
                archive,
                image,
            ]),
            None,
            WAIT,
        )?;
        for cluster in clusters {
            self.kind(&[
                "load",
                "image-archive",
                archive,
                "--name",
                self.full(cluster),
            ])?;
        }
        let _ = std::fs::remove_file(archive);
        Ok(())
    }

    /// `kubectl port-forward` of `target`'s (e.g. `deploy/istiod`) `port`
    /// in `cluster`/`ns` to a local port, until the guard drops: reaches
    /// what a pod serves on its loopback only.
    pub fn port_forward(&self, cluster: &str, ns: &str, target: &str, port: u16) -> PortForward {
        let local = meshhub_testkit::ports::free_port();
        let child = Command::new(&self.tools.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args([
                "--context",
                &self.context(cluster),
                "-n",
                ns,
                "port-forward",
            ])
            .args(["--address", "127.0.0.1", target, &format!("{local}:{port}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl runs");
        let forward = PortForward {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], local)),
        };
        wait_for(
            &format!("kubectl port-forward {target} {local}:{port} in {cluster}"),
            Duration::from_secs(30),
            || std::net::TcpStream::connect(forward.addr).ok(),
            || self.observe(cluster, ns, ""),
        );
        forward
    }

    /// `kind <args…>` with the podman provider, this machine's
    /// containers.conf and the private kubeconfig.
    fn kind(&self, args: &[&str]) -> Result<String, String> {
        run(
            Command::new(&self.tools.kind)
                .args(args)
                .env("KIND_EXPERIMENTAL_PROVIDER", "podman")
                .env(
                    "CONTAINERS_CONF",
                    repo("deploy/kind/podman-containers.conf"),
                )
                .env("KUBECONFIG", &self.kubeconfig),
            None,
            WAIT,
        )
    }

    fn full(&self, cluster: &str) -> &str {
        self.names
            .iter()
            .find(|n| n.ends_with(&format!("-{cluster}")) || *n == cluster)
            .unwrap_or_else(|| panic!("no cluster {cluster} among {:?}", self.names))
    }

    /// The kubeconfig context of `cluster` (its short name).
    pub fn context(&self, cluster: &str) -> String {
        format!("kind-{}", self.full(cluster))
    }

    /// The image the charts run: repository and tag as the nodes hold it.
    pub fn image(&self) -> (String, String) {
        let name = &self.tools.image;
        // podman names local images localhost/<name>; so does its archive.
        let name = if name.contains('/') {
            name.clone()
        } else {
            format!("localhost/{name}")
        };
        let (repo, tag) = name.rsplit_once(':').unwrap_or((&name, "latest"));
        (repo.to_owned(), tag.to_owned())
    }

    /// The address of `cluster`'s node on the clusters' shared network.
    pub fn node_ip(&self, cluster: &str) -> String {
        let node = format!("{}-control-plane", self.full(cluster));
        container::podman(&[
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            &node,
        ])
        .trim()
        .to_owned()
    }

    /// `podman exec <cluster's node> <args…>`: its stdout.
    pub fn node_exec(&self, cluster: &str, args: &[&str]) -> Result<String, String> {
        let node = format!("{}-control-plane", self.full(cluster));
        run(
            Command::new("podman").arg("exec").arg(&node).args(args),
            None,
            WAIT,
        )
    }

    /// `kubectl --context <cluster> <args…>` (with `stdin`): stdout, or
    /// kubectl's error.
    pub fn try_kubectl(
        &self,
        cluster: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String, String> {
        run(
            Command::new(&self.tools.kubectl)
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .args(["--context", &self.context(cluster)])
                .args(args),
            stdin,
            WAIT,
        )
    }

    /// [`Clusters::try_kubectl`], which must succeed.
    pub fn kubectl(&self, cluster: &str, args: &[&str]) -> String {
        self.try_kubectl(cluster, args, None)
            .unwrap_or_else(|e| panic!("{cluster}: {e}"))
    }

    /// `kubectl apply -f -` of `yaml` in `cluster`.
    pub fn apply(&self, cluster: &str, yaml: &str) {
        self.try_kubectl(cluster, &["apply", "-f", "-"], Some(yaml))
            .unwrap_or_else(|e| panic!("{cluster}: {e}"));
    }

    /// `kubectl get <args…> -o json`, parsed.
    pub fn get_json(&self, cluster: &str, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend(args);
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl(cluster, &all)).expect("kubectl's JSON")
    }

    /// `helm --kube-context <cluster> <args…>` on the private kubeconfig.
    pub fn helm(&self, cluster: &str, args: &[&str]) -> Result<String, String> {
        run(
            Command::new(crate::helm::helm_bin())
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .args(["--kube-context", &self.context(cluster)])
                .args(args),
            None,
            WAIT,
        )
    }

    /// What the pods matching `selector` in `cluster`/`ns` are doing:
    /// `describe` and the logs of their current and previous containers.
    /// Each call is bounded by `--request-timeout` (a cluster that no
    /// longer answers must not hold the deletion of the clusters back).
    pub fn observe(&self, cluster: &str, ns: &str, selector: &str) -> String {
        let mut out = String::new();
        let list = self
            .try_kubectl(
                cluster,
                &[
                    "--request-timeout=20s",
                    "-n",
                    ns,
                    "get",
                    "pods",
                    "-o",
                    "wide",
                ],
                None,
            )
            .unwrap_or_else(|e| e);
        out.push_str(&format!("--- {cluster}: pods in {ns}:\n{list}\n"));
        let described = self
            .try_kubectl(
                cluster,
                &[
                    "--request-timeout=20s",
                    "-n",
                    ns,
                    "describe",
                    "pods",
                    "-l",
                    selector,
                ],
                None,
            )
            .unwrap_or_else(|e| e);
        out.push_str(&format!(
            "--- {cluster}: describe pods -l {selector}:\n{described}\n"
        ));
        for previous in ["false", "true"] {
            let logs = self
                .try_kubectl(
                    cluster,
                    &[
                        "--request-timeout=20s",
                        "-n",
                        ns,
                        "logs",
                        "-l",
                        selector,
                        "--tail=40",
                        &format!("--previous={previous}"),
                    ],
                    None,
                )
                .unwrap_or_else(|e| e);
            out.push_str(&format!(
                "--- {cluster}: logs -l {selector} (previous: {previous}):\n{logs}\n"
            ));
        }
        out
    }

    /// Waits until a pod matching `selector` in `cluster`/`ns`, other than
    /// those named in `not`, is Ready and not being deleted: that pod.
    pub fn ready_pod(&self, cluster: &str, ns: &str, selector: &str, not: &[&str]) -> Value {
        wait_for(
            &format!("a Ready pod -l {selector} in {cluster}/{ns} (not {not:?})"),
            WAIT,
            || {
                let pods = self.get_json(cluster, &["pods", "-n", ns, "-l", selector]);
                pods["items"]
                    .as_array()?
                    .iter()
                    .find(|p| {
                        let name = p["metadata"]["name"].as_str().unwrap_or_default();
                        !not.contains(&name)
                            && p["metadata"]["deletionTimestamp"].is_null()
                            && p["status"]["conditions"].as_array().is_some_and(|cs| {
                                cs.iter()
                                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
                            })
                    })
                    .cloned()
            },
            || self.observe(cluster, ns, selector),
        )
    }

    /// The process of a pod's (first) container as its node's kernel holds
    /// it: `/proc/<pid>/status` and `/proc/<pid>/mountinfo`, the pid found
    /// by containerd from the pod's status.
    pub fn container_process(&self, cluster: &str, pod: &Value) -> (String, String) {
        let id = pod["status"]["containerStatuses"][0]["containerID"]
            .as_str()
            .and_then(|id| id.strip_prefix("containerd://"))
            .unwrap_or_else(|| panic!("no containerd container in {pod}"))
            .to_owned();
        let tasks = self
            .node_exec(cluster, &["ctr", "-n", "k8s.io", "task", "ls"])
            .unwrap_or_else(|e| panic!("{cluster}: {e}"));
        let pid = tasks
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.first() == Some(&id.as_str()))
            .and_then(|f| f.get(1).map(|p| (*p).to_owned()))
            .unwrap_or_else(|| panic!("{cluster}: no containerd task {id}:\n{tasks}"));
        let read = |file: &str| {
            self.node_exec(cluster, &["cat", &format!("/proc/{pid}/{file}")])
                .unwrap_or_else(|e| panic!("{cluster}: {e}"))
        };
        (read("status"), read("mountinfo"))
    }

    /// Memory and CPU of the clusters' node containers (`podman stats`).
    pub fn stats(&self) -> String {
        let mut args = vec![
            "stats",
            "--no-stream",
            "--format",
            "{{.Name}} {{.MemUsage}} {{.CPUPerc}}",
        ];
        let nodes: Vec<String> = self
            .names
            .iter()
            .map(|n| format!("{n}-control-plane"))
            .collect();
        args.extend(nodes.iter().map(String::as_str));
        run(Command::new("podman").args(&args), None, WAIT).unwrap_or_else(|e| e)
    }
}

impl Drop for Clusters {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for name in &self.names {
                let short = name.rsplit('-').next().unwrap_or(name);
                eprintln!(
                    "{}",
                    self.observe(short, "meshhub", "app.kubernetes.io/instance")
                );
            }
        }
        for name in &self.names {
            if let Err(e) = self.kind(&["delete", "cluster", "--name", name]) {
                eprintln!("kind e2e: could not delete cluster {name}: {e}");
            }
        }
    }
}

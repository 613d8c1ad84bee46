//! Process-level end-to-end harness: builds the real binaries (`meshhub`,
//! `meshhubctl`, `meshhub-sink-agent`) once, starts them on 127.0.0.1 with
//! temporary directories, reads the addresses they bound from their JSON
//! start logs, and kills every process it started when its guard drops.
//! A hub binds kernel-chosen ports; an agent, which may be restarted on its
//! ports, gets ports no one else is handed
//! ([`meshhub_testkit::ports::free_port`]). Every program started on ports
//! chosen for it is started again on new ones when it finds one taken
//! ([`PortAttempts`]).
//!
//! Synchronisation is by polling with a deadline (`meshhub_testkit`'s
//! `eventually_blocking`), never by sleeping for a guessed time. The tests
//! are one binary, `tests/it`; each takes its group's [`turn`] first.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

use meshhub_testkit::eventually_blocking;
use meshhub_testkit::http::get_blocking;
use meshhub_testkit::ports::free_addr;
use serde_json::Value;

pub mod browser;
pub mod chaos;
pub mod container;
pub mod gateway_api;
pub mod helm;
pub mod inproc;
pub mod istio;
pub mod kind;
pub mod kube;
pub mod mcs;
pub mod parity;
pub mod pod;
pub mod ports;
pub mod prometheus;
pub mod promql;
pub mod rogue;
pub mod standin;
pub mod turn;
pub mod upstream;
pub mod watcher;
pub mod yaml;

#[cfg(test)]
use ports::port_taken;
pub use ports::{PORT_ATTEMPTS, PortAttempts, listens_on};
pub use turn::{Turn, turn};
use yaml::{cluster, files_hub};

/// Where the binaries are: `MESHHUB_E2E_BIN_DIR` if set (prebuilt, e.g.
/// release binaries), else `target/<profile>/` beside the test executable.
/// There they are used as they are when they are newer than every source
/// file of the crates they are built from (`cargo test --workspace` has just
/// built them, with the same features as the rest of the run); otherwise
/// they are built once per test process with the cargo running the tests.
/// (Building unconditionally would flip dependency features between the
/// test build and a plain `cargo build` and recompile half the tree on every
/// run.)
pub fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("MESHHUB_E2E_BIN_DIR") {
            return PathBuf::from(dir);
        }
        // Tests run from target/<profile>/deps/<test>-<hash>.
        let exe = std::env::current_exe().expect("current exe");
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>")
            .to_owned();
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        if !binaries_fresh(&dir, &workspace) {
            let mut cmd = Command::new(env!("CARGO"));
            cmd.current_dir(&workspace).args([
                "build",
                "--bins",
                "-p",
                "meshhub",
                "-p",
                "meshhubctl",
                "-p",
                "meshhub-sink-agent",
            ]);
            if dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            let status = cmd.status().expect("cargo build runs");
            assert!(status.success(), "cargo build of the binaries failed");
        }
        for bin in BINARIES {
            assert!(
                dir.join(bin).is_file(),
                "{} missing after the build",
                dir.join(bin).display()
            );
        }
        dir
    })
}

const BINARIES: [&str; 3] = ["meshhub", "meshhubctl", "meshhub-sink-agent"];

/// Whether every binary in `dir` is newer than every input it is built
/// from (the crates' sources, manifests, build scripts, schemas, the lock).
fn binaries_fresh(dir: &Path, workspace: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(oldest_bin) = BINARIES
        .iter()
        .map(|b| modified(&dir.join(b)))
        .collect::<Option<Vec<_>>>()
        .and_then(|v| v.into_iter().min())
    else {
        return false;
    };
    let mut newest_input = None;
    let mut stack: Vec<PathBuf> = [
        "hub",
        "ctl",
        "sink-agent",
        "api",
        "runtime",
        "kube",
        "validate",
        "mcp",
        "proto",
    ]
    .iter()
    .map(|c| workspace.join(c))
    .chain([workspace.join("Cargo.lock"), workspace.join("Cargo.toml")])
    .collect();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            if let Ok(entries) = std::fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        } else if let Some(m) = modified(&p) {
            newest_input = newest_input.max(Some(m));
        }
    }
    newest_input.is_some_and(|n| oldest_bin > n)
}

/// Runs `e2e/peers/<script> <args…>` (which builds a real peer on first use
/// and caches it outside the repository) and returns what it printed: the
/// path of the peer. Panics naming the script when it fails; `needed_for`
/// says which tests need it.
pub fn peer_script(script: &str, args: &[&str], needed_for: &str) -> PathBuf {
    try_peer_script(script, args).unwrap_or_else(|why| panic!("{why}: {needed_for}; see README.md"))
}

/// [`peer_script`] for tests that skip when a peer can't be had: what it
/// printed, or why not (its stderr goes to the test's stderr either way).
pub fn try_peer_script(script: &str, args: &[&str]) -> Result<PathBuf, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("peers")
        .join(script);
    let out = Command::new("bash")
        .arg(&path)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("can't run {}: {e}", path.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {} failed ({})",
            path.display(),
            args.join(" "),
            out.status
        ));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// A started process: killed (SIGKILL) and reaped when dropped. Its stdout
/// and stderr go to files beside each other in the test's directory.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Option<Child>,
    stdout: PathBuf,
    stderr: PathBuf,
    /// The lengths of the log files when it started (they are appended to
    /// across restarts): where its own output begins.
    since: [u64; 2],
}

impl Proc {
    /// Starts `bin` (a file of [`bin_dir`]) with `args`; logs under `logs`
    /// as `<name>.out` / `<name>.err` (appended, so restarts keep history).
    pub fn spawn(name: &str, bin: &str, args: &[String], logs: &Path) -> Self {
        Self::spawn_program(
            name,
            &bin_dir().join(bin),
            args,
            &[("MESHHUB_LOG_FORMAT", "json"), ("MESHHUB_LOG", "info")],
            logs,
        )
    }

    /// Starts any `program` with `args` and extra environment `env`; logs
    /// as [`Proc::spawn`] does.
    pub fn spawn_program(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
        logs: &Path,
    ) -> Self {
        let stdout = logs.join(format!("{name}.out"));
        let stderr = logs.join(format!("{name}.err"));
        let open = |p: &Path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .expect("log file")
        };
        let len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let since = [len(&stdout), len(&stderr)];
        let child = Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(open(&stdout))
            .stderr(open(&stderr))
            .spawn()
            .unwrap_or_else(|e| panic!("can't start {}: {e}", program.display()));
        Self {
            name: name.to_owned(),
            child: Some(child),
            stdout,
            stderr,
            since,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Everything it wrote to stdout so far.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// Everything it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// What this run of it wrote (stdout, then stderr), without what
    /// earlier runs left in the same log files.
    pub fn output(&self) -> String {
        let read = |p: &Path, since: u64| {
            let bytes = std::fs::read(p).unwrap_or_default();
            let from = usize::try_from(since).map_or(bytes.len(), |s| s.min(bytes.len()));
            String::from_utf8_lossy(&bytes[from..]).into_owned()
        };
        format!(
            "{}{}",
            read(&self.stdout, self.since[0]),
            read(&self.stderr, self.since[1])
        )
    }

    /// Whether this process itself listens on TCP `port` ([`listens_on`]).
    pub fn listens_on(&self, port: u16) -> bool {
        listens_on(self.pid(), port)
    }

    /// The fields of the first JSON log line (stdout or stderr) whose
    /// message is `message`, from the `skip`-th such line on.
    pub fn log_fields(&self, message: &str, skip: usize) -> Option<Value> {
        let text = format!("{}\n{}", self.stdout(), self.stderr());
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["fields"]["message"] == message)
            .nth(skip)
            .map(|v| v["fields"].clone())
    }

    /// Waits for the `skip`-th log line `message` (panicking if the process
    /// exits first) and returns its fields.
    pub fn wait_log(&mut self, message: &str, skip: usize) -> Value {
        self.wait_log_or_exit(message, skip)
            .unwrap_or_else(|status| {
                panic!(
                    "{} exited ({status}) before logging {message:?}\nstdout:\n{}\nstderr:\n{}",
                    self.name,
                    self.stdout(),
                    self.stderr()
                )
            })
    }

    /// Waits for the `skip`-th log line `message` and returns its fields,
    /// or how the process exited when it exits first.
    pub fn wait_log_or_exit(
        &mut self,
        message: &str,
        skip: usize,
    ) -> Result<Value, std::process::ExitStatus> {
        eventually_blocking(&format!("{}: log {message:?}", self.name), || {
            if let Some(f) = self.log_fields(message, skip) {
                return Some(Ok(f));
            }
            // It may have logged just before it exited.
            let status = self.exited()?;
            Some(self.log_fields(message, skip).ok_or(status))
        })
    }

    /// Whether it has exited (and how), without waiting.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL and reap: a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends a signal (`HUP`, `TERM`) with `kill(1)`.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill(1) runs");
        assert!(status.success(), "kill -{sig} {}", self.pid());
    }

    /// Waits for the process to exit by itself; its exit status.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let name = self.name.clone();
        let child = self.child.as_mut().expect("running");
        let status = eventually_blocking(&format!("{name} to exit"), || {
            child.try_wait().ok().flatten()
        });
        self.child = None;
        status
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn addr(fields: &Value, key: &str) -> SocketAddr {
    fields[key]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no address {key} in {fields}"))
}

/// A test's temporary directory whose processes' logs are kept
/// ([`keep_logs`], under the label) when the test panics, removed
/// otherwise.
pub struct KeepLogsOnPanic(pub Option<tempfile::TempDir>, pub &'static str);

impl KeepLogsOnPanic {
    /// A fresh temporary directory for the test `label`.
    pub fn new(label: &'static str) -> Self {
        Self(
            Some(tempfile::tempdir().expect("a temporary directory")),
            label,
        )
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        self.0.as_ref().expect("not dropped").path()
    }
}

impl Drop for KeepLogsOnPanic {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take()
            && std::thread::panicking()
        {
            keep_logs(&dir.keep(), self.1);
        }
    }
}

/// A running hub.
#[derive(Debug)]
pub struct HubProc {
    /// The process.
    pub proc: Proc,
    /// Its gRPC address.
    pub grpc: SocketAddr,
    /// Its admin address.
    pub admin: SocketAddr,
}

impl HubProc {
    /// Starts `meshhub --config <config>` on kernel-chosen ports and waits
    /// until it is ready.
    pub fn start(name: &str, config: &Path, logs: &Path) -> Self {
        Self::start_with(name, config, logs, &[])
    }

    /// [`HubProc::start`] with extra flags (`--admin-token-file`, ...).
    pub fn start_with(name: &str, config: &Path, logs: &Path, extra: &[String]) -> Self {
        let mut args = [
            "--config",
            &config.display().to_string(),
            "--grpc-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
            "--shutdown-grace",
            "2s",
        ]
        .map(str::to_owned)
        .to_vec();
        args.extend_from_slice(extra);
        // Counted before the start: a fast start would otherwise be
        // counted as an earlier run and waited for again.
        let runs = count_started(logs, name, "meshhub started");
        let mut proc = Proc::spawn(name, "meshhub", &args, logs);
        let fields = proc.wait_log("meshhub started", runs);
        let hub = Self {
            grpc: addr(&fields, "grpc.addr"),
            admin: addr(&fields, "admin.addr"),
            proc,
        };
        // The last answer is kept so that a hub that never gets ready
        // says why (its /readyz body names what it waits for).
        let mut last = None;
        let deadline = Instant::now() + meshhub_testkit::DEADLINE;
        loop {
            match get_blocking(hub.admin, "/readyz") {
                Some((200, _)) => break,
                answer => last = answer.or(last),
            }
            if Instant::now() >= deadline {
                let log: String = ["out", "err"]
                    .iter()
                    .filter_map(|ext| {
                        std::fs::read_to_string(logs.join(format!("{name}.{ext}"))).ok()
                    })
                    .collect();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                panic!(
                    "hub {name} not ready after {:?}; /readyz last answered {last:?}; \
                     the end of its log:\n{}",
                    meshhub_testkit::DEADLINE,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        hub
    }

    /// `GET /status`, parsed.
    pub fn status(&self) -> Value {
        let (code, body) =
            eventually_blocking("hub /status", || get_blocking(self.admin, "/status"));
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).expect("status JSON")
    }
}

/// How many JSON log lines `message` the process `name` wrote so far to
/// its logs under `logs` (earlier runs: the files are appended to).
fn count_started(logs: &Path, name: &str, message: &str) -> usize {
    ["out", "err"]
        .iter()
        .map(|ext| std::fs::read_to_string(logs.join(format!("{name}.{ext}"))).unwrap_or_default())
        .map(|text| {
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|v| v["fields"]["message"] == message)
                .count()
        })
        .sum()
}

/// A running sink agent (push mode).
#[derive(Debug)]
pub struct AgentProc {
    /// The process.
    pub proc: Proc,
    /// The cluster it serves.
    pub cluster: String,
    /// Its data directory.
    pub data: PathBuf,
    /// Where the hub pushes (`ResourceSink`).
    pub sink: SocketAddr,
    /// Where local consumers dial (`ResourceSource`, ADS).
    pub grpc: SocketAddr,
    /// Its admin address.
    pub admin: SocketAddr,
    /// When the process was started.
    pub started: Instant,
    /// The extra flags it was started with (kept across restarts).
    pub extra: Vec<String>,
}

impl AgentProc {
    /// Starts an agent for `cluster` with its data under `dir`; `ports`
    /// (sink, grpc, admin) are reused on a restart, chosen here otherwise
    /// ([`free_addr`]: ports the kernel does not hand to anyone else while
    /// the agent is down, so that it can restart on them).
    pub fn start(
        cluster: &str,
        dir: &Path,
        logs: &Path,
        ports: Option<(SocketAddr, SocketAddr, SocketAddr)>,
    ) -> Self {
        Self::start_with(cluster, dir, logs, ports, &[])
    }

    /// [`AgentProc::start`] with extra flags (`--apply`, ...).
    pub fn start_with(
        cluster: &str,
        dir: &Path,
        logs: &Path,
        ports: Option<(SocketAddr, SocketAddr, SocketAddr)>,
        extra: &[String],
    ) -> Self {
        let data = dir.join(format!("agent-{cluster}"));
        let name = format!("agent-{cluster}");
        let mut attempts = match ports {
            Some(_) => PortAttempts::fixed(&name, "a restart keeps its addresses"),
            None => PortAttempts::new(&name),
        };
        loop {
            let (sink, grpc, admin) =
                ports.unwrap_or_else(|| (free_addr(), free_addr(), free_addr()));
            let mut args = vec![
                "--cluster".to_owned(),
                cluster.to_owned(),
                "--data-dir".to_owned(),
                data.display().to_string(),
                "--sink-addr".to_owned(),
                sink.to_string(),
                "--grpc-addr".to_owned(),
                grpc.to_string(),
                "--admin-addr".to_owned(),
                admin.to_string(),
                "--shutdown-grace".to_owned(),
                "2s".to_owned(),
            ];
            args.extend_from_slice(extra);
            let started = Instant::now();
            let runs = count_started(logs, &name, "meshhub-sink-agent started");
            let mut proc = Proc::spawn(&name, "meshhub-sink-agent", &args, logs);
            match proc.wait_log_or_exit("meshhub-sink-agent started", runs) {
                Ok(fields) => {
                    return Self {
                        cluster: cluster.to_owned(),
                        data,
                        sink: addr(&fields, "sink.addr"),
                        grpc: addr(&fields, "grpc.addr"),
                        admin: addr(&fields, "admin.addr"),
                        started,
                        extra: extra.to_vec(),
                        proc,
                    };
                }
                Err(status) => attempts.exited(&status, &proc.output()),
            }
        }
    }

    /// Kills it (SIGKILL) and starts it again on the same ports and data.
    pub fn crash_and_restart(&mut self, dir: &Path, logs: &Path) {
        self.proc.kill();
        let ports = (self.sink, self.grpc, self.admin);
        let extra = std::mem::take(&mut self.extra);
        *self = Self::start_with(&self.cluster.clone(), dir, logs, Some(ports), &extra);
    }

    /// `GET /status`, parsed.
    pub fn status(&self) -> Value {
        let (code, body) =
            eventually_blocking("agent /status", || get_blocking(self.admin, "/status"));
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).expect("status JSON")
    }

    /// The version the agent serves locally for `collection`.
    pub fn served_version(&self, collection: &str) -> Option<String> {
        self.status()["store"]["collections"][collection]["served_version"]
            .as_str()
            .map(str::to_owned)
    }
}

/// `meshhubctl <args>` to completion (bounded by the deadline): status,
/// stdout, stderr.
pub fn meshhubctl(args: &[&str]) -> (std::process::ExitStatus, String, String) {
    container::run_bounded(bin_dir().join("meshhubctl"), args)
}

/// `meshhubctl watch --once` of the virtual services served at `server`
/// (as `cluster`, if given), printing JSON: status, stdout, stderr.
pub fn watch_once(
    server: SocketAddr,
    cluster: Option<&str>,
) -> (std::process::ExitStatus, String, String) {
    let server = format!("http://{server}");
    let mut args = vec![
        "watch",
        "--server",
        &server,
        "-c",
        meshhub_testkit::objects::VS,
        "-o",
        "json",
        "--once",
        "--connect-timeout",
        "5s",
    ];
    args.extend(cluster.iter().flat_map(|c| ["--cluster", c]));
    meshhubctl(&args)
}

/// The hub's configuration for two clusters whose agents listen at
/// `east` and `west`: both get namespace `bookinfo`; objects may name one
/// with `meshhub.io/clusters`. Reconnects are quick (100 ms → 1 s) so that
/// restarts converge fast.
pub fn hub_config(objects: &Path, east: SocketAddr, west: SocketAddr) -> String {
    let bookinfo = "    namespaces: [bookinfo]\n";
    let clusters = cluster("east", bookinfo, format!("http://{east}"), "")
        + &cluster("west", bookinfo, format!("http://{west}"), "");
    files_hub(objects.display(), &clusters, "")
}

/// Moves a failed test's directory `dir` (its processes' logs under
/// `logs/`) where it survives the test, `meshhub-<label>-<ms>` in the
/// system's temporary directory, and says where.
pub fn keep_logs(dir: &Path, label: &str) {
    let keep = std::env::temp_dir().join(format!(
        "meshhub-{label}-{}",
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
    ));
    let _ = std::fs::rename(dir, &keep);
    eprintln!(
        "{label}: processes' logs kept in {}",
        keep.join("logs").display()
    );
}

/// The configuration of one hub replica (`identity`) of a pair sharing a
/// Lease in namespace `meshhub` of the API server of `kubeconfig`: files
/// from `objects`, cluster `east` (namespace bookinfo) with its agent at
/// `agent`, a 3 s lease renewed every 500 ms so that takeovers are quick.
pub fn replica_config(
    objects: &Path,
    agent: SocketAddr,
    identity: &str,
    kubeconfig: &Path,
) -> String {
    let east = cluster(
        "east",
        "    namespaces: [bookinfo]\n",
        format!("http://{agent}"),
        "",
    );
    let leader = format!(
        "leaderElection:\n  enabled: true\n  namespace: meshhub\n  identity: {identity}\n  leaseDuration: 3s\n  renewDeadline: 2s\n  retryPeriod: 500ms\n  kubeconfig: {}\n",
        kubeconfig.display()
    );
    files_hub(objects.display(), &east, &leader)
}

/// A temporary tree for hub and agent processes.
pub struct ProcTree {
    /// The tree (removed when dropped: keep it to the end of the test).
    pub dir: tempfile::TempDir,
    /// The processes' logs.
    pub logs: PathBuf,
    /// A file source's directory, holding `reviews.yaml`.
    pub objects: PathBuf,
}

/// A [`ProcTree`] whose file source holds the `reviews` route to `host`.
pub fn proc_tree(host: &str) -> ProcTree {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let logs = dir.path().join("logs");
    let objects = dir.path().join("objects");
    for d in [&logs, &objects] {
        std::fs::create_dir_all(d).expect("the tree");
    }
    meshhub_testkit::fixtures::write_atomic(
        &objects.join("reviews.yaml"),
        &meshhub_testkit::objects::vs("reviews", host),
    );
    ProcTree { dir, logs, objects }
}

/// The hub's remote row for `cluster` from `/status`.
pub fn remote<'a>(status: &'a Value, cluster: &str) -> &'a Value {
    status["remotes"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["cluster"] == cluster))
        .unwrap_or_else(|| panic!("no remote {cluster} in {}", status["remotes"]))
}

/// Sharded replicas `hubs`: waits until each holds `each` shards, then
/// returns, per cluster of `clusters`, the identity of the replica that
/// dials it (a live stream from that replica).
pub fn shard_dialers(hubs: &[HubProc], each: usize, clusters: &[&str]) -> Vec<String> {
    meshhub_testkit::eventually_blocking(&format!("the shards shared out, {each} each"), || {
        hubs.iter()
            .all(|h| {
                h.status()["leader"]["shards"]["held"]
                    .as_array()
                    .map(Vec::len)
                    == Some(each)
            })
            .then_some(())
    });
    clusters
        .iter()
        .map(|c| {
            meshhub_testkit::eventually_blocking(&format!("{c} dialed"), || {
                hubs.iter().find_map(|h| {
                    let s = h.status();
                    let by = remote(&s, c)["dialed_by"].as_str()?.to_owned();
                    (remote(&s, c)["connected"] == true && s["leader"]["identity"] == by.as_str())
                        .then_some(by)
                })
            })
        })
        .collect()
}

/// The version the hub's group `cluster` has of `collection`.
pub fn group_version(status: &Value, cluster: &str, collection: &str) -> Option<String> {
    status["groups"]
        .as_array()?
        .iter()
        .find(|g| g["name"] == cluster)?["collections"][collection]["version"]
        .as_str()
        .map(str::to_owned)
}

/// Whether the hub's dialer of `cluster` has its current version of
/// `collection` ACKed (SYNCED, and the ACKed version is the group's).
pub fn synced(status: &Value, cluster: &str, collection: &str) -> bool {
    let c = &remote(status, cluster)["collections"][collection];
    c["state"] == "SYNCED"
        && group_version(status, cluster, collection).as_deref() == c["acked"]["version"].as_str()
}

#[cfg(test)]
mod tests;

//! The soak's processes and links, how they start and restart, and the
//! final checks.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use meshhub_testkit::http::get_blocking;
use meshhub_testkit::objects::VS;

use super::generator::Generator;
use super::oracle::{View, difference};
use super::proxy::{FaultProxy, Link};
use crate::yaml::{cluster, files_hub};
use crate::{AgentProc, HubProc, Proc, watch_once};

/// The clusters, each with one agent.
pub const CLUSTERS: [&str; 3] = ["east", "west", "north"];

/// Keepalive and `sendTimeout` of every gRPC port, short so that stalls
/// outlast them; stream limits lifted for the consumers' reconnects.
const LIMITS: &str = "limits:\n  keepaliveInterval: 1s\n  keepaliveTimeout: 1s\n  sendTimeout: 2s\n  newStreamsPerSecond: 10000\n  newStreamsBurst: 10000\n  connectionStreamsPerSecond: 1000\n  connectionStreamsBurst: 1000\n";

/// Where a consumer subscribes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// The hub, as a consumer of cluster `CLUSTERS[i]`.
    Hub(usize),
    /// Agent `i`'s re-serve port.
    Agent(usize),
}

/// A `meshhubctl watch` consumer behind its own link.
#[derive(Debug)]
pub struct Consumer {
    /// Its name (log file stem).
    pub name: String,
    /// The process.
    pub proc: Proc,
    /// Its link to the server.
    pub link: Link,
    /// Which server.
    pub server: Server,
    /// SIGSTOPped (not reading).
    pub stopped: bool,
}

/// The whole soak.
pub struct Soak {
    /// Temporary directory (kept on failure).
    pub dir: tempfile::TempDir,
    /// Processes' logs.
    pub logs: PathBuf,
    pub(crate) config: PathBuf,
    /// The proxy all links run on.
    pub proxy: FaultProxy,
    /// The hub (`None` while it is down).
    pub hub: Option<HubProc>,
    /// The agents, by cluster index.
    pub agents: Vec<AgentProc>,
    /// The hub's push link to each agent.
    pub pushes: Vec<Link>,
    /// The consumers.
    pub consumers: Vec<Consumer>,
    /// The generator and model.
    pub generator: Generator,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Consumer processes started again after they exited.
    pub consumer_restarts: u64,
}

/// What a soak run measured.
#[derive(Debug, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// How long the fault phase ran.
    pub ran: Duration,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Changes applied, by kind.
    pub changes: BTreeMap<&'static str, u64>,
    /// Complete responses the consumers received (printed).
    pub consumer_updates: u64,
    /// Responses the hub sent (its `meshhub_mcp_responses_total`, this
    /// process's life only: the hub restarts).
    pub hub_responses_last_life: u64,
    /// From healing the last fault to every view equal.
    pub convergence: Duration,
    /// The hub's resident memory at the end (bytes).
    pub hub_rss: u64,
    /// Objects per cluster at the end.
    pub final_objects: BTreeMap<String, usize>,
}

impl Soak {
    /// Starts three agents, the hub dialing them through links, and two
    /// consumers per cluster (one on the hub, one on the agent), each
    /// through its own link; `objects` initial objects.
    pub fn start(seed: u64, objects: usize) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = dir.path().join("logs");
        let files = dir.path().join("objects");
        let etc = dir.path().join("etc");
        for d in [&logs, &files, &etc] {
            std::fs::create_dir_all(d).expect("dirs");
        }
        let mut generator = Generator::new(seed, files.clone(), &CLUSTERS);
        generator.seed_objects(objects);
        let agent_config = etc.join("agent.yaml");
        std::fs::write(&agent_config, LIMITS).expect("agent config");
        let extra = ["--config".to_owned(), agent_config.display().to_string()];
        let agents: Vec<AgentProc> = CLUSTERS
            .iter()
            .map(|c| AgentProc::start_with(c, dir.path(), &logs, None, &extra))
            .collect();
        let proxy = FaultProxy::new();
        let pushes: Vec<Link> = agents
            .iter()
            .map(|a| proxy.link(&format!("push-{}", a.cluster), a.sink))
            .collect();
        let config = etc.join("meshhub.yaml");
        std::fs::write(&config, hub_config(&files, &pushes)).expect("hub config");
        let hub = HubProc::start("hub", &config, &logs);
        let mut soak = Self {
            dir,
            logs,
            config,
            proxy,
            hub: Some(hub),
            agents,
            pushes,
            consumers: Vec::new(),
            generator,
            faults: BTreeMap::new(),
            consumer_restarts: 0,
        };
        for i in 0..CLUSTERS.len() {
            soak.add_consumer(Server::Hub(i));
            soak.add_consumer(Server::Agent(i));
        }
        soak
    }

    /// The running hub.
    pub fn hub(&self) -> &HubProc {
        self.hub.as_ref().expect("hub running")
    }

    fn upstream(&self, server: Server) -> std::net::SocketAddr {
        match server {
            Server::Hub(_) => self.hub().grpc,
            Server::Agent(i) => self.agents[i].grpc,
        }
    }

    fn add_consumer(&mut self, server: Server) {
        let name = match server {
            Server::Hub(i) => format!("watch-hub-{}", CLUSTERS[i]),
            Server::Agent(i) => format!("watch-agent-{}", CLUSTERS[i]),
        };
        let link = self.proxy.link(&name, self.upstream(server));
        let proc = spawn_consumer(&name, &link, server, &self.logs);
        self.consumers.push(Consumer {
            name,
            proc,
            link,
            server,
            stopped: false,
        });
    }

    /// Starts again every consumer that exited (a `meshhubctl watch` that
    /// never connected gives up).
    pub fn revive_consumers(&mut self) {
        for c in &mut self.consumers {
            if c.proc.exited().is_some() {
                c.proc = spawn_consumer(&c.name, &c.link, c.server, &self.logs);
                self.consumer_restarts += 1;
            }
        }
    }

    /// SIGKILLs the hub and starts it again (new ports: the consumers'
    /// links follow).
    pub fn restart_hub(&mut self) {
        if let Some(mut hub) = self.hub.take() {
            hub.proc.kill();
        }
        self.start_hub();
    }

    pub(crate) fn start_hub(&mut self) {
        let hub = HubProc::start("hub", &self.config, &self.logs);
        for c in &self.consumers {
            if matches!(c.server, Server::Hub(_)) {
                c.link.set_upstream(hub.grpc);
            }
        }
        self.hub = Some(hub);
    }

    /// SIGKILLs agent `i` and starts it again on its ports and data.
    pub fn restart_agent(&mut self, i: usize) {
        let dir = self.dir.path().to_owned();
        self.agents[i].crash_and_restart(&dir, &self.logs);
    }

    /// Heals every link, wakes every consumer.
    pub fn heal_all(&mut self) {
        for l in &self.pushes {
            l.heal();
        }
        for c in &mut self.consumers {
            c.link.heal();
            if c.stopped {
                c.proc.signal("CONT");
                c.stopped = false;
            }
        }
    }

    /// The hub's snapshot for cluster `i`, subscribing directly.
    pub fn hub_view(&self, i: usize) -> Option<View> {
        once_view(self.hub().grpc, Some(CLUSTERS[i]))
    }

    /// What agent `i` serves, subscribing directly.
    pub fn agent_view(&self, i: usize) -> Option<View> {
        once_view(self.agents[i].grpc, None)
    }

    /// `None` when every view equals the hub's (which equals the model)
    /// for every cluster; else what differs.
    pub fn divergence(&self) -> Option<String> {
        for (i, cluster) in CLUSTERS.iter().enumerate() {
            let Some(hub) = self.hub_view(i) else {
                return Some(format!("hub: no view of {cluster}"));
            };
            let want = self.generator.expected(cluster);
            if hub.hosts() != want {
                return Some(format!(
                    "hub {cluster}: {}",
                    difference(&want, &hub.hosts())
                ));
            }
            let Some(agent) = self.agent_view(i) else {
                return Some(format!("agent {cluster}: no view"));
            };
            if agent.digest() != hub.digest() {
                return Some(format!(
                    "agent {cluster} {} != hub {}: {}",
                    agent.digest(),
                    hub.digest(),
                    difference(&hub.hosts(), &agent.hosts())
                ));
            }
            for c in &self.consumers {
                let (Server::Hub(j) | Server::Agent(j)) = c.server;
                if j != i {
                    continue;
                }
                let view = View::last_of(&c.proc.stdout(), VS).unwrap_or_default();
                if view.digest() != hub.digest() {
                    return Some(format!(
                        "{} {} != hub {}: {}",
                        c.name,
                        view.digest(),
                        hub.digest(),
                        difference(&hub.hosts(), &view.hosts())
                    ));
                }
            }
        }
        None
    }

    /// Waits until [`Soak::divergence`] is `None`, within `deadline`; how
    /// long it took, to the end of the check that found every view equal
    /// (an upper bound: one check runs nine `meshhubctl` processes).
    /// Panics with the last difference.
    pub fn converge(&mut self, deadline: Duration) -> Duration {
        let start = Instant::now();
        let mut last = String::new();
        let mut reported = Duration::ZERO;
        while start.elapsed() < deadline {
            self.revive_consumers();
            let check = Instant::now();
            match self.divergence() {
                None => {
                    eprintln!(
                        "chaos: converged; the last check (started {:?} after the heal) took {:?}",
                        check - start,
                        check.elapsed()
                    );
                    return start.elapsed();
                }
                Some(d) => last = d,
            }
            // What is still behind, every 10 s: who converges slowest.
            if start.elapsed() >= reported {
                eprintln!("chaos: converging, {:?}: {last}", start.elapsed());
                reported += Duration::from_secs(10);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("no convergence within {deadline:?}: {last}");
    }

    /// The sum of a counter over its label sets in the hub's `/metrics`.
    pub fn hub_counter(&self, name: &str) -> u64 {
        let (_, text) = get_blocking(self.hub().admin, "/metrics").unwrap_or_default();
        counter(&text, name)
    }

    /// Lines mentioning a panic in any process's log.
    pub fn panics(&self) -> Vec<String> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&self.logs).expect("logs").flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            for line in text.lines().filter(|l| l.contains("panicked")) {
                found.push(format!("{}: {line}", entry.file_name().to_string_lossy()));
            }
        }
        found
    }

    /// Complete responses printed by all consumers.
    pub fn consumer_updates(&self) -> u64 {
        let header = format!("# collection {VS} version ");
        self.consumers
            .iter()
            .map(|c| {
                c.proc
                    .stdout()
                    .lines()
                    .filter(|l| l.starts_with(&header))
                    .count() as u64
            })
            .sum()
    }

    /// Moves the logs somewhere they survive the test, and says where.
    pub fn keep_logs(&self) {
        crate::keep_logs(self.dir.path(), "chaos");
    }
}

impl Drop for Soak {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.heal_all();
            self.keep_logs();
        }
    }
}

/// The sum of counter `name` over its label sets in Prometheus text.
pub fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn hub_config(files: &Path, pushes: &[Link]) -> String {
    let clusters: String = CLUSTERS
        .iter()
        .zip(pushes)
        .map(|(name, link)| {
            cluster(
                name,
                "    namespaces: [bookinfo]\n",
                format!("http://{}", link.addr()),
                "",
            )
        })
        .collect();
    files_hub(files.display(), &clusters, LIMITS)
}

fn spawn_consumer(name: &str, link: &Link, server: Server, logs: &Path) -> Proc {
    let mut args = vec![
        "watch".to_owned(),
        "--server".to_owned(),
        format!("http://{}", link.addr()),
        "-c".to_owned(),
        VS.to_owned(),
        "-o".to_owned(),
        "json".to_owned(),
        "--connect-timeout".to_owned(),
        "5s".to_owned(),
    ];
    if let Server::Hub(i) = server {
        args.extend(["--cluster".to_owned(), CLUSTERS[i].to_owned()]);
    }
    Proc::spawn(name, "meshhubctl", &args, logs)
}

/// `meshhubctl watch --once` directly on `addr`.
fn once_view(addr: std::net::SocketAddr, cluster: Option<&str>) -> Option<View> {
    let (status, out, _) = watch_once(addr, cluster);
    status.success().then(|| View::last_of(&out, VS)).flatten()
}

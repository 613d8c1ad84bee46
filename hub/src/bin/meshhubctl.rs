//! meshhubctl: an MCP consumer for people. `watch` subscribes to a
//! `ResourceSource` (the hub, or a sink agent re-serving) as a Pilot-like
//! sink, or with `--ads` to the ADS service as istiod does (`--delta`:
//! incremental xDS), and prints every change as Kubernetes objects.
//! `status` reads the hub's admin `/status` and shows, per remote cluster
//! and per consumer, the connection and what was sent, ACKed and NACKed
//! (`--watch`: redrawn on change). `get` lists a cluster's objects as the
//! hub serves them, `diff` compares them with what the cluster's agent
//! holds, `describe` tells one object's sources, validation and delivery,
//! `completion` prints shell completion scripts.

#[path = "meshhubctl/admin.rs"]
mod admin;
#[path = "meshhubctl/ads.rs"]
mod ads;
#[path = "meshhubctl/describe.rs"]
mod describe;
#[path = "meshhubctl/diff.rs"]
mod diff;
#[path = "meshhubctl/fetch.rs"]
mod fetch;
#[path = "meshhubctl/get.rs"]
mod get;
#[path = "meshhubctl/history.rs"]
mod history;
#[path = "meshhubctl/loglevel.rs"]
mod loglevel;
#[path = "meshhubctl/output.rs"]
mod output;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{CommandFactory as _, Parser, Subcommand, ValueEnum};
use meshhub_mcp::dial::{ClientTlsFiles, DialTarget};
use meshhub_mcp::ledger::{Ledger, Role};
use meshhub_mcp::sink::client::{SourceTarget, connect_once};
use meshhub_mcp::sink::{ApplyError, Change, SinkCollection, SinkConfig, Updater};
use meshhub_mcp::source::drive::End;
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::SinkNode;
use meshhub_proto::transcode;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;

#[derive(Parser, Debug)]
#[command(
    name = "meshhubctl",
    version,
    about = "Inspect what a meshhub (or sink agent) serves: status, get, diff, describe, watch"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Subscribe to collections and print every change.
    Watch(WatchArgs),
    /// Show every remote cluster and consumer of a hub: connected or not,
    /// and per collection the sent and ACKed version and the sync state.
    Status(StatusArgs),
    /// Print or change the log filter of a hub or agent at runtime.
    LogLevel(loglevel::LogLevelArgs),
    /// List the objects of a cluster's group as the hub serves them.
    Get(get::GetArgs),
    /// Compare what the hub serves a cluster with what its sink agent
    /// holds; exit 0 when equal, 1 when different, 2 on trouble.
    Diff(diff::DiffArgs),
    /// Show one object: its sources, validation result, the clusters that
    /// receive it and its delivery to each.
    Describe(describe::DescribeArgs),
    /// Print a shell completion script (`source <(meshhubctl completion bash)`).
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// List a cluster's versions: time, origin of the change, counts.
    History(history::HistoryArgs),
    /// Serve a cluster an earlier version (roll back) until `unpin`.
    Pin(history::PinArgs),
    /// Serve a pinned cluster its latest version again.
    Unpin(history::UnpinArgs),
}

#[derive(clap::Args, Debug)]
struct StatusArgs {
    /// The hub's admin address.
    #[arg(long, env = "MESHHUB_ADMIN", default_value = "http://127.0.0.1:9902")]
    admin: String,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table")]
    output: output::Format,
    /// Keep running: ask again every `--interval` and redraw when the
    /// answer changed (Ctrl-C ends).
    #[arg(long, short = 'w')]
    watch: bool,
    /// With `--watch`: how often to ask (e.g. 2s).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration, requires = "watch")]
    interval: Duration,
    /// Also list consumers that disconnected (the hub keeps the newest 256).
    #[arg(long)]
    all: bool,
    /// Give up after this long (e.g. 5s).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Output {
    Yaml,
    Json,
}

#[derive(clap::Args, Debug)]
struct WatchArgs {
    /// The ResourceSource to dial.
    #[arg(long, env = "MESHHUB_SERVER", default_value = "http://127.0.0.1:9901")]
    server: String,
    /// Collections to watch (repeatable); default: every kind meshhub knows.
    /// With `--ads`, a collection or a type URL (`networking.istio.io/v1/VirtualService`).
    #[arg(long = "collection", short = 'c')]
    collections: Vec<String>,
    /// Subscribe as a consumer of this cluster (sent as the SinkNode id; with
    /// `--ads`, as the node metadata `meshhub.io/cluster`).
    #[arg(long)]
    cluster: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "yaml")]
    output: Output,
    /// Print the first complete state of every collection, then exit 0.
    #[arg(long)]
    once: bool,
    /// Ask for incremental (delta) responses.
    #[arg(long, conflicts_with = "ads")]
    incremental: bool,
    /// Subscribe over Envoy ADS (MCP-over-xDS) as istiod does: one wildcard
    /// subscription per type URL, every response ACKed.
    #[arg(long)]
    ads: bool,
    /// With `--ads`: use incremental xDS (`DeltaAggregatedResources`) and
    /// print additions, updates and removals.
    #[arg(long, requires = "ads")]
    delta: bool,
    /// Give up connecting after this long (e.g. 5s).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    connect_timeout: Duration,
    /// PEM roots that verify the hub's certificate (an `https://` server).
    #[arg(long, env = "MESHHUB_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// PEM client certificate chain for mutual TLS (with `--tls-key`).
    #[arg(long, env = "MESHHUB_TLS_CERT", requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<PathBuf>,
    /// PEM client private key for mutual TLS (with `--tls-cert`).
    #[arg(long, env = "MESHHUB_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The name to verify in the hub's certificate [default: the server's host].
    #[arg(long, requires = "tls_ca")]
    tls_server_name: Option<String>,
}

impl WatchArgs {
    /// The endpoint of `--server`, with TLS when `--tls-ca` is given.
    fn endpoint(&self) -> Result<DialTarget, String> {
        let endpoint = Endpoint::from_shared(self.server.clone())
            .map_err(|e| format!("--server {:?}: {e}", self.server))?
            .connect_timeout(self.connect_timeout);
        let tls = self.tls_ca.as_ref().map(|ca| ClientTlsFiles {
            ca: ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            server_name: self.tls_server_name.clone(),
        });
        DialTarget::new(endpoint, tls).map_err(|e| format!("--server {:?}: {e}", self.server))
    }
}

/// Prints each applied change; with `--once`, cancels when every
/// collection arrived once.
struct Printer {
    kinds: KindTable,
    output: Output,
    pending: Mutex<BTreeSet<String>>,
    once: Option<CancellationToken>,
    held: Mutex<HashMap<String, HashMap<String, String>>>,
}

impl Printer {
    /// The change as text. `held` (Delta ADS) is what the client held
    /// before it: each resource is then marked added or updated.
    fn render(
        &self,
        change: &Change,
        held: Option<&HashMap<String, String>>,
    ) -> Result<String, String> {
        let mut out = String::new();
        // A collection (MCP) or a type URL (ADS).
        let (noun, kind) = match self.kinds.by_collection(&change.collection) {
            Some(kind) => ("collection", Some(kind)),
            None => ("type", self.kinds.by_type_url(&change.collection)),
        };
        out.push_str(&format!(
            "# {noun} {} version {} ({} resources{}{})\n",
            change.collection,
            change.version,
            change.resources.len(),
            if change.incremental {
                ", incremental"
            } else {
                ""
            },
            if change.removed.is_empty() {
                String::new()
            } else {
                format!(", removed: {}", change.removed.join(" "))
            }
        ));
        for r in &change.resources {
            let name = r.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or("");
            if let Some(held) = held {
                let version = r
                    .metadata
                    .as_ref()
                    .map(|m| m.version.as_str())
                    .unwrap_or("");
                let what = if held.contains_key(name) {
                    "updated"
                } else {
                    "added"
                };
                out.push_str(&format!("# {what} {name} version {version}\n"));
            }
            let Some(kind) = kind else {
                out.push_str(&format!("# {name}: no schema known for this collection\n"));
                continue;
            };
            let obj = transcode::resource_to_object(kind, r).map_err(|e| e.to_string())?;
            let text = match self.output {
                Output::Yaml => transcode::to_yaml(&obj)
                    .map(|y| format!("---\n{y}"))
                    .map_err(|e| e.to_string()),
                // One object per line, for jq and friends.
                Output::Json => serde_json::to_string(&obj)
                    .map(|j| format!("{j}\n"))
                    .map_err(|e| e.to_string()),
            }?;
            out.push_str(&text);
            if !text.ends_with('\n') {
                out.push('\n');
            }
        }
        if held.is_some() {
            for name in &change.removed {
                out.push_str(&format!("# removed {name}\n"));
            }
        }
        Ok(out)
    }
}

impl Printer {
    /// Prints a change and records what is now held. `mark` (Delta ADS)
    /// marks each resource added or updated and lists removals. Returns
    /// whether every collection (or type) has now arrived at least once.
    fn show(&self, change: &Change, mark: bool) -> Result<bool, String> {
        let text = {
            let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            let empty = HashMap::new();
            let before = held.get(&change.collection).unwrap_or(&empty);
            self.render(change, mark.then_some(before))?
        };
        {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
        }
        {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            let map = held.entry(change.collection.clone()).or_default();
            if !change.incremental {
                map.clear();
            }
            for n in &change.removed {
                map.remove(n);
            }
            for r in &change.resources {
                if let Some(m) = &r.metadata {
                    map.insert(m.name.clone(), m.version.clone());
                }
            }
        }
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.remove(&change.collection);
        Ok(pending.is_empty())
    }

    /// What is held of a collection (or type): name → version.
    fn held_of(&self, collection: &str) -> HashMap<String, String> {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(collection)
            .cloned()
            .unwrap_or_default()
    }
}

impl Updater for Printer {
    async fn apply(&self, change: Change) -> Result<(), ApplyError> {
        let all_arrived = self.show(&change, false).map_err(ApplyError::Invalid)?;
        if let (true, Some(done)) = (all_arrived, &self.once) {
            done.cancel();
        }
        Ok(())
    }

    fn held(&self, collection: &str) -> HashMap<String, String> {
        self.held_of(collection)
    }
}

async fn watch(args: WatchArgs) -> Result<(), String> {
    if args.ads {
        return ads::watch(args).await;
    }
    let kinds = KindTable::builtin();
    let collections: Vec<String> = if args.collections.is_empty() {
        kinds.iter().map(|k| k.collection().to_owned()).collect()
    } else {
        args.collections.clone()
    };
    let endpoint = args.endpoint()?;
    let stop = CancellationToken::new();
    let target = SourceTarget {
        name: args.server.clone(),
        endpoint,
        config: Arc::new(SinkConfig {
            node: SinkNode {
                id: args.cluster.clone().unwrap_or_default(),
                annotations: HashMap::new(),
            },
            collections: collections
                .iter()
                .map(|c| SinkCollection {
                    name: c.clone(),
                    incremental: args.incremental,
                })
                .collect(),
        }),
        reconnect: Default::default(),
        max_message_bytes: 256 * 1024 * 1024,
    };
    let printer = Printer {
        kinds,
        output: args.output,
        pending: Mutex::new(collections.iter().cloned().collect()),
        once: args.once.then(|| stop.clone()),
        held: Mutex::default(),
    };
    let ledger = Ledger::new();
    let record = ledger.register(Role::Sink, args.server.clone(), "");
    let ctrl_c = stop.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        ctrl_c.cancel();
    });
    let mut backoff = meshhub_mcp::reconnect::Backoff::new(Default::default());
    let mut ever_connected = false;
    loop {
        match connect_once(&target, &printer, &record, &stop).await {
            Ok((End::Shutdown, _)) => return Ok(()),
            Ok((end, healthy)) => {
                ever_connected = true;
                if healthy {
                    backoff.reset();
                }
                eprintln!(
                    "meshhubctl: stream ended ({}); reconnecting",
                    end.error().unwrap_or_else(|| "closed by server".into())
                );
                if args.once {
                    return Err(format!(
                        "stream ended before every collection arrived: {}",
                        end.error().unwrap_or_default()
                    ));
                }
            }
            Err(e) if !ever_connected => {
                return Err(format!("cannot connect to {}: {e}", args.server));
            }
            Err(e) => eprintln!("meshhubctl: {e}; reconnecting"),
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = tokio::time::sleep(backoff.next_delay()) => {}
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Watch(args) => watch(args).await,
        Command::Status(args) => status::run(args).await,
        Command::LogLevel(args) => loglevel::run(args).await,
        Command::Get(args) => get::run(args).await,
        Command::Describe(args) => describe::run(args).await,
        Command::Diff(args) => {
            // As diff(1): 0 equal, 1 different, 2 trouble.
            return match diff::run(args).await {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("meshhubctl: {e}");
                    ExitCode::from(2)
                }
            };
        }
        Command::Completion { shell } => {
            // Into a buffer: the generator panics on a closed pipe.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "meshhubctl", &mut script);
            let _ = std::io::stdout().write_all(&script);
            Ok(())
        }
        Command::History(args) => history::history(args).await,
        Command::Pin(args) => history::pin(args).await,
        Command::Unpin(args) => history::unpin(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("meshhubctl: {e}");
            ExitCode::FAILURE
        }
    }
}

mod status {
    //! `meshhubctl status`: a plain HTTP GET of the admin `/status`,
    //! reduced to one row per remote cluster and per consumer.

    use std::io::{IsTerminal as _, Write as _};

    use serde::{Deserialize, Serialize};
    use tokio_util::sync::CancellationToken;

    use super::output::{Format, render, structured};
    use super::{BTreeMap, StatusArgs, admin};

    /// The parts of `/status` this command reads.
    #[derive(Debug, Deserialize)]
    struct Doc {
        #[serde(default)]
        remotes: Vec<Peer>,
        #[serde(default)]
        consumers: Vec<Peer>,
        #[serde(default)]
        pins: Vec<serde_json::Value>,
        #[serde(default)]
        unresolved_pins: Vec<serde_json::Value>,
    }

    #[derive(Debug, Deserialize)]
    struct Peer {
        /// Remote clusters.
        #[serde(default)]
        cluster: Option<String>,
        #[serde(default)]
        address: Option<String>,
        /// Consumers.
        #[serde(default)]
        peer: Option<String>,
        #[serde(default)]
        node_id: Option<String>,
        /// `mcp`, `ads` or `delta-ads` (consumers).
        #[serde(default)]
        protocol: Option<String>,
        #[serde(default)]
        group: Option<String>,
        connected: bool,
        connected_since: Option<String>,
        disconnected_at: Option<String>,
        last_error: Option<String>,
        #[serde(default)]
        collections: BTreeMap<String, Collection>,
    }

    #[derive(Debug, Deserialize)]
    struct Collection {
        sent: Option<Versioned>,
        acked: Option<Versioned>,
        nacked: Option<Nack>,
        blocked: Option<Nack>,
        state: String,
    }

    #[derive(Debug, Deserialize)]
    struct Versioned {
        version: String,
    }

    #[derive(Debug, Deserialize)]
    struct Nack {
        version: String,
        message: String,
    }

    /// What `-o json` prints.
    #[derive(Debug, Serialize)]
    struct Report {
        clusters: Vec<Row>,
        consumers: Vec<Row>,
        /// Pinned clusters, as the hub reports them.
        pins: Vec<serde_json::Value>,
        /// Shared pins this hub replica can't serve.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        unresolved_pins: Vec<serde_json::Value>,
    }

    #[derive(Debug, Serialize)]
    struct Row {
        name: String,
        /// Agent address (clusters) or socket address (consumers).
        address: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        node_id: Option<String>,
        /// How a consumer subscribed: `mcp`, `ads` or `delta-ads`.
        #[serde(skip_serializing_if = "Option::is_none")]
        protocol: Option<String>,
        group: String,
        connected: bool,
        connected_since: Option<String>,
        disconnected_at: Option<String>,
        last_error: Option<String>,
        collections: BTreeMap<String, CollectionRow>,
    }

    #[derive(Debug, Serialize)]
    struct CollectionRow {
        state: String,
        sent: Option<String>,
        acked: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        nacked: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    }

    fn row(p: Peer, cluster: bool) -> Row {
        let collections = p
            .collections
            .into_iter()
            .map(|(name, c)| {
                let problem = match c.state.as_str() {
                    "NACKED" => c.nacked,
                    "BLOCKED" => c.blocked,
                    _ => None,
                };
                (
                    name,
                    CollectionRow {
                        state: c.state,
                        sent: c.sent.map(|v| v.version),
                        acked: c.acked.map(|v| v.version),
                        nacked: problem.as_ref().map(|n| n.version.clone()),
                        message: problem.map(|n| n.message),
                    },
                )
            })
            .collect();
        let name = if cluster { p.cluster } else { p.peer };
        let name = name.unwrap_or_default();
        Row {
            address: if cluster {
                p.address.unwrap_or_default()
            } else {
                name.clone()
            },
            group: p.group.unwrap_or_else(|| name.clone()),
            name,
            node_id: (!cluster).then(|| p.node_id.unwrap_or_default()),
            protocol: if cluster { None } else { p.protocol },
            connected: p.connected,
            connected_since: p.connected_since,
            disconnected_at: p.disconnected_at,
            last_error: p.last_error,
            collections,
        }
    }

    /// One answer of `/status`, rendered.
    async fn frame(args: &StatusArgs) -> Result<String, String> {
        let text = admin::get_ok(&args.admin, "/status", args.timeout).await?;
        let doc: Doc = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not a meshhub /status document: {e}", args.admin))?;
        let report = Report {
            clusters: doc.remotes.into_iter().map(|p| row(p, true)).collect(),
            consumers: doc
                .consumers
                .into_iter()
                .filter(|p| args.all || p.connected)
                .map(|p| row(p, false))
                .collect(),
            pins: doc.pins,
            unresolved_pins: doc.unresolved_pins,
        };
        match structured(&report, args.output) {
            Some(text) => text,
            None => Ok(table(&report)),
        }
    }

    pub(super) async fn run(args: StatusArgs) -> Result<(), String> {
        if !args.watch {
            print!("{}", frame(&args).await?);
            return Ok(());
        }
        let stop = CancellationToken::new();
        let ctrl_c = stop.clone();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            ctrl_c.cancel();
        });
        // On a terminal each frame replaces the last; in a pipe frames
        // follow each other (YAML documents, JSON values, blank-line
        // separated tables).
        let terminal = std::io::stdout().is_terminal();
        let mut tick = tokio::time::interval(args.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last: Option<String> = None;
        loop {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                _ = tick.tick() => {}
            }
            // A hub that goes away is shown, not fatal: it may come back.
            let now = frame(&args)
                .await
                .unwrap_or_else(|e| format!("meshhubctl: {e}\n"));
            if last.as_ref() == Some(&now) {
                continue;
            }
            let mut out = std::io::stdout().lock();
            let separator = match (terminal, args.output, last.is_some()) {
                (true, _, _) => "\x1b[2J\x1b[H",
                (false, Format::Yaml, _) => "---\n",
                (false, Format::Table, true) => "\n",
                _ => "",
            };
            let _ = write!(out, "{separator}{now}");
            let _ = out.flush();
            last = Some(now);
        }
    }

    fn dash(s: &Option<String>) -> String {
        s.clone().unwrap_or_else(|| "-".to_owned())
    }

    /// Versions are digests; the table shows a prefix (`-o json` has them
    /// whole).
    fn short(v: &Option<String>) -> String {
        match v {
            // A pinned (rolled back) version: say so in the table too.
            Some(v) if v.contains(".pin-") => format!("{}(pin)", super::output::short(v)),
            _ => super::output::short(v.as_deref().unwrap_or_default()),
        }
    }

    fn since(r: &Row) -> String {
        if r.connected {
            dash(&r.connected_since)
        } else {
            dash(&r.disconnected_at)
        }
    }

    fn table(report: &Report) -> String {
        let mut out = String::new();
        let yes_no = |b: bool| if b { "yes" } else { "no" }.to_owned();
        let mut peers = vec![vec![
            "CLUSTER".to_owned(),
            "AGENT".to_owned(),
            "CONNECTED".to_owned(),
            "SINCE".to_owned(),
            "LAST ERROR".to_owned(),
        ]];
        for r in &report.clusters {
            peers.push(vec![
                r.name.clone(),
                r.address.clone(),
                yes_no(r.connected),
                since(r),
                dash(&r.last_error),
            ]);
        }
        if report.clusters.is_empty() {
            out.push_str("no remote clusters (no cluster has an agent)\n");
        } else {
            out.push_str(&render(&peers));
        }
        out.push('\n');
        let mut consumers = vec![vec![
            "CONSUMER".to_owned(),
            "PROTOCOL".to_owned(),
            "NODE".to_owned(),
            "GROUP".to_owned(),
            "CONNECTED".to_owned(),
            "SINCE".to_owned(),
            "LAST ERROR".to_owned(),
        ]];
        for r in &report.consumers {
            consumers.push(vec![
                r.name.clone(),
                dash(&r.protocol),
                r.node_id
                    .clone()
                    .filter(|n| !n.is_empty())
                    .unwrap_or("-".to_owned()),
                r.group.clone(),
                yes_no(r.connected),
                since(r),
                dash(&r.last_error),
            ]);
        }
        if report.consumers.is_empty() {
            out.push_str("no consumers connected\n");
        } else {
            out.push_str(&render(&consumers));
        }
        let mut colls = vec![vec![
            "PEER".to_owned(),
            "COLLECTION".to_owned(),
            "STATE".to_owned(),
            "SENT".to_owned(),
            "ACKED".to_owned(),
            "MESSAGE".to_owned(),
        ]];
        for r in report.clusters.iter().chain(&report.consumers) {
            for (name, c) in &r.collections {
                colls.push(vec![
                    r.name.clone(),
                    name.clone(),
                    c.state.replace('_', " "),
                    short(&c.sent),
                    short(&c.acked),
                    c.message
                        .as_ref()
                        .map(|m| m.replace('\n', " "))
                        .unwrap_or_else(|| "-".to_owned()),
                ]);
            }
        }
        if colls.len() > 1 {
            out.push('\n');
            out.push_str(&render(&colls));
        }
        for p in &report.pins {
            let s = |k: &str| p[k].as_str().unwrap_or("?").to_owned();
            out.push_str(&format!(
                "\nPINNED: cluster {} is served version {} (#{}) since {} by {}; {} version(s) behind the sources (latest {})\n",
                s("cluster"),
                s("version"),
                p["seq"],
                s("since"),
                s("by"),
                p["behind"],
                s("latest"),
            ));
        }
        for p in &report.unresolved_pins {
            let s = |k: &str| p[k].as_str().unwrap_or("?").to_owned();
            out.push_str(&format!(
                "\nPIN NOT SERVED BY THIS REPLICA: cluster {} is pinned to {} since {} by {}, but {}; serving {} instead (pin a version this replica has, or unpin)\n",
                s("cluster"),
                s("version"),
                s("since"),
                s("by"),
                s("reason"),
                s("serving"),
            ));
        }
        out
    }
}

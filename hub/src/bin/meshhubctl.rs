//! meshhubctl: an MCP consumer for people. `watch` subscribes to a
//! `ResourceSource` (the hub, or a sink agent re-serving) as a Pilot-like
//! sink and prints every change as Kubernetes objects.

use std::collections::{BTreeSet, HashMap};
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
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
    about = "Watch what a meshhub (or sink agent) serves"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Subscribe to collections and print every change.
    Watch(WatchArgs),
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
    #[arg(long = "collection", short = 'c')]
    collections: Vec<String>,
    /// Subscribe as a consumer of this cluster (sent as the SinkNode id).
    #[arg(long)]
    cluster: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "yaml")]
    output: Output,
    /// Print the first complete state of every collection, then exit 0.
    #[arg(long)]
    once: bool,
    /// Ask for incremental (delta) responses.
    #[arg(long)]
    incremental: bool,
    /// Give up connecting after this long (e.g. 5s).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    connect_timeout: Duration,
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
    fn render(&self, change: &Change) -> Result<String, String> {
        let mut out = String::new();
        let kind = self.kinds.by_collection(&change.collection);
        out.push_str(&format!(
            "# collection {} version {} ({} resources{}{})\n",
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
        Ok(out)
    }
}

impl Updater for Printer {
    async fn apply(&self, change: Change) -> Result<(), ApplyError> {
        let text = self.render(&change).map_err(ApplyError)?;
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
        if let (true, Some(done)) = (pending.is_empty(), &self.once) {
            done.cancel();
        }
        Ok(())
    }

    fn held(&self, collection: &str) -> HashMap<String, String> {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(collection)
            .cloned()
            .unwrap_or_default()
    }
}

async fn watch(args: WatchArgs) -> Result<(), String> {
    let kinds = KindTable::builtin();
    let collections: Vec<String> = if args.collections.is_empty() {
        kinds.iter().map(|k| k.collection().to_owned()).collect()
    } else {
        args.collections.clone()
    };
    let endpoint = Endpoint::from_shared(args.server.clone())
        .map_err(|e| format!("--server {:?}: {e}", args.server))?
        .connect_timeout(args.connect_timeout);
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
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("meshhubctl: {e}");
            ExitCode::FAILURE
        }
    }
}

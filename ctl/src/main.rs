//! meshhubctl: an MCP consumer for people, and the operator's view of a
//! hub. `watch` subscribes to a `ResourceSource` (the hub, or a sink agent
//! re-serving) as a Pilot-like sink, or with `--ads` to the ADS service as
//! istiod does (`--delta`: incremental xDS), and prints every change as
//! Kubernetes objects. `status` reads the hub's admin `/status` and shows,
//! per remote cluster and per consumer, the connection and what was sent,
//! ACKed and NACKed (`--watch`: redrawn on change). `get` lists a cluster's
//! objects as the hub serves them, `diff` compares them with what the
//! cluster's agent holds, `describe` tells one object's sources, validation
//! and delivery, `history`, `pin` and `unpin` roll a cluster back, `wait` blocks until
//! a change is ACKed (for pipelines),
//! `log-level` reads or changes a process's log filter, `completion` prints
//! shell completion scripts.
//!
//! What the admin port answers is typed by `meshhub-api`, the types the hub
//! answers with.

mod admin;
mod analyze;
mod describe;
mod diff;
mod fetch;
mod files;
mod get;
mod history;
mod log_level;
mod output;
mod rollout;
mod status;
mod validate;
mod wait;
mod watch;

use std::io::Write as _;
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

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
    Watch(watch::WatchArgs),
    /// Show every remote cluster and consumer of a hub: connected or not,
    /// and per collection the sent and ACKed version and the sync state.
    Status(status::StatusArgs),
    /// Print or change the log filter of a hub or agent at runtime.
    LogLevel(log_level::LogLevelArgs),
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
    /// Block until what the hub serves now (or one object) is ACKed by the
    /// named clusters, or every cluster; exit 0 ACKed, 1 NACKed or timed
    /// out, 2 trouble.
    Wait(wait::WaitArgs),
    /// The staged rollout: `status`, `promote`, `abort`, `resume`
    /// (`--cluster C` for one cluster).
    Rollout(rollout::RolloutArgs),
    /// Check files offline as the hub would (schema and Istio's rules);
    /// exit 0 when every object passes, 1 when one does not, 2 on trouble.
    Validate(validate::ValidateArgs),
    /// Analyse what each cluster receives (Istio's analyzer codes):
    /// offline over files with a hub configuration's clusters, or as a
    /// running hub reports it; exit 0 without errors, 1 with, 2 on trouble.
    Analyze(analyze::AnalyzeArgs),
}

/// As diff(1): 0 when `Ok(true)`, 1 when `Ok(false)`, 2 on trouble.
fn verdict(result: Result<bool, String>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("meshhubctl: {e}");
            ExitCode::from(2)
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Watch(args) => watch::run(args).await,
        Command::Status(args) => status::run(args).await,
        Command::LogLevel(args) => log_level::run(args).await,
        Command::Get(args) => get::run(args).await,
        Command::Describe(args) => describe::run(args).await,
        // As diff(1): 0 equal, 1 different, 2 trouble.
        Command::Diff(args) => return verdict(diff::run(args).await),
        Command::Validate(args) => return verdict(validate::run(args)),
        Command::Analyze(args) => return verdict(analyze::run(args).await),
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
        Command::Rollout(args) => rollout::run(args).await,
        Command::Wait(args) => {
            return match wait::run(args).await {
                Ok(wait::Outcome::Acked) => ExitCode::SUCCESS,
                Ok(wait::Outcome::Nacked | wait::Outcome::TimedOut) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("meshhubctl: {e}");
                    ExitCode::from(2)
                }
            };
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("meshhubctl: {e}");
            ExitCode::FAILURE
        }
    }
}

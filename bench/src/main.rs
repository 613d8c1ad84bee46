//! `meshhub-bench`: meshhub's performance harness (issue 6).
//!
//! `meshhub-bench all` runs P1–P4 and the remote clusters (`clusters`,
//! `storm`) and prints a table of measured figures
//! beside their targets; `--quick` runs the same scenarios at small sizes to
//! prove the harness (CI). Each scenario runs the hub and the load generator
//! in separate processes — this binary started with the `server` and `load`
//! subcommands — so that the hub's RSS is its own and neither process nears
//! the open-file limit. See `docs/performance.md`.

mod adsload;
mod agents;
mod digest;
mod envelope;
mod fleet;
mod floor;
mod generate;
mod k8s;
mod load;
mod p5;
mod params;
mod proc;
mod rawtcp;
mod report;
mod server;
mod sinks;
mod suite;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// meshhub performance harness.
#[derive(Parser)]
#[command(name = "meshhub-bench", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the suite and prints the table.
    All {
        /// Small sizes: proves the harness works, measures nothing useful.
        #[arg(long)]
        quick: bool,
        /// Only these scenarios (p1, p2, p3, p4, clusters, p5, k8s), comma-separated.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Size overrides, e.g. `--size p2.resources=40` (repeatable).
        #[arg(long)]
        size: Vec<String>,
    },
    /// (internal) The hub process.
    Server {
        /// The hub configuration file.
        #[arg(long)]
        config: PathBuf,
        /// The group whose publishes are timestamped.
        #[arg(long, default_value = server::DEFAULT_GROUP)]
        group: String,
    },
    /// (internal) Scenario `clusters`' light sink agents.
    Sinks {
        /// Sinks (clusters) to serve, each on its own listener.
        #[arg(long)]
        count: usize,
        /// The number of the first cluster served (a fleet larger than
        /// one process' open files runs several sinks processes).
        #[arg(long, default_value_t = 0)]
        first: usize,
        /// Ask for incremental responses, declaring what is held.
        #[arg(long)]
        incremental: bool,
        /// Serve only `ResourceSink`, not the agent's upward source (the
        /// hub's subscription is answered UNIMPLEMENTED).
        #[arg(long)]
        sink_only: bool,
    },
    /// (internal) P2's floor: a minimal tonic `ResourceSource` server.
    Floor,
    /// (internal) The load generator process.
    Load {
        /// The hub's gRPC address.
        #[arg(long)]
        addr: SocketAddr,
        /// HTTP/2 connections the streams share.
        #[arg(long)]
        conns: usize,
        /// Collections each stream subscribes, comma-separated.
        #[arg(long, value_delimiter = ',')]
        collections: Vec<String>,
        /// Ask for incremental responses.
        #[arg(long)]
        incremental: bool,
        /// Decode only each response's envelope (full state only).
        #[arg(long)]
        envelope: bool,
    },
    /// (internal) The ADS load generator (P5).
    AdsLoad {
        /// The server's gRPC address.
        #[arg(long)]
        addr: SocketAddr,
        /// HTTP/2 connections the streams share.
        #[arg(long)]
        conns: usize,
        /// Type URLs each stream subscribes, comma-separated.
        #[arg(long, value_delimiter = ',')]
        types: Vec<String>,
    },
    /// (internal) Raw TCP reader.
    RawReader {
        /// Connections to accept.
        #[arg(long)]
        conns: usize,
    },
    /// (internal) Raw TCP writer.
    RawWriter {
        /// The reader's address.
        #[arg(long)]
        addr: SocketAddr,
        /// Connections to open.
        #[arg(long)]
        conns: usize,
        /// Bytes written on each.
        #[arg(long)]
        bytes_per_conn: u64,
    },
}

/// The hub's allocator, so that the hub process measured runs as `meshhub` does.
/// Feature `system-allocator` leaves the C library's, for heap profilers
/// that interpose `malloc` (heaptrack: docs/performance.md, "Where the
/// memory goes").
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_env("MESHHUB_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::All { quick, only, size } => all(quick, &only, &size).await,
        Command::Server { config, group } => server::run(config, group).await,
        Command::Sinks {
            count,
            first,
            incremental,
            sink_only,
        } => sinks::run(count, first, incremental, !sink_only).await,
        Command::Floor => floor::run().await,
        Command::Load {
            addr,
            conns,
            collections,
            incremental,
            envelope,
        } => load::run(addr, conns, collections, incremental, envelope).await,
        Command::AdsLoad { addr, conns, types } => adsload::run(addr, conns, types).await,
        Command::RawReader { conns } => rawtcp::reader(conns).await,
        Command::RawWriter {
            addr,
            conns,
            bytes_per_conn,
        } => rawtcp::writer(addr, conns, bytes_per_conn).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A child reports its failure to the parent as an event too.
            proc::emit(&serde_json::json!({"event": "error", "message": format!("{e:#}")}));
            eprintln!("meshhub-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn all(quick: bool, only: &[String], sizes: &[String]) -> anyhow::Result<()> {
    let mut params = if quick {
        params::Params::quick()
    } else {
        params::Params::full()
    };
    for s in sizes {
        params.set(s)?;
    }
    let started = std::time::Instant::now();
    eprintln!("meshhub-bench: running {params:?}");
    let results = suite::run(&params, only).await?;
    println!(
        "\nmeshhub-bench {} ({} cores, {:.0} s)\n",
        if quick { "--quick" } else { "full" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        started.elapsed().as_secs_f64()
    );
    print!("{}", results.table());
    println!(
        "\noracle: ok ({} stream×collection checks matched the hub's published version and content digest)",
        results.oracle_checks
    );
    for (k, v) in &results.figures {
        println!("figure {k} = {v:.3}");
    }
    Ok(())
}

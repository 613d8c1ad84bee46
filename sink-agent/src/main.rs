//! `meshhub-sink-agent`: parses flags, sets up logging and TLS, runs.

use std::process::ExitCode;

use clap::Parser as _;
use meshhub_sink_agent::config::{Args, Config};
use meshhub_sink_agent::store::error_chain;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let args = Args::parse();
    init_tracing();
    // One crypto provider for every TLS user in the process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match Config::from_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("meshhub-sink-agent: {}", error_chain(&e));
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("meshhub-sink-agent: can't start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(meshhub_sink_agent::app::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("meshhub-sink-agent: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// `MESHHUB_LOG` filter (default `info`), plain or JSON by `MESHHUB_LOG_FORMAT`.
fn init_tracing() {
    let filter = EnvFilter::try_from_env("MESHHUB_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("MESHHUB_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

//! `meshhub`: the hub binary. Parses flags, sets up logging and TLS, runs.

use std::process::ExitCode;

use clap::Parser as _;
use meshhub::config::{Args, Config};
use tracing_subscriber::EnvFilter;

/// mimalloc returns freed memory to the system promptly; with glibc's
/// malloc the buffers of a large initial sync stay resident (see
/// docs/performance.md, P2 and P4).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    init_tracing();
    // One crypto provider for every TLS user in the process (tonic, kube).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match Config::from_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("meshhub: {}", error_chain(&e));
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("meshhub: can't start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(meshhub::app::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("meshhub: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// `MESHHUB_LOG` filter (default `info`), plain or JSON by `MESHHUB_LOG_FORMAT`.
fn init_tracing() {
    let filter = EnvFilter::try_from_env("MESHHUB_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("MESHHUB_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

//! `meshhub`: the hub binary. Parses flags; the runtime crate sets up
//! logging and TLS and runs [`meshhub::app::run`].

use std::process::ExitCode;

use clap::Parser as _;
use meshhub::config::{Args, Config};

/// mimalloc returns freed memory to the system promptly; with glibc's
/// malloc the buffers of a large initial sync stay resident (see
/// docs/performance.md, P2 and P4).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    meshhub_runtime::entry::main("meshhub", || Config::from_args(args), meshhub::app::run)
}

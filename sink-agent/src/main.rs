//! `meshhub-sink-agent`: parses flags; the runtime crate sets up logging
//! and TLS and runs [`meshhub_sink_agent::app::run`].

use std::process::ExitCode;

use clap::Parser as _;
use meshhub_sink_agent::config::{Args, Config};

fn main() -> ExitCode {
    let args = Args::parse();
    meshhub_runtime::entry::main(
        "meshhub-sink-agent",
        || Config::from_args(args),
        meshhub_sink_agent::app::run,
    )
}

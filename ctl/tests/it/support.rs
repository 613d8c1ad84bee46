//! What the modules share: `meshhubctl` run as a process, and (from the
//! e2e library) the stand-in agent whose updater refuses what a test names.

use std::process::Output;

use meshhub_testkit::within;

/// `meshhubctl args` to completion (bounded by the deadline), without the
/// environment that would change its defaults: the addresses it reads
/// (`MESHHUB_ADMIN`, `MESHHUB_SERVER`, `MESHHUB_AGENT`) and the user an
/// audit record names (`MESHHUB_USER`, `USER`).
pub async fn meshhubctl(args: &[&str]) -> Output {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_meshhubctl"))
        .args(args)
        .env_remove("MESHHUB_ADMIN")
        .env_remove("MESHHUB_SERVER")
        .env_remove("MESHHUB_AGENT")
        .env_remove("MESHHUB_USER")
        .env_remove("USER")
        .kill_on_drop(true)
        .output();
    within("meshhubctl to finish", child)
        .await
        .expect("meshhubctl runs")
}

pub use meshhub_e2e::standin::{Picky, StandIn};

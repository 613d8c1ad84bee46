//! `GET /debug/process`: what runs, since when, with which arguments and
//! configuration.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use super::DebugState;

/// What a process tells about itself.
#[derive(Debug)]
pub struct ProcessInfo {
    /// The binary (`meshhub`).
    pub name: &'static str,
    /// Its version.
    pub version: &'static str,
    /// The git commit it was built from, when the build knew it
    /// (`MESHHUB_GIT_COMMIT` at build time).
    pub git_commit: Option<&'static str>,
    /// The command line.
    pub args: Vec<String>,
    /// The configuration in force, with key material and bearer tokens
    /// elided by the caller (file paths are shown).
    pub config: serde_json::Value,
    started: Instant,
    started_unix: u64,
}

impl ProcessInfo {
    /// The info of this process, started now.
    pub fn new(
        name: &'static str,
        version: &'static str,
        git_commit: Option<&'static str>,
        config: serde_json::Value,
    ) -> Self {
        Self {
            name,
            version,
            git_commit,
            args: std::env::args().collect(),
            config,
            started: Instant::now(),
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }
}

impl ProcessInfo {
    /// When the process started, Unix seconds.
    pub fn started_unix(&self) -> u64 {
        self.started_unix
    }
}

/// The `/debug/process` document.
#[derive(Debug, Serialize)]
pub struct ProcessView<'a> {
    /// The binary.
    pub name: &'a str,
    /// Its version.
    pub version: &'a str,
    /// Its git commit, if known.
    pub git_commit: Option<&'a str>,
    /// The process id.
    pub pid: u32,
    /// When it started (Unix seconds).
    pub started_at_unix: u64,
    /// Seconds since.
    pub uptime_seconds: f64,
    /// The command line.
    pub args: &'a [String],
    /// The configuration in force.
    pub config: &'a serde_json::Value,
}

pub(super) async fn get(State(s): State<DebugState>) -> Json<serde_json::Value> {
    let p = &s.process;
    let view = ProcessView {
        name: p.name,
        version: p.version,
        git_commit: p.git_commit,
        pid: std::process::id(),
        started_at_unix: p.started_unix,
        uptime_seconds: p.started.elapsed().as_secs_f64(),
        args: &p.args,
        config: &p.config,
    };
    Json(serde_json::to_value(view).unwrap_or_default())
}

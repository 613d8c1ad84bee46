//! Introspection on the admin port (the role of Istio's ControlZ):
//! `/debug/logging` (read and change log levels), `/debug/process`,
//! `/debug/memory` and `/debug/pprof/profile` (a CPU profile). Changing
//! log levels and profiling are guarded by [`AdminAuth`].

pub mod logging;
pub mod memory;
pub mod process;
pub mod profile;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::auth::AdminAuth;
use crate::logging::LogControl;

pub use process::ProcessInfo;
pub use profile::Profiler;

/// What the introspection handlers read.
#[derive(Clone, Debug)]
pub struct DebugState {
    /// The log filter's control (absent when this process did not install
    /// meshhub's logging, e.g. in tests).
    pub log: Option<LogControl>,
    /// What `/debug/process` shows.
    pub process: Arc<ProcessInfo>,
    /// One CPU profile at a time.
    pub profiler: Profiler,
    /// Ends a running profile early.
    pub shutdown: CancellationToken,
}

/// The `/debug/*` routes; the state-changing ones guarded by `auth`.
pub fn router(state: DebugState, auth: &AdminAuth) -> Router {
    let open = Router::new()
        .route("/debug/logging", get(logging::get))
        .route("/debug/process", get(process::get))
        .route("/debug/memory", get(memory::get));
    let guarded = auth.protect(
        Router::new()
            .route("/debug/logging", axum::routing::put(logging::put))
            .route("/debug/pprof/profile", get(profile::get)),
    );
    open.merge(guarded).with_state(state)
}

//! `GET /debug/pprof/profile?seconds=N`: a CPU profile of the whole process
//! for N seconds (default 10, at most [`MAX_SECONDS`]) in pprof's protobuf
//! format (`go tool pprof`, `pprof -http`), sampled at [`FREQUENCY`] Hz by
//! the `pprof` crate. One at a time: a second request while one runs gets
//! 409.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use pprof::protos::Message as _;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::DebugState;

/// The longest profile.
pub const MAX_SECONDS: u64 = 60;
/// The default length.
pub const DEFAULT_SECONDS: u64 = 10;
/// Samples per second.
pub const FREQUENCY: i32 = 99;

/// Lets one profile run at a time.
#[derive(Clone, Debug, Default)]
pub struct Profiler {
    busy: Arc<AtomicBool>,
}

/// Marks the profiler free again when dropped.
struct Busy(Arc<AtomicBool>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Profiler {
    /// Whether a profile is running now.
    pub fn busy(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }

    fn acquire(&self) -> Option<Busy> {
        self.busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| Busy(self.busy.clone()))
    }
}

/// The query.
#[derive(Debug, Deserialize)]
pub(super) struct ProfileQuery {
    seconds: Option<u64>,
}

fn text(status: StatusCode, message: String) -> Response {
    (status, message + "\n").into_response()
}

pub(super) async fn get(State(s): State<DebugState>, Query(q): Query<ProfileQuery>) -> Response {
    let seconds = q.seconds.unwrap_or(DEFAULT_SECONDS);
    if seconds == 0 || seconds > MAX_SECONDS {
        return text(
            StatusCode::BAD_REQUEST,
            format!("seconds must be 1 to {MAX_SECONDS}, not {seconds}"),
        );
    }
    let Some(busy) = s.profiler.acquire() else {
        return text(
            StatusCode::CONFLICT,
            "a CPU profile is running already; try again when it ends".to_owned(),
        );
    };
    info!(profile.seconds = seconds, "CPU profile started");
    let shutdown = s.shutdown.clone();
    let rt = tokio::runtime::Handle::current();
    let result = tokio::task::spawn_blocking(move || {
        let _busy = busy;
        profile(Duration::from_secs(seconds), &shutdown, &rt)
    })
    .await;
    match result {
        Ok(Ok(bytes)) => (
            [
                (header::CONTENT_TYPE, "application/octet-stream"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"profile.pb\"",
                ),
            ],
            bytes,
        )
            .into_response(),
        Ok(Err(e)) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("profile: {e}")),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("profile: {e}")),
    }
}

/// Samples for `length` (or until `shutdown`) and encodes the report.
fn profile(
    length: Duration,
    shutdown: &CancellationToken,
    rt: &tokio::runtime::Handle,
) -> Result<Vec<u8>, pprof::Error> {
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(FREQUENCY)
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()?;
    // The profile's length is the point of the request, not a wait for
    // another task: end it at the deadline or on shutdown.
    rt.block_on(async {
        tokio::select! {
            () = tokio::time::sleep(length) => {},
            () = shutdown.cancelled() => {},
        }
    });
    let report = guard.report().build()?;
    let profile = report.pprof()?;
    Ok(profile.encode_to_vec())
}

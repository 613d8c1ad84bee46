//! The process-wide Prometheus recorder and its upkeep.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// How often the Prometheus recorder drains its histograms.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Buckets of every `*_seconds` histogram: from a millisecond (a snapshot
/// build, a small fsync) to ten seconds (a slow debounce, a huge collection
/// on a slow disk).
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The process-wide Prometheus handle. The recorder is installed once per
/// process; if another recorder already is (tests, embedding), a detached
/// one is used so that `/metrics` still answers.
pub fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = || {
                PrometheusBuilder::new()
                    .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
                    .unwrap_or_else(|_| PrometheusBuilder::new())
            };
            match builder().install_recorder() {
                Ok(h) => h,
                Err(e) => {
                    warn!(error = %e, "can't install the metrics recorder; /metrics will be empty");
                    builder().build_recorder().handle()
                }
            }
        })
        .clone()
}

/// Drains the recorder's histograms every [`UPKEEP_INTERVAL`] until
/// `shutdown`.
pub async fn upkeep(handle: PrometheusHandle, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => handle.run_upkeep(),
        }
    }
}

//! The admin HTTP port: `/healthz` (the process runs), `/readyz` (the
//! persisted state is loaded and served), `/metrics` (Prometheus text) and
//! `/status` (JSON: mode, readiness, what the store holds per collection,
//! files skipped on load, the ACK/NACK ledger of every stream).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use meshhub_mcp::ledger::{At, Ledger, PeerStatus, Role};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::apply::ApplyStatus;
use crate::store::StoreStatus;

/// How often the Prometheus recorder drains its histograms.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Buckets of every `*_seconds` histogram: a millisecond (a small fsync) to
/// ten seconds (a huge collection on a slow disk).
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

/// What the admin handlers read; every field is a cheap reader handle.
#[derive(Clone)]
pub struct AdminState {
    /// This cluster's name.
    pub cluster: String,
    /// `push` or `pull`.
    pub mode: &'static str,
    /// True once the persisted state is loaded and served.
    pub ready: watch::Receiver<bool>,
    /// The store's status, once the store is open.
    pub store: Arc<OnceLock<watch::Receiver<Arc<StoreStatus>>>>,
    /// The applier's status: unset until configured, `None` when applying
    /// is off.
    pub apply: Arc<OnceLock<Option<watch::Receiver<Arc<ApplyStatus>>>>>,
    /// The engine's ACK/NACK ledger.
    pub ledger: Ledger,
    /// Prometheus rendering.
    pub metrics: PrometheusHandle,
}

/// The admin routes.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .with_state(state)
}

/// Serves the admin routes on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    state: AdminState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
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

async fn readyz(State(s): State<AdminState>) -> Response {
    if *s.ready.borrow() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: loading the persisted state\n",
        )
            .into_response()
    }
}

async fn metrics(State(s): State<AdminState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
        .into_response()
}

/// The `/status` document.
#[derive(Debug, Serialize)]
pub struct StatusView {
    /// This cluster's name.
    pub cluster: String,
    /// `push` or `pull`.
    pub mode: &'static str,
    /// Whether the persisted state is loaded and served.
    pub ready: bool,
    /// What the store holds (absent while it opens).
    pub store: Option<StoreStatus>,
    /// Applying to Kubernetes (absent when off).
    pub apply: Option<ApplyStatus>,
    /// The hub stream that delivers configuration now (absent while none
    /// is up): who pushes, and which hub replica it is.
    pub hub: Option<HubView>,
    /// Every stream: the hub's (sink role) and local consumers' (source).
    pub ledger: Vec<PeerStatus>,
}

/// The hub stream that delivers configuration.
#[derive(Debug, Serialize)]
pub struct HubView {
    /// The hub's address (push: where it dialed from; pull: where we dial).
    pub peer: String,
    /// The hub replica pushing (its `meshhub-replica` metadata; sent by
    /// hubs with leader election on).
    pub replica: Option<String>,
    /// When this stream came up.
    pub connected_since: Option<At>,
}

/// The newest live stream on which we receive (sink role).
fn hub_view(ledger: &[PeerStatus]) -> Option<HubView> {
    ledger
        .iter()
        .filter(|p| p.role == Role::Sink && p.connected)
        .max_by_key(|p| (p.connected_since.map(|a| a.0), p.id))
        .map(|p| HubView {
            peer: p.peer.clone(),
            replica: p.replica.clone(),
            connected_since: p.connected_since,
        })
}

/// The status document of `s`.
pub fn status_view(s: &AdminState) -> StatusView {
    let ledger = s.ledger.view();
    StatusView {
        cluster: s.cluster.clone(),
        mode: s.mode,
        ready: *s.ready.borrow(),
        store: s.store.get().map(|rx| (**rx.borrow()).clone()),
        apply: s
            .apply
            .get()
            .and_then(Option::as_ref)
            .map(|rx| (**rx.borrow()).clone()),
        hub: hub_view(&ledger),
        ledger,
    }
}

async fn status(State(s): State<AdminState>) -> Json<StatusView> {
    Json(status_view(&s))
}

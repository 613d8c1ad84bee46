//! The admin HTTP port: `/healthz` (the process runs), `/readyz` (every
//! source synced and the first snapshots are published), `/metrics`
//! (Prometheus text) and `/status` (JSON: sources, rejected entries with
//! reasons, conflicts, groups with per-collection versions, leader
//! election, the ACK/NACK ledger).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use meshhub_mcp::cache::SnapshotCache;
use meshhub_mcp::ledger::{Ledger, PeerStatus, Role};
use meshhub_mcp::tls::reload::TlsStatus;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::clusters::{Agents, RemoteView, is_dialer, remote_views};
use crate::groups::GroupRules;
use crate::leader::LeaderStatus;
use crate::pipeline::Status;
use crate::reload::ReloadStatus;

/// How often the Prometheus recorder drains its histograms.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Histogram buckets for every `*_seconds` metric: from a millisecond (a
/// snapshot build) to ten seconds (a slow debounce).
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
    /// The pipeline's status.
    pub status: watch::Receiver<Arc<Status>>,
    /// The published snapshots.
    pub cache: SnapshotCache,
    /// The grouping rules (every group, published or not), as reloaded.
    pub rules: watch::Receiver<GroupRules>,
    /// The configured sink agents, as reloaded.
    pub agents: watch::Receiver<Agents>,
    /// Configuration reloads.
    pub reload: watch::Receiver<Arc<ReloadStatus>>,
    /// The engine's ACK/NACK ledger.
    pub ledger: Ledger,
    /// Leader election for the dial-out role.
    pub leader: watch::Receiver<LeaderStatus>,
    /// Prometheus rendering.
    pub metrics: PrometheusHandle,
    /// TLS on the gRPC port (`None`: plaintext).
    pub grpc_tls: Option<watch::Receiver<TlsStatus>>,
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
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => handle.run_upkeep(),
        }
    }
}

async fn readyz(State(s): State<AdminState>) -> Response {
    let status = s.status.borrow().clone();
    if status.ready {
        return (StatusCode::OK, "ready\n").into_response();
    }
    let waiting: Vec<&str> = status
        .sources
        .iter()
        .filter(|s| !s.synced)
        .map(|s| s.name.as_str())
        .collect();
    let body = if waiting.is_empty() {
        "not ready: first snapshots not published yet\n".to_owned()
    } else {
        format!("not ready: waiting for sources {}\n", waiting.join(", "))
    };
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}

async fn metrics(State(s): State<AdminState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
        .into_response()
}

/// One collection of one group.
#[derive(Debug, Serialize)]
pub struct CollectionView {
    /// The collection version.
    pub version: String,
    /// Number of resources.
    pub resources: usize,
}

/// One group.
#[derive(Debug, Serialize)]
pub struct GroupView {
    /// The group (cluster) name.
    pub name: String,
    /// Whether a snapshot is published.
    pub published: bool,
    /// Open collection watches (streams) on it.
    pub watches: usize,
    /// Per collection.
    pub collections: BTreeMap<String, CollectionView>,
}

/// The `/status` document.
#[derive(Debug, Serialize)]
pub struct StatusView {
    /// The pipeline's status (sources, rejected, conflicts, ...).
    #[serde(flatten)]
    pub pipeline: Status,
    /// Every group.
    pub groups: Vec<GroupView>,
    /// Configuration reloads: the file, the last refused configuration.
    pub config: ReloadStatus,
    /// Leader election for the dial-out role: whether this replica leads
    /// (and dials the agents), who holds the lease.
    pub leader: LeaderStatus,
    /// One row per remote cluster (configured with an agent): its dialer's
    /// connection and per-collection sync state.
    pub remotes: Vec<RemoteView>,
    /// The consumers that dialed in (connected, then recently gone).
    pub consumers: Vec<PeerStatus>,
    /// Every peer of the engine (dialers and consumers).
    pub ledger: Vec<PeerStatus>,
    /// TLS on the gRPC port: the certificate served, reloads, the last
    /// refused file (`null`: plaintext).
    pub grpc_tls: Option<TlsStatus>,
}

/// The status document of `s`.
pub fn status_view(s: &AdminState) -> StatusView {
    let pipeline = (**s.status.borrow()).clone();
    let rules = s.rules.borrow().clone();
    let groups = rules
        .groups()
        .into_iter()
        .map(|g| {
            let snapshot = s.cache.snapshot(&g);
            GroupView {
                name: g.to_string(),
                published: snapshot.is_some(),
                watches: s.cache.watch_count(&g),
                collections: snapshot
                    .map(|snap| {
                        snap.collections()
                            .map(|(name, c)| {
                                (
                                    name.to_owned(),
                                    CollectionView {
                                        version: c.version().to_owned(),
                                        resources: c.len(),
                                    },
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            }
        })
        .collect();
    let ledger = s.ledger.view();
    let agents = s.agents.borrow().clone();
    StatusView {
        pipeline,
        groups,
        config: (**s.reload.borrow()).clone(),
        leader: s.leader.borrow().clone(),
        remotes: remote_views(&agents, &ledger),
        // Upstream MCP sources are sink-side peers: not consumers.
        consumers: ledger
            .iter()
            .filter(|p| p.role == Role::Source && !is_dialer(p))
            .cloned()
            .collect(),
        ledger,
        grpc_tls: s.grpc_tls.as_ref().map(|t| t.borrow().clone()),
    }
}

async fn status(State(s): State<AdminState>) -> Json<StatusView> {
    Json(status_view(&s))
}

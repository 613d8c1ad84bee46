//! The hub's admin HTTP port: the runtime's `/healthz`, `/readyz` (every
//! source synced and the first snapshots are published), `/metrics` and
//! `/debug/*` (see `meshhub_runtime::admin`), and `/status` (JSON: sources,
//! rejected entries with reasons, conflicts, groups with per-collection
//! versions, leader election, the ACK/NACK ledger),
//! and `/debug/object` ([`objects`]: one object's sources, validation
//! and delivery).

pub mod fleet;
pub mod objects;

use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use meshhub_api::status::{CollectionView, GroupView};
use meshhub_mcp::cache::SnapshotCache;
use meshhub_mcp::ledger::{Ledger, Role};
use meshhub_mcp::tls::reload::TlsStatus;
use meshhub_proto::kinds::KindTable;
use meshhub_runtime::admin::{AdminBase, Readiness};
use tokio::sync::watch;

use crate::clusters::{Agents, is_dialer, remote_views};
use crate::groups::GroupRules;
use crate::history::History;
use crate::leader::LeaderStatus;
use crate::pipeline::Status;
use crate::reload::ReloadStatus;

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
    /// The runtime's routes (health, readiness, metrics, introspection)
    /// and the guard of state-changing endpoints (`base.auth.protect`).
    pub base: AdminBase,
    /// The kinds the hub knows (built-in and `extraKinds`).
    pub kinds: KindTable,
    /// What an ADS consumer is served of each type URL, as the serving
    /// port serves it ([`meshhub_runtime::grpc::ads_types`] of `kinds`):
    /// object pages and the console judge ADS consumers by it. One for the
    /// process, so its translations are shared between requests.
    pub ads: meshhub_mcp::ads::TypeMap,
    /// Version history and pins, when configured.
    pub history: Option<History>,
    /// TLS on the gRPC port (`None`: plaintext).
    pub grpc_tls: Option<watch::Receiver<TlsStatus>>,
    /// What the clusters report over the upward channel.
    pub reports: watch::Receiver<crate::upward::Reports>,
}

/// The admin routes: the runtime's and `/status`.
pub fn router(state: AdminState) -> Router {
    meshhub_runtime::admin::router(state.base.clone()).merge(
        Router::new()
            .route("/status", get(status))
            .merge(objects::routes())
            .with_state(state),
    )
}

/// The hub's readiness: every source synced and the first snapshots
/// published.
pub fn readiness(status: watch::Receiver<Arc<Status>>) -> Readiness {
    Arc::new(move || {
        let status = status.borrow().clone();
        if status.ready {
            return Ok(());
        }
        let waiting: Vec<&str> = status
            .sources
            .iter()
            .filter(|s| !s.synced)
            .map(|s| s.name.as_str())
            .collect();
        Err(if waiting.is_empty() {
            "first snapshots not published yet".to_owned()
        } else {
            format!("waiting for sources {}", waiting.join(", "))
        })
    })
}

/// The `/status` document: the API's shape with the hub's own sections.
pub type StatusView =
    meshhub_api::status::StatusView<Status, ReloadStatus, LeaderStatus, TlsStatus>;

/// The status document of `s`.
pub fn status_view(s: &AdminState) -> StatusView {
    // One read of the status: a second `borrow()` while a first guard
    // lives can deadlock against the pipeline's `send_replace`.
    let pipeline = (**s.status.borrow()).clone();
    let analysis = pipeline
        .analysis
        .iter()
        .map(|a| meshhub_api::analysis::ClusterAnalysis::clone(a))
        .collect();
    let withheld = pipeline.withheld.clone();
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
    let leader = s.leader.borrow().clone();
    let shards = leader
        .shards
        .as_ref()
        .map(|sh| {
            let mut views = sh.shards.clone();
            for a in agents.iter() {
                let shard = crate::leader::shards::shard_of(&a.cluster, sh.count);
                if let Some(v) = views.get_mut(shard as usize) {
                    v.clusters += 1;
                }
            }
            views
        })
        .unwrap_or_default();
    StatusView {
        pipeline,
        groups,
        config: (**s.reload.borrow()).clone(),
        remotes: remote_views(
            &agents,
            &leader,
            &ledger,
            &report_views(&s.reports.borrow()),
            crate::upward::peer_name,
        ),
        // Upstream MCP sources are sink-side peers: not consumers.
        consumers: ledger
            .iter()
            .filter(|p| p.role == Role::Source && !is_dialer(p))
            .cloned()
            .collect(),
        ledger,
        pins: s
            .history
            .as_ref()
            .map(History::pin_views)
            .unwrap_or_default(),
        unresolved_pins: s
            .history
            .as_ref()
            .map(History::unresolved_pins)
            .unwrap_or_default(),
        grpc_tls: s.grpc_tls.as_ref().map(|t| t.borrow().clone()),
        analysis,
        withheld,
        leader,
        shards,
    }
}

/// Each cluster's report as shown, with the MCS conflicts of its exports.
fn report_views(
    reports: &crate::upward::Reports,
) -> std::collections::BTreeMap<String, meshhub_api::upward::ClusterReportView> {
    let clusters: Vec<String> = reports.keys().cloned().collect();
    let aggregates = crate::upward::mcs::aggregate_all(reports, &clusters);
    reports
        .iter()
        .map(|(cluster, r)| {
            let mut view = r.view.clone();
            for e in &mut view.exports {
                if let Some(c) = aggregates
                    .get(&format!("{}/{}", e.namespace, e.name))
                    .and_then(|a| a.conflicts.get(cluster))
                {
                    e.conflict = c.clone();
                }
            }
            (cluster.clone(), view)
        })
        .collect()
}

async fn status(State(s): State<AdminState>) -> Json<StatusView> {
    // Pins read the history database: off the async threads.
    let view = tokio::task::spawn_blocking(move || status_view(&s)).await;
    Json(view.expect("the status view does not panic"))
}

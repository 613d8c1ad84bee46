//! The agent's admin HTTP port: the runtime's `/healthz`, `/readyz` (the
//! persisted state is loaded and served), `/metrics` and `/debug/*` (see
//! `meshhub_runtime::admin`), and `/status` (JSON: mode, readiness, what the store holds per collection,
//! files skipped on load, the ACK/NACK ledger of every stream).

use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use meshhub_mcp::ledger::{At, Ledger, PeerStatus, Role};
use meshhub_runtime::admin::{AdminBase, Readiness};
use serde::Serialize;
use tokio::sync::watch;

use crate::apply::ApplyStatus;
use crate::store::StoreStatus;

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
    /// The ledger of the upward channel: the hubs reading this cluster's
    /// state.
    pub upward: Ledger,
    /// The runtime's routes (health, readiness, metrics, introspection)
    /// and the guard of state-changing endpoints (`base.auth.protect`).
    pub base: AdminBase,
}

/// The admin routes: the runtime's and `/status`.
pub fn router(state: AdminState) -> Router {
    meshhub_runtime::admin::router(state.base.clone()).merge(
        Router::new()
            .route("/status", get(status))
            .with_state(state),
    )
}

/// The agent's readiness: the persisted state is loaded and served.
pub fn readiness(ready: watch::Receiver<bool>) -> Readiness {
    Arc::new(move || {
        if *ready.borrow() {
            Ok(())
        } else {
            Err("loading the persisted state".to_owned())
        }
    })
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
    /// The hubs reading this cluster's state (the upward channel: what
    /// each was sent of `meshhub/v1alpha1/clusterstatus` and
    /// `…/serviceexports`, and ACKed).
    pub upward: Vec<PeerStatus>,
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
        upward: s.upward.view(),
    }
}

async fn status(State(s): State<AdminState>) -> Json<StatusView> {
    Json(status_view(&s))
}

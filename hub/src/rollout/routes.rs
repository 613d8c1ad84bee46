//! The rollout on the admin port: `GET /rollout` (the policy and the
//! current rollout's state), and `POST /rollout/promote|abort|resume`
//! (`?cluster=C` for one cluster), which change what clusters are served
//! and so sit behind the admin authorization.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot, watch};

use super::{Action, ActionError, Request, View};
use crate::history::routes::caller;

/// What the routes need.
#[derive(Clone, Debug)]
pub struct RolloutState {
    /// The controller's view (`enabled: false` when no policy is set).
    pub view: watch::Receiver<Arc<View>>,
    /// The pipeline's request queue (`None`: no policy).
    pub requests: Option<mpsc::Sender<Request>>,
}

/// `GET /rollout`.
pub fn read_routes(state: RolloutState) -> Router {
    Router::new().route("/rollout", get(show)).with_state(state)
}

/// `POST /rollout/{promote,abort,resume}`: add the admin authorization
/// layer here.
pub fn write_routes(state: RolloutState) -> Router {
    Router::new()
        .route("/rollout/promote", post(promote))
        .route("/rollout/abort", post(abort))
        .route("/rollout/resume", post(resume))
        .with_state(state)
}

async fn show(State(s): State<RolloutState>) -> Json<View> {
    Json(View::clone(&s.view.borrow()))
}

#[derive(Debug, Deserialize)]
struct Target {
    cluster: Option<String>,
}

async fn promote(s: State<RolloutState>, h: HeaderMap, q: Query<Target>) -> Response {
    act(s, h, q, Action::Promote).await
}

async fn abort(s: State<RolloutState>, h: HeaderMap, q: Query<Target>) -> Response {
    act(s, h, q, Action::Abort).await
}

async fn resume(s: State<RolloutState>, h: HeaderMap, q: Query<Target>) -> Response {
    act(s, h, q, Action::Resume).await
}

async fn act(
    State(s): State<RolloutState>,
    headers: HeaderMap,
    Query(t): Query<Target>,
    action: Action,
) -> Response {
    let result = match &s.requests {
        None => Err(ActionError::NotConfigured),
        Some(tx) => {
            let (reply, answer) = oneshot::channel();
            let request = Request {
                action,
                cluster: t.cluster,
                by: caller(&headers),
                reply,
            };
            match tx.send(request).await {
                Ok(()) => answer.await.unwrap_or(Err(ActionError::Gone)),
                Err(_) => Err(ActionError::Gone),
            }
        }
    };
    match result {
        Ok(()) => Json(View::clone(&s.view.borrow())).into_response(),
        Err(e) => {
            let code = match &e {
                ActionError::NotConfigured | ActionError::NoRollout => StatusCode::NOT_FOUND,
                // The leader is named: the caller retries there.
                ActionError::Refused(_) | ActionError::NotLeader { .. } => StatusCode::CONFLICT,
                ActionError::Gone => StatusCode::SERVICE_UNAVAILABLE,
            };
            (code, format!("{e}\n")).into_response()
        }
    }
}

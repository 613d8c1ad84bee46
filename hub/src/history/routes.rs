//! Admin routes of the history: read-only `GET /history`,
//! `GET /history/diff`, `GET /pins`; state-changing `POST /pins` and
//! `POST /pins/unpin`, kept in [`write_routes`] so that an authorization
//! layer wraps exactly them in one line.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use meshhub_api::history::{DiffView, HistoryView, PinRequest, UnpinRequest, VersionRow};
use meshhub_proto::kinds::KindTable;
use serde::Deserialize;
use tracing::info;

use super::diff::diff;
use super::{History, HistoryError};
use crate::audit::AuditLog;

pub use meshhub_api::history::USER_HEADER;

/// The caller recorded when no identity is known.
pub const ANONYMOUS: &str = "admin-port";

/// What the routes need.
#[derive(Clone, Debug)]
pub struct HistoryState {
    /// The history.
    pub history: History,
    /// The kind table (to show objects as YAML).
    pub kinds: KindTable,
    /// Where pins and unpins are recorded.
    pub audit: AuditLog,
}

/// Every history route.
pub fn router(state: HistoryState) -> Router {
    read_routes(state.clone()).merge(write_routes(state))
}

/// The read-only routes.
pub fn read_routes(state: HistoryState) -> Router {
    Router::new()
        .route("/history", get(list))
        .route("/history/diff", get(diff_route))
        .route("/pins", get(pins))
        .with_state(state)
}

/// The state-changing routes: add the admin authorization layer here.
pub fn write_routes(state: HistoryState) -> Router {
    Router::new()
        .route("/pins", post(pin))
        .route("/pins/unpin", post(unpin))
        .with_state(state)
}

fn error(e: HistoryError) -> Response {
    let code = match &e {
        HistoryError::NoVersion { .. } => StatusCode::NOT_FOUND,
        HistoryError::Ambiguous(_) => StatusCode::BAD_REQUEST,
        HistoryError::NotPinned(_) => StatusCode::CONFLICT,
        HistoryError::Shared(_) | HistoryError::Archive(_) => StatusCode::BAD_GATEWAY,
        HistoryError::Db(_) | HistoryError::Dir(..) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let text = meshhub_runtime::error_chain(&e);
    (code, format!("{text}\n")).into_response()
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, HistoryError> + Send + 'static,
) -> Result<T, Response> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(error),
        Err(e) => Err((StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()),
    }
}

#[derive(Debug, Deserialize)]
struct ClusterQuery {
    cluster: String,
}

async fn list(State(s): State<HistoryState>, Query(q): Query<ClusterQuery>) -> Response {
    let history = s.history.clone();
    let cluster = q.cluster.clone();
    let r = blocking(move || {
        let versions = history.list(&cluster)?;
        let pinned = history
            .pin_views()
            .into_iter()
            .find(|p| p.record.cluster == cluster);
        Ok((versions, pinned))
    })
    .await;
    match r {
        Ok((versions, _)) if versions.is_empty() => (
            StatusCode::NOT_FOUND,
            format!("cluster {} has no recorded version\n", q.cluster),
        )
            .into_response(),
        Ok((versions, pinned)) => Json(HistoryView {
            cluster: q.cluster,
            versions: versions
                .into_iter()
                .map(|v| VersionRow {
                    counts: v.counts(),
                    seq: v.seq,
                    id: v.id,
                    time: v.time,
                    origins: v.origins,
                    more_origins: v.more_origins,
                    resources: v.resources,
                    held_back: v.held_back,
                })
                .collect(),
            pinned,
        })
        .into_response(),
        Err(r) => r,
    }
}

#[derive(Debug, Deserialize)]
struct DiffQuery {
    cluster: String,
    from: String,
    to: String,
}

async fn diff_route(State(s): State<HistoryState>, Query(q): Query<DiffQuery>) -> Response {
    let r = blocking(move || -> Result<DiffView, HistoryError> {
        let from = s.history.find(&q.cluster, &q.from)?;
        let to = s.history.find(&q.cluster, &q.to)?;
        Ok(diff(&s.history, &s.kinds, &from, &to))
    })
    .await;
    match r {
        Ok(v) => Json(v).into_response(),
        Err(r) => r,
    }
}

async fn pins(State(s): State<HistoryState>) -> Response {
    match blocking(move || Ok(s.history.pin_views())).await {
        Ok(v) => Json(v).into_response(),
        Err(r) => r,
    }
}

/// The caller of a state-changing request.
pub fn caller(headers: &HeaderMap) -> String {
    headers
        .get(USER_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map_or_else(|| ANONYMOUS.to_owned(), |v| v.chars().take(128).collect())
}

async fn pin(
    State(s): State<HistoryState>,
    headers: HeaderMap,
    Json(req): Json<PinRequest>,
) -> Response {
    let by = caller(&headers);
    match s
        .history
        .pin(&req.cluster, &req.version, &by, &s.audit)
        .await
    {
        Ok(record) => {
            info!(cluster = %record.cluster, version = %record.version, by = %by, "cluster pinned");
            Json(record).into_response()
        }
        Err(e) => error(e),
    }
}

async fn unpin(
    State(s): State<HistoryState>,
    headers: HeaderMap,
    Json(req): Json<UnpinRequest>,
) -> Response {
    let by = caller(&headers);
    match s.history.unpin(&req.cluster, &by, &s.audit).await {
        Ok(record) => {
            info!(cluster = %record.cluster, version = %record.version, by = %by, "cluster unpinned");
            Json(record).into_response()
        }
        Err(e) => error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caller_is_the_user_header_or_the_admin_port() {
        let mut h = HeaderMap::new();
        assert_eq!(caller(&h), ANONYMOUS);
        h.insert(USER_HEADER, " ".parse().unwrap());
        assert_eq!(caller(&h), ANONYMOUS);
        h.insert(USER_HEADER, "alice".parse().unwrap());
        assert_eq!(caller(&h), "alice");
        h.insert(USER_HEADER, "x".repeat(500).parse().unwrap());
        assert_eq!(caller(&h).len(), 128, "bounded");
    }
}

//! `GET /debug/logging` → `{"filter": "..."}`; `PUT /debug/logging` with
//! `{"filter": "info,meshhub::pipeline=debug"}` (replaces the filter) or
//! `{"modules": {"meshhub::pipeline": "debug"}}` (sets those modules,
//! keeps the rest) → the new filter, or 400 with the parser's message.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use meshhub_api::ErrorView;
use tracing::info;

use super::DebugState;
use crate::logging::LogControl;

pub use meshhub_api::logging::{LogChange, LogLevels};

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(ErrorView { error: message })).into_response()
}

fn control(s: &DebugState) -> Option<&LogControl> {
    s.log.as_ref()
}

fn not_controllable() -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "log levels are not controllable: this process did not install meshhub's logging"
            .to_owned(),
    )
}

pub(super) async fn get(State(s): State<DebugState>) -> Response {
    match control(&s) {
        Some(c) => Json(LogLevels { filter: c.filter() }).into_response(),
        None => not_controllable(),
    }
}

pub(super) async fn put(
    State(s): State<DebugState>,
    body: Result<Json<LogChange>, JsonRejection>,
) -> Response {
    let Some(c) = control(&s) else {
        return not_controllable();
    };
    let change = match body {
        Ok(Json(change)) => change,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "expected {{\"filter\": \"info,meshhub=debug\"}} or {{\"modules\": {{\"meshhub::pipeline\": \"debug\"}}}}: {}",
                    e.body_text()
                ),
            );
        }
    };
    let before = c.filter();
    let result = match (change.filter, change.modules.is_empty()) {
        (Some(f), true) => c.set(&f).map(|()| f),
        (None, false) => c.set_modules(&change.modules),
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "give exactly one of `filter` and `modules`".to_owned(),
            );
        }
    };
    match result {
        Ok(filter) => {
            info!(log.before = %before, log.filter = %filter, "log filter changed");
            Json(LogLevels { filter }).into_response()
        }
        Err(e) => error(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

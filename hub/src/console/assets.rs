//! The console's script and style sheet, compiled into the binary
//! (clusters have no internet: nothing is loaded from elsewhere).

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::layout::secure;

/// `console.js`.
pub const SCRIPT: &str = include_str!("assets/console.js");
/// `console.css`.
pub const STYLE: &str = include_str!("assets/console.css");

/// `GET /console/assets/{file}`.
pub async fn get(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "console.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "console.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    };
    let mut r = ([(header::CONTENT_TYPE, kind)], body).into_response();
    r = secure(r);
    // The assets change only with the binary: revalidated, never stale.
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    r
}

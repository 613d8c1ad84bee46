//! Protection of the admin port's state-changing endpoints.
//!
//! With a token file configured, they require `Authorization: Bearer
//! <token>` (the file is read on every request, so a rotated token applies
//! at once). Without one, they answer only while the admin port listens on
//! loopback; on any other address they are refused with 403 and a message
//! saying how to enable the token. Read-only endpoints are not guarded.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tracing::warn;

/// How the admin port's state-changing endpoints are protected.
#[derive(Clone, Debug)]
pub struct AdminAuth {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    token_file: Option<PathBuf>,
    listen: SocketAddr,
}

/// Why a request is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization: Bearer` header.
    Missing,
    /// A token that is not the configured one.
    Wrong,
    /// No token configured and the port is not on loopback.
    Unprotected(SocketAddr),
    /// The token file can't be read.
    TokenFile(String),
    /// Without a token, a request a browser sent from another site's page
    /// (its `Origin` is not the admin port's own, or `Sec-Fetch-Site`
    /// says so), or to a name that is not loopback (DNS rebinding).
    CrossOrigin,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Self::Missing => (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "unauthorized: this endpoint requires `Authorization: Bearer <token>` (the admin token file's content)\n",
            )
                .into_response(),
            Self::Wrong => (StatusCode::FORBIDDEN, "forbidden: wrong admin token\n").into_response(),
            Self::Unprotected(addr) => (
                StatusCode::FORBIDDEN,
                format!(
                    "forbidden: the admin port listens on {addr}, not loopback, and no admin token is configured; \
                     set --admin-token-file (env MESHHUB_ADMIN_TOKEN_FILE) to enable state-changing endpoints\n"
                ),
            )
                .into_response(),
            Self::CrossOrigin => (
                StatusCode::FORBIDDEN,
                "forbidden: without an admin token, state-changing requests are taken only from this machine \
                 (a loopback Host, and from a browser only its own pages: Origin); set --admin-token-file\n",
            )
                .into_response(),
            Self::TokenFile(message) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("can't check the admin token: {message}\n"),
            )
                .into_response(),
        }
    }
}

impl AdminAuth {
    /// Protection for an admin port bound to `listen`, with an optional
    /// token file. Warns when `listen` is not loopback and there is no
    /// token: state-changing endpoints will refuse every request.
    pub fn new(token_file: Option<PathBuf>, listen: SocketAddr) -> Self {
        if token_file.is_none() && !listen.ip().is_loopback() {
            warn!(
                admin.addr = %listen,
                "the admin port is not on loopback and has no token: its state-changing endpoints are refused; set --admin-token-file to enable them"
            );
        }
        Self {
            inner: Arc::new(Inner { token_file, listen }),
        }
    }

    /// Whether a request with `headers` may change state. Without a token
    /// (loopback only), a browser is the danger: any page the operator
    /// opens could post to the admin port (cross-site request forgery), or
    /// reach it under a name of its own that resolves to 127.0.0.1 (DNS
    /// rebinding) — so the request must name a loopback host and, from a
    /// browser, come from the port's own page. A token is never sent by a
    /// browser on its own (the console keeps it in the tab, not in a
    /// cookie): with one, the token decides.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let Some(path) = &self.inner.token_file else {
            if !self.inner.listen.ip().is_loopback() {
                return Err(Refusal::Unprotected(self.inner.listen));
            }
            if !loopback_host(headers) || cross_origin(headers) {
                return Err(Refusal::CrossOrigin);
            }
            return Ok(());
        };
        let expected = std::fs::read_to_string(path)
            .map_err(|e| Refusal::TokenFile(format!("{}: {e}", path.display())))?;
        let expected = expected.trim();
        if expected.is_empty() {
            return Err(Refusal::TokenFile(format!("{} is empty", path.display())));
        }
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(Refusal::Missing)?;
        if same(given.as_bytes(), expected.as_bytes()) {
            Ok(())
        } else {
            Err(Refusal::Wrong)
        }
    }

    /// `router` with every route guarded by [`require_local_host`]: what a
    /// browser's read-only pages are wrapped in.
    pub fn local_pages<S>(&self, router: Router<S>) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        router.route_layer(middleware::from_fn_with_state(
            self.clone(),
            require_local_host,
        ))
    }

    /// `router` with every route guarded by [`require_admin`]: what every
    /// state-changing admin endpoint is wrapped in.
    pub fn protect<S>(&self, router: Router<S>) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        router.route_layer(middleware::from_fn_with_state(self.clone(), require_admin))
    }
}

/// Whether a browser sent the request from another origin's page: its
/// `Sec-Fetch-Site` says `cross-site`/`same-site`, or its `Origin` names
/// another host and port than the `Host` it was sent to (`Origin: null`,
/// a sandboxed page or a file, too). Clients that are not browsers send
/// neither header.
fn cross_origin(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if matches!(text("sec-fetch-site"), Some("cross-site" | "same-site")) {
        return true;
    }
    let Some(origin) = text(header::ORIGIN.as_str()) else {
        return false;
    };
    let Some((_, authority)) = origin.split_once("://") else {
        return true;
    };
    // Without a Host (HTTP/2's :authority) there is nothing to compare:
    // browsers speak HTTP/1.1 to a plaintext port and always send one.
    text(header::HOST.as_str())
        .is_some_and(|host| !authority.trim_end_matches('/').eq_ignore_ascii_case(host))
}

/// Whether the request's `Host` (when it has one) names this machine:
/// `localhost` or a loopback address, with or without a port.
pub fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let name = match host.strip_prefix('[') {
        // `[::1]:9902`
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The axum middleware for the read-only routes a browser opens (the
/// console): on a loopback admin port, a request to a name that is not
/// loopback is refused — a page of another site that made its own name
/// resolve to 127.0.0.1 (DNS rebinding) can't read them.
pub async fn require_local_host(
    State(auth): State<AdminAuth>,
    req: Request,
    next: Next,
) -> Response {
    if auth.inner.listen.ip().is_loopback() && !loopback_host(req.headers()) {
        return Refusal::CrossOrigin.into_response();
    }
    next.run(req).await
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The axum middleware: passes the request on when [`AdminAuth::check`]
/// allows it, answers 401/403 otherwise.
pub async fn require_admin(State(auth): State<AdminAuth>, req: Request, next: Next) -> Response {
    match auth.check(req.headers()) {
        Ok(()) => next.run(req).await,
        Err(refusal) => refusal.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(token: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(t) = token {
            h.insert(
                header::AUTHORIZATION,
                format!("Bearer {t}").parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn loopback_without_token_is_open_elsewhere_refused() {
        let local = AdminAuth::new(None, "127.0.0.1:1".parse().unwrap());
        assert_eq!(local.check(&headers(None)), Ok(()));
        let any = AdminAuth::new(None, "0.0.0.0:1".parse().unwrap());
        assert!(matches!(
            any.check(&headers(None)),
            Err(Refusal::Unprotected(_))
        ));
    }

    #[test]
    fn a_browser_request_from_another_site_is_refused_even_on_loopback() {
        let local = AdminAuth::new(None, "127.0.0.1:1".parse().unwrap());
        let with = |pairs: &[(&'static str, &str)]| {
            let mut h = headers(None);
            for (k, v) in pairs {
                h.insert(*k, v.parse().unwrap());
            }
            local.check(&h)
        };
        // The console's own page.
        assert_eq!(
            with(&[
                ("host", "127.0.0.1:8081"),
                ("origin", "http://127.0.0.1:8081")
            ]),
            Ok(())
        );
        assert_eq!(with(&[("sec-fetch-site", "same-origin")]), Ok(()));
        // Another site's page.
        assert_eq!(
            with(&[
                ("host", "127.0.0.1:8081"),
                ("origin", "https://evil.example")
            ]),
            Err(Refusal::CrossOrigin)
        );
        assert_eq!(
            with(&[
                ("host", "127.0.0.1:8081"),
                ("origin", "http://127.0.0.1:9999")
            ]),
            Err(Refusal::CrossOrigin)
        );
        assert_eq!(
            with(&[("host", "127.0.0.1:8081"), ("origin", "null")]),
            Err(Refusal::CrossOrigin)
        );
        assert_eq!(
            with(&[("sec-fetch-site", "cross-site")]),
            Err(Refusal::CrossOrigin)
        );
    }

    #[test]
    fn with_a_token_the_token_decides() {
        let dir = tempfile_dir("origin");
        let file = dir.join("token");
        std::fs::write(&file, "s3cret").unwrap();
        let auth = AdminAuth::new(Some(file), "0.0.0.0:1".parse().unwrap());
        let mut h = headers(Some("s3cret"));
        // Behind a proxy that rewrites Host.
        h.insert("host", "meshhub.internal".parse().unwrap());
        h.insert("origin", "https://console.example".parse().unwrap());
        assert_eq!(auth.check(&h), Ok(()));
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn tempfile_dir(label: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("meshhub-auth-{label}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_token_file_requires_its_token() {
        let dir = std::env::temp_dir().join(format!("meshhub-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "s3cret\n").unwrap();
        let auth = AdminAuth::new(Some(file.clone()), "0.0.0.0:1".parse().unwrap());
        assert_eq!(auth.check(&headers(None)), Err(Refusal::Missing));
        assert_eq!(auth.check(&headers(Some("nope"))), Err(Refusal::Wrong));
        assert_eq!(auth.check(&headers(Some("s3cret"))), Ok(()));
        // Rotated: the new token applies at once.
        std::fs::write(&file, "other").unwrap();
        assert_eq!(auth.check(&headers(Some("s3cret"))), Err(Refusal::Wrong));
        assert_eq!(auth.check(&headers(Some("other"))), Ok(()));
        std::fs::remove_dir_all(dir).unwrap();
    }
}

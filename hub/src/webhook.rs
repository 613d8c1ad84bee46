//! The validating admission webhook (Galley's webhook role): the API server
//! posts `admission.k8s.io/v1` AdmissionReviews over HTTPS (HTTP/1.1 or
//! h2) and meshhub answers with the same checks its sources apply
//! ([`review`]), so that an object the hub would reject never gets into
//! the cluster in the first place.
//!
//! * Only HTTPS: the API server calls webhooks over TLS alone. The serving
//!   certificate is re-read when its files change (a watch on their
//!   directories, a periodic check as a safety net, and SIGHUP); a new pair
//!   that does not load is reported and the current one kept: the engine's
//!   [`ReloadingServerTls`], as on the gRPC ports (port `webhook` in its
//!   metrics), offering HTTP/2 and HTTP/1.1.
//! * Answers: CREATE and UPDATE of a kind meshhub knows are checked; a
//!   refusal is `allowed: false` with status 422 and meshhub's messages,
//!   each naming the field. Everything else (DELETE, unknown kinds,
//!   subresources) is allowed. A body that is not an AdmissionReview gets
//!   HTTP 400 with the reason. The request's uid is always echoed.
//! * Metrics: [`METRIC_REQUESTS`] by `kind` and `allowed`, and
//!   [`METRIC_DURATION`]. Each denial is logged with the object and reason.
//! * Shutdown: the accept loop and every connection end with the hub's
//!   token (connections finish their request in flight first).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use meshhub_mcp::tls::reload::{ALPN_H2_HTTP1, ReloadingServerTls, TlsLoadError};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, debug, info, info_span, warn};

pub mod review;
pub mod spec;

#[cfg(test)]
mod tests;

pub use review::{Decision, ReviewError, Validator};
pub use spec::{RawWebhook, WebhookSpec};

/// Counter: reviews answered, by `kind` and `allowed` (`true`, `false`, or
/// `error` for a body that is not an AdmissionReview).
pub const METRIC_REQUESTS: &str = "meshhub_webhook_requests_total";
/// Histogram: time to answer a review, in seconds.
pub const METRIC_DURATION: &str = "meshhub_webhook_request_duration_seconds";
/// The webhook's name in the TLS metrics (`port` label of
/// `meshhub_tls_certificate_reloads_total` and
/// `meshhub_tls_certificate_expiry_timestamp_seconds`).
pub const TLS_PORT: &str = "webhook";

/// Largest AdmissionReview accepted: an object and its old version, each
/// up to etcd's 1.5 MiB, with room for JSON overhead.
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The listen address can't be bound.
    #[error("can't listen on {addr} (webhook)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The serving certificate can't be loaded.
    #[error("webhook certificate")]
    Cert(#[from] TlsLoadError),
}

/// A bound webhook, not yet serving.
#[derive(Debug)]
pub struct Webhook {
    listener: TcpListener,
    addr: SocketAddr,
    path: String,
    tls: Arc<ReloadingServerTls>,
    validator: Validator,
}

/// Binds the webhook's port and loads its certificate.
pub async fn bind(spec: &WebhookSpec, validator: Validator) -> Result<Webhook, WebhookError> {
    let tls = ReloadingServerTls::load_with_alpn(TLS_PORT, spec.tls_files(), ALPN_H2_HTTP1)?;
    let listener = TcpListener::bind(spec.addr)
        .await
        .map_err(|source| WebhookError::Bind {
            addr: spec.addr,
            source,
        })?;
    let addr = listener.local_addr().unwrap_or(spec.addr);
    Ok(Webhook {
        listener,
        addr,
        path: spec.path.clone(),
        tls,
        validator,
    })
}

impl Webhook {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Starts serving on `tasks` until `shutdown`: the accept loop, one
    /// task per connection, and the certificate watcher (which also
    /// re-reads the files on every message of `reload`).
    pub fn spawn(
        self,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
        reload: mpsc::Receiver<()>,
    ) {
        let span = info_span!("webhook", listen.addr = %self.addr);
        tasks.spawn(
            self.tls
                .clone()
                .watch(reload, shutdown.clone())
                .instrument(span.clone()),
        );
        let app = router(&self.path, self.validator);
        tasks.spawn(
            accept_loop(self.listener, self.tls, app, tasks.clone(), shutdown).instrument(span),
        );
    }
}

/// The webhook's routes: `POST <path>`.
pub fn router(path: &str, validator: Validator) -> Router {
    Router::new()
        .route(path, post(handle))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(Arc::new(validator))
}

async fn handle(State(validator): State<Arc<Validator>>, body: Bytes) -> Response {
    let started = Instant::now();
    let response = match validator.review(&body) {
        Ok(d) => {
            let allowed = if d.allowed { "true" } else { "false" };
            metrics::counter!(METRIC_REQUESTS, "kind" => d.kind.clone(), "allowed" => allowed)
                .increment(1);
            if d.allowed {
                debug!(uid = %d.uid, operation = %d.operation, object.kind = %d.kind, object.name = %d.object, warnings = d.warnings.len(), "admitted");
            } else {
                info!(uid = %d.uid, operation = %d.operation, object.kind = %d.kind, object.name = %d.object, reason = %d.message(), "denied");
            }
            (StatusCode::OK, axum::Json(d.to_json())).into_response()
        }
        Err(e) => {
            metrics::counter!(METRIC_REQUESTS, "kind" => "", "allowed" => "error").increment(1);
            warn!(error = %e, "malformed AdmissionReview");
            (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                format!("{e}\n"),
            )
                .into_response()
        }
    };
    metrics::histogram!(METRIC_DURATION).record(started.elapsed().as_secs_f64());
    response
}

async fn accept_loop(
    listener: TcpListener,
    tls: Arc<ReloadingServerTls>,
    app: Router,
    tasks: TaskTracker,
    shutdown: CancellationToken,
) {
    info!("webhook serving");
    loop {
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: pause, go on.
                    warn!(error = %e, "accept failed");
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                    }
                }
            },
        };
        // The configuration current now: a reloaded certificate serves
        // from the next handshake on.
        let acceptor = TlsAcceptor::from(tls.current());
        tasks.spawn(
            connection(tcp, acceptor, app.clone(), shutdown.clone())
                .instrument(info_span!("connection", peer.addr = %peer)),
        );
    }
    debug!("webhook stopped accepting");
}

async fn connection(
    tcp: TcpStream,
    acceptor: TlsAcceptor,
    app: Router,
    shutdown: CancellationToken,
) {
    let tls = tokio::select! {
        _ = shutdown.cancelled() => return,
        r = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)) => match r {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                debug!(error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                debug!("TLS handshake timed out");
                return;
            }
        },
    };
    let builder = auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(TokioIo::new(tls), TowerToHyperService::new(app));
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        debug!(error = %e, "connection ended with an error");
    }
}

//! The validating admission webhook (Galley's webhook role): the API server
//! posts `admission.k8s.io/v1` AdmissionReviews over HTTPS (HTTP/1.1 or
//! h2) and meshhub answers with the same checks its sources apply
//! ([`review`]), so that an object the hub would reject never gets into
//! the cluster in the first place.
//!
//! * Only HTTPS: the API server calls webhooks over TLS alone. The serving
//!   certificate is re-read when its files change (a watch on their
//!   directories, a periodic check as a safety net, and SIGHUP); a new pair
//!   that does not load is reported and the current one kept ([`certs`]).
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
use notify::{RecursiveMode, Watcher as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, debug, info, info_span, warn};

use crate::config::WebhookSpec;

pub mod certs;
pub mod review;

#[cfg(test)]
mod tests;

pub use certs::{CertError, ReloadingCert};
pub use review::{Decision, ReviewError, Validator};

/// Counter: reviews answered, by `kind` and `allowed` (`true`, `false`, or
/// `error` for a body that is not an AdmissionReview).
pub const METRIC_REQUESTS: &str = "meshhub_webhook_requests_total";
/// Histogram: time to answer a review, in seconds.
pub const METRIC_DURATION: &str = "meshhub_webhook_request_duration_seconds";
/// Counter: certificate reloads, by `result` (`replaced`, `error`).
pub const METRIC_CERT_RELOADS: &str = "meshhub_webhook_certificate_reloads_total";

/// Largest AdmissionReview accepted: an object and its old version, each
/// up to etcd's 1.5 MiB, with room for JSON overhead.
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long file changes are gathered before the certificate is re-read
/// (cert-manager writes the certificate and the key one after the other).
const CERT_SETTLE: Duration = Duration::from_millis(200);
/// How often the certificate files are checked even without a file event
/// (a watch can miss changes, e.g. on some network file systems).
const CERT_POLL: Duration = Duration::from_secs(60);

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
    Cert(#[from] CertError),
}

/// A bound webhook, not yet serving.
#[derive(Debug)]
pub struct Webhook {
    listener: TcpListener,
    addr: SocketAddr,
    path: String,
    certs: Arc<ReloadingCert>,
    validator: Validator,
}

/// Binds the webhook's port and loads its certificate.
pub async fn bind(spec: &WebhookSpec, validator: Validator) -> Result<Webhook, WebhookError> {
    let certs = Arc::new(ReloadingCert::new(&spec.cert, &spec.key)?);
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
        certs,
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
            watch_certs(self.certs.clone(), reload, shutdown.clone()).instrument(span.clone()),
        );
        let mut tls = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_cert_resolver(self.certs.clone());
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        let app = router(&self.path, self.validator);
        tasks.spawn(
            accept_loop(self.listener, acceptor, app, tasks.clone(), shutdown).instrument(span),
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
    acceptor: TlsAcceptor,
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
        tasks.spawn(
            connection(tcp, acceptor.clone(), app.clone(), shutdown.clone())
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

/// Re-reads the certificate when its files change, every [`CERT_POLL`],
/// and on every message of `reload`, until `shutdown`.
async fn watch_certs(
    certs: Arc<ReloadingCert>,
    mut reload: mpsc::Receiver<()>,
    shutdown: CancellationToken,
) {
    let (cert, key) = certs.files();
    let (tx, mut changes) = mpsc::unbounded_channel();
    // Directories, not files: a Secret volume (and cert-manager's
    // csi-driver) swaps a symlink in the directory instead of writing the
    // file.
    let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let _ = tx.send(res.is_ok());
    });
    let _watcher = match watcher {
        Ok(mut w) => {
            let mut dirs: Vec<&std::path::Path> = [cert, key]
                .iter()
                .map(|p| p.parent().unwrap_or(std::path::Path::new(".")))
                .collect();
            dirs.dedup();
            for dir in dirs {
                if let Err(e) = w.watch(dir, RecursiveMode::NonRecursive) {
                    warn!(dir = %dir.display(), error = %e, "can't watch the certificate directory; checking every {}", humantime::format_duration(CERT_POLL));
                }
            }
            Some(w)
        }
        Err(e) => {
            warn!(error = %e, "can't watch the certificate files; checking every {}", humantime::format_duration(CERT_POLL));
            None
        }
    };
    let mut poll = tokio::time::interval(CERT_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    poll.tick().await;
    let mut due: Option<tokio::time::Instant> = None;
    // The last error reported, so that a bad file is reported once.
    let mut reported: Option<String> = None;
    let mut reload_open = true;
    loop {
        let settle = async {
            match due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(_) = changes.recv() => {
                due.get_or_insert(tokio::time::Instant::now() + CERT_SETTLE);
                continue;
            }
            _ = settle => {}
            _ = poll.tick() => {}
            r = reload.recv(), if reload_open => if r.is_none() {
                reload_open = false;
                continue;
            },
        }
        due = None;
        match certs.reload() {
            Ok(certs::Reloaded::Unchanged) => {
                reported = None;
            }
            Ok(certs::Reloaded::Replaced) => {
                reported = None;
                metrics::counter!(METRIC_CERT_RELOADS, "result" => "replaced").increment(1);
                info!(cert = %cert.display(), "webhook certificate reloaded");
            }
            Err(e) => {
                let message = error_text(&e);
                if reported.as_deref() != Some(&message) {
                    metrics::counter!(METRIC_CERT_RELOADS, "result" => "error").increment(1);
                    warn!(error = %message, "new webhook certificate refused; serving the current one");
                    reported = Some(message);
                }
            }
        }
    }
}

/// An error with its causes, on one line.
fn error_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

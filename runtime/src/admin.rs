//! The admin HTTP port's base: `/healthz` (the process runs), `/readyz`
//! (the process's own honest readiness check), `/metrics` (Prometheus
//! text) and the [`crate::debug`] routes. Each binary merges its own
//! routes (`/status`, ...) onto [`router`] and serves with [`spawn`].

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, error, info_span};

use crate::auth::AdminAuth;
use crate::debug::{self, DebugState};
use crate::lifecycle::Lifecycle;
use crate::port::bind;

/// The readiness check: `Err(why)` while not ready.
pub type Readiness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What the base routes need.
#[derive(Clone)]
pub struct AdminBase {
    /// The readiness check behind `/readyz`.
    pub ready: Readiness,
    /// Prometheus rendering.
    pub metrics: PrometheusHandle,
    /// Introspection.
    pub debug: DebugState,
    /// Protection of state-changing endpoints.
    pub auth: AdminAuth,
    /// Parts of `/metrics` worked out when scraped, after the recorder's
    /// and the process's own ([`crate::metrics::process_section`]).
    pub sections: Vec<crate::metrics::Section>,
}

impl std::fmt::Debug for AdminBase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminBase")
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

/// Who a process is, for [`AdminBase::new`].
#[derive(Debug)]
pub struct Identity {
    /// The binary (`meshhub`).
    pub name: &'static str,
    /// Its version (`env!("CARGO_PKG_VERSION")`).
    pub version: &'static str,
    /// Its configuration as `/debug/process` shows it (no key material,
    /// no tokens).
    pub config: serde_json::Value,
}

impl Identity {
    /// A binary of this workspace (every crate shares the workspace's
    /// version) with its configuration as `/debug/process` shows it.
    pub fn new(name: &'static str, config: serde_json::Value) -> Self {
        Self {
            name,
            version: env!("CARGO_PKG_VERSION"),
            config,
        }
    }
}

impl AdminBase {
    /// The base of an admin port bound to `listen`: readiness by `ready`,
    /// the process-wide recorder, introspection of `who` with the log
    /// control [`crate::logging::init`] installed (if it did), and
    /// [`AdminAuth`] with `token_file`.
    pub fn new(
        ready: Readiness,
        who: Identity,
        token_file: Option<std::path::PathBuf>,
        listen: SocketAddr,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            ready,
            metrics: crate::metrics::prometheus(),
            debug: DebugState {
                log: crate::logging::global(),
                process: Arc::new(debug::ProcessInfo::new(
                    who.name,
                    who.version,
                    option_env!("MESHHUB_GIT_COMMIT"),
                    who.config,
                )),
                profiler: debug::Profiler::default(),
                shutdown,
            },
            auth: AdminAuth::new(token_file, listen),
            sections: Vec::new(),
        }
    }

    /// Adds `section` to what `/metrics` serves.
    pub fn add_metrics(&mut self, section: crate::metrics::Section) {
        self.sections.push(section);
    }
}

/// The base routes.
pub fn router(base: AdminBase) -> Router {
    let debug = debug::router(base.debug.clone(), &base.auth);
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(base)
        .merge(debug)
}

async fn readyz(State(b): State<AdminBase>) -> Response {
    match (b.ready)() {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

async fn metrics(State(b): State<AdminBase>) -> Response {
    let mut text = crate::metrics::Text::default();
    crate::metrics::process_section(
        &mut text,
        (b.ready)().is_ok(),
        b.debug.process.started_unix(),
    );
    for section in &b.sections {
        section(&mut text);
    }
    let mut body = b.metrics.render();
    if !body.is_empty() && !body.ends_with('\n') {
        body.push('\n');
    }
    body.push_str(&text.into_string());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// Serves `router` on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// Spawns the admin server on `listener` and the metrics upkeep, both
/// owned by `life`.
pub fn spawn(life: &Lifecycle, listener: TcpListener, router: Router) {
    let metrics = crate::metrics::prometheus();
    let addr = listener
        .local_addr()
        .map_or_else(|_| "-".to_owned(), |a: SocketAddr| a.to_string());
    let shutdown = life.shutdown.clone();
    life.tasks.spawn(
        async move {
            if let Err(e) = serve(listener, router, shutdown).await {
                error!(error = %e, "admin server failed");
            }
        }
        .instrument(info_span!("admin", listen.addr = %addr)),
    );
    life.tasks
        .spawn(crate::metrics::upkeep(metrics, life.shutdown.clone()));
}

/// A bound admin port: its listener, the address it got (the one asked
/// for, with the port the OS chose for `:0`) and the token file guarding
/// its state-changing endpoints. The hub and the agent open theirs alike.
#[derive(Debug)]
pub struct AdminPort {
    listener: TcpListener,
    addr: SocketAddr,
    token_file: Option<std::path::PathBuf>,
}

impl AdminPort {
    /// Binds `listen`, with `token_file` for [`AdminAuth`].
    pub async fn bind(
        listen: SocketAddr,
        token_file: Option<std::path::PathBuf>,
    ) -> Result<Self, crate::port::PortError> {
        let listener = bind("admin", listen).await?;
        let addr = listener.local_addr().unwrap_or(listen);
        Ok(Self {
            listener,
            addr,
            token_file,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base of its router: readiness by `ready`, introspection of
    /// `who`, authorization with its token file.
    pub fn base(&self, ready: Readiness, who: Identity, shutdown: CancellationToken) -> AdminBase {
        AdminBase::new(ready, who, self.token_file.clone(), self.addr, shutdown)
    }

    /// Serves `router` on it, owned by `life` ([`spawn`]).
    pub fn serve(self, life: &Lifecycle, router: Router) {
        spawn(life, self.listener, router);
    }
}

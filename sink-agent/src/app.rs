//! Builds and runs the agent from a [`Config`]: the persistent [`Store`]
//! (loaded and published first), the local re-serve gRPC port
//! (`ResourceSource`, ADS, `grpc.health.v1`), the way configuration comes in
//! (push: a `ResourceSink` server the hub dials; pull: a sink client dialing
//! the hub's `ResourceSource`) and the admin HTTP port.
//!
//! Shutdown is designed: one [`CancellationToken`] ends every stream (each
//! with `UNAVAILABLE`), both gRPC servers, the pull client and the admin
//! server; a [`TaskTracker`] owns every task and [`Agent::shutdown`] waits
//! for them at most the grace period.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use meshhub_mcp::ads::{AdsServer, TypeMap};
use meshhub_mcp::cache::{self, Group, SnapshotCache};
use meshhub_mcp::group::{GroupIndex, SingleGroup};
use meshhub_mcp::ledger::Ledger;
use meshhub_mcp::limits::{Limits, StreamLimitLayer};
use meshhub_mcp::sink::client::{self as sink_client, SourceTarget};
use meshhub_mcp::sink::server::SinkServer;
use meshhub_mcp::sink::{SinkCollection, SinkConfig};
use meshhub_mcp::source::server::{Shared, SourceServer};
use meshhub_mcp::source::{IncrementalPolicy, SourceConfig};
use meshhub_mcp::tls::reload::{ReloadingServerTls, TlsLoadError};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::SinkNode;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::Endpoint;
use tonic_health::ServingStatus;
use tracing::{Instrument as _, error, info, info_span, warn};

use crate::admin::{self, AdminState};
use crate::apply::{Applier, ApplierError, ApplyStatus};
use crate::config::{Config, Mode, SinkTls};
use crate::store::{Store, StoreConfig, StoreError, StoreStatus};

/// How long a pull-mode dial may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A listen address can't be bound.
    #[error("can't listen on {addr} ({what})")]
    Bind {
        /// Which port (`sink`, `grpc`, `admin`).
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The data directory can't be opened.
    #[error("can't open the store")]
    Store(#[from] StoreError),
    /// The hub URL is not usable (checked in config; kept for safety).
    #[error("hub URL {url:?}")]
    HubUrl {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
    /// A server port's TLS files don't load (checked in config; they may
    /// have changed since).
    #[error("{what} TLS")]
    Tls {
        /// Which port (`sink`, `grpc`).
        what: &'static str,
        /// Why.
        #[source]
        source: TlsLoadError,
    },
    /// The hub's TLS files can't be read (pull mode).
    #[error("hub TLS")]
    HubTls(#[source] meshhub_mcp::tls::TlsError),
    /// The applier's Kubernetes client can't be configured.
    #[error("apply")]
    Applier(#[source] ApplierError),
    /// Waiting for a signal failed.
    #[error("can't wait for shutdown signals")]
    Signal(#[source] std::io::Error),
}

/// A running agent.
pub struct Agent {
    sink_addr: Option<SocketAddr>,
    grpc_addr: SocketAddr,
    admin_addr: SocketAddr,
    store: Arc<Store>,
    ledger: Ledger,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    grace: Duration,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("sink_addr", &self.sink_addr)
            .field("grpc_addr", &self.grpc_addr)
            .field("admin_addr", &self.admin_addr)
            .finish_non_exhaustive()
    }
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, RunError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| RunError::Bind { what, addr, source })
}

impl Agent {
    /// Binds every port, loads and publishes the persisted state, then
    /// starts receiving from the hub. Returns once the agent is ready.
    pub async fn start(config: Config) -> Result<Self, RunError> {
        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        let kinds = KindTable::builtin();
        let ledger = Ledger::new();
        let metrics = admin::prometheus();
        let group: Group = config.cluster.as_str().into();
        let mode = match config.mode {
            Mode::Push { .. } => "push",
            Mode::Pull { .. } => "pull",
        };

        // Bind everything first: a taken port fails before anything runs.
        let sink_listener = match &config.mode {
            Mode::Push { listen, .. } => Some(bind("sink", *listen).await?),
            Mode::Pull { .. } => None,
        };
        let grpc = bind("grpc", config.grpc_addr).await?;
        let admin_listener = bind("admin", config.admin_addr).await?;
        let sink_addr = sink_listener.as_ref().and_then(|l| l.local_addr().ok());
        let grpc_addr = grpc.local_addr().unwrap_or(config.grpc_addr);
        let admin_addr = admin_listener.local_addr().unwrap_or(config.admin_addr);

        // Admin first, so /healthz answers while a large store loads.
        let (ready_tx, ready_rx) = watch::channel(false);
        let store_status: Arc<OnceLock<watch::Receiver<Arc<StoreStatus>>>> =
            Arc::new(OnceLock::new());
        let apply_status: Arc<OnceLock<Option<watch::Receiver<Arc<ApplyStatus>>>>> =
            Arc::new(OnceLock::new());
        let admin_state = AdminState {
            cluster: config.cluster.clone(),
            mode,
            ready: ready_rx.clone(),
            store: store_status.clone(),
            apply: apply_status.clone(),
            ledger: ledger.clone(),
            metrics: metrics.clone(),
        };
        tasks.spawn(
            {
                let shutdown = shutdown.clone();
                async move {
                    if let Err(e) = admin::serve(admin_listener, admin_state, shutdown).await {
                        error!(error = %e, "admin server failed");
                    }
                }
            }
            .instrument(info_span!("admin", listen.addr = %admin_addr)),
        );
        tasks.spawn(admin::upkeep(metrics, shutdown.clone()));

        // Local re-serve: consumers may connect at once; they wait for the
        // first snapshot, which the store publishes as soon as it loaded.
        let (writer, cache) = cache::new();
        let shared = Shared {
            cache: cache.clone(),
            groups: Arc::new(SingleGroup(group.clone())) as Arc<dyn GroupIndex>,
            ledger: ledger.clone(),
            config: Arc::new(SourceConfig {
                incremental: IncrementalPolicy::Always,
                max_response_bytes: config.max_message_bytes,
                ..SourceConfig::default()
            }),
            shutdown: shutdown.clone(),
            tasks: tasks.clone(),
        };
        let type_kinds = kinds.clone();
        let types: TypeMap = Arc::new(move |type_url: &str| {
            type_kinds
                .by_type_url(type_url)
                .map(|k| k.collection().to_owned())
        });
        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_service_status("", ServingStatus::NotServing)
            .await;
        let limits = Limits {
            max_message_bytes: config.max_message_bytes,
            ..Limits::default()
        };
        let router = meshhub_mcp::transport::server_with(&limits)
            .layer(StreamLimitLayer::new(&limits))
            .add_service(health_service)
            .add_service(SourceServer::new(shared.clone()).into_service(config.max_message_bytes))
            .add_service(AdsServer::new(shared, types).into_service(config.max_message_bytes));
        let grpc_tls = server_tls("grpc", config.grpc_tls.as_ref(), &tasks, &shutdown)?;
        tasks.spawn(
            serve_grpc(
                router,
                grpc,
                grpc_tls,
                "grpc",
                tasks.clone(),
                shutdown.clone(),
            )
            .instrument(info_span!("grpc", listen.addr = %grpc_addr)),
        );

        // The applier (opt-in) before the store: the store reconciles the
        // API with what it loaded.
        let applier = match &config.apply {
            Some(apply) => Some(
                Applier::start(apply.clone(), &tasks, shutdown.clone())
                    .await
                    .map_err(RunError::Applier)?,
            ),
            None => None,
        };
        let _ = apply_status.set(applier.as_ref().map(Applier::status));

        // The store: load, publish, then accept changes.
        let store = Arc::new(
            Store::open(
                StoreConfig {
                    data_dir: config.data_dir.clone(),
                    group: group.clone(),
                    collections: config.collections.clone(),
                    kinds: kinds.clone(),
                    applier,
                },
                writer,
            )
            .await?,
        );
        let _ = store_status.set(store.status());

        let sink_config = Arc::new(SinkConfig {
            node: SinkNode {
                id: config.cluster.clone(),
                annotations: HashMap::new(),
            },
            collections: config
                .collections
                .iter()
                .map(|c| SinkCollection {
                    name: c.clone(),
                    incremental: config.incremental,
                })
                .collect(),
        });
        match &config.mode {
            Mode::Push { tls, .. } => {
                let listener = sink_listener.unwrap_or_else(|| unreachable!("bound for push"));
                let service = SinkServer::new(
                    store.clone(),
                    sink_config,
                    ledger.clone(),
                    shutdown.clone(),
                    tasks.clone(),
                );
                let service = match &config.sink_allowed_identities {
                    Some(allowed) => service.allow_only(allowed.clone()),
                    None => service,
                }
                .into_service(config.max_message_bytes);
                let tls = server_tls("sink", tls.as_ref(), &tasks, &shutdown)?;
                let router = meshhub_mcp::transport::server_with(&limits)
                    .layer(StreamLimitLayer::new(&limits))
                    .add_service(service);
                let span = info_span!("sink", listen.addr = %sink_addr.map_or_else(String::new, |a| a.to_string()));
                tasks.spawn(
                    serve_grpc(
                        router,
                        listener,
                        tls,
                        "sink",
                        tasks.clone(),
                        shutdown.clone(),
                    )
                    .instrument(span),
                );
            }
            Mode::Pull { hub_url, tls } => {
                let mut endpoint = Endpoint::from_shared(hub_url.clone())
                    .map_err(|source| RunError::HubUrl {
                        url: hub_url.clone(),
                        source,
                    })?
                    .connect_timeout(CONNECT_TIMEOUT);
                if let Some(tls) = tls {
                    let config = tls.client_config().map_err(RunError::HubTls)?;
                    endpoint = endpoint
                        .tls_config(config)
                        .map_err(|source| RunError::HubUrl {
                            url: hub_url.clone(),
                            source,
                        })?;
                }
                let target = SourceTarget {
                    name: "hub".to_owned(),
                    endpoint,
                    config: sink_config,
                    reconnect: Default::default(),
                    max_message_bytes: config.max_message_bytes,
                };
                tasks.spawn(sink_client::run(
                    target,
                    store.clone(),
                    ledger.clone(),
                    shutdown.clone(),
                ));
            }
        }

        // Ready: the persisted state is published and served.
        let _ = ready_tx.send(true);
        health.set_service_status("", ServingStatus::Serving).await;
        {
            let shutdown = shutdown.clone();
            tasks.spawn(async move {
                shutdown.cancelled().await;
                let _ = ready_tx.send(false);
                health
                    .set_service_status("", ServingStatus::NotServing)
                    .await;
            });
        }
        info!(
            cluster = %config.cluster,
            mode,
            sink.addr = %sink_addr.map_or_else(|| "-".to_owned(), |a| a.to_string()),
            grpc.addr = %grpc_addr,
            admin.addr = %admin_addr,
            data.dir = %config.data_dir.display(),
            collections = config.collections.len(),
            apply = config.apply.is_some(),
            "meshhub-sink-agent started"
        );
        Ok(Self {
            sink_addr,
            grpc_addr,
            admin_addr,
            store,
            ledger,
            shutdown,
            tasks,
            grace: config.shutdown_grace,
        })
    }

    /// The bound `ResourceSink` address (push mode).
    pub fn sink_addr(&self) -> Option<SocketAddr> {
        self.sink_addr
    }

    /// The bound local re-serve address.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// The bound admin address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The store's status.
    pub fn status(&self) -> watch::Receiver<Arc<StoreStatus>> {
        self.store.status()
    }

    /// The published snapshots (read handle).
    pub fn cache(&self) -> &SnapshotCache {
        self.store.cache()
    }

    /// The ACK/NACK ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Stops everything and waits for the tasks, at most the grace period.
    /// Returns whether every task ended in time.
    pub async fn shutdown(self) -> bool {
        self.shutdown.cancel();
        self.tasks.close();
        let done = match tokio::time::timeout(self.grace, self.tasks.wait()).await {
            Ok(()) => {
                info!("meshhub-sink-agent stopped");
                true
            }
            Err(_) => {
                warn!(grace = ?self.grace, tasks = self.tasks.len(), "grace period over; exiting with tasks still running");
                false
            }
        };
        // Dropping the last handle releases the data directory's lock.
        drop(self.store);
        done
    }
}

/// Loads a server port's TLS and follows its files until `shutdown`.
fn server_tls(
    what: &'static str,
    tls: Option<&SinkTls>,
    tasks: &TaskTracker,
    shutdown: &CancellationToken,
) -> Result<Option<Arc<ReloadingServerTls>>, RunError> {
    let Some(tls) = tls else { return Ok(None) };
    let tls = ReloadingServerTls::load(what, tls.files())
        .map_err(|source| RunError::Tls { what, source })?;
    // No nudges: the agent re-reads on file changes and every minute.
    let (_, nudge) = tokio::sync::mpsc::channel(1);
    tasks.spawn(tls.clone().watch(nudge, shutdown.clone()));
    Ok(Some(tls))
}

/// A gRPC server of the agent, with its flow-control layer.
type Router = tonic::transport::server::Router<
    tower::layer::util::Stack<StreamLimitLayer, tower::layer::util::Identity>,
>;

async fn serve_grpc(
    router: Router,
    listener: TcpListener,
    tls: Option<Arc<ReloadingServerTls>>,
    port: &'static str,
    tasks: TaskTracker,
    shutdown: CancellationToken,
) {
    if let Err(e) = meshhub_mcp::listen::serve(router, listener, tls, port, tasks, shutdown).await {
        error!(error = %e, "gRPC server failed");
    }
}

/// Runs the agent until SIGINT or SIGTERM, then shuts down gracefully.
pub async fn run(config: Config) -> Result<(), RunError> {
    let agent = Agent::start(config).await?;
    wait_for_signal().await?;
    info!("shutting down");
    agent.shutdown().await;
    Ok(())
}

async fn wait_for_signal() -> Result<(), RunError> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(RunError::Signal)?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.map_err(RunError::Signal)?,
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await.map_err(RunError::Signal)?;
    Ok(())
}

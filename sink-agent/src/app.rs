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

use meshhub_mcp::cache::{self, Group, SnapshotCache};
use meshhub_mcp::dial::DialSpec;
use meshhub_mcp::group::{GroupIndex, SingleGroup};
use meshhub_mcp::ledger::Ledger;
use meshhub_mcp::limits::StreamLimitLayer;
use meshhub_mcp::sink::client::{self as sink_client, SourceTarget};
use meshhub_mcp::sink::server::SinkServer;
use meshhub_mcp::sink::{SinkCollection, SinkConfig};
use meshhub_mcp::source::server::Shared;
use meshhub_mcp::source::{IncrementalPolicy, SourceConfig};
use meshhub_mcp::tls::reload::{ReloadingServerTls, TlsLoadError};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::SinkNode;
use meshhub_runtime::admin::{AdminPort, Identity};
use meshhub_runtime::grpc::{RESOURCE_SINK, RESOURCE_SOURCE};
use meshhub_runtime::lifecycle::Lifecycle;
use meshhub_runtime::port::PortError;
use meshhub_runtime::port::bind;
use meshhub_runtime::signal::{Signal, Signals};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic_health::ServingStatus;
use tracing::{Instrument as _, error, info, info_span};

use crate::admin::{self, AdminState};
use crate::apply::{Applier, ApplyStatus};
use crate::config::{Config, Mode, SinkTls};
use crate::store::{Store, StoreConfig, StoreError, StoreStatus};
use crate::upward::{self, Upward};

/// How long a pull-mode dial may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A port can't be opened (its address bound, its reflection built).
    #[error(transparent)]
    Port(#[from] PortError),
    /// The data directory can't be opened.
    #[error("can't open the store")]
    Store(#[from] StoreError),
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
    /// The hub can't be dialed (pull mode): its URL (checked in config;
    /// kept for safety) or its TLS files.
    #[error("hub")]
    Hub(#[source] meshhub_mcp::dial::DialError),
    /// The applier's Kubernetes client can't be configured.
    #[error("apply: can't configure the Kubernetes client")]
    Applier(#[source] meshhub_kube::ClientError),
    /// The MCS watcher's Kubernetes client can't be configured.
    #[error("upward.mcs: can't configure the Kubernetes client")]
    Mcs(#[source] meshhub_kube::ClientError),
    /// Waiting for a signal failed.
    #[error("can't wait for shutdown signals")]
    Signal(#[source] std::io::Error),
}

/// A running agent.
#[derive(Debug)]
pub struct Agent {
    sink_addr: Option<SocketAddr>,
    grpc_addr: SocketAddr,
    admin_addr: SocketAddr,
    store: Arc<Store>,
    ledger: Ledger,
    upward: Upward,
    life: Lifecycle,
}

impl Agent {
    /// Binds every port, loads and publishes the persisted state, then
    /// starts receiving from the hub. Returns once the agent is ready.
    pub async fn start(config: Config) -> Result<Self, RunError> {
        let life = Lifecycle::new(config.shutdown_grace);
        let (shutdown, tasks) = life.handles();
        let kinds = KindTable::builtin();
        let ledger = Ledger::new();
        let upward_ledger = Ledger::new();
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
        let admin_port =
            AdminPort::bind(config.admin_addr, config.admin_token_file.clone()).await?;
        let sink_addr = sink_listener.as_ref().and_then(|l| l.local_addr().ok());
        let grpc_addr = grpc.local_addr().unwrap_or(config.grpc_addr);
        let admin_addr = admin_port.addr();

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
            upward: upward_ledger.clone(),
            base: admin_port.base(
                admin::readiness(ready_rx.clone()),
                Identity::new("meshhub-sink-agent", process_config(&config)),
                shutdown.clone(),
            ),
        };
        admin_port.serve(&life, admin::router(admin_state));

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
                request_rate: Some(config.limits.request_rate()),
                ..SourceConfig::default()
            }),
            shutdown: shutdown.clone(),
            tasks: tasks.clone(),
        };
        let limits = config.limits.clone();
        let base = meshhub_runtime::grpc::serving_port(
            shared,
            kinds.clone(),
            &limits,
            config.max_message_bytes,
        )
        .await?;
        let health = base.health;
        let router = base.router;
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
            Some(apply) => {
                let client = apply.connection.client().await.map_err(RunError::Applier)?;
                Some(Applier::start(
                    apply.clone(),
                    client,
                    &tasks,
                    shutdown.clone(),
                ))
            }
            None => None,
        };
        let _ = apply_status.set(applier.as_ref().map(Applier::status));
        let object_statuses = applier.as_ref().map(Applier::object_statuses);

        // The store: load, publish, then accept changes.
        let store = Arc::new(
            Store::open(
                StoreConfig {
                    data_dir: config.data_dir.clone(),
                    data_dir_wait: config.data_dir_wait,
                    group: group.clone(),
                    collections: config.collections.clone(),
                    kinds: kinds.clone(),
                    applier,
                    tasks: tasks.clone(),
                    shutdown: shutdown.clone(),
                },
                writer,
            )
            .await?,
        );
        let _ = store_status.set(store.status());

        // The upward channel: this cluster's state (and its exported
        // Services), for the hub to read.
        let exports = match &config.upward.mcs {
            Some(mcs) => {
                let client = mcs.connection.client().await.map_err(RunError::Mcs)?;
                let (tx, rx) = watch::channel(Arc::new(upward::mcs::Exports::starting()));
                tasks.spawn(
                    upward::mcs::run(mcs.clone(), client, tx, shutdown.clone())
                        .instrument(info_span!("upward.mcs")),
                );
                Some(rx)
            }
            None => None,
        };
        // The cluster's Istio CRDs and its Services, read with the
        // applier's connection.
        let (crds, services) = match &config.apply {
            Some(apply) => {
                let client = apply.connection.client().await.map_err(RunError::Applier)?;
                let (tx, crds) = watch::channel(None);
                tasks.spawn(
                    upward::crds::run(client.clone(), upward::crds::INTERVAL, tx, shutdown.clone())
                        .instrument(info_span!("upward.crds")),
                );
                let (tx, services) = watch::channel(None);
                tasks.spawn(
                    upward::services::run(client, upward::services::INTERVAL, tx, shutdown.clone())
                        .instrument(info_span!("upward.services")),
                );
                (Some(crds), Some(services))
            }
            None => (None, None),
        };
        let upward = Upward::start(
            &config.upward,
            upward::Sources {
                cluster: config.cluster.clone(),
                kinds: kinds.clone(),
                store: store.status(),
                served: store.cache().clone(),
                apply: apply_status.get().cloned().flatten(),
                object_statuses,
                ledger: ledger.clone(),
                exports,
                crds,
                services,
            },
            upward_ledger,
            &tasks,
            shutdown.clone(),
        );

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
        // The sink port's health (push mode).
        let mut sink_health = None;
        match &config.mode {
            Mode::Push { tls, .. } => {
                let listener = sink_listener.unwrap_or_else(|| unreachable!("bound for push"));
                let service = SinkServer::new(
                    store.clone(),
                    sink_config,
                    ledger.clone(),
                    shutdown.clone(),
                    tasks.clone(),
                )
                // One hub pushes a cluster: during a handover between hub
                // replicas the newer stream replaces the older.
                .one_source_at_a_time();
                let service = match &config.sink_allowed_identities {
                    Some(allowed) => service.allow_only(allowed.clone()),
                    None => service,
                }
                .into_service(config.max_message_bytes);
                // The upward channel on the same port: the hubs that may
                // push are the ones that may read.
                let upward_service = upward.service(
                    config.sink_allowed_identities.clone(),
                    config.max_message_bytes,
                    tasks.clone(),
                    shutdown.clone(),
                );
                let tls = server_tls("sink", tls.as_ref(), &tasks, &shutdown)?;
                let base = meshhub_runtime::grpc::base(
                    meshhub_mcp::transport::server_with(&limits)
                        .layer(StreamLimitLayer::new(&limits)),
                    &[RESOURCE_SINK, RESOURCE_SOURCE],
                )
                .await?;
                sink_health = Some(base.health);
                let router = base.router.add_service(service).add_service(upward_service);
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
                let hub = DialSpec {
                    address: hub_url.clone(),
                    tls: tls.clone(),
                    connect_timeout: CONNECT_TIMEOUT,
                    reconnect: Default::default(),
                };
                // TLS files checked now, read again at every connection attempt.
                let target = SourceTarget {
                    name: "hub".to_owned(),
                    endpoint: hub.target().map_err(RunError::Hub)?,
                    config: sink_config,
                    reconnect: hub.reconnect,
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
        let reporters: Vec<_> = std::iter::once(health).chain(sink_health).collect();
        for h in &reporters {
            h.set_service_status("", ServingStatus::Serving).await;
        }
        {
            let shutdown = shutdown.clone();
            tasks.spawn(async move {
                shutdown.cancelled().await;
                let _ = ready_tx.send(false);
                for h in reporters {
                    h.set_service_status("", ServingStatus::NotServing).await;
                }
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
            upward,
            life,
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

    /// The upward channel (what the hub reads about this cluster).
    pub fn upward(&self) -> &Upward {
        &self.upward
    }

    /// Stops everything and waits for the tasks, at most the grace period.
    /// Returns whether every task ended in time.
    pub async fn shutdown(self) -> bool {
        let done = self.life.stop("meshhub-sink-agent").await;
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
    // SIGHUP keeps its default action: the agent has nothing to reload.
    let mut signals = Signals::new(false).map_err(RunError::Signal)?;
    while signals.next().await.map_err(RunError::Signal)? != Signal::Shutdown {}
    Ok(())
}

/// The configuration as `/debug/process` shows it: file paths only (TLS
/// certificates and keys, the kubeconfig, the admin token file), no key
/// material or token to elide.
fn process_config(config: &Config) -> serde_json::Value {
    let debug = |v: &dyn std::fmt::Debug| format!("{v:?}");
    serde_json::json!({
        "cluster": config.cluster,
        "dataDir": config.data_dir,
        "mode": debug(&config.mode),
        "grpcAddr": config.grpc_addr,
        "adminAddr": config.admin_addr,
        "adminTokenFile": config.admin_token_file,
        "collections": config.collections,
        "maxMessageBytes": config.max_message_bytes,
        "incremental": config.incremental,
        "shutdownGrace": debug(&config.shutdown_grace),
        "apply": config.apply.as_ref().map(|a| debug(a)),
        "upward": debug(&config.upward),
    })
}

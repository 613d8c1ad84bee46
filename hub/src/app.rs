//! Builds and runs the hub from a [`Config`]: sources → pipeline (store,
//! debounce, per-group snapshots) → gRPC (`ResourceSource`, ADS,
//! `grpc.health.v1`) and the admin HTTP port.
//!
//! Shutdown is designed: one [`CancellationToken`] ends the sources, the
//! pipeline, every stream and both servers; a [`TaskTracker`] owns every
//! task, and [`Hub::shutdown`] waits for them at most the grace period.
//!
//! With `leaderElection` on, an [`Elector`] campaigns for the Lease and the
//! dialers run only while this replica leads; everything else (sources,
//! both gRPC services, readiness) runs on every replica.

use std::net::SocketAddr;
use std::sync::Arc;

use meshhub_kube::{ClientError, Clients};
use meshhub_mcp::cache::{self, SnapshotCache};
use meshhub_mcp::group::GroupIndex;
use meshhub_mcp::ledger::Ledger;
use meshhub_mcp::source::SourceConfig;
use meshhub_mcp::source::server::Shared;
use meshhub_mcp::tls::reload::{ReloadingServerTls, TlsLoadError};
use meshhub_runtime::admin::{AdminPort, Identity};
use meshhub_runtime::lifecycle::Lifecycle;
use meshhub_runtime::port::PortError;
use meshhub_runtime::port::bind;
use meshhub_runtime::signal::{Signal, Signals};
use tokio::sync::{mpsc, watch};
use tonic_health::ServingStatus;
use tracing::{Instrument as _, error, info, info_span, warn};

use crate::admin::{self, AdminState};
use crate::audit::AuditLog;
use crate::clusters::{self, DialerDeps};
use crate::config::Config;
use crate::groups::{GroupRules, LiveRules};
use crate::history::History;
use crate::history::archive::Archive;
use crate::history::routes::HistoryState;
use crate::history::shared::SharedPins;
use crate::leader::{self, LeaderElectionSpec, LeaderStatus};
use crate::pipeline::{Pipeline, Status};
use crate::reload::{ReloadStatus, Reloader, Trigger};
use crate::rollout::shared::SharedRollout;
use crate::rollout::{self, routes::RolloutState};
use crate::source::Source;
use crate::source::SourceError;
use crate::source::SourceSpec;
use crate::source::file::FileSource;
use crate::source::kube::KubeSource;
use crate::source::mcp::McpSource;
use crate::store::Store;
use crate::validation::{export_check, semantic_check};
use crate::webhook::{Validator, Webhook};
use crate::writeback;

/// Capacity of the channel from the sources to the pipeline.
const EVENT_QUEUE: usize = 64;

/// Why the hub could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A port can't be opened (its address bound, its reflection built).
    #[error(transparent)]
    Port(#[from] PortError),
    /// A source can't be set up (an upstream MCP source's address).
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A Kubernetes client can't be configured (a kubeconfig, a context).
    #[error("{user}: can't configure the Kubernetes client")]
    Kube {
        /// The first feature configured with that connection
        /// (`source <name>`, `leaderElection`).
        user: String,
        /// Why.
        #[source]
        source: ClientError,
    },
    /// The admission webhook can't start (its port, its certificate).
    #[error(transparent)]
    Webhook(#[from] crate::webhook::WebhookError),
    /// The history database can't be opened.
    #[error(transparent)]
    History(#[from] crate::history::HistoryError),
    /// The saved rollout state can't be read (remove the file to start
    /// without it: every cluster is then served its newest version).
    #[error(transparent)]
    RolloutState(#[from] crate::rollout::persist::LoadError),
    /// The metric gates' client can't be set up (its `ca`).
    #[error(transparent)]
    Gates(#[from] crate::rollout::gates::QueryError),
    /// The audit log can't be opened.
    #[error("can't open the audit log")]
    Audit(#[source] std::io::Error),
    /// The gRPC port's TLS files don't load.
    #[error("grpcTls")]
    Tls(#[source] TlsLoadError),
    /// Waiting for a signal failed.
    #[error("can't wait for shutdown signals")]
    Signal(#[source] std::io::Error),
}

/// A running hub.
#[derive(Debug)]
pub struct Hub {
    grpc_addr: SocketAddr,
    admin_addr: SocketAddr,
    webhook_addr: Option<SocketAddr>,
    webhook_reload: Option<mpsc::Sender<()>>,
    tls_reload: Option<mpsc::Sender<()>>,
    cache: SnapshotCache,
    status: watch::Receiver<Arc<Status>>,
    ledger: Ledger,
    reload: mpsc::Sender<Trigger>,
    reload_status: watch::Receiver<Arc<ReloadStatus>>,
    leader: watch::Receiver<LeaderStatus>,
    life: Lifecycle,
}

impl Hub {
    /// Binds both ports and starts every task.
    pub async fn start(config: Config) -> Result<Self, RunError> {
        let life = Lifecycle::new(config.shutdown_grace);
        let (shutdown, tasks) = life.handles();
        let kinds = config.kinds.clone();
        config.validation.log();
        let rules = GroupRules::new(&config.clusters).with_access(config.access.clone());
        crate::groups::warn_about_access(&config.access, &config.clusters);
        // The reloader is the single writer of the clusters configuration;
        // the pipeline, gRPC, the dialers and the admin port follow it.
        let (rules_tx, rules_rx) = watch::channel(rules.clone());
        let (agents_tx, agents_rx) = watch::channel(Arc::new(config.agents.clone()));
        let (labels_tx, labels_rx) = watch::channel(Arc::new(config.cluster_labels.clone()));
        let labels_console = labels_rx.clone();
        let (policy_tx, policy_rx) =
            watch::channel(config.rollout.as_ref().map(|r| r.policy.clone()));
        // The recorder first: what the features set while they are built
        // (a shard's or the leader's gauge at 0) would be lost otherwise.
        let _ = meshhub_runtime::metrics::prometheus();
        let ledger = Ledger::new();

        let grpc_tls = match &config.grpc_tls {
            Some(files) => {
                Some(ReloadingServerTls::load("grpc", files.clone()).map_err(RunError::Tls)?)
            }
            None => None,
        };
        let grpc = bind("grpc", config.grpc_addr).await?;
        let admin_port =
            AdminPort::bind(config.admin_addr, config.admin_token_file.clone()).await?;
        let grpc_addr = grpc.local_addr().unwrap_or(config.grpc_addr);
        let admin_addr = admin_port.addr();
        // The admission webhook: the same checks as the store's.
        let webhook = match &config.webhook {
            Some(spec) => {
                let validator = Validator::new(
                    kinds.clone(),
                    config.unknown_fields,
                    semantic_check(&config.validation.validator),
                );
                Some(crate::webhook::bind(spec, validator).await?)
            }
            None => None,
        };
        let webhook_addr = webhook.as_ref().map(Webhook::addr);

        // Pipeline: the single writer of the store and the snapshot cache.
        let (writer, cache) = cache::new();
        let store = Store::new(
            kinds.clone(),
            rules.clone(),
            config.unknown_fields,
            semantic_check(&config.validation.validator),
        );
        // One Kubernetes client per API server: the sources, leader election
        // and shared pins configured with the same connection share it.
        let mut clients = Clients::default();
        let mut sources: Vec<Box<dyn Source>> = Vec::new();
        // Status write-back: one writer per Kubernetes source that asks.
        let mut status_writers = Vec::new();
        for s in &config.sources {
            sources.push(match s {
                SourceSpec::File(f) => Box::new(FileSource::new(f)),
                SourceSpec::Kubernetes(k) => {
                    let user = format!("source {}", k.name);
                    let client = kube_client(&mut clients, &k.connection, user).await?;
                    let mut source = KubeSource::new(k, &kinds, client.clone());
                    if let Some(spec) = &k.status_write_back {
                        let (feed_tx, feed_rx) = mpsc::channel(crate::source::kube::FEED_QUEUE);
                        source = source.with_feed(feed_tx);
                        status_writers.push((k.name.clone(), spec.clone(), client, feed_rx));
                    }
                    Box::new(source)
                }
                SourceSpec::Mcp(m) => Box::new(McpSource::new(
                    m,
                    &kinds,
                    ledger.clone(),
                    config.limits.max_message_bytes,
                )?),
            });
        }
        // The upward channel: what the clusters report (and the
        // ServiceEntries generated from their exports, a source).
        let (reports_tx, reports_rx) = watch::channel(crate::upward::Reports::default());
        sources.push(Box::new(crate::upward::mcs::McsSource::new(
            reports_rx.clone(),
            agents_rx.clone(),
            ledger.clone(),
        )));
        let (pipeline, status) = Pipeline::new(
            store,
            writer,
            rules.clone(),
            config.debounce,
            sources.iter().map(|s| s.name().to_owned()),
        );
        let mut pipeline = pipeline
            .follow_rules(rules_rx.clone())
            .follow_istio(reports_rx.clone());
        // History and audit log: written off the pipeline's path.
        let audit = match &config.audit {
            Some(spec) => {
                AuditLog::start(spec, &ledger, &tasks, shutdown.clone()).map_err(RunError::Audit)?
            }
            None => AuditLog::disabled(),
        };
        // Leader election and the shared pins talk to one API server.
        let leader_election = match &config.leader_election {
            Some(le) => {
                let user = "leaderElection".to_owned();
                Some((le, kube_client(&mut clients, &le.connection, user).await?))
            }
            None => None,
        };
        let history = match &config.history {
            Some(spec) => {
                // Several replicas share their pins through the Kubernetes
                // API (the leader election's API server and namespace).
                let shared = leader_election
                    .as_ref()
                    .map(|(le, client)| SharedPins::new(client.clone(), &le.namespace));
                // And the versions a rollout or a pin refers to, which a
                // replica started later never built (history/archive.rs).
                let archive = leader_election
                    .as_ref()
                    .map(|(le, client)| Archive::new(client.clone(), &le.namespace));
                Some(History::open(
                    spec,
                    shared,
                    archive,
                    &tasks,
                    shutdown.clone(),
                )?)
            }
            None => None,
        };
        if let Some(h) = &history {
            pipeline = pipeline.record_history(h.clone());
        }
        let mut pipeline = pipeline
            .audit(audit.clone())
            .analyse(config.analysis.clone());
        // Leader election for the dial-out role (off: this replica dials).
        let leader = match &leader_election {
            Some((spec, client)) => leader::spawn(spec, client.clone(), &tasks, shutdown.clone()),
            // The sender is dropped: the value never changes.
            None => watch::channel(LeaderStatus::disabled()).1,
        };
        // The replica that decides the rollout and writes statuses: the
        // leader; with sharded dial-out (no replica dials every cluster),
        // the holder of a Lease of its own (`<leaseName>-rollout`), which
        // hears the clusters other replicas dial through their agents'
        // reports.
        let decider = match &leader_election {
            Some((le, client))
                if le.shards.is_some()
                    && (config.rollout.is_some() || !status_writers.is_empty()) =>
            {
                let spec = LeaderElectionSpec {
                    lease_name: format!("{}-rollout", le.lease_name),
                    shards: None,
                    ..LeaderElectionSpec::clone(le)
                };
                leader::spawn(&spec, client.clone(), &tasks, shutdown.clone())
            }
            _ => leader.clone(),
        };
        // The decider keeps the referenced versions archived.
        if let (Some((le, client)), Some(history)) = (&leader_election, &history) {
            let archive = Archive::new(client.clone(), &le.namespace);
            tasks.spawn(
                crate::history::archive::keep(
                    archive,
                    history.clone(),
                    decider.clone(),
                    shutdown.clone(),
                )
                .instrument(info_span!("history_archive", namespace = %le.namespace)),
            );
        }

        // Staged rollout: the dialed clusters' changes wait for their wave.
        let rollout = match &config.rollout {
            Some(spec) => {
                let clusters = rollout::dialed_clusters(&config.agents, &config.cluster_labels);
                let (mut controller, view) =
                    rollout::Controller::new(spec.policy.clone(), clusters, audit.clone());
                // Metric gates: their own task, so the pipeline never waits
                // on Prometheus.
                let mut gate_answers = None;
                if let Some(p) = &spec.prometheus {
                    let prometheus = rollout::gates::Prometheus::new(p.clone())?;
                    let (gate_tx, gate_rx) = mpsc::channel(16);
                    let (answer_tx, answer_rx) = mpsc::channel(16);
                    tasks.spawn(
                        prometheus
                            .run(gate_rx, answer_tx, shutdown.clone())
                            .instrument(info_span!("rollout_gates", prometheus = %p.url)),
                    );
                    controller = controller.with_gates(gate_tx, p.interval);
                    gate_answers = Some(answer_rx);
                }
                // Configuration checks that a rollout has a history.
                let mut mirrored = None;
                match (&config.history, &history, &leader_election) {
                    // Several replicas: the leader decides and shares its
                    // decisions; the others follow them.
                    (_, Some(history), Some((le, client))) => {
                        let decider = decider.clone();
                        if let Some(spec) = &config.history {
                            let file = rollout::persist::StateFile::in_dir(&spec.dir);
                            if file.exists() {
                                // The ConfigMap is the one truth of
                                // several replicas; a file left by a single
                                // hub is not merged into it.
                                warn!(path = %file.path().display(), configmap = %format!("{}/{}", le.namespace, rollout::shared::CONFIGMAP), "a single hub's rollout state is not read with leaderElection: the replicas share the rollout through the ConfigMap");
                            }
                        }
                        let shared = SharedRollout::new(client.clone(), &le.namespace);
                        let (mirror_tx, mirror_rx) = watch::channel(None);
                        controller = controller.following();
                        tasks.spawn(
                            shared
                                .clone()
                                .publish(controller.states(), decider.clone(), shutdown.clone())
                                .instrument(
                                    info_span!("rollout_share", configmap = %shared.location()),
                                ),
                        );
                        tasks.spawn(
                            shared
                                .clone()
                                .follow(history.clone(), mirror_tx, shutdown.clone())
                                .instrument(
                                    info_span!("rollout_follow", configmap = %shared.location()),
                                ),
                        );
                        mirrored = Some((decider, mirror_rx));
                    }
                    (Some(history_spec), Some(history), None) => {
                        let file = rollout::persist::StateFile::in_dir(&history_spec.dir);
                        if let Some(restored) = rollout::restore(&file, history)? {
                            controller = controller.restoring(restored);
                        }
                        tasks.spawn(
                            file.run(controller.states(), shutdown.clone())
                                .instrument(info_span!("rollout_state")),
                        );
                    }
                    _ => {}
                }
                if let Some(history) = &history {
                    tasks.spawn(
                        rollout::shared::protect_history(
                            controller.states(),
                            history.clone(),
                            shutdown.clone(),
                        )
                        .instrument(info_span!("rollout_history")),
                    );
                }
                let (requests_tx, requests_rx) = mpsc::channel(8);
                pipeline = pipeline
                    .stage_rollouts(controller, ledger.clone(), requests_rx, gate_answers)
                    .follow_reports(reports_rx.clone())
                    .follow_reloads(agents_rx.clone(), labels_rx, policy_rx);
                if let Some((decider, mirrored)) = mirrored {
                    pipeline = pipeline.share_rollouts(decider, mirrored);
                }
                RolloutState {
                    view,
                    requests: Some(requests_tx),
                }
            }
            None => RolloutState {
                view: watch::channel(Arc::new(rollout::View::default())).1,
                requests: None,
            },
        };
        let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
        tasks.spawn(
            pipeline
                .run(events_rx, shutdown.clone())
                .instrument(info_span!("pipeline")),
        );
        for source in sources {
            let name = source.name().to_owned();
            let fut = source.run(events_tx.clone(), shutdown.clone());
            tasks.spawn(async move {
                if let Err(e) = fut.await {
                    // The source's objects stay as last delivered; readiness
                    // stays false if it never synced.
                    error!(source.name = %name, error = %e, "source stopped");
                }
            });
        }
        drop(events_tx);

        // gRPC: ResourceSource, ADS and health, with the transport settings
        // and flow control.
        let shared = Shared {
            cache: cache.clone(),
            groups: Arc::new(LiveRules(rules_rx.clone())) as Arc<dyn GroupIndex>,
            ledger: ledger.clone(),
            config: Arc::new(SourceConfig {
                send_timeout: config.limits.send_timeout,
                request_rate: Some(config.limits.request_rate()),
                ..SourceConfig::default()
            }),
            shutdown: shutdown.clone(),
            tasks: tasks.clone(),
        };
        let base = meshhub_runtime::grpc::serving_port(
            shared,
            kinds.clone(),
            &config.limits,
            config.limits.max_message_bytes,
        )
        .await?;
        let health = base.health;
        {
            let mut status = status.clone();
            let shutdown = shutdown.clone();
            tasks.spawn(async move {
                // Honest readiness over grpc.health.v1, as on /readyz.
                loop {
                    let ready = status.borrow_and_update().ready;
                    let s = if ready {
                        ServingStatus::Serving
                    } else {
                        ServingStatus::NotServing
                    };
                    health.set_service_status("", s).await;
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        r = status.changed() => if r.is_err() { break },
                    }
                }
                health
                    .set_service_status("", ServingStatus::NotServing)
                    .await;
            });
        }
        let router = base.router;
        let tls_reload = grpc_tls.as_ref().map(|tls| {
            let (tx, rx) = mpsc::channel(1);
            tasks.spawn(tls.clone().watch(rx, shutdown.clone()));
            tx
        });
        let serve = meshhub_mcp::listen::serve(
            router,
            grpc,
            grpc_tls.clone(),
            "grpc",
            tasks.clone(),
            shutdown.clone(),
        );
        tasks.spawn(
            async move {
                if let Err(e) = serve.await {
                    error!(error = %e, "gRPC server failed");
                }
            }
            .instrument(info_span!("grpc", listen.addr = %grpc_addr)),
        );

        // Remote clusters: one dialer per agent (on the leader, or on the
        // holder of the cluster's shard); one connection with the upward's.
        let connections = Arc::<meshhub_mcp::dial::Connections>::default();
        tasks.spawn(
            clusters::run(
                agents_rx.clone(),
                leader.clone(),
                DialerDeps {
                    cache: cache.clone(),
                    ledger: ledger.clone(),
                    tasks: tasks.clone(),
                    max_message_bytes: config.limits.max_message_bytes,
                    replica: config.leader_election.as_ref().map(|l| l.identity.clone()),
                    connections: connections.clone(),
                },
                shutdown.clone(),
            )
            .instrument(info_span!("clusters")),
        );

        // The upward channel: one subscriber per agent, on every replica.
        let (updates_tx, updates_rx) = mpsc::channel(64);
        tasks.spawn(
            crate::upward::state::run(
                updates_rx,
                reports_tx,
                audit.clone(),
                export_check(&kinds, config.unknown_fields, &config.validation.validator),
                shutdown.clone(),
            )
            .instrument(info_span!("upward.state")),
        );
        tasks.spawn(
            crate::upward::run(
                agents_rx.clone(),
                crate::upward::UpwardDeps {
                    ledger: ledger.clone(),
                    tasks: tasks.clone(),
                    max_message_bytes: config.limits.max_message_bytes,
                    connections,
                    unserved_retry: crate::upward::UNSERVED_RETRY,
                },
                updates_tx,
                shutdown.clone(),
            )
            .instrument(info_span!("upward")),
        );

        // Status write-back: the objects' distribution into their status.
        for (name, spec, client, feed) in status_writers {
            let inputs = writeback::Inputs {
                status: status.clone(),
                cache: cache.clone(),
                ledger: ledger.clone(),
                agents: agents_rx.clone(),
                reports: reports_rx.clone(),
                leader: leader.clone(),
                writes: decider.clone(),
            };
            info!(source.name = %name, qps = spec.qps.get(), burst = spec.burst.get(), "status write-back on");
            let writer = writeback::Writer::new(&name, &spec, client, inputs, feed);
            tasks.spawn(
                writer
                    .run(shutdown.clone())
                    .instrument(info_span!("status_writeback", source.name = %name)),
            );
        }

        // Reloads of the clusters configuration.
        let (reloader, reload_status) = Reloader::new(
            config.clone(),
            crate::reload::Outputs {
                rules: rules_tx,
                agents: agents_tx,
                labels: labels_tx,
                policy: policy_tx,
            },
        );
        let (reload_tx, reload_rx) = mpsc::channel(4);
        tasks.spawn(
            reloader
                .run(reload_rx, shutdown.clone())
                .instrument(info_span!("reload", config = %config.config_file.display())),
        );

        // Admin HTTP and the metrics upkeep.
        let mut admin_state = AdminState {
            status: status.clone(),
            cache: cache.clone(),
            rules: rules_rx,
            agents: agents_rx,
            reload: reload_status.clone(),
            ledger: ledger.clone(),
            leader: leader.clone(),
            base: admin_port.base(
                admin::readiness(status.clone()),
                Identity::new("meshhub", process_config(&config)),
                shutdown.clone(),
            ),
            kinds: kinds.clone(),
            ads: meshhub_runtime::grpc::ads_types(kinds.clone()),
            history: history.clone(),
            grpc_tls: grpc_tls.as_ref().map(|t| t.status()),
            reports: reports_rx,
        };
        // `/metrics` also says how each cluster this replica dials stands.
        let fleet = admin::fleet::section_of(&admin_state, rollout.view.clone());
        admin_state.base.add_metrics(fleet);
        let console = config.console.then(|| {
            crate::console::ConsoleState::start(
                crate::console::Inputs {
                    admin: admin_state.clone(),
                    rollout: rollout.view.clone(),
                    labels: labels_console,
                    pins: history.as_ref().map(History::pins),
                },
                &tasks,
                shutdown.clone(),
            )
        });
        let history_state = history.map(|history| HistoryState {
            history,
            kinds: kinds.clone(),
            audit,
        });
        let admin_routes =
            crate::admin_routes::routes(admin_state, rollout, history_state, console);
        admin_port.serve(&life, admin_routes);
        let webhook_reload = webhook.map(|w| {
            let (tx, rx) = mpsc::channel(1);
            w.spawn(&tasks, shutdown.clone(), rx);
            tx
        });
        if let Some(embedded) = &config.embedded {
            info!(
                config = %config.config_file.display(),
                "no --config given: serving the example configuration embedded in this binary (examples/meshhub.yaml and its Bookinfo objects), written to a private temporary directory"
            );
            debug_assert!(embedded.config_file() == config.config_file);
        }
        info!(
            grpc.addr = %grpc_addr,
            admin.addr = %admin_addr,
            webhook.addr = webhook_addr.map(tracing::field::display),
            config = %config.config_file.display(),
            "meshhub started"
        );

        Ok(Self {
            grpc_addr,
            admin_addr,
            webhook_addr,
            webhook_reload,
            tls_reload,
            cache,
            status,
            ledger,
            reload: reload_tx,
            reload_status,
            leader,
            life,
        })
    }

    /// The bound gRPC address.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// The bound admin address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// The bound admission webhook address, when the webhook is on.
    pub fn webhook_addr(&self) -> Option<SocketAddr> {
        self.webhook_addr
    }

    /// The snapshot cache (read handle).
    pub fn cache(&self) -> &SnapshotCache {
        &self.cache
    }

    /// The pipeline's status.
    pub fn status(&self) -> watch::Receiver<Arc<Status>> {
        self.status.clone()
    }

    /// The ACK/NACK ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Re-reads the configuration file and applies its clusters, and
    /// re-reads the webhook's and the gRPC port's certificates (what
    /// SIGHUP does). Returns at
    /// once; see [`Hub::reload_status`].
    pub async fn reload(&self) {
        let _ = self.reload.send(Trigger::Forced).await;
        // A reload already queued reads the files anyway.
        for tx in [&self.webhook_reload, &self.tls_reload]
            .into_iter()
            .flatten()
        {
            let _ = tx.try_send(());
        }
    }

    /// The state of configuration reloads.
    pub fn reload_status(&self) -> watch::Receiver<Arc<ReloadStatus>> {
        self.reload_status.clone()
    }

    /// The leader election's state (disabled: never changes).
    pub fn leader(&self) -> watch::Receiver<LeaderStatus> {
        self.leader.clone()
    }

    /// Waits until the hub is ready (every source synced, first snapshots
    /// published).
    pub async fn ready(&self) {
        let mut status = self.status.clone();
        // The sender lives as long as the pipeline; if it ended, give up.
        let _ = status.wait_for(|s| s.ready).await;
    }

    /// Stops everything and waits for the tasks, at most the grace period.
    /// Returns whether every task ended in time.
    pub async fn shutdown(self) -> bool {
        self.life.stop("meshhub").await
    }
}

/// The client of `connection` from `clients`; a failure names `user`, the
/// feature that asked first.
async fn kube_client(
    clients: &mut Clients,
    connection: &meshhub_kube::Connection,
    user: String,
) -> Result<kube::Client, RunError> {
    clients
        .get(connection)
        .await
        .map_err(|source| RunError::Kube { user, source })
}

/// Runs the hub until SIGINT or SIGTERM, then shuts down gracefully.
/// SIGHUP reloads the configuration file.
pub async fn run(config: Config) -> Result<(), RunError> {
    let hub = Hub::start(config).await?;
    wait_for_signal(&hub).await?;
    info!("shutting down");
    hub.shutdown().await;
    Ok(())
}

async fn wait_for_signal(hub: &Hub) -> Result<(), RunError> {
    let mut signals = Signals::new(true).map_err(RunError::Signal)?;
    loop {
        match signals.next().await.map_err(RunError::Signal)? {
            Signal::Shutdown => return Ok(()),
            Signal::Hangup => {
                info!("SIGHUP: reloading the configuration");
                hub.reload().await;
            }
        }
    }
}

/// The configuration as `/debug/process` shows it. It holds file paths
/// only (certificates, keys, the admin token file): no key material or
/// token is in it to elide.
fn process_config(config: &Config) -> serde_json::Value {
    let debug = |v: &dyn std::fmt::Debug| format!("{v:?}");
    serde_json::json!({
        "file": config.config_file,
        "embeddedDefault": config.embedded.is_some(),
        "grpcAddr": config.grpc_addr,
        "adminAddr": config.admin_addr,
        "adminTokenFile": config.admin_token_file,
        "shutdownGrace": debug(&config.shutdown_grace),
        "sources": config.sources.iter().map(|s| debug(s)).collect::<Vec<_>>(),
        "clusters": config.clusters.iter().map(|c| debug(c)).collect::<Vec<_>>(),
        "agents": config.agents.iter().map(|a| debug(a)).collect::<Vec<_>>(),
        "debounce": debug(&config.debounce),
        "unknownFields": debug(&config.unknown_fields),
        "leaderElection": config.leader_election.as_ref().map(|l| debug(l)),
        "webhook": config.webhook.as_ref().map(|w| debug(w)),
    })
}

//! The upward channel: the agent as a `ResourceSource` of its own
//! cluster's state, which the hub subscribes to.
//!
//! Configuration flows down (hub → agent → the cluster's consumers); the
//! only thing that came back was an ACK, and an ACK from the agent says
//! nothing about whether the cluster's istiod took the objects (istiod
//! never NACKs). Here the agent reports up, over the same protocol: one
//! snapshot group (its cluster) with
//!
//! * `meshhub/v1alpha1/clusterstatus`: one resource, the cluster's
//!   [`ClusterStatus`] (per collection what the agent holds and serves, its
//!   local consumers and what each ACKed, the applier's result, and what
//!   the cluster's istiod holds — [`istiod`]);
//! * `meshhub/v1alpha1/serviceexports`: the cluster's exported Services
//!   (KEP-1645 `ServiceExport`, [`mcs`]).
//!
//! In push mode it is served on the sink port, next to `ResourceSink`,
//! with the same TLS and the same `sinkAllowedIdentities`: the hub that may
//! push is the one that may read (anyone else is refused with
//! `PERMISSION_DENIED`). The hub attributes what it reads to the cluster it
//! dialed, and refuses a report naming another one: an agent can only
//! publish for its own cluster.
//!
//! One task ([`run`]) is the single writer of the upward snapshot cache: it
//! rebuilds the report when the store, the applier, istiod's view or the
//! exports change (and every `reportInterval`, for the ledger) and
//! publishes it only when its content changed.

pub mod crds;
pub mod istiod;
pub mod mcs;
pub mod report;
pub mod services;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use meshhub_mcp::authz::AllowList;
use meshhub_mcp::cache::{self, Group, SnapshotCache, SnapshotWriter};
use meshhub_mcp::group::{Consumer, GroupError, GroupIndex};
use meshhub_mcp::ledger::{Ledger, Role};
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
use meshhub_mcp::source::server::{Shared, SourceServer};
use meshhub_mcp::source::service::ResourceSourceService;
use meshhub_mcp::source::{IncrementalPolicy, SourceConfig};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::{Metadata, Resource};
use meshhub_proto::upward::{
    CLUSTER_STATUS, CLUSTER_STATUS_MESSAGE, ClusterStatus, ExportsState, IstiodInstance,
    IstiodView, SERVICE_EXPORT_MESSAGE, SERVICE_EXPORTS, ServiceExport,
};
use prost::Message as _;
use sha2::{Digest as _, Sha256};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, debug, info_span, warn};

use crate::apply::{ApplyStatus, ObjectStatuses};
use crate::store::StoreStatus;

/// Default interval of report rebuilds (the ledger has no change signal).
pub const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// Default interval of istiod checks.
pub const DEFAULT_ISTIOD_INTERVAL: Duration = Duration::from_secs(5);
/// How long one read of istiod's `/debug/configz` may take.
const CONFIGZ_TIMEOUT: Duration = Duration::from_secs(10);

/// Reading istiod's view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IstiodCheck {
    /// istiod's HTTP debug address, as a base URL (`http://host:port`).
    pub debug_url: String,
    /// How often.
    pub interval: Duration,
}

/// Reading istiod's release from its version endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IstiodVersionCheck {
    /// istiod's monitoring address, as a base URL (`http://host:15014`);
    /// `/version` is read there.
    pub url: String,
    /// How often.
    pub interval: Duration,
}

/// The upward channel's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpwardConfig {
    /// How often the report is rebuilt (published only when it changed).
    pub report_interval: Duration,
    /// istiod's view, when configured.
    pub istiod: Option<IstiodCheck>,
    /// istiod's release, when its version endpoint is configured.
    pub istiod_version: Option<IstiodVersionCheck>,
    /// Exported services (KEP-1645), when enabled.
    pub mcs: Option<mcs::McsConfig>,
}

impl Default for UpwardConfig {
    fn default() -> Self {
        Self {
            report_interval: DEFAULT_REPORT_INTERVAL,
            istiod: None,
            istiod_version: None,
            mcs: None,
        }
    }
}

/// What the report task reads; every field is a reader handle.
pub struct Sources {
    /// The cluster.
    pub cluster: String,
    /// The kind table (collections → kinds, for istiod's view).
    pub kinds: KindTable,
    /// The store's status.
    pub store: watch::Receiver<Arc<StoreStatus>>,
    /// What the store serves locally.
    pub served: SnapshotCache,
    /// The applier's status (apply on).
    pub apply: Option<watch::Receiver<Arc<ApplyStatus>>>,
    /// What the cluster's controllers wrote in the status of the applied
    /// Gateway API objects (apply on).
    pub object_statuses: Option<watch::Receiver<Arc<ObjectStatuses>>>,
    /// The agent's ledger (local consumers).
    pub ledger: Ledger,
    /// The cluster's exports and whether they are complete (MCS on).
    pub exports: Option<watch::Receiver<Arc<mcs::Exports>>>,
    /// The cluster's Istio CRDs (apply on).
    pub crds: Option<watch::Receiver<Option<crds::Crds>>>,
    /// The cluster's Services (apply on).
    pub services: Option<watch::Receiver<Option<services::Listed>>>,
}

/// The running upward channel: its cache and the ledger of its streams.
#[derive(Clone, Debug)]
pub struct Upward {
    cache: SnapshotCache,
    ledger: Ledger,
    group: Group,
}

impl Upward {
    /// Starts the report task (and istiod's check) on `tasks`; the hubs'
    /// upward streams are recorded in `ledger`.
    pub fn start(
        config: &UpwardConfig,
        sources: Sources,
        ledger: Ledger,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let (writer, cache) = cache::new();
        let group: Group = sources.cluster.as_str().into();
        let istiod = config.istiod.as_ref().map(|check| {
            let (tx, rx) = watch::channel(None);
            tasks.spawn(
                check_istiod(
                    check.clone(),
                    sources.kinds.clone(),
                    sources.served.clone(),
                    group.clone(),
                    sources.ledger.clone(),
                    tx,
                    shutdown.clone(),
                )
                .instrument(info_span!("upward.istiod", istiod.url = %check.debug_url)),
            );
            rx
        });
        let version = config.istiod_version.as_ref().map(|check| {
            let (tx, rx) = watch::channel(None);
            tasks.spawn(
                check_version(check.clone(), tx, shutdown.clone())
                    .instrument(info_span!("upward.istiod_version", istiod.url = %check.url)),
            );
            rx
        });
        tasks.spawn(
            run(
                config.report_interval,
                sources,
                Watched { istiod, version },
                writer,
                group.clone(),
                shutdown,
            )
            .instrument(info_span!("upward")),
        );
        Self {
            cache,
            ledger,
            group,
        }
    }

    /// The published upward snapshots (read handle).
    pub fn cache(&self) -> &SnapshotCache {
        &self.cache
    }

    /// The ledger of the hub's upward streams.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The `ResourceSource` service of the upward collections, for the
    /// sink port; only identities in `allowed` may subscribe (`None`: any
    /// peer the port lets in).
    pub fn service(
        &self,
        allowed: Option<AllowList>,
        max_message_bytes: usize,
        tasks: TaskTracker,
        shutdown: CancellationToken,
    ) -> ResourceSourceService {
        SourceServer::new(Shared {
            cache: self.cache.clone(),
            groups: Arc::new(HubOnly {
                group: self.group.clone(),
                allowed,
            }),
            ledger: self.ledger.clone(),
            config: Arc::new(SourceConfig {
                incremental: IncrementalPolicy::Always,
                max_response_bytes: max_message_bytes,
                ..SourceConfig::default()
            }),
            shutdown,
            tasks,
        })
        .into_service(max_message_bytes)
    }
}

/// The upward group for the hubs allowed to push (and so to read).
struct HubOnly {
    group: Group,
    allowed: Option<AllowList>,
}

impl GroupIndex for HubOnly {
    fn group(&self, consumer: &Consumer) -> Result<Group, GroupError> {
        match &self.allowed {
            Some(allowed) if !allowed.allows(&consumer.identities) => {
                Err(GroupError::denied(format!(
                    "identity {} may not read this cluster's status (sinkAllowedIdentities)",
                    if consumer.identities.is_empty() {
                        "(none: no client certificate)".to_owned()
                    } else {
                        consumer.identities.join(", ")
                    }
                )))
            }
            _ => Ok(self.group.clone()),
        }
    }
}

/// What the report task reads of the istiod checks.
struct Watched {
    istiod: Option<watch::Receiver<Option<IstiodView>>>,
    version: Option<watch::Receiver<Option<IstiodInstance>>>,
}

/// The report task: the single writer of the upward cache.
async fn run(
    every: Duration,
    mut s: Sources,
    Watched {
        mut istiod,
        mut version,
    }: Watched,
    writer: SnapshotWriter,
    group: Group,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut published: Option<(String, String)> = None;
    loop {
        let store = s.store.borrow_and_update().clone();
        let apply = s.apply.as_mut().map(|a| a.borrow_and_update().clone());
        let object_statuses = s
            .object_statuses
            .as_mut()
            .map(|o| o.borrow_and_update().clone());
        let view = istiod.as_mut().and_then(|i| i.borrow_and_update().clone());
        let release = version.as_mut().and_then(|v| v.borrow_and_update().clone());
        let exports = s.exports.as_mut().map(|e| e.borrow_and_update().clone());
        let crds = s.crds.as_mut().and_then(|c| c.borrow_and_update().clone());
        let services = s
            .services
            .as_mut()
            .and_then(|c| c.borrow_and_update().as_ref().map(services::report));
        let ledger = s.ledger.view();
        let report = report::build(&report::Inputs {
            cluster: &s.cluster,
            store: &store,
            apply: apply.as_deref(),
            object_statuses: object_statuses.as_deref(),
            ledger: &ledger,
            istiod: view.as_ref(),
            istiod_version: release.as_ref(),
            crds: crds.as_ref(),
        });
        // Not held across the wait below: the applier's next change to
        // what it holds would otherwise copy all of it (`Arc::make_mut`).
        drop(object_statuses);
        drop(apply);
        let held = exports.as_deref();
        let exports = exports_collection(held.map_or(&[], |e| e.exports.as_slice()));
        // Without MCS there is nothing to watch: the (empty) set is whole.
        let report = ClusterStatus {
            services,
            exports_state: Some(ExportsState {
                complete: held.is_none_or(|e| e.complete),
                exports_version: exports.version().to_owned(),
                waiting_for: held.map(|e| e.waiting_for.clone()).unwrap_or_default(),
            }),
            ..report
        };
        let status = status_collection(&s.cluster, report);
        let versions = (status.version().to_owned(), exports.version().to_owned());
        if published.as_ref() != Some(&versions) {
            debug!(status.version = %versions.0, exports.version = %versions.1, "publishing the cluster's state");
            let snapshot = Snapshot::new()
                .with_collection(CLUSTER_STATUS, Arc::new(status))
                .with_collection(SERVICE_EXPORTS, Arc::new(exports));
            writer.set(&group, Arc::new(snapshot));
            metrics::counter!("meshhub_agent_upward_reports_total").increment(1);
            published = Some(versions);
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
            r = s.store.changed() => if r.is_err() { return },
            Some(()) = changed(s.apply.as_mut()) => {}
            Some(()) = changed(s.object_statuses.as_mut()) => {}
            Some(()) = changed(istiod.as_mut()) => {}
            Some(()) = changed(version.as_mut()) => {}
            Some(()) = changed(s.exports.as_mut()) => {}
            Some(()) = changed(s.crds.as_mut()) => {}
            Some(()) = changed(s.services.as_mut()) => {}
        }
    }
}

/// Resolves when `rx` changes; never when it is absent or its sender gone.
async fn changed<T>(rx: Option<&mut watch::Receiver<T>>) -> Option<()> {
    if let Some(rx) = rx
        && rx.changed().await.is_ok()
    {
        return Some(());
    }
    std::future::pending().await
}

/// A version that changes exactly when `body` does.
fn digest(body: &[u8]) -> String {
    hex::encode(&Sha256::digest(body)[..8])
}

/// One resource holding `body` (`message`), its version a digest of
/// `versioned` (the body without fields that change on every build).
fn resource(name: &str, message: &str, body: Vec<u8>, version: String) -> EncodedResource {
    let resource = Resource {
        metadata: Some(Metadata {
            name: name.to_owned(),
            version: version.clone(),
            ..Default::default()
        }),
        body: Some(prost_types::Any {
            type_url: meshhub_proto::type_url(message),
            value: body,
        }),
    };
    EncodedResource {
        name: name.into(),
        version: version.into(),
        encoded: Bytes::from(resource.encode_to_vec()),
    }
}

/// The upward snapshot of a cluster: its report (stamped now) and its
/// exports, as the agent serves them (also for tests and benchmarks that
/// stand in for an agent).
/// The report's `exports_state` is filled in: complete unless the report
/// says otherwise, about these exports.
pub fn snapshot(cluster: &str, mut report: ClusterStatus, exports: &[ServiceExport]) -> Snapshot {
    let exports = exports_collection(exports);
    let state = report.exports_state.get_or_insert(ExportsState {
        complete: true,
        ..Default::default()
    });
    exports.version().clone_into(&mut state.exports_version);
    Snapshot::new()
        .with_collection(CLUSTER_STATUS, Arc::new(status_collection(cluster, report)))
        .with_collection(SERVICE_EXPORTS, Arc::new(exports))
}

/// The cluster status collection: one resource named after the cluster,
/// its version a digest of the report without its time.
fn status_collection(cluster: &str, mut report: ClusterStatus) -> CollectionSnapshot {
    let version = digest(&report.encode_to_vec());
    report.observed = Some(SystemTime::now().into());
    CollectionSnapshot::new(vec![resource(
        cluster,
        CLUSTER_STATUS_MESSAGE,
        report.encode_to_vec(),
        version,
    )])
}

/// The exports collection: one resource per export (`namespace/name`).
fn exports_collection(exports: &[ServiceExport]) -> CollectionSnapshot {
    CollectionSnapshot::new(
        exports
            .iter()
            .map(|e| {
                let body = e.encode_to_vec();
                let version = digest(&body);
                resource(
                    &format!("{}/{}", e.namespace, e.name),
                    SERVICE_EXPORT_MESSAGE,
                    body,
                    version,
                )
            })
            .collect(),
    )
}

/// Reads istiod's view every `check.interval` and publishes the
/// comparison with what the agent serves.
async fn check_istiod(
    check: IstiodCheck,
    kinds: KindTable,
    served: SnapshotCache,
    group: Group,
    ledger: Ledger,
    tx: watch::Sender<Option<IstiodView>>,
    shutdown: CancellationToken,
) {
    let mut tracker = istiod::Tracker::default();
    let mut tick = tokio::time::interval(check.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        let Some(read) = next_round(
            &mut tick,
            &shutdown,
            istiod::read_configz(&check.debug_url, CONFIGZ_TIMEOUT),
        )
        .await
        else {
            return;
        };
        let mut view = IstiodView {
            address: check.debug_url.clone(),
            checked: Some(SystemTime::now().into()),
            ..Default::default()
        };
        match read {
            Ok(held) => {
                if failing {
                    tracing::info!("istiod's /debug/configz answers again");
                }
                failing = false;
                let snapshot = served.snapshot(&group).unwrap_or_default();
                let only = subscribed(&kinds, &ledger);
                let c = tracker.check(&kinds, &snapshot, only.as_ref(), &held);
                metrics::gauge!("meshhub_agent_istiod_dropped").set(c.dropped.len() as f64);
                for d in &c.dropped {
                    debug!(collection = %d.collection, name = %d.name, version = %d.version, "istiod dropped a served object");
                }
                view.reachable = true;
                view.held = c.held;
                view.dropped = c.dropped;
                view.collections = c.collections;
            }
            Err(e) => {
                if !failing {
                    warn!(error = %meshhub_runtime::error_chain(&e), "can't read istiod's /debug/configz");
                }
                failing = true;
                metrics::counter!("meshhub_agent_istiod_check_errors_total").increment(1);
                view.error = e.to_string();
            }
        }
        // Equal content (but the time) does not wake the report task.
        tx.send_if_modified(|old| {
            let same = old.as_ref().is_some_and(|o| {
                o.reachable == view.reachable
                    && o.error == view.error
                    && o.held == view.held
                    && o.dropped == view.dropped
                    && o.collections == view.collections
            });
            if !same {
                *old = Some(view);
            }
            !same
        });
    }
}

/// Reads istiod's release every `check.interval` (published when it, or
/// why it can't be read, changed).
async fn check_version(
    check: IstiodVersionCheck,
    tx: watch::Sender<Option<IstiodInstance>>,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(check.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let Some(read) = next_round(
            &mut tick,
            &shutdown,
            istiod::read_version(&check.url, CONFIGZ_TIMEOUT),
        )
        .await
        else {
            return;
        };
        let mut seen = IstiodInstance {
            source: report::SOURCE_VERSION_ENDPOINT.to_owned(),
            kind: meshhub_proto::upward::IstiodSource::VersionEndpoint.into(),
            name: check.url.clone(),
            ..Default::default()
        };
        match read {
            Ok(release) => seen.version = release,
            Err(e) => seen.error = e.to_string(),
        }
        tx.send_if_modified(|old| {
            let changed = old.as_ref() != Some(&seen);
            if changed {
                match (&seen.error, old.as_ref().map(|o| o.error.is_empty())) {
                    (e, Some(true) | None) if !e.is_empty() => {
                        warn!(error = %e, "can't read istiod's release");
                    }
                    _ => {}
                }
                *old = Some(seen);
            }
            changed
        });
    }
}

/// The collections the connected ADS consumers (istiod) subscribed to;
/// `None` when none is connected (compare everything).
fn subscribed(kinds: &KindTable, ledger: &Ledger) -> Option<BTreeSet<String>> {
    let set: BTreeSet<String> = ledger
        .view()
        .iter()
        .filter(|p| p.role == Role::Source && p.connected && p.protocol.is_xds())
        .flat_map(|p| p.collections.keys().cloned().collect::<Vec<_>>())
        .filter_map(|t| kinds.by_type_url(&t).map(|k| k.collection().to_owned()))
        .collect();
    (!set.is_empty()).then_some(set)
}

/// The next round of a polling loop: waits for `tick`, then runs `read`;
/// `None` once `shutdown` fires during either.
pub(crate) async fn next_round<F: std::future::Future>(
    tick: &mut tokio::time::Interval,
    shutdown: &CancellationToken,
    read: F,
) -> Option<F::Output> {
    tokio::select! {
        () = shutdown.cancelled() => return None,
        _ = tick.tick() => {}
    }
    tokio::select! {
        () = shutdown.cancelled() => None,
        r = read => Some(r),
    }
}

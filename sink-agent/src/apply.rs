//! The applier: puts what the agent ACKs into its own cluster's Kubernetes
//! API, so that the cluster's istiod sees it (opt-in: `apply:` / `--apply`).
//!
//! One task owns the Kubernetes side (the single writer); the store talks
//! to it through an [`Applier`] handle. Per collection it keeps the desired
//! objects (what the store persisted) and makes the API hold exactly those
//! among the objects it manages:
//!
//! * **Apply**: server-side apply with field manager `meshhub`, label
//!   `app.kubernetes.io/managed-by=meshhub`, annotations
//!   `meshhub.io/source-cluster` and `meshhub.io/hub-version` (the object's
//!   MCP version from the hub). Objects whose live state already matches
//!   are not written, so an unchanged object never changes its
//!   resourceVersion (and never wakes the cluster's istiod).
//! * **Prune**: a managed object (it carries the label) that is no longer
//!   desired is deleted. Objects without the label are never touched: a
//!   same-named object created by someone else is a **conflict**, reported
//!   and left alone, unless `force` is set.
//! * **Results**: a change the API refuses (a missing CRD, an admission
//!   webhook, a missing namespace) is reported per object with the API
//!   server's message; the store NACKs it to the hub. One bad object never
//!   stops the others. Whether the API refused an object or could not take
//!   it now is decided from the typed error (its HTTP status code), never
//!   from its text: [`ApplyError::Invalid`] or [`ApplyError::Unavailable`].
//! * **Drift**: a watch on the managed objects of every applied kind
//!   repairs hand edits and deletions at once; a full reconcile runs at
//!   start (from the persisted state), after the watch re-lists (it was
//!   down: what changed meanwhile no event named), every `resync`, and with
//!   backoff after a failed sync until it succeeds.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt as _;
use futures::stream::{BoxStream, SelectAll};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use meshhub_kube::discovery::api;
use meshhub_kube::object::holds;
use meshhub_kube::{Connection, Served, error_text};
use meshhub_mcp::ledger::At;
use meshhub_mcp::sink::ApplyError;
use meshhub_proto::kinds::Kind;
use meshhub_proto::object::Object;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, debug, info, info_span, warn};

use crate::backoff::Retry;

pub mod conditions;
mod failure;
use failure::{Failure, Outcome, stopped, verdict};
use meshhub_proto::upward::GatewayApiObjectStatus;

/// How long after a re-list of managed objects their collection is synced
/// (the re-lists of one outage, one per scope, share the sync).
const RELIST_SYNC_DELAY: Duration = Duration::from_secs(2);

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "meshhub";

/// The parameters of every write: server-side apply as [`FIELD_MANAGER`],
/// forcing, with strict field validation (an unknown field is refused, not
/// pruned).
fn write_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER)
        .force()
        .validation_strict()
}
/// The label marking the objects the agent manages.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY_VALUE: &str = "meshhub";
/// Annotation: the cluster the configuration comes from.
pub const SOURCE_CLUSTER: &str = "meshhub.io/source-cluster";
/// Annotation: the object's MCP version as the hub served it.
pub const HUB_VERSION: &str = "meshhub.io/hub-version";
/// First and longest delay between retries of a failed sync.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Settings of the applier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyConfig {
    /// The cluster's API server (the agent builds its client).
    pub connection: Connection,
    /// Take over same-named objects that meshhub does not manage.
    pub force: bool,
    /// Written into `meshhub.io/source-cluster`.
    pub source_cluster: String,
    /// Interval of full reconciles.
    pub resync: Duration,
    /// The only namespaces written, listed and watched (empty: every
    /// namespace, which needs cluster-wide RBAC). An object received for
    /// another namespace is not applied and the change is NACKed.
    pub namespaces: std::collections::BTreeSet<String>,
}

/// One collection as the applier last left it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CollectionApply {
    /// Desired objects.
    pub desired: usize,
    /// Objects applied (created or changed) by the last sync.
    pub written: usize,
    /// Objects pruned by the last sync.
    pub pruned: usize,
    /// When the last sync ended.
    pub synced_at: Option<At>,
    /// What failed in the last sync (one line per object), empty if it
    /// succeeded.
    pub failures: Vec<String>,
    /// Hand edits and deletions repaired since start.
    pub drift_repairs: u64,
}

/// What the applier reports on `/status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ApplyStatus {
    /// The value of `meshhub.io/source-cluster`.
    pub source_cluster: String,
    /// Per collection.
    pub collections: BTreeMap<String, CollectionApply>,
}

enum Command {
    Sync {
        collection: String,
        kind: Kind,
        objects: Vec<Object>,
        reply: Option<oneshot::Sender<Result<(), ApplyError>>>,
    },
}

/// What the cluster's controllers wrote in the status of the applied
/// objects whose kind has one to report ([`conditions::reported`]), by
/// collection and `namespace/name`.
pub type ObjectStatuses = BTreeMap<(String, String), GatewayApiObjectStatus>;

/// A handle on the applier task. Cheap to clone.
///
/// Commands go through an unbounded channel so that handing over a sync
/// never waits for the API server. It stays small: the store has at most
/// one sync in flight per collection, and start-up sends one reconcile per
/// collection.
#[derive(Clone, Debug)]
pub struct Applier {
    tx: mpsc::UnboundedSender<Command>,
    status: watch::Receiver<Arc<ApplyStatus>>,
    objects: watch::Receiver<Arc<ObjectStatuses>>,
}

impl Applier {
    /// Starts the applier task on `tasks`, over `client` (the agent's
    /// client of `config.connection`).
    pub fn start(
        config: ApplyConfig,
        client: kube::Client,
        tasks: &tokio_util::task::TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let (status_tx, status) = watch::channel(Arc::new(ApplyStatus {
            source_cluster: config.source_cluster.clone(),
            ..Default::default()
        }));
        let (objects_tx, objects) = watch::channel(Arc::new(ObjectStatuses::new()));
        let task = Task {
            client,
            config,
            collections: BTreeMap::new(),
            status: status_tx,
            objects: objects_tx,
            watches: std::sync::Mutex::new(SelectAll::new()),
        };
        tasks.spawn(task.run(rx, shutdown).instrument(info_span!("agent.apply")));
        Self {
            tx,
            status,
            objects,
        }
    }

    /// Makes the API hold exactly `objects` of `collection` (among the
    /// objects meshhub manages). The sync is handed to the applier task
    /// now, in call order, without waiting; the returned future resolves
    /// when it ended, with what failed.
    pub fn sync(
        &self,
        collection: &str,
        kind: Kind,
        objects: Vec<Object>,
    ) -> impl Future<Output = Result<(), ApplyError>> + Send + 'static {
        let (reply, rx) = oneshot::channel();
        let sent = self.tx.send(Command::Sync {
            collection: collection.to_owned(),
            kind,
            objects,
            reply: Some(reply),
        });
        async move {
            if sent.is_err() {
                return Err(stopped());
            }
            rx.await.unwrap_or_else(|_| Err(stopped()))
        }
    }

    /// Like [`Applier::sync`] without a result (start-up reconcile of the
    /// persisted state).
    pub fn reconcile(&self, collection: &str, kind: Kind, objects: Vec<Object>) {
        let _ = self.tx.send(Command::Sync {
            collection: collection.to_owned(),
            kind,
            objects,
            reply: None,
        });
    }

    /// A reader of the applier's status.
    pub fn status(&self) -> watch::Receiver<Arc<ApplyStatus>> {
        self.status.clone()
    }

    /// A reader of what the cluster's controllers wrote in the status of
    /// the applied Gateway API objects.
    pub fn object_statuses(&self) -> watch::Receiver<Arc<ObjectStatuses>> {
        self.objects.clone()
    }
}

/// One desired object, ready to compare and apply.
#[derive(Clone, Debug)]
struct Desired {
    namespace: Option<String>,
    name: String,
    /// The apply body (without apiVersion, which depends on discovery).
    object: Object,
}

struct CollectionState {
    kind: Kind,
    /// The API resource, once discovered (and watched).
    resource: Option<ApiResource>,
    namespaced: bool,
    desired: BTreeMap<(String, String), Desired>,
    /// When to retry a failed sync.
    retry_at: Option<tokio::time::Instant>,
    retry: Retry,
}

type Tagged = (String, Result<Event<DynamicObject>, watcher::Error>);

struct Task {
    client: kube::Client,
    config: ApplyConfig,
    collections: BTreeMap<String, CollectionState>,
    status: watch::Sender<Arc<ApplyStatus>>,
    objects: watch::Sender<Arc<ObjectStatuses>>,
    // Behind a mutex only to make the task `Sync` (its futures borrow it
    // across awaits); only ever reached through `&mut self`.
    watches: std::sync::Mutex<SelectAll<BoxStream<'static, Tagged>>>,
}

impl Task {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>, shutdown: CancellationToken) {
        let mut resync = tokio::time::interval(self.config.resync);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        resync.tick().await; // the first tick is now
        loop {
            let retry_at = self.collections.values().filter_map(|c| c.retry_at).min();
            let retry = async {
                match retry_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                cmd = rx.recv() => match cmd {
                    Some(Command::Sync { collection, kind, objects, reply }) => {
                        let result = self.set_and_sync(&collection, kind, objects).await;
                        if let Some(reply) = reply {
                            let _ = reply.send(result);
                        }
                    }
                    None => break,
                },
                _ = resync.tick() => {
                    let names: Vec<String> = self.collections.keys().cloned().collect();
                    for c in names {
                        let _ = self.sync(&c).await;
                    }
                }
                _ = retry => {
                    let now = tokio::time::Instant::now();
                    let due: Vec<String> = self
                        .collections
                        .iter()
                        .filter(|(_, c)| c.retry_at.is_some_and(|at| at <= now))
                        .map(|(n, _)| n.clone())
                        .collect();
                    for c in due {
                        if self.sync(&c).await.is_ok() {
                            info!(%c, "retried sync succeeded");
                        }
                    }
                }
                Some((collection, ev)) = self.watches.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).next() => {
                    self.on_live(&collection, ev).await;
                }
            }
        }
        debug!("applier stopped");
    }

    async fn set_and_sync(
        &mut self,
        collection: &str,
        kind: Kind,
        objects: Vec<Object>,
    ) -> Result<(), ApplyError> {
        let desired = objects
            .into_iter()
            .map(|o| {
                let key = (
                    o.metadata.namespace.clone().unwrap_or_default(),
                    o.metadata.name.clone(),
                );
                let d = Desired {
                    namespace: o.metadata.namespace.clone(),
                    name: o.metadata.name.clone(),
                    object: self.apply_body(o),
                };
                (key, d)
            })
            .collect();
        let state = self
            .collections
            .entry(collection.to_owned())
            .or_insert_with(|| CollectionState {
                kind: kind.clone(),
                resource: None,
                namespaced: kind.namespaced(),
                desired: BTreeMap::new(),
                retry_at: None,
                retry: Retry::new(RETRY_MIN, RETRY_MAX),
            });
        state.desired = desired;
        self.sync(collection).await
    }

    /// The object as meshhub writes it: our label and annotations added,
    /// the MCP-only metadata left out.
    fn apply_body(&self, mut o: Object) -> Object {
        o.metadata
            .labels
            .insert(MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned());
        let version = o.metadata.resource_version.take().unwrap_or_default();
        o.metadata.annotations.insert(
            SOURCE_CLUSTER.to_owned(),
            self.config.source_cluster.clone(),
        );
        if !version.is_empty() {
            o.metadata
                .annotations
                .insert(HUB_VERSION.to_owned(), version);
        }
        o.metadata.creation_timestamp = None;
        o
    }

    /// Discovers (once) and watches the collection's kind; `None` when the
    /// cluster does not serve it.
    async fn resource(&mut self, collection: &str) -> Result<Option<ApiResource>, Failure> {
        let state = self.collections.get(collection).expect("known collection");
        if let Some(r) = &state.resource {
            return Ok(Some(r.clone()));
        }
        let served = meshhub_kube::discover(&self.client, std::slice::from_ref(&state.kind))
            .await
            .map_err(|e| Failure::of(&e, format!("API discovery failed: {}", error_text(&e))))?;
        let Some(Served {
            resource,
            namespaced,
            ..
        }) = served.into_iter().next()
        else {
            return Ok(None);
        };
        for api in self.scopes(&resource, namespaced) {
            let tag = collection.to_owned();
            let stream = watcher::watcher(
                api,
                watcher::Config::default().labels(&format!("{MANAGED_BY}={MANAGED_BY_VALUE}")),
            )
            .default_backoff()
            .map(move |ev| (tag.clone(), ev))
            .boxed();
            self.watches
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(stream);
        }
        let state = self
            .collections
            .get_mut(collection)
            .expect("known collection");
        state.resource = Some(resource.clone());
        state.namespaced = namespaced;
        info!(%collection, api.version = %resource.api_version, kind = %resource.kind, "applying and watching");
        Ok(Some(resource))
    }

    /// One full sync of a collection: apply what differs, prune what is
    /// no longer desired. Records the outcome; schedules a retry on failure.
    async fn sync(&mut self, collection: &str) -> Result<(), ApplyError> {
        let started = std::time::Instant::now();
        let outcome = match self.resource(collection).await {
            Err(e) => Outcome {
                failures: vec![e],
                ..Default::default()
            },
            Ok(None) => {
                let state = &self.collections[collection];
                let kind = &state.kind;
                if state.desired.is_empty() {
                    Outcome::default()
                } else {
                    Outcome {
                        failures: vec![Failure::refused(format!(
                            "this cluster does not serve {}/{} (is its CustomResourceDefinition installed?); {} object(s) not applied",
                            kind.group(),
                            kind.kind(),
                            state.desired.len()
                        ))],
                        ..Default::default()
                    }
                }
            }
            Ok(Some(resource)) => self.sync_with(collection, &resource).await,
        };
        let state = self
            .collections
            .get_mut(collection)
            .expect("known collection");
        let result = verdict(&outcome.failures);
        if result.is_ok() {
            state.retry_at = None;
            state.retry = Retry::new(RETRY_MIN, RETRY_MAX);
            metrics::counter!("meshhub_agent_apply_syncs_total", "result" => "ok").increment(1);
        } else {
            state.retry_at = Some(tokio::time::Instant::now() + state.retry.next_delay());
            metrics::counter!("meshhub_agent_apply_syncs_total", "result" => "error").increment(1);
        }
        metrics::histogram!("meshhub_agent_apply_seconds").record(started.elapsed());
        let desired = state.desired.len();
        match &result {
            Ok(()) if outcome.written + outcome.pruned > 0 => {
                info!(%collection, desired, written = outcome.written, pruned = outcome.pruned, "applied")
            }
            Ok(()) => debug!(%collection, desired, "in sync"),
            Err(e) => {
                warn!(%collection, desired, error = %e, "apply failed; retrying with backoff")
            }
        }
        self.status.send_modify(|s| {
            let c = Arc::make_mut(s)
                .collections
                .entry(collection.to_owned())
                .or_default();
            c.desired = desired;
            c.written = outcome.written;
            c.pruned = outcome.pruned;
            c.synced_at = Some(At(SystemTime::now()));
            c.failures = outcome.failures.into_iter().map(|f| f.text).collect();
        });
        result
    }

    async fn sync_with(&mut self, collection: &str, resource: &ApiResource) -> Outcome {
        let mut out = Outcome::default();
        let namespaced = self.collections[collection].namespaced;
        let mut managed = Vec::new();
        for api in self.scopes(resource, namespaced) {
            match api
                .list(&ListParams::default().labels(&format!("{MANAGED_BY}={MANAGED_BY_VALUE}")))
                .await
            {
                Ok(list) => managed.extend(list.items),
                Err(e) => {
                    out.failures.push(Failure::of(
                        &e,
                        format!("{}: can't list: {}", resource.kind, error_text(&e)),
                    ));
                    return out;
                }
            }
        }
        let state = &self.collections[collection];
        self.record_statuses(collection, &state.kind, &managed);
        let kind_name = state.kind.kind().to_owned();
        let live: HashMap<(String, String), DynamicObject> = managed
            .into_iter()
            .map(|o| {
                (
                    (
                        o.metadata.namespace.clone().unwrap_or_default(),
                        o.metadata.name.clone().unwrap_or_default(),
                    ),
                    o,
                )
            })
            .collect();
        // Prune what we manage and is no longer desired.
        for (key, obj) in &live {
            if state.desired.contains_key(key) {
                continue;
            }
            let api = self.api(
                resource,
                state.namespaced,
                obj.metadata.namespace.as_deref(),
            );
            match api.delete(&key.1, &DeleteParams::default()).await {
                Ok(_) => {
                    out.pruned += 1;
                    metrics::counter!("meshhub_agent_apply_prunes_total").increment(1);
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => out.failures.push(Failure::of(
                    &e,
                    format!(
                        "{kind_name} {}: can't prune: {}",
                        display_name(key),
                        error_text(&e)
                    ),
                )),
            }
        }
        for (key, d) in &state.desired {
            if state.namespaced
                && !self.config.namespaces.is_empty()
                && !self.config.namespaces.contains(&key.0)
            {
                out.failures.push(Failure::refused(format!(
                    "{kind_name} {}: namespace {:?} is not one of apply.namespaces ({}); not applied",
                    display_name(key),
                    key.0,
                    self.config
                        .namespaces
                        .iter()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
                continue;
            }
            match live.get(key) {
                Some(l) if holds(l, &d.object) => continue,
                Some(_) => {}
                None => {
                    // Not ours (yet): someone else's object of that name?
                    let api = self.api(resource, state.namespaced, d.namespace.as_deref());
                    match api.get_opt(&d.name).await {
                        Ok(None) => {}
                        Ok(Some(_)) if self.config.force => {
                            warn!(%collection, object = %display_name(key), "taking over an object meshhub does not manage (force)");
                        }
                        Ok(Some(_)) => {
                            metrics::counter!("meshhub_agent_apply_conflicts_total").increment(1);
                            out.failures.push(Failure::refused(format!(
                                "{kind_name} {}: conflict: an object of that name exists and is not managed by meshhub (label {MANAGED_BY}={MANAGED_BY_VALUE}); left alone",
                                display_name(key)
                            )));
                            continue;
                        }
                        Err(e) => {
                            out.failures.push(Failure::of(
                                &e,
                                format!("{kind_name} {}: {}", display_name(key), error_text(&e)),
                            ));
                            continue;
                        }
                    }
                }
            }
            match self.write(resource, state.namespaced, d).await {
                Ok(()) => out.written += 1,
                Err(e) => out.failures.push(Failure::of(
                    &e,
                    format!("{kind_name} {}: {}", display_name(key), error_text(&e)),
                )),
            }
        }
        metrics::counter!("meshhub_agent_apply_writes_total").increment(out.written as u64);
        out
    }

    /// Where the collection's objects are listed and watched: every
    /// namespace at once, or each of `apply.namespaces`.
    fn scopes(&self, resource: &ApiResource, namespaced: bool) -> Vec<Api<DynamicObject>> {
        if namespaced && !self.config.namespaces.is_empty() {
            self.config
                .namespaces
                .iter()
                .map(|ns| api(self.client.clone(), resource, Some(ns)))
                .collect()
        } else {
            vec![api(self.client.clone(), resource, None)]
        }
    }

    fn api(
        &self,
        resource: &ApiResource,
        namespaced: bool,
        ns: Option<&str>,
    ) -> Api<DynamicObject> {
        match (namespaced, ns) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, resource),
            (true, None) => Api::default_namespaced_with(self.client.clone(), resource),
            (false, _) => Api::all_with(self.client.clone(), resource),
        }
    }

    /// Server-side apply of one object, forcing: the fields are ours.
    ///
    /// Strict field validation: a field the cluster's CRD schema does not
    /// know (an older Istio's CRDs) is a refusal naming the field, which
    /// the store turns into a NACK; without it the API server prunes the
    /// field and answers 200 (a silent cut, issue 36).
    async fn write(
        &self,
        resource: &ApiResource,
        namespaced: bool,
        d: &Desired,
    ) -> Result<(), kube::Error> {
        let mut body = d.object.clone();
        body.api_version = resource.api_version.clone();
        let api = self.api(resource, namespaced, d.namespace.as_deref());
        api.patch(&d.name, &write_params(), &Patch::Apply(&body))
            .await
            .map(drop)
    }

    /// A change of a managed object: repair it if it drifted from what is
    /// desired (a hand edit, a deletion).
    async fn on_live(
        &mut self,
        collection: &str,
        ev: Result<Event<DynamicObject>, watcher::Error>,
    ) {
        let Some(state) = self.collections.get(collection) else {
            return;
        };
        let Some(resource) = state.resource.clone() else {
            return;
        };
        let (obj, deleted) = match ev {
            Ok(Event::Apply(o)) => (o, false),
            Ok(Event::Delete(o)) => (o, true),
            // A (re)list: what the controllers wrote is taken as it comes;
            // once it is complete, a full sync (it lists every scope again)
            // repairs what changed while the watch was down — a managed
            // object deleted or edited then, which no event named — and
            // replaces the collection's statuses, so an object deleted
            // meanwhile does not keep its last status. The sync is
            // scheduled [`RELIST_SYNC_DELAY`] ahead, not run here: the
            // watches of every scope (namespace) of a collection re-list
            // together after an outage, and a flapping watch re-lists
            // again and again; each burst costs one sync. (The first list
            // of a new watch ends the same way: a sync that finds
            // everything in place writes nothing.)
            Ok(Event::InitApply(o)) => {
                self.record_status(collection, &state.kind, &o, false);
                return;
            }
            Ok(Event::InitDone) => {
                let at = tokio::time::Instant::now() + RELIST_SYNC_DELAY;
                if let Some(state) = self.collections.get_mut(collection) {
                    debug!(%collection, "managed objects re-listed; a sync is scheduled");
                    state.retry_at = Some(state.retry_at.map_or(at, |r| r.min(at)));
                }
                return;
            }
            Ok(Event::Init) => return,
            Err(e) => {
                debug!(%collection, error = %e, "watch of managed objects failing; retrying");
                return;
            }
        };
        let key = (
            obj.metadata.namespace.clone().unwrap_or_default(),
            obj.metadata.name.clone().unwrap_or_default(),
        );
        self.record_status(collection, &state.kind, &obj, deleted);
        let Some(d) = state.desired.get(&key) else {
            return; // not desired: the next sync prunes it
        };
        if !deleted && holds(&obj, &d.object) {
            return;
        }
        let what = if deleted { "deleted" } else { "changed" };
        warn!(%collection, object = %display_name(&key), "managed object {what} by hand; repairing");
        let result = self.write(&resource, state.namespaced, &d.clone()).await;
        self.status.send_modify(|s| {
            Arc::make_mut(s)
                .collections
                .entry(collection.to_owned())
                .or_default()
                .drift_repairs += 1;
        });
        metrics::counter!("meshhub_agent_apply_drift_repairs_total").increment(1);
        if let Err(e) = result {
            warn!(%collection, object = %display_name(&key), error = %error_text(&e), "repair failed; the next sync retries");
            if let Some(state) = self.collections.get_mut(collection) {
                let retry = &mut state.retry;
                state
                    .retry_at
                    .get_or_insert_with(|| tokio::time::Instant::now() + retry.next_delay());
            }
        }
    }
}

impl Task {
    /// What the controllers wrote of `obj` (of `collection`, whose kind is
    /// `kind`), or that it is gone.
    fn record_status(&self, collection: &str, kind: &Kind, obj: &DynamicObject, deleted: bool) {
        if !conditions::reported(kind.group(), kind.kind()) {
            return;
        }
        let status = conditions::of(collection, obj);
        let key = (collection.to_owned(), status.name.clone());
        self.objects.send_if_modified(|held| {
            if deleted {
                return held.contains_key(&key) && Arc::make_mut(held).remove(&key).is_some();
            }
            if held.get(&key) == Some(&status) {
                return false;
            }
            Arc::make_mut(held).insert(key, status);
            true
        });
    }

    /// What the controllers wrote of `listed`, every managed object of
    /// `collection` as just listed: replaces what was held of it.
    fn record_statuses(&self, collection: &str, kind: &Kind, listed: &[DynamicObject]) {
        if !conditions::reported(kind.group(), kind.kind()) {
            return;
        }
        let fresh: ObjectStatuses = listed
            .iter()
            .map(|o| {
                let s = conditions::of(collection, o);
                ((collection.to_owned(), s.name.clone()), s)
            })
            .collect();
        self.objects.send_if_modified(|held| {
            let before = held
                .range((collection.to_owned(), String::new())..)
                .take_while(|((c, _), _)| c == collection);
            if before.clone().count() == fresh.len() && before.zip(&fresh).all(|(a, b)| a == b) {
                return false;
            }
            let held = Arc::make_mut(held);
            held.retain(|(c, _), _| c != collection);
            held.extend(fresh);
            true
        });
    }
}

fn display_name(key: &(String, String)) -> String {
    if key.0.is_empty() {
        key.1.clone()
    } else {
        format!("{}/{}", key.0, key.1)
    }
}

#[cfg(test)]
mod tests;

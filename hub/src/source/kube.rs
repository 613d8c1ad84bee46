//! The Kubernetes source: watches a Kubernetes API server for every kind of
//! the kind table it serves (Istio's CRDs, plus `extraKinds`) and delivers
//! each object as its own unit.
//!
//! * **Discovery** decides what is watched: a kind is watched in the first
//!   of its versions that the API server serves. Discovery runs at start,
//!   whenever a CustomResourceDefinition changes (a metadata watch on CRDs,
//!   so a CRD installed after start is picked up at once), and every
//!   `discoveryInterval` (the safety net when CRDs may not be watched). A
//!   kind that stops being served is unwatched and its objects removed.
//! * **Watches** are kube-runtime watchers (initial list, then watch; a new
//!   list after `410 Gone`; exponential backoff with jitter on errors), one
//!   per kind and configured namespace (or one per kind across namespaces).
//! * **Units**: `<group|core>/<Kind>/<namespace>/<name>`; the object's
//!   `resourceVersion` becomes the MCP resource version, its
//!   `creationTimestamp` the create time; `status` and
//!   `kubectl.kubernetes.io/last-applied-configuration` are not carried. A
//!   re-list sends only what changed and removes what disappeared.
//! * **Readiness**: [`SourceEvent::Synced`] once every watch delivered its
//!   initial list. A kind the source may not list (`403`) counts as synced
//!   (waiting would not help) and is reported as a problem.
//! * **Problems** (a failing watch, a forbidden kind, failing discovery)
//!   are logged once per failure state and reported to the pipeline
//!   ([`SourceEvent::Health`]) for `/status`; while a watch is failing, the
//!   API is probed every few seconds so that its recovery is seen even when
//!   no object changes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{BoxStream, SelectAll};
use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, PartialObjectMeta};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use meshhub_kube::Served;
use meshhub_kube::discovery::api;
use meshhub_kube::error::{error_text, is_forbidden, watch_error_text};
use meshhub_kube::object::{last_manager, to_object};
use meshhub_kube::status::gateway::Shape;
use meshhub_mcp::reconnect::{Backoff, ReconnectPolicy};
use meshhub_proto::kinds::gateway_api::is_gateway_api_group;
use meshhub_proto::kinds::{Kind, KindTable};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{Entry, Origin, Source, SourceError, SourceEvent};
use crate::watch_backoff::WatchBackoff;

pub mod feed;
pub mod spec;

pub use feed::{FEED_QUEUE, Feed, GatewaySeen, Seen};
pub use spec::{ExtraKind, KubeSourceSpec};

/// How often failing watches are probed for recovery.
const PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// How long CRD changes are gathered before discovery runs again.
const CRD_SETTLE: Duration = Duration::from_millis(300);
/// Delays between failed discoveries: exponential with full jitter, 0.5 s
/// to 30 s (the engine's reconnect backoff).
const DISCOVERY_RETRY: ReconnectPolicy = ReconnectPolicy {
    initial: Duration::from_millis(500),
    max: Duration::from_secs(30),
    factor: 2.0,
};

/// A watched Kubernetes API server.
pub struct KubeSource {
    name: Arc<str>,
    client: kube::Client,
    /// What is watched: the builtin kinds and this source's extra kinds.
    kinds: Vec<Kind>,
    namespaces: Vec<String>,
    discovery_interval: Duration,
    /// Where the objects are reported for status write-back, when on.
    feed: Option<mpsc::Sender<Feed>>,
}

impl std::fmt::Debug for KubeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSource")
            .field("name", &self.name)
            .field("namespaces", &self.namespaces)
            .finish_non_exhaustive()
    }
}

impl KubeSource {
    /// A source as configured over `client` (the app's client of the
    /// source's connection), watching the builtin kinds of `kinds` and its
    /// own extra kinds.
    pub fn new(spec: &KubeSourceSpec, kinds: &KindTable, client: kube::Client) -> Self {
        let extra: BTreeSet<String> = spec
            .extra_kinds
            .iter()
            .filter_map(|k: &ExtraKind| k.to_kind().ok())
            .map(|k| k.collection().to_owned())
            .collect();
        let kinds = kinds
            .iter()
            .filter(|k| k.is_builtin() || extra.contains(k.collection()))
            .cloned()
            .collect();
        Self {
            name: Arc::from(spec.name.as_str()),
            client,
            kinds,
            namespaces: spec.namespaces.clone(),
            discovery_interval: spec.discovery_interval,
            feed: None,
        }
    }

    /// Reports every Istio object seen (and gone) to `feed`, the status
    /// writer's: then an object whose change is its status (or its
    /// `resourceVersion` alone) is not delivered again, so the writer's own
    /// writes never come back as changes.
    #[must_use]
    pub fn with_feed(mut self, feed: mpsc::Sender<Feed>) -> Self {
        self.feed = Some(feed);
        self
    }
}

impl Source for KubeSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(
        self: Box<Self>,
        events: mpsc::Sender<SourceEvent>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), SourceError>> {
        let span = tracing::info_span!("source.kubernetes", source.name = %self.name);
        tracing::Instrument::instrument(Runner::new(*self, events, shutdown).run(), span).boxed()
    }
}

/// One watch: a kind in one namespace (or all).
struct Watch {
    served: Served,
    namespace: Option<String>,
    stop: CancellationToken,
    /// The initial list is delivered.
    synced: bool,
    /// Units of the list being received (between `Init` and `InitDone`).
    /// Objects are delivered as they arrive (holding a whole list of
    /// objects would put every object of a large cluster in memory at
    /// once); only their units are kept, to remove at `InitDone` what the
    /// list no longer holds.
    listing: Option<HashSet<Arc<str>>>,
    /// Units delivered, with what was delivered.
    known: HashMap<Arc<str>, Delivered>,
    /// Whether objects changed in nothing but their status are left out
    /// (status write-back on).
    skip_status_only: bool,
    /// The current failure, if any.
    problem: Option<String>,
}

impl Watch {
    /// What one event of the watch delivers: the units to send.
    fn absorb(&mut self, source: &Arc<str>, ev: Event<DynamicObject>) -> Vec<SourceEvent> {
        let mut out = Vec::new();
        match ev {
            Event::Init => self.listing = Some(HashSet::new()),
            Event::InitApply(obj) => {
                let unit = unit_name(&self.served, &obj);
                let unchanged = self.unchanged(&unit, &obj);
                if let Some(listing) = self.listing.as_mut() {
                    listing.insert(unit.clone());
                }
                // A re-list sends only what changed since delivered.
                if !unchanged {
                    let fp = self.fingerprint(&obj);
                    out.push(apply(source, &self.served, &mut self.known, unit, obj, fp));
                }
            }
            Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let gone: Vec<Arc<str>> = self
                    .known
                    .keys()
                    .filter(|u| !listed.contains(*u))
                    .cloned()
                    .collect();
                for unit in gone {
                    self.known.remove(&unit);
                    out.push(SourceEvent::Unit {
                        source: source.clone(),
                        unit,
                        entries: Vec::new(),
                    });
                }
                if !self.synced {
                    self.synced = true;
                    debug!(kind = %self.served.kind.kind(), namespace = ?self.namespace, objects = self.known.len(), "initial list delivered");
                }
            }
            Event::Apply(obj) => {
                let unit = unit_name(&self.served, &obj);
                if !(self.skip_status_only && self.unchanged(&unit, &obj)) {
                    let fp = self.fingerprint(&obj);
                    out.push(apply(source, &self.served, &mut self.known, unit, obj, fp));
                }
            }
            Event::Delete(obj) => {
                let unit = unit_name(&self.served, &obj);
                self.known.remove(&unit);
                out.push(SourceEvent::Unit {
                    source: source.clone(),
                    unit,
                    entries: Vec::new(),
                });
            }
        }
        out
    }

    /// Whether `obj` is what was delivered of `unit`: the same
    /// `resourceVersion`, or (status write-back on) the same generation,
    /// labels and annotations.
    fn unchanged(&self, unit: &Arc<str>, obj: &DynamicObject) -> bool {
        let Some(known) = self.known.get(unit) else {
            return false;
        };
        let rv = &obj.metadata.resource_version;
        (rv.is_some() && known.resource_version == *rv)
            || known
                .fingerprint
                .is_some_and(|f| self.fingerprint(obj) == Some(f))
    }

    /// What a change of the object's status leaves as it is (only with
    /// status write-back on, and only for objects with a generation).
    fn fingerprint(&self, obj: &DynamicObject) -> Option<u64> {
        use std::hash::{Hash as _, Hasher as _};
        if !self.skip_status_only {
            return None;
        }
        let m = &obj.metadata;
        let generation = m.generation?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        generation.hash(&mut h);
        m.labels.hash(&mut h);
        m.annotations
            .iter()
            .flatten()
            .filter(|(k, _)| k.as_str() != meshhub_kube::object::LAST_APPLIED)
            .for_each(|kv| kv.hash(&mut h));
        Some(h.finish())
    }
}

/// What was delivered of one unit.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Delivered {
    resource_version: Option<String>,
    /// The generation, labels and annotations delivered (hashed), when
    /// status-only changes are left out.
    fingerprint: Option<u64>,
}

type Tagged = (u64, Result<Event<DynamicObject>, watcher::Error>);

struct Runner {
    source: KubeSource,
    events: mpsc::Sender<SourceEvent>,
    shutdown: CancellationToken,
    watches: BTreeMap<u64, Watch>,
    next_id: u64,
    streams: SelectAll<BoxStream<'static, Tagged>>,
    synced_sent: bool,
    discovery_problem: Option<String>,
    crd_problem: Option<String>,
    reported: Vec<String>,
}

/// The pipeline is gone.
struct Gone;

impl Runner {
    fn new(
        source: KubeSource,
        events: mpsc::Sender<SourceEvent>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            source,
            events,
            shutdown,
            watches: BTreeMap::new(),
            next_id: 0,
            streams: SelectAll::new(),
            synced_sent: false,
            discovery_problem: None,
            crd_problem: None,
            reported: Vec::new(),
        }
    }

    async fn run(mut self) -> Result<(), SourceError> {
        match self.run_inner().await {
            Ok(()) => Ok(()),
            Err(Gone) if self.shutdown.is_cancelled() => Ok(()),
            Err(Gone) => Err(SourceError::PipelineGone(self.source.name.to_string())),
        }
    }

    async fn run_inner(&mut self) -> Result<(), Gone> {
        // CRD changes trigger discovery at once. Only metadata: Istio's CRDs
        // weigh about a megabyte.
        let crds: Api<PartialObjectMeta<CustomResourceDefinition>> =
            Api::all(self.source.client.clone());
        let mut crd_events = watcher::watcher(crds, watcher::Config::default())
            .backoff(WatchBackoff::new())
            .boxed();
        let mut crds_listed = false;
        let mut rediscover_at: Option<tokio::time::Instant> = None;

        let mut discovery = tokio::time::interval(self.source.discovery_interval);
        discovery.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut probe = tokio::time::interval(PROBE_INTERVAL);
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Failed discovery is retried with backoff, sooner than the interval.
        let mut retry = Backoff::new(DISCOVERY_RETRY);
        let mut retry_at: Option<tokio::time::Instant> = None;

        loop {
            let rediscover = async {
                match rediscover_at.or(retry_at) {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.shutdown.cancelled() => return Ok(()),
                _ = discovery.tick() => {
                    if self.discover().await? {
                        retry.reset();
                        retry_at = None;
                    } else {
                        retry_at = Some(tokio::time::Instant::now() + retry.next_delay());
                    }
                }
                _ = rediscover => {
                    rediscover_at = None;
                    retry_at = None;
                    if self.discover().await? {
                        retry.reset();
                    } else {
                        retry_at = Some(tokio::time::Instant::now() + retry.next_delay());
                    }
                }
                Some(ev) = crd_events.next() => match ev {
                    Ok(Event::InitDone) => {
                        crds_listed = true;
                        self.set_crd_problem(None).await?;
                    }
                    Ok(Event::Apply(_) | Event::Delete(_)) if crds_listed => {
                        self.set_crd_problem(None).await?;
                        rediscover_at.get_or_insert(tokio::time::Instant::now() + CRD_SETTLE);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let message = format!(
                            "can't watch CustomResourceDefinitions ({}); new CRDs are found every {}",
                            watch_error_text(&e),
                            humantime::format_duration(self.source.discovery_interval)
                        );
                        self.set_crd_problem(Some(message)).await?;
                    }
                },
                Some((id, ev)) = self.streams.next() => self.on_watch_event(id, ev).await?,
                _ = probe.tick(), if self.watches.values().any(|w| w.problem.is_some()) => {
                    self.probe().await?;
                }
            }
        }
    }

    /// Discovers the served kinds and adjusts the watches. Returns whether
    /// discovery succeeded.
    async fn discover(&mut self) -> Result<bool, Gone> {
        let served = match meshhub_kube::discover(&self.source.client, &self.source.kinds).await {
            Ok(s) => s,
            Err(e) => {
                let message = format!("API discovery failed: {}", error_text(&e));
                if self.discovery_problem.as_deref() != Some(&message) {
                    warn!(error = %message, "API discovery failed; retrying");
                }
                self.discovery_problem = Some(message);
                self.report().await?;
                return Ok(false);
            }
        };
        if self.discovery_problem.take().is_some() {
            info!("API discovery recovered");
        }
        let wanted: BTreeMap<String, Served> = served
            .into_iter()
            .map(|s| (s.kind.collection().to_owned(), s))
            .collect();
        // Unwatch what is no longer served (or served in another version).
        let stale: Vec<u64> = self
            .watches
            .iter()
            .filter(|(_, w)| {
                wanted
                    .get(w.served.kind.collection())
                    .is_none_or(|s| s.resource.api_version != w.served.resource.api_version)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            let w = self.watches.remove(&id).expect("listed");
            w.stop.cancel();
            info!(kind = %w.served.kind.kind(), api.version = %w.served.resource.api_version, "kind no longer served; unwatched");
            for unit in w.known.keys() {
                self.send(SourceEvent::Unit {
                    source: self.source.name.clone(),
                    unit: unit.clone(),
                    entries: Vec::new(),
                })
                .await?;
            }
        }
        // Watch what is newly served.
        let watched: BTreeSet<String> = self
            .watches
            .values()
            .map(|w| w.served.kind.collection().to_owned())
            .collect();
        for (collection, s) in wanted {
            if watched.contains(&collection) {
                continue;
            }
            let namespaces: Vec<Option<String>> =
                if s.namespaced && !self.source.namespaces.is_empty() {
                    self.source.namespaces.iter().cloned().map(Some).collect()
                } else {
                    vec![None]
                };
            for ns in namespaces {
                self.start_watch(s.clone(), ns);
            }
            info!(kind = %s.kind.kind(), api.version = %s.resource.api_version, "watching");
        }
        self.report().await?;
        self.maybe_synced().await?;
        Ok(true)
    }

    fn start_watch(&mut self, served: Served, namespace: Option<String>) {
        let id = self.next_id;
        self.next_id += 1;
        let api = api(
            self.source.client.clone(),
            &served.resource,
            namespace.as_deref(),
        );
        let stop = CancellationToken::new();
        let stream = watcher::watcher(api, watcher::Config::default())
            .backoff(WatchBackoff::new())
            .take_until(stop.clone().cancelled_owned())
            .map(move |ev| (id, ev))
            .boxed();
        self.streams.push(stream);
        self.watches.insert(
            id,
            Watch {
                served,
                namespace,
                stop,
                synced: false,
                listing: None,
                known: HashMap::new(),
                skip_status_only: self.source.feed.is_some(),
                problem: None,
            },
        );
    }

    async fn on_watch_event(
        &mut self,
        id: u64,
        ev: Result<Event<DynamicObject>, watcher::Error>,
    ) -> Result<(), Gone> {
        let source = self.source.name.clone();
        let Some(w) = self.watches.get_mut(&id) else {
            return Ok(()); // an unwatched kind's last words
        };
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                let forbidden = is_forbidden(&e);
                let message = format!(
                    "{} {}: {}",
                    w.served.kind.kind(),
                    w.namespace
                        .as_deref()
                        .map_or("(all namespaces)".to_owned(), |n| format!("in {n}")),
                    watch_error_text(&e)
                );
                if w.problem.as_deref() != Some(&message) {
                    warn!(kind = %w.served.kind.kind(), namespace = ?w.namespace, error = %message, "watch failing; retrying with backoff");
                    w.problem = Some(message);
                    // Not allowed to list: waiting for it would keep the
                    // hub unready forever. Report it and go on.
                    if forbidden && !w.synced {
                        w.synced = true;
                    }
                    self.report().await?;
                    self.maybe_synced().await?;
                } else {
                    debug!(error = %message, "watch still failing");
                }
                return Ok(());
            }
        };
        if w.problem.take().is_some() {
            info!(kind = %w.served.kind.kind(), namespace = ?w.namespace, "watch recovered");
            self.report().await?;
        }
        let w = self.watches.get_mut(&id).expect("present");
        let seen = match (&self.source.feed, &ev) {
            (Some(_), Event::InitApply(obj) | Event::Apply(obj)) => seen(&w.served, obj),
            _ => None,
        };
        let out = w.absorb(&source, ev);
        if let Some(mut seen) = seen {
            // What the pipeline has of it (a change of status alone is not
            // delivered).
            seen.delivered = w
                .known
                .get(&seen.unit)
                .and_then(|k| k.resource_version.clone());
            if let Some(feed) = &self.source.feed
                && feed.send(Feed::Seen(Box::new(seen))).await.is_err()
            {
                // The writer ended (shutdown): nothing more to report.
                self.source.feed = None;
            }
        }
        for ev in out {
            self.send(ev).await?;
        }
        self.maybe_synced().await
    }

    /// While a watch is failing, checks whether its API answers again (a
    /// resumed watch says nothing until an object changes).
    async fn probe(&mut self) -> Result<(), Gone> {
        let mut recovered = Vec::new();
        for (id, w) in &self.watches {
            if w.problem.is_none() {
                continue;
            }
            let api = api(
                self.source.client.clone(),
                &w.served.resource,
                w.namespace.as_deref(),
            );
            if api
                .list_metadata(&ListParams::default().limit(1))
                .await
                .is_ok()
            {
                recovered.push(*id);
            }
        }
        if recovered.is_empty() {
            return Ok(());
        }
        for id in recovered {
            if let Some(w) = self.watches.get_mut(&id) {
                w.problem = None;
                info!(kind = %w.served.kind.kind(), namespace = ?w.namespace, "API answers again; watch resuming");
            }
        }
        self.report().await
    }

    async fn set_crd_problem(&mut self, problem: Option<String>) -> Result<(), Gone> {
        if self.crd_problem == problem {
            return Ok(());
        }
        match &problem {
            Some(p) => warn!(error = %p, "CRD watch failing"),
            None if self.crd_problem.is_some() => info!("CRD watch recovered"),
            None => {}
        }
        self.crd_problem = problem;
        self.report().await
    }

    /// Sends [`SourceEvent::Synced`] once, when every watch delivered its
    /// initial list (and discovery ran at least once).
    async fn maybe_synced(&mut self) -> Result<(), Gone> {
        if self.synced_sent || self.discovery_problem.is_some() && self.watches.is_empty() {
            return Ok(());
        }
        if self.watches.values().all(|w| w.synced) {
            self.synced_sent = true;
            let objects: usize = self.watches.values().map(|w| w.known.len()).sum();
            info!(
                watches = self.watches.len(),
                objects, "initial lists delivered"
            );
            self.send(SourceEvent::Synced {
                source: self.source.name.clone(),
            })
            .await?;
        }
        Ok(())
    }

    /// Sends the current problems when they changed.
    async fn report(&mut self) -> Result<(), Gone> {
        let problems: Vec<String> = self
            .discovery_problem
            .iter()
            .chain(self.crd_problem.iter())
            .chain(self.watches.values().filter_map(|w| w.problem.as_ref()))
            .cloned()
            .collect();
        if problems == self.reported {
            return Ok(());
        }
        self.reported = problems.clone();
        self.send(SourceEvent::Health {
            source: self.source.name.clone(),
            problems,
        })
        .await
    }

    async fn send(&mut self, ev: SourceEvent) -> Result<(), Gone> {
        if let (Some(feed), SourceEvent::Unit { unit, entries, .. }) = (&self.source.feed, &ev)
            && entries.is_empty()
            && feed.send(Feed::Gone(unit.clone())).await.is_err()
        {
            self.source.feed = None;
        }
        self.events.send(ev).await.map_err(|_| Gone)
    }
}

/// The unit event of one object (and notes what was delivered).
fn apply(
    source: &Arc<str>,
    served: &Served,
    known: &mut HashMap<Arc<str>, Delivered>,
    unit: Arc<str>,
    obj: DynamicObject,
    fingerprint: Option<u64>,
) -> SourceEvent {
    known.insert(
        unit.clone(),
        Delivered {
            resource_version: obj.metadata.resource_version.clone(),
            fingerprint,
        },
    );
    let changed_by = last_manager(&obj);
    SourceEvent::Unit {
        source: source.clone(),
        unit: unit.clone(),
        entries: vec![Entry {
            origin: Origin {
                source: source.clone(),
                unit,
                document: 0,
                line: None,
            },
            parsed: Ok(to_object(&served.resource, obj)),
            changed_by,
        }],
    }
}

/// What the status writer learns of an Istio object (`None` for other
/// kinds, and objects without a generation).
fn seen(served: &Served, obj: &DynamicObject) -> Option<Seen> {
    let gateway = if is_gateway_api_group(&served.resource.group) {
        let shape = Shape::of(&served.resource.kind)?;
        let parent_refs = match shape {
            Shape::Parents => obj
                .data
                .get("spec")
                .and_then(|s| s.get("parentRefs"))
                .and_then(serde_json::Value::as_array)
                .cloned()
                .unwrap_or_default(),
            Shape::Conditions => Vec::new(),
        };
        Some(GatewaySeen {
            shape,
            parent_refs,
            ours: meshhub_kube::status::gateway::ours(obj.data.get("status"), shape),
        })
    } else if served.kind.is_schemaless() || !served.resource.group.ends_with("istio.io") {
        return None;
    } else {
        None
    };
    let m = &obj.metadata;
    Some(Seen {
        unit: unit_name(served, obj),
        resource: served.resource.clone(),
        collection: Arc::from(served.kind.collection()),
        namespace: m.namespace.clone().filter(|_| served.namespaced),
        name: m.name.clone()?,
        generation: m.generation?,
        resource_version: m.resource_version.clone(),
        delivered: None,
        status: gateway
            .is_none()
            .then(|| meshhub_kube::status::observed(obj))
            .flatten(),
        gateway,
    })
}

/// `<group|core>/<Kind>/<namespace>/<name>` (no namespace part for
/// cluster-scoped objects).
fn unit_name(served: &Served, obj: &DynamicObject) -> Arc<str> {
    let group = if served.resource.group.is_empty() {
        "core"
    } else {
        &served.resource.group
    };
    let name = obj.metadata.name.as_deref().unwrap_or_default();
    match obj.metadata.namespace.as_deref() {
        Some(ns) if served.namespaced => {
            Arc::from(format!("{group}/{}/{ns}/{name}", served.resource.kind))
        }
        _ => Arc::from(format!("{group}/{}/{name}", served.resource.kind)),
    }
}

#[cfg(test)]
mod tests;

//! The pipeline: the single task that owns the store and the snapshot
//! cache's writer.
//!
//! Source events are applied to the [`Store`] as they arrive; changes are
//! debounced (a quiet period, bounded by a maximum wait) and then the
//! groups' snapshots are assembled from the resolved objects, rebuilding
//! only what the change touched ([`assembly`]), and the groups whose
//! content moved are published. The
//! first snapshots are published as soon as every source has synced, without
//! waiting, so that readiness follows the initial state promptly.
//!
//! Snapshots always hold every collection of the kind table (an empty one
//! when a group has no object of that kind), so that every requested
//! collection has an answer. Encoded resources are shared between groups
//! (the bytes were made once, by the store); a collection's version changes
//! only when its content for that group does, because it is a digest of the
//! names and versions it holds.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use meshhub_mcp::cache::{Group, SnapshotWriter};
use meshhub_mcp::snapshot::Snapshot;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::analysis::background::Background;
use crate::analysis::{Analysis, AnalysisSpec};
use crate::audit::{AuditEvent, AuditLog};
use crate::groups::GroupRules;
use crate::history::{History, Pins, version_id};
use crate::rollout;
use crate::source::SourceEvent;
use crate::store::{Changes, Store};

use self::assembly::{Assembly, Delta, Placed};
use meshhub_rollout::serving;

/// Histogram: how long changes waited in the debouncer before being
/// published, in seconds.
pub const METRIC_DEBOUNCE_WAIT: &str = "meshhub_debounce_wait_seconds";
/// Histogram: time to resolve the store and build every group's snapshot.
pub const METRIC_BUILD: &str = "meshhub_snapshot_build_seconds";
/// Counter: snapshot builds published.
pub const METRIC_PUBLICATIONS: &str = "meshhub_snapshot_publications_total";
/// Counter: source events received, by `source`.
pub const METRIC_SOURCE_EVENTS: &str = "meshhub_source_events_total";
/// Gauge: objects served (after conflict resolution).
pub const METRIC_OBJECTS: &str = "meshhub_objects";
/// Gauge: entries rejected (unreadable documents, invalid objects).
pub const METRIC_REJECTED: &str = "meshhub_objects_rejected";
/// Gauge: objects defined more than once.
pub const METRIC_CONFLICTS: &str = "meshhub_object_conflicts";

/// The pipeline task's state.
pub struct Pipeline {
    store: Store,
    writer: SnapshotWriter,
    rules: GroupRules,
    debouncer: Debouncer,
    sources: BTreeMap<Arc<str>, SourceState>,
    status: watch::Sender<Arc<Status>>,
    published: HashMap<Group, Arc<Snapshot>>,
    /// The last build's classes and shared snapshots ([`assembly`]).
    assembly: Assembly,
    generation: u64,
    started: Instant,
    rule_updates: Option<watch::Receiver<GroupRules>>,
    record: recording::Recording,
    rollout: Option<Staged>,
    analysis: Analysis,
    /// Per group, the latest build analysis let through (what a cluster
    /// keeps while a newer build is held back).
    good: HashMap<Group, Arc<Snapshot>>,
    /// The clusters' reports, read for their Istio releases (`None`: not
    /// followed, or their owner ended); see [`istio`].
    istio: Option<watch::Receiver<crate::upward::Reports>>,
    /// The report of each cluster last read for its facts (by pointer).
    istio_read: HashMap<String, Arc<crate::upward::ClusterReport>>,
    /// The Gateway API kinds each cluster can take, from the same reports.
    carried: carried::Carried,
    /// Groups to analyse again at the next build although their content
    /// is unchanged (their cluster's Istio release changed).
    reanalyse: BTreeSet<Group>,
    /// Groups whose Gateway API kinds changed since the last build
    /// (looked at again: a kind withheld or given back).
    recarried: BTreeSet<Group>,
    /// Per group and collection withheld, the objects it is not given.
    withheld_objects: BTreeMap<(Group, Arc<str>), usize>,
    /// The analysis beside serving, while [`Pipeline::run`] runs and no
    /// code is held back ([`analysing`]).
    background: Option<Background>,
    /// Analyses taken that the status does not show yet, and when it last
    /// showed them ([`analysing`]).
    analysis_unshown: bool,
    analysis_shown_at: Option<Instant>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("sources", &self.sources)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// A pipeline over `store`, publishing through `writer` for every group
    /// of `rules`, waiting for the named sources to sync. Returns the status
    /// reader too.
    pub fn new(
        store: Store,
        writer: SnapshotWriter,
        rules: GroupRules,
        debounce: Debounce,
        sources: impl IntoIterator<Item = String>,
    ) -> (Self, watch::Receiver<Arc<Status>>) {
        let sources: BTreeMap<Arc<str>, SourceState> = sources
            .into_iter()
            .map(|s| (Arc::from(s.as_str()), SourceState::default()))
            .collect();
        let (status, rx) = watch::channel(Arc::new(Status::default()));
        let mut p = Self {
            store,
            writer,
            rules,
            debouncer: Debouncer::new(debounce),
            sources,
            status,
            published: HashMap::new(),
            assembly: Assembly::default(),
            generation: 0,
            started: Instant::now(),
            rule_updates: None,
            record: recording::Recording::default(),
            rollout: None,
            analysis: Analysis::default(),
            good: HashMap::new(),
            istio: None,
            istio_read: HashMap::new(),
            carried: carried::Carried::default(),
            reanalyse: BTreeSet::new(),
            recarried: BTreeSet::new(),
            withheld_objects: BTreeMap::new(),
            background: None,
            analysis_unshown: false,
            analysis_shown_at: None,
        };
        p.update_status();
        (p, rx)
    }

    /// Follows grouping rules from `updates` (configuration reloads): on
    /// every change the objects are placed again, groups that disappeared
    /// are withdrawn from the cache (their streams end) and the snapshots
    /// are rebuilt at once. The current value is taken as already applied.
    pub fn follow_rules(mut self, mut updates: watch::Receiver<GroupRules>) -> Self {
        updates.borrow_and_update();
        self.rule_updates = Some(updates);
        self
    }

    /// Records every group's publications in `history` and serves the
    /// pins it holds instead of the sources' snapshots.
    pub fn record_history(mut self, history: History) -> Self {
        self.record.pins = Some(history.pins());
        self.record.history = Some(history);
        self
    }

    /// Analyses every group's build as `spec` says, holding back the
    /// versions it names (see [`crate::analysis`]).
    pub fn analyse(mut self, spec: AnalysisSpec) -> Self {
        self.analysis = Analysis::new(spec);
        self.store.keep_facts(self.analysis.enabled());
        self
    }

    /// What a group is served when no pin says otherwise: its latest
    /// build, or while that is held back, its last good one.
    fn servable(&self, group: &Group) -> Option<&Arc<Snapshot>> {
        if self.analysis.is_held(group) {
            self.good.get(group)
        } else {
            self.published.get(group)
        }
    }

    /// Writes source changes, rejections and publications to `audit`.
    pub fn audit(mut self, audit: AuditLog) -> Self {
        self.record.audit = audit;
        self
    }

    fn all_synced(&self) -> bool {
        self.sources.values().all(|s| s.synced)
    }

    /// Runs until `shutdown` (the sources' end doesn't stop it: the last
    /// snapshots keep being served).
    pub async fn run(
        mut self,
        mut events: mpsc::Receiver<SourceEvent>,
        shutdown: CancellationToken,
    ) {
        self.started = Instant::now();
        if self.analysis.enabled() && !self.analysis.decides() {
            self.background = Some(Background::spawn(shutdown.clone()));
        }
        if self.all_synced() {
            self.publish(Instant::now());
        }
        let mut open = true;
        let mut rule_updates = self.rule_updates.take();
        let mut pin_updates = self.record.pins.clone();
        let mut istio = self.istio.take();
        if pin_updates.is_some() {
            self.apply_pins(&mut pin_updates);
        }
        loop {
            let deadline = if self.generation > 0 {
                self.debouncer.deadline()
            } else {
                None
            };
            let due = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let rules_changed = async {
                match rule_updates.as_mut() {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            let pins_changed = async {
                match pin_updates.as_mut() {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            let istio_changed = async {
                match istio.as_mut() {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            let rollout_event = async {
                match self.rollout.as_mut() {
                    Some(s) => s.next().await,
                    None => std::future::pending().await,
                }
            };
            let analysed = async {
                match self.background.as_mut() {
                    Some(b) => b.results.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                ev = rollout_event => self.on_rollout_event(ev),
                ok = pins_changed => if ok {
                    self.apply_pins(&mut pin_updates);
                } else {
                    pin_updates = None;
                },
                ok = rules_changed => match (ok, rule_updates.as_mut()) {
                    (true, Some(rx)) => {
                        let rules = rx.borrow_and_update().clone();
                        self.set_rules(rules);
                    }
                    // The configuration owner is gone: keep the last rules.
                    _ => rule_updates = None,
                },
                ok = istio_changed => self.on_istio(&mut istio, ok),
                Some(done) = analysed => self.analysed(done),
                _ = due => self.publish(Instant::now()),
                ev = events.recv(), if open => match ev {
                    Some(ev) => self.on_event(ev),
                    None => {
                        debug!("every source ended; serving the last snapshots");
                        open = false;
                    }
                },
            }
        }
        if let Some(b) = self.background.take() {
            b.stop().await;
        }
        debug!("pipeline stopped");
    }

    fn on_event(&mut self, ev: SourceEvent) {
        let now = Instant::now();
        match ev {
            SourceEvent::Synced { source } => {
                info!(source.name = %source, "source synced");
                if let Some(s) = self.sources.get_mut(&source) {
                    s.synced = true;
                }
                if self.generation == 0 && self.all_synced() {
                    self.debouncer.touch(self.started);
                    self.publish(now);
                } else {
                    self.update_status();
                }
            }
            SourceEvent::Health { source, problems } => {
                if let Some(s) = self.sources.get_mut(&source) {
                    s.problems = problems;
                }
                self.update_status();
            }
            ev @ SourceEvent::Unit { .. } => {
                if let SourceEvent::Unit { source, .. } = &ev {
                    metrics::counter!(METRIC_SOURCE_EVENTS, "source" => source.to_string())
                        .increment(1);
                }
                let change = self.record.wanted().then(|| recording::describe(&ev));
                if self.store.apply(ev) {
                    self.debouncer.touch(now);
                    if let Some((origin, audit)) = change {
                        self.record.changed(origin, audit);
                    }
                }
            }
        }
    }

    /// New grouping rules: place every object again, withdraw the groups
    /// that are gone, rebuild.
    fn set_rules(&mut self, rules: GroupRules) {
        let kept: BTreeSet<Group> = rules.groups().into_iter().collect();
        for group in self.rules.groups() {
            if !kept.contains(&group) {
                self.writer.remove(&group);
                self.published.remove(&group);
                self.good.remove(&group);
                self.analysis.remove(&group);
                info!(cluster = %group, "group withdrawn (cluster removed from the configuration)");
            }
        }
        self.store.set_rules(rules.clone());
        self.rules = rules;
        if self.generation > 0 {
            // A reload is deliberate: no reason to wait for quiet.
            self.publish(Instant::now());
        }
    }

    /// Assembles every group's snapshot (rebuilding what changed) and
    /// publishes the groups whose content moved.
    fn publish(&mut self, now: Instant) {
        let waited = self.debouncer.take(now);
        let started = std::time::Instant::now();
        let origins = self.record.take_origins();
        let resolved = self.store.resolve();
        let analysing = self.analysis.enabled();
        let affected = match &resolved.changes {
            Changes::All => {
                // Every group starts with every collection, empty.
                let collections: Vec<Arc<str>> = self
                    .store
                    .kinds()
                    .iter()
                    .map(|k| k.collection_shared().clone())
                    .collect();
                self.assembly.reset(&self.rules.groups(), &collections);
                let every = resolved.objects.values().map(|a| Delta {
                    before: None,
                    after: Some(Placed::from(a)),
                });
                self.assembly
                    .update(every, analysing, &self.published, true)
            }
            Changes::Some(changed) => {
                let deltas = changed.iter().map(|c| Delta {
                    before: c.before.as_ref().map(Placed::from),
                    after: c.after.as_ref().map(Placed::from),
                });
                self.assembly
                    .update(deltas, analysing, &self.published, false)
            }
        };
        // A cluster that can't take a kind is served its collection empty
        // (looked at again when its content or what it can take changed).
        let withheld = self.carried.withheld();
        if matches!(resolved.changes, Changes::All) {
            self.withheld_objects.clear();
        }
        let mut look: BTreeSet<Group> = affected.into_iter().collect();
        look.extend(self.reanalyse.iter().cloned());
        look.extend(std::mem::take(&mut self.recarried));
        // Groups of one content share its facts (a group withholding a
        // kind has its own: analysis reads Gateway API kinds).
        let mut facts: HashMap<usize, Arc<[Arc<meshhub_analyze::Facts>]>> = HashMap::new();
        let mut queued = analysing::Queued::default();
        let mut changed_groups = 0usize;
        for group in &look {
            let Some((signature, built)) = self.assembly.of(group) else {
                // Every group of the rules has a snapshot after a build.
                warn!(cluster = %group, "no snapshot assembled for the group; not published");
                continue;
            };
            let built = built.clone();
            let withholding = withheld
                .get(group)
                .filter(|w| w.keys().any(|c| !built.collection(c).is_empty()));
            // This group's entries only (sorted by group: a range, not a
            // pass over every group's).
            let stale: Vec<(Group, Arc<str>)> = self
                .withheld_objects
                .range((group.clone(), Arc::from(""))..)
                .take_while(|((g, _), _)| g == group)
                .map(|(k, _)| k.clone())
                .collect();
            for k in stale {
                self.withheld_objects.remove(&k);
            }
            let built = &match withholding {
                // A cluster without a kind's CRD whose content has objects
                // of that kind: made per group.
                Some(w) => {
                    for coll in w.keys() {
                        let n = built.collection(coll).len();
                        if n > 0 {
                            self.withheld_objects
                                .insert((group.clone(), coll.clone()), n);
                        }
                    }
                    assembly::without(&built, w.keys())
                }
                None => built,
            };
            let prev = self.published.get(group);
            // A group whose content did not move keeps its snapshot.
            let snapshot = match prev {
                Some(p) if assembly::same_snapshot(p, built) => {
                    if !self.reanalyse.remove(group) {
                        continue;
                    }
                    p.clone()
                }
                _ => built.clone(),
            };
            changed_groups += 1;
            let facts = analysing.then(|| match withholding {
                Some(w) => Arc::from(self.assembly.facts(group, |c| w.contains_key(c))),
                None => facts
                    .entry(signature)
                    .or_insert_with(|| self.assembly.facts(group, |_| false).into())
                    .clone(),
            });
            let held = self.analyse_build(group, &snapshot, facts.as_ref(), &mut queued);
            let staged = self
                .rollout
                .as_ref()
                .is_some_and(|s| s.controller.governs(group));
            if !held.is_empty() {
                debug!(cluster = %group, "snapshot built; held back by analysis");
            }
            self.record
                .published(group, &snapshot, &origins, &held, staged && held.is_empty());
            self.published.insert(group.clone(), snapshot);
            if !staged {
                self.serve_group(group);
            }
        }
        let distinct = self.assembly.distinct();
        self.reanalyse.clear();
        if let Some(b) = &self.background {
            b.queue(queued.jobs);
        }
        self.record.rejections(&resolved.rejected);
        self.stage_built();

        self.generation += 1;
        metrics::counter!(METRIC_PUBLICATIONS).increment(1);
        metrics::histogram!(METRIC_BUILD).record(started.elapsed().as_secs_f64());
        if let Some(w) = waited {
            metrics::histogram!(METRIC_DEBOUNCE_WAIT).record(w.as_secs_f64());
        }
        metrics::gauge!(METRIC_OBJECTS).set(resolved.objects.len() as f64);
        metrics::gauge!(METRIC_REJECTED).set(resolved.rejected.len() as f64);
        metrics::gauge!(METRIC_CONFLICTS).set(resolved.conflicts.len() as f64);
        for c in &resolved.conflicts {
            warn!(
                object.kind = %c.kind,
                object.name = %c.key.name,
                winner = %c.winner,
                ignored = ?c.ignored.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "object defined more than once; serving the smallest origin"
            );
        }
        info!(
            generation = self.generation,
            objects = resolved.objects.len(),
            rejected = resolved.rejected.len(),
            conflicts = resolved.conflicts.len(),
            changed = changed_groups,
            distinct,
            waited_ms = waited.map(|w| w.as_millis() as u64),
            "snapshots built"
        );
        let mut status = self.base_status();
        status.published_at = Some(humantime::format_rfc3339_millis(SystemTime::now()).to_string());
        status.last_wait_ms = waited.map(|w| w.as_millis() as u64);
        status.objects = resolved.objects.len();
        status.rejected = resolved.rejected;
        status.conflicts = resolved.conflicts;
        status.warnings = resolved.warnings;
        drop(facts);
        status.served = Arc::new(resolved.objects);
        status.analysis = self.analysis.view();
        status.withheld = carried::views(&withheld, &self.withheld_objects);
        self.analysis_unshown = false;
        self.status.send_replace(Arc::new(status));
    }

    /// Serves the pins in force: a newly pinned group gets its pinned
    /// snapshot; a group no longer pinned gets what the serving decision
    /// says without the pin (the rollout's decision for a governed
    /// cluster — a held cluster stays held —, else its newest servable
    /// build). The rollout learns which clusters are pinned.
    fn apply_pins(&mut self, updates: &mut Option<watch::Receiver<Pins>>) {
        let Some(rx) = updates.as_mut() else { return };
        let pins = rx.borrow_and_update().clone();
        let mut changed = Vec::new();
        for (cluster, pin) in pins.iter() {
            let Some(group) = self.rules.find(cluster) else {
                continue;
            };
            if self
                .record
                .serve_pin(&group, pin.record.since_unix_ms, &pin.snapshot)
            {
                info!(cluster = %group, version = %pin.record.version, by = %pin.record.by, "serving the pinned version");
                self.record.audit.record(AuditEvent::Published {
                    cluster: group.to_string(),
                    version: pin.record.version.clone(),
                    resources: pin.snapshot.collections().map(|(_, c)| c.len()).sum(),
                    served_pinned: Some(pin.record.version.clone()),
                    held_back: Vec::new(),
                    staged: false,
                });
                changed.push(group);
            }
        }
        let unpinned = self.record.unpinned(&pins);
        if let Some(s) = self.rollout.as_mut() {
            let pinned = self
                .record
                .pinned_groups()
                .map(ToString::to_string)
                .collect();
            let serve = s.controller.set_pins(rollout::now_ms(), pinned);
            self.serve(serve);
        }
        for group in unpinned {
            self.serve_group(&group);
            let served = self.writer.reader().snapshot(&group);
            info!(cluster = %group, version = ?served.as_ref().map(|s| version_id(s)), "pin lifted; serving what the serving decision says");
            if let Some(snapshot) = served {
                self.record.audit.record(AuditEvent::Published {
                    cluster: group.to_string(),
                    version: version_id(&snapshot),
                    resources: snapshot.collections().map(|(_, c)| c.len()).sum(),
                    served_pinned: None,
                    held_back: Vec::new(),
                    staged: false,
                });
            }
        }
        for group in changed {
            self.serve_group(&group);
        }
    }

    /// Serves `group` what the one serving decision
    /// ([`meshhub_rollout::serving::decide`]) says: its pin; else, when the
    /// rollout governs it, the rollout's decision (nothing when this
    /// replica can't produce it: the cluster keeps what it holds); else its
    /// newest build analysis lets through. Every snapshot a group is served
    /// goes through here.
    fn serve_group(&mut self, group: &Group) {
        let pin = self.record.pin_snapshot(group);
        let controller = self.rollout.as_ref().map(|s| &s.controller);
        let governs = controller.is_some_and(|c| c.governs(group));
        let decided = serving::decide(
            pin,
            governs,
            || controller.map_or(serving::Ruling::Keep, |c| c.decision(group)),
            || self.servable(group).cloned(),
        );
        let current = self.writer.reader().snapshot(group);
        let (snapshot, basis) = match decided {
            serving::Served::Serve(s, basis) => (s, basis),
            serving::Served::Keep => {
                debug!(cluster = %group, "nothing new to serve the cluster: it keeps what it holds");
                return;
            }
            serving::Served::Withdraw => {
                if current.is_some() {
                    warn!(cluster = %group, "the version served was refused or rolled back and the one decided is not available here: withdrawn (the cluster keeps what it last ACKed)");
                    self.writer.remove(group);
                }
                return;
            }
        };
        if current.is_some_and(|c| Arc::ptr_eq(&c, &snapshot)) {
            return;
        }
        let woken = self.writer.set(group, snapshot);
        debug!(cluster = %group, ?basis, woken = woken.len(), "snapshot served");
    }

    /// Something for the rollout controller.
    fn on_rollout_event(&mut self, ev: StagedEvent) {
        let Some(s) = self.rollout.as_mut() else {
            return;
        };
        let reclustered = matches!(ev, StagedEvent::Reloaded(true));
        let serve = s.handle(ev);
        self.serve(serve);
        // Before the first build there is nothing to offer: the first
        // build offers everything.
        if reclustered && self.generation > 0 {
            self.serve_ungoverned();
            // A cluster now governed was served its builds directly until
            // now: the rollout learns what it is served.
            self.stage_built();
        }
    }

    /// Groups the rollout no longer governs (a reload took their agent
    /// away) are served as every ungoverned group is, instead of what the
    /// rollout last held them on.
    fn serve_ungoverned(&mut self) {
        let Some(s) = self.rollout.as_ref() else {
            return;
        };
        let groups: Vec<Group> = self
            .published
            .keys()
            .filter(|g| !s.controller.governs(g))
            .cloned()
            .collect();
        for group in groups {
            self.serve_group(&group);
        }
    }

    /// Offers the rollout the newest builds. It stages what analysis lets
    /// through: a held-back build is not offered (the cluster's last good
    /// one is).
    fn stage_built(&mut self) {
        if self.rollout.is_none() {
            return;
        }
        let servable: HashMap<Group, Arc<Snapshot>> = self
            .published
            .keys()
            .filter_map(|g| self.servable(g).map(|s| (g.clone(), s.clone())))
            .collect();
        if let Some(s) = self.rollout.as_mut() {
            let serve = s.controller.built(rollout::now_ms(), &servable);
            self.serve(serve);
        }
    }

    /// Serves the groups whose rollout decision changed (through the one
    /// serving decision: a pinned group keeps its pin), and looks again at
    /// those whose decision this replica can't produce.
    fn serve(&mut self, serve: rollout::Serve) {
        let mut serve = serve;
        // Clusters just sent their new version may have ACKed it already
        // (bounded: each round only follows what the previous released).
        for _ in 0..3 {
            let Some(s) = self.rollout.as_mut() else {
                break;
            };
            let more = s.acks_already_in();
            if more.is_empty() {
                break;
            }
            serve.extend(more);
        }
        let unavailable: Vec<Group> = self.rollout.as_ref().map_or_else(Vec::new, |s| {
            s.controller
                .unavailable_clusters()
                .map(|c| Group::from(c.as_str()))
                .collect()
        });
        for group in serve.into_iter().map(|(g, _)| g).chain(unavailable) {
            self.serve_group(&group);
        }
    }
}

mod analysing;
mod assembly;
mod carried;
mod debounce;
mod istio;
pub mod recording;
pub mod spec;
mod staged;
mod status;

use self::staged::{Staged, StagedEvent};

pub use debounce::Debouncer;
pub use spec::{Debounce, RawDebounce};
use status::SourceState;
pub use status::{SourceStatus, Status};

#[cfg(test)]
mod tests;

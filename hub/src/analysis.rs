//! Per-cluster analysis: after each change, the objects a cluster's group
//! receives are analysed together (meshhub-analyze: Istio's analyzer codes)
//! and, with `analysis.holdBack`, a version carrying a message of a chosen
//! code is held back — the cluster keeps its last good version.
//!
//! [`Analysis`] is plain state owned by the pipeline (its single writer):
//! the pipeline hands it each changed group's facts and serves or holds
//! back as it decides. Results go to `/status` (through the pipeline's
//! status), metrics and the audit log; the history records why a version
//! was held back.

pub mod background;
pub mod cluster;
pub mod spec;
mod worker;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Instant, SystemTime};

use meshhub_analyze::{Facts, IstioVersion, Message, Severity};
use meshhub_api::analysis::{AnalysisMessage, ClusterAnalysis, HeldBack};
use meshhub_mcp::cache::Group;
use tracing::{info, warn};

use crate::audit::{AuditEvent, AuditLog};

pub use cluster::ClusterFacts;
pub use spec::{AnalysisSpec, RawAnalysis};

/// Gauge: analysis messages about each cluster's latest build, by
/// `cluster`, `code` and `severity`.
pub const METRIC_MESSAGES: &str = "meshhub_analysis_messages";
/// Gauge: 1 while a cluster's latest build is held back, by `cluster`.
pub const METRIC_HELD_BACK: &str = "meshhub_analysis_held_back";
/// Histogram: time to analyse one group's build, in seconds.
pub const METRIC_SECONDS: &str = "meshhub_analysis_seconds";
/// Counter: group builds whose content another group (or an earlier build
/// of theirs) had: its set analysis reused, only the version check run.
pub const METRIC_REUSED: &str = "meshhub_analysis_reused_total";
/// Counter: group builds whose set analysis was worked out from the
/// group's previous build's, re-running the analyzers only on the objects a
/// change can reach.
pub const METRIC_INCREMENTAL: &str = "meshhub_analysis_incremental_total";
/// Counter: objects the analyzers ran on in incremental set analyses (the
/// changed objects' neighbourhoods).
pub const METRIC_INCREMENTAL_OBJECTS: &str = "meshhub_analysis_incremental_objects_total";

/// What to do with a group's new build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Serve it.
    Serve,
    /// Keep it from the cluster; the messages (one line each) say why.
    HoldBack(Vec<String>),
}

/// One group's latest analysis.
#[derive(Debug)]
struct GroupState {
    /// What `/status` shows of it (shared by every view until it changes).
    view: Arc<ClusterAnalysis>,
    /// (code, severity) → count, as last set on the gauge.
    counts: BTreeMap<(&'static str, Severity), usize>,
    /// The build analysed and its set analysis: the base its next build's
    /// is worked out from (and, held, what keeps the memo's entry alive
    /// while a group has that content).
    base: Base,
}

/// A build's objects and their set analysis (`analyze_set`'s messages):
/// what a later build of the group is analysed incrementally from. Both
/// are shared: the objects with every group of the same content (and each
/// object with every group holding it), the messages with the memo.
#[derive(Clone, Debug)]
pub struct Base {
    facts: Arc<[Arc<Facts>]>,
    set: Set,
    /// How many incremental runs separate `set` from one analysed from
    /// scratch (see [`REBASE_EVERY`]).
    depth: u32,
}

/// A set analysis is worked out from scratch again after this many
/// incremental analyses in a row led to it: were an analyzer's
/// neighbourhood ever too narrow (a relation between objects its keys
/// miss), a message it left stale would otherwise last until the objects
/// around it change; so it lasts this many incremental analyses at most
/// (a group reusing sets other groups hold inherits their count), for a
/// fraction of a whole analysis per build ((241 − 71) / 100 = 1.7 µs
/// beside 71 µs at 202 objects: 2.4 %).
pub const REBASE_EVERY: u32 = 100;

/// Every group's analysis, as the status shows it.
pub type AnalysisView = Arc<[Arc<ClusterAnalysis>]>;

/// The analysis of every group (owned by the pipeline).
#[derive(Debug, Default)]
pub struct Analysis {
    spec: Option<AnalysisSpec>,
    groups: BTreeMap<Group, GroupState>,
    /// What each cluster's agent reported that analysis reads (absent:
    /// unknown; the release is then checked as the oldest: see
    /// meshhub-analyze's skew).
    clusters: BTreeMap<Group, ClusterFacts>,
    /// Every message some group carries, once: the messages about objects
    /// every cluster receives are the same in every group (with
    /// "everything to every cluster", all of them), so each group holds
    /// pointers, not copies (issue 43: hundreds of KiB per cluster).
    interned: HashSet<Arc<AnalysisMessage>>,
    /// How many messages were interned after the last sweep of those no
    /// group holds (a sweep visits every one: it runs when their number
    /// has doubled, so a view after one group's change stays cheap).
    interned_kept: usize,
    /// The last view, while no group's analysis changed since.
    view: Option<AnalysisView>,
    /// The set analysis (every analyzer but the version check) of each
    /// content some group holds, by its version id: groups of identical
    /// content ("everything to every cluster") are analysed once per
    /// change, not once each; a group analysed again for a new Istio
    /// release reuses its set's. Held by the groups (`GroupState::base`);
    /// an entry no group holds any more is dropped.
    memo: Memo,
}

impl Analysis {
    /// Analysis as `spec` says (off when it is disabled).
    pub fn new(spec: AnalysisSpec) -> Self {
        Self {
            spec: spec.enabled.then_some(spec),
            groups: BTreeMap::new(),
            clusters: BTreeMap::new(),
            interned: HashSet::new(),
            interned_kept: 0,
            view: None,
            memo: Memo::default(),
        }
    }

    /// Whether groups are analysed (the store then keeps objects' facts).
    pub fn enabled(&self) -> bool {
        self.spec.is_some()
    }

    /// Takes the clusters' Istio releases alone (every other fact
    /// unknown); the groups whose release changed.
    pub fn set_releases(&mut self, releases: BTreeMap<Group, IstioVersion>) -> Vec<Group> {
        self.set_clusters(
            releases
                .into_iter()
                .map(|(g, v)| (g, ClusterFacts::of_release(v)))
                .collect(),
        )
    }

    /// Takes what some clusters' agents reported anew (`None`: the cluster
    /// is gone from the reports); the groups whose facts changed.
    pub fn update_clusters(
        &mut self,
        updates: impl IntoIterator<Item = (Group, Option<ClusterFacts>)>,
    ) -> Vec<Group> {
        let mut changed = Vec::new();
        for (group, facts) in updates {
            let moved = match facts {
                Some(f) if self.clusters.get(&group) != Some(&f) => {
                    self.clusters.insert(group.clone(), f);
                    true
                }
                Some(_) => false,
                None => self.clusters.remove(&group).is_some(),
            };
            if moved {
                changed.push(group);
            }
        }
        changed
    }

    /// Takes what the clusters' agents reported; the groups whose facts
    /// changed (they need analysing again).
    pub fn set_clusters(&mut self, clusters: BTreeMap<Group, ClusterFacts>) -> Vec<Group> {
        if clusters == self.clusters {
            return Vec::new();
        }
        let mut changed: Vec<Group> = clusters
            .iter()
            .filter(|(g, c)| self.clusters.get(*g) != Some(c))
            .map(|(g, _)| g.clone())
            .collect();
        changed.extend(
            self.clusters
                .keys()
                .filter(|g| !clusters.contains_key(*g))
                .cloned(),
        );
        self.clusters = clusters;
        changed
    }

    /// Whether a build's analysis decides whether it is served (some code
    /// is held back): it then runs before the build is served ([`check`]);
    /// otherwise it may run beside serving ([`background`]).
    ///
    /// [`check`]: Analysis::check
    pub fn decides(&self) -> bool {
        self.spec.as_ref().is_some_and(|s| !s.hold_back.is_empty())
    }

    /// Analyses `group`'s new build `version` (its objects' `facts`) and
    /// says whether to serve it. `serving` is the version the cluster keeps
    /// if it is held back (its last good one).
    pub fn check<'a>(
        &mut self,
        group: &Group,
        version: &str,
        facts: impl IntoIterator<Item = &'a Facts>,
        serving: Option<String>,
        audit: &AuditLog,
    ) -> Decision {
        if self.spec.is_none() {
            return Decision::Serve;
        }
        let facts: Arc<[Arc<Facts>]> = facts.into_iter().map(|f| Arc::new(f.clone())).collect();
        self.check_shared(group, version, facts, serving, audit)
    }

    /// [`Analysis::check`] of facts held shared (the pipeline's: the
    /// group keeps them as the base of its next build's analysis without a
    /// copy).
    pub fn check_shared(
        &mut self,
        group: &Group,
        version: &str,
        facts: Arc<[Arc<Facts>]>,
        serving: Option<String>,
        audit: &AuditLog,
    ) -> Decision {
        if self.spec.is_none() {
            return Decision::Serve;
        }
        let done = self.job(group, version, facts).run(&mut self.memo);
        self.take(done, serving, audit)
    }

    /// `group`'s build `version` to analyse elsewhere ([`Job::run`]), then
    /// [`Analysis::take`] its result.
    /// It carries the group's last analysed build, when there is one, to
    /// analyse the new one from.
    pub fn job(&self, group: &Group, version: &str, facts: Arc<[Arc<Facts>]>) -> Job {
        Job {
            group: group.clone(),
            version: version.to_owned(),
            cluster: self.clusters.get(group).cloned().unwrap_or_default(),
            facts,
            base: self.groups.get(group).map(|g| g.base.clone()),
        }
    }

    /// Takes an analysis' result: what `/status`, the metrics and the
    /// audit log show, and whether to serve the build. `serving` is the
    /// version the cluster keeps if it is held back.
    pub fn take(&mut self, done: Done, serving: Option<String>, audit: &AuditLog) -> Decision {
        let Some(spec) = &self.spec else {
            return Decision::Serve;
        };
        let Done {
            group,
            version,
            base,
            messages,
        } = done;
        let (group, version) = (&group, version.as_str());
        let holding: Vec<&Message> = messages
            .iter()
            .map(|m| &**m)
            .filter(|m| spec.hold_back.contains(m.code.code))
            .collect();
        let reasons: Vec<String> = holding.iter().map(ToString::to_string).collect();
        let codes: Vec<String> = holding
            .iter()
            .map(|m| m.code.code)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(str::to_owned)
            .collect();

        let holds = !holding.is_empty();
        let mut counts: BTreeMap<(&'static str, Severity), usize> = BTreeMap::new();
        for m in &messages {
            *counts.entry((m.code.code, m.code.severity)).or_default() += 1;
        }
        let views: Vec<Arc<AnalysisMessage>> = messages
            .iter()
            .map(|m| intern(&mut self.interned, AnalysisMessage::from(&**m)))
            .collect();
        let prev = self.groups.remove(group);
        // The same content analysed again (its cluster's facts changed):
        // keep the objects list already held, not the build's copy of it.
        let base = match &prev {
            Some(p) if Arc::ptr_eq(&p.base.set, &base.set) => Base {
                facts: p.base.facts.clone(),
                ..base
            },
            _ => base,
        };
        for ((code, severity), _) in prev.iter().flat_map(|p| &p.counts) {
            if !counts.contains_key(&(*code, *severity)) {
                metrics::gauge!(METRIC_MESSAGES, "cluster" => group.to_string(), "code" => *code, "severity" => severity.as_str()).set(0.0);
            }
        }
        for ((code, severity), n) in &counts {
            metrics::gauge!(METRIC_MESSAGES, "cluster" => group.to_string(), "code" => *code, "severity" => severity.as_str()).set(*n as f64);
        }
        self.view = None;
        if prev.as_ref().is_none_or(|p| p.view.messages != views) {
            if !views.is_empty() || prev.is_some() {
                info!(cluster = %group, version, messages = views.len(), "analysis changed");
            }
            // Every message in words only for a log that writes them.
            if audit.enabled() {
                audit.record(AuditEvent::Analysis {
                    cluster: group.to_string(),
                    version: version.to_owned(),
                    messages: views.iter().map(ToString::to_string).collect(),
                });
            }
        }
        let held = if !holds {
            None
        } else {
            let since = match prev.as_ref().and_then(|p| p.view.held_back.as_ref()) {
                Some(h) => h.since.clone(),
                None => humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            };
            warn!(
                cluster = %group,
                version,
                serving = serving.as_deref().unwrap_or("nothing"),
                codes = %codes.join(","),
                "version held back: analysis found {}",
                reasons.join("; ")
            );
            Some(HeldBack {
                version: version.to_owned(),
                since,
                codes,
                serving: serving.filter(|s| !s.is_empty()),
            })
        };
        metrics::gauge!(METRIC_HELD_BACK, "cluster" => group.to_string()).set(if held.is_some() {
            1.0
        } else {
            0.0
        });
        self.groups.insert(
            group.clone(),
            GroupState {
                view: Arc::new(ClusterAnalysis {
                    cluster: group.to_string(),
                    version: version.to_owned(),
                    messages: views,
                    held_back: held,
                }),
                counts,
                base,
            },
        );
        if reasons.is_empty() {
            Decision::Serve
        } else {
            Decision::HoldBack(reasons)
        }
    }

    /// Whether `group`'s latest build is held back.
    pub fn is_held(&self, group: &Group) -> bool {
        self.groups
            .get(group)
            .is_some_and(|g| g.view.held_back.is_some())
    }

    /// Forgets a group that is gone (its gauges go to zero).
    pub fn remove(&mut self, group: &Group) {
        if let Some(g) = self.groups.remove(group) {
            self.view = None;
            for (code, severity) in g.counts.keys() {
                metrics::gauge!(METRIC_MESSAGES, "cluster" => group.to_string(), "code" => *code, "severity" => severity.as_str()).set(0.0);
            }
            metrics::gauge!(METRIC_HELD_BACK, "cluster" => group.to_string()).set(0.0);
        }
    }

    /// Every group's analysis, by group name (shared, not copied: a view
    /// is made again only after a group's analysis changed, and then
    /// shares every other group's). Messages no group carries any more are
    /// forgotten at a sweep, when the interned ones doubled since the last.
    pub fn view(&mut self) -> AnalysisView {
        if let Some(v) = &self.view {
            return v.clone();
        }
        // Held by the interner alone (or also by the previous view, which
        // the caller is replacing: forgotten at a later sweep).
        if self.interned.len() > 2 * self.interned_kept + INTERNED_SLACK {
            self.sweep_interned();
        }
        let view: AnalysisView = self.groups.values().map(|g| g.view.clone()).collect();
        self.view = Some(view.clone());
        view
    }

    /// Forgets the messages no group (and no view) holds any more.
    fn sweep_interned(&mut self) {
        self.interned.retain(|m| Arc::strong_count(m) > 1);
        self.interned_kept = self.interned.len();
    }
}

/// One group's build to analyse, owned (it may run on another thread).
#[derive(Debug)]
pub struct Job {
    /// The group.
    pub group: Group,
    /// Its build's version id.
    pub version: String,
    cluster: ClusterFacts,
    facts: Arc<[Arc<Facts>]>,
    /// The group's last analysed build.
    base: Option<Base>,
}

impl Job {
    /// Analyses the build (`memo`: the set analyses done before): its set
    /// analysis from the memo if some group has its content, else from its
    /// group's last analysed build and what changed since if there is one,
    /// else from scratch.
    pub fn run(self, memo: &mut Memo) -> Done {
        let started = Instant::now();
        let facts: Vec<&Facts> = self.facts.iter().map(|f| &**f).collect();
        let (set, depth) = memo.set_of(&self.version, &facts, self.base.as_ref());
        let messages = meshhub_analyze::merge(
            &set,
            meshhub_analyze::cluster_for(&facts, &self.cluster.for_analysis(&self.group)),
        );
        drop(facts);
        metrics::histogram!(METRIC_SECONDS).record(started.elapsed().as_secs_f64());
        Done {
            group: self.group,
            version: self.version,
            base: Base {
                facts: self.facts,
                set,
                depth,
            },
            messages,
        }
    }
}

/// A build's analysis.
#[derive(Debug)]
pub struct Done {
    /// The group.
    pub group: Group,
    /// The build's version id.
    pub version: String,
    base: Base,
    /// Shared with the set's analysis.
    messages: Vec<Arc<Message>>,
}

/// The set analysis (every analyzer but the version check) of each content
/// some group holds, by its version id: groups of identical content
/// ("everything to every cluster") are analysed once per change, not once
/// each; a group analysed again for a new Istio release reuses its set's.
/// Held by the groups (`GroupState::base`); an entry no group holds any
/// more is dropped.
#[derive(Debug, Default)]
pub struct Memo {
    /// Each content's set and its depth ([`Base::depth`]).
    sets: HashMap<String, (WeakSet, u32)>,
    /// When to drop the entries no group holds.
    prune_at: usize,
    /// Every message some set holds, once: sets of different content
    /// (each cluster with objects of its own beside the shared ones)
    /// mostly say the same things about the same objects.
    messages: HashSet<Arc<Message>>,
    /// How many messages were held after the last sweep.
    messages_kept: usize,
}

/// One content's set analysis, its messages shared with other sets'.
type Set = Arc<[Arc<Message>]>;
/// A [`Set`] the memo holds without keeping it.
type WeakSet = Weak<[Arc<Message>]>;

/// Messages past this many beyond those kept at the last sweep trigger
/// the next one.
const MESSAGES_SLACK: usize = 1024;

impl Memo {
    /// The set analysis of content `version` (`facts`) and its depth,
    /// done now unless some group holds it: from `base` (an earlier
    /// build's) and what differs when there is one and it is not
    /// [`REBASE_EVERY`] runs deep, else from scratch.
    fn set_of(&mut self, version: &str, facts: &[&Facts], base: Option<&Base>) -> (Set, u32) {
        if let Some((set, depth)) = self
            .sets
            .get(version)
            .and_then(|(set, depth)| Some((set.upgrade()?, *depth)))
        {
            metrics::counter!(METRIC_REUSED).increment(1);
            return (set, depth);
        }
        let messages = &mut self.messages;
        let share = |m: Message| match messages.get(&m) {
            Some(shared) => shared.clone(),
            None => {
                let m = Arc::new(m);
                messages.insert(m.clone());
                m
            }
        };
        let (set, depth): (Set, u32) = match base.filter(|b| b.depth < REBASE_EVERY) {
            Some(base) => {
                let before: Vec<&Facts> = base.facts.iter().map(|f| &**f).collect();
                let (set, rerun) = meshhub_analyze::reanalyze_set(&before, &base.set, facts, share);
                if rerun.whole {
                    (set.into(), 0)
                } else {
                    metrics::counter!(METRIC_INCREMENTAL).increment(1);
                    metrics::counter!(METRIC_INCREMENTAL_OBJECTS).increment(rerun.analysed as u64);
                    (set.into(), base.depth + 1)
                }
            }
            None => (
                meshhub_analyze::analyze_set(facts.iter().copied())
                    .into_iter()
                    .map(share)
                    .collect(),
                0,
            ),
        };
        self.sets
            .insert(version.to_owned(), (Arc::downgrade(&set), depth));
        if self.sets.len() > self.prune_at {
            self.sets.retain(|_, (s, _)| s.strong_count() > 0);
            self.prune_at = 2 * self.sets.len() + 64;
        }
        if self.messages.len() > 2 * self.messages_kept + MESSAGES_SLACK {
            self.messages.retain(|m| Arc::strong_count(m) > 1);
            self.messages_kept = self.messages.len();
        }
        (set, depth)
    }
}

/// Messages interned past twice those kept at the last sweep before the
/// next sweep.
const INTERNED_SLACK: usize = 256;

/// The shared copy of `m`.
fn intern(
    interned: &mut HashSet<Arc<AnalysisMessage>>,
    m: AnalysisMessage,
) -> Arc<AnalysisMessage> {
    if let Some(shared) = interned.get(&m) {
        return shared.clone();
    }
    let shared = Arc::new(m);
    interned.insert(shared.clone());
    shared
}

#[cfg(test)]
mod tests;

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

pub mod spec;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Instant, SystemTime};

use meshhub_analyze::{Facts, IstioVersion, Message, Severity, Target};
use meshhub_api::analysis::{AnalysisMessage, ClusterAnalysis, HeldBack};
use meshhub_mcp::cache::Group;
use tracing::{info, warn};

use crate::audit::{AuditEvent, AuditLog};

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
    version: String,
    messages: Vec<Arc<AnalysisMessage>>,
    /// (code, severity) → count, as last set on the gauge.
    counts: BTreeMap<(&'static str, Severity), usize>,
    held: Option<(String, String, Vec<String>)>,
    /// Its content's set analysis (shared with the memo).
    set: Arc<Vec<Message>>,
}

/// The analysis of every group (owned by the pipeline).
#[derive(Debug, Default)]
pub struct Analysis {
    spec: Option<AnalysisSpec>,
    groups: BTreeMap<Group, GroupState>,
    /// Each cluster's Istio release, as its agent reported it (absent:
    /// unknown, checked as the oldest release: see meshhub-analyze's skew).
    releases: BTreeMap<Group, IstioVersion>,
    /// Every message some group carries, once: the messages about objects
    /// every cluster receives are the same in every group (with
    /// "everything to every cluster", all of them), so each group holds
    /// pointers, not copies (issue 43: hundreds of KiB per cluster).
    interned: HashSet<Arc<AnalysisMessage>>,
    /// The set analysis (every analyzer but the version check) of each
    /// content some group holds, by its version id: groups of identical
    /// content ("everything to every cluster") are analysed once per
    /// change, not once each; a group analysed again for a new Istio
    /// release reuses its set's. Held by the groups ([`GroupState::set`]);
    /// an entry no group holds any more is dropped.
    memo: HashMap<String, Weak<Vec<Message>>>,
}

impl Analysis {
    /// Analysis as `spec` says (off when it is disabled).
    pub fn new(spec: AnalysisSpec) -> Self {
        Self {
            spec: spec.enabled.then_some(spec),
            groups: BTreeMap::new(),
            releases: BTreeMap::new(),
            interned: HashSet::new(),
            memo: HashMap::new(),
        }
    }

    /// Whether groups are analysed (the store then keeps objects' facts).
    pub fn enabled(&self) -> bool {
        self.spec.is_some()
    }

    /// Takes the clusters' Istio releases; the groups whose release
    /// changed (they need analysing again).
    pub fn set_releases(&mut self, releases: BTreeMap<Group, IstioVersion>) -> Vec<Group> {
        if releases == self.releases {
            return Vec::new();
        }
        let mut changed: Vec<Group> = releases
            .iter()
            .filter(|(g, v)| self.releases.get(*g) != Some(v))
            .map(|(g, _)| g.clone())
            .collect();
        changed.extend(
            self.releases
                .keys()
                .filter(|g| !releases.contains_key(*g))
                .cloned(),
        );
        self.releases = releases;
        changed
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
        let Some(spec) = &self.spec else {
            return Decision::Serve;
        };
        let started = Instant::now();
        let target = match self.releases.get(group) {
            Some(version) => Target::Known {
                cluster: Some(group),
                version: *version,
            },
            None => Target::Unknown { cluster: group },
        };
        let facts: Vec<&Facts> = facts.into_iter().collect();
        // Its own last set analysis (a new release, same content), or
        // another group's of the same content.
        let own = self
            .groups
            .get(group)
            .filter(|g| g.version == version)
            .map(|g| g.set.clone());
        let set = match own.or_else(|| self.memo.get(version).and_then(Weak::upgrade)) {
            Some(set) => {
                metrics::counter!(METRIC_REUSED).increment(1);
                set
            }
            None => {
                let set = Arc::new(meshhub_analyze::analyze_set(facts.iter().copied()));
                self.memo.insert(version.to_owned(), Arc::downgrade(&set));
                set
            }
        };
        let messages = meshhub_analyze::merge(&set, meshhub_analyze::skew_for(&facts, &target));
        metrics::histogram!(METRIC_SECONDS).record(started.elapsed().as_secs_f64());

        let holding: Vec<&Message> = messages
            .iter()
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

        let mut counts: BTreeMap<(&'static str, Severity), usize> = BTreeMap::new();
        for m in &messages {
            *counts.entry((m.code.code, m.code.severity)).or_default() += 1;
        }
        let views: Vec<Arc<AnalysisMessage>> = messages
            .iter()
            .map(|m| intern(&mut self.interned, AnalysisMessage::from(m)))
            .collect();
        let prev = self.groups.remove(group);
        for ((code, severity), _) in prev.iter().flat_map(|p| &p.counts) {
            if !counts.contains_key(&(*code, *severity)) {
                metrics::gauge!(METRIC_MESSAGES, "cluster" => group.to_string(), "code" => *code, "severity" => severity.as_str()).set(0.0);
            }
        }
        for ((code, severity), n) in &counts {
            metrics::gauge!(METRIC_MESSAGES, "cluster" => group.to_string(), "code" => *code, "severity" => severity.as_str()).set(*n as f64);
        }
        if prev.as_ref().is_none_or(|p| p.messages != views) {
            if !views.is_empty() || prev.is_some() {
                info!(cluster = %group, version, messages = views.len(), "analysis changed");
            }
            audit.record(AuditEvent::Analysis {
                cluster: group.to_string(),
                version: version.to_owned(),
                messages: views.iter().map(ToString::to_string).collect(),
            });
        }
        let held = if holding.is_empty() {
            None
        } else {
            let since = match prev.as_ref().and_then(|p| p.held.as_ref()) {
                Some((_, since, _)) => since.clone(),
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
            Some((serving.unwrap_or_default(), since, codes))
        };
        metrics::gauge!(METRIC_HELD_BACK, "cluster" => group.to_string()).set(if held.is_some() {
            1.0
        } else {
            0.0
        });
        self.groups.insert(
            group.clone(),
            GroupState {
                version: version.to_owned(),
                messages: views,
                counts,
                held,
                set,
            },
        );
        if self.memo.len() > 2 * self.groups.len() + 16 {
            self.memo.retain(|_, set| set.strong_count() > 0);
        }
        if reasons.is_empty() {
            Decision::Serve
        } else {
            Decision::HoldBack(reasons)
        }
    }

    /// Whether `group`'s latest build is held back.
    pub fn is_held(&self, group: &Group) -> bool {
        self.groups.get(group).is_some_and(|g| g.held.is_some())
    }

    /// Forgets a group that is gone (its gauges go to zero).
    pub fn remove(&mut self, group: &Group) {
        if let Some(g) = self.groups.remove(group) {
            for (code, severity) in g.counts.keys() {
                metrics::gauge!(METRIC_MESSAGES, "cluster" => group.to_string(), "code" => *code, "severity" => severity.as_str()).set(0.0);
            }
            metrics::gauge!(METRIC_HELD_BACK, "cluster" => group.to_string()).set(0.0);
        }
    }

    /// Every group's analysis, by group name (the messages shared, not
    /// copied). Messages no group carries any more are forgotten here.
    pub fn view(&mut self) -> Vec<ClusterAnalysis> {
        // Held by the interner alone (or also by the previous view, which
        // the caller is replacing: forgotten at the next view).
        self.interned.retain(|m| Arc::strong_count(m) > 1);
        self.groups
            .iter()
            .map(|(group, g)| ClusterAnalysis {
                cluster: group.to_string(),
                version: g.version.clone(),
                messages: g.messages.clone(),
                held_back: g.held.as_ref().map(|(serving, since, codes)| HeldBack {
                    version: g.version.clone(),
                    since: since.clone(),
                    codes: codes.clone(),
                    serving: (!serving.is_empty()).then(|| serving.clone()),
                }),
            })
            .collect()
    }
}

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

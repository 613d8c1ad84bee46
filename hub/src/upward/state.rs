//! What the clusters reported: one task owns it ([`run`]) and publishes
//! it as a `watch` of [`Reports`]; `/status`, the MCS source and the
//! metrics read that. A newly dropped (or again held) object, and a newly
//! refused export, are written to the audit log.
//!
//! What is trusted, and when (issue 38):
//!
//! * **Generations.** An update is taken only from its cluster's current
//!   subscriber ([`super::What::Started`]); one from a cluster no longer
//!   configured, or from a subscriber since replaced, is dropped (counted
//!   in `meshhub_upward_stale_updates_total`).
//! * **Complete before trusted.** A cluster's exports are merged only once
//!   its agent's report says they are complete at that collection
//!   version ([`ExportsState`]); until then the hub keeps the last
//!   complete set (none before the first) and shows the cluster's exports
//!   as stale. An agent whose reports lack the field (older than it) is
//!   taken as complete: it can't say, and refusing it would withdraw its
//!   Services during an upgrade.
//! * **Judged alone.** The trusted set is judged under the cluster's
//!   policy ([`super::judge`]); only what passes is merged.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use meshhub_api::upward::{
    ClusterReportView, Completeness, ExportView, ExportsStateView, REFUSED_EXPORTS_LISTED,
    RefusedExportsView,
};
use meshhub_mcp::ledger::At;
use meshhub_proto::upward::{ExportsState, ServiceExport};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::contribution::{Contribution, FirstSeen};
use super::judge::{self, Check, Refusal};
use super::{Update, What};
use crate::audit::{AuditEvent, AuditLog};
use crate::clusters::exports::ExportPolicy;

mod services;
mod view;

pub use view::{export_view, judged_view, view_of};

/// One cluster's report and exports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterReport {
    /// The report as shown (its `connected`/`last_error` are filled in
    /// from the ledger when shown).
    pub view: ClusterReportView,
    /// The exports merged: of the last complete set, those its judgement
    /// accepted (the MCS generator reads them; shared, so that it can tell
    /// a report whose exports did not change by [`Arc::ptr_eq`]).
    pub accepted: Arc<Vec<Contribution>>,
    /// Whether a complete set of the agent's exports was received since
    /// the hub started.
    pub exports_received: bool,
    /// The cluster's Services, as its agent last listed them (none: it
    /// lists none); the view shows how many.
    pub services: Option<Arc<meshhub_analyze::Services>>,
}

/// Every cluster's report, by cluster. Each is shared: an update replaces
/// its cluster's entry only, so publishing costs a key and a pointer per
/// cluster, never a copy of every report, and a reader can tell an
/// unchanged cluster by [`Arc::ptr_eq`].
pub type Reports = Arc<BTreeMap<String, Arc<ClusterReport>>>;

type DropKey = (String, String, String);

/// At most this many of a cluster's exports newly refused by one
/// judgement are logged and audited one by one (and as many newly no
/// longer refused logged); the rest are counted in one line and one audit
/// record (`exports_refused`). A cluster reporting a flood of exports
/// (issue 38: 100,000 over its cap) would otherwise write as many log
/// lines and fill the audit queue, whose overflow drops other records.
pub const REFUSALS_ITEMIZED: usize = 32;

/// What the task keeps of a cluster besides what it shows.
#[derive(Debug)]
struct Tracked {
    /// Its current subscriber's generation.
    generation: u64,
    policy: ExportPolicy,
    /// A report was received (from any generation of this process).
    status_seen: bool,
    /// The exports state of the last report (`None` with `status_seen`:
    /// an agent older than the field).
    state: Option<ExportsState>,
    /// The last exports received and not (yet) trusted: version, set.
    pending: Option<(String, Vec<ServiceExport>)>,
    /// The last complete set.
    trusted: Option<Vec<ServiceExport>>,
    /// When the hub first saw each export of the trusted set.
    seen: BTreeMap<String, FirstSeen>,
    /// When the hub first accepted each export (its place in a conflict:
    /// oldest first). Dropped while it is refused, so an export refused
    /// (invalid, outside the policy) cannot squat the oldest place.
    accepted_at: BTreeMap<String, FirstSeen>,
    /// What is refused now, by `namespace/name`.
    refused: BTreeMap<String, Refusal>,
    /// Since when the exports shown are not the agent's latest.
    stale_since: Option<SystemTime>,
}

impl Tracked {
    fn new(generation: u64, policy: ExportPolicy) -> Self {
        Self {
            generation,
            policy,
            status_seen: false,
            state: None,
            pending: None,
            trusted: None,
            seen: BTreeMap::new(),
            accepted_at: BTreeMap::new(),
            refused: BTreeMap::new(),
            stale_since: None,
        }
    }

    /// Trusts the pending exports if the last report says they are
    /// complete; whether the trusted set was replaced.
    fn promote(&mut self) -> bool {
        let Some((version, _)) = &self.pending else {
            return false;
        };
        let trust = match &self.state {
            Some(s) => s.complete && s.exports_version == *version,
            None => self.status_seen,
        };
        if !trust {
            return false;
        }
        self.trusted = self.pending.take().map(|(_, e)| e);
        true
    }

    /// How the exports state shows.
    fn state_view(&mut self, now: SystemTime) -> Option<ExportsStateView> {
        if !self.status_seen && self.pending.is_none() && self.trusted.is_none() {
            return None;
        }
        let completeness = match &self.state {
            Some(s) if s.complete => Completeness::Complete,
            Some(_) => Completeness::Incomplete,
            None => Completeness::Unknown,
        };
        let stale = self.pending.is_some() || completeness == Completeness::Incomplete;
        if stale {
            self.stale_since.get_or_insert(now);
        } else {
            self.stale_since = None;
        }
        Some(ExportsStateView {
            completeness,
            waiting_for: self
                .state
                .as_ref()
                .map(|s| s.waiting_for.clone())
                .unwrap_or_default(),
            stale,
            stale_since: self.stale_since.map(At),
        })
    }
}

/// The task's state (one owner: [`run`]).
struct Owner {
    reports: BTreeMap<String, Arc<ClusterReport>>,
    tracked: BTreeMap<String, Tracked>,
    dropped: BTreeSet<DropKey>,
    /// First sightings so far (the order of [`FirstSeen`]).
    sightings: u64,
    audit: AuditLog,
    check: Check,
}

impl Owner {
    fn new(audit: AuditLog, check: Check) -> Self {
        Self {
            reports: BTreeMap::new(),
            tracked: BTreeMap::new(),
            dropped: BTreeSet::new(),
            sightings: 0,
            audit,
            check,
        }
    }

    /// Takes one update; whether anything shown changed.
    fn apply(
        &mut self,
        Update {
            cluster,
            generation,
            what,
        }: Update,
    ) -> bool {
        match what {
            What::Started { policy } => {
                match self.tracked.get_mut(&cluster) {
                    // The agent's settings changed: the last report stays,
                    // as for a cut stream, until the new subscriber's.
                    Some(t) => {
                        t.generation = generation;
                        if t.policy != policy {
                            t.policy = policy;
                            self.judge(&cluster);
                        }
                    }
                    None => {
                        self.tracked
                            .insert(cluster.clone(), Tracked::new(generation, policy));
                    }
                }
                return true;
            }
            What::Gone => {
                if self.tracked.get(&cluster).map(|t| t.generation) != Some(generation) {
                    return self.stale(&cluster, generation);
                }
                self.tracked.remove(&cluster);
                self.reports.remove(&cluster);
                self.dropped.retain(|(c, _, _)| *c != cluster);
                metrics::gauge!("meshhub_cluster_istiod_dropped", "cluster" => cluster.clone())
                    .set(0.0);
                metrics::gauge!("meshhub_cluster_service_exports", "cluster" => cluster.clone())
                    .set(0.0);
                metrics::gauge!("meshhub_cluster_exports_refused", "cluster" => cluster).set(0.0);
                return true;
            }
            _ => {}
        }
        let Some(t) = self
            .tracked
            .get_mut(&cluster)
            .filter(|t| t.generation == generation)
        else {
            return self.stale(&cluster, generation);
        };
        match what {
            // Handled above (they returned).
            What::Started { .. } | What::Gone => return false,
            What::Policy(policy) => {
                t.policy = policy;
                self.judge(&cluster);
            }
            What::Status(report) => {
                t.status_seen = true;
                t.state = report.as_ref().and_then(|r| r.exports_state.clone());
                let promoted = t.promote();
                let slot = self.reports.entry(cluster.clone()).or_default();
                let old = view::dropped_set(&slot.view);
                // A new report of the cluster: built afresh (the exports
                // and what was accepted carried over), not a copy of the
                // previous one to overwrite.
                let mut view = report.as_deref().map(view_of).unwrap_or_default();
                view.exports = slot.view.exports.clone();
                view.exports_refused = slot.view.exports_refused.clone();
                let (services, services_view) = services::take(
                    report.as_deref().and_then(|r| r.services.as_ref()),
                    &(slot.services.clone(), slot.view.services.clone()),
                );
                view.services = services_view;
                *slot = Arc::new(ClusterReport {
                    view,
                    accepted: slot.accepted.clone(),
                    exports_received: slot.exports_received,
                    services,
                });
                let entry = &**slot;
                let new = view::dropped_set(&entry.view);
                for ((collection, name), d) in &new {
                    if !old.contains_key(&(collection.clone(), name.clone())) {
                        warn!(%cluster, %collection, %name, version = %d.version, "the cluster's istiod dropped a served object");
                        self.audit.record(AuditEvent::IstiodDropped {
                            cluster: cluster.clone(),
                            collection: collection.clone(),
                            name: name.clone(),
                            version: d.version.clone(),
                            reason: d.reason.clone(),
                        });
                    }
                }
                for (collection, name) in old.keys() {
                    if !new.contains_key(&(collection.clone(), name.clone())) {
                        info!(%cluster, %collection, %name, "the cluster's istiod holds the object again (or it is no longer served)");
                        self.audit.record(AuditEvent::IstiodHeld {
                            cluster: cluster.clone(),
                            collection: collection.clone(),
                            name: name.clone(),
                        });
                    }
                }
                self.dropped.retain(|(c, _, _)| *c != cluster);
                self.dropped
                    .extend(new.into_keys().map(|(col, n)| (cluster.clone(), col, n)));
                let count = entry.view.istiod.as_ref().map_or(0, |i| i.dropped.len());
                metrics::gauge!("meshhub_cluster_istiod_dropped", "cluster" => cluster.clone())
                    .set(count as f64);
                if promoted {
                    self.trusted(&cluster);
                }
            }
            What::Exports { version, exports } => {
                t.pending = Some((version, exports));
                let promoted = t.promote();
                let entry = self.reports.entry(cluster.clone()).or_default();
                if entry.view.unserved {
                    Arc::make_mut(entry).view.unserved = false;
                }
                if promoted {
                    self.trusted(&cluster);
                } else if let Some(s) = &t.state {
                    debug!(%cluster, complete = s.complete, about = %s.exports_version, "exports held back until a report says they are complete");
                }
            }
            What::Unserved(unserved) => {
                // The last report (if any) stays, as for a cut stream.
                let known = self.reports.contains_key(&cluster);
                let entry = self.reports.entry(cluster).or_default();
                if known && entry.view.unserved == unserved {
                    return false;
                }
                Arc::make_mut(entry).view.unserved = unserved;
                return true;
            }
        }
        let now = SystemTime::now();
        if let (Some(t), Some(r)) = (
            self.tracked.get_mut(&cluster),
            self.reports.get_mut(&cluster),
        ) {
            let state = t.state_view(now);
            if r.view.exports_state != state {
                Arc::make_mut(r).view.exports_state = state;
            }
        }
        true
    }

    /// An update from a subscriber that is not its cluster's current one.
    fn stale(&self, cluster: &str, generation: u64) -> bool {
        debug!(%cluster, generation, current = ?self.tracked.get(cluster).map(|t| t.generation), "an update from a stopped subscriber; dropped");
        metrics::counter!("meshhub_upward_stale_updates_total").increment(1);
        false
    }

    /// The trusted set was replaced: stamp what is new, judge it.
    fn trusted(&mut self, cluster: &str) {
        let Some(t) = self.tracked.get_mut(cluster) else {
            return;
        };
        let now = SystemTime::now();
        let keys: BTreeSet<String> = t
            .trusted
            .iter()
            .flatten()
            .map(|e| format!("{}/{}", e.namespace, e.name))
            .collect();
        t.seen.retain(|k, _| keys.contains(k));
        for k in keys {
            t.seen.entry(k).or_insert_with(|| {
                self.sightings += 1;
                FirstSeen {
                    seq: self.sightings,
                    at: now,
                }
            });
        }
        self.judge(cluster);
    }

    /// Judges the cluster's trusted set under its policy and publishes
    /// what passes; a new refusal is logged, counted and audited.
    fn judge(&mut self, cluster: &str) {
        let Some(t) = self.tracked.get_mut(cluster) else {
            return;
        };
        let exports = t.trusted.as_deref().unwrap_or_default();
        let judged = judge::judge(cluster, exports, &t.seen, &t.policy, &self.check);
        let refused: BTreeMap<String, Refusal> = judged
            .iter()
            .filter_map(|j| {
                let e = &j.contribution.export;
                j.refusal
                    .clone()
                    .map(|r| (format!("{}/{}", e.namespace, e.name), r))
            })
            .collect();
        // Newly refused, by reason; the first few itemized.
        let mut new: BTreeMap<&'static str, usize> = BTreeMap::new();
        let mut more: BTreeMap<String, usize> = BTreeMap::new();
        for (key, why) in &refused {
            if t.refused.get(key) == Some(why) {
                continue;
            }
            *new.entry(why.kind()).or_default() += 1;
            if new.values().sum::<usize>() > REFUSALS_ITEMIZED {
                *more.entry(why.kind().to_owned()).or_default() += 1;
                continue;
            }
            let (namespace, name) = key.split_once('/').unwrap_or((key, ""));
            warn!(%cluster, export = %key, reason = %why, "an exported Service is refused");
            self.audit.record(AuditEvent::ExportRefused {
                cluster: cluster.to_owned(),
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                reason: why.to_string(),
            });
        }
        for (kind, n) in new {
            metrics::counter!("meshhub_upward_export_refusals_total", "cluster" => cluster.to_owned(), "reason" => kind)
                .increment(n as u64);
        }
        if !more.is_empty() {
            let count: usize = more.values().sum();
            warn!(%cluster, count, by_reason = ?more, "more exported Services refused at once than are logged one by one");
            self.audit.record(AuditEvent::ExportsRefused {
                cluster: cluster.to_owned(),
                count,
                by_reason: more,
            });
        }
        let cleared: Vec<&String> = t
            .refused
            .keys()
            .filter(|k| !refused.contains_key(*k))
            .collect();
        for key in cleared.iter().take(REFUSALS_ITEMIZED) {
            info!(%cluster, export = %key, "an exported Service is no longer refused (or no longer exported)");
        }
        if cleared.len() > REFUSALS_ITEMIZED {
            info!(%cluster, count = cleared.len() - REFUSALS_ITEMIZED, "more exported Services no longer refused (or no longer exported) than are logged one by one");
        }
        metrics::gauge!("meshhub_cluster_exports_refused", "cluster" => cluster.to_owned())
            .set(refused.len() as f64);
        metrics::gauge!("meshhub_cluster_service_exports", "cluster" => cluster.to_owned())
            .set(exports.len() as f64);
        t.refused = refused;
        let received = t.trusted.is_some();
        // Conflicts are ordered by when each export was first accepted.
        let now = SystemTime::now();
        let accepted_keys: BTreeSet<String> = judged
            .iter()
            .filter(|j| j.refusal.is_none())
            .map(|j| {
                format!(
                    "{}/{}",
                    j.contribution.export.namespace, j.contribution.export.name
                )
            })
            .collect();
        t.accepted_at.retain(|k, _| accepted_keys.contains(k));
        let mut accepted = Vec::new();
        for j in &judged {
            if j.refusal.is_some() {
                continue;
            }
            let e = &j.contribution.export;
            let key = format!("{}/{}", e.namespace, e.name);
            let stamp = *t.accepted_at.entry(key).or_insert_with(|| {
                self.sightings += 1;
                FirstSeen {
                    seq: self.sightings,
                    at: now,
                }
            });
            let mut c = j.contribution.clone();
            c.first_seen = stamp;
            accepted.push(c);
        }
        let entry = Arc::make_mut(self.reports.entry(cluster.to_owned()).or_default());
        let (listed, refused_view) = listed_exports(&judged);
        entry.view.exports = listed;
        entry.view.exports_refused = refused_view;
        if *entry.accepted != accepted {
            entry.accepted = Arc::new(accepted);
        }
        entry.exports_received = received;
    }
}

/// The judged exports as a report lists them: every one merged, the
/// first [`REFUSED_EXPORTS_LISTED`] refused; and the refused ones counted.
fn listed_exports(judged: &[judge::Judged]) -> (Vec<ExportView>, Option<RefusedExportsView>) {
    let mut counted = RefusedExportsView::default();
    let listed = judged
        .iter()
        .filter(|j| match &j.refusal {
            None => true,
            Some(why) => {
                counted.count += 1;
                *counted.by_reason.entry(why.kind().to_owned()).or_default() += 1;
                counted.count <= REFUSED_EXPORTS_LISTED
            }
        })
        .map(judged_view)
        .collect();
    counted.listed = counted.count.min(REFUSED_EXPORTS_LISTED);
    (listed, (counted.count > 0).then_some(counted))
}

/// At most this many updates waiting are taken before the reports are
/// published (so that a steady stream of updates still publishes).
const BATCH: usize = 4_096;

/// Owns the reports until `shutdown` or until every subscriber is gone;
/// `check` is the validation every generated entry goes through, run on
/// each cluster's contribution alone.
pub async fn run(
    mut rx: mpsc::Receiver<Update>,
    tx: watch::Sender<Reports>,
    audit: AuditLog,
    check: Check,
    shutdown: CancellationToken,
) {
    let mut owner = Owner::new(audit, check);
    loop {
        let update = tokio::select! {
            () = shutdown.cancelled() => return,
            u = rx.recv() => match u { Some(u) => u, None => return },
        };
        // Take every update already waiting before publishing: a
        // publication copies a key and a pointer per cluster, and a round
        // of reports from 5,000 clusters published one by one made that
        // O(N²) (~0.5 ms per report at 5,000), and woke every reader as
        // often.
        let mut changed = owner.apply(update);
        for _ in 0..BATCH {
            match rx.try_recv() {
                Ok(u) => changed |= owner.apply(u),
                Err(_) => break,
            }
        }
        if changed {
            tx.send_replace(Arc::new(owner.reports.clone()));
        }
    }
}

#[cfg(test)]
mod tests;

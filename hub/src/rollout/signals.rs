//! What tells the controller a cluster took or refused its new version:
//! the ledger's deliveries of this replica's dialers, and the agents'
//! reports (the only word of a cluster another replica dials), including
//! what the cluster's istiod dropped.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use meshhub_mcp::ledger::{Delivery, Outcome, PeerStatus, Role};
use meshhub_mcp::snapshot::Snapshot;
use meshhub_rollout::{Input, Rejection};

use super::{Controller, Millis, Serve, Versions};
use crate::history::version_id;
use crate::upward::ClusterReport;

/// The clusters whose report [`Controller::reports`] looks at again
/// though it did not change: what they await changed since it last did.
#[derive(Debug)]
pub(super) enum Recheck {
    /// Every cluster (nothing looked at yet, or the awaited versions were
    /// replaced: a new rollout, one restored).
    Every,
    /// These (sent a version again: its ACK may be in their report).
    These(BTreeSet<String>),
}

impl Recheck {
    pub(super) fn none() -> Self {
        Self::These(BTreeSet::new())
    }

    /// `cluster`'s report is to be looked at again.
    pub(super) fn add(&mut self, cluster: &str) {
        if let Self::These(set) = self {
            set.insert(cluster.to_owned());
        }
    }

    fn covers(&self, cluster: &str) -> bool {
        match self {
            Self::Every => true,
            Self::These(set) => set.contains(cluster),
        }
    }
}

impl Controller {
    /// A delivery recorded by the ledger.
    pub fn delivery(&mut self, now: Millis, d: &Delivery) -> Serve {
        // Only the hub's dialer to the cluster speaks for it.
        if d.role != Role::Source || d.peer != d.group {
            return Serve::new();
        }
        let Some(v) = self.versions.get_mut(&d.group) else {
            if d.outcome == Outcome::Nack {
                let message = d.message.as_deref().unwrap_or("NACKed");
                let message = format!("{} {}: {message}", d.collection, d.version);
                self.refused_outside_rollout(&d.group, &d.collection, &d.version, &message);
            }
            return Serve::new();
        };
        if v.unacked.get(&d.collection) != Some(&d.version) {
            return Serve::new();
        }
        let input = match d.outcome {
            Outcome::Ack => {
                v.unacked.remove(&d.collection);
                // Every collection ACKed: taken once its Gateway API
                // controller accepted what it brought.
                return self.judge_acceptance(now, &d.group);
            }
            Outcome::Nack => Input::Rejected {
                cluster: d.group.clone(),
                version: version_id(&v.to),
                how: Rejection::Nack,
                message: format!(
                    "{} {}: {}",
                    d.collection,
                    d.version,
                    d.message.as_deref().unwrap_or("NACKed")
                ),
            },
        };
        if d.outcome == Outcome::Nack {
            // Told again later (the other channel, a report after its
            // stream reconnects), it is not a new refusal.
            self.counted_by_rollout(&d.group, &d.collection, &d.version);
        }
        self.feed(now, input)
    }

    /// The ACKs of `clusters` already in the ledger (`peers`) and the
    /// reports, for clusters just sent their new version again (resumed,
    /// unpinned, promoted): their agents may hold it already, and the
    /// ledger records no new delivery then. Refusals are not read back:
    /// an old NACK is not this sending's answer.
    pub fn acks_already_in(
        &mut self,
        now: Millis,
        peers: &[PeerStatus],
        clusters: &BTreeSet<String>,
    ) -> Serve {
        let mut serve = Serve::new();
        for p in peers {
            if p.role != Role::Source || p.peer != p.group || !clusters.contains(&p.peer) {
                continue;
            }
            for (collection, c) in &p.collections {
                let Some(acked) = &c.acked else { continue };
                let d = Delivery {
                    role: Role::Source,
                    peer: p.peer.clone(),
                    node_id: p.node_id.clone(),
                    group: p.group.clone(),
                    collection: collection.clone(),
                    version: acked.version.clone(),
                    outcome: Outcome::Ack,
                    code: None,
                    message: None,
                };
                serve.extend(self.delivery(now, &d));
            }
        }
        if let Some(reports) = self.last_reports.clone() {
            serve.extend(self.reports(now, &reports));
        }
        serve
    }

    /// Deliveries were missed (the ledger's broadcast lagged): what the
    /// dialers ACKed, read from the ledger's view instead.
    pub fn reconcile(&mut self, now: Millis, peers: &[PeerStatus]) -> Serve {
        let mut serve = Serve::new();
        let clusters: Vec<String> = self.versions.keys().cloned().collect();
        for cluster in clusters {
            let Some(p) = peers
                .iter()
                .find(|p| p.role == Role::Source && p.peer == cluster && p.group == cluster)
            else {
                continue;
            };
            for (collection, c) in &p.collections {
                for (version, outcome) in [
                    (c.acked.as_ref().map(|a| &a.version), Outcome::Ack),
                    (c.nacked.as_ref().map(|n| &n.version), Outcome::Nack),
                ] {
                    let Some(version) = version else { continue };
                    let d = Delivery {
                        role: Role::Source,
                        peer: cluster.clone(),
                        node_id: p.node_id.clone(),
                        group: cluster.clone(),
                        collection: collection.clone(),
                        version: version.clone(),
                        outcome,
                        code: None,
                        message: c.nacked.as_ref().map(|n| n.message.clone()),
                    };
                    serve.extend(self.delivery(now, &d));
                }
            }
        }
        serve
    }

    /// The clusters' reports changed: what each agent holds and refused
    /// counts as its ACK or NACK (the only way this replica hears a cluster
    /// another replica dials: sharded dial-out), and a cluster of the
    /// rollout whose istiod dropped an object of its new version fails it
    /// (istiod ACKs what it drops, so only this report tells).
    ///
    /// Only the clusters whose report is new (another allocation than the
    /// last one looked at: the report task replaces a cluster's entry when
    /// it changes, never edits it in place) and those whose awaited version
    /// changed since ([`Recheck`]) are looked at: a round of reports costs
    /// a pointer comparison per unchanged cluster (issue 38).
    pub fn reports(&mut self, now: Millis, reports: &crate::upward::Reports) -> Serve {
        let before = self.last_reports.replace(reports.clone());
        let recheck = std::mem::replace(&mut self.recheck, Recheck::none());
        let look = to_look_at(before.as_ref(), reports, &recheck);
        let mut serve = Serve::new();
        let held = held_deliveries(
            &self.versions,
            look.iter().map(|c| (*c, &reports[*c])),
            &mut self.refusals,
        );
        for (d, again) in held {
            // A refusal counted already (the ledger told it, or an earlier
            // report) is not this sending's answer when a report tells it
            // again — unless the report showed the agent move on from it
            // and refuse it anew (the version was sent again).
            let counted = || self.counted.contains(&d.group, &d.collection, &d.version);
            if d.outcome == Outcome::Nack && !again && counted() {
                continue;
            }
            serve.extend(self.delivery(now, &d));
        }
        let mut drops = Vec::new();
        for cluster in look {
            let Some(v) = self.versions.get(cluster) else {
                continue;
            };
            let Some(istiod) = reports[cluster].view.istiod.as_ref() else {
                continue;
            };
            // Only an object the change brought (new, or at a new version)
            // fails it: a drop standing since before is reported by the
            // agent, not a failure of an unrelated change.
            let holds = |s: &Snapshot, d: &meshhub_api::upward::ObjectProblemView| {
                s.collection(&d.collection)
                    .keys()
                    .iter()
                    .any(|k| *k.name == *d.name && *k.version == *d.version)
            };
            // When the previous version is not known here (a replica
            // without it in its history), one its istiod had not dropped
            // already when the version was sent.
            let to_id = version_id(&v.to);
            let of_new_version = istiod.dropped.iter().find(|d| {
                let new = match &v.from {
                    Some(f) => !holds(f, d),
                    None => !v.prior_drops.contains(&(
                        d.collection.clone(),
                        d.name.clone(),
                        d.version.clone(),
                    )),
                };
                holds(&v.to, d)
                    && new
                    && !self.fed_drops.contains(&(
                        cluster.clone(),
                        to_id.clone(),
                        d.collection.clone(),
                        d.name.clone(),
                    ))
            });
            if let Some(d) = of_new_version {
                self.fed_drops.insert((
                    cluster.clone(),
                    to_id.clone(),
                    d.collection.clone(),
                    d.name.clone(),
                ));
                drops.push(Input::Rejected {
                    cluster: cluster.clone(),
                    version: version_id(&v.to),
                    how: Rejection::Dropped,
                    message: format!(
                        "istiod dropped {} {} (version {}): {}",
                        d.collection, d.name, d.version, d.reason
                    ),
                });
            }
        }
        for input in drops {
            serve.extend(self.feed(now, input));
        }
        // Clusters that ACKed and await their controller's word: this
        // report may be it.
        let waiting: Vec<String> = self
            .waiting_for_acceptance()
            .into_iter()
            .filter(|c| {
                let now = reports.get(c);
                let was = before.as_ref().and_then(|b| b.get(c));
                now.is_some() && !matches!((was, now), (Some(a), Some(b)) if Arc::ptr_eq(a, b))
            })
            .collect();
        for cluster in waiting {
            serve.extend(self.judge_acceptance(now, &cluster));
        }
        serve
    }
}

/// The clusters of `reports` whose report is another allocation than in
/// `before`, or that `recheck` covers.
pub(super) fn to_look_at<'a>(
    before: Option<&crate::upward::Reports>,
    reports: &'a crate::upward::Reports,
    recheck: &Recheck,
) -> Vec<&'a String> {
    reports
        .iter()
        .filter(|(cluster, report)| {
            let unchanged = before
                .and_then(|b| b.get(*cluster))
                .is_some_and(|was| Arc::ptr_eq(was, report));
            !unchanged || recheck.covers(cluster)
        })
        .map(|(cluster, _)| cluster)
        .collect()
}

/// What a cluster's reports said of one collection's refusals.
#[derive(Debug)]
pub(super) struct SeenRefusal {
    /// The refused version in the last report (empty: none).
    last: String,
    /// The last refused version a report showed.
    shown: String,
}

/// What the agents' reports say of the rollout's collections awaiting an
/// ACK, as the deliveries the ledger would record had this replica pushed
/// them: an agent whose last ACKed change is the awaited version ACKed it;
/// one whose last
/// refused change *became* that version (`refusals`: the last refused
/// version seen per cluster and collection) NACKed it — a refusal already
/// there when first seen may be an old one (a rolled-back version resumed)
/// and is left to the ledger of the replica that dials the cluster, or to
/// the progress deadline. A new refusal of a cluster outside the rollout
/// is passed on too (it may be of the cluster's newest version). Each NACK
/// says whether the reports showed that very refusal before, then another
/// state: the agent refused it anew (`again`).
fn held_deliveries<'a>(
    versions: &HashMap<String, Versions>,
    reports: impl Iterator<Item = (&'a String, &'a Arc<ClusterReport>)>,
    refusals: &mut HashMap<String, HashMap<String, SeenRefusal>>,
) -> Vec<(Delivery, bool)> {
    let mut out = Vec::new();
    for (cluster, report) in reports {
        let seen = match refusals.get_mut(cluster.as_str()) {
            Some(seen) => seen,
            None => refusals.entry(cluster.clone()).or_default(),
        };
        for (collection, held) in &report.view.collections {
            // Allocates only for a collection first seen or a new refusal.
            let refused = &held.refused_version;
            let (newly_refused, again) = match seen.get_mut(collection.as_str()) {
                Some(before) if before.last == *refused => (false, false),
                Some(before) => {
                    before.last.clone_from(refused);
                    let again = !refused.is_empty() && before.shown == *refused;
                    if !refused.is_empty() {
                        before.shown.clone_from(refused);
                    }
                    (true, again)
                }
                None => {
                    let first = SeenRefusal {
                        last: refused.clone(),
                        shown: refused.clone(),
                    };
                    seen.insert(collection.clone(), first);
                    (false, false)
                }
            };
            let Some(v) = versions.get(cluster) else {
                // Not part of the rollout: a new refusal still counts
                // against its newest version
                // (`Controller::refused_outside_rollout`).
                if newly_refused && !held.refused_version.is_empty() {
                    let d = reported(
                        cluster,
                        collection,
                        &held.refused_version,
                        Outcome::Nack,
                        &held.refusal,
                    );
                    out.push((d, again));
                }
                continue;
            };
            let Some(version) = v.unacked.get(collection) else {
                continue;
            };
            // The version held may still be on its way into the cluster's
            // API (and refused there): only the one ACKed counts.
            let outcome = if held.refused_version == *version {
                if !newly_refused {
                    continue;
                }
                Outcome::Nack
            } else if held.acked_version == *version {
                Outcome::Ack
            } else {
                continue;
            };
            let d = reported(cluster, collection, version, outcome, &held.refusal);
            out.push((d, again));
        }
    }
    out
}

/// A delivery as a cluster's report tells it: the hub's dialer to the
/// cluster answered `version` of `collection` with `outcome` (a NACK with
/// the report's `refusal` as its message).
fn reported(
    cluster: &str,
    collection: &str,
    version: &str,
    outcome: Outcome,
    refusal: &str,
) -> Delivery {
    Delivery {
        role: Role::Source,
        peer: cluster.to_owned(),
        node_id: cluster.to_owned(),
        group: cluster.to_owned(),
        collection: collection.to_owned(),
        version: version.to_owned(),
        outcome,
        code: None,
        message: (outcome == Outcome::Nack).then(|| refusal.to_owned()),
    }
}

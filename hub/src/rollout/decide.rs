//! What the rollout decides each governed cluster is served, by version
//! id, and what this replica can actually produce of it.
//!
//! A decision is a version id (content digest, equal on every replica).
//! It is recorded whether or not this replica holds the snapshot behind
//! it: a decision this replica cannot produce (its history never had the
//! version, as after a rolling upgrade with empty histories) **fails
//! closed** — nothing is pushed to the cluster, whose agent keeps serving
//! what it last ACKed — and is shown (`/rollout`'s `unavailable`, the
//! [`super::shared::METRIC_UNRESOLVED`] gauge, a warning and an audit
//! record) until a build, a restored snapshot or the leader's history
//! supplies it. It is never replaced by "the newest".
//!
//! Pins are an input: a pinned cluster leaves the rollout's waves (state
//! `pinned`, see [`meshhub_rollout::Rollout::pin`]) and rejoins them when
//! unpinned. A cluster that refused a version (NACK, or its istiod dropped
//! an object new in it) keeps a **standing failure** until its content
//! changes or an operator resumes it: later rollouts leave it out, so its
//! problem does not stop other clusters' changes, and the refused version
//! is never offered to it again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use meshhub_mcp::cache::Group;
use meshhub_mcp::snapshot::Snapshot;
use meshhub_rollout::serving::Ruling;
use meshhub_rollout::{Cause, ClusterState, Event};
use tracing::{debug, info, warn};

use super::shared::{self, Standing};
use super::{Controller, Millis, Serve};
use crate::audit::AuditEvent;
use crate::history::version_id;

impl Controller {
    /// What the rollout serves `cluster` now: its decided version; when
    /// this replica can't produce it, nothing: what it served before is
    /// withdrawn (it is not what the rollout wants any more — possibly the
    /// very version the cluster refused), and the cluster's agent keeps
    /// what it last ACKed. No decision yet: keep.
    ///
    /// A follower whose build lags the leader's for a moment keeps what it
    /// serves (the leader's previous decision, safe) unless that is the
    /// version the rollout moved the cluster away from.
    pub fn decision(&self, cluster: &str) -> Ruling<Arc<Snapshot>> {
        if !self.serving_ids.contains_key(cluster) {
            return Ruling::Keep;
        }
        // `serving` holds the decided version unless it is unavailable
        // (kept in step by `decide` and `set_serving`: no digest per ask).
        let served = self.serving.get(cluster);
        if let Some(s) = served.filter(|_| !self.unavailable.contains_key(cluster)) {
            return Ruling::Serve(s.clone());
        }
        if self.leading() {
            return Ruling::Withdraw;
        }
        let Some(served) = served.map(|s| version_id(s)) else {
            return Ruling::Keep;
        };
        let moved_away = self
            .rollout
            .as_ref()
            .and_then(|r| r.targets.get(cluster))
            .is_some_and(|t| t.state.wants_previous() && t.step.to == served)
            || self
                .standing
                .get(cluster)
                .is_some_and(|s| s.version == served);
        if moved_away {
            Ruling::Withdraw
        } else {
            Ruling::Keep
        }
    }

    /// The snapshot of version `id` of `cluster`, if this replica can
    /// produce it: what it serves, its newest build, the rollout's
    /// versions, or snapshots restored or read from the history.
    pub(super) fn resolve(&self, cluster: &str, id: &str) -> Option<Arc<Snapshot>> {
        let v = self.versions.get(cluster);
        [
            self.serving.get(cluster),
            self.latest.get(cluster),
            v.map(|v| &v.to),
            v.and_then(|v| v.from.as_ref()),
        ]
        .into_iter()
        .flatten()
        .find(|s| version_id(s) == id)
        .cloned()
        .or_else(|| {
            self.known
                .get(&(cluster.to_owned(), id.to_owned()))
                .cloned()
        })
    }

    /// Decides that `cluster` is served version `id`: returns the snapshot
    /// when it is new to serve; marks the decision unavailable (and serves
    /// nothing) when this replica cannot produce it.
    pub(super) fn decide(&mut self, cluster: &str, id: &str) -> Option<Arc<Snapshot>> {
        // Already decided and produced (the common case on every ACK: no
        // digest computed).
        let decided = self.serving_ids.get(cluster).map(String::as_str) == Some(id);
        if decided && self.serving.contains_key(cluster) && !self.unavailable.contains_key(cluster)
        {
            return None;
        }
        self.serving_ids.insert(cluster.to_owned(), id.to_owned());
        match self.resolve(cluster, id) {
            Some(s) => {
                self.serving.insert(cluster.to_owned(), s.clone());
                self.available(cluster);
                Some(s)
            }
            None => {
                self.unavailable(cluster, id);
                None
            }
        }
    }

    /// The clusters whose decision this replica can't produce: the
    /// pipeline asks [`Controller::decision`] again for them after every
    /// change (a ruling of [`Ruling::Keep`] may have become
    /// [`Ruling::Withdraw`]).
    pub fn unavailable_clusters(&self) -> impl Iterator<Item = &String> {
        self.unavailable.keys()
    }

    /// Decisions this replica could not produce, tried again (after a
    /// build: the sources may produce the version again). Returns what to
    /// serve.
    pub(super) fn retry_unavailable(&mut self) -> Serve {
        let waiting: Vec<(String, String)> = self
            .unavailable
            .iter()
            .map(|(c, id)| (c.clone(), id.clone()))
            .collect();
        let mut serve = Serve::new();
        for (cluster, id) in waiting {
            if let Some(s) = self.decide(&cluster, &id) {
                serve.push((Group::from(cluster.as_str()), s));
            }
        }
        serve
    }

    /// Decides that `cluster` is served `snapshot` (one this replica has).
    pub(super) fn set_serving(&mut self, cluster: &str, snapshot: Arc<Snapshot>) {
        self.serving_ids
            .insert(cluster.to_owned(), version_id(&snapshot));
        self.serving.insert(cluster.to_owned(), snapshot);
        self.available(cluster);
    }

    fn available(&mut self, cluster: &str) {
        if let Some(id) = self.unavailable.remove(cluster) {
            info!(cluster = %cluster, version = %id, "the rollout's version for the cluster is available again");
            metrics::gauge!(shared::METRIC_UNRESOLVED).set(self.unavailable.len() as f64);
        }
    }

    fn unavailable(&mut self, cluster: &str, id: &str) {
        if self.unavailable.get(cluster).map(String::as_str) == Some(id) {
            return;
        }
        warn!(
            cluster = %cluster,
            version = %id,
            "the rollout serves the cluster a version this replica cannot produce (not in its history); nothing is pushed to it: it keeps what it holds"
        );
        self.audit.record(AuditEvent::Unavailable {
            cluster: cluster.to_owned(),
            version: id.to_owned(),
        });
        self.unavailable.insert(cluster.to_owned(), id.to_owned());
        metrics::gauge!(shared::METRIC_UNRESOLVED).set(self.unavailable.len() as f64);
    }

    /// The clusters pinned by operators (the pipeline's pins in force).
    /// A pinned cluster of the current rollout leaves its waves; one
    /// unpinned rejoins them. Returns what to serve.
    pub fn set_pins(&mut self, now: Millis, pinned: BTreeSet<String>) -> Serve {
        if pinned == self.pinned {
            return Serve::new();
        }
        self.pinned = pinned;
        if !self.leading() {
            return Serve::new();
        }
        let commands = self.pin_commands(now);
        if commands.is_empty() {
            return Serve::new();
        }
        self.carry_out(now, commands)
    }

    /// What makes the rollout's `Pinned` states match the pins in force:
    /// a new rollout, one restored or taken over from another replica
    /// (whose pins may have differed), and every change of the pins.
    pub(super) fn pin_commands(&mut self, now: Millis) -> Vec<meshhub_rollout::Command> {
        let Some(r) = self.rollout.as_mut() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let clusters: Vec<(String, bool)> = r
            .targets
            .iter()
            .map(|(c, t)| (c.clone(), matches!(t.state, ClusterState::Pinned { .. })))
            .collect();
        for (c, in_rollout) in clusters {
            match (self.pinned.contains(&c), in_rollout) {
                (true, false) => out.extend(r.pin(now, &c)),
                (false, true) => out.extend(r.unpin(now, &c)),
                _ => {}
            }
        }
        out
    }

    /// `cluster` is sent its rollout's new version: its answers are
    /// awaited again (whatever an earlier sending consumed), and the drops
    /// its istiod reports now are not this version's.
    pub(super) fn sent_new_version(&mut self, cluster: &str) {
        let report = self
            .last_reports
            .as_ref()
            .and_then(|r| r.get(cluster))
            .cloned();
        let Some(v) = self.versions.get_mut(cluster) else {
            return;
        };
        v.unacked = super::changed_collections(v.from.as_ref(), &v.to);
        v.unaccepted = super::acceptance::awaited(v.from.as_deref(), &v.to, report.as_deref());
        self.recheck.add(cluster);
        // A drop already counted against this very version (it is sent
        // again: resumed) is its doing, not a standing one.
        let to_id = version_id(&v.to);
        let fed = &self.fed_drops;
        v.prior_drops = self
            .last_reports
            .as_ref()
            .and_then(|r| r.get(cluster))
            .and_then(|r| r.view.istiod.as_ref())
            .map(|i| {
                i.dropped
                    .iter()
                    .filter(|d| {
                        !fed.contains(&(
                            cluster.to_owned(),
                            to_id.clone(),
                            d.collection.clone(),
                            d.name.clone(),
                        ))
                    })
                    .map(|d| (d.collection.clone(), d.name.clone(), d.version.clone()))
                    .collect()
            })
            .unwrap_or_default();
        self.fed_drops.retain(|(c, ..)| c != cluster);
        self.released.insert(cluster.to_owned());
        if let Some(r) = &self.rollout {
            self.sent_by.insert(cluster.to_owned(), (to_id, r.id));
        }
    }

    /// The clusters sent their new version since the last call: the
    /// pipeline reads their ACKs already in the ledger and the reports
    /// ([`Controller::acks_already_in`]).
    pub fn take_released(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.released)
    }

    /// An operator (`by`) resumes (or promotes) a cluster with a standing
    /// failure that is not part of the current rollout: its failure is
    /// forgiven; it joins a rollout at once if none is in flight, else the
    /// next. The refusals counted stay counted: one told again (a report
    /// after its stream reconnects, the other channel) does not undo this.
    pub(super) fn retry_standing(&mut self, now: Millis, cluster: &str, by: &str) -> Serve {
        self.forgive(Some(cluster), by);
        info!(cluster = %cluster, "standing failure cleared by an operator; the cluster joins the next rollout");
        let in_flight = self
            .rollout
            .as_ref()
            .is_some_and(|r| !r.phase.is_terminal());
        if in_flight {
            self.publish_view();
            return Serve::new();
        }
        let latest = self.latest.clone();
        self.built(now, &latest)
    }

    /// Records a cluster's own refusal as a standing failure.
    pub(super) fn note_failure(&mut self, event: &Event) {
        let (cluster, message) = match event {
            Event::Failed { failure, .. }
                if matches!(failure.cause, Cause::Nack | Cause::Dropped) =>
            {
                (failure.cluster.as_ref(), &failure.message)
            }
            Event::ClusterRefused { cluster, message } => (Some(cluster), message),
            _ => return,
        };
        let (Some(cluster), Some(r)) = (cluster, &self.rollout) else {
            return;
        };
        if let Some(t) = r.targets.get(cluster) {
            self.standing.insert(
                cluster.clone(),
                Standing {
                    version: t.step.to.clone(),
                    message: message.clone(),
                    rollout: r.id,
                },
            );
        }
    }

    /// `cluster`'s agent refused `collection` at `version` while the
    /// cluster is not part of the current rollout (no ACK awaited of it).
    /// When that is what its newest version brings, the refusal stands
    /// (again): later rollouts leave the cluster out and never offer it
    /// that version. This is the answer to an earlier offer arriving late,
    /// after the cluster left the rollout — e.g. after an operator resumed
    /// it from a standing failure while another rollout was in flight
    /// (`retry_standing`). Lost, the next rollout sent the cluster the very
    /// version it had just refused (a refusal of a cluster in the rollout
    /// is the machine's to judge: it holds or rolls the cluster back).
    ///
    /// A refusal counted already (`counted`: by the rollout, or as a
    /// standing failure, from the ledger or a report) is not a new one:
    /// the MCP source never sends a version again once it was answered,
    /// so the same refusal told again — a report after its stream
    /// reconnects, the ledger's record after the report, a restart — must
    /// not undo an operator's resume.
    pub(super) fn refused_outside_rollout(
        &mut self,
        cluster: &str,
        collection: &str,
        version: &str,
        message: &str,
    ) {
        // A pinned cluster's answers are its pin's; a follower records
        // the leader's decisions, not its own.
        if !self.leading() || self.pinned.contains(cluster) {
            return;
        }
        if self.counted.contains(cluster, collection, version) {
            debug!(cluster = %cluster, collection = %collection, version = %version, "a refusal counted already, told again: not a new one");
            return;
        }
        let rollout = self.rollout.as_ref();
        if rollout.is_some_and(|r| r.targets.contains_key(cluster)) {
            return;
        }
        let Some(newest) = self.latest.get(cluster) else {
            return;
        };
        if newest.collection(collection).version() != version {
            return;
        }
        // Decided to be served a version with that very collection: the
        // refusal is of what it holds, not of a change the rollout can keep
        // from it (nor is a first snapshot, served at once).
        let Some(decided) = self.serving_ids.get(cluster) else {
            return;
        };
        let served = self
            .serving
            .get(cluster)
            .filter(|_| !self.unavailable.contains_key(cluster));
        if served.is_some_and(|s| s.collection(collection).version() == version) {
            return;
        }
        let id = version_id(newest);
        if *decided == id {
            return;
        }
        // Counted from here on: it stands, or the standing failure of
        // this very version holds it already (an operator forgiving that
        // one forgives this refusal too).
        self.counted.count(cluster, collection, version);
        if self.standing.get(cluster).is_some_and(|s| s.version == id) {
            self.publish_view();
            return;
        }
        // The rollout that sent the cluster this version, when this hub
        // knows (not necessarily the current one: the cluster is not
        // part of it).
        let sent_by = self
            .sent_by
            .get(cluster)
            .filter(|(v, _)| *v == id)
            .map(|(_, r)| *r);
        warn!(cluster = %cluster, version = %id, rollout = ?sent_by, %message, "the cluster refused its newest version outside the rollout: it stays out of later rollouts until its content changes or an operator resumes it");
        self.audit.record(AuditEvent::StandingFailure {
            cluster: cluster.to_owned(),
            version: id.clone(),
            rollout: sent_by,
            message: message.to_owned(),
        });
        let standing = Standing {
            version: id,
            message: message.to_owned(),
            rollout: sent_by.unwrap_or(0),
        };
        self.standing.insert(cluster.to_owned(), standing);
        self.publish_view();
    }

    /// `cluster`'s refusal of `collection` at `version` was fed to the
    /// rollout's machine: counted (see
    /// [`Controller::refused_outside_rollout`]).
    pub(super) fn counted_by_rollout(&mut self, cluster: &str, collection: &str, version: &str) {
        if self.leading() {
            self.counted.count(cluster, collection, version);
        }
    }

    /// Standing failures end when the cluster's content changes; returns
    /// whether `cluster`'s newest version `id` is the one it refused.
    pub(super) fn still_refused(&mut self, cluster: &str, id: &str) -> bool {
        match self.standing.get(cluster) {
            Some(s) if s.version == id => true,
            Some(_) => {
                info!(cluster = %cluster, "the content of a cluster with a standing failure changed: it joins the next rollout");
                self.standing.remove(cluster);
                false
            }
            None => false,
        }
    }

    /// An operator (`by`) resumed `cluster` (or the whole rollout): its
    /// refusal no longer keeps it out (audited). The refusals counted stay
    /// counted.
    pub(super) fn forgive(&mut self, cluster: Option<&str>, by: &str) {
        let forgiven: Vec<String> = match cluster {
            Some(c) => self
                .standing
                .contains_key(c)
                .then(|| c.to_owned())
                .into_iter()
                .collect(),
            None => self.rollout.as_ref().map_or_else(Vec::new, |r| {
                r.targets
                    .keys()
                    .filter(|c| self.standing.contains_key(*c))
                    .cloned()
                    .collect()
            }),
        };
        for c in forgiven {
            let Some(s) = self.standing.remove(&c) else {
                continue;
            };
            info!(cluster = %c, version = %s.version, %by, "standing failure forgiven by an operator");
            self.audit.record(AuditEvent::StandingForgiven {
                rollout: s.sent_by(),
                cluster: c,
                version: s.version,
                by: by.to_owned(),
            });
        }
    }

    /// The groups whose served snapshot must change for the rollout's
    /// state: held, excluded, pinned and rolled-back clusters get their
    /// previous version, the others the new one (a pinned cluster is
    /// served its pin by the pipeline whatever this says).
    pub(super) fn desired(&mut self) -> Serve {
        let Some(r) = &self.rollout else {
            return Serve::new();
        };
        let wanted: Vec<(String, String)> = r
            .targets
            .keys()
            .filter_map(|c| {
                let id = r.wanted(c)??;
                Some((c.clone(), id.to_owned()))
            })
            .collect();
        let mut serve = Serve::new();
        for (cluster, id) in wanted {
            if let Some(s) = self.decide(&cluster, &id) {
                serve.push((Group::from(cluster.as_str()), s));
            }
        }
        self.gauges();
        serve
    }

    /// Standing failures and unavailable decisions, for the view.
    pub(super) fn trouble(&self) -> (BTreeMap<String, Standing>, BTreeMap<String, String>) {
        (self.standing.clone(), self.unavailable.clone())
    }
}

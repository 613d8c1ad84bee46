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
use meshhub_rollout::{Cause, Event};
use tracing::{info, warn};

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
    pub fn decision(&self, cluster: &str) -> Ruling<Arc<Snapshot>> {
        let Some(id) = self.serving_ids.get(cluster) else {
            return Ruling::Keep;
        };
        match self.serving.get(cluster).filter(|s| version_id(s) == *id) {
            Some(s) => Ruling::Serve(s.clone()),
            None => Ruling::Withdraw,
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
        let current = self.serving.get(cluster);
        let decided = self.serving_ids.get(cluster).map(String::as_str) == Some(id);
        if decided && current.is_some_and(|s| version_id(s) == id) {
            self.available(cluster);
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
        let unpinned: Vec<String> = self.pinned.difference(&pinned).cloned().collect();
        self.pinned = pinned;
        if !self.leading() {
            return Serve::new();
        }
        let Some(r) = self.rollout.as_mut() else {
            return Serve::new();
        };
        let mut commands = Vec::new();
        for c in &self.pinned {
            commands.extend(r.pin(now, c));
        }
        for c in &unpinned {
            commands.extend(r.unpin(now, c));
        }
        if commands.is_empty() {
            return Serve::new();
        }
        self.carry_out(now, commands)
    }

    /// A new rollout takes the pins in force into account.
    pub(super) fn pin_targets(&mut self, now: Millis) -> Vec<meshhub_rollout::Command> {
        let Some(r) = self.rollout.as_mut() else {
            return Vec::new();
        };
        self.pinned.iter().flat_map(|c| r.pin(now, c)).collect()
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

    /// An operator resumed `cluster` (or the whole rollout): its refusal
    /// no longer keeps it out.
    pub(super) fn forgive(&mut self, cluster: Option<&str>) {
        match cluster {
            Some(c) => {
                self.standing.remove(c);
            }
            None => {
                if let Some(r) = &self.rollout {
                    let targets: BTreeSet<&String> = r.targets.keys().collect();
                    self.standing.retain(|c, _| !targets.contains(c));
                }
            }
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

//! Several replicas: the controller of the replica that does not decide
//! follows the leader's decisions ([`super::shared`]); one that takes the
//! lead continues them.

use std::sync::Arc;

use meshhub_mcp::cache::Group;
use tracing::info;

use super::shared::Mirrored;
use super::{Controller, Millis, Mode, Restored, Serve};
use crate::history::version_id;

impl Controller {
    /// The leadership term of this replica's decisions (0: never led).
    pub fn term(&self) -> u64 {
        self.term
    }

    /// Takes the lead (leader election): continues from the decisions
    /// followed so far, as a restarted hub continues from its state file.
    /// `term` marks its decisions (the elector's `transitions`). The caller
    /// then reads the ledger ([`Controller::reconcile`]): the dialers may
    /// have been ACKed before this.
    pub fn lead(&mut self, now: Millis, term: u64) -> Serve {
        self.term = term;
        let Mode::Following(mirrored) = std::mem::replace(&mut self.mode, Mode::Leading) else {
            return Serve::new();
        };
        let m = mirrored.as_deref().cloned().unwrap_or_default();
        let mut snapshots = m.snapshots;
        for (cluster, s) in &self.serving {
            if let Some(id) = self.serving_ids.get(cluster) {
                snapshots
                    .entry((cluster.clone(), id.clone()))
                    .or_insert_with(|| s.clone());
            }
        }
        info!(
            rollout = m.decisions.rollout.as_ref().map(|r| r.id),
            previous_leader = ?m.decisions.by,
            "leading the rollout: continuing from the shared decisions"
        );
        let restored = Restored {
            rollout: m.decisions.rollout,
            serving: m.decisions.serving,
            snapshots,
            standing: m.decisions.standing,
            counted_refusals: m.decisions.counted_refusals,
        };
        self.restore_from(restored);
        if self.latest.is_empty() {
            // Applied at the first build.
            self.publish_view();
            return Serve::new();
        }
        let latest = self.latest.clone();
        self.built(now, &latest)
    }

    /// While leading: snapshots of decided versions that reached this
    /// replica after it took the lead (the follow task read them from the
    /// archive meanwhile). A decision it could not produce is tried again.
    pub fn learn(&mut self, mirrored: Option<&Mirrored>) -> Serve {
        let Some(m) = mirrored else {
            return Serve::new();
        };
        if let Some(r) = self.restored.as_mut() {
            for (k, s) in &m.snapshots {
                r.snapshots.entry(k.clone()).or_insert_with(|| s.clone());
            }
        }
        let mut new = false;
        for (k, s) in &m.snapshots {
            if !self.known.contains_key(k) {
                self.known.insert(k.clone(), s.clone());
                new = true;
            }
        }
        if !new || self.unavailable.is_empty() {
            return Serve::new();
        }
        let serve = self.retry_unavailable();
        self.publish_view();
        serve
    }

    /// Follows another replica's decisions (this one lost the lead, never
    /// had it, or the decisions changed): its own rollout stops deciding.
    pub fn follow(&mut self, mirrored: Option<Arc<Mirrored>>) -> Serve {
        if self.leading() {
            info!("following the leader's rollout decisions");
        }
        self.mode = Mode::Following(mirrored);
        self.versions.clear();
        self.restored = None;
        self.next_evaluation = None;
        self.mirror_serve()
    }

    /// A follower serves each governed cluster the version the leader
    /// serves it, found among its newest builds, what it serves and its
    /// history; one it can't produce keeps what it holds (nothing pushed;
    /// shown as unavailable, counted in [`super::shared::METRIC_UNRESOLVED`]). A
    /// cluster the leader has not served yet gets its newest, as the
    /// leader does a first build.
    pub(super) fn mirror_serve(&mut self) -> Serve {
        let Mode::Following(Some(m)) = &self.mode else {
            return Serve::new();
        };
        let m = m.clone();
        self.known = m.snapshots.clone();
        self.standing = m.decisions.standing.clone();
        self.counted = m.decisions.counted_refusals.clone();
        let mut serve = Serve::new();
        let names: Vec<String> = self.clusters.iter().map(|(c, _)| c.clone()).collect();
        for cluster in names {
            let Some(newest) = self.latest.get(cluster.as_str()) else {
                continue;
            };
            let id = m
                .decisions
                .serving
                .get(&cluster)
                .cloned()
                .unwrap_or_else(|| version_id(newest));
            if let Some(s) = self.decide(&cluster, &id) {
                serve.push((Group::from(cluster.as_str()), s));
            }
        }
        self.rollout = m.decisions.rollout.clone();
        self.gauges();
        self.publish_view();
        serve
    }
}

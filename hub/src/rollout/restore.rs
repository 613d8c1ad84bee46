//! Continuing from saved decisions: after a restart (the state file) or
//! when this replica takes the lead (the decisions it followed).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use meshhub_mcp::cache::Group;
use meshhub_mcp::snapshot::Snapshot;
use meshhub_rollout::{ClusterState, Phase, Rollout};
use tracing::{info, warn};

use super::{Controller, Millis, Serve, Versions, changed_collections, persist, shared};
use crate::history::version_id;

/// Decisions saved before a restart (or followed before this replica led),
/// with the snapshots of the versions they name.
#[derive(Debug, Default)]
pub struct Restored {
    /// The rollout.
    pub rollout: Option<Rollout>,
    /// Per cluster, the version id it was served.
    pub serving: BTreeMap<String, String>,
    /// `(cluster, version id)` → the snapshot.
    pub snapshots: shared::Snapshots,
    /// Clusters' standing failures.
    pub standing: BTreeMap<String, shared::Standing>,
    /// The refusals counted already.
    pub counted_refusals: shared::CountedRefusals,
}

impl Controller {
    /// Continues `restored` (saved before a restart) at the first build.
    #[must_use]
    pub fn restoring(mut self, restored: Restored) -> Self {
        self.restore_from(restored);
        self
    }

    pub(super) fn restore_from(&mut self, mut restored: Restored) {
        if let Some(r) = &restored.rollout {
            self.next_id = self.next_id.max(r.id + 1);
        }
        // At once, not at the first build: a refusal told again meanwhile
        // is no new one either.
        self.counted
            .merge(std::mem::take(&mut restored.counted_refusals));
        self.restored = Some(restored);
    }

    /// The first build after a restart with saved decisions (or after this
    /// replica took the lead): every cluster of the rollout is served what
    /// its state says (its previous or its new version), every other one
    /// the version it was served (so a change made meanwhile goes through
    /// a rollout too); a cluster the decisions never served gets its
    /// newest. A decided version this replica cannot produce is not
    /// replaced: the cluster keeps what it holds ([`super::decide`]). If the rollout is unfinished and the sources still produce
    /// its new versions, it goes on where it was (returns true); otherwise
    /// the caller starts a new one from what is served now, superseding it.
    pub(super) fn resume(
        &mut self,
        now: Millis,
        restored: Restored,
        latest: &HashMap<Group, Arc<Snapshot>>,
        serve: &mut Serve,
    ) -> bool {
        let Restored {
            rollout,
            serving,
            snapshots,
            standing,
            counted_refusals: _,
        } = restored;
        self.known.extend(snapshots);
        self.standing = standing;
        let finished = rollout
            .as_ref()
            .is_none_or(|r| matches!(r.phase, Phase::Completed | Phase::Superseded { .. }));
        let mut versions = HashMap::new();
        let names: Vec<String> = self.clusters.iter().map(|(c, _)| c.clone()).collect();
        for cluster in names {
            let Some(newest) = latest.get(cluster.as_str()) else {
                // No build for it yet (analysis holds its first back): its
                // decision stays, so it is not taken for a first snapshot.
                if let Some(id) = serving.get(&cluster) {
                    self.serving_ids.insert(cluster.clone(), id.clone());
                    // `serving` holds only the decided version.
                    if self
                        .serving
                        .get(&cluster)
                        .is_some_and(|s| version_id(s) != *id)
                    {
                        self.serving.remove(&cluster);
                    }
                }
                continue;
            };
            // A finished rollout's targets too: a completed one still
            // hears its clusters' answers (one released by an operator
            // after it completed may still refuse).
            let target = rollout
                .as_ref()
                .filter(|r| !matches!(r.phase, Phase::Superseded { .. }))
                .and_then(|r| r.targets.get(&cluster));
            // Which rollout sent the cluster its new version, as far as
            // the decisions tell (for a refusal of it told later).
            if let (Some(r), Some(t)) = (&rollout, target)
                && matches!(
                    t.state,
                    ClusterState::Released { .. }
                        | ClusterState::Acked { .. }
                        | ClusterState::Failed { .. }
                        | ClusterState::RolledBack
                )
            {
                self.sent_by
                    .insert(cluster.clone(), (t.step.to.clone(), r.id));
            }
            // The version decided for the cluster; a decision this replica
            // cannot produce holds the cluster where it is (fails closed),
            // never on the newest.
            let decided = match target {
                Some(t) => {
                    let from = t
                        .step
                        .from
                        .as_deref()
                        .and_then(|id| self.resolve(&cluster, id));
                    match self.resolve(&cluster, &t.step.to) {
                        Some(to) => {
                            versions.insert(
                                cluster.clone(),
                                Versions {
                                    // Every cluster not yet ACKed: a held
                                    // one is released later and must ACK
                                    // then.
                                    unacked: match t.state {
                                        ClusterState::Acked { .. } => BTreeMap::new(),
                                        _ => changed_collections(from.as_ref(), &to),
                                    },
                                    unaccepted: match t.state {
                                        ClusterState::Acked { .. } => Default::default(),
                                        _ => super::acceptance::awaited(from.as_deref(), &to, None),
                                    },
                                    from,
                                    to,
                                    prior_drops: BTreeSet::new(),
                                },
                            );
                        }
                        None => warn!(
                            cluster = %cluster,
                            version = %t.step.to,
                            "the new version of the saved rollout is not in this replica's history; the cluster's ACKs of it can't be followed"
                        ),
                    }
                    if t.state.wants_previous() {
                        t.step.from.clone()
                    } else {
                        Some(t.step.to.clone())
                    }
                }
                None => Some(
                    serving
                        .get(&cluster)
                        .cloned()
                        .unwrap_or_else(|| version_id(newest)),
                ),
            };
            if let Some(id) = decided
                && let Some(s) = self.decide(&cluster, &id)
            {
                serve.push((Group::from(cluster.as_str()), s));
            }
        }
        let Some(mut rollout) = rollout else {
            return false;
        };
        // Clusters the configuration no longer has leave it (the decisions
        // may predate a reload), so the rest of it goes on.
        let gone: Vec<String> = rollout
            .targets
            .keys()
            .filter(|c| !self.governs(c))
            .cloned()
            .collect();
        for c in gone {
            info!(cluster = %c, "a cluster of the saved rollout is no longer configured; it leaves the rollout");
            rollout.forget(now, &c);
        }
        let unchanged = rollout.targets.iter().all(|(c, t)| {
            latest
                .get(c.as_str())
                .is_some_and(|l| version_id(l) == t.step.to)
        });
        info!(
            rollout = rollout.id,
            phase = rollout.phase.name(),
            unchanged,
            "rollout restored"
        );
        let mut commands = rollout.restore();
        self.rollout = Some(rollout);
        self.versions = versions;
        self.recheck = super::signals::Recheck::Every;
        if finished || !unchanged {
            return false;
        }
        // The pins in force here, not those of the replica that saved it.
        commands.extend(self.pin_commands(now));
        serve.extend(self.carry_out(now, commands));
        true
    }
}

/// The decisions saved in `file`, with the snapshots of the versions they
/// name read back from `history` (blocking; at start).
pub fn restore(
    file: &persist::StateFile,
    history: &crate::history::History,
) -> Result<Option<Restored>, persist::LoadError> {
    let Some(decisions) = file.load()? else {
        return Ok(None);
    };
    // Kept from pruning from the start (before the first build decides).
    history.protect(
        "restored",
        decisions
            .versions()
            .map(|(c, v)| (c.to_owned(), v.to_owned()))
            .collect(),
    );
    let mut snapshots = shared::Snapshots::new();
    for (cluster, id) in decisions.versions() {
        let key = (cluster.to_owned(), id.to_owned());
        if snapshots.contains_key(&key) {
            continue;
        }
        match history.snapshot(cluster, id) {
            Ok(s) => {
                snapshots.insert(key, s);
            }
            Err(e) => {
                warn!(cluster = %cluster, version = %id, error = %e, "a version of the saved rollout can't be read from the history");
            }
        }
    }
    Ok(Some(Restored {
        rollout: decisions.rollout,
        serving: decisions.serving,
        snapshots,
        standing: decisions.standing,
        counted_refusals: decisions.counted_refusals,
    }))
}

//! What `wait` decides from one `/status` (or `/debug/object`) answer:
//! which clusters hold the awaited versions, which are still on their way,
//! which refused them. Pure, so every rule is unit-tested.

use std::collections::{BTreeMap, BTreeSet};

use meshhub_api::object::{DefinitionState, Delivery, ObjectView, PeerRole};
use meshhub_api::status::StatusSummary;
use meshhub_mcp::ledger::SyncState;
use meshhub_rollout::{ClusterState, Phase, Rollout};
use serde::Serialize;

/// Per cluster, per collection: the versions that count. The versions the
/// hub served when `wait` started, and every later one it served while
/// waiting (a newer change supersedes the awaited one: ACKing it counts).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Awaited {
    clusters: BTreeMap<String, BTreeMap<String, Versions>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Versions {
    /// Every version that counts.
    accepted: BTreeSet<String>,
    /// The newest one seen.
    latest: String,
}

/// Where one cluster stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum Standing {
    /// It ACKed an awaited version of every collection.
    Acked,
    /// Not yet, and why.
    Waiting {
        /// What it waits for.
        reason: String,
    },
    /// It refused the newest version.
    Nacked {
        /// The collection.
        collection: String,
        /// The peer's message.
        message: String,
    },
}

/// Every awaited cluster's standing.
pub type Report = BTreeMap<String, Standing>;

/// Which clusters `wait` waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Clusters {
    /// These (each must be a remote cluster of the hub).
    Named(Vec<String>),
    /// Every remote cluster the hub dials.
    All,
}

/// A named cluster the hub does not dial.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cluster {cluster:?} is not a remote cluster of this hub (remote clusters: {known})")]
pub struct UnknownCluster {
    /// The name given.
    pub cluster: String,
    /// The hub's remote clusters.
    pub known: String,
}

impl Awaited {
    /// Learns what the hub serves now (the first call fixes what is
    /// awaited; later ones add newer versions).
    pub fn observe(
        &mut self,
        status: &StatusSummary,
        which: &Clusters,
    ) -> Result<(), UnknownCluster> {
        let names: Vec<String> = match which {
            Clusters::All => status.remotes.iter().map(|r| r.cluster.clone()).collect(),
            Clusters::Named(names) => {
                for n in names {
                    if !status.remotes.iter().any(|r| &r.cluster == n) {
                        return Err(UnknownCluster {
                            cluster: n.clone(),
                            known: known(status),
                        });
                    }
                }
                names.clone()
            }
        };
        for name in names {
            let served = self.clusters.entry(name.clone()).or_default();
            let Some(group) = status.groups.iter().find(|g| g.name == name) else {
                continue;
            };
            for (collection, view) in &group.collections {
                let v = served.entry(collection.clone()).or_default();
                if v.latest != view.version {
                    v.accepted.insert(view.version.clone());
                    v.latest.clone_from(&view.version);
                }
            }
        }
        Ok(())
    }

    /// Every awaited cluster's standing in `status`.
    pub fn assess(&self, status: &StatusSummary) -> Report {
        self.clusters
            .iter()
            .map(|(name, collections)| {
                let standing = match status.remotes.iter().find(|r| &r.cluster == name) {
                    None => Standing::Waiting {
                        reason: "no longer a remote cluster of the hub".into(),
                    },
                    Some(remote) => standing(remote, collections),
                };
                (name.clone(), standing)
            })
            .collect()
    }
}

fn standing(
    remote: &meshhub_api::status::RemoteView,
    collections: &BTreeMap<String, Versions>,
) -> Standing {
    if collections.is_empty() {
        return Standing::Waiting {
            reason: "the hub publishes nothing for it yet".into(),
        };
    }
    // The collections the cluster's agent asked for (an agent may take
    // fewer than the hub publishes).
    let mut waiting = Vec::new();
    let mut asked = 0;
    for (collection, versions) in collections {
        let Some(c) = remote.collections.get(collection) else {
            continue;
        };
        asked += 1;
        if let Some(n) = &c.nacked
            && n.version == versions.latest
            && c.state == SyncState::Nacked
        {
            return Standing::Nacked {
                collection: collection.clone(),
                message: n.message.clone(),
            };
        }
        // ACKed, but the cluster's istiod left objects out (its agent's
        // report): as much a refusal as a NACK for someone waiting.
        if c.state == SyncState::Dropped
            && c.acked
                .as_ref()
                .is_some_and(|a| versions.accepted.contains(&a.version))
        {
            let objects: Vec<String> = remote
                .dropped
                .get(collection)
                .map(|d| d.iter().map(|o| o.name.clone()).collect())
                .unwrap_or_default();
            return Standing::Nacked {
                collection: collection.clone(),
                message: format!(
                    "ACKed, but the cluster's istiod dropped {}",
                    objects.join(", ")
                ),
            };
        }
        let acked = c.state == SyncState::Synced
            && c.acked
                .as_ref()
                .is_some_and(|a| versions.accepted.contains(&a.version));
        if !acked {
            let state = match c.state {
                SyncState::Synced => "an older version ACKed",
                SyncState::Stale => "sent, not ACKed",
                SyncState::NotSent => "not sent",
                SyncState::Nacked => "an older version NACKed",
                SyncState::Blocked => "blocked (too large to send)",
                SyncState::Dropped => "an older version ACKed, istiod dropped objects of it",
            };
            waiting.push(format!("{collection}: {state}"));
        }
    }
    if asked == 0 {
        let connected = if remote.connected {
            "connected"
        } else {
            "disconnected"
        };
        Standing::Waiting {
            reason: format!("{connected}; no collection requested yet"),
        }
    } else if waiting.is_empty() {
        Standing::Acked
    } else {
        let connected = if remote.connected {
            ""
        } else {
            "disconnected; "
        };
        Standing::Waiting {
            reason: format!("{connected}{}", waiting.join(", ")),
        }
    }
}

/// Corrects `report` by the hub's staged rollout (`GET /rollout`): a
/// cluster the rollout still holds on its previous version has ACKed that
/// version, which `/status` serves it, but not the change waited for; a
/// cluster the rollout failed or rolled back will not get it.
pub fn under_rollout(report: &mut Report, rollout: &Rollout) {
    for (cluster, standing) in report.iter_mut() {
        if *standing != Standing::Acked {
            continue;
        }
        let Some(target) = rollout.targets.get(cluster) else {
            continue;
        };
        let wave = rollout
            .waves
            .get(target.wave)
            .map_or("?", |w| w.name.as_str());
        let stopped = match &rollout.phase {
            Phase::Halted { failure } | Phase::RolledBack { failure } => Some(failure),
            _ => None,
        };
        *standing = match (&target.state, stopped) {
            (ClusterState::Acked { .. }, _) => continue,
            (ClusterState::Pinned { .. }, _) => Standing::Waiting {
                reason: format!(
                    "pinned by an operator: outside rollout {} (meshhubctl unpin --cluster {cluster})",
                    rollout.id
                ),
            },
            (ClusterState::Failed { message } | ClusterState::Refused { message }, _) => {
                Standing::Nacked {
                    collection: format!("rollout {}", rollout.id),
                    message: message.clone(),
                }
            }
            (_, Some(failure)) => Standing::Nacked {
                collection: format!("rollout {}", rollout.id),
                message: format!(
                    "the rollout stopped in wave {}{}: {}",
                    failure.wave,
                    failure
                        .cluster
                        .as_ref()
                        .map(|c| format!(" ({c})"))
                        .unwrap_or_default(),
                    failure.message
                ),
            },
            (ClusterState::Held, None) => Standing::Waiting {
                reason: if rollout.phase.is_terminal() {
                    format!(
                        "held on its previous version by rollout {} ({})",
                        rollout.id,
                        rollout.phase.name()
                    )
                } else {
                    format!("held by rollout {} until its wave {wave}", rollout.id)
                },
            },
            (ClusterState::Released { .. }, None) => Standing::Waiting {
                reason: format!("being updated by rollout {} (wave {wave})", rollout.id),
            },
            (ClusterState::Excluded, None) => Standing::Waiting {
                reason: format!(
                    "taken out of rollout {} by an operator (meshhubctl rollout resume --cluster {cluster})",
                    rollout.id
                ),
            },
            _ => continue,
        };
    }
}

/// Every cluster receiving `object` (or the named ones): ACKed when its
/// agent ACKed the collection version holding the object's current
/// definition — and, with `resource_version`, once that definition is the
/// one read at that Kubernetes `resourceVersion` (so a change the hub has
/// not read yet is waited for, not mistaken for the one before).
pub fn assess_object(
    view: &ObjectView,
    which: &Clusters,
    resource_version: Option<&str>,
) -> Result<Report, UnknownCluster> {
    let names: Vec<String> = match which {
        // The clusters whose agent the hub dials (the default group and
        // consumers' own groups have none).
        Clusters::All => view
            .clusters
            .iter()
            .filter(|c| c.peers.iter().any(|p| p.role == PeerRole::Agent))
            .map(|c| c.cluster.clone())
            .collect(),
        Clusters::Named(n) => n.clone(),
    };
    if let Some(rv) = resource_version {
        let at_rv = view
            .definitions
            .iter()
            .find(|d| d.resource_version.as_deref() == Some(rv));
        let standing = match at_rv.map(|d| d.state) {
            Some(DefinitionState::Served) => None,
            Some(DefinitionState::Rejected) => Some(Standing::Nacked {
                collection: view.collection.clone(),
                message: format!(
                    "the hub refused resourceVersion {rv}: {}",
                    at_rv.map(|d| d.reasons.join("; ")).unwrap_or_default()
                ),
            }),
            Some(DefinitionState::Ignored) => Some(Standing::Waiting {
                reason: format!("resourceVersion {rv} is not the definition served"),
            }),
            None => Some(Standing::Waiting {
                reason: format!("the hub has not read resourceVersion {rv} yet"),
            }),
        };
        if let Some(s) = standing {
            let names = if names.is_empty() {
                vec![view.name.clone()]
            } else {
                names
            };
            return Ok(names.into_iter().map(|n| (n, s.clone())).collect());
        }
    }
    let mut report = Report::new();
    for name in names {
        let Some(c) = view.clusters.iter().find(|c| c.cluster == name) else {
            return Err(UnknownCluster {
                cluster: name,
                known: format!(
                    "the object goes to {}",
                    view.clusters
                        .iter()
                        .map(|c| c.cluster.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        };
        let agent = c.peers.iter().find(|p| p.role == PeerRole::Agent);
        let standing = match agent {
            _ if !c.in_snapshot => Standing::Waiting {
                reason: match &c.withheld {
                    // Until the cluster's CRD is installed.
                    Some(why) => format!("withheld: {why}"),
                    None => "the cluster is not served the current definition yet".into(),
                },
            },
            None => Standing::Waiting {
                reason: "no agent connected".into(),
            },
            Some(p) => match p.delivery {
                Delivery::Acked => Standing::Acked,
                Delivery::Nacked => Standing::Nacked {
                    collection: view.collection.clone(),
                    message: p.message.clone().unwrap_or_default(),
                },
                Delivery::Sent => Standing::Waiting {
                    reason: "sent, not ACKed".into(),
                },
                Delivery::Behind => Standing::Waiting {
                    reason: "not sent yet".into(),
                },
            },
        };
        report.insert(name, standing);
    }
    Ok(report)
}

fn known(status: &StatusSummary) -> String {
    let names: Vec<&str> = status.remotes.iter().map(|r| r.cluster.as_str()).collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests;

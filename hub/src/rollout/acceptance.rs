//! A cluster has taken its new version only once its Gateway API
//! controller (its istiod) accepted the Gateway API objects the version
//! brought (issue 39, item 4): the ACK says the agent holds and applied
//! them; the controller's `Accepted` condition, which the agent reports,
//! says the cluster serves them. A cluster that ACKed waits here until
//! every such object at its new version is `Accepted=True` at its live
//! generation; `Accepted=False` refuses the version as a NACK would
//! ([`Rejection::NotAccepted`]) once it stood for [`REFUSAL_SETTLE_MS`]
//! (a route applied a moment before the listener it names is refused, then
//! accepted: the agent applies collection by collection); an object its
//! controller never speaks of keeps the cluster waiting until the wave's
//! progress deadline. Only a cluster the rollout sent its version and that
//! has not answered (`Released`) is judged: a refused, failed or rolled
//! back one is not judged again.
//!
//! Objects a cluster's agent left out of its report (past its cap) can't
//! be told: they do not hold it. Without the cluster's previous version
//! (a replica without it in its history) every object of the new one is
//! awaited, but one its controller refused already at that very version
//! when it was sent is not this rollout's doing and is not awaited.
//!
//! An agent that reports no controller status (older than the field, or
//! not applying: then no controller of its cluster reads the objects from
//! meshhub; or one that does not serve the upward report at all) can't
//! tell: its cluster is not held for it. Before a cluster's first report
//! the hub can't know which it is, and waits for it.

use std::collections::BTreeMap;

use meshhub_api::upward::Acceptance;
use meshhub_mcp::snapshot::Snapshot;
use meshhub_proto::kinds::gateway_api::collection_has_status;
use meshhub_rollout::{ClusterState, Input, Rejection};

use super::{Controller, Millis, Serve};
use crate::history::version_id;
use crate::upward::ClusterReport;

/// How long a refusal by a cluster's controller must stand before it
/// refuses the version.
pub(super) const REFUSAL_SETTLE_MS: Millis = 5_000;

/// At most this many objects a cluster awaits are shown per cluster.
const AWAITING_SHOWN: usize = 10;

/// What a cluster sent its new version waits for of its controller.
#[derive(Clone, Debug, Default)]
pub(super) struct Awaited {
    /// By `(collection, name)`, the version `to` holds.
    objects: BTreeMap<(String, String), String>,
    /// Since when (and what) its controller refuses one of them.
    refused: Option<(Millis, String)>,
    /// `/rollout` was told that it waits.
    shown: bool,
}

/// The objects whose acceptance a cluster sent `to` (after `from`) is
/// awaited: each object of a kind with a status that `to` brought new or
/// at a new version — every one when `from` is unknown, but those the
/// cluster's `report` shows refused already at that version.
pub(super) fn awaited(
    from: Option<&Snapshot>,
    to: &Snapshot,
    report: Option<&ClusterReport>,
) -> Awaited {
    let mut objects = BTreeMap::new();
    for (name, c) in to.collections() {
        if !collection_has_status(name) {
            continue;
        }
        let before = from.map(|f| f.collection(name));
        if before.as_ref().is_some_and(|b| b.version() == c.version()) {
            continue;
        }
        for k in c.keys().iter() {
            let unchanged = before.as_ref().is_some_and(|b| {
                let keys = b.keys();
                keys.binary_search_by(|o| o.name.cmp(&k.name))
                    .ok()
                    .is_some_and(|i| keys[i].version == k.version)
            });
            let refused_before = from.is_none()
                && report
                    .and_then(|r| r.view.gateway_api_status.as_ref())
                    .is_some_and(|g| {
                        matches!(
                            g.acceptance_of(name, &k.name, &k.version),
                            Acceptance::Refused { .. }
                        )
                    });
            if !unchanged && !refused_before {
                objects.insert(
                    (name.to_string(), k.name.to_string()),
                    k.version.to_string(),
                );
            }
        }
    }
    Awaited {
        objects,
        refused: None,
        shown: false,
    }
}

impl Controller {
    /// The clusters that ACKed and wait for their controller, with the
    /// objects they wait for (`/rollout`).
    pub(super) fn awaiting_acceptance(&self) -> BTreeMap<String, Vec<String>> {
        self.versions
            .iter()
            .filter(|(c, v)| {
                v.unacked.is_empty() && !v.unaccepted.objects.is_empty() && self.released(c)
            })
            .map(|(cluster, v)| {
                let objects = v
                    .unaccepted
                    .objects
                    .keys()
                    .take(AWAITING_SHOWN)
                    .map(|(collection, name)| {
                        format!(
                            "{} {name}",
                            collection.rsplit('/').next().unwrap_or(collection)
                        )
                    })
                    .collect();
                (cluster.clone(), objects)
            })
            .collect()
    }

    /// Whether the rollout sent `cluster` its version and awaits its
    /// answer.
    fn released(&self, cluster: &str) -> bool {
        self.rollout
            .as_ref()
            .and_then(|r| r.targets.get(cluster))
            .is_some_and(|t| matches!(t.state, ClusterState::Released { .. }))
    }

    /// The clusters that ACKed and wait for their controller.
    pub(super) fn waiting_for_acceptance(&self) -> Vec<String> {
        self.versions
            .iter()
            .filter(|(c, v)| {
                v.unacked.is_empty() && !v.unaccepted.objects.is_empty() && self.released(c)
            })
            .map(|(c, _)| c.clone())
            .collect()
    }

    /// When a refusal seen stands long enough to be judged again
    /// ([`Controller::tick`]).
    pub(super) fn next_refusal_due(&self) -> Option<Millis> {
        self.versions
            .values()
            .filter_map(|v| v.unaccepted.refused.as_ref())
            .map(|(since, _)| since.saturating_add(REFUSAL_SETTLE_MS))
            .min()
    }

    /// The clusters whose refusal stood long enough: judged again.
    pub(super) fn refusals_due(&mut self, now: Millis) -> Serve {
        let due: Vec<String> = self
            .versions
            .iter()
            .filter(|(_, v)| {
                v.unaccepted
                    .refused
                    .as_ref()
                    .is_some_and(|(since, _)| now >= since.saturating_add(REFUSAL_SETTLE_MS))
            })
            .map(|(c, _)| c.clone())
            .collect();
        let mut serve = Serve::new();
        for cluster in due {
            serve.extend(self.judge_acceptance(now, &cluster));
        }
        serve
    }

    /// What `cluster`'s last report says of the objects whose acceptance it
    /// awaits, once it ACKed every collection: each accepted one is done;
    /// a refused one refuses the version once the refusal stood for
    /// [`REFUSAL_SETTLE_MS`]; when none is left the cluster has taken it.
    pub(super) fn judge_acceptance(&mut self, now: Millis, cluster: &str) -> Serve {
        let released = self.released(cluster);
        let Some(v) = self.versions.get_mut(cluster) else {
            return Serve::new();
        };
        if !v.unacked.is_empty() {
            return Serve::new();
        }
        let to = version_id(&v.to);
        if v.unaccepted.objects.is_empty() {
            return self.feed(
                now,
                Input::Acked {
                    cluster: cluster.to_owned(),
                    version: to,
                },
            );
        }
        if !released {
            // Answered already (refused, failed, rolled back) or not sent.
            v.unaccepted.refused = None;
            return Serve::new();
        }
        // No report yet: its first says whether its agent can tell.
        let Some(report) = self.last_reports.as_ref().and_then(|r| r.get(cluster)) else {
            return Serve::new();
        };
        let before = v.unaccepted.objects.len();
        let mut refused = None;
        match &report.view.gateway_api_status {
            // Its agent can't tell: not held for it.
            None => v.unaccepted.objects.clear(),
            Some(status) => v.unaccepted.objects.retain(|(collection, name), version| {
                if refused.is_some() {
                    return true;
                }
                match status.acceptance_of(collection, name, version) {
                    Acceptance::Accepted | Acceptance::Untold => false,
                    Acceptance::Pending => true,
                    no @ Acceptance::Refused { .. } => {
                        let kind = collection.rsplit('/').next().unwrap_or(collection);
                        refused = Some(format!(
                            "{kind} {name} (version {version}) not accepted by the cluster's Gateway API controller: {}",
                            no.to_string().trim_start_matches("no: ")
                        ));
                        true
                    }
                }
            }),
        }
        // `/rollout` says what it waits for: told when it starts waiting
        // and when that shrinks.
        let shrank = v.unaccepted.objects.len() < before
            || !std::mem::replace(&mut v.unaccepted.shown, true);
        let waiting = !v.unaccepted.objects.is_empty();
        match refused {
            Some(message) => {
                let since = match &v.unaccepted.refused {
                    Some((since, _)) => *since,
                    None => now,
                };
                if now < since.saturating_add(REFUSAL_SETTLE_MS) {
                    // Not yet: it may be a moment's (judged again at the
                    // next report, or at `next_refusal_due`).
                    v.unaccepted.refused = Some((since, message));
                    if shrank {
                        self.publish_view();
                    }
                    return Serve::new();
                }
                v.unaccepted.refused = None;
                return self.feed(
                    now,
                    Input::Rejected {
                        cluster: cluster.to_owned(),
                        version: to,
                        how: Rejection::NotAccepted,
                        message,
                    },
                );
            }
            None => v.unaccepted.refused = None,
        }
        if waiting {
            if shrank {
                self.publish_view();
            }
            return Serve::new();
        }
        self.feed(
            now,
            Input::Acked {
                cluster: cluster.to_owned(),
                version: to,
            },
        )
    }
}

#[cfg(test)]
mod tests;

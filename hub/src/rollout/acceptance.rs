//! A cluster has taken its new version only once its Gateway API
//! controller (its istiod) accepted the Gateway API objects the version
//! brought (issue 39, item 4): the ACK says the agent holds and applied
//! them; the controller's `Accepted` condition, which the agent reports,
//! says the cluster serves them. A cluster that ACKed waits here until
//! every such object at its new version is `Accepted=True` at its live
//! generation; `Accepted=False` refuses the version as a NACK would
//! ([`Rejection::NotAccepted`]); an object its controller never speaks of
//! keeps the cluster waiting until the wave's progress deadline.
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
use meshhub_rollout::{Input, Rejection};

use super::{Controller, Millis, Serve};
use crate::history::version_id;

/// The objects whose acceptance a cluster sent `to` (after `from`) is
/// awaited: by `(collection, name)`, the version `to` holds — each object
/// of a kind with a status that `to` brought new or at a new version
/// (every one, when `from` is unknown).
pub(super) fn awaited(
    from: Option<&Snapshot>,
    to: &Snapshot,
) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
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
            if !unchanged {
                out.insert(
                    (name.to_string(), k.name.to_string()),
                    k.version.to_string(),
                );
            }
        }
    }
    out
}

/// At most this many objects a cluster awaits are shown per cluster.
const AWAITING_SHOWN: usize = 10;

impl Controller {
    /// The clusters that ACKed and wait for their controller, with the
    /// objects they wait for (`/rollout`).
    pub(super) fn awaiting_acceptance(&self) -> BTreeMap<String, Vec<String>> {
        self.versions
            .iter()
            .filter(|(_, v)| v.unacked.is_empty() && !v.unaccepted.is_empty())
            .map(|(cluster, v)| {
                let objects = v
                    .unaccepted
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

    /// What `cluster`'s last report says of the objects whose acceptance it
    /// awaits, once it ACKed every collection: each accepted one is done;
    /// the first refused one refuses the version; when none is left the
    /// cluster has taken it.
    pub(super) fn judge_acceptance(&mut self, now: Millis, cluster: &str) -> Serve {
        let Some(v) = self.versions.get_mut(cluster) else {
            return Serve::new();
        };
        if !v.unacked.is_empty() {
            return Serve::new();
        }
        let to = version_id(&v.to);
        if v.unaccepted.is_empty() {
            return self.feed(
                now,
                Input::Acked {
                    cluster: cluster.to_owned(),
                    version: to,
                },
            );
        }
        // No report yet: its first says whether its agent can tell.
        let Some(report) = self.last_reports.as_ref().and_then(|r| r.get(cluster)) else {
            return Serve::new();
        };
        let mut refused = None;
        match &report.view.gateway_api_status {
            // Its agent can't tell: not held for it.
            None => v.unaccepted.clear(),
            Some(status) => v.unaccepted.retain(|(collection, name), version| {
                if refused.is_some() {
                    return true;
                }
                match status.acceptance_of(collection, name, version) {
                    Acceptance::Accepted => false,
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
        let waiting = !v.unaccepted.is_empty();
        if waiting {
            // `/rollout` says what it waits for.
            self.publish_view();
        }
        if let Some(message) = refused {
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
        if waiting {
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

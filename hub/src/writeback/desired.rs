//! What an object's status should say: its delivery to each remote cluster
//! that receives it (from the snapshots, the ACK/NACK ledger and the
//! clusters' upward reports, as `/status` shows them) summed up in one
//! `Distributed` condition, and the analysis messages about it. Pure: the
//! writer task gathers the inputs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use meshhub_api::analysis::ClusterAnalysis;
use meshhub_api::status::RemoteView;
use meshhub_kube::status::{Condition, IstioStatus, ValidationMessage};
use meshhub_mcp::ledger::SyncState;
use meshhub_mcp::snapshot::Snapshot;

/// The condition type meshhub writes.
pub const DISTRIBUTED: &str = "Distributed";

/// At most this many clusters are named in a condition's message.
const NAMED: usize = 3;
/// A peer's NACK message is cut to this many characters.
const MESSAGE_CHARS: usize = 300;

/// Where the object stands in one remote cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// The cluster ACKed a version holding the object as served.
    Acked,
    /// The cluster refused the version holding it.
    Nacked(String),
    /// The cluster's istiod left the object out (its agent's report).
    Dropped(String),
    /// The version holding it could not be sent (too large).
    Blocked(String),
    /// Not yet, and why.
    Pending(&'static str),
}

/// The object in one cluster: `snapshot` is what the cluster's group is
/// served, `served` the object's version as the hub serves it, `held` the
/// version the cluster was last seen to hold (ACKed) of it.
pub fn standing(
    remote: &RemoteView,
    snapshot: Option<&Snapshot>,
    collection: &str,
    name: &str,
    served: &str,
    held: Option<&str>,
) -> Standing {
    let Some(snapshot) = snapshot else {
        return Standing::Pending("nothing published for it yet");
    };
    let c = snapshot.collection(collection);
    let keys = c.keys();
    let in_snapshot = keys
        .binary_search_by(|k| (*k.name).cmp(name))
        .ok()
        .is_some_and(|i| &*keys[i].version == served);
    if !in_snapshot {
        // Held back: a rollout wave, a pin, analysis holding it.
        return Standing::Pending("not in the version it is served yet");
    }
    if let Some(d) = remote.dropped.get(collection).and_then(|d| {
        d.iter()
            .find(|d| d.name == name && (d.version.is_empty() || d.version == served))
    }) {
        return Standing::Dropped(d.reason.clone());
    }
    let held_now = held == Some(served);
    let Some(status) = remote.collections.get(collection) else {
        return if held_now {
            Standing::Acked
        } else {
            Standing::Pending("its collection not requested yet")
        };
    };
    let current = c.version();
    let acked = status.acked.as_ref().is_some_and(|a| a.version == current);
    if acked && matches!(status.state, SyncState::Synced | SyncState::Dropped) {
        return Standing::Acked;
    }
    if held_now {
        // A later version of the collection is on its way (or was refused
        // for another object): the cluster still holds this one.
        return Standing::Acked;
    }
    match status.state {
        SyncState::Nacked => match &status.nacked {
            Some(n) if n.version == current => Standing::Nacked(n.message.clone()),
            _ => Standing::Pending("an older version NACKed"),
        },
        SyncState::Blocked => Standing::Blocked(
            status
                .blocked
                .as_ref()
                .map(|b| b.message.clone())
                .unwrap_or_default(),
        ),
        SyncState::Stale => Standing::Pending("sent, not ACKed yet"),
        SyncState::NotSent => Standing::Pending("not sent yet"),
        SyncState::Synced | SyncState::Dropped => Standing::Pending("an older version ACKed"),
    }
}

/// The `Distributed` condition of an object served to `standings` (per
/// remote cluster that receives it), about `generation`.
pub fn distributed(standings: &BTreeMap<String, Standing>, generation: i64) -> Condition {
    let total = standings.len();
    let acked = standings
        .values()
        .filter(|s| **s == Standing::Acked)
        .count();
    let failed: Vec<(&String, &Standing)> = standings
        .iter()
        .filter(|(_, s)| {
            matches!(
                s,
                Standing::Nacked(_) | Standing::Dropped(_) | Standing::Blocked(_)
            )
        })
        .collect();
    let tally = format!("ACKed by {acked}/{total} clusters");
    let (status, reason, message) = if total == 0 {
        (
            "Unknown",
            "NoRemoteClusters",
            "served, but no remote cluster receives it".to_owned(),
        )
    } else if let Some((_, first)) = failed.first() {
        let reason = match first {
            Standing::Nacked(_) => "Nacked",
            Standing::Dropped(_) => "Dropped",
            _ => "Blocked",
        };
        let mut parts: Vec<String> = failed
            .iter()
            .take(NAMED)
            .map(|(cluster, s)| match s {
                Standing::Nacked(m) => format!("NACKed by {cluster}: {}", cut(m)),
                Standing::Dropped(m) => format!("DROPPED by {cluster}'s istiod: {}", cut(m)),
                Standing::Blocked(m) => format!("blocked for {cluster}: {}", cut(m)),
                _ => unreachable!("filtered"),
            })
            .collect();
        if failed.len() > NAMED {
            parts.push(format!("and {} more", failed.len() - NAMED));
        }
        ("False", reason, format!("{}; {tally}", parts.join("; ")))
    } else if acked == total {
        ("True", "Acked", tally)
    } else {
        let waiting: Vec<String> = standings
            .iter()
            .filter_map(|(cluster, s)| match s {
                Standing::Pending(why) => Some(format!("{cluster} ({why})")),
                _ => None,
            })
            .collect();
        let mut named = waiting.iter().take(NAMED).cloned().collect::<Vec<_>>();
        if waiting.len() > NAMED {
            named.push(format!("and {} more", waiting.len() - NAMED));
        }
        (
            "Unknown",
            "Pending",
            format!("{tally}; waiting for {}", named.join(", ")),
        )
    };
    Condition {
        type_: DISTRIBUTED.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: Some(generation),
        ..Condition::default()
    }
}

/// The condition of an object the hub does not serve: `why` it is kept out.
pub fn not_served(reason: &str, why: &str, generation: i64) -> Condition {
    Condition {
        type_: DISTRIBUTED.to_owned(),
        status: "False".to_owned(),
        reason: reason.to_owned(),
        message: cut(why),
        observed_generation: Some(generation),
        ..Condition::default()
    }
}

/// `s` cut to the characters a status message quotes of a peer's.
pub(super) fn cut(s: &str) -> String {
    match s.char_indices().nth(MESSAGE_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// The analysis messages of every cluster's latest build, per object
/// (`Kind namespace/name`), without repeats, as Istio writes them.
pub fn messages_by_object(
    analysis: &[Arc<ClusterAnalysis>],
) -> HashMap<String, BTreeSet<ValidationMessage>> {
    let mut out: HashMap<String, BTreeSet<ValidationMessage>> = HashMap::new();
    for a in analysis {
        for m in &a.messages {
            out.entry(m.origin.clone())
                .or_default()
                .insert(ValidationMessage::new(&m.code, &m.name, m.level.as_str()));
        }
    }
    out
}

/// The status to write: `condition` and `messages` about `generation`;
/// the condition keeps its `lastTransitionTime` from `before` when its
/// status did not change.
pub fn status(
    mut condition: Condition,
    messages: Vec<ValidationMessage>,
    generation: i64,
    before: Option<&IstioStatus>,
    now: &str,
) -> IstioStatus {
    let previous = before.and_then(|b| b.condition(DISTRIBUTED));
    condition.last_transition_time = match previous {
        Some(p) if p.status == condition.status && p.last_transition_time.is_some() => {
            p.last_transition_time.clone()
        }
        _ => Some(now.to_owned()),
    };
    IstioStatus {
        conditions: vec![condition],
        validation_messages: messages,
        observed_generation: Some(generation),
    }
}

#[cfg(test)]
pub(crate) mod tests;

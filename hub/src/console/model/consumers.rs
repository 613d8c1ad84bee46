//! The consumers that dial the hub themselves — istiods whose
//! `configSources` name the hub (`xds://…`), MCP `ResourceSource`
//! clients — as the fleet shows them beside the clusters it dials: the
//! node and address, the group served, connected, per collection ACKED /
//! NACKED (message) / PENDING, what it was sent vs what its group is
//! served now, trouble first. From the ledger's peers, as `/status`'s
//! `consumers`.

use std::collections::{BTreeMap, HashSet};
use std::time::SystemTime;

use meshhub_mcp::ledger::PeerStatus;

use super::{Cell, CellState, Health, Query, StateFilter};

/// One stream of a consumer that dials the hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumer {
    /// The ledger's id of its stream.
    pub id: u64,
    /// The node id it announced (`SinkNode.id`, the xDS node id).
    pub node_id: String,
    /// Its address.
    pub peer: String,
    /// The protocol (`mcp`, `ads`, `delta-ads`).
    pub protocol: &'static str,
    /// The group it is served.
    pub group: String,
    /// The Istio release its node announced (`ISTIO_VERSION`).
    pub istio: Option<String>,
    /// Whether its stream is up.
    pub connected: bool,
    /// Since when it is up, or down.
    pub since: Option<SystemTime>,
    /// Why its last stream ended.
    pub last_error: Option<String>,
    /// Per collection.
    pub cells: Vec<Cell>,
    /// The id of the versions it was sent (of the collections it follows;
    /// of them all, the history's id of the version).
    pub served: Option<String>,
    /// The id of what its group is served now, of the same collections.
    pub newest: Option<String>,
    /// The last send, ACK or NACK.
    pub last_change: Option<SystemTime>,
    /// How it stands (never held or pinned: those are a cluster's).
    pub health: Health,
}

impl Consumer {
    /// The name it is shown by: its node id, else its address.
    pub fn name(&self) -> &str {
        if self.node_id.is_empty() {
            &self.peer
        } else {
            &self.node_id
        }
    }

    fn has(&self, state: CellState) -> bool {
        self.cells.iter().any(|c| c.state == state)
    }
}

/// The consumers among `peers` (the ledger's dial-in consumer streams),
/// trouble first. A consumer that reconnected shows once: its streams
/// that ended are left out while one is up (or an earlier one ended
/// later). `group` is what a group is served now, per collection.
pub fn build(
    peers: Vec<PeerStatus>,
    group: &dyn Fn(&str) -> Option<BTreeMap<String, String>>,
) -> Vec<Consumer> {
    let mut groups: BTreeMap<String, Option<BTreeMap<String, String>>> = BTreeMap::new();
    let key = |p: &PeerStatus| {
        let who = if p.node_id.is_empty() {
            p.peer.clone()
        } else {
            p.node_id.clone()
        };
        (who, p.group.clone())
    };
    let up: HashSet<(String, String)> = peers.iter().filter(|p| p.connected).map(key).collect();
    let mut ended = HashSet::new();
    let mut out: Vec<Consumer> = peers
        .into_iter()
        // The ledger lists the live streams, then those that ended, newest
        // first.
        .filter(|p| p.connected || (!up.contains(&key(p)) && ended.insert(key(p))))
        .map(|p| {
            let versions = groups
                .entry(p.group.clone())
                .or_insert_with(|| group(&p.group));
            consumer(p, versions.as_ref())
        })
        .collect();
    out.sort_by(|a, b| (a.health, a.name(), a.id).cmp(&(b.health, b.name(), b.id)));
    out
}

fn consumer(p: PeerStatus, newest: Option<&BTreeMap<String, String>>) -> Consumer {
    let mut cells: Vec<Cell> = p
        .collections
        .iter()
        .map(|(name, c)| {
            let mut state = CellState::of(c.state);
            // ACKed, but its group has a newer version of it: on its way.
            let sent = c.sent.as_ref().map(|s| s.version.as_str());
            let current = newest.and_then(|n| n.get(name)).map(String::as_str);
            if state == CellState::Acked && current.is_some() && sent != current {
                state = CellState::Pending;
            }
            let message = match state {
                CellState::Nacked => c.nacked.as_ref().map(|n| n.message.clone()),
                CellState::Blocked => c.blocked.as_ref().map(|b| b.message.clone()),
                _ => None,
            };
            Cell {
                collection: name.clone(),
                state,
                message: message.unwrap_or_default(),
            }
        })
        .collect();
    cells.sort_by(|a, b| (a.state, &a.collection).cmp(&(b.state, &b.collection)));
    let sent: Option<Vec<(&str, &str)>> = p
        .collections
        .iter()
        .map(|(n, c)| c.sent.as_ref().map(|s| (n.as_str(), s.version.as_str())))
        .collect();
    let served = sent
        .filter(|s| !s.is_empty())
        .map(crate::history::version_id_of);
    let newest = newest.and_then(|n| {
        let of: Option<Vec<(&str, &str)>> = p
            .collections
            .keys()
            .map(|c| n.get(c).map(|v| (c.as_str(), v.as_str())))
            .collect();
        of.filter(|v| !v.is_empty())
            .map(crate::history::version_id_of)
    });
    let last_change = p
        .collections
        .values()
        .flat_map(|c| {
            [
                c.sent.as_ref().map(|v| v.at.0),
                c.acked.as_ref().map(|v| v.at.0),
                c.nacked.as_ref().map(|n| n.at.0),
            ]
        })
        .flatten()
        .max();
    let health = if cells.iter().any(|c| c.state.failing()) {
        Health::Failing
    } else if !p.connected {
        Health::Disconnected
    } else if cells.is_empty()
        || cells.iter().any(|c| c.state != CellState::Acked)
        || served != newest
    {
        Health::Pending
    } else {
        Health::Synced
    };
    Consumer {
        id: p.id,
        protocol: p.protocol.as_str(),
        // One of the node metadata the ledger keeps (`NODE_META_KEPT`).
        istio: p.node_meta.get("ISTIO_VERSION").cloned(),
        since: if p.connected {
            p.connected_since.map(|a| a.0)
        } else {
            p.disconnected_at.map(|a| a.0)
        },
        connected: p.connected,
        last_error: p.last_error,
        node_id: p.node_id,
        peer: p.peer,
        group: p.group,
        cells,
        served,
        newest,
        last_change,
        health,
    }
}

/// The consumers `q` selects (its state and name filters; a label filter
/// selects none: consumers have no labels), the first page's worth, and
/// how many there are in all.
pub fn select<'a>(consumers: &'a [Consumer], q: &Query) -> (Vec<&'a Consumer>, usize) {
    let name = q.name.as_deref().map(str::trim).filter(|n| !n.is_empty());
    let labelled = q.label.as_deref().is_some_and(|l| !l.trim().is_empty());
    let matching: Vec<&Consumer> = consumers
        .iter()
        .filter(|_| !labelled)
        .filter(|c| {
            q.state.is_none_or(|s| match s {
                StateFilter::Trouble => {
                    matches!(c.health, Health::Failing | Health::Disconnected)
                }
                StateFilter::Nacked => c.has(CellState::Nacked),
                StateFilter::Dropped => false,
                StateFilter::Health(h) => c.health == h,
            })
        })
        .filter(|c| {
            name.is_none_or(|n| c.node_id.contains(n) || c.peer.contains(n) || c.group.contains(n))
        })
        .collect();
    let total = matching.len();
    (matching.into_iter().take(q.page_size()).collect(), total)
}

#[cfg(test)]
mod tests;

//! The fleet on `/metrics`: per cluster this replica dials, whether its
//! agent is connected and holds what it is served, and the rollout's
//! clusters and wave — worked out when Prometheus scrapes, from the same
//! ledger, reports and rollout view `/status` and `/rollout` read. Nothing
//! is kept between scrapes: a cluster removed from the configuration (or
//! handed to another replica's shard) leaves no series behind, where a
//! recorder gauge would keep its last value forever.
//!
//! The Grafana dashboards and the alerts of the Helm chart
//! (`deploy/charts/meshhub/dashboards/`, `files/alerts.yaml`) are built on
//! these families; `docs/operations.md` lists them.

use std::collections::BTreeMap;
use std::sync::Arc;

use meshhub_mcp::ledger::{Ledger, SyncState};
use meshhub_runtime::metrics::{Section, Text};
use tokio::sync::watch;

use crate::clusters::{Agents, remote_views};
use crate::leader::LeaderStatus;
use crate::rollout::View;
use crate::upward::Reports;

/// What the section reads: cheap reader handles.
#[derive(Clone)]
pub struct FleetInputs {
    /// The configured agents, as reloaded.
    pub agents: watch::Receiver<Agents>,
    /// Leader election (which clusters this replica dials).
    pub leader: watch::Receiver<LeaderStatus>,
    /// The engine's ACK/NACK ledger.
    pub ledger: Ledger,
    /// What the clusters report over the upward channel.
    pub reports: watch::Receiver<Reports>,
    /// The rollout controller's view.
    pub rollout: watch::Receiver<Arc<View>>,
}

/// The section for `/metrics`.
pub fn section(inputs: FleetInputs) -> Section {
    Arc::new(move |text: &mut Text| write(&inputs, text))
}

/// The section for `/metrics` of what `admin` reads, and the rollout's
/// `view`.
pub fn section_of(admin: &super::AdminState, rollout: watch::Receiver<Arc<View>>) -> Section {
    section(FleetInputs {
        agents: admin.agents.clone(),
        leader: admin.leader.clone(),
        ledger: admin.ledger.clone(),
        reports: admin.reports.clone(),
        rollout,
    })
}

/// Every rollout state, so that each has a series (0 included) while a
/// rollout exists.
const ROLLOUT_STATES: [&str; 8] = [
    "held",
    "updating",
    "acked",
    "failed",
    "rolled_back",
    "excluded",
    "refused",
    "pinned",
];

fn write(inputs: &FleetInputs, text: &mut Text) {
    let agents = inputs.agents.borrow().clone();
    let leader = inputs.leader.borrow().clone();
    text.single(
        "meshhub_clusters",
        "gauge",
        "clusters configured with an agent (every replica counts them all)",
        agents.len() as f64,
    );
    let dialed: Vec<_> = agents
        .iter()
        .filter(|a| leader.dials_cluster(&a.cluster))
        .cloned()
        .collect();
    let ledger = inputs.ledger.view();
    // Only what marks DROPPED collections; the exports' conflicts are not
    // needed here.
    let reports: BTreeMap<_, _> = inputs
        .reports
        .borrow()
        .iter()
        .map(|(c, r)| (c.clone(), r.view.clone()))
        .collect();
    let rows = remote_views(
        &dialed,
        &leader,
        &ledger,
        &reports,
        crate::upward::peer_name,
    );

    text.family(
        "meshhub_cluster_connected",
        "gauge",
        "1 while this replica's stream to the cluster's agent is up (clusters this replica dials)",
    );
    for r in &rows {
        let v = if r.connected { 1.0 } else { 0.0 };
        text.sample("meshhub_cluster_connected", &[("cluster", &r.cluster)], v);
    }
    text.family(
        "meshhub_cluster_synced",
        "gauge",
        "1 while the cluster's agent is connected and ACKed the last version of every collection sent to it (DROPPED counts: the agent holds it)",
    );
    for r in &rows {
        let synced = r.connected
            && !r.collections.is_empty()
            && r.collections
                .values()
                .all(|c| matches!(c.state, SyncState::Synced | SyncState::Dropped));
        let v = if synced { 1.0 } else { 0.0 };
        text.sample("meshhub_cluster_synced", &[("cluster", &r.cluster)], v);
    }
    text.family(
        "meshhub_cluster_collections",
        "gauge",
        "collections of the cluster by state (NOT_SENT, STALE, SYNCED, NACKED, BLOCKED, DROPPED); states with none are left out",
    );
    for r in &rows {
        let mut by_state: BTreeMap<&str, usize> = BTreeMap::new();
        for c in r.collections.values() {
            *by_state.entry(c.state.as_str()).or_default() += 1;
        }
        for (state, n) in by_state {
            text.sample(
                "meshhub_cluster_collections",
                &[("cluster", &r.cluster), ("state", state)],
                n as f64,
            );
        }
    }
    text.family(
        "meshhub_cluster_last_ack_timestamp_seconds",
        "gauge",
        "when the cluster's agent last ACKed anything, Unix seconds (clusters that ACKed since this replica started)",
    );
    for r in &rows {
        let last = r
            .collections
            .values()
            .filter_map(|c| c.acked.as_ref())
            .map(|a| a.at.0)
            .max();
        if let Some(at) = last.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()) {
            text.sample(
                "meshhub_cluster_last_ack_timestamp_seconds",
                &[("cluster", &r.cluster)],
                at.as_secs_f64(),
            );
        }
    }
    write_rollout(&inputs.rollout.borrow(), text);
}

/// The rollout's clusters by state and where it stands in its waves (the
/// current or last rollout; nothing without a policy or before the first).
fn write_rollout(view: &View, text: &mut Text) {
    if !view.enabled {
        return;
    }
    text.single(
        "meshhub_rollout_standing_failures",
        "gauge",
        "clusters that refused a version and are left out of later rollouts until their content changes or an operator resumes them",
        view.standing.len() as f64,
    );
    let Some(r) = &view.rollout else { return };
    let mut by_state: BTreeMap<&str, usize> = ROLLOUT_STATES.iter().map(|s| (*s, 0)).collect();
    for t in r.targets.values() {
        *by_state.entry(t.state.name()).or_default() += 1;
    }
    text.family(
        "meshhub_rollout_clusters",
        "gauge",
        "clusters of the current (or last) rollout by state",
    );
    for (state, n) in by_state {
        text.sample("meshhub_rollout_clusters", &[("state", state)], n as f64);
    }
    text.single(
        "meshhub_rollout_id",
        "gauge",
        "the id of the current (or last) rollout",
        r.id as f64,
    );
    text.single(
        "meshhub_rollout_wave",
        "gauge",
        "the rollout's current wave, counted from 1",
        (r.wave + 1) as f64,
    );
    text.single(
        "meshhub_rollout_waves",
        "gauge",
        "the rollout's number of waves",
        r.waves.len() as f64,
    );
    text.single(
        "meshhub_rollout_wave_started_timestamp_seconds",
        "gauge",
        "when the current wave started, Unix seconds (its progress deadline counts from here)",
        r.wave_started as f64 / 1000.0,
    );
    text.single(
        "meshhub_rollout_progress_deadline_seconds",
        "gauge",
        "the policy's progress deadline per wave",
        r.deadline_ms as f64 / 1000.0,
    );
}

#[cfg(test)]
mod tests;

//! The `meshhub/v1alpha1/clusterstatus` report, built from what the
//! agent's parts publish (pure: inputs in, message out).

use meshhub_mcp::ledger::{PeerStatus, Role, SyncState};
use meshhub_proto::upward::{
    AppliedCollection, ClusterStatus, ConsumerCollection, HeldCollection, IstiodView,
    LocalConsumer, ObjectProblem,
};

use crate::apply::ApplyStatus;
use crate::store::StoreStatus;

/// Everything a report is built from.
#[derive(Debug)]
pub struct Inputs<'a> {
    /// The cluster.
    pub cluster: &'a str,
    /// The store.
    pub store: &'a StoreStatus,
    /// The applier, when on.
    pub apply: Option<&'a ApplyStatus>,
    /// The agent's ledger (its local consumers are the `source` rows).
    pub ledger: &'a [PeerStatus],
    /// istiod's view, when an address is configured.
    pub istiod: Option<&'a IstiodView>,
}

/// The state's name as the ledger shows it.
pub fn state_name(s: SyncState) -> &'static str {
    match s {
        SyncState::NotSent => "NOT_SENT",
        SyncState::Stale => "STALE",
        SyncState::Synced => "SYNCED",
        SyncState::Nacked => "NACKED",
        SyncState::Blocked => "BLOCKED",
        SyncState::Dropped => "DROPPED",
    }
}

/// The report (its `observed` time unset: the caller stamps it, so that
/// equal content compares equal).
pub fn build(i: &Inputs<'_>) -> ClusterStatus {
    let collections = i
        .store
        .collections
        .iter()
        .map(|(name, c)| HeldCollection {
            collection: name.clone(),
            hub_version: c.version.clone(),
            served_version: c.served_version.clone(),
            resources: u32::try_from(c.resources).unwrap_or(u32::MAX),
            refused: c
                .refused
                .as_ref()
                .map(|r| format!("{}: {}", r.version, r.message))
                .unwrap_or_default(),
            acked_version: c.acked_version.clone(),
            refused_version: c
                .refused
                .as_ref()
                .map(|r| r.version.clone())
                .unwrap_or_default(),
        })
        .collect();
    // Local consumers that are connected now (a gone one is history, and
    // would make every report differ).
    let consumers = i
        .ledger
        .iter()
        .filter(|p| p.role == Role::Source && p.connected)
        .map(|p| LocalConsumer {
            peer: p.peer.clone(),
            node_id: p.node_id.clone(),
            protocol: p.protocol.clone(),
            connected: p.connected,
            collections: p
                .collections
                .iter()
                .map(|(name, c)| ConsumerCollection {
                    collection: name.clone(),
                    acked_version: c
                        .acked
                        .as_ref()
                        .map(|a| a.version.clone())
                        .unwrap_or_default(),
                    state: state_name(c.state).to_owned(),
                    nack_message: c
                        .nacked
                        .as_ref()
                        .filter(|_| c.state == SyncState::Nacked)
                        .map(|n| n.message.clone())
                        .unwrap_or_default(),
                })
                .collect(),
        })
        .collect();
    let applied = i
        .apply
        .map(|a| {
            a.collections
                .iter()
                .map(|(name, c)| AppliedCollection {
                    collection: name.clone(),
                    desired: u32::try_from(c.desired).unwrap_or(u32::MAX),
                    ok: c.failures.is_empty() && c.synced_at.is_some(),
                    failures: c
                        .failures
                        .iter()
                        .map(|f| ObjectProblem {
                            collection: name.clone(),
                            name: object_of(f),
                            version: String::new(),
                            reason: f.clone(),
                        })
                        .collect(),
                })
                .collect()
        })
        .unwrap_or_default();
    ClusterStatus {
        cluster: i.cluster.to_owned(),
        observed: None,
        collections,
        consumers,
        applied,
        istiod: i.istiod.cloned(),
        // Filled in with the exports they are published with.
        exports_state: None,
    }
}

/// The `namespace/name` an applier failure line names (`Kind ns/name: …`).
fn object_of(line: &str) -> String {
    line.split_once(": ")
        .and_then(|(head, _)| head.split_once(' '))
        .map(|(_, name)| name.to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applier_lines_name_their_object() {
        assert_eq!(
            object_of("VirtualService bookinfo/x: the server refused"),
            "bookinfo/x"
        );
        assert_eq!(object_of("no object here"), "");
    }

    #[test]
    fn an_empty_agent_reports_its_cluster() {
        let store = StoreStatus::default();
        let r = build(&Inputs {
            cluster: "east",
            store: &store,
            apply: None,
            ledger: &[],
            istiod: None,
        });
        assert_eq!(r.cluster, "east");
        assert!(r.collections.is_empty() && r.istiod.is_none());
    }
}

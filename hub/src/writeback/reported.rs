//! Deliveries heard through the agents' reports. With sharded dial-out the
//! replica writing statuses does not dial every cluster: for a cluster it
//! has no live stream to, what the cluster's agent reports up — the hub
//! version it last ACKed, the one it last refused — stands for the ledger.

use std::collections::BTreeMap;
use std::time::SystemTime;

use meshhub_api::status::RemoteView;
use meshhub_api::upward::HeldView;
use meshhub_mcp::ledger::{At, CollectionStatus, Rejection, SyncState, Versioned};

use crate::clusters::mark_dropped;

/// Replaces the deliveries of every cluster of `remotes` this replica does
/// not dial (no live stream) but hears a live report from with what the
/// report says, against `current(cluster, collection)`: the version of
/// the collection the cluster is served now.
pub fn fill_from_reports(
    remotes: &mut [RemoteView],
    current: impl Fn(&str, &str) -> Option<String>,
) {
    for r in remotes.iter_mut() {
        let Some(report) = r
            .report
            .as_ref()
            .filter(|rep| rep.connected && !r.connected)
        else {
            continue;
        };
        // No time of its own: a report rebuilt with nothing changed must
        // not look like a new delivery (it would cost a pass over every
        // object).
        let at = At(SystemTime::UNIX_EPOCH);
        let mut collections: BTreeMap<String, CollectionStatus> = report
            .collections
            .iter()
            .map(|(c, held)| {
                let now = current(&r.cluster, c);
                (c.clone(), delivery(held, now.as_deref(), at))
            })
            .collect();
        r.dropped = mark_dropped(&mut collections, report);
        r.collections = collections;
    }
}

/// One collection's delivery as its agent reports it: ACKed up to
/// `acked_version`; NACKed when the version refused is the one served
/// now (`current`) and not the one ACKed.
fn delivery(held: &HeldView, current: Option<&str>, at: At) -> CollectionStatus {
    let acked = (!held.acked_version.is_empty()).then(|| Versioned {
        version: held.acked_version.clone(),
        nonce: String::new(),
        at,
    });
    let refused_now = !held.refused_version.is_empty()
        && held.refused_version != held.acked_version
        && current == Some(held.refused_version.as_str());
    let nacked = refused_now.then(|| Rejection {
        version: held.refused_version.clone(),
        code: 0,
        message: held.refusal.clone(),
        at,
    });
    let state = if refused_now {
        SyncState::Nacked
    } else if acked.is_some() {
        SyncState::Synced
    } else {
        SyncState::NotSent
    };
    CollectionStatus {
        acked,
        nacked,
        state,
        ..CollectionStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use meshhub_api::upward::ClusterReportView;

    use super::*;
    use crate::writeback::desired::tests::remote;

    const VS: &str = "networking.istio.io/v1/VirtualService";

    fn reporting(acked: &str, refused: &str, dialed_here: bool) -> RemoteView {
        let held = HeldView {
            hub_version: acked.into(),
            acked_version: acked.into(),
            refused_version: refused.into(),
            refused: if refused.is_empty() {
                String::new()
            } else {
                format!("{refused}: bad route")
            },
            refusal: if refused.is_empty() {
                String::new()
            } else {
                "bad route".into()
            },
            ..HeldView::default()
        };
        RemoteView {
            connected: dialed_here,
            report: Some(ClusterReportView {
                connected: true,
                collections: BTreeMap::from([(VS.to_owned(), held)]),
                ..ClusterReportView::default()
            }),
            ..remote(None)
        }
    }

    fn filled(mut r: RemoteView, current: &str) -> CollectionStatus {
        fill_from_reports(std::slice::from_mut(&mut r), |_, _| {
            Some(current.to_owned())
        });
        r.collections.get(VS).cloned().unwrap_or_default()
    }

    #[test]
    fn a_report_stands_for_the_ledger_of_a_cluster_dialed_elsewhere() {
        // ACKed the version served now.
        let s = filled(reporting("v2", "", false), "v2");
        assert_eq!(s.state, SyncState::Synced);
        assert_eq!(s.acked.map(|a| a.version).as_deref(), Some("v2"));

        // Refused the version served now, still ACKs the previous one.
        let s = filled(reporting("v1", "v2", false), "v2");
        assert_eq!(s.state, SyncState::Nacked);
        let n = s.nacked.expect("the refusal");
        assert_eq!(
            (n.version.as_str(), n.message.as_str()),
            ("v2", "bad route")
        );

        // An old refusal, the current version ACKed since: synced.
        let s = filled(reporting("v3", "v2", false), "v3");
        assert_eq!(s.state, SyncState::Synced);
        assert!(s.nacked.is_none());

        // Nothing ACKed yet.
        let s = filled(reporting("", "", false), "v1");
        assert_eq!(s.state, SyncState::NotSent);
    }

    #[test]
    fn a_cluster_dialed_here_or_without_a_live_report_keeps_its_ledger() {
        // Dialed here: the ledger (empty in this view) is kept.
        let r = filled(reporting("v2", "", true), "v2");
        assert_eq!(r, CollectionStatus::default());
        // The report's stream is down: it says nothing current.
        let mut down = reporting("v2", "", false);
        down.report.as_mut().unwrap().connected = false;
        assert_eq!(filled(down, "v2"), CollectionStatus::default());
    }
}

//! What the statuses were worked out from. The writer keeps the last
//! [`Basis`] and works the statuses out again only when the new one differs
//! or the source saw an object since: at rest (every object ACKed, nothing
//! changing) a wake-up costs a look at each cluster, not a pass over every
//! object.

use std::collections::BTreeMap;
use std::sync::Arc;

use meshhub_api::status::RemoteView;
use meshhub_api::upward::{GatewayApiStatusView, ObjectProblemView};
use meshhub_mcp::ledger::CollectionStatus;
use meshhub_mcp::snapshot::Snapshot;

use crate::pipeline::Status;

/// The inputs of every object's status: the pipeline's status (served and
/// rejected objects, analysis), and per remote cluster its snapshot, its
/// collections' delivery and what its istiod dropped. Other parts of a
/// cluster's view (connection times, consumers, report timestamps) do not
/// enter a status and are left out, so they wake nothing.
#[derive(Debug)]
pub struct Basis {
    status: Arc<Status>,
    clusters: Vec<ClusterBasis>,
}

#[derive(Debug)]
struct ClusterBasis {
    cluster: String,
    snapshot: Option<Arc<Snapshot>>,
    collections: BTreeMap<String, CollectionStatus>,
    dropped: BTreeMap<String, Vec<ObjectProblemView>>,
    /// What its Gateway API controllers wrote (by pointer: replaced, never
    /// changed in place).
    gateway: Option<Arc<GatewayApiStatusView>>,
}

impl Basis {
    /// The basis of `status` served to `remotes`, whose groups are served
    /// `snapshot(cluster)` and whose Gateway API controllers wrote
    /// `gateway(cluster)`.
    pub fn of<'a>(
        status: &Arc<Status>,
        remotes: impl IntoIterator<Item = &'a RemoteView>,
        snapshot: impl Fn(&str) -> Option<Arc<Snapshot>>,
        gateway: impl Fn(&str) -> Option<Arc<GatewayApiStatusView>>,
    ) -> Self {
        Self {
            status: status.clone(),
            clusters: remotes
                .into_iter()
                .map(|r| ClusterBasis {
                    cluster: r.cluster.clone(),
                    snapshot: snapshot(&r.cluster),
                    collections: r.collections.clone(),
                    dropped: r.dropped.clone(),
                    gateway: gateway(&r.cluster),
                })
                .collect(),
        }
    }
}

/// Snapshots and statuses are shared and replaced, never changed in place:
/// the same allocation is the same content (a new allocation with equal
/// content only costs one pass).
fn same<T>(a: &Option<Arc<T>>, b: &Option<Arc<T>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

impl PartialEq for Basis {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.status, &other.status) && self.clusters == other.clusters
    }
}

impl PartialEq for ClusterBasis {
    fn eq(&self, other: &Self) -> bool {
        self.cluster == other.cluster
            && same(&self.snapshot, &other.snapshot)
            && self.collections == other.collections
            && self.dropped == other.dropped
            && same(&self.gateway, &other.gateway)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writeback::desired::tests::{acked, remote};

    fn cluster(name: &str, acked_version: &str) -> RemoteView {
        RemoteView {
            cluster: name.into(),
            ..remote(Some(acked(acked_version)))
        }
    }

    #[test]
    fn only_what_enters_a_status_makes_a_new_basis() {
        let status = Arc::new(Status::default());
        let snapshot = Arc::new(Snapshot::default());
        let of = |status: &Arc<Status>, remotes: &[RemoteView], snapshot: &Arc<Snapshot>| {
            Basis::of(status, remotes, |_| Some(snapshot.clone()), |_| None)
        };
        let east = cluster("east", "v1");
        let before = of(&status, std::slice::from_ref(&east), &snapshot);
        assert_eq!(before, of(&status, std::slice::from_ref(&east), &snapshot));

        // Connection details and counters outside the collections: same.
        let mut reconnected = east.clone();
        reconnected.streams = 2;
        reconnected.last_error = Some("reset".into());
        assert_eq!(before, of(&status, &[reconnected], &snapshot));

        // An ACK of another version, a drop, a new snapshot, a new
        // pipeline status, another cluster: a new basis.
        assert_ne!(before, of(&status, &[cluster("east", "v2")], &snapshot));
        let mut dropped = east.clone();
        dropped.dropped.insert(
            "networking.istio.io/v1/VirtualService".into(),
            vec![ObjectProblemView::default()],
        );
        assert_ne!(before, of(&status, &[dropped], &snapshot));
        assert_ne!(
            before,
            of(
                &status,
                std::slice::from_ref(&east),
                &Arc::new(Snapshot::default())
            )
        );
        assert_ne!(
            before,
            of(
                &Arc::new(Status::default()),
                std::slice::from_ref(&east),
                &snapshot
            )
        );
        assert_ne!(
            before,
            of(&status, &[east.clone(), cluster("west", "v1")], &snapshot)
        );
        assert_ne!(
            before,
            Basis::of(&status, std::slice::from_ref(&east), |_| None, |_| None)
        );
        // What a cluster's Gateway API controllers wrote: by allocation.
        let gw = Arc::new(GatewayApiStatusView::default());
        let with = |g: &Arc<GatewayApiStatusView>| {
            Basis::of(
                &status,
                std::slice::from_ref(&east),
                |_| Some(snapshot.clone()),
                |_| Some(g.clone()),
            )
        };
        assert_eq!(with(&gw), with(&gw));
        assert_ne!(with(&gw), with(&Arc::new(GatewayApiStatusView::default())));
        assert_ne!(before, with(&gw));
    }
}

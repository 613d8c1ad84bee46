//! What the writer keeps of the clusters' reports: per cluster, only what
//! enters a status — what its agent holds and refused per collection, and
//! what its istiod dropped — rebuilt only for a cluster whose report
//! changed (a pointer comparison per unchanged cluster; each pass still
//! copies every cluster's small view into its row); the parts of a report
//! that do not enter a status (its exports, consumers, applier results, Istio
//! runtime) are never copied, and the exports' conflicts (a fleet-wide
//! aggregation `/status` shows) are never worked out here (issue 38).

use std::collections::BTreeMap;
use std::sync::Arc;

use meshhub_api::upward::{ClusterReportView, GatewayApiStatusView, IstiodView};

use crate::upward::{ClusterReport, Reports};

/// The reports as the writer reads them.
#[derive(Debug, Default)]
pub struct Heard {
    /// The report each view was made from (compared by pointer: the report
    /// task replaces a cluster's entry when it changes, never edits it).
    from: BTreeMap<String, Arc<ClusterReport>>,
    views: BTreeMap<String, ClusterReportView>,
    /// What each cluster's controllers wrote of the Gateway API objects
    /// its agent applied (the same allocation while it does not change).
    gateway: BTreeMap<String, Arc<GatewayApiStatusView>>,
}

impl Heard {
    /// Brings the views up to `reports`; how many were rebuilt.
    pub fn update(&mut self, reports: &Reports) -> usize {
        self.from.retain(|cluster, _| reports.contains_key(cluster));
        self.views
            .retain(|cluster, _| reports.contains_key(cluster));
        self.gateway
            .retain(|cluster, _| reports.contains_key(cluster));
        let mut rebuilt = 0;
        for (cluster, report) in reports.iter() {
            if self
                .from
                .get(cluster)
                .is_some_and(|was| Arc::ptr_eq(was, report))
            {
                continue;
            }
            self.views.insert(cluster.clone(), status_part(report));
            match &report.view.gateway_api_status {
                None => {
                    self.gateway.remove(cluster);
                }
                Some(g) if self.gateway.get(cluster).is_some_and(|was| **was == *g) => {}
                Some(g) => {
                    self.gateway.insert(cluster.clone(), Arc::new(g.clone()));
                }
            }
            self.from.insert(cluster.clone(), report.clone());
            rebuilt += 1;
        }
        rebuilt
    }

    /// Per cluster, its report's part that enters a status.
    pub fn views(&self) -> &BTreeMap<String, ClusterReportView> {
        &self.views
    }

    /// What `cluster`'s Gateway API controllers wrote (none: its agent
    /// tells none).
    pub fn gateway(&self, cluster: &str) -> Option<&GatewayApiStatusView> {
        self.gateway.get(cluster).map(|g| &**g)
    }

    /// The same, shared: a new allocation only when it changed.
    pub fn gateway_shared(&self, cluster: &str) -> Option<Arc<GatewayApiStatusView>> {
        self.gateway.get(cluster).cloned()
    }
}

/// The part of `report` that enters a status.
fn status_part(report: &ClusterReport) -> ClusterReportView {
    let v = &report.view;
    ClusterReportView {
        unserved: v.unserved,
        observed: v.observed,
        collections: v.collections.clone(),
        istiod: v.istiod.as_ref().map(|i| IstiodView {
            reachable: i.reachable,
            dropped: i.dropped.clone(),
            ..IstiodView::default()
        }),
        ..ClusterReportView::default()
    }
}

#[cfg(test)]
mod tests {
    use meshhub_api::upward::{ExportView, HeldView, ObjectProblemView};

    use super::*;

    fn report(acked: &str) -> Arc<ClusterReport> {
        let mut r = ClusterReport::default();
        r.view.collections.insert(
            "networking.istio.io/v1/VirtualService".into(),
            HeldView {
                acked_version: acked.into(),
                ..HeldView::default()
            },
        );
        r.view.istiod = Some(IstiodView {
            address: "istiod:15014".into(),
            reachable: true,
            held: 7,
            dropped: vec![ObjectProblemView {
                name: "shop/r".into(),
                ..ObjectProblemView::default()
            }],
            ..IstiodView::default()
        });
        r.view.exports = vec![ExportView::default(); 3];
        Arc::new(r)
    }

    #[test]
    fn only_the_clusters_whose_report_changed_are_rebuilt_with_what_enters_a_status() {
        let mut heard = Heard::default();
        let first: Reports = Arc::new(BTreeMap::from([
            ("east".to_owned(), report("v1")),
            ("west".to_owned(), report("v1")),
        ]));
        assert_eq!(heard.update(&first), 2);
        let east = &heard.views()["east"];
        assert_eq!(
            east.collections["networking.istio.io/v1/VirtualService"].acked_version,
            "v1"
        );
        let istiod = east.istiod.as_ref().unwrap();
        assert_eq!(istiod.dropped.len(), 1);
        assert!(istiod.reachable);
        // Not copied: what does not enter a status.
        assert!(east.exports.is_empty());
        assert!(istiod.address.is_empty());

        // The same reports again: nothing rebuilt.
        assert_eq!(heard.update(&first), 0);
        // West replaced, east the same allocation, a third cluster new.
        let mut next = (*first).clone();
        next.insert("west".into(), report("v2"));
        next.insert("north".into(), report("v1"));
        assert_eq!(heard.update(&Arc::new(next.clone())), 2);
        assert_eq!(
            heard.views()["west"].collections["networking.istio.io/v1/VirtualService"]
                .acked_version,
            "v2"
        );
        // What the controllers wrote is kept, one allocation while it
        // does not change.
        let mut with_gateway = ClusterReport::clone(&report("v2"));
        with_gateway.view.gateway_api_status = Some(GatewayApiStatusView::default());
        next.insert("west".into(), Arc::new(with_gateway.clone()));
        heard.update(&Arc::new(next.clone()));
        let first = heard.gateway_shared("west").unwrap();
        with_gateway.view.collections.clear();
        next.insert("west".into(), Arc::new(with_gateway));
        heard.update(&Arc::new(next.clone()));
        assert!(Arc::ptr_eq(&first, &heard.gateway_shared("west").unwrap()));
        assert!(heard.gateway("north").is_none());
        // A cluster gone from the reports is gone from the views.
        next.remove("east");
        assert_eq!(heard.update(&Arc::new(next)), 0);
        assert_eq!(heard.views().keys().collect::<Vec<_>>(), ["north", "west"]);
    }
}

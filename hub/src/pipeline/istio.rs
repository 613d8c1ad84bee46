//! What the pipeline reads of the clusters' upward reports: the Gateway
//! API CRDs each cluster has (which decide what it can take, [`carried`](super::carried)),
//! and what analysis reads of each cluster ([`ClusterFacts`]): the Istio
//! release it checks version skew (MH0002) against (the oldest istiod of
//! each cluster), its newest istiod's release and its Gateway API CRDs'
//! bundle versions (IST0176), its Services (IST0101 on route backends).
//! A cluster's facts changing analyses its group again although its
//! content did not change: an upgrade releases what was held back for it,
//! a downgrade (or a canary of an older revision) holds back what it
//! would cut.

use std::sync::Arc;

use meshhub_analyze::CrdBundle;
use meshhub_mcp::cache::Group;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::info;

use super::Pipeline;
use crate::analysis::ClusterFacts;
use crate::upward::{ClusterReport, Reports};

impl Pipeline {
    /// Analysis checks each cluster against the Istio release its agent
    /// reports (`reports`); without it every cluster's release is unknown.
    pub fn follow_istio(mut self, reports: watch::Receiver<Reports>) -> Self {
        self.istio = Some(reports);
        self
    }

    /// The reports changed (`ok`) or their owner ended (`!ok`: the last
    /// releases stay).
    pub(super) fn on_istio(&mut self, rx: &mut Option<watch::Receiver<Reports>>, ok: bool) {
        let Some(reports) = rx.as_mut().filter(|_| ok) else {
            *rx = None;
            return;
        };
        let reports = reports.borrow_and_update().clone();
        let carried = self.carried.update(&reports, self.store.kinds());
        self.recarried.extend(carried.iter().cloned());
        if !carried.is_empty() {
            info!(clusters = ?carried.iter().map(ToString::to_string).collect::<Vec<_>>(), "a cluster's Gateway API CRDs changed; placing again");
        }
        // Only the reports replaced since the last look (a report is
        // replaced, never changed in place): at 10,000 clusters a round of
        // reports must not make every cluster's facts again per report.
        let mut updates = Vec::new();
        for (cluster, r) in reports.iter() {
            if self
                .istio_read
                .get(cluster)
                .is_some_and(|seen| Arc::ptr_eq(seen, r))
            {
                continue;
            }
            self.istio_read.insert(cluster.clone(), r.clone());
            updates.push((Group::from(cluster.as_str()), Some(facts_of(r))));
        }
        let gone: Vec<String> = self
            .istio_read
            .keys()
            .filter(|c| !reports.contains_key(*c))
            .cloned()
            .collect();
        for cluster in gone {
            self.istio_read.remove(&cluster);
            updates.push((Group::from(cluster.as_str()), None));
        }
        let changed = self.analysis.update_clusters(updates);
        let reanalyse = !changed.is_empty() && self.analysis.enabled();
        if reanalyse {
            info!(clusters = ?changed.iter().map(ToString::to_string).collect::<Vec<_>>(), "a cluster's Istio release, Gateway API CRDs or Services changed; analysing again");
            self.reanalyse.extend(changed);
        }
        if (reanalyse || !carried.is_empty()) && self.generation > 0 {
            self.publish(Instant::now());
        }
    }
}

/// What analysis reads of one cluster's report.
fn facts_of(r: &ClusterReport) -> ClusterFacts {
    let istio = r.view.istio.as_ref();
    let crds = r
        .view
        .gateway_api
        .as_ref()
        .filter(|g| g.error.is_empty())
        .map(|g| {
            g.crds
                .iter()
                .map(|c| CrdBundle {
                    name: c.name.clone(),
                    bundle_version: c.bundle_version.clone(),
                })
                .collect::<Arc<[CrdBundle]>>()
        });
    ClusterFacts {
        release: istio.and_then(|i| i.oldest()),
        newest: istio.and_then(|i| i.newest()),
        gateway_api_crds: crds,
        services: r.services.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use meshhub_api::upward::{
        ClusterReportView, GatewayApiCrdView, GatewayApiCrdsView, IstioRuntimeView,
        IstiodInstanceView,
    };

    use super::*;

    /// What analysis reads of each reporting cluster.
    fn clusters(reports: &Reports) -> BTreeMap<Group, ClusterFacts> {
        reports
            .iter()
            .map(|(cluster, r)| (Group::from(cluster.as_str()), facts_of(r)))
            .collect()
    }

    fn istiod(version: &str) -> IstiodInstanceView {
        IstiodInstanceView {
            version: version.into(),
            ..IstiodInstanceView::default()
        }
    }

    #[test]
    fn analysis_reads_each_clusters_releases_crds_and_services() {
        let services = Arc::new(meshhub_analyze::Services::new(
            [("shop".to_owned(), "reviews".to_owned())],
            true,
        ));
        let east = ClusterReport {
            view: ClusterReportView {
                istio: Some(IstioRuntimeView {
                    istiods: vec![istiod("1.30.1"), istiod("1.28.3"), istiod("")],
                    ..IstioRuntimeView::default()
                }),
                gateway_api: Some(GatewayApiCrdsView {
                    crds: vec![GatewayApiCrdView {
                        name: "tlsroutes.gateway.networking.k8s.io".into(),
                        bundle_version: "v1.4.0".into(),
                        ..GatewayApiCrdView::default()
                    }],
                    error: String::new(),
                }),
                ..ClusterReportView::default()
            },
            services: Some(services.clone()),
            ..ClusterReport::default()
        };
        // A report whose CRDs could not be read says nothing of them.
        let mut west = east.clone();
        west.view.gateway_api.as_mut().unwrap().error = "forbidden".into();
        west.services = None;
        let reports: Reports = Arc::new(BTreeMap::from([
            ("east".to_owned(), Arc::new(east)),
            ("west".to_owned(), Arc::new(west)),
        ]));
        let facts = clusters(&reports);
        let e = &facts[&Group::from("east")];
        let v = |s: &str| meshhub_analyze::IstioVersion::parse(s).ok();
        // The oldest istiod for the skew check, the newest for the CRDs.
        assert_eq!((e.release, e.newest), (v("1.28.3"), v("1.30.1")));
        assert_eq!(
            e.gateway_api_crds
                .as_deref()
                .map(|c| c[0].bundle_version.as_str()),
            Some("v1.4.0")
        );
        assert!(Arc::ptr_eq(e.services.as_ref().unwrap(), &services));
        let w = &facts[&Group::from("west")];
        assert!(w.gateway_api_crds.is_none() && w.services.is_none());
        assert_eq!(clusters(&reports), facts, "the same reports, equal facts");
    }
}

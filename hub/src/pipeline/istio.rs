//! What the pipeline reads of the clusters' upward reports: the Gateway
//! API CRDs each cluster has (which decide what it can take, [`carried`](super::carried)),
//! and the Istio releases analysis checks version skew (MH0002)
//! against: the oldest istiod
//! of each cluster. A cluster's release changing analyses its group again
//! although its content did not change: an upgrade releases what was held
//! back for it, a downgrade (or a canary of an older revision) holds back
//! what it would cut.

use std::collections::BTreeMap;

use meshhub_analyze::IstioVersion;
use meshhub_mcp::cache::Group;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::info;

use super::Pipeline;
use crate::upward::Reports;

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
        if !carried.is_empty() {
            info!(clusters = ?carried.iter().map(ToString::to_string).collect::<Vec<_>>(), "a cluster's Gateway API CRDs changed; placing again");
        }
        let changed = self.analysis.set_releases(releases(&reports));
        let reanalyse = !changed.is_empty() && self.analysis.enabled();
        if reanalyse {
            info!(clusters = ?changed.iter().map(ToString::to_string).collect::<Vec<_>>(), "a cluster's Istio release changed; analysing again");
            self.reanalyse.extend(changed);
        }
        if (reanalyse || !carried.is_empty()) && self.generation > 0 {
            self.publish(Instant::now());
        }
    }
}

/// Each reporting cluster's oldest known Istio release (a cluster absent:
/// unknown).
pub fn releases(reports: &Reports) -> BTreeMap<Group, IstioVersion> {
    reports
        .iter()
        .filter_map(|(cluster, r)| {
            let oldest = r.view.istio.as_ref()?.oldest()?;
            Some((Group::from(cluster.as_str()), oldest))
        })
        .collect()
}

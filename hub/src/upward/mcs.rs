//! Services exported across clusters (KEP-1645), hub side: the exports
//! every cluster reports are aggregated per Service (`namespace/name`)
//! and turned into one Istio `ServiceEntry` per Service for the consuming
//! clusters, host `<name>.<namespace>.svc.clusterset.local`, its endpoints
//! the exporting clusters' gateways.
//!
//! MCS conflict rules, as the KEP words them: the oldest export wins.
//! Exports are ordered by when the hub first saw them (then cluster name;
//! not by the `created` an agent reports, which it could forge); ports are
//! merged by number, and a port whose name or protocol differs from the
//! one an older export gave that number is a conflict, as is a different
//! Service type. A conflicting export still contributes its gateways; the
//! conflict is shown with the export on `/status`.
//!
//! Delivery: the entry goes to every cluster with an agent except the
//! exporting cluster when it is the only exporter (it has the Service
//! itself), through the `meshhub.io/clusters` annotation. It is an object
//! of the source `serviceexports` (a unit per Service), so it flows
//! through validation, history, the ledger and the audit log like any
//! other; it carries `meshhub.io/generated-from` naming the exports.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use meshhub_mcp::ledger::Role;
use meshhub_proto::object::Object;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::contribution::Contribution;
use super::entry::{Aggregate, aggregate};
use super::state::Reports;
use crate::clusters::Agents;
use crate::source::{Entry, Origin, Source, SourceError, SourceEvent};

/// The source's name (on `/status`, in origins and the audit log).
pub const SOURCE_NAME: &str = "serviceexports";
/// How long the source waits, at start, for every agent's exports before
/// it reports itself synced (and the hub ready) without them: a restarted
/// hub then does not withdraw the generated objects from the clusters for
/// the moment its upward streams take to come up. An agent whose upward
/// stream failed (unreachable, or an agent without the channel) is not
/// waited for.
pub const SYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Every Service's aggregate, by `namespace/name`, from the exports each
/// cluster's judgement accepted.
pub fn aggregate_all(reports: &Reports, clusters: &[String]) -> BTreeMap<String, Aggregate> {
    let mut by: BTreeMap<(String, String), Vec<(&str, &Contribution)>> = BTreeMap::new();
    for (cluster, r) in reports.iter() {
        for c in r.accepted.iter() {
            by.entry((c.export.namespace.clone(), c.export.name.clone()))
                .or_default()
                .push((cluster.as_str(), c));
        }
    }
    by.into_iter()
        .map(|((ns, name), exports)| {
            let a = aggregate(&ns, &name, &exports, clusters);
            (format!("{ns}/{name}"), a)
        })
        .collect()
}

/// The source of generated ServiceEntries: follows the reports and the
/// configured agents, and sends a unit per Service whose object changed.
pub struct McsSource {
    reports: watch::Receiver<Reports>,
    agents: watch::Receiver<Agents>,
    ledger: meshhub_mcp::ledger::Ledger,
}

impl McsSource {
    /// A source over the reports and the agents; the upward streams are
    /// in `ledger`.
    pub fn new(
        reports: watch::Receiver<Reports>,
        agents: watch::Receiver<Agents>,
        ledger: meshhub_mcp::ledger::Ledger,
    ) -> Self {
        Self {
            reports,
            agents,
            ledger,
        }
    }
}

/// Whether every agent's exports arrived, or its upward stream failed
/// (`failed`: the upward peers whose stream failed).
fn initial_state_known(reports: &Reports, agents: &Agents, failed: &HashSet<String>) -> bool {
    agents.iter().all(|a| {
        reports.get(&a.cluster).is_some_and(|c| c.exports_received)
            || failed.contains(&super::peer_name(&a.cluster))
    })
}

impl Source for McsSource {
    fn name(&self) -> &str {
        SOURCE_NAME
    }

    fn run(
        self: Box<Self>,
        events: mpsc::Sender<SourceEvent>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), SourceError>> {
        let Self {
            mut reports,
            mut agents,
            ledger,
        } = *self;
        async move {
            let gone = || SourceError::PipelineGone(SOURCE_NAME.to_owned());
            let source: Arc<str> = SOURCE_NAME.into();
            // Every agent's exports first (at most SYNC_WAIT). The ledger
            // has no change signal: look again every 50 ms.
            let waited = tokio::time::timeout(SYNC_WAIT, async {
                loop {
                    let now = reports.borrow_and_update().clone();
                    if initial_state_known(&now, &agents.borrow(), &ledger.failed(Role::Sink)) {
                        return;
                    }
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        _ = reports.changed() => {}
                        () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
                    }
                }
            })
            .await;
            if waited.is_err() {
                tracing::warn!(
                    wait = ?SYNC_WAIT,
                    "not every agent reported its exported Services in time; ready without them"
                );
            }
            if shutdown.is_cancelled() {
                return Ok(());
            }
            let mut sent: BTreeMap<String, Object> = BTreeMap::new();
            let mut follow_agents = true;
            let mut sent_synced = false;
            // What the last aggregation read: a change of the reports that
            // leaves every cluster's accepted exports as they were (a
            // status, a drop, an ACK) aggregates nothing again.
            let mut read = Read::default();
            loop {
                let now = reports.borrow_and_update().clone();
                let clusters: Vec<String> = agents
                    .borrow_and_update()
                    .iter()
                    .map(|a| a.cluster.clone())
                    .collect();
                if read.replace(&now, clusters) || !sent_synced {
                    let objects: BTreeMap<String, Object> = aggregate_all(&now, &read.clusters)
                        .into_iter()
                        .filter_map(|(k, a)| a.object.map(|o| (k, o)))
                        .collect();
                    send_changes(&events, &source, &sent, &objects)
                        .await
                        .map_err(|()| gone())?;
                    metrics::gauge!("meshhub_mcs_service_entries").set(objects.len() as f64);
                    // The initial state, then Synced.
                    if !sent_synced {
                        events
                            .send(SourceEvent::Synced {
                                source: source.clone(),
                            })
                            .await
                            .map_err(|_| gone())?;
                        sent_synced = true;
                    }
                    sent = objects;
                }
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    r = reports.changed() => if r.is_err() { return Ok(()) },
                    // A gone sender (no reloader) keeps its last value.
                    r = agents.changed(), if follow_agents => follow_agents = r.is_ok(),
                }
            }
        }
        .boxed()
    }
}

/// What an aggregation read: the configured clusters and each cluster's
/// accepted exports (shared with the reports, compared by pointer).
#[derive(Default)]
struct Read {
    clusters: Vec<String>,
    accepted: Vec<(String, Arc<Vec<Contribution>>)>,
}

impl Read {
    /// Takes what `reports` and `clusters` hold now; whether it differs
    /// from what was read before (the exports of some cluster, or the
    /// clusters).
    fn replace(&mut self, reports: &Reports, clusters: Vec<String>) -> bool {
        let same_exports = self.accepted.len() == reports.len()
            && self
                .accepted
                .iter()
                .zip(reports.iter())
                .all(|((a, x), (b, r))| a == b && Arc::ptr_eq(x, &r.accepted));
        if same_exports && self.clusters == clusters {
            return false;
        }
        self.clusters = clusters;
        if !same_exports {
            self.accepted = reports
                .iter()
                .map(|(c, r)| (c.clone(), r.accepted.clone()))
                .collect();
        }
        true
    }
}

/// Sends a unit for each Service whose entry differs from what was `sent`,
/// and an empty one for each no longer generated. `Err`: the pipeline is
/// gone.
async fn send_changes(
    events: &mpsc::Sender<SourceEvent>,
    source: &Arc<str>,
    sent: &BTreeMap<String, Object>,
    objects: &BTreeMap<String, Object>,
) -> Result<(), ()> {
    for (key, obj) in objects {
        if sent.get(key) == Some(obj) {
            continue;
        }
        let unit: Arc<str> = format!("ServiceEntry/{key}").into();
        let entry = Entry {
            origin: Origin {
                source: source.clone(),
                unit: unit.clone(),
                document: 0,
                line: None,
            },
            parsed: Ok(obj.clone()),
            changed_by: Some("meshhub-mcs".into()),
        };
        events
            .send(SourceEvent::Unit {
                source: source.clone(),
                unit,
                entries: vec![entry],
            })
            .await
            .map_err(drop)?;
    }
    for key in sent.keys().filter(|k| !objects.contains_key(*k)) {
        events
            .send(SourceEvent::Unit {
                source: source.clone(),
                unit: format!("ServiceEntry/{key}").into(),
                entries: Vec::new(),
            })
            .await
            .map_err(drop)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::Read;
    use crate::upward::state::{ClusterReport, Reports};

    fn reports(of: &[(&str, Arc<ClusterReport>)]) -> Reports {
        Arc::new(
            of.iter()
                .map(|(c, r)| ((*c).to_owned(), r.clone()))
                .collect::<BTreeMap<_, _>>(),
        )
    }

    #[test]
    fn only_new_exports_or_clusters_are_aggregated_again() {
        let east = Arc::new(ClusterReport::default());
        let west = Arc::new(ClusterReport::default());
        let clusters = || vec!["east".to_owned(), "west".to_owned()];
        let mut read = Read::default();
        assert!(read.replace(
            &reports(&[("east", east.clone()), ("west", west.clone())]),
            clusters()
        ));
        // West's report replaced (a status, an ACK), its exports the same.
        let mut status_only = (*west).clone();
        status_only.view.unserved = true;
        let west2 = Arc::new(status_only);
        assert!(!read.replace(
            &reports(&[("east", east.clone()), ("west", west2.clone())]),
            clusters()
        ));
        // New exports.
        let mut exported = (*west2).clone();
        exported.accepted = Arc::new(Vec::new());
        let west3 = Arc::new(exported);
        assert!(read.replace(
            &reports(&[("east", east.clone()), ("west", west3.clone())]),
            clusters()
        ));
        // The configured clusters changed.
        assert!(read.replace(
            &reports(&[("east", east.clone()), ("west", west3.clone())]),
            vec!["east".to_owned()]
        ));
        // A cluster's report gone.
        assert!(read.replace(&reports(&[("east", east)]), vec!["east".to_owned()]));
    }
}

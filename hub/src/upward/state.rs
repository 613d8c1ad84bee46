//! What the clusters reported: one task owns it ([`run`]) and publishes
//! it as a `watch` of [`Reports`]; `/status`, the MCS source and the
//! metrics read that. A newly dropped (or again held) object is written
//! to the audit log.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use meshhub_api::upward::{
    AppliedView, ClusterReportView, ConsumerCollectionView, ExportView, HeldView, IstiodView,
    LocalConsumerView, ObjectProblemView,
};
use meshhub_mcp::ledger::At;
use meshhub_proto::upward::{ClusterStatus, ObjectProblem, ServiceExport};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Update;
use crate::audit::{AuditEvent, AuditLog};

/// One cluster's report and exports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterReport {
    /// The report as shown (its `connected`/`last_error` are filled in
    /// from the ledger when shown).
    pub view: ClusterReportView,
    /// The exports as received (the MCS generator reads them).
    pub exports: Vec<ServiceExport>,
    /// Whether the agent's exports were received since the hub started.
    pub exports_received: bool,
}

/// Every cluster's report, by cluster.
pub type Reports = Arc<BTreeMap<String, ClusterReport>>;

fn at(t: Option<&prost_types::Timestamp>) -> Option<At> {
    t.and_then(|t| SystemTime::try_from(*t).ok()).map(At)
}

fn problem(p: &ObjectProblem) -> ObjectProblemView {
    ObjectProblemView {
        collection: p.collection.clone(),
        name: p.name.clone(),
        version: p.version.clone(),
        reason: p.reason.clone(),
    }
}

/// The view of a report.
pub fn view_of(r: &ClusterStatus) -> ClusterReportView {
    ClusterReportView {
        connected: false,
        last_error: None,
        unserved: false,
        observed: at(r.observed.as_ref()),
        collections: r
            .collections
            .iter()
            .map(|c| {
                (
                    c.collection.clone(),
                    HeldView {
                        hub_version: c.hub_version.clone(),
                        served_version: c.served_version.clone(),
                        resources: c.resources,
                        refused: c.refused.clone(),
                        refused_version: c.refused_version.clone(),
                        acked_version: c.acked_version.clone(),
                    },
                )
            })
            .collect(),
        consumers: r
            .consumers
            .iter()
            .map(|c| LocalConsumerView {
                peer: c.peer.clone(),
                node_id: c.node_id.clone(),
                protocol: c.protocol.clone(),
                collections: c
                    .collections
                    .iter()
                    .map(|cc| {
                        (
                            cc.collection.clone(),
                            ConsumerCollectionView {
                                acked_version: cc.acked_version.clone(),
                                state: cc.state.clone(),
                                nack_message: cc.nack_message.clone(),
                            },
                        )
                    })
                    .collect(),
            })
            .collect(),
        applied: r
            .applied
            .iter()
            .map(|a| {
                (
                    a.collection.clone(),
                    AppliedView {
                        desired: a.desired,
                        ok: a.ok,
                        failures: a.failures.iter().map(problem).collect(),
                    },
                )
            })
            .collect(),
        istiod: r.istiod.as_ref().map(|i| IstiodView {
            address: i.address.clone(),
            reachable: i.reachable,
            error: i.error.clone(),
            checked: at(i.checked.as_ref()),
            held: i.held,
            dropped: i.dropped.iter().map(problem).collect(),
            collections: i.collections.clone(),
        }),
        exports: Vec::new(),
    }
}

/// The view of an export (its conflict is filled in by the generator).
pub fn export_view(e: &ServiceExport) -> ExportView {
    ExportView {
        namespace: e.namespace.clone(),
        name: e.name.clone(),
        r#type: e.r#type.clone(),
        ports: e
            .ports
            .iter()
            .map(|p| format!("{}:{}/{}", p.name, p.port, p.protocol))
            .collect(),
        gateways: e
            .gateways
            .iter()
            .map(|g| format!("{}:{}", g.address, g.port))
            .collect(),
        problem: e.problem.clone(),
        conflict: String::new(),
    }
}

type DropKey = (String, String, String);

fn dropped_set(v: &ClusterReportView) -> BTreeMap<(String, String), ObjectProblemView> {
    v.istiod
        .iter()
        .flat_map(|i| i.dropped.iter())
        .map(|d| ((d.collection.clone(), d.name.clone()), d.clone()))
        .collect()
}

/// Owns the reports until `shutdown` or until every subscriber is gone.
pub async fn run(
    mut rx: mpsc::Receiver<Update>,
    tx: watch::Sender<Reports>,
    audit: AuditLog,
    shutdown: CancellationToken,
) {
    let mut reports: BTreeMap<String, ClusterReport> = BTreeMap::new();
    let mut dropped: BTreeSet<DropKey> = BTreeSet::new();
    loop {
        let update = tokio::select! {
            () = shutdown.cancelled() => return,
            u = rx.recv() => match u { Some(u) => u, None => return },
        };
        match update {
            Update::Status { cluster, report } => {
                let entry = reports.entry(cluster.clone()).or_default();
                let old = dropped_set(&entry.view);
                let exports = std::mem::take(&mut entry.view.exports);
                entry.view = report.as_deref().map(view_of).unwrap_or_default();
                entry.view.exports = exports;
                let new = dropped_set(&entry.view);
                for ((collection, name), d) in &new {
                    if !old.contains_key(&(collection.clone(), name.clone())) {
                        warn!(%cluster, %collection, %name, version = %d.version, "the cluster's istiod dropped a served object");
                        audit.record(AuditEvent::IstiodDropped {
                            cluster: cluster.clone(),
                            collection: collection.clone(),
                            name: name.clone(),
                            version: d.version.clone(),
                            reason: d.reason.clone(),
                        });
                    }
                }
                for (collection, name) in old.keys() {
                    if !new.contains_key(&(collection.clone(), name.clone())) {
                        info!(%cluster, %collection, %name, "the cluster's istiod holds the object again (or it is no longer served)");
                        audit.record(AuditEvent::IstiodHeld {
                            cluster: cluster.clone(),
                            collection: collection.clone(),
                            name: name.clone(),
                        });
                    }
                }
                dropped.retain(|(c, _, _)| *c != cluster);
                dropped.extend(new.into_keys().map(|(col, n)| (cluster.clone(), col, n)));
                let count = reports[&cluster]
                    .view
                    .istiod
                    .as_ref()
                    .map_or(0, |i| i.dropped.len());
                metrics::gauge!("meshhub_cluster_istiod_dropped", "cluster" => cluster.clone())
                    .set(count as f64);
            }
            Update::Exports { cluster, exports } => {
                let entry = reports.entry(cluster.clone()).or_default();
                entry.view.exports = exports.iter().map(export_view).collect();
                entry.view.unserved = false;
                metrics::gauge!("meshhub_cluster_service_exports", "cluster" => cluster.clone())
                    .set(exports.len() as f64);
                entry.exports = exports;
                entry.exports_received = true;
            }
            Update::Unserved { cluster, unserved } => {
                // The last report (if any) stays, as for a cut stream.
                reports.entry(cluster).or_default().view.unserved = unserved;
            }
            Update::Gone { cluster } => {
                reports.remove(&cluster);
                dropped.retain(|(c, _, _)| *c != cluster);
                metrics::gauge!("meshhub_cluster_istiod_dropped", "cluster" => cluster.clone())
                    .set(0.0);
                metrics::gauge!("meshhub_cluster_service_exports", "cluster" => cluster).set(0.0);
            }
        }
        tx.send_replace(Arc::new(reports.clone()));
    }
}

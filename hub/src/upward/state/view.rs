//! The views of what a cluster reported, as `/status` shows them.

use std::collections::BTreeMap;
use std::time::SystemTime;

use meshhub_api::upward::{
    AppliedView, ClusterReportView, ConsumerCollectionView, ExportView, HeldView, IstioCrdView,
    IstioRuntimeView, IstiodInstanceView, IstiodView, LocalConsumerView, ObjectProblemView,
};
use meshhub_mcp::ledger::At;
use meshhub_proto::upward::{ClusterStatus, ObjectProblem, ServiceExport};

use crate::upward::judge::Judged;

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
        exports_state: None,
        istio: r.istio.as_ref().map(|i| IstioRuntimeView {
            // Oldest known release first: what the skew check reads is
            // never cut by the bound.
            istiods: {
                let mut all: Vec<_> = i.istiods.iter().collect();
                all.sort_by_key(|d| {
                    let v = meshhub_analyze::IstioVersion::parse(&d.version).ok();
                    (v.is_none(), v)
                });
                all
            }
            .into_iter()
            .take(MAX_ISTIODS)
            .map(|d| IstiodInstanceView {
                source: bounded(&d.source),
                name: bounded(&d.name),
                version: bounded(&d.version),
                revision: bounded(&d.revision),
                error: bounded(&d.error),
            })
            .collect(),
            crds: i
                .crds
                .iter()
                .take(MAX_CRDS)
                .map(|c| IstioCrdView {
                    name: bounded(&c.name),
                    kind: bounded(&c.kind),
                    served_versions: c
                        .served_versions
                        .iter()
                        .take(16)
                        .map(|v| bounded(v))
                        .collect(),
                    storage_version: bounded(&c.storage_version),
                    knows: bounded(&c.knows),
                })
                .collect(),
            crds_error: bounded(&i.crds_error),
        }),
    }
}

/// At most this many Istio CRDs of one cluster are kept.
const MAX_CRDS: usize = 64;

/// At most this many istiods of one cluster are kept (a report is input
/// from outside: bounded).
const MAX_ISTIODS: usize = 64;
/// At most this many bytes of one of their strings.
const MAX_FIELD: usize = 512;

fn bounded(s: &str) -> String {
    if s.len() <= MAX_FIELD {
        return s.to_owned();
    }
    let mut end = MAX_FIELD;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// The view of a judged export (its conflict is filled in by the
/// generator).
pub fn judged_view(j: &Judged) -> ExportView {
    ExportView {
        refused: j
            .refusal
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        first_seen: Some(At(j.contribution.first_seen.at)),
        ..export_view(&j.contribution.export)
    }
}

/// The view of an export (its conflict is filled in by the generator).
pub fn export_view(e: &ServiceExport) -> ExportView {
    ExportView {
        created: at(e.created.as_ref()),
        refused: String::new(),
        first_seen: None,
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

pub(super) fn dropped_set(v: &ClusterReportView) -> BTreeMap<(String, String), ObjectProblemView> {
    v.istiod
        .iter()
        .flat_map(|i| i.dropped.iter())
        .map(|d| ((d.collection.clone(), d.name.clone()), d.clone()))
        .collect()
}

//! The views of what a cluster reported, as `/status` shows them.

use std::collections::BTreeMap;
use std::time::SystemTime;

use meshhub_api::upward::{
    AppliedView, ClusterReportView, ConsumerCollectionView, ExportView, GatewayApiCrdView,
    GatewayApiCrdsView, HeldView, IstioCrdView, IstioRuntimeView, IstiodInstanceView, IstiodView,
    LocalConsumerView, ObjectProblemView,
};
use meshhub_mcp::ledger::At;
use meshhub_mcp::ledger::{StreamProtocol, SyncState};
use meshhub_proto::upward::{
    ClusterStatus, ConsumerCollection, ConsumerProtocol, ConsumerSyncState, HeldCollection,
    IstiodInstance, IstiodSource, LocalConsumer, ObjectProblem, ServiceExport,
};

use crate::upward::judge::Judged;

mod gateway_status;

pub use gateway_status::gateway_status_view;

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
                        refused: bounded_to(&c.refused, MAX_REASON),
                        refused_version: c.refused_version.clone(),
                        refusal: refusal(c),
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
                protocol: protocol(c),
                collections: c
                    .collections
                    .iter()
                    .map(|cc| {
                        (
                            cc.collection.clone(),
                            ConsumerCollectionView {
                                acked_version: cc.acked_version.clone(),
                                state: sync_state(cc),
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
        exports_refused: None,
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
                source: istiod_source(d),
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
                    served_versions: bounded_versions(&c.served_versions),
                    storage_version: bounded(&c.storage_version),
                    knows: bounded(&c.knows),
                })
                .collect(),
            crds_error: bounded(&i.crds_error),
        }),
        gateway_api: r.gateway_api.as_ref().map(|g| GatewayApiCrdsView {
            crds: g
                .crds
                .iter()
                .take(MAX_CRDS)
                .map(|c| GatewayApiCrdView {
                    name: bounded(&c.name),
                    group: bounded(&c.group),
                    kind: bounded(&c.kind),
                    served_versions: bounded_versions(&c.served_versions),
                    bundle_version: bounded(&c.bundle_version),
                    channel: bounded(&c.channel),
                })
                .collect(),
            error: bounded(&g.error),
        }),
        gateway_api_status: r.gateway_api_status.as_ref().map(gateway_status_view),
        // Filled in by the state, which keeps the names.
        services: None,
    }
}

/// At most this many Istio CRDs of one cluster are kept.
const MAX_CRDS: usize = 64;

/// At most this many istiods of one cluster are kept (a report is input
/// from outside: bounded).
const MAX_ISTIODS: usize = 64;
/// At most this many bytes of one of their strings.
const MAX_FIELD: usize = 512;
/// At most this many bytes of a refusal's reason (an API server's or a
/// webhook's message, shown in objects' status as the NACK's: long ones
/// are real).
const MAX_REASON: usize = 16 * 1024;

/// Why the agent refused a collection's last change: its `refusal`, or —
/// from an agent older than that field — its `refused` text without the
/// `<version>: ` it starts with (read once here: everything after this
/// reads the reason alone).
fn refusal(c: &HeldCollection) -> String {
    if !c.refusal.is_empty() || c.refused_version.is_empty() {
        return bounded_to(&c.refusal, MAX_REASON);
    }
    let legacy = c
        .refused
        .strip_prefix(c.refused_version.as_str())
        .and_then(|rest| rest.strip_prefix(": "))
        .unwrap_or(&c.refused);
    bounded_to(legacy, MAX_REASON)
}

/// A local consumer's protocol, from its typed field (an agent older than
/// it: its text).
fn protocol(c: &LocalConsumer) -> String {
    let known = match ConsumerProtocol::try_from(c.kind) {
        Ok(ConsumerProtocol::Mcp) => StreamProtocol::Mcp,
        Ok(ConsumerProtocol::Ads) => StreamProtocol::Ads,
        Ok(ConsumerProtocol::DeltaAds) => StreamProtocol::DeltaAds,
        Ok(ConsumerProtocol::Unspecified) | Err(_) => return bounded(&c.protocol),
    };
    known.as_str().to_owned()
}

/// A local consumer's collection state, from its typed field (an agent
/// older than it: its text).
fn sync_state(c: &ConsumerCollection) -> String {
    let known = match ConsumerSyncState::try_from(c.sync_state) {
        Ok(ConsumerSyncState::NotSent) => SyncState::NotSent,
        Ok(ConsumerSyncState::Stale) => SyncState::Stale,
        Ok(ConsumerSyncState::Synced) => SyncState::Synced,
        Ok(ConsumerSyncState::Nacked) => SyncState::Nacked,
        Ok(ConsumerSyncState::Blocked) => SyncState::Blocked,
        Ok(ConsumerSyncState::Dropped) => SyncState::Dropped,
        Ok(ConsumerSyncState::Unspecified) | Err(_) => return bounded(&c.state),
    };
    known.as_str().to_owned()
}

/// How the agent knows an istiod, from its typed field (an agent older
/// than it: its text).
fn istiod_source(d: &IstiodInstance) -> String {
    match IstiodSource::try_from(d.kind) {
        Ok(IstiodSource::Consumer) => "consumer".to_owned(),
        Ok(IstiodSource::VersionEndpoint) => "version-endpoint".to_owned(),
        Ok(IstiodSource::Unspecified) | Err(_) => bounded(&d.source),
    }
}

fn bounded(s: &str) -> String {
    bounded_to(s, MAX_FIELD)
}

/// A CRD's served versions as a report may carry them: at most 16, each
/// bounded.
fn bounded_versions(versions: &[String]) -> Vec<String> {
    versions.iter().take(16).map(|v| bounded(v)).collect()
}

fn bounded_to(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
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

#[cfg(test)]
mod tests {
    use super::*;
    use meshhub_proto::upward::IstioRuntime;

    /// A report as an agent of this version writes it (typed fields and
    /// their text), and as an older agent did (text only).
    fn reports() -> (ClusterStatus, ClusterStatus) {
        let typed = ClusterStatus {
            cluster: "east".into(),
            collections: vec![HeldCollection {
                collection: "istio/networking/v1/virtualservices".into(),
                refused: "v7: spec.http[0]: invalid".into(),
                refused_version: "v7".into(),
                refusal: "spec.http[0]: invalid".into(),
                ..HeldCollection::default()
            }],
            consumers: vec![LocalConsumer {
                peer: "10.0.0.1:1".into(),
                protocol: "delta-ads".into(),
                kind: ConsumerProtocol::DeltaAds.into(),
                connected: true,
                collections: vec![ConsumerCollection {
                    collection: "networking.istio.io/v1/VirtualService".into(),
                    state: "NACKED".into(),
                    sync_state: ConsumerSyncState::Nacked.into(),
                    ..ConsumerCollection::default()
                }],
                ..LocalConsumer::default()
            }],
            istio: Some(IstioRuntime {
                istiods: vec![IstiodInstance {
                    source: "version-endpoint".into(),
                    kind: IstiodSource::VersionEndpoint.into(),
                    name: "http://istiod:15014".into(),
                    ..IstiodInstance::default()
                }],
                ..IstioRuntime::default()
            }),
            ..ClusterStatus::default()
        };
        let mut legacy = typed.clone();
        legacy.collections[0].refusal.clear();
        legacy.consumers[0].kind = 0;
        legacy.consumers[0].collections[0].sync_state = 0;
        if let Some(i) = legacy.istio.as_mut() {
            i.istiods[0].kind = 0;
        }
        (typed, legacy)
    }

    #[test]
    fn typed_fields_and_an_older_agents_text_give_the_same_view() {
        let (typed, legacy) = reports();
        let view = view_of(&typed);
        assert_eq!(view, view_of(&legacy));
        let held = &view.collections["istio/networking/v1/virtualservices"];
        assert_eq!(held.refusal, "spec.http[0]: invalid");
        assert_eq!(held.refused_version, "v7");
        let consumer = &view.consumers[0];
        assert_eq!(consumer.protocol, "delta-ads");
        assert_eq!(
            consumer.collections["networking.istio.io/v1/VirtualService"].state,
            "NACKED"
        );
        let istiods = &view.istio.as_ref().unwrap().istiods;
        assert_eq!(istiods[0].source, "version-endpoint");
    }

    #[test]
    fn the_typed_field_wins_over_text_that_disagrees() {
        let (mut typed, _) = reports();
        // Text a hub must not parse: the reason is the typed field, whatever
        // the text says; the protocol and state are the enums'.
        typed.collections[0].refused = "something else entirely".into();
        typed.consumers[0].protocol = "ads-but-not-really".into();
        typed.consumers[0].collections[0].state = "SYNCED".into();
        let view = view_of(&typed);
        let held = &view.collections["istio/networking/v1/virtualservices"];
        assert_eq!(held.refusal, "spec.http[0]: invalid");
        assert_eq!(view.consumers[0].protocol, "delta-ads");
        assert_eq!(
            view.consumers[0].collections["networking.istio.io/v1/VirtualService"].state,
            "NACKED"
        );
    }

    #[test]
    fn an_unknown_enum_value_falls_back_to_the_text() {
        let (mut typed, _) = reports();
        typed.consumers[0].kind = 99;
        typed.consumers[0].protocol = "future-protocol".into();
        assert_eq!(view_of(&typed).consumers[0].protocol, "future-protocol");
    }
}

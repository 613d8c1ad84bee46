//! The `meshhub/v1alpha1/clusterstatus` report, built from what the
//! agent's parts publish (pure: inputs in, message out).

use meshhub_mcp::ledger::{PeerStatus, Role, StreamProtocol, SyncState};
use meshhub_proto::upward::{
    AppliedCollection, ClusterStatus, ConsumerCollection, ConsumerProtocol, ConsumerSyncState,
    GatewayApiCrds, GatewayApiStatus, HeldCollection, IstioRuntime, IstiodInstance, IstiodSource,
    IstiodView, LocalConsumer, ObjectProblem,
};

use crate::apply::{ApplyStatus, ObjectStatuses};
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
    /// What the cluster's controllers wrote of the applied Gateway API
    /// objects (apply on).
    pub object_statuses: Option<&'a ObjectStatuses>,
    /// The agent's ledger (its local consumers are the `source` rows).
    pub ledger: &'a [PeerStatus],
    /// istiod's view, when an address is configured.
    pub istiod: Option<&'a IstiodView>,
    /// istiod's release from its version endpoint, when configured.
    pub istiod_version: Option<&'a IstiodInstance>,
    /// The cluster's Istio CRDs (apply on), once read.
    pub crds: Option<&'a super::crds::Crds>,
}

/// [`IstiodInstance::source`] of an istiod that dialed in (the text of
/// [`IstiodSource::Consumer`], for hubs older than `kind`).
pub const SOURCE_CONSUMER: &str = "consumer";
/// [`IstiodInstance::source`] of the istiod whose `/version` is read.
pub const SOURCE_VERSION_ENDPOINT: &str = "version-endpoint";

/// A consumer's protocol as the report carries it.
fn consumer_protocol(p: StreamProtocol) -> ConsumerProtocol {
    match p {
        StreamProtocol::Mcp => ConsumerProtocol::Mcp,
        StreamProtocol::Ads => ConsumerProtocol::Ads,
        StreamProtocol::DeltaAds => ConsumerProtocol::DeltaAds,
        StreamProtocol::Unknown => ConsumerProtocol::Unspecified,
    }
}

/// A consumer's collection state as the report carries it.
fn sync_state(s: SyncState) -> ConsumerSyncState {
    match s {
        SyncState::NotSent => ConsumerSyncState::NotSent,
        SyncState::Stale => ConsumerSyncState::Stale,
        SyncState::Synced => ConsumerSyncState::Synced,
        SyncState::Nacked => ConsumerSyncState::Nacked,
        SyncState::Blocked => ConsumerSyncState::Blocked,
        SyncState::Dropped => ConsumerSyncState::Dropped,
    }
}

/// What Istio's xDS client announces as `ISTIO_VERSION` when it has no
/// release to say (istiod's configuration client always does): not a
/// release.
const PLACEHOLDER_VERSION: &str = "65536.65536.65536";

/// The istiods the agent sees: each connected ADS consumer (istiod's
/// `xds://` config source; its revision from `ISTIO_REVISION`, its release
/// from `ISTIO_VERSION` unless that is Istio's placeholder), then the one
/// whose version endpoint is read.
fn istio(
    ledger: &[PeerStatus],
    endpoint: Option<&IstiodInstance>,
    crds: Option<&super::crds::Crds>,
) -> IstioRuntime {
    let mut istiods: Vec<IstiodInstance> = ledger
        .iter()
        .filter(|p| p.role == Role::Source && p.connected && p.protocol.is_xds())
        .map(|p| {
            let meta = |k: &str| p.node_meta.get(k).cloned().unwrap_or_default();
            let version = meta("ISTIO_VERSION");
            IstiodInstance {
                source: SOURCE_CONSUMER.to_owned(),
                kind: IstiodSource::Consumer.into(),
                name: p.node_id.clone(),
                version: if version == PLACEHOLDER_VERSION {
                    String::new()
                } else {
                    version
                },
                revision: meta("ISTIO_REVISION"),
                error: String::new(),
            }
        })
        .collect();
    istiods.sort_by(|a, b| a.name.cmp(&b.name));
    istiods.dedup();
    istiods.extend(endpoint.cloned());
    let (crds, crds_error) = match crds {
        Some(Ok(c)) => (c.istio.clone(), String::new()),
        Some(Err(e)) => (Vec::new(), e.clone()),
        None => (Vec::new(), String::new()),
    };
    IstioRuntime {
        istiods,
        crds,
        crds_error,
    }
}

/// The cluster's Gateway API CRDs as reported, or why they could not be
/// read.
fn gateway_api(crds: &super::crds::Crds) -> GatewayApiCrds {
    match crds {
        Ok(c) => GatewayApiCrds {
            crds: c.gateway_api.clone(),
            error: String::new(),
        },
        Err(e) => GatewayApiCrds {
            crds: Vec::new(),
            error: e.clone(),
        },
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
            refusal: c
                .refused
                .as_ref()
                .map(|r| r.message.clone())
                .unwrap_or_default(),
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
            protocol: p.protocol.as_str().to_owned(),
            kind: consumer_protocol(p.protocol).into(),
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
                    state: c.state.as_str().to_owned(),
                    sync_state: sync_state(c.state).into(),
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
        istio: Some(istio(i.ledger, i.istiod_version, i.crds)),
        gateway_api: i.crds.map(gateway_api),
        gateway_api_status: i.object_statuses.map(gateway_api_status),
        // Filled in with the exports they are published with.
        exports_state: None,
        // Filled in by the report task from its own list.
        services: None,
    }
}

/// At most this many objects' statuses are reported (the rest counted in
/// `omitted`; also bounded in bytes: [`STATUS_BYTES_REPORTED`]).
pub const STATUS_OBJECTS_REPORTED: usize = 5_000;

/// At most this many encoded bytes of objects' statuses per report (the
/// rest counted in `omitted`): with the other parts of a report, well
/// below the hubs' message limit.
pub const STATUS_BYTES_REPORTED: usize = 4 * 1024 * 1024;

fn gateway_api_status(held: &ObjectStatuses) -> GatewayApiStatus {
    let mut objects = Vec::new();
    let mut bytes = 0;
    for o in held.values() {
        let len = prost::Message::encoded_len(o);
        if objects.len() == STATUS_OBJECTS_REPORTED || bytes + len > STATUS_BYTES_REPORTED {
            break;
        }
        bytes += len;
        objects.push(o.clone());
    }
    GatewayApiStatus {
        omitted: u32::try_from(held.len() - objects.len()).unwrap_or(u32::MAX),
        objects,
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

    /// A connected local consumer `id` announcing Istio `version`.
    fn consumer(id: &str, version: &str, protocol: StreamProtocol) -> PeerStatus {
        PeerStatus {
            id: 1,
            role: Role::Source,
            protocol,
            peer: "127.0.0.1:1".to_owned(),
            node_id: id.to_owned(),
            group: "east".to_owned(),
            connected: true,
            connected_since: None,
            disconnected_at: None,
            last_error: None,
            streams: 1,
            collections: Default::default(),
            replica: None,
            node_meta: [
                ("ISTIO_VERSION".to_owned(), version.to_owned()),
                ("ISTIO_REVISION".to_owned(), "canary".to_owned()),
            ]
            .into(),
        }
    }

    #[test]
    fn istiods_are_named_with_their_release_and_revision() {
        let ledger = [
            consumer("istiod-b", PLACEHOLDER_VERSION, StreamProtocol::Ads),
            consumer("istiod-a", "1.28.3", StreamProtocol::DeltaAds),
            consumer("mcp-client", "1.5.0", StreamProtocol::Mcp),
        ];
        let endpoint = IstiodInstance {
            source: SOURCE_VERSION_ENDPOINT.to_owned(),
            kind: IstiodSource::VersionEndpoint.into(),
            name: "http://istiod:15014".to_owned(),
            version: "1.28.3".to_owned(),
            ..Default::default()
        };
        let got = istio(&ledger, Some(&endpoint), None).istiods;
        let rows: Vec<(IstiodSource, &str, &str, &str, &str)> = got
            .iter()
            .map(|i| {
                (
                    i.kind(),
                    i.source.as_str(),
                    i.name.as_str(),
                    i.version.as_str(),
                    i.revision.as_str(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (
                    IstiodSource::Consumer,
                    "consumer",
                    "istiod-a",
                    "1.28.3",
                    "canary"
                ),
                (IstiodSource::Consumer, "consumer", "istiod-b", "", "canary"),
                (
                    IstiodSource::VersionEndpoint,
                    "version-endpoint",
                    "http://istiod:15014",
                    "1.28.3",
                    ""
                ),
            ]
        );
    }

    #[test]
    fn refusals_protocols_and_states_are_written_typed_and_as_text() {
        use crate::store::{CollectionInfo, Origin, Refusal};
        use meshhub_mcp::ledger::{At, CollectionStatus, Rejection};
        let at = At(std::time::SystemTime::UNIX_EPOCH);
        let mut store = StoreStatus::default();
        store.collections.insert(
            "istio/networking/v1/virtualservices".into(),
            CollectionInfo {
                version: "v7".into(),
                served_version: "s6".into(),
                resources: 1,
                bytes: 10,
                origin: Origin::Hub,
                updated_at: at,
                refused: Some(Refusal {
                    version: "v7".into(),
                    message: "spec.http[0]: invalid".into(),
                    at,
                }),
                acked_version: "v6".into(),
            },
        );
        let mut consumer = consumer("istiod", "1.28.3", StreamProtocol::DeltaAds);
        consumer.collections.insert(
            "networking.istio.io/v1/VirtualService".into(),
            CollectionStatus {
                state: SyncState::Nacked,
                nacked: Some(Rejection {
                    version: "s6".into(),
                    code: 3,
                    message: "bad".into(),
                    at,
                }),
                ..CollectionStatus::default()
            },
        );
        let r = build(&Inputs {
            cluster: "east",
            store: &store,
            apply: None,
            object_statuses: None,
            ledger: &[consumer],
            istiod: None,
            istiod_version: None,
            crds: None,
        });
        let held = &r.collections[0];
        assert_eq!(held.refused_version, "v7");
        assert_eq!(held.refusal, "spec.http[0]: invalid");
        assert_eq!(held.refused, "v7: spec.http[0]: invalid", "for older hubs");
        let c = &r.consumers[0];
        assert_eq!(c.kind(), ConsumerProtocol::DeltaAds);
        assert_eq!(c.protocol, "delta-ads");
        let cc = &c.collections[0];
        assert_eq!(cc.sync_state(), ConsumerSyncState::Nacked);
        assert_eq!(cc.state, "NACKED");
        assert_eq!(cc.nack_message, "bad");
    }

    #[test]
    fn an_empty_agent_reports_its_cluster() {
        let store = StoreStatus::default();
        let r = build(&Inputs {
            cluster: "east",
            store: &store,
            apply: None,
            object_statuses: None,
            ledger: &[],
            istiod: None,
            istiod_version: None,
            crds: None,
        });
        assert_eq!(r.cluster, "east");
        assert!(r.collections.is_empty() && r.istiod.is_none());
    }
}

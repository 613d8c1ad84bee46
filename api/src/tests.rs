//! Round trips: each type serializes to exactly the JSON the hub answered
//! before these types existed (captured from the hub's own structs, field
//! order and enum spellings included), and reads back to the same value.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, UNIX_EPOCH};

use meshhub_mcp::ledger::{
    At, CollectionStatus, PeerStatus, Rejection, Role, SyncState, Versioned,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ErrorView;
use crate::analysis::*;
use crate::history::*;
use crate::logging::*;
use crate::object::*;
use crate::status::*;

/// `value` writes `json` and `json` reads as `value`.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(value: &T, json: &str) {
    assert_eq!(serde_json::to_string(value).unwrap(), json);
    assert_eq!(&serde_json::from_str::<T>(json).unwrap(), value);
}

fn at(ms: u64) -> At {
    At(UNIX_EPOCH + Duration::from_millis(ms))
}

fn origin() -> Origin {
    Origin {
        source: "files".into(),
        unit: "a.yaml".into(),
        document: 2,
        line: Some(7),
    }
}

fn peer(role: PeerRole, delivery: Delivery, state: SyncState) -> PeerDelivery {
    PeerDelivery {
        peer: "east".into(),
        role,
        protocol: meshhub_mcp::ledger::StreamProtocol::Mcp,
        node_id: "n1".into(),
        connected: true,
        delivery,
        state,
        sent: Some("v2".into()),
        acked: None,
        nacked: Some("v2".into()),
        message: Some("bad".into()),
    }
}

fn object() -> ObjectView {
    ObjectView {
        kind: "VirtualService".into(),
        api_version: "networking.istio.io/v1".into(),
        collection: "istio/networking/v1alpha3/virtualservices".into(),
        name: "bookinfo/reviews".into(),
        validation: Validation {
            result: ValidationResult::Accepted,
            messages: vec!["m".into()],
            warnings: vec!["w".into()],
        },
        definitions: vec![
            Definition {
                origin: Some(origin()),
                resource_version: Some("12".into()),
                state: DefinitionState::Served,
                reasons: vec![],
            },
            Definition {
                origin: Some(Origin {
                    line: None,
                    document: 0,
                    ..origin()
                }),
                resource_version: None,
                state: DefinitionState::Ignored,
                reasons: vec!["r".into()],
            },
            Definition {
                origin: None,
                resource_version: None,
                state: DefinitionState::Rejected,
                reasons: vec!["x".into()],
            },
        ],
        version: "abc".into(),
        clusters: vec![ClusterDelivery {
            cluster: "east".into(),
            collection_version: "cv".into(),
            in_snapshot: true,
            withheld: None,
            peers: vec![
                peer(PeerRole::Agent, Delivery::Acked, SyncState::Synced),
                peer(PeerRole::Consumer, Delivery::Nacked, SyncState::Nacked),
                peer(PeerRole::Consumer, Delivery::Sent, SyncState::Stale),
                peer(PeerRole::Agent, Delivery::Behind, SyncState::NotSent),
                peer(PeerRole::Agent, Delivery::Behind, SyncState::Blocked),
                peer(PeerRole::Agent, Delivery::Acked, SyncState::Dropped),
            ],
            reported: Some(crate::object::ReportedDelivery {
                delivered: true,
                applied: "-".into(),
                held_by_istiod: "DROPPED: absent".into(),
                accepted: None,
                controller_status: None,
            }),
        }],
        analysis: BTreeMap::new(),
    }
}

#[test]
fn debug_object() {
    round_trip(
        &object(),
        r#"{"kind":"VirtualService","api_version":"networking.istio.io/v1","collection":"istio/networking/v1alpha3/virtualservices","name":"bookinfo/reviews","validation":{"result":"accepted","messages":["m"],"warnings":["w"]},"definitions":[{"origin":{"source":"files","unit":"a.yaml","document":2,"line":7},"resource_version":"12","state":"served","reasons":[]},{"origin":{"source":"files","unit":"a.yaml","document":0,"line":null},"resource_version":null,"state":"ignored","reasons":["r"]},{"origin":null,"resource_version":null,"state":"rejected","reasons":["x"]}],"version":"abc","clusters":[{"cluster":"east","collection_version":"cv","in_snapshot":true,"peers":[{"peer":"east","role":"agent","protocol":"mcp","node_id":"n1","connected":true,"delivery":"ACKED","state":"SYNCED","sent":"v2","acked":null,"nacked":"v2","message":"bad"},{"peer":"east","role":"consumer","protocol":"mcp","node_id":"n1","connected":true,"delivery":"NACKED","state":"NACKED","sent":"v2","acked":null,"nacked":"v2","message":"bad"},{"peer":"east","role":"consumer","protocol":"mcp","node_id":"n1","connected":true,"delivery":"SENT","state":"STALE","sent":"v2","acked":null,"nacked":"v2","message":"bad"},{"peer":"east","role":"agent","protocol":"mcp","node_id":"n1","connected":true,"delivery":"BEHIND","state":"NOT_SENT","sent":"v2","acked":null,"nacked":"v2","message":"bad"},{"peer":"east","role":"agent","protocol":"mcp","node_id":"n1","connected":true,"delivery":"BEHIND","state":"BLOCKED","sent":"v2","acked":null,"nacked":"v2","message":"bad"},{"peer":"east","role":"agent","protocol":"mcp","node_id":"n1","connected":true,"delivery":"ACKED","state":"DROPPED","sent":"v2","acked":null,"nacked":"v2","message":"bad"}],"reported":{"delivered":true,"applied":"-","held_by_istiod":"DROPPED: absent"}}]}"#,
    );
    let rejected = ObjectView {
        validation: Validation {
            result: ValidationResult::Rejected,
            messages: vec![],
            warnings: vec![],
        },
        definitions: vec![],
        clusters: vec![],
        ..object()
    };
    round_trip(
        &rejected,
        r#"{"kind":"VirtualService","api_version":"networking.istio.io/v1","collection":"istio/networking/v1alpha3/virtualservices","name":"bookinfo/reviews","validation":{"result":"rejected","messages":[],"warnings":[]},"definitions":[],"version":"abc","clusters":[]}"#,
    );
    round_trip(
        &ErrorView {
            error: "unknown kind".into(),
        },
        r#"{"error":"unknown kind"}"#,
    );
}

/// The JSON string `v` serializes to.
fn wire<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn enum_names_are_the_wire_spellings() {
    for s in [
        DefinitionState::Served,
        DefinitionState::Ignored,
        DefinitionState::Rejected,
    ] {
        assert_eq!(wire(&s), s.as_str());
        assert_eq!(wire(&s), s.to_string());
    }
    for r in [PeerRole::Agent, PeerRole::Consumer] {
        assert_eq!(wire(&r), r.to_string());
    }
    for d in [
        Delivery::Acked,
        Delivery::Nacked,
        Delivery::Sent,
        Delivery::Behind,
    ] {
        assert_eq!(wire(&d), d.to_string());
    }
    for c in [ChangeKind::Added, ChangeKind::Removed, ChangeKind::Changed] {
        assert_eq!(wire(&c), c.to_string());
    }
    assert_eq!(format!("{:<8}|", ChangeKind::Added), "added   |");
}

fn collection_status() -> CollectionStatus {
    CollectionStatus {
        sent: Some(Versioned {
            version: "v2".into(),
            nonce: "n2".into(),
            at: at(1_700_000_000_123),
        }),
        acked: Some(Versioned {
            version: "v1".into(),
            nonce: "n1".into(),
            at: at(1_700_000_000_000),
        }),
        nacked: Some(Rejection {
            version: "v2".into(),
            code: 3,
            message: "no".into(),
            at: at(1_700_000_001_000),
        }),
        blocked: None,
        acks: 1,
        nacks: 2,
        stale: 0,
        state: SyncState::Nacked,
    }
}

const COLLECTION: &str = r#"{"sent":{"version":"v2","nonce":"n2","at":"2023-11-14T22:13:20.123Z"},"acked":{"version":"v1","nonce":"n1","at":"2023-11-14T22:13:20.000Z"},"nacked":{"version":"v2","code":3,"message":"no","at":"2023-11-14T22:13:21.000Z"},"blocked":null,"acks":1,"nacks":2,"stale":0,"state":"NACKED"}"#;

fn remote() -> RemoteView {
    RemoteView {
        cluster: "east".into(),
        address: "http://127.0.0.1:9911".into(),
        connected: false,
        connected_since: Some(at(1_700_000_000_000)),
        disconnected_at: Some(at(1_700_000_002_500)),
        last_error: Some("gone".into()),
        streams: 2,
        shard: Some(3),
        dialed_by: Some("hub-a".into()),
        collections: BTreeMap::from([("c".into(), collection_status())]),
        dropped: BTreeMap::new(),
        report: None,
    }
}

fn peer_status() -> PeerStatus {
    PeerStatus {
        id: 7,
        role: Role::Source,
        protocol: meshhub_mcp::ledger::StreamProtocol::DeltaAds,
        peer: "127.0.0.1:5555".into(),
        node_id: "sidecar~x".into(),
        group: "east".into(),
        connected: true,
        connected_since: Some(at(1_700_000_000_001)),
        disconnected_at: None,
        last_error: None,
        streams: 1,
        collections: BTreeMap::from([("c".into(), collection_status())]),
        replica: None,
        node_meta: Default::default(),
    }
}

fn pin_record() -> PinRecord {
    PinRecord {
        cluster: "east".into(),
        version: "0123abcd".into(),
        seq: 3,
        since: "2024-01-02T03:04:05Z".into(),
        since_unix_ms: 1704164645000,
        by: "alice".into(),
    }
}

const PIN_RECORD: &str = r#""cluster":"east","version":"0123abcd","seq":3,"since":"2024-01-02T03:04:05Z","sinceUnixMs":1704164645000,"by":"alice""#;

#[test]
fn status_sections() {
    round_trip(
        &GroupView {
            name: "east".into(),
            published: true,
            watches: 3,
            collections: BTreeMap::from([(
                "c".into(),
                CollectionView {
                    version: "v1".into(),
                    resources: 4,
                },
            )]),
        },
        r#"{"name":"east","published":true,"watches":3,"collections":{"c":{"version":"v1","resources":4}}}"#,
    );
    round_trip(
        &remote(),
        &format!(
            r#"{{"cluster":"east","address":"http://127.0.0.1:9911","connected":false,"connected_since":"2023-11-14T22:13:20.000Z","disconnected_at":"2023-11-14T22:13:22.500Z","last_error":"gone","streams":2,"shard":3,"dialed_by":"hub-a","collections":{{"c":{COLLECTION}}}}}"#
        ),
    );
    round_trip(
        &RemoteView {
            cluster: "west".into(),
            address: "a".into(),
            connected: false,
            connected_since: None,
            disconnected_at: None,
            last_error: None,
            streams: 0,
            shard: None,
            dialed_by: None,
            collections: BTreeMap::new(),
            dropped: BTreeMap::new(),
            report: None,
        },
        r#"{"cluster":"west","address":"a","connected":false,"connected_since":null,"disconnected_at":null,"last_error":null,"streams":0,"collections":{}}"#,
    );
    let peer = peer_status();
    round_trip(
        &peer,
        &format!(
            r#"{{"id":7,"role":"source","protocol":"delta-ads","peer":"127.0.0.1:5555","node_id":"sidecar~x","group":"east","connected":true,"connected_since":"2023-11-14T22:13:20.001Z","disconnected_at":null,"last_error":null,"streams":1,"collections":{{"c":{COLLECTION}}}}}"#
        ),
    );
    round_trip(
        &PeerStatus {
            replica: Some("hub-0".into()),
            role: Role::Sink,
            ..peer
        },
        &format!(
            r#"{{"id":7,"role":"sink","protocol":"delta-ads","peer":"127.0.0.1:5555","node_id":"sidecar~x","group":"east","connected":true,"connected_since":"2023-11-14T22:13:20.001Z","disconnected_at":null,"last_error":null,"streams":1,"collections":{{"c":{COLLECTION}}},"replica":"hub-0"}}"#
        ),
    );
}

/// The hub's own sections, as stand-ins.
#[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
struct Pipeline {
    ready: bool,
    generation: u64,
}

#[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
struct Section {
    x: u8,
}

type Full = StatusView<Pipeline, Section, Section, Section>;

fn status() -> Full {
    StatusView {
        pipeline: Pipeline {
            ready: true,
            generation: 4,
        },
        groups: vec![],
        config: Section { x: 1 },
        leader: Section { x: 2 },
        remotes: vec![remote()],
        consumers: vec![peer_status()],
        ledger: vec![],
        pins: vec![PinView {
            record: pin_record(),
            latest: None,
            behind: 0,
        }],
        unresolved_pins: vec![],
        grpc_tls: None,
        analysis: vec![cluster_analysis()],
        shards: vec![ShardView {
            shard: 3,
            holder: Some("hub-a".into()),
            clusters: 1,
        }],
        withheld: vec![crate::status::WithheldView {
            cluster: "west".into(),
            collection: "k8s/gateway.networking.k8s.io/v1/httproutes".into(),
            objects: 2,
            reason: "cluster west lacks the CRD httproutes.gateway.networking.k8s.io".into(),
        }],
    }
}

fn cluster_analysis() -> ClusterAnalysis {
    ClusterAnalysis {
        cluster: "west".into(),
        version: "bbbb".into(),
        messages: vec![std::sync::Arc::new(AnalysisMessage {
            code: "IST0101".into(),
            name: "ReferencedResourceNotFound".into(),
            level: Level::Error,
            origin: "VirtualService bookinfo/bookinfo".into(),
            path: "spec.gateways[0]".into(),
            message: "Referenced gateway not found: \"bookinfo-gateway\"".into(),
        })],
        held_back: Some(HeldBack {
            version: "bbbb".into(),
            since: "2024-01-02T03:04:05Z".into(),
            codes: vec!["IST0101".into()],
            serving: Some("aaaa".into()),
        }),
    }
}

#[test]
fn analysis_results_have_istioctls_field_names() {
    let a = cluster_analysis();
    round_trip(
        &a,
        r#"{"cluster":"west","version":"bbbb","messages":[{"code":"IST0101","name":"ReferencedResourceNotFound","level":"Error","origin":"VirtualService bookinfo/bookinfo","path":"spec.gateways[0]","message":"Referenced gateway not found: \"bookinfo-gateway\""}],"heldBack":{"version":"bbbb","since":"2024-01-02T03:04:05Z","codes":["IST0101"],"serving":"aaaa"}}"#,
    );
    assert_eq!(
        a.messages[0].to_string(),
        "Error [IST0101] VirtualService bookinfo/bookinfo spec.gateways[0]: Referenced gateway not found: \"bookinfo-gateway\""
    );
    assert_eq!((a.count(Level::Error), a.count(Level::Warning)), (1, 0));
}

#[test]
fn the_status_document_keeps_its_field_order_and_summaries_skip_the_hubs_sections() {
    let json = serde_json::to_string(&status()).unwrap();
    let keys: Vec<&str> = [
        "ready",
        "generation",
        "groups",
        "config",
        "leader",
        "remotes",
        "consumers",
        "ledger",
        "pins",
        "unresolved_pins",
        "grpc_tls",
        "analysis",
        "shards",
    ]
    .into_iter()
    .collect();
    let at = |k: &str| json.find(&format!("\"{k}\":")).unwrap();
    assert!(keys.windows(2).all(|w| at(w[0]) < at(w[1])), "{json}");
    assert!(json.starts_with(r#"{"ready":true,"generation":4,"groups":[],"config":{"x":1}"#));
    assert_eq!(&serde_json::from_str::<Full>(&json).unwrap(), &status());

    let summary: StatusSummary = serde_json::from_str(&json).unwrap();
    assert_eq!(summary.remotes, vec![remote()]);
    assert_eq!(summary.consumers, vec![peer_status()]);
    assert_eq!(summary.pins[0].record, pin_record());
    // A document without the lists (another process's `/status`) reads
    // as empty lists.
    let bare: StatusSummary = serde_json::from_str(r#"{"config":1,"leader":{}}"#).unwrap();
    assert!(bare.remotes.is_empty() && bare.groups.is_empty());
}

#[test]
fn history_routes() {
    let pinned = PinView {
        record: pin_record(),
        latest: Some("ffff".into()),
        behind: 2,
    };
    round_trip(&pin_record(), &format!("{{{PIN_RECORD}}}"));
    round_trip(
        &pinned,
        &format!(r#"{{{PIN_RECORD},"latest":"ffff","behind":2}}"#),
    );
    round_trip(
        &PinView {
            record: pin_record(),
            latest: None,
            behind: 0,
        },
        &format!(r#"{{{PIN_RECORD},"latest":null,"behind":0}}"#),
    );
    round_trip(
        &UnresolvedPin {
            record: pin_record(),
            reason: "no version".into(),
            serving: "the latest version".into(),
        },
        &format!(r#"{{{PIN_RECORD},"reason":"no version","serving":"the latest version"}}"#),
    );
    let origins = vec![
        ChangeOrigin {
            source: "files".into(),
            unit: "a.yaml".into(),
            objects: vec!["VirtualService bookinfo/a".into()],
            removed: true,
            unreadable: 2,
            resource_version: Some("5".into()),
            changed_by: Some("kubectl".into()),
        },
        ChangeOrigin {
            source: "k".into(),
            unit: "u".into(),
            objects: vec![],
            removed: false,
            unreadable: 0,
            resource_version: None,
            changed_by: None,
        },
    ];
    assert_eq!(
        origins[0].to_string(),
        "files:a.yaml (removed) (2 unreadable) rv=5 by kubectl"
    );
    assert_eq!(origins[1].to_string(), "k:u");
    round_trip(
        &HistoryView {
            cluster: "east".into(),
            versions: vec![VersionRow {
                seq: 1,
                id: "abcd".into(),
                time: "2024-01-02T03:04:05Z".into(),
                origins,
                more_origins: 1,
                resources: 3,
                counts: BTreeMap::from([("c".into(), 3)]),
                held_back: vec![],
            }],
            pinned: Some(pinned),
        },
        &format!(
            r#"{{"cluster":"east","versions":[{{"seq":1,"id":"abcd","time":"2024-01-02T03:04:05Z","origins":[{{"source":"files","unit":"a.yaml","objects":["VirtualService bookinfo/a"],"removed":true,"unreadable":2,"resourceVersion":"5","changedBy":"kubectl"}},{{"source":"k","unit":"u","objects":[]}}],"moreOrigins":1,"resources":3,"counts":{{"c":3}}}}],"pinned":{{{PIN_RECORD},"latest":"ffff","behind":2}}}}"#
        ),
    );
    round_trip(
        &DiffView {
            cluster: "east".into(),
            from: ("a".into(), 1),
            to: ("b".into(), 2),
            changes: vec![
                ObjectChange {
                    collection: "c".into(),
                    name: "ns/a".into(),
                    change: ChangeKind::Added,
                    diff: None,
                },
                ObjectChange {
                    collection: "c".into(),
                    name: "ns/b".into(),
                    change: ChangeKind::Removed,
                    diff: None,
                },
                ObjectChange {
                    collection: "c".into(),
                    name: "ns/c".into(),
                    change: ChangeKind::Changed,
                    diff: Some("--- a\n+++ b\n".into()),
                },
            ],
        },
        r#"{"cluster":"east","from":["a",1],"to":["b",2],"changes":[{"collection":"c","name":"ns/a","change":"added"},{"collection":"c","name":"ns/b","change":"removed"},{"collection":"c","name":"ns/c","change":"changed","diff":"--- a\n+++ b\n"}]}"#,
    );
    round_trip(
        &PinRequest {
            cluster: "east".into(),
            version: "#1".into(),
        },
        r##"{"cluster":"east","version":"#1"}"##,
    );
    round_trip(
        &UnpinRequest {
            cluster: "east".into(),
        },
        r#"{"cluster":"east"}"#,
    );
}

#[test]
fn log_levels() {
    round_trip(
        &LogLevels {
            filter: "info".into(),
        },
        r#"{"filter":"info"}"#,
    );
    round_trip(
        &LogChange {
            filter: Some("info".into()),
            modules: BTreeMap::new(),
        },
        r#"{"filter":"info"}"#,
    );
    round_trip(
        &LogChange {
            filter: None,
            modules: BTreeMap::from([("a::b".into(), "debug".into())]),
        },
        r#"{"modules":{"a::b":"debug"}}"#,
    );
}

#[test]
fn a_cluster_is_checked_against_its_oldest_istiod() {
    use crate::upward::{IstioRuntimeView, IstiodInstanceView};
    let istiod = |version: &str, revision: &str| IstiodInstanceView {
        source: "consumer".into(),
        name: format!("istiod-{revision}"),
        version: version.into(),
        revision: revision.into(),
        error: String::new(),
    };
    let v = IstioRuntimeView {
        istiods: vec![
            istiod("1.28.3", "default"),
            istiod("1.23.2", "canary"),
            istiod("", "other"),
        ],
        ..Default::default()
    };
    assert_eq!(v.oldest().unwrap().to_string(), "1.23.2");
    assert_eq!(v.summary(), "1.23.2 (canary), 1.28.3");
    let none = IstioRuntimeView {
        istiods: vec![istiod("", ""), istiod("65536.65536.65536", "")],
        ..Default::default()
    };
    assert_eq!(none.oldest(), None);
    assert_eq!(IstioRuntimeView::default().summary(), "unknown");
    // An older CRD lowers what the cluster is checked against.
    let mut with_crds = v.clone();
    with_crds.istiods.retain(|i| i.version == "1.28.3");
    with_crds.crds = vec![crate::upward::IstioCrdView {
        name: "destinationrules.networking.istio.io".into(),
        kind: "DestinationRule".into(),
        knows: "1.23".into(),
        ..Default::default()
    }];
    assert_eq!(with_crds.oldest().unwrap().to_string(), "1.23");
    assert_eq!(with_crds.summary(), "1.28.3; CRDs 1.23");
}

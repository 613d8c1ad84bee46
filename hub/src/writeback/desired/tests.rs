use std::sync::Arc;
use std::time::SystemTime;

use meshhub_api::analysis::{AnalysisMessage, Level};
use meshhub_api::upward::ObjectProblemView;
use meshhub_mcp::ledger::{At, CollectionStatus, Rejection, Versioned};
use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource};

use super::*;

const VS: &str = "istio/networking/v1alpha3/virtualservices";

/// A group's snapshot holding `objects` (name, version) in VS.
fn snapshot(objects: &[(&str, &str)]) -> Snapshot {
    let resources = objects
        .iter()
        .map(|(n, v)| EncodedResource {
            name: Arc::from(*n),
            version: Arc::from(*v),
            encoded: bytes::Bytes::new(),
        })
        .collect();
    Snapshot::new().with_collection(VS, Arc::new(CollectionSnapshot::new(resources)))
}

fn versioned(v: &str) -> Versioned {
    Versioned {
        version: v.into(),
        nonce: "n".into(),
        at: At(SystemTime::UNIX_EPOCH),
    }
}

pub(crate) fn remote(status: Option<CollectionStatus>) -> RemoteView {
    RemoteView {
        cluster: "west".into(),
        connected: true,
        streams: 1,
        collections: status.into_iter().map(|s| (VS.to_owned(), s)).collect(),
        ..Default::default()
    }
}

pub(crate) fn acked(v: &str) -> CollectionStatus {
    CollectionStatus {
        sent: Some(versioned(v)),
        acked: Some(versioned(v)),
        state: SyncState::Synced,
        ..CollectionStatus::default()
    }
}

fn nacked(v: &str, message: &str) -> CollectionStatus {
    CollectionStatus {
        sent: Some(versioned(v)),
        nacked: Some(Rejection {
            version: v.into(),
            code: 3,
            message: message.into(),
            at: At(SystemTime::UNIX_EPOCH),
        }),
        state: SyncState::Nacked,
        ..CollectionStatus::default()
    }
}

#[test]
fn acked_when_the_cluster_acked_the_collection_version_holding_the_object() {
    let snap = snapshot(&[("ns/a", "7")]);
    let current = snap.collection(VS).version().to_owned();
    let r = remote(Some(acked(&current)));
    assert_eq!(
        standing(&r, Some(&snap), VS, "ns/a", "7", None),
        Standing::Acked
    );
    // Another served version of the object (the snapshot is behind).
    assert!(matches!(
        standing(&r, Some(&snap), VS, "ns/a", "8", None),
        Standing::Pending(_)
    ));
    assert!(matches!(
        standing(&r, None, VS, "ns/a", "7", None),
        Standing::Pending(_)
    ));
}

#[test]
fn a_nack_of_the_version_holding_it_is_a_refusal_unless_the_cluster_holds_it_already() {
    let snap = snapshot(&[("ns/a", "7"), ("ns/b", "1")]);
    let current = snap.collection(VS).version().to_owned();
    let r = remote(Some(nacked(&current, "b is bad")));
    assert_eq!(
        standing(&r, Some(&snap), VS, "ns/b", "1", None),
        Standing::Nacked("b is bad".into())
    );
    // `a` was ACKed in an earlier version: the cluster still holds it.
    assert_eq!(
        standing(&r, Some(&snap), VS, "ns/a", "7", Some("7")),
        Standing::Acked
    );
    // Sent, not yet answered.
    let sent = CollectionStatus {
        sent: Some(versioned(&current)),
        state: SyncState::Stale,
        ..CollectionStatus::default()
    };
    assert_eq!(
        standing(&remote(Some(sent)), Some(&snap), VS, "ns/b", "1", None),
        Standing::Pending("sent, not ACKed yet")
    );
}

#[test]
fn an_object_istiod_dropped_is_reported_with_its_reason() {
    let snap = snapshot(&[("ns/a", "7")]);
    let current = snap.collection(VS).version().to_owned();
    let mut r = remote(Some(CollectionStatus {
        state: SyncState::Dropped,
        ..acked(&current)
    }));
    r.dropped.insert(
        VS.to_owned(),
        vec![ObjectProblemView {
            collection: VS.to_owned(),
            name: "ns/a".into(),
            version: "7".into(),
            reason: "invalid host".into(),
        }],
    );
    assert_eq!(
        standing(&r, Some(&snap), VS, "ns/a", "7", None),
        Standing::Dropped("invalid host".into())
    );
}

#[test]
fn the_condition_sums_up_every_cluster() {
    let all = BTreeMap::from([
        ("east".to_owned(), Standing::Acked),
        ("west".to_owned(), Standing::Acked),
    ]);
    let c = distributed(&all, 4);
    assert_eq!(
        (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
        ("Distributed", "True", "Acked")
    );
    assert_eq!(c.message, "ACKed by 2/2 clusters");
    assert_eq!(c.observed_generation, Some(4));

    let one_bad = BTreeMap::from([
        ("east".to_owned(), Standing::Acked),
        ("west".to_owned(), Standing::Nacked("host is bad".into())),
    ]);
    let c = distributed(&one_bad, 4);
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "Nacked"));
    assert_eq!(
        c.message,
        "NACKed by west: host is bad; ACKed by 1/2 clusters"
    );

    let waiting = BTreeMap::from([
        ("east".to_owned(), Standing::Acked),
        ("west".to_owned(), Standing::Pending("sent, not ACKed yet")),
    ]);
    let c = distributed(&waiting, 4);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("Unknown", "Pending")
    );
    assert_eq!(
        c.message,
        "ACKed by 1/2 clusters; waiting for west (sent, not ACKed yet)"
    );
    let c = distributed(&BTreeMap::new(), 4);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("Unknown", "NoRemoteClusters")
    );
}

#[test]
fn many_clusters_are_named_up_to_a_few() {
    let many: BTreeMap<String, Standing> = (0..6)
        .map(|i| (format!("c{i}"), Standing::Dropped("gone".into())))
        .collect();
    let c = distributed(&many, 1);
    assert_eq!(c.reason, "Dropped");
    assert!(c.message.contains("and 3 more"), "{}", c.message);
    assert!(
        c.message.ends_with("ACKed by 0/6 clusters"),
        "{}",
        c.message
    );
}

#[test]
fn analysis_messages_are_gathered_per_object_without_repeats() {
    let msg = |origin: &str| AnalysisMessage {
        code: "IST0101".into(),
        name: "ReferencedResourceNotFound".into(),
        level: Level::Error,
        origin: origin.into(),
        path: String::new(),
        message: "Referenced gateway not found".into(),
    };
    let per_cluster = |cluster: &str| ClusterAnalysis {
        cluster: cluster.into(),
        version: "1".into(),
        messages: vec![std::sync::Arc::new(msg("VirtualService ns/a"))],
        held_back: None,
    };
    let by = messages_by_object(&[Arc::new(per_cluster("east")), Arc::new(per_cluster("west"))]);
    let a = &by["VirtualService ns/a"];
    assert_eq!(a.len(), 1, "the same message from two clusters is one");
    let m = a.iter().next().unwrap();
    assert_eq!(m.type_.code, "IST0101");
    assert_eq!(m.level, "ERROR");
}

#[test]
fn the_transition_time_moves_only_when_the_condition_status_changes() {
    let before = status(
        distributed(&BTreeMap::from([("w".to_owned(), Standing::Acked)]), 1),
        Vec::new(),
        1,
        None,
        "2026-01-01T00:00:00Z",
    );
    let same = status(
        distributed(&BTreeMap::from([("w".to_owned(), Standing::Acked)]), 2),
        Vec::new(),
        2,
        Some(&before),
        "2026-02-02T00:00:00Z",
    );
    assert_eq!(
        same.conditions[0].last_transition_time.as_deref(),
        Some("2026-01-01T00:00:00Z")
    );
    assert_eq!(same.observed_generation, Some(2));
    let changed = status(
        distributed(
            &BTreeMap::from([("w".to_owned(), Standing::Pending("not sent yet"))]),
            3,
        ),
        Vec::new(),
        3,
        Some(&same),
        "2026-03-03T00:00:00Z",
    );
    assert_eq!(
        changed.conditions[0].last_transition_time.as_deref(),
        Some("2026-03-03T00:00:00Z")
    );
}

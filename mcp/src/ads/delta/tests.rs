use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use meshhub_proto::mcp::{Metadata, Resource};
use prost::Message;

use super::*;
use crate::snapshot::EncodedResource;
use crate::source::{Event, IncrementalPolicy};

const VS: &str = "networking.istio.io/v1/VirtualService";

fn coll(items: &[(&str, &str)]) -> Arc<CollectionSnapshot> {
    Arc::new(CollectionSnapshot::new(
        items
            .iter()
            .map(|(n, v)| {
                let r = Resource {
                    metadata: Some(Metadata {
                        name: (*n).into(),
                        version: (*v).into(),
                        ..Default::default()
                    }),
                    body: None,
                };
                EncodedResource {
                    name: (*n).into(),
                    version: (*v).into(),
                    encoded: Bytes::from(r.encode_to_vec()),
                }
            })
            .collect(),
    ))
}

fn machine() -> DeltaStream {
    DeltaStream::new(Arc::new(SourceConfig {
        incremental: IncrementalPolicy::Always,
        ..Default::default()
    }))
}

fn subscribe(names: &[&str]) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: VS.into(),
        resource_names_subscribe: names.iter().map(|n| (*n).into()).collect(),
        ..Default::default()
    }
}

fn ack(nonce: &str) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        type_url: VS.into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

/// `name@version` of each resource, and the removed names.
fn content(r: &EncodedDeltaDiscoveryResponse) -> (Vec<String>, Vec<String>) {
    (
        r.resources
            .iter()
            .map(|x| format!("{}@{}", x.name, x.version))
            .collect(),
        r.removed_resources.clone(),
    )
}

fn one(step: Step<EncodedDeltaDiscoveryResponse>) -> EncodedDeltaDiscoveryResponse {
    assert_eq!(step.responses.len(), 1, "{step:?}");
    step.responses.into_iter().next().unwrap()
}

#[test]
fn wildcard_gets_everything_then_only_changes() {
    let mut m = machine();
    let step = m.on_request(&subscribe(&[]));
    assert_eq!(step.watch.as_deref(), Some(VS));
    assert!(step.responses.is_empty());
    let r = one(m.on_update(VS, coll(&[("ns/a", "1"), ("ns/b", "1")])));
    assert_eq!(r.type_url, VS);
    assert_eq!(
        content(&r),
        (vec!["ns/a@1".into(), "ns/b@1".into()], vec![])
    );
    // Nothing new while un-ACKed; both changes arrive as one delta.
    assert!(
        m.on_update(VS, coll(&[("ns/a", "2"), ("ns/b", "1")]))
            .responses
            .is_empty()
    );
    m.on_update(VS, coll(&[("ns/a", "2"), ("ns/c", "1")]));
    let r = one(m.on_request(&ack(&r.nonce)));
    assert_eq!(
        content(&r),
        (vec!["ns/a@2".into(), "ns/c@1".into()], vec!["ns/b".into()])
    );
}

#[test]
fn initial_versions_send_only_the_difference() {
    let mut m = machine();
    let mut req = subscribe(&[]);
    req.initial_resource_versions = HashMap::from([
        ("ns/same".into(), "1".into()),
        ("ns/old".into(), "1".into()),
        ("ns/gone".into(), "1".into()),
    ]);
    m.on_request(&req);
    let r = one(m.on_update(
        VS,
        coll(&[("ns/same", "1"), ("ns/old", "2"), ("ns/new", "1")]),
    ));
    assert_eq!(
        content(&r),
        (
            vec!["ns/new@1".into(), "ns/old@2".into()],
            vec!["ns/gone".into()]
        )
    );
}

#[test]
fn nack_is_recorded_and_the_state_not_resent() {
    let mut m = machine();
    m.on_request(&subscribe(&[]));
    let r = one(m.on_update(VS, coll(&[("ns/a", "1")])));
    let mut nack = ack(&r.nonce);
    nack.error_detail = Some(envoy_types::pb::google::rpc::Status {
        code: 3,
        message: "bad host".into(),
        details: vec![],
    });
    let step = m.on_request(&nack);
    assert!(step.responses.is_empty(), "the NACKed state is not resent");
    assert!(step.events.iter().any(|e| matches!(
        e,
        Event::Nacked { collection, message, .. } if collection == VS && message == "bad host"
    )));
    // The same content again: still parked. New content: sent, as a delta
    // from what the client held before the NACK (nothing).
    assert!(m.on_update(VS, coll(&[("ns/a", "1")])).responses.is_empty());
    let r = one(m.on_update(VS, coll(&[("ns/a", "2")])));
    assert_eq!(content(&r), (vec!["ns/a@2".into()], vec![]));
}

#[test]
fn named_subscriptions_filter_resend_and_report_missing() {
    let mut m = machine();
    m.on_request(&subscribe(&["ns/a", "ns/nope"]));
    let r = one(m.on_update(VS, coll(&[("ns/a", "1"), ("ns/b", "1")])));
    assert_eq!(
        content(&r),
        (vec!["ns/a@1".into()], vec!["ns/nope".into()]),
        "only the named ones; a missing name is reported removed"
    );
    m.on_request(&ack(&r.nonce));
    // Changes to resources nobody asked for send nothing.
    assert!(
        m.on_update(VS, coll(&[("ns/a", "1"), ("ns/b", "2")]))
            .responses
            .is_empty()
    );
    // Subscribing adds b; re-subscribing a resends it although it is held.
    let r = one(m.on_request(&subscribe(&["ns/b", "ns/a"])));
    assert_eq!(
        content(&r),
        (vec!["ns/a@1".into(), "ns/b@2".into()], vec![])
    );
    m.on_request(&ack(&r.nonce));
    // Unsubscribing a sends no removal (the client dropped it itself).
    let mut unsub = ack("");
    unsub.resource_names_unsubscribe = vec!["ns/a".into()];
    let r = one(m.on_request(&unsub));
    assert_eq!(content(&r), (vec![], vec![]));
    m.on_request(&ack(&r.nonce));
    // Deleting b (still subscribed) sends its removal.
    let r = one(m.on_update(VS, coll(&[("ns/a", "1")])));
    assert_eq!(content(&r), (vec![], vec!["ns/b".into()]));
}

#[test]
fn subscription_changes_while_unacked_wait_for_the_ack() {
    let mut m = machine();
    m.on_request(&subscribe(&["ns/a"]));
    let r = one(m.on_update(VS, coll(&[("ns/a", "1"), ("ns/b", "1")])));
    assert!(m.on_request(&subscribe(&["ns/b"])).responses.is_empty());
    let r = one(m.on_request(&ack(&r.nonce)));
    assert_eq!(content(&r), (vec!["ns/b@1".into()], vec![]));
}

#[test]
fn explicit_wildcard_and_leaving_it() {
    let mut m = machine();
    m.on_request(&subscribe(&["*", "ns/a"]));
    let r = one(m.on_update(VS, coll(&[("ns/a", "1"), ("ns/b", "1")])));
    assert_eq!(content(&r).0.len(), 2);
    m.on_request(&ack(&r.nonce));
    let mut leave = ack("");
    leave.resource_names_unsubscribe = vec!["*".into()];
    let r = one(m.on_request(&leave));
    assert_eq!(content(&r), (vec![], vec![]), "b is dropped by the client");
    m.on_request(&ack(&r.nonce));
    assert!(
        m.on_update(VS, coll(&[("ns/a", "1"), ("ns/b", "2")]))
            .responses
            .is_empty(),
        "b is no longer wanted"
    );
}

#[test]
fn mesh_config_and_typeless_requests_are_not_answered() {
    let mut req = subscribe(&[]);
    assert!(accept(req.clone()).is_some());
    req.type_url = MESH_CONFIG_TYPE_URL.into();
    assert!(accept(req.clone()).is_none());
    req.type_url.clear();
    assert!(accept(req).is_none());
}

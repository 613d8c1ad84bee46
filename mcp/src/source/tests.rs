use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use meshhub_proto::RpcStatus;
use meshhub_proto::mcp::RequestResources;

use super::*;
use crate::snapshot::{CollectionSnapshot, EMPTY, EncodedResource};

const VS: &str = "istio/networking/v1alpha3/virtualservices";
const DR: &str = "istio/networking/v1alpha3/destinationrules";

fn coll(items: &[(&str, &str)]) -> Arc<CollectionSnapshot> {
    Arc::new(CollectionSnapshot::new(
        items
            .iter()
            .map(|(n, v)| EncodedResource {
                name: (*n).into(),
                version: (*v).into(),
                encoded: Bytes::from(format!("{n}={v}")),
            })
            .collect(),
    ))
}

fn subscribe(collection: &str) -> RequestResources {
    RequestResources {
        collection: collection.into(),
        ..Default::default()
    }
}

fn ack(collection: &str, nonce: &str) -> RequestResources {
    RequestResources {
        collection: collection.into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

fn nack(collection: &str, nonce: &str) -> RequestResources {
    RequestResources {
        collection: collection.into(),
        response_nonce: nonce.into(),
        error_detail: Some(RpcStatus {
            code: 3,
            message: "bad".into(),
            details: vec![],
        }),
        ..Default::default()
    }
}

fn machine() -> SourceStream {
    SourceStream::new(Arc::new(SourceConfig::default()))
}

fn names(r: &EncodedResources) -> Vec<String> {
    r.resources
        .iter()
        .map(|b| String::from_utf8(b.to_vec()).unwrap())
        .collect()
}

#[test]
fn subscription_opens_a_watch_and_answers_at_once() {
    let mut m = machine();
    let step = m.on_request(&subscribe(VS));
    assert_eq!(step.watch.as_deref(), Some(VS));
    assert!(step.responses.is_empty(), "nothing known yet");
    let step = m.on_update(VS, coll(&[("ns/a", "1")]));
    assert_eq!(step.responses.len(), 1);
    let r = &step.responses[0];
    assert_eq!(r.collection, VS);
    assert_eq!(r.nonce, "1");
    assert!(!r.incremental);
    assert_eq!(names(r), ["ns/a=1"]);
}

#[test]
fn nonces_are_unique_across_collections() {
    let mut m = machine();
    m.on_request(&subscribe(VS));
    m.on_request(&subscribe(DR));
    let a = m.on_update(VS, coll(&[("ns/a", "1")])).responses;
    let b = m.on_update(DR, coll(&[("ns/b", "1")])).responses;
    assert_ne!(a[0].nonce, b[0].nonce);
}

#[test]
fn one_unacked_response_per_collection_and_coalescing() {
    let mut m = machine();
    m.on_request(&subscribe(VS));
    let first = m.on_update(VS, coll(&[("ns/a", "1")])).responses;
    assert_eq!(first.len(), 1);
    // Two more versions while the first is un-ACKed: nothing is sent.
    assert!(m.on_update(VS, coll(&[("ns/a", "2")])).responses.is_empty());
    assert!(m.on_update(VS, coll(&[("ns/a", "3")])).responses.is_empty());
    // The ACK releases only the newest.
    let step = m.on_request(&ack(VS, &first[0].nonce));
    assert_eq!(step.responses.len(), 1);
    assert_eq!(names(&step.responses[0]), ["ns/a=3"]);
    assert!(
        step.events
            .iter()
            .any(|e| matches!(e, Event::Acked { version, .. } if version == first[0].system_version_info.as_str()))
    );
}

#[test]
fn nack_parks_until_the_version_changes() {
    let mut m = machine();
    m.on_request(&subscribe(VS));
    let v1 = coll(&[("ns/a", "1")]);
    let sent = m.on_update(VS, v1.clone()).responses;
    let step = m.on_request(&nack(VS, &sent[0].nonce));
    assert!(
        step.responses.is_empty(),
        "the NACKed version is not resent"
    );
    assert!(matches!(&step.events[0], Event::Nacked { code: 3, message, .. } if message == "bad"));
    // The same version again (e.g. republished) is still not sent.
    assert!(m.on_update(VS, v1).responses.is_empty());
    // A new version is.
    let step = m.on_update(VS, coll(&[("ns/a", "2")]));
    assert_eq!(names(&step.responses[0]), ["ns/a=2"]);
}

#[test]
fn newer_version_arriving_before_the_nack_is_sent_after_it() {
    let mut m = machine();
    m.on_request(&subscribe(VS));
    let sent = m.on_update(VS, coll(&[("ns/a", "1")])).responses;
    assert!(m.on_update(VS, coll(&[("ns/a", "2")])).responses.is_empty());
    let step = m.on_request(&nack(VS, &sent[0].nonce));
    assert_eq!(names(&step.responses[0]), ["ns/a=2"]);
}

#[test]
fn stale_nonces_are_ignored() {
    let mut m = machine();
    m.on_request(&subscribe(VS));
    let sent = m.on_update(VS, coll(&[("ns/a", "1")])).responses;
    let step = m.on_request(&ack(VS, "999"));
    assert!(step.responses.is_empty());
    assert!(matches!(&step.events[0], Event::Stale { nack: false, .. }));
    assert!(m.is_pending(VS), "the real response is still pending");
    let step = m.on_request(&nack(VS, "998"));
    assert!(matches!(&step.events[0], Event::Stale { nack: true, .. }));
    // The real ACK still works.
    let step = m.on_request(&ack(VS, &sent[0].nonce));
    assert!(matches!(&step.events[0], Event::Acked { .. }));
    // An ACK repeated later is stale too.
    let step = m.on_request(&ack(VS, &sent[0].nonce));
    assert!(matches!(&step.events[0], Event::Stale { .. }));
}

#[test]
fn unknown_collection_gets_an_empty_answer_with_a_version() {
    let mut m = machine();
    m.on_request(&subscribe("nobody/serves/this"));
    m.on_request(&subscribe(VS));
    let step = m.on_update("nobody/serves/this", EMPTY.clone());
    let r = &step.responses[0];
    assert!(r.resources.is_empty());
    assert!(!r.system_version_info.is_empty());
    // The other collection is unaffected.
    let step = m.on_update(VS, coll(&[("ns/a", "1")]));
    assert_eq!(step.responses.len(), 1);
}

#[test]
fn incremental_without_initial_versions_starts_with_full_state() {
    let mut m = machine();
    let mut req = subscribe(VS);
    req.incremental = true;
    m.on_request(&req);
    let first = m
        .on_update(VS, coll(&[("ns/a", "1"), ("ns/b", "1")]))
        .responses;
    assert!(!first[0].incremental);
    assert_eq!(first[0].resources.len(), 2);
    m.on_request(&ack(VS, &first[0].nonce));
    let step = m.on_update(VS, coll(&[("ns/a", "2"), ("ns/c", "1")]));
    let r = &step.responses[0];
    assert!(r.incremental);
    assert_eq!(names(r), ["ns/a=2", "ns/c=1"]);
    assert_eq!(r.removed_resources, ["ns/b"]);
}

#[test]
fn initial_resource_versions_give_a_correct_delta_on_reconnect() {
    let mut m = machine();
    let mut req = subscribe(VS);
    req.incremental = true;
    req.initial_resource_versions = HashMap::from([
        ("ns/a".to_owned(), "1".to_owned()),
        ("ns/gone".to_owned(), "1".to_owned()),
    ]);
    m.on_request(&req);
    let step = m.on_update(VS, coll(&[("ns/a", "1"), ("ns/new", "1")]));
    let r = &step.responses[0];
    assert!(r.incremental);
    assert_eq!(names(r), ["ns/new=1"], "ns/a is already held");
    assert_eq!(r.removed_resources, ["ns/gone"], "deleted while away");
}

#[test]
fn nacked_delta_keeps_the_held_state() {
    let mut m = machine();
    let mut req = subscribe(VS);
    req.incremental = true;
    req.initial_resource_versions = HashMap::from([("ns/a".to_owned(), "1".to_owned())]);
    m.on_request(&req);
    let r = m
        .on_update(VS, coll(&[("ns/a", "1"), ("ns/b", "1")]))
        .responses;
    assert_eq!(names(&r[0]), ["ns/b=1"]);
    m.on_request(&nack(VS, &r[0].nonce));
    // Next version: the delta is still against {a@1}, not against the NACKed state.
    let r = m
        .on_update(VS, coll(&[("ns/a", "1"), ("ns/b", "2")]))
        .responses;
    assert_eq!(names(&r[0]), ["ns/b=2"]);
}

#[test]
fn incremental_refused_by_policy_is_full_state() {
    let cfg = SourceConfig {
        incremental: IncrementalPolicy::Never,
        ..Default::default()
    };
    let mut m = SourceStream::new(Arc::new(cfg));
    let mut req = subscribe(VS);
    req.incremental = true;
    req.initial_resource_versions = HashMap::from([("ns/a".to_owned(), "1".to_owned())]);
    m.on_request(&req);
    let r = m.on_update(VS, coll(&[("ns/a", "1")])).responses;
    assert!(!r[0].incremental);
    assert_eq!(r[0].resources.len(), 1);
}

#[test]
fn resubscribe_with_empty_nonce_starts_over() {
    let mut m = machine();
    m.on_request(&subscribe(VS));
    let r = m.on_update(VS, coll(&[("ns/a", "1")])).responses;
    m.on_request(&ack(VS, &r[0].nonce));
    let step = m.on_request(&subscribe(VS));
    assert!(step.watch.is_none(), "the watch is already open");
    assert_eq!(step.responses.len(), 1, "full state again");
    assert_ne!(step.responses[0].nonce, r[0].nonce);
}

#[test]
fn trigger_nack_is_dropped() {
    let mut m = machine();
    let mut req = nack(TRIGGER_COLLECTION, "");
    req.error_detail.as_mut().unwrap().code = 12;
    let step = m.on_request(&req);
    assert!(step.watch.is_none() && step.responses.is_empty() && step.events.is_empty());
}

#[test]
fn oversized_response_is_parked_and_others_continue() {
    let cfg = SourceConfig {
        max_response_bytes: 200,
        ..Default::default()
    };
    let mut m = SourceStream::new(Arc::new(cfg));
    m.on_request(&subscribe(VS));
    m.on_request(&subscribe(DR));
    let big: Vec<(String, String)> = (0..20).map(|i| (format!("ns/r{i}"), "1".into())).collect();
    let big: Vec<(&str, &str)> = big.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let step = m.on_update(VS, coll(&big));
    assert!(step.responses.is_empty());
    assert!(matches!(
        &step.events[0],
        Event::TooLarge { limit: 200, .. }
    ));
    let step = m.on_update(DR, coll(&[("ns/x", "1")]));
    assert_eq!(step.responses.len(), 1);
    // A smaller new version of the big collection goes out.
    let step = m.on_update(VS, coll(&[("ns/a", "2")]));
    assert_eq!(step.responses.len(), 1);
}

mod properties {
    use std::collections::{BTreeMap, HashMap};

    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Op {
        /// Publish a collection of these (name, version) pairs.
        Publish(BTreeMap<u8, u8>),
        /// The sink answers the pending response: ACK (true) or NACK.
        Answer(bool),
        /// The stream breaks; the sink reconnects (incremental or not).
        Reconnect(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => prop::collection::btree_map(0u8..8, 0u8..3, 0..6).prop_map(Op::Publish),
            4 => any::<bool>().prop_map(Op::Answer),
            1 => any::<bool>().prop_map(Op::Reconnect),
        ]
    }

    fn snapshot_of(content: &BTreeMap<u8, u8>) -> Arc<CollectionSnapshot> {
        let items: Vec<(String, String)> = content
            .iter()
            .map(|(n, v)| (format!("ns/r{n}"), v.to_string()))
            .collect();
        let refs: Vec<(&str, &str)> = items
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        coll(&refs)
    }

    /// A sink that applies what it receives, as the real updater does.
    #[derive(Default)]
    struct ModelSink {
        held: HashMap<String, String>,
    }

    impl ModelSink {
        fn apply(&mut self, r: &EncodedResources) {
            if !r.incremental {
                self.held.clear();
            }
            for name in &r.removed_resources {
                self.held.remove(name);
            }
            for b in r.resources.iter() {
                let s = String::from_utf8(b.to_vec()).unwrap();
                let (n, v) = s.split_once('=').unwrap();
                self.held.insert(n.to_owned(), v.to_owned());
            }
        }
    }

    fn connect(
        sink: &ModelSink,
        incremental: bool,
        latest: &Option<Arc<CollectionSnapshot>>,
    ) -> (SourceStream, Vec<EncodedResources>) {
        let mut m = machine();
        let mut req = subscribe(VS);
        req.incremental = incremental;
        if incremental {
            req.initial_resource_versions = sink.held.clone();
        }
        let mut out = m.on_request(&req).responses;
        if let Some(s) = latest {
            out.extend(m.on_update(VS, s.clone()).responses);
        }
        (m, out)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Random snapshots, ACKs, NACKs and reconnects: the sink ends with
        /// the latest snapshot, and no stream ever resends a NACKed version.
        #[test]
        fn sink_converges_and_nacked_versions_are_not_resent(ops in prop::collection::vec(op(), 1..60)) {
            let mut sink = ModelSink::default();
            let mut latest: Option<Arc<CollectionSnapshot>> = None;
            let mut latest_content = BTreeMap::new();
            let (mut m, mut inflight) = connect(&sink, false, &latest);
            // The last NACKed version on this stream, until a different
            // version is sent (a version may legitimately come back later:
            // A, then B, then A again).
            let mut parked: Option<String> = None;
            let check_sent = |sent: &[EncodedResources], parked: &mut Option<String>| {
                for r in sent {
                    prop_assert!(parked.as_deref() != Some(r.system_version_info.as_str()), "resent NACKed version {}", r.system_version_info);
                    *parked = None;
                }
                Ok(())
            };
            for op in ops {
                match op {
                    Op::Publish(content) => {
                        let s = snapshot_of(&content);
                        latest = Some(s.clone());
                        latest_content = content;
                        let out = m.on_update(VS, s).responses;
                        check_sent(&out, &mut parked)?;
                        prop_assert!(inflight.len() + out.len() <= 1, "more than one un-ACKed response");
                        inflight.extend(out);
                    }
                    Op::Answer(ok) => {
                        let Some(r) = inflight.pop() else { continue };
                        let req = if ok {
                            sink.apply(&r);
                            ack(VS, &r.nonce)
                        } else {
                            parked = Some(r.system_version_info.clone());
                            nack(VS, &r.nonce)
                        };
                        let out = m.on_request(&req).responses;
                        check_sent(&out, &mut parked)?;
                        inflight.extend(out);
                    }
                    Op::Reconnect(incremental) => {
                        let (nm, out) = connect(&sink, incremental, &latest);
                        m = nm;
                        inflight = out;
                        parked = None;
                    }
                }
            }
            // Settle: the sink ACKs everything from now on.
            while let Some(r) = inflight.pop() {
                sink.apply(&r);
                inflight.extend(m.on_request(&ack(VS, &r.nonce)).responses);
            }
            // Whatever was NACKed last stays parked; the sink converges once a
            // new version comes. Publish the latest content under a new
            // version and settle again.
            let mut next = latest_content.clone();
            next.insert(200, 1);
            let out = m.on_update(VS, snapshot_of(&next)).responses;
            inflight.extend(out);
            while let Some(r) = inflight.pop() {
                sink.apply(&r);
                inflight.extend(m.on_request(&ack(VS, &r.nonce)).responses);
            }
            let expected: HashMap<String, String> = next
                .iter()
                .map(|(n, v)| (format!("ns/r{n}"), v.to_string()))
                .collect();
            prop_assert_eq!(sink.held, expected);
        }
    }
}

#[test]
fn resend_sends_dropped_names_again_or_reports_them_missing() {
    let mut m = machine();
    let mut req = subscribe(VS);
    req.incremental = true;
    m.on_request(&req);
    let first = m.on_update(VS, coll(&[("ns/a", "1"), ("ns/b", "1")]));
    let nonce = first.responses[0].nonce.clone();
    // Forced while un-ACKed: carried by the next response after the ACK,
    // although the version did not change.
    let latest = coll(&[("ns/a", "1"), ("ns/b", "1")]);
    m.resend(VS, ["ns/a".into(), "ns/x".into()]);
    assert!(m.on_update(VS, latest.clone()).responses.is_empty());
    let step = m.on_request(&ack(VS, &nonce));
    let r = &step.responses[0];
    assert!(r.incremental);
    assert_eq!(names(r), ["ns/a=1"]);
    assert_eq!(r.removed_resources, ["ns/x"]);
    // NACKed: forced again with the next version.
    let nonce = r.nonce.clone();
    assert!(m.on_request(&nack(VS, &nonce)).responses.is_empty());
    assert!(
        m.on_update(VS, latest).responses.is_empty(),
        "the NACKed version stays parked"
    );
    let step = m.on_update(VS, coll(&[("ns/a", "1"), ("ns/b", "2")]));
    assert_eq!(names(&step.responses[0]), ["ns/a=1", "ns/b=2"]);
    // Full-state subscriptions ignore it.
    let mut m = machine();
    m.on_request(&subscribe(DR));
    let first = m.on_update(DR, coll(&[("ns/a", "1")]));
    m.on_request(&ack(DR, &first.responses[0].nonce));
    m.resend(DR, ["ns/a".into()]);
    assert!(m.on_update(DR, coll(&[("ns/a", "1")])).responses.is_empty());
}

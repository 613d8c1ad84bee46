use meshhub_proto::mcp::Metadata;
use meshhub_proto::transcode::{object_to_resource, parse_yaml};

use super::*;

const VS: &str = "istio/networking/v1alpha3/virtualservices";
const DR: &str = "istio/networking/v1alpha3/destinationrules";
const ADDR: &str = "http://upstream:9901";

fn kinds() -> KindTable {
    KindTable::builtin()
}

fn object(yaml: &str) -> Object {
    parse_yaml(yaml).remove(0).unwrap()
}

fn vs_yaml(name: &str, host: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: bookinfo\nspec:\n  hosts: [{host}]\n"
    )
}

/// A VirtualService resource as an upstream serves it (`name`:
/// `bookinfo/<name>`).
fn vs(name: &str, host: &str, version: &str) -> Resource {
    let kinds = kinds();
    let kind = kinds.by_collection(VS).unwrap();
    let short = name.strip_prefix("bookinfo/").expect("in bookinfo");
    let mut r = object_to_resource(kind, &object(&vs_yaml(short, host))).unwrap();
    r.metadata.as_mut().unwrap().version = version.to_owned();
    r
}

/// A resource whose body does not decode as its message.
fn corrupt(name: &str) -> Resource {
    let mut r = vs(name, "x", "1");
    r.body.as_mut().unwrap().value = vec![0x0a, 0xff, 0xff];
    r
}

fn change(collection: &str, resources: Vec<Resource>) -> Change {
    Change {
        collection: collection.to_owned(),
        version: "v".to_owned(),
        resources,
        removed: Vec::new(),
        incremental: false,
        nonce: "1".to_owned(),
    }
}

fn state(collections: &[&str]) -> State {
    State::new(
        Arc::from("up"),
        ADDR.to_owned(),
        kinds(),
        collections.iter().map(|c| (*c).to_owned()).collect(),
    )
}

/// The units of `events`: unit → the names of its objects (or `ERR: …`);
/// an empty list for a removed unit.
fn units(events: &[SourceEvent]) -> BTreeMap<String, Vec<String>> {
    events
        .iter()
        .filter_map(|e| match e {
            SourceEvent::Unit { unit, entries, .. } => Some((
                unit.to_string(),
                entries
                    .iter()
                    .map(|e| match &e.parsed {
                        Ok(o) => format!(
                            "{}/{}",
                            o.metadata.namespace.as_deref().unwrap_or(""),
                            o.metadata.name
                        ),
                        Err(m) => format!("ERR: {m}"),
                    })
                    .collect(),
            )),
            _ => None,
        })
        .collect()
}

fn synced(events: &[SourceEvent]) -> bool {
    events
        .iter()
        .any(|e| matches!(e, SourceEvent::Synced { .. }))
}

/// The problems of the last health event, if any.
fn problems(events: &[SourceEvent]) -> Option<Vec<String>> {
    events.iter().rev().find_map(|e| match e {
        SourceEvent::Health { problems, .. } => Some(problems.clone()),
        _ => None,
    })
}

#[test]
fn a_resource_becomes_the_object_it_was_made_from_with_the_upstream_version() {
    let kinds = kinds();
    let kind = kinds.by_collection(VS).unwrap();
    let original = object(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: reviews\n  namespace: bookinfo\n  labels: {app: reviews}\n  annotations: {team: b}\n  creationTimestamp: \"2026-11-23T10:00:00Z\"\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {host: reviews, subset: v2}\n      weight: 100\n",
    );
    let mut resource = object_to_resource(kind, &original).unwrap();
    resource.metadata.as_mut().unwrap().version = "4711".to_owned();

    let o = to_object(kind, &resource).unwrap();
    assert_eq!(o.api_version, "networking.istio.io/v1");
    assert_eq!(o.kind, "VirtualService");
    assert_eq!(o.metadata.namespace.as_deref(), Some("bookinfo"));
    assert_eq!(o.metadata.name, "reviews");
    assert_eq!(o.metadata.labels, original.metadata.labels);
    assert_eq!(o.metadata.annotations, original.metadata.annotations);
    assert_eq!(o.metadata.resource_version.as_deref(), Some("4711"));
    assert_eq!(
        o.metadata.creation_timestamp.as_deref(),
        Some("2026-11-23T10:00:00Z")
    );
    assert_eq!(o.content, original.content);

    // Encoded again by the hub, it is the upstream's resource: same body,
    // same version.
    let again = object_to_resource(kind, &o).unwrap();
    assert_eq!(again, resource);
}

#[test]
fn without_an_upstream_version_the_hub_makes_its_own() {
    let kinds = kinds();
    let kind = kinds.by_collection(VS).unwrap();
    let o = to_object(kind, &vs("bookinfo/a", "a", "")).unwrap();
    assert_eq!(o.metadata.resource_version, None);
}

#[test]
fn unreadable_resources_are_errors_naming_the_object() {
    let kinds = kinds();
    let kind = kinds.by_collection(VS).unwrap();
    let e = to_object(kind, &corrupt("bookinfo/bad")).unwrap_err();
    assert!(
        e.contains("bookinfo/bad") && e.contains("undecodable"),
        "{e}"
    );

    let mut bare = vs("bookinfo/a", "a", "1");
    bare.metadata.as_mut().unwrap().name = "no-namespace".to_owned();
    let e = to_object(kind, &bare).unwrap_err();
    assert!(
        e.contains("no-namespace") && e.contains("namespace/name"),
        "{e}"
    );

    let mut wrong = vs("bookinfo/a", "a", "1");
    wrong.body.as_mut().unwrap().type_url =
        "type.googleapis.com/istio.networking.v1alpha3.Gateway".to_owned();
    let e = to_object(kind, &wrong).unwrap_err();
    assert!(e.contains("body type"), "{e}");

    let no_body = Resource {
        metadata: Some(Metadata {
            name: "bookinfo/x".into(),
            ..Default::default()
        }),
        body: None,
    };
    assert!(to_object(kind, &no_body).unwrap_err().contains("no body"));
}

#[test]
fn a_full_state_replaces_the_collection_one_unit_per_object() {
    let mut s = state(&[VS]);
    let ev = s.apply(&change(
        VS,
        vec![vs("bookinfo/a", "a", "1"), vs("bookinfo/b", "b", "1")],
    ));
    assert_eq!(
        units(&ev),
        BTreeMap::from([
            (format!("{VS}/bookinfo/a"), vec!["bookinfo/a".to_owned()]),
            (format!("{VS}/bookinfo/b"), vec!["bookinfo/b".to_owned()]),
        ])
    );
    assert!(synced(&ev), "the only collection was answered");

    // b changed, a unchanged (not sent again), c new; then a is gone.
    let ev = s.apply(&change(
        VS,
        vec![vs("bookinfo/a", "a", "1"), vs("bookinfo/b", "b2", "2")],
    ));
    assert_eq!(
        units(&ev).into_keys().collect::<Vec<_>>(),
        [format!("{VS}/bookinfo/b")]
    );
    assert!(!synced(&ev), "Synced is sent once");
    let ev = s.apply(&change(
        VS,
        vec![vs("bookinfo/b", "b2", "2"), vs("bookinfo/c", "c", "1")],
    ));
    assert_eq!(
        units(&ev),
        BTreeMap::from([
            (format!("{VS}/bookinfo/a"), vec![]),
            (format!("{VS}/bookinfo/c"), vec!["bookinfo/c".to_owned()]),
        ])
    );
    assert_eq!(
        s.held(VS),
        HashMap::from([
            ("bookinfo/b".to_owned(), "2".to_owned()),
            ("bookinfo/c".to_owned(), "1".to_owned()),
        ])
    );

    // An empty full state removes everything.
    let ev = s.apply(&change(VS, vec![]));
    assert_eq!(
        units(&ev),
        BTreeMap::from([
            (format!("{VS}/bookinfo/b"), vec![]),
            (format!("{VS}/bookinfo/c"), vec![]),
        ])
    );
}

#[test]
fn an_incremental_response_upserts_and_removes() {
    let mut s = state(&[VS]);
    s.apply(&change(
        VS,
        vec![vs("bookinfo/a", "a", "1"), vs("bookinfo/b", "b", "1")],
    ));
    let mut delta = change(
        VS,
        vec![vs("bookinfo/c", "c", "1"), vs("bookinfo/a", "a2", "2")],
    );
    delta.incremental = true;
    delta.removed = vec!["bookinfo/b".to_owned(), "bookinfo/never-held".to_owned()];
    let ev = s.apply(&delta);
    assert_eq!(
        units(&ev),
        BTreeMap::from([
            (format!("{VS}/bookinfo/a"), vec!["bookinfo/a".to_owned()]),
            (format!("{VS}/bookinfo/b"), vec![]),
            (format!("{VS}/bookinfo/c"), vec!["bookinfo/c".to_owned()]),
        ])
    );
    let mut held: Vec<_> = s.held(VS).into_iter().collect();
    held.sort();
    assert_eq!(
        held,
        [
            ("bookinfo/a".to_owned(), "2".to_owned()),
            ("bookinfo/c".to_owned(), "1".to_owned())
        ]
    );
}

#[test]
fn a_bad_resource_is_an_error_entry_and_the_others_are_kept() {
    let mut s = state(&[VS]);
    let ev = s.apply(&change(
        VS,
        vec![vs("bookinfo/a", "a", "1"), corrupt("bookinfo/bad")],
    ));
    let u = units(&ev);
    assert_eq!(u[&format!("{VS}/bookinfo/a")], ["bookinfo/a"]);
    let bad = &u[&format!("{VS}/bookinfo/bad")];
    assert_eq!(bad.len(), 1);
    assert!(
        bad[0].starts_with("ERR: ") && bad[0].contains("undecodable"),
        "{bad:?}"
    );
    // The error is reported once, not again while the resource is unchanged.
    let ev = s.apply(&change(
        VS,
        vec![vs("bookinfo/a", "a", "1"), corrupt("bookinfo/bad")],
    ));
    assert!(units(&ev).is_empty(), "{ev:?}");
    // Fixed upstream: the unit now holds the object.
    let ev = s.apply(&change(
        VS,
        vec![vs("bookinfo/a", "a", "1"), vs("bookinfo/bad", "x", "2")],
    ));
    assert_eq!(units(&ev)[&format!("{VS}/bookinfo/bad")], ["bookinfo/bad"]);
}

#[test]
fn two_resources_of_one_name_are_two_entries_of_its_unit() {
    let mut s = state(&[VS]);
    let ev = s.apply(&change(
        VS,
        vec![vs("bookinfo/a", "a", "1"), vs("bookinfo/a", "b", "2")],
    ));
    let SourceEvent::Unit { entries, .. } = &ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!(entries.len(), 2);
    assert_eq!(
        (entries[0].origin.document, entries[1].origin.document),
        (1, 2)
    );
}

#[test]
fn synced_once_every_collection_is_answered_even_empty() {
    let mut s = state(&[VS, DR]);
    let ev = s.apply(&change(VS, vec![vs("bookinfo/a", "a", "1")]));
    assert!(!synced(&ev));
    let ev = s.apply(&change(DR, vec![]));
    assert!(synced(&ev));
    assert!(!synced(&s.apply(&change(DR, vec![]))));
}

#[test]
fn a_disconnection_keeps_the_objects_and_is_a_problem_until_a_response_arrives() {
    let mut s = state(&[VS]);
    s.apply(&change(
        VS,
        vec![vs("bookinfo/a", "a", "1"), vs("bookinfo/b", "b", "1")],
    ));
    let (ev, refused) = s.on_ended(&Ended::Status {
        code: Code::Unavailable,
        message: "server shutting down".into(),
    });
    assert!(!refused);
    assert!(units(&ev).is_empty(), "nothing removed: {ev:?}");
    assert_eq!(
        problems(&ev).unwrap(),
        [format!(
            "disconnected from {ADDR}: Unavailable: server shutting down"
        )]
    );
    // Reconnecting fails: the problem says why, once per reason.
    let (ev, _) = s.on_ended(&Ended::Other(
        "connect: transport error: Connection refused".into(),
    ));
    assert_eq!(
        problems(&ev).unwrap(),
        [format!(
            "disconnected from {ADDR}: connect: transport error: Connection refused"
        )]
    );
    let (ev, _) = s.on_ended(&Ended::Other(
        "connect: transport error: Connection refused".into(),
    ));
    assert!(problems(&ev).is_none(), "unchanged: not reported again");
    // The reconnect's full state reconciles (b gone) and clears the problem.
    let ev = s.apply(&change(VS, vec![vs("bookinfo/a", "a", "1")]));
    assert_eq!(
        units(&ev),
        BTreeMap::from([(format!("{VS}/bookinfo/b"), vec![])])
    );
    assert_eq!(problems(&ev).unwrap(), Vec::<String>::new());
}

#[test]
fn a_refused_collection_is_dropped_reported_and_does_not_block_the_others() {
    let mut s = state(&[VS, DR]);
    s.apply(&change(DR, vec![]));
    // Galley 1.5 ends the stream on the first collection it does not serve.
    let (ev, refused) = s.on_ended(&Ended::Status {
        code: Code::InvalidArgument,
        message: format!("unsupported collection {VS:?}"),
    });
    assert!(refused);
    assert!(synced(&ev), "the other collection was answered");
    let p = problems(&ev).unwrap();
    assert_eq!(p.len(), 1);
    assert!(p[0].contains(VS) && p[0].contains("refuses"), "{p:?}");
    let names: Vec<String> = s.subscription(false).into_iter().map(|c| c.name).collect();
    assert_eq!(names, [DR]);

    // A disconnection for another reason: asked again (the upstream may
    // have been upgraded); the refusal stays reported until answered.
    let (ev, refused) = s.on_ended(&Ended::Other("the upstream closed the stream".into()));
    assert!(!refused);
    assert_eq!(problems(&ev).unwrap().len(), 2);
    assert_eq!(s.subscription(true).len(), 2);
    assert!(s.subscription(true).iter().all(|c| c.incremental));
    let ev = s.apply(&change(VS, vec![vs("bookinfo/a", "a", "1")]));
    assert_eq!(problems(&ev).unwrap(), Vec::<String>::new());
}

#[test]
fn a_collection_refused_later_loses_its_objects() {
    let mut s = state(&[VS, DR]);
    s.apply(&change(VS, vec![vs("bookinfo/a", "a", "1")]));
    s.apply(&change(DR, vec![]));
    let (ev, refused) = s.on_ended(&Ended::Status {
        code: Code::Unimplemented,
        message: format!("unknown collection {VS}"),
    });
    assert!(refused);
    assert_eq!(
        units(&ev),
        BTreeMap::from([(format!("{VS}/bookinfo/a"), vec![])])
    );
    assert!(s.held(VS).is_empty());
}

#[test]
fn refusals_need_a_refusal_code_and_name_the_longest_collection() {
    let subscribed = ["k8s/core/v1/configmaps", "k8s/core/v1/config"];
    let refusal = |code, message: &str| Ended::Status {
        code,
        message: message.into(),
    };
    assert_eq!(
        refusal(
            Code::InvalidArgument,
            "unsupported collection \"k8s/core/v1/configmaps\""
        )
        .refused(subscribed),
        Some("k8s/core/v1/configmaps")
    );
    assert_eq!(
        refusal(Code::NotFound, "no k8s/core/v1/config here").refused(subscribed),
        Some("k8s/core/v1/config")
    );
    assert_eq!(
        refusal(Code::Unavailable, "k8s/core/v1/configmaps").refused(subscribed),
        None,
        "not a refusal code"
    );
    assert_eq!(
        refusal(Code::InvalidArgument, "bad request").refused(subscribed),
        None,
        "names no collection"
    );
    assert_eq!(
        Ended::Other("connect: transport error: k8s/core/v1/configmaps".into()).refused(subscribed),
        None
    );
}

#[test]
fn unanswered_collections_are_reported_until_synced() {
    let mut s = state(&[VS, DR]);
    s.apply(&change(VS, vec![]));
    let ev = s.note_unanswered();
    let p = problems(&ev).unwrap();
    assert_eq!(p.len(), 1);
    assert!(p[0].contains(DR) && !p[0].contains(VS), "{p:?}");
    let ev = s.apply(&change(DR, vec![]));
    assert!(synced(&ev));
    assert_eq!(problems(&ev).unwrap(), Vec::<String>::new());
    assert!(s.note_unanswered().is_empty(), "nothing is waiting");
}

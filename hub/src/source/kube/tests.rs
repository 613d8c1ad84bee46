use serde_json::Value;

use super::*;

fn served(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Served {
    let table = KindTable::builtin();
    let k = table
        .by_group_kind(group, kind)
        .cloned()
        .unwrap_or_else(|| Kind::schemaless(group, version, kind, plural, namespaced).unwrap());
    Served {
        kind: k,
        resource: meshhub_kube::discovery::resource(group, version, kind, plural),
        namespaced,
    }
}

fn dynamic(json: Value) -> DynamicObject {
    serde_json::from_value(json).unwrap()
}

#[test]
fn units_name_group_kind_namespace_and_name() {
    let s = served(
        "networking.istio.io",
        "v1",
        "VirtualService",
        "virtualservices",
        true,
    );
    let obj = dynamic(serde_json::json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "reviews", "namespace": "bookinfo", "resourceVersion": "4711"},
        "spec": {"hosts": ["reviews"]},
    }));
    assert_eq!(
        &*unit_name(&s, &obj),
        "networking.istio.io/VirtualService/bookinfo/reviews"
    );
}

#[test]
fn core_and_cluster_scoped_units() {
    let cm = served("", "v1", "ConfigMap", "configmaps", true);
    let obj = dynamic(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "mesh", "namespace": "istio-system"},
        "data": {"k": "v"},
    }));
    assert_eq!(&*unit_name(&cm, &obj), "core/ConfigMap/istio-system/mesh");

    let ns = served("", "v1", "Namespace", "namespaces", false);
    let obj = dynamic(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bookinfo"},
    }));
    assert_eq!(&*unit_name(&ns, &obj), "core/Namespace/bookinfo");
}

fn vs(name: &str, rv: &str) -> DynamicObject {
    dynamic(serde_json::json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": rv},
        "spec": {"hosts": [name]}
    }))
}

/// `(unit, delivered)` of each event: `false` for a removal.
fn units(events: &[SourceEvent]) -> Vec<(String, bool)> {
    events
        .iter()
        .map(|e| match e {
            SourceEvent::Unit { unit, entries, .. } => (unit.to_string(), !entries.is_empty()),
            other => panic!("not a unit: {other:?}"),
        })
        .collect()
}

#[test]
fn lists_are_delivered_as_they_arrive_and_a_relist_sends_only_changes_and_removals() {
    let mut w = Watch {
        served: served(
            "networking.istio.io",
            "v1",
            "VirtualService",
            "virtualservices",
            true,
        ),
        namespace: None,
        stop: CancellationToken::new(),
        synced: false,
        listing: None,
        known: HashMap::new(),
        skip_status_only: false,
        problem: None,
    };
    let source: Arc<str> = Arc::from("k8s");
    let unit = |n: &str| format!("networking.istio.io/VirtualService/default/{n}");
    assert!(w.absorb(&source, Event::Init).is_empty());
    // Each listed object is delivered at once: nothing waits for the end of
    // the list.
    assert_eq!(
        units(&w.absorb(&source, Event::InitApply(vs("a", "1")))),
        [(unit("a"), true)]
    );
    assert_eq!(
        units(&w.absorb(&source, Event::InitApply(vs("b", "1")))),
        [(unit("b"), true)]
    );
    assert!(!w.synced);
    assert!(w.absorb(&source, Event::InitDone).is_empty());
    assert!(w.synced);
    assert_eq!(w.listing, None, "nothing is held after the list");

    // A re-list (after `410 Gone`): `a` unchanged, `b` gone, `c` new.
    assert!(w.absorb(&source, Event::Init).is_empty());
    assert!(w.absorb(&source, Event::InitApply(vs("a", "1"))).is_empty());
    assert_eq!(
        units(&w.absorb(&source, Event::InitApply(vs("c", "7")))),
        [(unit("c"), true)]
    );
    assert_eq!(
        units(&w.absorb(&source, Event::InitDone)),
        [(unit("b"), false)]
    );
    let mut known: Vec<_> = w.known.keys().map(ToString::to_string).collect();
    known.sort();
    assert_eq!(known, [unit("a"), unit("c")]);
    // A changed version is delivered again.
    assert!(w.absorb(&source, Event::Init).is_empty());
    assert_eq!(
        units(&w.absorb(&source, Event::InitApply(vs("a", "2")))),
        [(unit("a"), true)]
    );
}

fn vs_at(rv: &str, generation: i64, label: &str, status: &str) -> DynamicObject {
    dynamic(serde_json::json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "a", "namespace": "default", "resourceVersion": rv,
                     "generation": generation, "labels": {"l": label}},
        "spec": {"hosts": ["a"]},
        "status": {"conditions": [{"type": "Distributed", "status": status}]}
    }))
}

#[test]
fn with_status_write_back_a_change_of_status_alone_is_not_delivered_again() {
    let mut w = Watch {
        served: served(
            "networking.istio.io",
            "v1",
            "VirtualService",
            "virtualservices",
            true,
        ),
        namespace: None,
        stop: CancellationToken::new(),
        synced: false,
        listing: None,
        known: HashMap::new(),
        skip_status_only: true,
        problem: None,
    };
    let source: Arc<str> = Arc::from("k8s");
    let a = "networking.istio.io/VirtualService/default/a".to_owned();
    assert!(w.absorb(&source, Event::Init).is_empty());
    assert_eq!(
        units(&w.absorb(&source, Event::InitApply(vs_at("1", 1, "x", "Unknown")))),
        [(a.clone(), true)]
    );
    assert!(w.absorb(&source, Event::InitDone).is_empty());
    // The writer's own write: a new resourceVersion, the same generation.
    assert!(
        w.absorb(&source, Event::Apply(vs_at("2", 1, "x", "True")))
            .is_empty()
    );
    // Nor on a re-list.
    assert!(w.absorb(&source, Event::Init).is_empty());
    assert!(
        w.absorb(&source, Event::InitApply(vs_at("3", 1, "x", "True")))
            .is_empty()
    );
    assert!(w.absorb(&source, Event::InitDone).is_empty());
    // A new label, or a new generation, is a change.
    assert_eq!(
        units(&w.absorb(&source, Event::Apply(vs_at("4", 1, "y", "True")))),
        [(a.clone(), true)]
    );
    assert_eq!(
        units(&w.absorb(&source, Event::Apply(vs_at("5", 2, "y", "True")))),
        [(a.clone(), true)]
    );
}

#[test]
fn the_writer_learns_istio_objects_with_their_generation_and_status() {
    let s = served(
        "networking.istio.io",
        "v1",
        "VirtualService",
        "virtualservices",
        true,
    );
    let seen = seen(&s, &vs_at("4", 3, "x", "True")).unwrap();
    assert_eq!(&*seen.unit, "networking.istio.io/VirtualService/default/a");
    assert_eq!(seen.generation, 3);
    assert_eq!(seen.namespace.as_deref(), Some("default"));
    assert_eq!(seen.resource_version.as_deref(), Some("4"));
    assert_eq!(
        seen.status.unwrap().conditions[0].status,
        "True",
        "the live status, to compare with"
    );
    let cm = served("", "v1", "ConfigMap", "configmaps", true);
    let obj = dynamic(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "m", "namespace": "default", "generation": 1},
    }));
    assert!(super::seen(&cm, &obj).is_none(), "not an Istio kind");
}

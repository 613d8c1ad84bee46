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

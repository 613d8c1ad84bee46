use super::*;

fn served(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Served {
    let table = KindTable::builtin();
    let k = table
        .by_group_kind(group, kind)
        .cloned()
        .unwrap_or_else(|| Kind::schemaless(group, version, kind, plural, namespaced).unwrap());
    Served {
        kind: k,
        resource: ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: if group.is_empty() {
                version.to_owned()
            } else {
                format!("{group}/{version}")
            },
            kind: kind.to_owned(),
            plural: plural.to_owned(),
        },
        namespaced,
    }
}

fn dynamic(json: Value) -> DynamicObject {
    serde_json::from_value(json).unwrap()
}

#[test]
fn objects_keep_identity_version_and_spec_but_not_status_or_kubectl_copies() {
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
        "metadata": {
            "name": "reviews", "namespace": "bookinfo", "resourceVersion": "4711",
            "creationTimestamp": "2026-11-23T10:00:00Z",
            "labels": {"app": "reviews"},
            "annotations": {LAST_APPLIED: "{...}", "team": "b"},
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {"hosts": ["reviews"]},
        "status": {"observedGeneration": 1},
    }));
    assert_eq!(
        &*unit_name(&s, &obj),
        "networking.istio.io/VirtualService/bookinfo/reviews"
    );
    let o = to_object(&s.resource, obj);
    assert_eq!(o.api_version, "networking.istio.io/v1");
    assert_eq!(o.kind, "VirtualService");
    assert_eq!(o.metadata.name, "reviews");
    assert_eq!(o.metadata.namespace.as_deref(), Some("bookinfo"));
    assert_eq!(o.metadata.resource_version.as_deref(), Some("4711"));
    assert_eq!(
        o.metadata.creation_timestamp.as_deref(),
        Some("2026-11-23T10:00:00Z")
    );
    assert_eq!(o.metadata.labels["app"], "reviews");
    assert!(!o.metadata.annotations.contains_key(LAST_APPLIED));
    assert_eq!(o.metadata.annotations["team"], "b");
    assert!(!o.content.contains_key("status"));
    assert_eq!(o.content["spec"]["hosts"][0], "reviews");

    // The transcoder takes it: resourceVersion is the MCP version.
    let table = KindTable::builtin();
    let kind = meshhub_proto::transcode::kind_of(&table, &o).unwrap();
    let r = meshhub_proto::transcode::object_to_resource(kind, &o).unwrap();
    let meta = r.metadata.unwrap();
    assert_eq!(meta.name, "bookinfo/reviews");
    assert_eq!(meta.version, "4711");
    assert!(meta.create_time.is_some());
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
    let o = to_object(&cm.resource, obj);
    assert_eq!(o.api_version, "v1");
    assert_eq!(o.content["data"]["k"], "v");

    let ns = served("", "v1", "Namespace", "namespaces", false);
    let obj = dynamic(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bookinfo"},
    }));
    assert_eq!(&*unit_name(&ns, &obj), "core/Namespace/bookinfo");
}

#[test]
fn api_errors_read_as_one_line_with_the_servers_message() {
    let e = kube::Error::Api(Box::new(kube::core::Status {
        code: 403,
        message: "virtualservices.networking.istio.io is forbidden".to_owned(),
        reason: "Forbidden".to_owned(),
        ..Default::default()
    }));
    assert_eq!(
        kube_error_text(&e),
        "virtualservices.networking.istio.io is forbidden (403 Forbidden)"
    );
    let w = watcher::Error::InitialListFailed(e);
    assert!(is_forbidden(&w));
    assert!(
        error_text(&w).starts_with("list failed: "),
        "{}",
        error_text(&w)
    );
}

#[test]
fn the_last_manager_is_the_newest_managed_fields_entry() {
    let obj = dynamic(serde_json::json!({
        "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
        "metadata": {"name": "r", "namespace": "ns", "resourceVersion": "7",
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "time": "2026-11-01T10:00:00Z"},
                {"manager": "argocd-controller", "operation": "Apply", "time": "2026-11-02T10:00:00Z"},
                {"manager": "kubectl-edit", "operation": "Update", "time": "2026-10-30T10:00:00Z"}
            ]},
        "spec": {"hosts": ["r"]}
    }));
    assert_eq!(last_manager(&obj).as_deref(), Some("argocd-controller"));
    let none = dynamic(serde_json::json!({
        "apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
        "metadata": {"name": "r", "namespace": "ns"}
    }));
    assert_eq!(last_manager(&none), None);
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

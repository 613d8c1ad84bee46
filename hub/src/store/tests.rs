use std::collections::BTreeSet;
use std::path::Path;

use super::*;
use crate::groups::{ClusterSpec, Selector};
use crate::source::file::parse_file;

fn store(policy: UnknownFields) -> Store {
    let rules = GroupRules::new(&[ClusterSpec {
        name: "east".into(),
        selector: Selector {
            namespaces: ["bookinfo".to_owned()].into(),
            ..Selector::default()
        },
    }]);
    Store::new(
        KindTable::builtin(),
        rules,
        policy,
        crate::validation::semantic_check(&meshhub_validate::Validator::default()),
    )
}

fn unit(source: &str, file: &str, text: &str) -> SourceEvent {
    let (source, unit): (Arc<str>, Arc<str>) = (source.into(), file.into());
    let entries = parse_file(&source, &unit, Path::new(file), text.as_bytes(), usize::MAX);
    SourceEvent::Unit {
        source,
        unit,
        entries,
    }
}

fn vs(name: &str, ns: &str, host: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  hosts: [{host}]\n  http:\n  - route:\n    - destination:\n        host: {host}\n"
    )
}

fn names(r: &Resolved) -> Vec<String> {
    r.objects.keys().map(|k| k.name.to_string()).collect()
}

#[test]
fn broken_document_is_reported_and_the_others_flow() {
    let mut s = store(UnknownFields::Reject);
    let text = format!(
        "{}---\nkind: [broken\n---\n{}",
        vs("a", "bookinfo", "a"),
        vs("b", "bookinfo", "b")
    );
    assert!(s.apply(unit("files", "x.yaml", &text)));
    let r = s.resolve();
    assert_eq!(names(&r), ["bookinfo/a", "bookinfo/b"]);
    assert_eq!(r.rejected.len(), 1);
    let bad = &r.rejected[0];
    let origin = bad.origin.as_ref().unwrap();
    assert_eq!(origin.unit.as_ref(), "x.yaml");
    assert_eq!(origin.document, 2);
    assert!(origin.line.is_some(), "{origin}");
}

#[test]
fn invalid_objects_are_rejected_with_reasons() {
    let mut s = store(UnknownFields::Reject);
    let unknown_field = vs("a", "bookinfo", "a").replace("hosts:", "hots: [x]\n  hosts:");
    // No hosts makes a delegate, which may not bind gateways.
    let no_hosts = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: empty\n  namespace: bookinfo\nspec:\n  gateways: [gw]\n  http:\n  - route:\n    - destination:\n        host: a\n";
    let unknown_kind = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n";
    let text = format!(
        "{unknown_field}---\n{no_hosts}---\n{unknown_kind}---\n{}",
        vs("ok", "bookinfo", "ok")
    );
    s.apply(unit("files", "x.yaml", &text));
    let r = s.resolve();
    assert_eq!(names(&r), ["bookinfo/ok"]);
    let reasons: Vec<String> = r.rejected.iter().map(|x| x.reasons.join("; ")).collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons[0].contains("VirtualService bookinfo/a: spec.hots: unknown field"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("VirtualService bookinfo/empty"),
        "{reasons:?}"
    );
    assert!(reasons[1].contains("delegate"), "{reasons:?}");
    assert!(reasons[2].contains("unknown kind"), "{reasons:?}");
}

#[test]
fn prune_policy_drops_unknown_fields_with_a_warning() {
    let mut s = store(UnknownFields::Prune);
    let text = vs("a", "bookinfo", "a")
        .replace("hosts:", "hots: [x]\n  hosts:")
        .replace(
            "    - destination:",
            "    - destination:\n        colour: blue",
        );
    s.apply(unit("files", "x.yaml", &text));
    let r = s.resolve();
    assert_eq!(names(&r), ["bookinfo/a"], "{:?}", r.rejected);
    let warnings: Vec<&str> = r.warnings.iter().map(|w| w.message.as_str()).collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings.iter().any(|w| w.contains("spec.hots")));
    assert!(warnings.iter().any(|w| w.contains("colour")));
    // Pruned content is what is served: same as without the fields.
    let mut clean = store(UnknownFields::Reject);
    clean.apply(unit("files", "x.yaml", &vs("a", "bookinfo", "a")));
    let c = clean.resolve();
    assert_eq!(
        r.objects.values().next().unwrap().resource.version,
        c.objects.values().next().unwrap().resource.version
    );
}

#[test]
fn conflicts_have_a_deterministic_winner() {
    let mut s = store(UnknownFields::Reject);
    s.apply(unit("files", "b.yaml", &vs("a", "bookinfo", "from-b")));
    s.apply(unit("files", "a.yaml", &vs("a", "bookinfo", "from-a")));
    // A broken duplicate never competes.
    s.apply(unit(
        "files",
        "0.yaml",
        &vs("a", "bookinfo", "x").replace("hosts:", "nope: 1\n  hosts:"),
    ));
    let r = s.resolve();
    assert_eq!(r.objects.len(), 1);
    assert_eq!(r.conflicts.len(), 1);
    let c = &r.conflicts[0];
    assert_eq!(c.winner.unit.as_ref(), "a.yaml");
    assert_eq!(c.ignored.len(), 1);
    assert_eq!(c.ignored[0].unit.as_ref(), "b.yaml");
    assert_eq!(r.rejected.len(), 1);

    // Removing the winner promotes the other definition.
    assert!(s.apply(SourceEvent::Unit {
        source: "files".into(),
        unit: "a.yaml".into(),
        entries: vec![],
    }));
    let r = s.resolve();
    assert!(r.conflicts.is_empty());
    assert_eq!(r.objects.len(), 1);
}

#[test]
fn unchanged_objects_keep_their_encoding_and_placement() {
    let mut s = store(UnknownFields::Reject);
    let first = format!("{}---\n{}", vs("a", "bookinfo", "a"), vs("b", "other", "b"));
    s.apply(unit("files", "x.yaml", &first));
    let before = s.resolve();
    let a1 = before.objects.values().next().unwrap().clone();
    assert_eq!(
        a1.groups.iter().map(|g| g.as_ref()).collect::<Vec<_>>(),
        ["default", "east"]
    );
    let b = before.objects.values().nth(1).unwrap();
    assert_eq!(
        b.groups.iter().map(|g| g.as_ref()).collect::<Vec<_>>(),
        ["default"]
    );

    // Same text again: nothing changed.
    assert!(!s.apply(unit("files", "x.yaml", &first)));
    // Only b changes: a's outcome is reused, not re-encoded.
    let second = format!(
        "{}---\n{}",
        vs("a", "bookinfo", "a"),
        vs("b", "other", "b2")
    );
    assert!(s.apply(unit("files", "x.yaml", &second)));
    let after = s.resolve();
    let a2 = after.objects.values().next().unwrap();
    assert!(Arc::ptr_eq(&a1, a2));
}

#[test]
fn annotation_naming_an_unknown_cluster_rejects_the_object() {
    let mut s = store(UnknownFields::Reject);
    let text = vs("a", "bookinfo", "a").replace(
        "  namespace: bookinfo\n",
        "  namespace: bookinfo\n  annotations:\n    meshhub.io/clusters: north\n",
    );
    s.apply(unit("files", "x.yaml", &text));
    let r = s.resolve();
    assert!(r.objects.is_empty());
    assert!(
        r.rejected[0].reasons[0].contains("unknown cluster(s) north"),
        "{:?}",
        r.rejected
    );
}

#[test]
fn prune_walks_lists_and_dotted_keys() {
    let mut m: Map<String, Value> =
        serde_json::from_str(r#"{"spec": {"a.b": {"c": [{"d": 1, "e": 2}]}}}"#).unwrap();
    assert!(prune(&mut m, "spec.a.b.c[0].e"));
    assert_eq!(
        Value::Object(m.clone()),
        serde_json::json!({"spec": {"a.b": {"c": [{"d": 1}]}}})
    );
    assert!(!prune(&mut m, "spec.a.b.c[3].d"));
    assert!(!prune(&mut m, "spec.zz"));
}

#[test]
fn the_served_definition_is_known_with_its_origin_and_resource_version() {
    let mut s = store(UnknownFields::Reject);
    s.apply(unit("files", "b.yaml", &vs("a", "bookinfo", "a")));
    // As the Kubernetes source delivers it (the file source drops
    // resourceVersion).
    let mut obj = transcode::parse_yaml(&vs("a", "bookinfo", "a"))
        .remove(0)
        .unwrap();
    obj.metadata.resource_version = Some("4711".into());
    s.apply(SourceEvent::Unit {
        source: "kube".into(),
        unit: "bookinfo/a".into(),
        entries: vec![Entry {
            origin: Origin {
                source: "kube".into(),
                unit: "bookinfo/a".into(),
                document: 0,
                line: None,
            },
            parsed: Ok(obj),
            changed_by: None,
        }],
    });
    let r = s.resolve();
    let key = r.objects.keys().next().unwrap().clone();
    // `files` < `kube`: the file's definition is served, without a
    // resourceVersion; the other is the conflict's ignored one.
    assert_eq!(r.origin(&key).unwrap().source.as_ref(), "files");
    assert_eq!(r.objects.get(&key).unwrap().resource_version, None);
    assert_eq!(r.conflicts[0].ignored[0].source.as_ref(), "kube");

    s.apply(SourceEvent::Unit {
        source: "files".into(),
        unit: "b.yaml".into(),
        entries: vec![],
    });
    let r = s.resolve();
    assert_eq!(r.origin(&key).unwrap().unit.as_ref(), "bookinfo/a");
    assert_eq!(
        r.objects.get(&key).unwrap().resource_version.as_deref(),
        Some("4711")
    );
}

/// What a resolution serves, told apart for comparison: each object's
/// name, origin and bytes, the conflicts, the rejected entries' origins.
/// (key, origin, version) of each served object.
type ServedRows = Vec<(String, String, String)>;

fn served_view(r: &Resolved) -> (ServedRows, Vec<Conflict>, Vec<String>) {
    (
        r.objects
            .keys()
            .map(|k| {
                let a = r.objects.get(k).unwrap();
                (
                    k.to_string(),
                    r.objects.origin(k).unwrap().to_string(),
                    a.resource.version.to_string(),
                )
            })
            .collect(),
        r.conflicts.clone(),
        r.rejected
            .iter()
            .map(|x| x.origin.as_ref().unwrap().to_string())
            .collect(),
    )
}

#[test]
fn a_resolution_of_what_changed_equals_one_of_everything() {
    // Three files defining, moving, redefining and dropping four objects
    // (some twice: conflicts; some broken: rejected), in a fixed pseudo-
    // random order. After each change the incremental resolution must
    // serve what a fresh store given the same files serves, and name as
    // changed exactly the objects whose served definition moved.
    let mut seed = 11u64;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let files = ["a.yaml", "b.yaml", "c.yaml"];
    let mut texts: BTreeMap<&str, String> = BTreeMap::new();
    let mut s = store(UnknownFields::Reject);
    let mut last = served_view(&s.resolve());
    for round in 0..200 {
        let file = files[next(3) as usize];
        let mut text = String::new();
        for _ in 0..next(4) {
            let doc = match next(6) {
                0 => "kind: [broken\n".to_owned(),
                k => vs(&format!("o{}", next(4)), "bookinfo", &format!("h{k}")),
            };
            text.push_str(&doc);
            text.push_str("---\n");
        }
        texts.insert(file, text.clone());
        s.apply(unit("files", file, &text));
        let r = s.resolve();
        let mut fresh = store(UnknownFields::Reject);
        for (f, t) in &texts {
            fresh.apply(unit("files", f, t));
        }
        let want = fresh.resolve();
        let now = served_view(&r);
        assert_eq!(now, served_view(&want), "round {round}");
        assert_eq!(
            s.unit_count("files"),
            texts.values().filter(|t| !t.is_empty()).count(),
            "round {round}: units held"
        );
        // The changes name every object whose served bytes moved (an
        // object that only moved within its file keeps its evaluation, and
        // nothing downstream of the resolution reads its origin).
        let Changes::Some(changed) = &r.changes else {
            panic!("round {round}: only the first resolution is of everything");
        };
        let bytes = |v: &[(String, String, String)]| -> BTreeSet<(String, String)> {
            v.iter().map(|(k, _, b)| (k.clone(), b.clone())).collect()
        };
        let (before, after) = (bytes(&last.0), bytes(&now.0));
        let moved: BTreeSet<String> = before
            .symmetric_difference(&after)
            .map(|(k, _)| k.clone())
            .collect();
        let named: BTreeSet<String> = changed
            .iter()
            .map(|c| {
                c.after
                    .as_ref()
                    .or(c.before.as_ref())
                    .unwrap()
                    .key
                    .to_string()
            })
            .collect();
        assert!(
            moved.is_subset(&named),
            "round {round}: moved {moved:?}, named {named:?}"
        );
        last = now;
    }
}

use serde_json::json;

use super::*;

/// A small CRD written for these tests, with the constructs the Gateway
/// API's CRDs use.
const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        required: [spec]
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          status: {type: object, properties: {ok: {type: boolean}}}
          spec:
            type: object
            properties:
              port: {type: integer, format: int32, minimum: 1, maximum: 65535}
              weight: {type: number}
              mode: {type: string, enum: [Fast, Slow], default: Fast}
              host:
                type: string
                maxLength: 10
                pattern: '^[a-z.]+$'
              address: {type: string, format: ipv4}
              hostnames:
                type: array
                maxItems: 3
                x-kubernetes-list-type: set
                items: {type: string}
                x-kubernetes-validations:
                - rule: self.all(h, !isIP(h))
                  message: hostnames must not be IP addresses
              listeners:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    protocol: {type: string, default: HTTP}
                    port: {type: integer}
                x-kubernetes-validations:
                - rule: "self.all(l1, !has(l1.port) || self.exists_one(l2, has(l2.port) && l1.port == l2.port))"
                  message: ports are unique
              timeouts:
                type: object
                properties:
                  request: {type: string}
                  backend: {type: string}
                x-kubernetes-validations:
                - rule: "!(has(self.request) && has(self.backend) && duration(self.backend) > duration(self.request))"
                  message: backend must not exceed request
              labels:
                type: object
                additionalProperties: {type: string, maxLength: 5}
              name:
                type: string
                x-kubernetes-validations:
                - rule: self == oldSelf
                  message: immutable
                - rule: self.frobnicate()
            x-kubernetes-validations:
            - rule: "self.mode == 'Fast' ? !has(self.weight) : true"
              message: a fast widget has no weight
              fieldPath: .weight
            - rule: "!has(self.port) || self.port != 22"
              message: not ssh
            - rule: "self.mode == 'Slow' ? has(self.port) : true"
              message: a slow widget has a port
"#;

fn crds() -> CrdSchemas {
    let mut c = CrdSchemas::default();
    assert_eq!(c.add_yaml(CRD, "test").expect("CRD loads"), 1);
    c
}

fn widget(spec: Value) -> Object {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": spec,
    }))
    .expect("object")
}

fn problems(spec: Value) -> Vec<String> {
    crds()
        .problems(&widget(spec))
        .expect("the CRD covers Widget v1")
        .into_iter()
        .map(|p| p.to_string())
        .collect()
}

#[test]
fn a_valid_object_passes_with_its_defaults_seen_by_the_rules() {
    // `mode` defaults to Fast, so the rule on spec sees it and refuses a
    // weight: defaults are filled in before the rules run.
    assert_eq!(problems(json!({"port": 80})), Vec::<String>::new());
    assert_eq!(
        problems(json!({"weight": 1.5})),
        vec!["spec.weight: a fast widget has no weight"]
    );
    assert_eq!(
        problems(json!({"weight": 2, "mode": "Slow", "port": 1})),
        Vec::<String>::new()
    );
}

#[test]
fn schema_rules_each_name_their_field() {
    let found = problems(json!({
        "port": 0,
        "mode": "Medium",
        "host": "Not-Valid-And-Long",
        "address": "::1",
        "hostnames": ["a", "b", "a", "d"],
        "listeners": [{"name": "x"}, {"name": "x", "protocol": "TCP"}, {"protocol": "UDP"}],
        "labels": {"k": "toolong"},
        "unknown": 1,
    }));
    let expect = [
        "spec.port: must be at least 1",
        "spec.mode: unsupported value \"Medium\"",
        "spec.host: too long",
        "spec.host: \"Not-Valid-And-Long\" does not match",
        "spec.address: \"::1\" is not a valid ipv4",
        "spec.hostnames: too many items",
        "spec.hostnames[2]: duplicate value \"a\"",
        "spec.listeners[1]: duplicate entry with name=\"x\"",
        "spec.listeners[2].name: required",
        "spec.labels[\"k\"]: too long",
        "spec.unknown: unknown field",
    ];
    for e in expect {
        assert!(
            found.iter().any(|f| f.starts_with(e)),
            "{e:?} not in {found:#?}"
        );
    }
    assert_eq!(found.len(), expect.len(), "{found:#?}");
}

#[test]
fn an_integer_with_a_fraction_passes_the_schema_but_not_a_rule_that_reads_it() {
    // The API server's OpenAPI check takes 80.0 as an integer; its CEL
    // does not (invalid data, expected int), in a rule that reads it.
    assert_eq!(problems(json!({"port": 22})), vec!["spec: not ssh"]);
    assert_eq!(
        problems(json!({"mode": "Slow"})),
        vec!["spec: a slow widget has a port"]
    );
    // 22.0 makes `self.port != 22` false where 22 does not: the rule reads
    // the field, which the API server refuses to hand CEL.
    let f = problems(json!({"port": 22.0}));
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].starts_with(
            "spec: rule \"!has(self.port) || self.port != 22\": evaluation error: invalid data"
        ),
        "{f:?}"
    );
    // No rule reads `weight` of a Slow widget as an int: a number field.
    assert_eq!(
        problems(json!({"weight": 2.0, "mode": "Slow", "port": 1})),
        Vec::<String>::new()
    );
    // A rule that never gets to the field (the other branch of `?:`)
    // passes; one that tests it with `has` fails.
    let f = problems(json!({"port": 80.0, "mode": "Slow"}));
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].contains("self.mode == 'Slow'") && f[0].contains("invalid data"),
        "{f:?}"
    );
    assert_eq!(problems(json!({"port": 80.0})), Vec::<String>::new());
    // Compared with itself, as a uniqueness rule does.
    assert_eq!(
        problems(json!({"listeners": [{"name": "a", "port": 80}, {"name": "b", "port": 81}]})),
        Vec::<String>::new()
    );
    assert_eq!(
        problems(json!({"listeners": [{"name": "a", "port": 80}, {"name": "b", "port": 80}]})),
        vec!["spec.listeners: ports are unique"]
    );
    let f = problems(json!({"listeners": [{"name": "a", "port": 80.0}]}));
    assert!(
        f.len() == 1 && f[0].starts_with("spec.listeners: rule") && f[0].contains("invalid data"),
        "{f:?}"
    );
}

#[test]
fn a_wrong_type_is_reported_and_the_rules_are_not_run_over_it() {
    let found = problems(json!({"port": "80", "weight": 1}));
    assert_eq!(
        found,
        vec!["spec.port: must be of type integer, not string"]
    );
}

#[test]
fn null_fields_are_dropped_or_defaulted_as_the_api_server_does() {
    assert_eq!(
        problems(json!({"port": null, "mode": null})),
        Vec::<String>::new()
    );
    let f = problems(json!({"mode": null, "weight": 1}));
    assert_eq!(f, vec!["spec.weight: a fast widget has no weight"]);
}

#[test]
fn cel_functions_of_kubernetes_are_evaluated() {
    assert_eq!(
        problems(json!({"hostnames": ["example.com", "10.0.0.1"]})),
        vec!["spec.hostnames: hostnames must not be IP addresses"]
    );
    assert_eq!(
        problems(json!({"hostnames": ["::ffff:10.0.0.1"]})),
        Vec::<String>::new()
    );
    assert_eq!(
        problems(json!({"timeouts": {"request": "1s", "backend": "1500ms"}})),
        vec!["spec.timeouts: backend must not exceed request"]
    );
    assert_eq!(
        problems(json!({"timeouts": {"request": "1m", "backend": "59.5s"}})),
        Vec::<String>::new()
    );
    let f = problems(json!({"timeouts": {"request": "soon", "backend": "1s"}}));
    assert!(
        f[0].contains("evaluation error") && f[0].contains("invalid duration"),
        "{f:?}"
    );
}

#[test]
fn transition_rules_are_skipped_and_unknown_functions_are_listed() {
    assert_eq!(problems(json!({"name": "x"})), Vec::<String>::new());
    let c = crds();
    let skipped = c.not_evaluated();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].rule, "self.frobnicate()");
    assert_eq!(skipped[0].label(), "example.com/v1 Widget");
    assert_eq!(
        skipped[0].reason,
        super::program::Unevaluated::Functions(vec!["frobnicate".into()])
    );
}

#[test]
fn status_is_left_out_and_unknown_top_level_fields_are_refused() {
    let mut obj = widget(json!({}));
    obj.content
        .insert("status".into(), json!({"ok": "not a bool"}));
    obj.content.insert("extra".into(), json!(1));
    let found: Vec<String> = crds()
        .problems(&obj)
        .expect("covered")
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(found, vec!["extra: unknown field"]);
}

#[test]
fn only_served_group_kind_versions_are_covered() {
    let c = crds();
    assert!(c.covers("example.com", "Widget", "v1"));
    assert!(!c.covers("example.com", "Widget", "v2"));
    let mut other = widget(json!({}));
    other.api_version = "example.com/v2".into();
    assert!(c.problems(&other).is_none());
    assert_eq!(c.kinds(), vec!["example.com/v1 Widget"]);
}

#[test]
fn a_bad_schema_is_refused_with_where() {
    let bad = CRD.replace("'^[a-z.]+$'", "'^[a-z'");
    let err = CrdSchemas::default()
        .add_yaml(&bad, "bad.yaml")
        .unwrap_err();
    let m = err.to_string();
    assert!(
        m.starts_with("bad.yaml: CustomResourceDefinition widgets.example.com version v1: "),
        "{m}"
    );
    assert!(m.contains("properties.host.pattern"), "{m}");
}

#[test]
fn go_durations_parse_as_go_parses_them() {
    use super::program::parse_duration;
    assert_eq!(parse_duration("0"), Ok(0));
    assert_eq!(parse_duration("1h30m"), Ok(5_400_000_000_000));
    assert_eq!(parse_duration("1.5s"), Ok(1_500_000_000));
    assert_eq!(parse_duration("-2ms"), Ok(-2_000_000));
    assert_eq!(parse_duration("10us"), Ok(10_000));
    for bad in ["", "1", "s", "1x", "1h-1m", ".s"] {
        assert!(parse_duration(bad).is_err(), "{bad:?}");
    }
}

/// A CRD whose root declares only `spec`, with rules that read a property
/// named by a CEL reserved word, the object's name, and nullable fields.
const ESCAPES: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: refs.example.com}
spec:
  group: example.com
  names: {kind: Ref, plural: refs}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-validations:
        - {rule: "self.metadata.name != 'forbidden'", message: name is forbidden}
        properties:
          spec:
            type: object
            properties:
              namespace: {type: string}
              dash-ed: {type: string}
              note: {type: string, nullable: true, x-kubernetes-validations: [{rule: "self != ''", message: empty note}]}
            x-kubernetes-validations:
            - {rule: "!has(self.__namespace__) || self.__namespace__ != 'kube-system'", message: not kube-system}
            - {rule: "!has(self.dash__dash__ed) || self.dash__dash__ed != 'x'", message: not x}
"#;

fn refs(name: &str, spec: Value) -> Vec<String> {
    let mut c = CrdSchemas::default();
    c.add_yaml(ESCAPES, "test").expect("CRD loads");
    let obj: Object = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Ref",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec,
    }))
    .unwrap();
    c.problems(&obj)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn properties_reach_cel_by_their_escaped_names_and_the_root_sees_the_name() {
    // apiVersion and kind are not in the root schema: not unknown fields.
    assert_eq!(
        refs("ok", json!({"namespace": "shop"})),
        Vec::<String>::new()
    );
    assert_eq!(
        refs("ok", json!({"namespace": "kube-system"})),
        vec!["spec: not kube-system"]
    );
    assert_eq!(refs("ok", json!({"dash-ed": "x"})), vec!["spec: not x"]);
    assert_eq!(refs("forbidden", json!({})), vec![": name is forbidden"]);
    // A rule does not run over a null.
    assert_eq!(refs("ok", json!({"note": null})), Vec::<String>::new());
    assert_eq!(
        refs("ok", json!({"note": ""})),
        vec!["spec.note: empty note"]
    );
}

#[test]
fn kubernetes_escaping_of_property_names() {
    use super::rules::escape;
    assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
    assert_eq!(
        escape("a-b.c/d").as_deref(),
        Some("a__dash__b__dot__c__slash__d")
    );
    assert_eq!(escape("x__y").as_deref(), Some("x__underscores__y"));
    assert_eq!(escape("plain_name1").as_deref(), Some("plain_name1"));
    assert_eq!(escape("1st"), None);
    assert_eq!(escape("a b"), None);
}

#[test]
fn a_broken_document_or_a_keyless_list_map_is_an_error_not_a_skip() {
    let err = CrdSchemas::default()
        .add_yaml(&format!("{CRD}\n---\nkind: [oops\n"), "f.yaml")
        .unwrap_err();
    assert!(err.to_string().starts_with("f.yaml: document 2 "), "{err}");
    let keyless = CRD.replace("                x-kubernetes-list-map-keys: [name]\n", "");
    let err = CrdSchemas::default()
        .add_yaml(&keyless, "k.yaml")
        .unwrap_err();
    assert!(
        err.to_string().contains("x-kubernetes-list-map-keys"),
        "{err}"
    );
    let bad_type = CRD.replace("weight: {type: number}", "weight: {type: float}");
    let err = CrdSchemas::default()
        .add_yaml(&bad_type, "t.yaml")
        .unwrap_err();
    assert!(err.to_string().contains("properties.weight.type"), "{err}");
}

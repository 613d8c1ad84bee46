use prost::encoding::{WireType, encode_key, encode_varint};
use prost_reflect::{ReflectMessage as _, Value as PValue};
use serde_json::json;

use super::*;

const REVIEWS: &str = r#"
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
  labels:
    app: reviews
  annotations:
    note: canary
spec:
  hosts:
  - reviews
  http:
  - route:
    - destination:
        host: reviews
        subset: v1
      weight: 75
    - destination:
        host: reviews
        subset: v2
      weight: 25
"#;

fn one(text: &str) -> Object {
    let mut objs = parse_yaml(text);
    assert_eq!(objs.len(), 1, "{objs:?}");
    objs.remove(0).expect("parses")
}

fn vs() -> Kind {
    KindTable::builtin()
        .by_collection("istio/networking/v1alpha3/virtualservices")
        .expect("VirtualService")
        .clone()
}

fn kind(name: &str) -> Kind {
    KindTable::builtin()
        .iter()
        .find(|k| k.kind() == name)
        .expect("builtin kind")
        .clone()
}

fn encode_err(kind: &Kind, text: &str) -> TranscodeError {
    object_to_resource(kind, &one(text)).expect_err("must be rejected")
}

#[test]
fn virtual_service_becomes_a_resource() {
    let obj = one(REVIEWS);
    let t = KindTable::builtin();
    let k = kind_of(&t, &obj).expect("known kind");
    assert_eq!(k.kind(), "VirtualService");
    let res = object_to_resource(k, &obj).expect("transcodes");
    let meta = res.metadata.as_ref().expect("metadata");
    assert_eq!(
        meta.name, "default/reviews",
        "namespace defaults to default"
    );
    assert_eq!(meta.version.len(), CONTENT_VERSION_LEN);
    assert!(
        meta.version.chars().all(|c| c.is_ascii_hexdigit()),
        "{}",
        meta.version
    );
    assert_eq!(meta.labels.get("app").map(String::as_str), Some("reviews"));
    assert_eq!(
        meta.annotations.get("note").map(String::as_str),
        Some("canary")
    );
    assert_eq!(meta.create_time, None);
    let body = res.body.as_ref().expect("body");
    assert_eq!(
        body.type_url,
        "type.googleapis.com/istio.networking.v1alpha3.VirtualService"
    );

    // The body is the VirtualService message: check a field through reflection.
    let desc = k.descriptor().expect("schema");
    let msg = DynamicMessage::decode(desc, body.value.as_slice()).expect("decodes");
    let hosts = msg.get_field_by_name("hosts").expect("hosts");
    assert_eq!(hosts.as_list().map(<[_]>::len), Some(1));

    let back = resource_to_object(k, &res).expect("back");
    assert_eq!(back.api_version, "networking.istio.io/v1");
    assert_eq!(back.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(back.metadata.name, "reviews");
    assert_eq!(back.metadata.labels, obj.metadata.labels);
    assert_eq!(back.metadata.annotations, obj.metadata.annotations);
    assert_eq!(back.spec(), obj.spec(), "this spec has no defaults to drop");

    let bytes = encode_object(k, &obj).expect("encodes");
    assert_eq!(bytes.as_ref(), res.encode_to_vec().as_slice());
    assert_eq!(decode_resource(k, &bytes).expect("decodes"), back);
}

#[test]
fn resource_version_and_creation_time_are_carried() {
    let mut obj = one(REVIEWS);
    obj.metadata.namespace = Some("bookinfo".to_owned());
    obj.metadata.resource_version = Some("4711".to_owned());
    obj.metadata.creation_timestamp = Some("2024-05-06T07:08:09.5Z".to_owned());
    let res = object_to_resource(&vs(), &obj).expect("transcodes");
    let meta = res.metadata.as_ref().expect("metadata");
    assert_eq!(meta.name, "bookinfo/reviews");
    assert_eq!(meta.version, "4711");
    let t = meta.create_time.expect("create time");
    assert_eq!((t.seconds, t.nanos), (1_714_979_289, 500_000_000));
    let back = resource_to_object(&vs(), &res).expect("back");
    assert_eq!(
        back.metadata.creation_timestamp.as_deref(),
        Some("2024-05-06T07:08:09.500Z")
    );
    assert_eq!(back.metadata.resource_version, None);

    obj.metadata.creation_timestamp = Some("yesterday".to_owned());
    let err = object_to_resource(&vs(), &obj).expect_err("bad time");
    assert!(matches!(err, TranscodeError::BadTimestamp { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "VirtualService bookinfo/reviews: metadata.creationTimestamp \"yesterday\" is not an RFC 3339 time"
    );
}

fn version_of(obj: &Object) -> String {
    object_to_resource(&vs(), obj)
        .expect("transcodes")
        .metadata
        .expect("metadata")
        .version
}

#[test]
fn content_version_changes_with_content_only() {
    let base = one(REVIEWS);
    let v = version_of(&base);
    assert_eq!(version_of(&base.clone()), v, "same content, same version");

    let mut renamed = base.clone();
    renamed.metadata.namespace = Some("other".to_owned());
    assert_eq!(version_of(&renamed), v, "the name is not content");

    let mut spec = base.clone();
    spec.content["spec"]["http"][0]["route"][0]["weight"] = json!(70);
    let mut label = base.clone();
    label
        .metadata
        .labels
        .insert("app".to_owned(), "ratings".to_owned());
    let mut annotation = base.clone();
    annotation.metadata.annotations.clear();
    // Moving a value between labels and annotations is a change too.
    let mut moved = base.clone();
    moved.metadata.labels.clear();
    moved
        .metadata
        .annotations
        .insert("app".to_owned(), "reviews".to_owned());
    let versions = [&spec, &label, &annotation, &moved].map(version_of);
    for (i, w) in versions.iter().enumerate() {
        assert_ne!(*w, v, "change {i} must change the version");
    }
    let unique: std::collections::HashSet<_> = versions.iter().collect();
    assert_eq!(unique.len(), versions.len());
}

/// Map entries are encoded in key order: the bytes (and so the version)
/// don't depend on hash-map iteration order.
#[test]
fn bodies_with_maps_encode_deterministically() {
    let text = r#"
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews}
spec:
  host: reviews
  subsets:
  - name: v1
    labels: {a: "1", b: "2", c: "3", d: "4", e: "5", f: "6", g: "7", h: "8"}
"#;
    let k = kind("DestinationRule");
    let obj = one(text);
    let first = encode_object(&k, &obj).expect("encodes");
    for _ in 0..16 {
        assert_eq!(encode_object(&k, &obj).expect("encodes"), first);
    }
    // Entry `a` comes first: tag of Subset.labels (field 2, wire type 2) then
    // the entry's length, key tag, key length and key.
    let needle = [0x12, 0x06, 0x0a, 0x01, b'a', 0x12, 0x01, b'1'];
    let res = Resource::decode(first.as_ref()).expect("resource");
    let body = res.body.expect("body").value;
    let at = body
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("entry a");
    let b_at = body
        .windows(3)
        .position(|w| w == [0x0a, 0x01, b'b'])
        .expect("entry b");
    assert!(at < b_at, "entries in key order");
}

#[test]
fn unknown_field_names_kind_object_and_path() {
    let text = REVIEWS.replace(
        "        host: reviews\n        subset: v1",
        "        hots: reviews\n        subset: v1",
    );
    let err = encode_err(&vs(), &text);
    assert_eq!(
        err.to_string(),
        "VirtualService default/reviews: spec.http[0].route[0].destination.hots: unknown field"
    );
    match err {
        TranscodeError::UnknownField { path, .. } => {
            assert_eq!(path, "spec.http[0].route[0].destination.hots");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn wrong_type_names_the_field() {
    let text = REVIEWS.replace("weight: 25", "weight: lots");
    let err = encode_err(&vs(), &text);
    let msg = err.to_string();
    assert!(
        msg.starts_with("VirtualService default/reviews: spec.http[0].route[1].weight: "),
        "{msg}"
    );
    assert!(msg.ends_with("(got \"lots\")"), "{msg}");
    // A known field with a bad value is not an unknown one.
    assert!(
        matches!(encode_err(&vs(), &text), TranscodeError::Field { .. }),
        "{msg}"
    );

    let text = REVIEWS.replace("  hosts:\n  - reviews", "  hosts: reviews");
    let msg = encode_err(&vs(), &text).to_string();
    assert!(msg.contains(": spec.hosts: "), "{msg}");
}

#[test]
fn bad_enum_value_lists_the_allowed_ones() {
    let text = r#"
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews
  trafficPolicy:
    tls:
      mode: ISTIO_MUTAL
"#;
    let msg = encode_err(&kind("DestinationRule"), text).to_string();
    assert!(
        msg.starts_with(
            "DestinationRule shop/reviews: spec.trafficPolicy.tls.mode: unknown enum value \"ISTIO_MUTAL\" (expected one of "
        ),
        "{msg}"
    );
    assert!(msg.contains("ISTIO_MUTUAL"), "{msg}");
}

#[test]
fn unknown_top_level_field_is_an_error_and_status_is_dropped() {
    let text = format!("{REVIEWS}specs: {{}}\n");
    let err = encode_err(&vs(), &text);
    assert_eq!(
        err.to_string(),
        "VirtualService default/reviews: specs: unknown field"
    );
    assert!(
        matches!(&err, TranscodeError::UnknownField { path, .. } if path == "specs"),
        "{err:?}"
    );

    let text = format!("{REVIEWS}status: {{observedGeneration: 3}}\n");
    let with_status = object_to_resource(&vs(), &one(&text)).expect("status is allowed");
    let without = object_to_resource(&vs(), &one(REVIEWS)).expect("transcodes");
    assert_eq!(with_status, without);
}

#[test]
fn a_missing_spec_is_an_empty_message() {
    let obj = one("apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s}\n");
    let res = object_to_resource(&kind("Sidecar"), &obj).expect("transcodes");
    assert!(res.body.expect("body").value.is_empty());
}

#[test]
fn names_kinds_and_versions_are_checked() {
    let t = KindTable::builtin();
    let no_name = one("apiVersion: networking.istio.io/v1\nkind: VirtualService\nspec: {}\n");
    let err = object_to_resource(&vs(), &no_name).expect_err("no name");
    assert_eq!(
        err.to_string(),
        "VirtualService: object has no metadata.name"
    );

    let slash =
        one("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a/b}\n");
    assert!(matches!(
        object_to_resource(&vs(), &slash),
        Err(TranscodeError::InvalidName { .. })
    ));

    let unknown =
        one("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: ns}\n");
    let err = kind_of(&t, &unknown).expect_err("unknown");
    assert_eq!(
        err.to_string(),
        "Widget ns/w: unknown kind (apiVersion \"example.com/v1\")"
    );

    let unserved =
        one("apiVersion: networking.istio.io/v2\nkind: VirtualService\nmetadata: {name: r}\n");
    let err = kind_of(&t, &unserved).expect_err("unserved");
    assert_eq!(
        err.to_string(),
        "VirtualService r: apiVersion \"networking.istio.io/v2\" is not served (served: v1, v1beta1, v1alpha3)"
    );

    let gateway = one("apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g}\n");
    let err = object_to_resource(&vs(), &gateway).expect_err("wrong kind");
    assert!(matches!(err, TranscodeError::WrongKind { .. }), "{err}");
}

#[test]
fn bad_resources_are_rejected_clearly() {
    let k = vs();
    let good = object_to_resource(&k, &one(REVIEWS)).expect("transcodes");

    let mut wrong_type = good.clone();
    if let Some(b) = wrong_type.body.as_mut() {
        b.type_url = "type.googleapis.com/istio.networking.v1alpha3.Gateway".to_owned();
    }
    let err = resource_to_object(&k, &wrong_type).expect_err("body type");
    assert_eq!(
        err.to_string(),
        "VirtualService default/reviews: body type \"type.googleapis.com/istio.networking.v1alpha3.Gateway\", \
         expected \"type.googleapis.com/istio.networking.v1alpha3.VirtualService\""
    );

    let mut garbage = good.clone();
    if let Some(b) = garbage.body.as_mut() {
        b.value = vec![0x0a, 0x05, b'x']; // hosts: length 5, 1 byte present
    }
    let err = resource_to_object(&k, &garbage).expect_err("undecodable");
    assert!(
        matches!(err, TranscodeError::Undecodable { what: "body", .. }),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "VirtualService default/reviews: undecodable body"
    );
    assert!(
        std::error::Error::source(&err).is_some(),
        "the decoder's error is the source"
    );

    let mut no_body = good.clone();
    no_body.body = None;
    assert!(matches!(
        resource_to_object(&k, &no_body),
        Err(TranscodeError::MissingBody { .. })
    ));

    let mut bad_name = good.clone();
    if let Some(m) = bad_name.metadata.as_mut() {
        m.name = "reviews".to_owned();
    }
    assert!(matches!(
        resource_to_object(&k, &bad_name),
        Err(TranscodeError::InvalidName { .. })
    ));

    assert!(matches!(
        decode_resource(&k, &[0xff]),
        Err(TranscodeError::Undecodable {
            what: "resource",
            ..
        })
    ));
}

#[test]
fn schemaless_kinds_travel_as_struct() {
    let cm = Kind::schemaless("", "v1", "ConfigMap", "configmaps", true).expect("kind");
    let ns = Kind::schemaless("", "v1", "Namespace", "namespaces", false).expect("kind");
    let obj = one(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: prod}\n\
         data: {a: x}\nreplicas: 3\nratio: 0.5\nstatus: {phase: Ready}\n",
    );
    let res = object_to_resource(&cm, &obj).expect("transcodes");
    assert_eq!(
        res.body.as_ref().map(|b| b.type_url.as_str()),
        Some("type.googleapis.com/google.protobuf.Struct")
    );
    let back = resource_to_object(&cm, &res).expect("back");
    assert_eq!(back.api_version, "v1");
    assert_eq!(
        Value::Object(back.content.clone()),
        json!({"data": {"a": "x"}, "replicas": 3, "ratio": 0.5}),
        "status is dropped, whole numbers stay integers"
    );

    let cluster = one("apiVersion: v1\nkind: Namespace\nmetadata: {name: prod}\n");
    let res = object_to_resource(&ns, &cluster).expect("transcodes");
    assert_eq!(
        res.metadata.as_ref().map(|m| m.name.as_str()),
        Some("/prod")
    );
    let back = resource_to_object(&ns, &res).expect("back");
    assert_eq!(back.metadata.namespace, None);
    assert_eq!(back.metadata.name, "prod");
}

#[test]
fn output_uses_kubernetes_friendly_numbers() {
    let text = r#"
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: r}
spec:
  host: r
  trafficPolicy:
    loadBalancer:
      consistentHash:
        httpHeaderName: x-user
        minimumRingSize: "1024"
    outlierDetection:
      maxEjectionPercent: 50
"#;
    let k = kind("DestinationRule");
    let back = resource_to_object(&k, &object_to_resource(&k, &one(text)).expect("transcodes"))
        .expect("back");
    let lb = &back.content["spec"]["trafficPolicy"]["loadBalancer"]["consistentHash"];
    assert_eq!(
        lb["minimumRingSize"],
        json!(1024),
        "uint64 as a JSON number"
    );
    assert_eq!(
        back.content["spec"]["trafficPolicy"]["outlierDetection"]["maxEjectionPercent"],
        json!(50)
    );
}

#[test]
fn yaml_documents_are_numbered_and_errors_have_lines() {
    let text = "\
---
apiVersion: v1
kind: ConfigMap
metadata: {name: a}
---
# nothing here
---
apiVersion: v1
kind: ConfigMap
metadata: {name: b
---
kind: ConfigMap
metadata: {name: c}
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: d}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: 7}}
";
    let results = parse_yaml(text);
    assert_eq!(results.len(), 5, "{results:#?}");
    assert_eq!(
        results[0].as_ref().map(|o| o.metadata.name.as_str()),
        Ok("a")
    );

    let e = results[1].as_ref().expect_err("syntax error");
    assert_eq!(e.document, 3, "the empty document 2 is counted");
    assert_eq!(e.start_line, 7);
    let line = e.line.expect("saphyr knows the line");
    assert!((10..=11).contains(&line), "{e}");
    assert!(
        e.to_string()
            .starts_with(&format!("document 3 (line {line}): ")),
        "{e}"
    );

    let e = results[2].as_ref().expect_err("no apiVersion");
    assert_eq!(e.document, 4);
    assert!(e.message.contains("apiVersion"), "{e}");
    assert_eq!(
        e.to_string(),
        format!("document 4 (from line 11): {}", e.message)
    );

    assert_eq!(
        results[3].as_ref().map(|o| o.metadata.name.as_str()),
        Ok("d")
    );
    let e = results[4].as_ref().expect_err("a number is no name");
    assert_eq!(e.document, 5);
    assert!(e.message.starts_with("items[1].metadata.name: "), "{e}");
}

#[test]
fn integer_map_keys_read_as_strings() {
    let text = r#"
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: p}
spec:
  portLevelMtls:
    8080:
      mode: STRICT
"#;
    let k = kind("PeerAuthentication");
    let back = resource_to_object(&k, &object_to_resource(&k, &one(text)).expect("transcodes"))
        .expect("back");
    assert_eq!(
        back.content["spec"],
        json!({"portLevelMtls": {"8080": {"mode": "STRICT"}}})
    );
}

#[test]
fn json_texts_hold_objects_arrays_and_streams() {
    let text = r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
[{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}, 3]
{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"
"#;
    let results = parse_json(text);
    assert_eq!(results.len(), 4, "{results:#?}");
    assert_eq!(
        results[0].as_ref().map(|o| o.metadata.name.as_str()),
        Ok("a")
    );
    assert_eq!(
        results[1].as_ref().map(|o| o.metadata.name.as_str()),
        Ok("b")
    );
    let e = results[2].as_ref().expect_err("3 is no object");
    assert_eq!((e.document, e.start_line), (3, 2));
    let e = results[3].as_ref().expect_err("truncated");
    assert_eq!((e.document, e.start_line), (4, 3));
    assert!(e.line.is_some(), "{e}");
}

#[test]
fn documents_over_the_size_limit_are_reported_and_the_others_read() {
    let big = "x".repeat(300);
    let yaml = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: big}}\ndata: {{k: {big}}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\n"
    );
    let results = parse_yaml_limited(&yaml, 200);
    assert_eq!(results.len(), 3, "{results:#?}");
    assert_eq!(
        results[0].as_ref().map(|o| o.metadata.name.as_str()),
        Ok("a")
    );
    let e = results[1].as_ref().expect_err("too large");
    assert_eq!((e.document, e.start_line), (2, 4));
    assert!(
        e.message
            .ends_with("bytes exceed maxObjectSize (200 bytes); not parsed"),
        "{e}"
    );
    assert_eq!(
        results[2].as_ref().map(|o| o.metadata.name.as_str()),
        Ok("c")
    );
    assert_eq!(parse_yaml(&yaml).iter().filter(|r| r.is_ok()).count(), 3);

    let cm = |name: &str, data: &str| {
        format!(
            r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "{name}"}}, "data": {{"k": "{data}"}}}}"#
        )
    };
    // A stream of a small value, an oversized array with one oversized
    // element, and an oversized value.
    let json = format!(
        "{}\n[{}, \n {}, {}]\n{}\n",
        cm("a", ""),
        cm("b", ""),
        cm("big", &big),
        cm("c", ""),
        cm("big2", &big)
    );
    let results = parse_json_limited(&json, 200);
    let names: Vec<_> = results
        .iter()
        .map(|r| {
            r.as_ref()
                .map(|o| o.metadata.name.clone())
                .map_err(|e| (e.document, e.start_line))
        })
        .collect();
    assert_eq!(
        names,
        vec![
            Ok("a".to_owned()),
            Ok("b".to_owned()),
            Err((3, 3)),
            Ok("c".to_owned()),
            Err((5, 4)),
        ]
    );
    let e = results[2].as_ref().expect_err("too large");
    assert!(
        e.message.contains("exceed maxObjectSize (200 bytes)"),
        "{e}"
    );
    assert_eq!(parse_json(&json).iter().filter(|r| r.is_ok()).count(), 5);
}

#[test]
fn objects_render_as_json_and_yaml_that_read_back() {
    let obj = one(REVIEWS);
    let json = to_json(&obj).expect("json");
    let yaml = to_yaml(&obj).expect("yaml");
    assert!(
        json.contains("\"apiVersion\": \"networking.istio.io/v1\""),
        "{json}"
    );
    assert!(yaml.contains("kind: VirtualService"), "{yaml}");
    assert_eq!(parse_json(&json), vec![Ok(obj.clone())]);
    assert_eq!(parse_yaml(&yaml), vec![Ok(obj)]);
}

/// The encoding before messages without maps were handed to prost-reflect
/// whole: every field taken apart. Kept as the reference that the faster
/// path writes the same bytes (a body's bytes are hashed into its version,
/// so a change would move every version on upgrade).
fn encode_every_field(msg: &DynamicMessage, out: &mut Vec<u8>) {
    let desc = msg.descriptor();
    for (field, value) in msg.fields() {
        let number = field.number();
        let nested = |m: &DynamicMessage, out: &mut Vec<u8>| {
            let mut body = Vec::new();
            encode_every_field(m, &mut body);
            encode_key(number, WireType::LengthDelimited, out);
            encode_varint(body.len() as u64, out);
            out.extend_from_slice(&body);
        };
        match value {
            PValue::Map(entries) => {
                let entry_desc = field.kind().as_message().cloned().expect("entry");
                let mut sorted: Vec<_> = entries.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(b.0));
                for (k, v) in sorted {
                    let mut entry = DynamicMessage::new(entry_desc.clone());
                    entry.set_field(&entry_desc.map_entry_key_field(), PValue::from(k.clone()));
                    entry.set_field(&entry_desc.map_entry_value_field(), v.clone());
                    nested(&entry, out);
                }
            }
            PValue::Message(m) => nested(m, out),
            PValue::List(items) if items.iter().all(|i| matches!(i, PValue::Message(_))) => {
                for item in items {
                    if let PValue::Message(m) = item {
                        nested(m, out);
                    }
                }
            }
            scalar => {
                let mut single = DynamicMessage::new(desc.clone());
                single.set_field(&field, scalar.clone());
                single.encode_raw(out);
            }
        }
    }
}

/// Every object of the Istio fixtures (`../shared/fixtures/istio`).
pub(super) fn fixture_objects() -> Vec<Object> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/istio");
    let mut objects = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(root)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("fixtures") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                let text = std::fs::read_to_string(&path).expect("fixture");
                objects.extend(parse_yaml(&text).into_iter().flatten());
            }
        }
    }
    objects
}

#[test]
fn every_fixture_body_encodes_as_every_field_taken_apart() {
    let kinds = KindTable::builtin();
    let (mut with_maps, mut without) = (0, 0);
    for obj in fixture_objects() {
        let Ok(kind) = kind_of(&kinds, &obj) else {
            continue;
        };
        let Some(desc) = kind.descriptor() else {
            continue;
        };
        let Some(spec) = obj.spec() else { continue };
        let Ok(msg) = spec_to_message(&desc, spec) else {
            continue;
        };
        let (mut fast, mut reference) = (Vec::new(), Vec::new());
        encode_canonical(&msg, &mut fast);
        encode_every_field(&msg, &mut reference);
        assert_eq!(fast, reference, "{} {}", obj.kind, obj.metadata.name);
        if holds_map(&msg) {
            with_maps += 1;
        } else {
            without += 1;
        }
    }
    assert!(
        with_maps >= 5 && without >= 5,
        "{with_maps} with maps, {without} without"
    );
}

#[test]
fn null_map_values_read_as_absent() {
    let k = kind("DestinationRule");
    let with_null = one(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: r, namespace: default}\nspec:\n  host: r\n  subsets:\n  - name: v1\n    labels: {version: null, app: r}\n",
    );
    let without = one(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: r, namespace: default}\nspec:\n  host: r\n  subsets:\n  - name: v1\n    labels: {app: r}\n",
    );
    let a = object_to_resource(&k, &with_null).expect("a null label value is dropped");
    let b = object_to_resource(&k, &without).expect("transcodes");
    assert_eq!(a.body, b.body);
    // A message-valued map's null value too.
    let k = kind("Telemetry");
    let telemetry = |tags: &str| {
        one(&format!(
            "apiVersion: telemetry.istio.io/v1\nkind: Telemetry\nmetadata: {{name: t, namespace: default}}\nspec:\n  tracing:\n  - customTags: {{{tags}}}\n"
        ))
    };
    let a = object_to_resource(&k, &telemetry("route: null, a: {literal: {value: x}}"))
        .expect("a null custom tag is dropped");
    let b = object_to_resource(&k, &telemetry("a: {literal: {value: x}}")).expect("transcodes");
    assert_eq!(a.body, b.body);
}

#[test]
fn go_durations_read_as_istio_reads_them() {
    let vs = |timeout: &str| {
        one(&format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: r, namespace: default}}\nspec:\n  hosts: [r]\n  http:\n  - timeout: {timeout}\n    route: [{{destination: {{host: r}}}}]\n"
        ))
    };
    let k = kind("VirtualService");
    let go = object_to_resource(&k, &vs("10ms")).expect("Go notation");
    let pb = object_to_resource(&k, &vs("0.010s")).expect("protobuf notation");
    assert_eq!(go.body, pb.body);
    assert!(object_to_resource(&k, &vs("10 ms")).is_err());
}

/// A text whose lines end in a lone CR (YAML breaks lines there too) and
/// whose first line is a comment is read, not taken for a comment alone.
#[test]
fn a_text_of_lone_cr_lines_after_a_comment_is_not_dropped() {
    let text = "# a comment\rapiVersion: networking.istio.io/v1\rkind: VirtualService\rmetadata:\r  name: r\r  namespace: ns\rspec:\r  hosts: [a]\r";
    let parsed = parse_yaml(text);
    assert_eq!(parsed.len(), 1, "{parsed:?}");
    let object = parsed[0].as_ref().expect("read");
    assert_eq!(object.kind, "VirtualService");
    // A document end marker on the first of such lines: what follows it is
    // read too (found by review).
    let after_end = format!("...{}", &text["# a comment".len()..]);
    let parsed = parse_yaml(&after_end);
    assert_eq!(parsed.len(), 1, "{parsed:?}");
    assert_eq!(parsed[0].as_ref().expect("read").kind, "VirtualService");
}

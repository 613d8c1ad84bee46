//! Every Istio fixture document (Bookinfo and the per-kind valid sets)
//! transcodes object → Resource → object with its spec unchanged, up to the
//! differences proto3 JSON allows (see [`normalize`]).

use std::fs;
use std::path::Path;

use meshhub_proto::kinds::KindTable;
use meshhub_proto::transcode::{self, TranscodeError};
use meshhub_testkit::fixtures;
use prost_reflect::{Kind as PKind, MessageDescriptor};
use serde_json::{Map, Number, Value, json};

/// Fixture documents Istio 1.5's validation accepted (its decoder ignored
/// unknown fields) but whose fields the API doesn't have: strict transcoding
/// must reject them, naming the field. (The pre-1.4 EnvoyFilter API of
/// `EnvoyFilter-valid.yaml` is in our schema, so that one round-trips.)
/// (file, object name, path in the error)
const OBSOLETE: &[(&str, &str, &str)] = &[
    // A misspelling of `portLevelMtls` that 1.5's lenient decoder ignored.
    (
        "validation/security-v1beta1-PeerAuthentication-valid.yaml",
        "valid-peer-authentication",
        "spec.peerLevelMtls",
    ),
];

fn relative(p: &Path) -> String {
    p.strip_prefix(fixtures::istio())
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn every_fixture_round_trips() {
    let kinds = KindTable::builtin();
    let mut checked = 0;
    let mut leaves = 0;
    let mut rejected = Vec::new();
    let mut failures = Vec::new();
    for file in fixtures::valid_objects() {
        let rel = relative(&file);
        let text = fs::read_to_string(&file).expect("read fixture");
        for (i, parsed) in transcode::parse_yaml(&text).into_iter().enumerate() {
            let obj = match parsed {
                Ok(o) => o,
                Err(e) => {
                    failures.push(format!("{rel} #{i}: {e}"));
                    continue;
                }
            };
            let kind = match transcode::kind_of(&kinds, &obj) {
                Ok(k) => k,
                Err(e) => {
                    failures.push(format!("{rel}: {e}"));
                    continue;
                }
            };
            let res = match transcode::object_to_resource(kind, &obj) {
                Ok(r) => r,
                Err(e) => {
                    rejected.push((rel.clone(), obj.metadata.name.clone(), e));
                    continue;
                }
            };
            let back = match transcode::resource_to_object(kind, &res) {
                Ok(b) => b,
                Err(e) => {
                    failures.push(format!("{rel}: back: {e}"));
                    continue;
                }
            };
            let desc = kind.descriptor().expect("schema");
            let want = normalize_message(&desc, obj.spec().unwrap_or(&Value::Null));
            let got = normalize_message(&desc, back.spec().unwrap_or(&Value::Null));
            if want != got {
                failures.push(format!(
                    "{rel} {}: spec differs\n  want {want}\n  got  {got}",
                    obj.metadata.name
                ));
            }
            // Metadata: the name, the namespace (defaulted), labels, annotations.
            assert_eq!(back.metadata.name, obj.metadata.name, "{rel}");
            assert_eq!(
                back.metadata.namespace.as_deref(),
                Some(obj.metadata.namespace.as_deref().unwrap_or("default")),
                "{rel}"
            );
            assert_eq!(back.metadata.labels, obj.metadata.labels, "{rel}");
            assert_eq!(back.metadata.annotations, obj.metadata.annotations, "{rel}");
            assert_eq!(back.kind, obj.kind, "{rel}");
            assert_eq!(back.api_version, kind.api_version(), "{rel}");
            checked += 1;
            leaves += count_leaves(&want);
        }
    }
    // The obsolete documents are rejected, naming the field; nothing else is.
    for (rel, name, err) in &rejected {
        let Some((_, _, path)) = OBSOLETE.iter().find(|(f, n, _)| f == rel && n == name) else {
            failures.push(format!("{rel} {name}: rejected: {err}"));
            continue;
        };
        let TranscodeError::UnknownField { path: p, .. } = err else {
            failures.push(format!("{rel} {name}: rejected for another reason: {err}"));
            continue;
        };
        if p != path {
            failures.push(format!("{rel} {name}: expected {path}, got {err}"));
        }
    }
    assert_eq!(rejected.len(), OBSOLETE.len(), "{rejected:#?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The fixtures (data, never edited) hold 50 round-tripping objects with
    // 268 leaf values after normalization: a vacuous comparison (empty specs,
    // skipped documents) would change these counts.
    assert_eq!(checked, 50, "objects checked");
    assert_eq!(leaves, 268, "values compared");
}

#[test]
fn an_unknown_spec_field_names_kind_object_and_path() {
    let text =
        fs::read_to_string(fixtures::istio().join("bookinfo/virtual-service-reviews-80-20.yaml"))
            .expect("fixture")
            .replace(
                "host: reviews\n        subset: v2",
                "hots: reviews\n        subset: v2",
            );
    let obj = transcode::parse_yaml(&text)
        .pop()
        .expect("one document")
        .expect("parses");
    let kinds = KindTable::builtin();
    let kind = transcode::kind_of(&kinds, &obj).expect("kind");
    let err = transcode::object_to_resource(kind, &obj).expect_err("unknown field");
    assert_eq!(
        err.to_string(),
        "VirtualService default/reviews: spec.http[0].route[1].destination.hots: unknown field"
    );
}

/// Brings a spec (as JSON) to one canonical form per proto3 meaning, guided
/// by the message descriptor, so that what the input wrote and what the
/// decoder writes back compare equal exactly when they mean the same message.
fn normalize_message(desc: &MessageDescriptor, v: &Value) -> Value {
    let Value::Object(fields) = v else {
        // A null or missing spec is the empty message.
        return json!({});
    };
    let mut out = Map::new();
    for (key, value) in fields {
        // Both the JSON name and the proto name are accepted on input; the
        // output uses the JSON (lowerCamelCase) name.
        let Some(field) = desc
            .get_field_by_json_name(key)
            .or_else(|| desc.get_field_by_name(key))
        else {
            // Unknown fields are rejected by transcoding; keep them so any
            // slip shows as a difference.
            out.insert(key.clone(), value.clone());
            continue;
        };
        let kind = field.kind();
        let normalized = if value.is_null() && !is_json_value(&kind) {
            // null means "not set" in proto3 JSON (except google.protobuf.Value).
            None
        } else if field.is_list() {
            // An empty list is not on the wire: absent.
            match value {
                Value::Array(items) if items.is_empty() => None,
                Value::Array(items) => Some(Value::Array(
                    items.iter().map(|i| normalize_value(&kind, i)).collect(),
                )),
                other => Some(other.clone()),
            }
        } else if field.is_map() {
            // An empty map is not on the wire either; keys stay strings
            // (`8080`), values are normalized by the value field's kind.
            let value_kind = kind.as_message().map(|m| m.map_entry_value_field().kind());
            match (value, value_kind) {
                (Value::Object(m), _) if m.is_empty() => None,
                (Value::Object(m), Some(vk)) => Some(Value::Object(
                    m.iter()
                        .map(|(k, v)| (k.clone(), normalize_value(&vk, v)))
                        .collect(),
                )),
                (other, _) => Some(other.clone()),
            }
        } else {
            let n = normalize_value(&kind, value);
            // A field without presence (a plain proto3 scalar or enum) at its
            // default value is not on the wire, so the decoder omits it.
            // Message fields, oneof members and wrappers keep it.
            if !field.supports_presence() && is_default(&kind, &n) {
                None
            } else {
                Some(n)
            }
        };
        if let Some(n) = normalized {
            out.insert(field.json_name().to_owned(), n);
        }
    }
    Value::Object(out)
}

/// One value of `kind`, canonical.
fn normalize_value(kind: &PKind, v: &Value) -> Value {
    match kind {
        // 32- and 64-bit integers may be written as numbers or strings
        // (proto3 JSON; the decoder writes 64-bit ones as numbers here).
        PKind::Int32
        | PKind::Sint32
        | PKind::Sfixed32
        | PKind::Int64
        | PKind::Sint64
        | PKind::Sfixed64
        | PKind::Uint32
        | PKind::Fixed32
        | PKind::Uint64
        | PKind::Fixed64 => as_integer(v),
        // A double may be written `100` or `100.0`: compare the value.
        PKind::Double => as_f64(v)
            .and_then(Number::from_f64)
            .map_or(v.clone(), Value::Number),
        // A float is stored in 32 bits: the input's `0.1` comes back as the
        // nearest f32, so compare at f32 precision.
        PKind::Float => as_f64(v)
            .and_then(|f| Number::from_f64(f64::from(f as f32)))
            .map_or(v.clone(), Value::Number),
        // An enum may be written by number; the decoder writes its name.
        PKind::Enum(e) => match v {
            Value::Number(n) => n
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .and_then(|n| e.get_value(n))
                .map_or(v.clone(), |ev| Value::String(ev.name().to_owned())),
            _ => v.clone(),
        },
        PKind::Message(m) => match m.full_name() {
            // Durations have many spellings (`7s`, `7.0s`, `7.000s`).
            "google.protobuf.Duration" => v
                .as_str()
                .and_then(parse_duration)
                .map_or(v.clone(), |(s, n)| json!(format!("{s}.{n:09}s"))),
            "google.protobuf.Timestamp" => v
                .as_str()
                .and_then(|s| s.parse::<prost_types::Timestamp>().ok())
                .map_or(v.clone(), |t| json!(t.to_string())),
            // Wrappers are their scalar; they have presence, so a default
            // value is kept (by the caller).
            "google.protobuf.DoubleValue" => normalize_value(&PKind::Double, v),
            "google.protobuf.FloatValue" => normalize_value(&PKind::Float, v),
            "google.protobuf.Int32Value"
            | "google.protobuf.Int64Value"
            | "google.protobuf.UInt32Value"
            | "google.protobuf.UInt64Value" => as_integer(v),
            // Struct/Value/ListValue hold JSON whose numbers are doubles.
            "google.protobuf.Struct" | "google.protobuf.Value" | "google.protobuf.ListValue" => {
                numbers_as_f64(v)
            }
            "google.protobuf.BoolValue"
            | "google.protobuf.StringValue"
            | "google.protobuf.BytesValue"
            | "google.protobuf.Any"
            | "google.protobuf.Empty"
            | "google.protobuf.FieldMask" => v.clone(),
            _ => normalize_message(m, v),
        },
        PKind::Bool | PKind::String | PKind::Bytes => v.clone(),
    }
}

fn is_json_value(kind: &PKind) -> bool {
    matches!(kind, PKind::Message(m) if m.full_name() == "google.protobuf.Value")
}

/// Whether a normalized value is its kind's proto3 default.
fn is_default(kind: &PKind, v: &Value) -> bool {
    match kind {
        PKind::Bool => v == &json!(false),
        PKind::String | PKind::Bytes => v == &json!(""),
        PKind::Enum(e) => v
            .as_str()
            .and_then(|n| e.get_value_by_name(n))
            .is_some_and(|ev| ev.number() == 0),
        PKind::Message(_) => false,
        _ => v.as_f64() == Some(0.0),
    }
}

fn as_integer(v: &Value) -> Value {
    let parsed = match v {
        Value::String(s) => s.parse::<i128>().ok(),
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i128)),
        _ => None,
    };
    match parsed {
        Some(i) if i >= 0 => u64::try_from(i).map_or(v.clone(), |u| json!(u)),
        Some(i) => i64::try_from(i).map_or(v.clone(), |s| json!(s)),
        None => v.clone(),
    }
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn numbers_as_f64(v: &Value) -> Value {
    match v {
        Value::Number(n) => n
            .as_f64()
            .and_then(Number::from_f64)
            .map_or(v.clone(), Value::Number),
        Value::Array(items) => Value::Array(items.iter().map(numbers_as_f64).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), numbers_as_f64(v)))
                .collect(),
        ),
        _ => v.clone(),
    }
}

/// `1.5s` → (1, 500000000).
fn parse_duration(s: &str) -> Option<(i64, u32)> {
    let body = s.strip_suffix('s')?;
    let (negative, body) = match body.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, body),
    };
    let (secs, frac) = body.split_once('.').unwrap_or((body, ""));
    let secs: i64 = secs.parse().ok()?;
    if frac.len() > 9 || !frac.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let nanos: u32 = format!("{frac:0<9}").parse().ok()?;
    Some(if negative {
        (-secs, nanos)
    } else {
        (secs, nanos)
    })
}

fn count_leaves(v: &Value) -> usize {
    match v {
        Value::Array(items) => items.iter().map(count_leaves).sum(),
        Value::Object(m) => m.values().map(count_leaves).sum(),
        _ => 1,
    }
}

/// The normalizer is not vacuous: it drops only what proto3 drops, and any
/// real difference survives it.
#[test]
fn the_normalizer_keeps_differences() {
    let desc = meshhub_proto::descriptor::message("istio.networking.v1alpha3.DestinationRule")
        .expect("schema");
    let a = json!({
        "host": "r",
        "exportTo": [],
        "trafficPolicy": {
            "tls": {"mode": 0, "sni": ""},
            "connectionPool": {"tcp": {"maxConnections": "7", "connectTimeout": "1.5s"}},
            "loadBalancer": {"consistentHash": {"minimumRingSize": 1024}},
        },
        "subsets": [{"name": "v1", "labels": {}}],
    });
    let b = json!({
        "host": "r",
        "trafficPolicy": {
            "tls": {},
            "connectionPool": {"tcp": {"maxConnections": 7, "connectTimeout": "1.500s"}},
            "loadBalancer": {"consistentHash": {"minimumRingSize": "1024"}},
        },
        "subsets": [{"name": "v1"}],
    });
    assert_eq!(normalize_message(&desc, &a), normalize_message(&desc, &b));

    // Each of these is a real change and must not normalize away.
    let changes = [
        json!({"host": "s"}),
        json!({"host": "r", "trafficPolicy": {"tls": {"mode": "SIMPLE"}}}),
        json!({"host": "r", "subsets": [{"name": "v2"}]}),
        json!({"host": "r", "trafficPolicy": {}}),
        json!({"host": "r", "trafficPolicy": {"connectionPool": {"tcp": {"connectTimeout": "2s"}}}}),
    ];
    let base = normalize_message(&desc, &json!({"host": "r"}));
    for c in changes {
        assert_ne!(normalize_message(&desc, &c), base, "{c}");
    }
    // A message field set to the empty message is present (e.g. `tls: {}`).
    assert_eq!(
        normalize_message(&desc, &json!({"trafficPolicy": {"tls": {}}})),
        json!({"trafficPolicy": {"tls": {}}})
    );
}

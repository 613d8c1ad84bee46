//! Transcoding between Kubernetes objects and MCP resources.
//!
//! An [`Object`] (read from YAML, JSON or the Kubernetes API) becomes an
//! `istio.mcp.v1alpha1.Resource` once, when it changes; the encoded bytes are
//! then shared by every stream. The transcoding is driven by the descriptor
//! pool ([`crate::descriptor`]): the object's `spec` is read as the canonical
//! protobuf JSON of the kind's body message, **strictly**: an unknown field, a
//! value of the wrong type or an unknown enum value is an error naming the
//! kind, the object (`namespace/name`) and the field path, e.g.
//! `VirtualService default/reviews: spec.http[0].route[0].destination.hots: unknown field`.
//!
//! Kinds without a schema ([`Kind::is_schemaless`]) carry every top-level
//! field except `apiVersion`, `kind`, `metadata` and `status` as a
//! `google.protobuf.Struct`.
//!
//! The way back ([`resource_to_object`]) renders the body as canonical
//! protobuf JSON (camelCase names, enum names, fields at their default
//! omitted), with two choices made for Kubernetes rather than proto3 JSON:
//! 64-bit integers are JSON numbers (Kubernetes' schemas say `integer`), and
//! whole-number doubles are written as integers (`100`, not `100.0`), as Go
//! writes them.
//!
//! Bodies are encoded **deterministically** (fields in number order, map
//! entries sorted by key), unlike a plain encode of a dynamic message whose
//! maps are hash maps: the same spec always gives the same bytes, so the
//! content version below is stable across processes.

mod canonical;
mod direct;
mod lenient;
mod parse;
mod yaml_tree;

use std::collections::BTreeMap;

use bytes::Bytes;
use prost::Message as _;
use prost_reflect::{DeserializeOptions, DynamicMessage, MessageDescriptor, SerializeOptions};
use serde_json::{Map, Number, Value};
use serde_path_to_error::{Path, Segment};
use sha2::{Digest as _, Sha256};

use crate::kinds::{Kind, KindTable};
use crate::mcp::{Metadata, Resource};
use crate::object::{Object, ObjectMeta};
use canonical::encode_canonical;
#[cfg(test)]
use canonical::holds_map;

pub use lenient::parse_go_duration;
pub use parse::{
    ParseError, RenderError, parse_json, parse_json_limited, parse_yaml, parse_yaml_limited,
    to_json, to_yaml,
};

/// Namespace of a namespaced object that names none (as `kubectl apply`
/// without `-n` would place it).
pub const DEFAULT_NAMESPACE: &str = "default";

/// Length of a content version: hex characters of the SHA-256 prefix.
pub const CONTENT_VERSION_LEN: usize = 16;

/// Top-level fields of an object that never travel in a body.
const NOT_CONTENT: &[&str] = &["apiVersion", "kind", "metadata", "status"];

/// Why an object can't become a resource, or a resource an object.
///
/// Every variant names the kind and, where known, the object as
/// `namespace/name` (`/name` for cluster-scoped kinds).
#[derive(Debug, thiserror::Error)]
pub enum TranscodeError {
    /// No kind in the table has this group and kind.
    #[error("{kind} {name}: unknown kind (apiVersion {api_version:?})")]
    UnknownKind {
        /// The object's `apiVersion`.
        api_version: String,
        /// The object's `kind`.
        kind: String,
        /// The object's name, as far as known.
        name: String,
    },
    /// The kind is known, the version is not served.
    #[error("{kind} {name}: apiVersion {api_version:?} is not served (served: {served})")]
    UnservedVersion {
        /// The object's `apiVersion`.
        api_version: String,
        /// The kind.
        kind: String,
        /// The object's name, as far as known.
        name: String,
        /// The served versions, comma-separated.
        served: String,
    },
    /// The object is not of the kind it was transcoded as.
    #[error("{kind} {name}: object is a {found}, not a {kind}")]
    WrongKind {
        /// The expected kind.
        kind: String,
        /// The object's name, as far as known.
        name: String,
        /// The object's `apiVersion` and `kind`.
        found: String,
    },
    /// `metadata.name` is empty or missing.
    #[error("{kind}: object has no metadata.name")]
    MissingName {
        /// The kind.
        kind: String,
    },
    /// A name or namespace can't form an MCP name (`namespace/name`).
    #[error("{kind} {name:?}: invalid name: {reason}")]
    InvalidName {
        /// The kind.
        kind: String,
        /// The offending name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `metadata.creationTimestamp` is not an RFC 3339 time.
    #[error("{kind} {name}: metadata.creationTimestamp {value:?} is not an RFC 3339 time")]
    BadTimestamp {
        /// The kind.
        kind: String,
        /// `namespace/name`.
        name: String,
        /// The offending value.
        value: String,
    },
    /// A field the kind's schema does not have. Its own variant because
    /// callers act on it (the hub's `unknownFields: prune` policy removes
    /// the field and tries again).
    #[error("{kind} {name}: {path}: unknown field")]
    UnknownField {
        /// The kind.
        kind: String,
        /// `namespace/name`.
        name: String,
        /// Path of the field, e.g. `spec.http[0].route[0].destination.hots`.
        path: String,
    },
    /// A field is of the wrong type or holds an unknown enum value.
    #[error("{kind} {name}: {path}: {reason}")]
    Field {
        /// The kind.
        kind: String,
        /// `namespace/name`.
        name: String,
        /// Path of the field, e.g. `spec.http[0].route[0].destination.port`.
        path: String,
        /// What is wrong (`unknown enum value "X"`, `invalid type: ...`).
        reason: String,
    },
    /// The kind's body message is missing from the descriptor pool.
    #[error("{kind}: body message {message} is not in the descriptor pool")]
    NoSchema {
        /// The kind.
        kind: String,
        /// The missing message.
        message: String,
    },
    /// The resource has no metadata.
    #[error("{kind}: resource has no metadata")]
    MissingMetadata {
        /// The kind.
        kind: String,
    },
    /// The resource has no body.
    #[error("{kind} {name}: resource has no body")]
    MissingBody {
        /// The kind.
        kind: String,
        /// `namespace/name`.
        name: String,
    },
    /// The body's type URL doesn't name the kind's body message.
    #[error("{kind} {name}: body type {found:?}, expected {expected:?}")]
    BodyType {
        /// The kind.
        kind: String,
        /// `namespace/name`.
        name: String,
        /// The body's type URL.
        found: String,
        /// The type URL the kind's body has.
        expected: String,
    },
    /// The resource or its body is not valid protobuf of its message.
    #[error("{kind} {name}: undecodable {what}")]
    Undecodable {
        /// The kind.
        kind: String,
        /// `namespace/name`, or empty when the resource itself didn't decode.
        name: String,
        /// `resource` or `body`.
        what: &'static str,
        /// The decoder's complaint.
        #[source]
        source: prost::DecodeError,
    },
    /// The decoded body could not be rendered as JSON.
    #[error("{kind} {name}: body can't be rendered as JSON")]
    Render {
        /// The kind.
        kind: String,
        /// `namespace/name`.
        name: String,
        /// The serializer's complaint.
        #[source]
        source: serde_json::Error,
    },
}

/// The kind of `obj` in `kinds`, by its `apiVersion` and `kind`.
pub fn kind_of<'a>(kinds: &'a KindTable, obj: &Object) -> Result<&'a Kind, TranscodeError> {
    if let Some(k) = kinds.by_api_version(&obj.api_version, &obj.kind) {
        return Ok(k);
    }
    let name = loose_name(obj);
    Err(match kinds.by_group_kind(obj.group(), &obj.kind) {
        Some(k) => TranscodeError::UnservedVersion {
            api_version: obj.api_version.clone(),
            kind: obj.kind.clone(),
            name,
            served: k.versions().join(", "),
        },
        None => TranscodeError::UnknownKind {
            api_version: obj.api_version.clone(),
            kind: obj.kind.clone(),
            name,
        },
    })
}

/// The MCP name of `obj` as `kind`: `namespace/name` for namespaced kinds
/// (namespace [`DEFAULT_NAMESPACE`] when the object names none), `/name` for
/// cluster-scoped ones (whose namespace, if any, is ignored, as Kubernetes
/// ignores it).
pub fn resource_name(kind: &Kind, obj: &Object) -> Result<String, TranscodeError> {
    let name = &obj.metadata.name;
    let invalid = |name: &str, reason| TranscodeError::InvalidName {
        kind: kind.kind().to_owned(),
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(TranscodeError::MissingName {
            kind: kind.kind().to_owned(),
        });
    }
    if name.contains('/') {
        return Err(invalid(name, "a name can't contain '/'"));
    }
    if !kind.namespaced() {
        return Ok(format!("/{name}"));
    }
    let ns = match obj.metadata.namespace.as_deref() {
        None | Some("") => DEFAULT_NAMESPACE,
        Some(ns) if ns.contains('/') => return Err(invalid(ns, "a namespace can't contain '/'")),
        Some(ns) => ns,
    };
    Ok(format!("{ns}/{name}"))
}

/// Splits an MCP name into namespace (`None` for `/name` or a bare name) and
/// name.
pub fn split_name(name: &str) -> (Option<&str>, &str) {
    match name.split_once('/') {
        Some(("", n)) => (None, n),
        Some((ns, n)) => (Some(ns), n),
        None => (None, name),
    }
}

/// `obj` as an `istio.mcp.v1alpha1.Resource` of `kind`.
///
/// The version is `metadata.resourceVersion` when present, otherwise a
/// content version (see [`content_version`]).
pub fn object_to_resource(kind: &Kind, obj: &Object) -> Result<Resource, TranscodeError> {
    if obj.group() != kind.group() || obj.kind != kind.kind() || !kind.serves(obj.version()) {
        return Err(TranscodeError::WrongKind {
            kind: kind.kind().to_owned(),
            name: loose_name(obj),
            found: format!("{} {}", obj.api_version, obj.kind),
        });
    }
    let name = resource_name(kind, obj)?;
    let body = encode_body(kind, obj, &name)?;
    let meta = &obj.metadata;
    let version = match meta.resource_version.as_deref() {
        Some(v) if !v.is_empty() => v.to_owned(),
        _ => content_version(kind.message(), &body, &meta.labels, &meta.annotations),
    };
    let create_time =
        match meta.creation_timestamp.as_deref() {
            None => None,
            Some(t) => Some(t.parse::<prost_types::Timestamp>().map_err(|_| {
                TranscodeError::BadTimestamp {
                    kind: kind.kind().to_owned(),
                    name: name.clone(),
                    value: t.to_owned(),
                }
            })?),
        };
    Ok(Resource {
        metadata: Some(Metadata {
            name,
            create_time,
            version,
            labels: meta.labels.clone(),
            annotations: meta.annotations.clone(),
        }),
        body: Some(prost_types::Any {
            type_url: kind.body_type_url(),
            value: body,
        }),
    })
}

/// `obj` as an encoded `istio.mcp.v1alpha1.Resource`: what snapshots share.
pub fn encode_object(kind: &Kind, obj: &Object) -> Result<Bytes, TranscodeError> {
    Ok(object_to_resource(kind, obj)?.encode_to_vec().into())
}

/// The version of a resource without a `resourceVersion`: the first
/// [`CONTENT_VERSION_LEN`] hex characters of a SHA-256 over the body message
/// name, the body bytes, the labels and the annotations, each
/// length-prefixed so that no two different contents hash the same input.
pub fn content_version(
    message: &str,
    body: &[u8],
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> String {
    fn put(h: &mut Sha256, b: &[u8]) {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    }
    let mut h = Sha256::new();
    put(&mut h, message.as_bytes());
    put(&mut h, body);
    for map in [labels, annotations] {
        h.update((map.len() as u64).to_le_bytes());
        for (k, v) in map {
            put(&mut h, k.as_bytes());
            put(&mut h, v.as_bytes());
        }
    }
    let digest = h.finalize();
    hex::encode(&digest[..CONTENT_VERSION_LEN / 2])
}

/// Encodes the body of `obj` (named `name` in errors).
fn encode_body(kind: &Kind, obj: &Object, name: &str) -> Result<Vec<u8>, TranscodeError> {
    if kind.is_schemaless() {
        let fields = obj
            .content
            .iter()
            .filter(|(k, _)| !NOT_CONTENT.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), json_to_struct_value(v)))
            .collect();
        return Ok(prost_types::Struct { fields }.encode_to_vec());
    }
    let field_error = |problem: FieldProblem| match problem {
        FieldProblem::Unknown { path } => TranscodeError::UnknownField {
            kind: kind.kind().to_owned(),
            name: name.to_owned(),
            path,
        },
        FieldProblem::Invalid { path, reason } => TranscodeError::Field {
            kind: kind.kind().to_owned(),
            name: name.to_owned(),
            path,
            reason,
        },
    };
    if let Some(key) = obj
        .content
        .keys()
        .find(|k| !matches!(k.as_str(), "spec" | "status"))
    {
        return Err(field_error(FieldProblem::Unknown { path: key.clone() }));
    }
    let desc = kind.descriptor().ok_or_else(|| TranscodeError::NoSchema {
        kind: kind.kind().to_owned(),
        message: kind.message().to_owned(),
    })?;
    let empty = Value::Object(Map::new());
    let spec = match obj.spec() {
        None | Some(Value::Null) => &empty,
        Some(spec) => spec,
    };
    // The plain spellings straight to bytes; anything else the general
    // way (the same bytes, its errors and relaxations).
    if let Some(out) = direct::encode(&desc, spec) {
        return Ok(out);
    }
    let message = spec_to_message(&desc, spec).map_err(field_error)?;
    let mut out = Vec::new();
    encode_canonical(&message, &mut out);
    Ok(out)
}

/// What is wrong with one field of a spec, its path rooted at `spec`.
#[derive(Debug, PartialEq, Eq)]
enum FieldProblem {
    /// The schema has no such field.
    Unknown { path: String },
    /// The value does not fit the field.
    Invalid { path: String, reason: String },
}

/// Reads `spec` strictly as `desc`'s JSON; on error, what is wrong with
/// which field.
fn spec_to_message(desc: &MessageDescriptor, spec: &Value) -> Result<DynamicMessage, FieldProblem> {
    let options = DeserializeOptions::new().deny_unknown_fields(true);
    // Valid objects are the rule: they are read without tracking the path
    // (a wrapper around every value read), which is tracked only to explain
    // an error, on a second reading.
    if let Ok(m) = DynamicMessage::deserialize_with_options(desc.clone(), spec, &options) {
        return Ok(m);
    }
    // What Istio reads but protobuf JSON refuses (see `lenient`), tried
    // only once the strict reading failed.
    let mut lenient = spec.clone();
    if lenient::relax(desc, &mut lenient)
        && let Ok(m) = DynamicMessage::deserialize_with_options(desc.clone(), &lenient, &options)
    {
        return Ok(m);
    }
    let mut track = serde_path_to_error::Track::new();
    let de = serde_path_to_error::Deserializer::new(spec, &mut track);
    match DynamicMessage::deserialize_with_options(desc.clone(), de, &options) {
        Ok(m) => Ok(m),
        Err(e) => Err(describe_field_error(
            desc,
            spec,
            &track.path(),
            &e.to_string(),
        )),
    }
}

/// Turns a deserializer error at `path` into a [`FieldProblem`].
///
/// prost-reflect reports an unknown field from the enclosing message, so the
/// tracked path stops at that message; the field's name is in the message,
/// and is appended here. Its deserializer errors are `serde` custom errors,
/// text only: reading that text is confined to this function, which hands
/// everyone else a typed answer. Some complaints (`invalid digit found in
/// string`) don't show the value, so the value at `path` in `spec` is added.
fn describe_field_error(
    desc: &MessageDescriptor,
    spec: &Value,
    path: &Path,
    msg: &str,
) -> FieldProblem {
    let mut text = String::from("spec");
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => text.push_str(&format!("[{index}]")),
            Segment::Map { key } => {
                text.push('.');
                text.push_str(key);
            }
            Segment::Enum { variant } => {
                text.push('.');
                text.push_str(variant);
            }
            Segment::Unknown => text.push_str(".?"),
        }
    }
    if let Some(field) = quoted_after(msg, "unrecognized field name ") {
        text.push('.');
        text.push_str(field);
        return FieldProblem::Unknown { path: text };
    }
    if let Some(value) = quoted_after(msg, "unrecognized enum value ") {
        let mut reason = format!("unknown enum value {value:?}");
        if let Some(prost_reflect::Kind::Enum(e)) = kind_at(desc, path) {
            let names: Vec<String> = e.values().map(|v| v.name().to_owned()).collect();
            let names = names.join(", ");
            reason.push_str(&format!(" (expected one of {names})"));
        }
        return FieldProblem::Invalid { path: text, reason };
    }
    let mut reason = msg.to_owned();
    if let Some(v) = value_at(spec, path).filter(|v| !v.is_object() && !v.is_array()) {
        let shown = v.to_string();
        if !reason.contains(&shown) {
            reason.push_str(&format!(" (got {shown})"));
        }
    }
    FieldProblem::Invalid { path: text, reason }
}

/// The JSON value at `path`.
fn value_at<'a>(mut v: &'a Value, path: &Path) -> Option<&'a Value> {
    for seg in path.iter() {
        v = match seg {
            Segment::Seq { index } => v.get(index)?,
            Segment::Map { key } => v.get(key)?,
            Segment::Enum { .. } | Segment::Unknown => return None,
        };
    }
    Some(v)
}

/// `x` of a message `<prefix>'x'`.
fn quoted_after<'a>(msg: &'a str, prefix: &str) -> Option<&'a str> {
    msg.strip_prefix(prefix)?
        .strip_prefix('\'')?
        .strip_suffix('\'')
}

/// The protobuf kind of the value at `path` below `desc`, for error hints.
fn kind_at(desc: &MessageDescriptor, path: &Path) -> Option<prost_reflect::Kind> {
    use prost_reflect::Kind;
    enum At {
        Value(Kind),
        List(Kind),
        Map(Kind),
    }
    let mut at = At::Value(Kind::Message(desc.clone()));
    for seg in path.iter() {
        at = match (at, seg) {
            (At::Value(Kind::Message(m)), Segment::Map { key }) => {
                let f = m
                    .get_field_by_json_name(key)
                    .or_else(|| m.get_field_by_name(key))?;
                if f.is_map() {
                    At::Map(f.kind().as_message()?.map_entry_value_field().kind())
                } else if f.is_list() {
                    At::List(f.kind())
                } else {
                    At::Value(f.kind())
                }
            }
            (At::List(k), Segment::Seq { .. }) | (At::Map(k), Segment::Map { .. }) => At::Value(k),
            _ => return None,
        };
    }
    match at {
        At::Value(k) => Some(k),
        At::List(_) | At::Map(_) => None,
    }
}

/// `resource` (of `kind`) as a Kubernetes object: `apiVersion` is the kind's
/// preferred version; `metadata.resourceVersion` is left out (an MCP version
/// is not a Kubernetes one).
pub fn resource_to_object(kind: &Kind, resource: &Resource) -> Result<Object, TranscodeError> {
    let meta = resource
        .metadata
        .as_ref()
        .ok_or_else(|| TranscodeError::MissingMetadata {
            kind: kind.kind().to_owned(),
        })?;
    let (namespace, name) = parse_resource_name(kind, &meta.name)?;
    let body = resource
        .body
        .as_ref()
        .ok_or_else(|| TranscodeError::MissingBody {
            kind: kind.kind().to_owned(),
            name: meta.name.clone(),
        })?;
    if crate::message_name(&body.type_url) != kind.message() {
        return Err(TranscodeError::BodyType {
            kind: kind.kind().to_owned(),
            name: meta.name.clone(),
            found: body.type_url.clone(),
            expected: kind.body_type_url(),
        });
    }
    let undecodable = |source| TranscodeError::Undecodable {
        kind: kind.kind().to_owned(),
        name: meta.name.clone(),
        what: "body",
        source,
    };
    let content = if kind.is_schemaless() {
        let s = prost_types::Struct::decode(body.value.as_slice()).map_err(undecodable)?;
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), struct_value_to_json(v)))
            .collect()
    } else {
        let desc = kind.descriptor().ok_or_else(|| TranscodeError::NoSchema {
            kind: kind.kind().to_owned(),
            message: kind.message().to_owned(),
        })?;
        let message = DynamicMessage::decode(desc, body.value.as_slice()).map_err(undecodable)?;
        let options = SerializeOptions::new()
            .stringify_64_bit_integers(false)
            .skip_default_fields(true);
        let mut spec = message
            .serialize_with_options(serde_json::value::Serializer, &options)
            .map_err(|source| TranscodeError::Render {
                kind: kind.kind().to_owned(),
                name: meta.name.clone(),
                source,
            })?;
        integral_floats_as_integers(&mut spec);
        Map::from_iter([("spec".to_owned(), spec)])
    };
    Ok(Object {
        api_version: kind.api_version(),
        kind: kind.kind().to_owned(),
        metadata: ObjectMeta {
            name: name.to_owned(),
            namespace: namespace.map(str::to_owned),
            labels: meta.labels.clone().into_iter().collect(),
            annotations: meta.annotations.clone().into_iter().collect(),
            resource_version: None,
            creation_timestamp: meta.create_time.as_ref().map(ToString::to_string),
        },
        content,
    })
}

/// Decodes an `istio.mcp.v1alpha1.Resource` of `kind` into an object.
pub fn decode_resource(kind: &Kind, bytes: &[u8]) -> Result<Object, TranscodeError> {
    let resource = Resource::decode(bytes).map_err(|source| TranscodeError::Undecodable {
        kind: kind.kind().to_owned(),
        name: String::new(),
        what: "resource",
        source,
    })?;
    resource_to_object(kind, &resource)
}

/// Namespace and name of an MCP name: `namespace/name` for namespaced kinds;
/// `/name` (or a bare `name`) for cluster-scoped ones.
fn parse_resource_name<'a>(
    kind: &Kind,
    full: &'a str,
) -> Result<(Option<&'a str>, &'a str), TranscodeError> {
    let invalid = |reason| TranscodeError::InvalidName {
        kind: kind.kind().to_owned(),
        name: full.to_owned(),
        reason,
    };
    let (ns, name) = split_name(full);
    if name.is_empty() || name.contains('/') {
        return Err(invalid("expected namespace/name or /name"));
    }
    match (kind.namespaced(), ns) {
        (true, None) => Err(invalid("a namespaced kind needs namespace/name")),
        (false, Some(_)) => Err(invalid("a cluster-scoped kind needs /name")),
        _ => Ok((ns, name)),
    }
}

/// A name for errors before the kind (and so the scope) is known.
fn loose_name(obj: &Object) -> String {
    match obj.metadata.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", obj.metadata.name),
        _ => obj.metadata.name.clone(),
    }
}

/// JSON → `google.protobuf.Value` (numbers become doubles, as in Struct).
fn json_to_struct_value(v: &Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.iter().map(json_to_struct_value).collect(),
        }),
        Value::Object(map) => Kind::StructValue(prost_types::Struct {
            fields: map
                .iter()
                .map(|(k, v)| (k.clone(), json_to_struct_value(v)))
                .collect(),
        }),
    };
    prost_types::Value { kind: Some(kind) }
}

/// `google.protobuf.Value` → JSON, whole numbers as integers.
fn struct_value_to_json(v: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::NumberValue(n)) => number(*n),
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::ListValue(l)) => {
            Value::Array(l.values.iter().map(struct_value_to_json).collect())
        }
        Some(Kind::StructValue(s)) => Value::Object(
            s.fields
                .iter()
                .map(|(k, v)| (k.clone(), struct_value_to_json(v)))
                .collect(),
        ),
    }
}

/// Largest integer a double holds exactly (2^53).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_992.0;

/// A double as JSON: an integer when it is a whole number a double holds
/// exactly, otherwise a float (`null` for NaN and infinities, which JSON
/// lacks).
fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER {
        // Exact: whole and within ±2^53.
        Value::Number(Number::from(n as i64))
    } else {
        Number::from_f64(n).map_or(Value::Null, Value::Number)
    }
}

/// Rewrites whole-number floats in `v` as integers (see [`number`]).
fn integral_floats_as_integers(v: &mut Value) {
    match v {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64() {
                *v = number(f);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_as_integers),
        Value::Object(map) => map.values_mut().for_each(integral_floats_as_integers),
        _ => {}
    }
}

#[cfg(test)]
mod tests;

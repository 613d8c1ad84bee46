//! The JSON types Istio's CRDs demand, beyond what protobuf JSON allows.
//!
//! The CRDs' OpenAPI schemas are generated from the same protobuf messages
//! as meshhub's descriptor pool, with stricter JSON: an enum is a string
//! (its name; the API server refuses a number), an integer is a JSON
//! integer (not a quoted one, and istiod's Go decoding refuses `80.0`),
//! within its type's range, a floating point number is a number, a bool a
//! bool, and a string a string. The transcoder accepts every protobuf JSON
//! spelling; these rules refuse the ones the API server or istiod would.

use std::sync::LazyLock;

use meshhub_proto::kinds::KindTable;
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::Value;

use crate::report::{Report, at, idx, key};

static KINDS: LazyLock<KindTable> = LazyLock::new(KindTable::builtin);

/// Checks `spec` of an object of `group`/`kind` against the JSON types of
/// its message.
pub(crate) fn check(r: &mut Report, group: &str, kind: &str, spec: &Value) {
    let Some(desc) = KINDS
        .by_group_kind(group, kind)
        .and_then(|k| k.descriptor())
    else {
        return;
    };
    message(r, "spec", &desc, spec);
}

fn message(r: &mut Report, path: &str, desc: &MessageDescriptor, v: &Value) {
    let Some(obj) = v.as_object() else { return };
    for (name, value) in obj {
        if value.is_null() {
            continue;
        }
        let Some(f) = desc
            .get_field_by_json_name(name)
            .or_else(|| desc.get_field_by_name(name))
        else {
            continue; // unknown fields are the transcoder's
        };
        let p = at(path, name);
        if f.is_map() {
            let Some(m) = value.as_object() else { continue };
            let Kind::Message(entry) = f.kind() else {
                continue;
            };
            let vf = entry.map_entry_value_field();
            for (k, item) in m {
                single(r, &key(&p, k), &vf, item);
            }
        } else if f.is_list() {
            let Some(items) = value.as_array() else {
                continue;
            };
            for (i, item) in items.iter().enumerate() {
                single(r, &idx(&p, i), &f, item);
            }
        } else {
            single(r, &p, &f, value);
        }
    }
}

fn single(r: &mut Report, path: &str, f: &FieldDescriptor, v: &Value) {
    if v.is_null() {
        return;
    }
    match f.kind() {
        Kind::Enum(e) => {
            if !v.is_string() {
                r.err(
                    path,
                    format!("must be a string (a value name of {}), found {v}", e.name()),
                );
            }
        }
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            integer(r, path, v, i32::MIN.into(), i32::MAX.into())
        }
        Kind::Uint32 | Kind::Fixed32 => integer(r, path, v, 0, u32::MAX.into()),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 | Kind::Uint64 | Kind::Fixed64 => {
            // int-or-string in the CRDs; only a fraction is refused.
            if let Value::Number(n) = v
                && n.is_f64()
            {
                r.err(path, format!("must be an integer, found {n}"));
            }
        }
        Kind::Double | Kind::Float => {
            if !v.is_number() {
                r.err(path, format!("must be a number, found {v}"));
            }
        }
        Kind::Bool => {
            if !v.is_boolean() {
                r.err(path, format!("must be a boolean, found {v}"));
            }
        }
        Kind::String => {
            if !v.is_string() {
                r.err(path, format!("must be a string, found {v}"));
            }
        }
        Kind::Bytes => {}
        Kind::Message(m) => match m.full_name() {
            "google.protobuf.Int32Value" => integer(r, path, v, i32::MIN.into(), i32::MAX.into()),
            "google.protobuf.UInt32Value" => integer(r, path, v, 0, u32::MAX.into()),
            "google.protobuf.DoubleValue" | "google.protobuf.FloatValue" => {
                if !v.is_number() {
                    r.err(path, format!("must be a number, found {v}"));
                }
            }
            "google.protobuf.BoolValue" => {
                if !v.is_boolean() {
                    r.err(path, format!("must be a boolean, found {v}"));
                }
            }
            "google.protobuf.StringValue" | "google.protobuf.Duration" => {
                if !v.is_string() {
                    r.err(path, format!("must be a string, found {v}"));
                }
            }
            name if name.starts_with("google.protobuf.") => {}
            _ => message(r, path, &m, v),
        },
    }
}

/// A JSON integer (no quotes, no fraction or exponent) in `min..=max`.
fn integer(r: &mut Report, path: &str, v: &Value, min: i64, max: i64) {
    let Value::Number(n) = v else {
        r.err(path, format!("must be an integer, found {v}"));
        return;
    };
    if n.is_f64() {
        r.err(path, format!("must be an integer, found {n}"));
        return;
    }
    let in_range = n.as_i64().is_some_and(|i| (min..=max).contains(&i));
    if !in_range {
        r.err(path, format!("{n} is out of range {min}..{max}"));
    }
}

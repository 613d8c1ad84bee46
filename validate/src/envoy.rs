//! EnvoyFilter patch values decoded against Envoy's own protobuf types, as
//! istiod does before it accepts an EnvoyFilter.
//!
//! istiod builds the xDS object a patch's `value` describes (a `Cluster`
//! for `applyTo: CLUSTER`, an `HttpFilter` for `HTTP_FILTER`, ...) with Go
//! protobuf's `jsonpb` (unknown fields allowed), resolving every `Any`'s
//! `@type` in its registry of Envoy types. Its first error refuses the
//! object. This module repeats that decoding over the descriptor set the
//! `envoy-types` crate ships (Envoy's data-plane API, xDS and udpa types,
//! Google's well-known types), with jsonpb's rules: field names in either
//! spelling, integers also as quoted strings, enums by name (an unknown
//! name is an error) or number, `Duration` parsed as Go's
//! `time.ParseDuration`, `Any` only with a resolvable `@type`.

use std::io::Read;
use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{Map, Value};

use crate::report::{Report, at, idx, key};
use crate::values::parse_duration;

/// Envoy's API as compiled descriptors, zlib-compressed, from the
/// envoy-types package this build compiles (envoy-descriptors/src/lib.rs).
static POOL_ZLIB: &[u8] = meshhub_envoy_descriptors::envoy_descriptor_set!();

/// Envoy's API as a descriptor pool, inflated and decoded on first use.
static POOL: LazyLock<Option<DescriptorPool>> = LazyLock::new(|| {
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(POOL_ZLIB)
        .read_to_end(&mut raw)
        .ok()?;
    DescriptorPool::decode(&raw[..]).ok()
});

/// Packages istiod's registry holds beyond the descriptor set (istio.io/api
/// and Istio's proxy extensions): their types are accepted without
/// decoding.
const ISTIO_TYPE_PREFIXES: &[&str] = &["istio.", "stats.", "envoy.tcp.metadataexchange."];

/// `TypedStruct` (the xDS and the older udpa name): not in the descriptor
/// set, so its two fields are checked here: `type_url` a string, `value` a
/// Struct.
const TYPED_STRUCTS: &[&str] = &["xds.type.v3.TypedStruct", "udpa.type.v1.TypedStruct"];

/// The xDS message a patch builds, by `applyTo`.
fn message_of(apply_to: &str) -> Option<&'static str> {
    Some(match apply_to {
        "CLUSTER" => "envoy.config.cluster.v3.Cluster",
        "LISTENER" => "envoy.config.listener.v3.Listener",
        "ROUTE_CONFIGURATION" => "envoy.config.route.v3.RouteConfiguration",
        "FILTER_CHAIN" => "envoy.config.listener.v3.FilterChain",
        "HTTP_FILTER" => "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter",
        "NETWORK_FILTER" => "envoy.config.listener.v3.Filter",
        "VIRTUAL_HOST" => "envoy.config.route.v3.VirtualHost",
        "HTTP_ROUTE" => "envoy.config.route.v3.Route",
        "EXTENSION_CONFIG" => "envoy.config.core.v3.TypedExtensionConfig",
        "BOOTSTRAP" => "envoy.config.bootstrap.v3.Bootstrap",
        "LISTENER_FILTER" => "envoy.config.listener.v3.ListenerFilter",
        _ => return None,
    })
}

/// Checks the `value` of a patch with `applyTo: apply_to` at `path`.
pub(crate) fn check_patch_value(r: &mut Report, path: &str, apply_to: &str, value: &Value) {
    let Some(pool) = POOL.as_ref() else { return };
    let Some(desc) = message_of(apply_to).and_then(|m| pool.get_message_by_name(m)) else {
        return;
    };
    if let Err((p, message)) = decode_message(pool, path, &desc, value) {
        r.err(
            p,
            format!("{message} (as istiod decodes {})", desc.full_name()),
        );
    }
}

type Decoded = Result<(), (String, String)>;

fn fail(path: &str, message: impl Into<String>) -> Decoded {
    Err((path.to_owned(), message.into()))
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn object<'a>(
    path: &str,
    v: &'a Value,
    what: &str,
) -> Result<&'a Map<String, Value>, (String, String)> {
    v.as_object().ok_or_else(|| {
        (
            path.to_owned(),
            format!("{what} must be a JSON object, found {}", json_type(v)),
        )
    })
}

fn decode_message(
    pool: &DescriptorPool,
    path: &str,
    desc: &MessageDescriptor,
    v: &Value,
) -> Decoded {
    let name = desc.full_name();
    if v.is_null() && name != "google.protobuf.Value" {
        return Ok(());
    }
    match name {
        "google.protobuf.Any" => return decode_any(pool, path, v),
        "google.protobuf.Duration" => {
            let Some(s) = v.as_str() else {
                return fail(
                    path,
                    format!("a Duration must be a string, found {}", json_type(v)),
                );
            };
            return match parse_duration(s) {
                Some(_) => Ok(()),
                None => fail(path, format!("bad Duration {s:?}")),
            };
        }
        "google.protobuf.Timestamp" | "google.protobuf.FieldMask" => {
            return if v.is_string() {
                Ok(())
            } else {
                fail(
                    path,
                    format!("{name} must be a string, found {}", json_type(v)),
                )
            };
        }
        "google.protobuf.Value" => return Ok(()),
        "google.protobuf.Struct" => return object(path, v, "a Struct").map(|_| ()),
        "google.protobuf.ListValue" => {
            return if v.is_array() {
                Ok(())
            } else {
                fail(
                    path,
                    format!("a ListValue must be an array, found {}", json_type(v)),
                )
            };
        }
        _ => {}
    }
    if let Some(inner) = name
        .strip_prefix("google.protobuf.")
        .filter(|n| n.ends_with("Value"))
        .and_then(|_| desc.get_field(1))
    {
        return decode_single(pool, path, &inner, v);
    }
    let obj = object(path, v, name)?;
    for f in desc.fields() {
        // jsonpb reads the proto name, then the JSON name (which wins).
        let raw = obj.get(f.json_name()).or_else(|| obj.get(f.name()));
        let Some(raw) = raw.filter(|r| !r.is_null()) else {
            continue;
        };
        let shown = if obj.contains_key(f.json_name()) {
            f.json_name()
        } else {
            f.name()
        };
        let p = at(path, shown);
        if f.is_map() {
            let m = object(&p, raw, "a map")?;
            let Kind::Message(entry) = f.kind() else {
                continue;
            };
            let vf = entry.map_entry_value_field();
            for (k, item) in m {
                decode_single(pool, &key(&p, k), &vf, item)?;
            }
        } else if f.is_list() {
            let Some(items) = raw.as_array() else {
                return fail(
                    &p,
                    format!("must be a JSON array, found {}", json_type(raw)),
                );
            };
            for (i, item) in items.iter().enumerate() {
                decode_single(pool, &idx(&p, i), &f, item)?;
            }
        } else {
            decode_single(pool, &p, &f, raw)?;
        }
    }
    Ok(())
}

fn decode_any(pool: &DescriptorPool, path: &str, v: &Value) -> Decoded {
    let obj = object(path, v, "an Any")?;
    let Some(url) = obj.get("@type") else {
        return fail(path, "an Any must have an '@type'");
    };
    let Some(url) = url.as_str() else {
        return fail(
            &key(path, "@type"),
            format!("must be a string, found {}", json_type(url)),
        );
    };
    let type_name = url.rsplit_once('/').map_or(url, |(_, n)| n);
    if TYPED_STRUCTS.contains(&type_name) {
        for (name, want) in [
            ("type_url", "string"),
            ("typeUrl", "string"),
            ("value", "object"),
        ] {
            match obj.get(name) {
                None | Some(Value::Null) => {}
                Some(v) if json_type(v) == want => {}
                Some(v) => {
                    return fail(
                        &at(path, name),
                        format!("must be a JSON {want}, found {}", json_type(v)),
                    );
                }
            }
        }
        return Ok(());
    }
    let Some(desc) = pool.get_message_by_name(type_name) else {
        if !type_name.is_empty() && ISTIO_TYPE_PREFIXES.iter().any(|p| type_name.starts_with(p)) {
            return Ok(());
        }
        return fail(
            &key(path, "@type"),
            format!("referenced type unknown: could not resolve Any message type {url:?}"),
        );
    };
    if desc.full_name().starts_with("google.protobuf.") {
        let Some(value) = obj.get("value") else {
            return fail(path, format!("an Any of {url} must have a 'value'"));
        };
        return decode_message(pool, &at(path, "value"), &desc, value);
    }
    let mut rest = obj.clone();
    rest.remove("@type");
    decode_message(pool, path, &desc, &Value::Object(rest))
}

fn decode_single(pool: &DescriptorPool, path: &str, f: &FieldDescriptor, v: &Value) -> Decoded {
    // Go's encoding/json leaves a value alone on null.
    if v.is_null() {
        return Ok(());
    }
    match f.kind() {
        Kind::Message(m) => decode_message(pool, path, &m, v),
        Kind::Enum(e) => match v {
            Value::String(s) => {
                if e.get_value_by_name(s).is_some() {
                    Ok(())
                } else {
                    fail(
                        path,
                        format!("unknown value {s:?} for enum {}", e.full_name()),
                    )
                }
            }
            Value::Number(n) if n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()) => Ok(()),
            Value::Number(n)
                if n.as_f64()
                    .is_some_and(|x| x.fract() == 0.0 && x.abs() <= f64::from(i32::MAX)) =>
            {
                Ok(())
            }
            _ => fail(
                path,
                format!(
                    "enum {} must be a name or a number, found {v}",
                    e.full_name()
                ),
            ),
        },
        Kind::Bool => match v {
            Value::Bool(_) => Ok(()),
            _ => fail(path, format!("must be a boolean, found {}", json_type(v))),
        },
        Kind::String => match v {
            Value::String(_) => Ok(()),
            _ => fail(path, format!("must be a string, found {}", json_type(v))),
        },
        Kind::Bytes => match v {
            Value::String(_) => Ok(()),
            _ => fail(
                path,
                format!("must be a base64 string, found {}", json_type(v)),
            ),
        },
        Kind::Double | Kind::Float => match v {
            Value::Number(_) => Ok(()),
            Value::String(s)
                if matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity")
                    || s.parse::<f64>().is_ok() =>
            {
                Ok(())
            }
            _ => fail(path, format!("must be a number, found {v}")),
        },
        kind => {
            let (min, max): (f64, f64) = match kind {
                Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => (i32::MIN.into(), i32::MAX.into()),
                Kind::Uint32 | Kind::Fixed32 => (0.0, u32::MAX.into()),
                Kind::Uint64 | Kind::Fixed64 => (0.0, u64::MAX as f64),
                _ => (i64::MIN as f64, i64::MAX as f64),
            };
            // A patch value is a protobuf Struct: its numbers are doubles,
            // written back without a fraction when they have none. jsonpb
            // also takes an integer in quotes.
            let n = match v {
                Value::Number(n) => n.as_f64(),
                Value::String(s) => s.parse::<i64>().ok().map(|i| i as f64),
                _ => None,
            };
            match n {
                Some(x) if x.fract() == 0.0 && (min..=max).contains(&x) => Ok(()),
                _ => fail(
                    path,
                    format!("must be an integer in {min}..{max}, found {v}"),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compressed_descriptor_set_inflates_to_envoys_api() {
        assert!(
            POOL_ZLIB.len() < 1_500_000,
            "{} bytes compressed",
            POOL_ZLIB.len()
        );
        let pool = POOL.as_ref().expect("the descriptor set decodes");
        for apply_to in [
            "CLUSTER",
            "LISTENER",
            "HTTP_FILTER",
            "BOOTSTRAP",
            "LISTENER_FILTER",
        ] {
            let name = message_of(apply_to).unwrap();
            assert!(pool.get_message_by_name(name).is_some(), "{name} missing");
        }
    }
}

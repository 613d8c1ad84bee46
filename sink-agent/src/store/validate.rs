//! Validation of received resources: each must be the kind's message,
//! decode against its schema and carry a name. Run on receipt (before the
//! store's writer sees the change) and again on load (the schema may have
//! changed since the file was written).

use std::sync::Arc;

use bytes::Bytes;
use meshhub_mcp::sink::ApplyError;
use meshhub_mcp::snapshot::EncodedResource;
use meshhub_proto::kinds::Kind;
use meshhub_proto::mcp::Resource;
use meshhub_proto::transcode::resource_to_object;
use meshhub_runtime::error_chain;
use prost::Message as _;

/// At most this many rejected resources are named in one NACK.
const NAMED_IN_NACK: usize = 3;

/// Checks every resource against `kind` and encodes each once. The error
/// names the first few rejected resources (by `kind namespace/name`, or by
/// index when the resource has no name).
pub fn validate(kind: &Kind, resources: Vec<Resource>) -> Result<Vec<EncodedResource>, ApplyError> {
    let mut out = Vec::with_capacity(resources.len());
    let mut errors = Vec::new();
    let mut rejected = 0usize;
    for (i, r) in resources.into_iter().enumerate() {
        match check(kind, &r, i) {
            Ok(()) => {
                let meta = r.metadata.as_ref();
                let name: Arc<str> = meta.map_or("", |m| m.name.as_str()).into();
                let version: Arc<str> = meta.map_or("", |m| m.version.as_str()).into();
                out.push(EncodedResource {
                    name,
                    version,
                    encoded: Bytes::from(r.encode_to_vec()),
                });
            }
            Err(message) => {
                rejected += 1;
                if errors.len() < NAMED_IN_NACK {
                    errors.push(message);
                }
            }
        }
    }
    if rejected == 0 {
        return Ok(out);
    }
    let mut message = errors.join("; ");
    if rejected > errors.len() {
        message.push_str(&format!(
            "; and {} more rejected resource(s)",
            rejected - errors.len()
        ));
    }
    Err(ApplyError::Invalid(message))
}

/// One resource: decodes against the kind's schema, checks the name.
pub(super) fn check(kind: &Kind, r: &Resource, index: usize) -> Result<(), String> {
    let named = r.metadata.as_ref().is_some_and(|m| !m.name.is_empty());
    resource_to_object(kind, r).map(drop).map_err(|e| {
        let mut m = error_chain(&e);
        if !named {
            m.push_str(&format!(" (resources[{index}])"));
        }
        m
    })
}

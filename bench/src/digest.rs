//! The correctness oracle: an order-independent digest of a collection's
//! content, computed the same way by the hub side (over what it published)
//! and by every consumer (over what it holds after applying each response).
//!
//! Each resource contributes a hash of its name, version, body type and body
//! bytes; the digest is the count and the wrapping sum of those hashes, so a
//! consumer can keep it as `name hash → entry hash` and apply deltas.

use std::hash::{DefaultHasher, Hash as _, Hasher as _};

use meshhub_proto::mcp::Resource;
use serde::{Deserialize, Serialize};

/// Hash of a resource name (the key consumers keep).
pub fn name_hash(name: &str) -> u64 {
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

/// `(name hash, entry hash)` of a decoded resource.
pub fn resource_hash(r: &Resource) -> (u64, u64) {
    let meta = r.metadata.as_ref();
    let name = meta.map_or("", |m| m.name.as_str());
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    meta.map_or("", |m| m.version.as_str()).hash(&mut h);
    if let Some(body) = &r.body {
        body.type_url.hash(&mut h);
        body.value.hash(&mut h);
    }
    (name_hash(name), h.finish())
}

/// A collection digest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Digest {
    /// Number of resources.
    pub count: u64,
    /// Wrapping sum of the entry hashes.
    pub sum: u64,
}

impl Digest {
    /// The digest of a set of entry hashes.
    pub fn of<'a>(entries: impl IntoIterator<Item = &'a u64>) -> Self {
        entries.into_iter().fold(Self::default(), |d, e| Self {
            count: d.count + 1,
            sum: d.sum.wrapping_add(*e),
        })
    }

    /// A compact printable form.
    pub fn key(&self) -> String {
        format!("{}:{:016x}", self.count, self.sum)
    }
}

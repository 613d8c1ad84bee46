//! Outgoing messages whose resources are encoded once and shared.
//!
//! A resource is encoded to protobuf bytes once, when its object changes, and
//! every stream that sends it shares those bytes ([`Bytes`] behind an
//! [`Arc`]). Protobuf makes this possible without a second schema: an embedded
//! message and a `bytes` field have the same wire form (tag, length, payload).
//!
//! * [`EncodedResources`] is wire-identical to `istio.mcp.v1alpha1.Resources`.
//! * [`EncodedDiscoveryResponse`] is wire-identical to Envoy's
//!   `envoy.service.discovery.v3.DiscoveryResponse`; each shared resource is
//!   framed on the fly as `google.protobuf.Any{type_url:
//!   "type.googleapis.com/istio.mcp.v1alpha1.Resource", value}` (MCP-over-xDS).
//! * [`EncodedDeltaDiscoveryResponse`] is wire-identical to Envoy's
//!   `DeltaDiscoveryResponse`; each shared resource is framed as
//!   `Resource{version, resource: Any{…, value}, name}` (Delta MCP-over-xDS).
//!
//! The servers and the hub's dial-out (in `meshhub-mcp`) write these
//! messages with a chunked body that sends the shared bytes without a
//! per-stream copy: the resources of a
//! full-state or incremental response go out as their list's
//! [`ResourceList::section`], framed once for every stream.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytes::{Buf, BufMut, Bytes};
use prost::encoding::{
    self, DecodeContext, WireType, encode_key, encode_varint, encoded_len_varint, key_len,
};
use prost::{DecodeError, Message};

/// Encoded length of a proto3 string field (nothing when empty).
fn string_len(tag: u32, s: &String) -> usize {
    if s.is_empty() {
        0
    } else {
        encoding::string::encoded_len(tag, s)
    }
}

/// Encoded `istio.mcp.v1alpha1.Resource` messages, shared between responses.
pub type SharedResources = Arc<ResourceList>;

/// How a response frames each of its resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `istio.mcp.v1alpha1.Resources` field 3: the resource as it is.
    Mcp = 0,
    /// `DiscoveryResponse` field 2: `Any{MCP_RESOURCE_TYPE_URL, resource}`.
    Any = 1,
}

/// A list of encoded resources shared by every response that sends it
/// (one snapshot of a collection, or one delta between two snapshots).
///
/// Every stream that sends the list sends the same bytes between its
/// response's head and tail: the **section** (each resource behind its
/// field tag, length and wrapper). [`ResourceList::section`] builds it once
/// and hands out the same [`Bytes`] while any of them lives, so a change
/// fanned out to thousands of streams is framed once, not once per stream;
/// when the last stream has written it, it is freed (nothing is kept for
/// idle streams).
#[derive(Default)]
pub struct ResourceList {
    items: Vec<Bytes>,
    /// Per [`Framing`]: the section, while any copy of it lives.
    sections: [Mutex<Weak<Section>>; 2],
    /// Per [`Framing`]: the section's length, once asked (every response's
    /// length needs it).
    lens: [OnceLock<usize>; 2],
}

/// The owner of a section's bytes.
struct Section(Vec<u8>);

/// A strong reference that [`Bytes::from_owner`] holds.
struct SectionRef(Arc<Section>);

impl AsRef<[u8]> for SectionRef {
    fn as_ref(&self) -> &[u8] {
        &self.0.0
    }
}

impl ResourceList {
    /// The resources, each behind its framing, as one shared buffer: built
    /// on the first call, then the same bytes as long as any returned
    /// [`Bytes`] (or a slice of it) lives.
    pub fn section(&self, framing: Framing) -> Bytes {
        let mut slot = self.sections[framing as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let section = slot.upgrade().unwrap_or_else(|| {
            let built = Arc::new(Section(self.build_section(framing)));
            *slot = Arc::downgrade(&built);
            built
        });
        Bytes::from_owner(SectionRef(section))
    }

    /// The encoded length of the section of `framing`.
    pub fn section_len(&self, framing: Framing) -> usize {
        *self.lens[framing as usize]
            .get_or_init(|| self.items.iter().map(|r| framed_len(framing, r)).sum())
    }

    fn build_section(&self, framing: Framing) -> Vec<u8> {
        let mut buf = Vec::with_capacity(self.section_len(framing));
        for r in &self.items {
            write_framed(framing, r, &mut buf);
        }
        buf
    }

    /// Appends a resource (decoding); any section built before is dropped.
    fn push(&mut self, resource: Bytes) {
        self.items.push(resource);
        self.sections = Default::default();
        self.lens = Default::default();
    }
}

/// Resource `r` behind the field tag and wrapper of `framing`.
pub fn write_framed(framing: Framing, r: &Bytes, buf: &mut impl BufMut) {
    write_framed_prefix(framing, r, buf);
    buf.put_slice(r);
}

/// What [`write_framed`] writes before `r`'s own bytes: the field tag and
/// length, and for [`Framing::Any`] the `Any` header up to its `value`'s
/// length.
pub fn write_framed_prefix(framing: Framing, r: &Bytes, buf: &mut impl BufMut) {
    match framing {
        Framing::Mcp => encode_key(3, WireType::LengthDelimited, buf),
        Framing::Any => {
            encode_key(2, WireType::LengthDelimited, buf);
            encode_varint(any_body_len(r) as u64, buf);
            encode_key(1, WireType::LengthDelimited, buf);
            encode_varint(MCP_RESOURCE_TYPE_URL.len() as u64, buf);
            buf.put_slice(MCP_RESOURCE_TYPE_URL.as_bytes());
            encode_key(2, WireType::LengthDelimited, buf);
        }
    }
    encode_varint(r.len() as u64, buf);
}

/// The length [`write_framed`] writes.
fn framed_len(framing: Framing, r: &Bytes) -> usize {
    match framing {
        Framing::Mcp => encoding::bytes::encoded_len(3, r),
        Framing::Any => {
            let body = any_body_len(r);
            key_len(2) + encoded_len_varint(body as u64) + body
        }
    }
}

impl std::ops::Deref for ResourceList {
    type Target = [Bytes];
    fn deref(&self) -> &[Bytes] {
        &self.items
    }
}

impl From<Vec<Bytes>> for ResourceList {
    fn from(items: Vec<Bytes>) -> Self {
        Self {
            items,
            sections: Default::default(),
            lens: Default::default(),
        }
    }
}

impl FromIterator<Bytes> for ResourceList {
    fn from_iter<I: IntoIterator<Item = Bytes>>(iter: I) -> Self {
        Self::from(iter.into_iter().collect::<Vec<_>>())
    }
}

impl Clone for ResourceList {
    fn clone(&self) -> Self {
        Self::from(self.items.clone())
    }
}

impl PartialEq for ResourceList {
    fn eq(&self, other: &Self) -> bool {
        self.items == other.items
    }
}

impl Eq for ResourceList {}

impl std::fmt::Debug for ResourceList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.items).finish()
    }
}

/// `istio.mcp.v1alpha1.Resources` with pre-encoded resources.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EncodedResources {
    /// Field 1: the collection version this response brings the sink to.
    pub system_version_info: String,
    /// Field 2.
    pub collection: String,
    /// Field 3: each element is one encoded `Resource`.
    pub resources: SharedResources,
    /// Field 4: names removed (incremental responses only).
    pub removed_resources: Vec<String>,
    /// Field 5.
    pub nonce: String,
    /// Field 6.
    pub incremental: bool,
}

impl Message for EncodedResources {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if !self.system_version_info.is_empty() {
            encoding::string::encode(1, &self.system_version_info, buf);
        }
        if !self.collection.is_empty() {
            encoding::string::encode(2, &self.collection, buf);
        }
        for r in self.resources.iter() {
            write_framed(Framing::Mcp, r, buf);
        }
        encoding::string::encode_repeated(4, &self.removed_resources, buf);
        if !self.nonce.is_empty() {
            encoding::string::encode(5, &self.nonce, buf);
        }
        if self.incremental {
            encoding::bool::encode(6, &self.incremental, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => encoding::string::merge(wire_type, &mut self.system_version_info, buf, ctx),
            2 => encoding::string::merge(wire_type, &mut self.collection, buf, ctx),
            3 => {
                let mut b = Bytes::new();
                encoding::bytes::merge(wire_type, &mut b, buf, ctx)?;
                Arc::make_mut(&mut self.resources).push(b);
                Ok(())
            }
            4 => encoding::string::merge_repeated(wire_type, &mut self.removed_resources, buf, ctx),
            5 => encoding::string::merge(wire_type, &mut self.nonce, buf, ctx),
            6 => encoding::bool::merge(wire_type, &mut self.incremental, buf, ctx),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        string_len(1, &self.system_version_info)
            + string_len(2, &self.collection)
            + self.resources.section_len(Framing::Mcp)
            + encoding::string::encoded_len_repeated(4, &self.removed_resources)
            + string_len(5, &self.nonce)
            + if self.incremental { 2 } else { 0 }
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// Type URL of every resource in an MCP-over-xDS response.
pub const MCP_RESOURCE_TYPE_URL: &str = "type.googleapis.com/istio.mcp.v1alpha1.Resource";

/// Envoy's `DiscoveryResponse` (SotW) with pre-encoded MCP resources.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EncodedDiscoveryResponse {
    /// Field 1.
    pub version_info: String,
    /// Field 2: each element is one encoded `istio.mcp.v1alpha1.Resource`,
    /// written as `Any{MCP_RESOURCE_TYPE_URL, value}`.
    pub resources: SharedResources,
    /// Field 4: the requested type URL (a GVK string for MCP-over-xDS).
    pub type_url: String,
    /// Field 5.
    pub nonce: String,
}

/// Length of `Any{type_url: MCP_RESOURCE_TYPE_URL, value: r}`'s body.
fn any_body_len(r: &Bytes) -> usize {
    let url = MCP_RESOURCE_TYPE_URL.len();
    key_len(1) + encoded_len_varint(url as u64) + url + encoding::bytes::encoded_len(2, r)
}

impl Message for EncodedDiscoveryResponse {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if !self.version_info.is_empty() {
            encoding::string::encode(1, &self.version_info, buf);
        }
        for r in self.resources.iter() {
            write_framed(Framing::Any, r, buf);
        }
        if !self.type_url.is_empty() {
            encoding::string::encode(4, &self.type_url, buf);
        }
        if !self.nonce.is_empty() {
            encoding::string::encode(5, &self.nonce, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => encoding::string::merge(wire_type, &mut self.version_info, buf, ctx),
            2 => {
                let mut any = prost_types::Any::default();
                encoding::message::merge(wire_type, &mut any, buf, ctx)?;
                if any.type_url != MCP_RESOURCE_TYPE_URL {
                    #[allow(deprecated)] // prost offers no other way to build one
                    return Err(DecodeError::new(format!(
                        "resource of type {:?}, expected {MCP_RESOURCE_TYPE_URL}",
                        any.type_url
                    )));
                }
                Arc::make_mut(&mut self.resources).push(any.value.into());
                Ok(())
            }
            4 => encoding::string::merge(wire_type, &mut self.type_url, buf, ctx),
            5 => encoding::string::merge(wire_type, &mut self.nonce, buf, ctx),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        string_len(1, &self.version_info)
            + self.resources.section_len(Framing::Any)
            + string_len(4, &self.type_url)
            + string_len(5, &self.nonce)
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// One resource of an [`EncodedDeltaDiscoveryResponse`]: Envoy's
/// `envoy.service.discovery.v3.Resource{name, version, resource}` with the
/// resource an encoded `istio.mcp.v1alpha1.Resource`, shared as is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EncodedDeltaResource {
    /// Field 3: `metadata.name` (`namespace/name`).
    pub name: String,
    /// Field 1: `metadata.version`.
    pub version: String,
    /// Field 2's `Any.value`: the encoded `istio.mcp.v1alpha1.Resource`,
    /// written as `Any{MCP_RESOURCE_TYPE_URL, value}`.
    pub resource: Bytes,
}

/// The two metadata fields Delta xDS repeats outside the resource; prost
/// skips every other field (labels, body) without decoding it.
#[derive(Clone, PartialEq, prost::Message)]
struct MetadataHead {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "3")]
    version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ResourceHead {
    #[prost(message, optional, tag = "1")]
    metadata: Option<MetadataHead>,
}

impl EncodedDeltaResource {
    /// Wraps an encoded `istio.mcp.v1alpha1.Resource`, reading its
    /// `metadata.name` and `metadata.version` (and nothing else) from the
    /// bytes: the bytes are what the peer receives, so the names can never
    /// disagree with them.
    pub fn from_mcp(resource: Bytes) -> Result<Self, DecodeError> {
        let head = ResourceHead::decode(resource.as_ref())?;
        let meta = head.metadata.unwrap_or_default();
        Ok(Self {
            name: meta.name,
            version: meta.version,
            resource,
        })
    }

    /// Length of `Any{MCP_RESOURCE_TYPE_URL, value: resource}`'s body.
    fn any_len(&self) -> usize {
        any_body_len(&self.resource)
    }

    /// Length of the envoy `Resource` body.
    fn body_len(&self) -> usize {
        let any = self.any_len();
        string_len(1, &self.version)
            + key_len(2)
            + encoded_len_varint(any as u64)
            + any
            + string_len(3, &self.name)
    }

    /// Everything of `resources[i]` that comes before the MCP resource
    /// bytes: the `Resource` tag and length, `version` (field 1), and the
    /// `Any` wrapper up to its value's length. Fields in tag order, as prost
    /// writes them, so the encoding is byte-identical to Envoy's type.
    pub fn write_prefix(&self, buf: &mut impl BufMut) {
        encode_key(2, WireType::LengthDelimited, buf);
        encode_varint(self.body_len() as u64, buf);
        if !self.version.is_empty() {
            encoding::string::encode(1, &self.version, buf);
        }
        encode_key(2, WireType::LengthDelimited, buf);
        encode_varint(self.any_len() as u64, buf);
        encode_key(1, WireType::LengthDelimited, buf);
        encode_varint(MCP_RESOURCE_TYPE_URL.len() as u64, buf);
        buf.put_slice(MCP_RESOURCE_TYPE_URL.as_bytes());
        encode_key(2, WireType::LengthDelimited, buf);
        encode_varint(self.resource.len() as u64, buf);
    }

    /// What comes after the MCP resource bytes: `name` (field 3).
    pub fn write_suffix(&self, buf: &mut impl BufMut) {
        if !self.name.is_empty() {
            encoding::string::encode(3, &self.name, buf);
        }
    }

    /// The encoded length of this element of `resources`, tag included.
    fn encoded_len(&self) -> usize {
        let body = self.body_len();
        key_len(2) + encoded_len_varint(body as u64) + body
    }
}

/// Envoy's `DeltaDiscoveryResponse` (incremental xDS) with pre-encoded MCP
/// resources: like [`EncodedDiscoveryResponse`], each resource's bytes are
/// the shared snapshot bytes; only the small envelope (name, version, `Any`
/// header) is written per stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EncodedDeltaDiscoveryResponse {
    /// Field 1.
    pub system_version_info: String,
    /// Field 2: resources added or changed.
    pub resources: Vec<EncodedDeltaResource>,
    /// Field 4: the requested type URL.
    pub type_url: String,
    /// Field 5.
    pub nonce: String,
    /// Field 6: names removed.
    pub removed_resources: Vec<String>,
}

impl EncodedDeltaDiscoveryResponse {
    /// The fields after the resources (type URL, nonce, removals), in tag
    /// order.
    pub fn write_tail(&self, buf: &mut impl BufMut) {
        if !self.type_url.is_empty() {
            encoding::string::encode(4, &self.type_url, buf);
        }
        if !self.nonce.is_empty() {
            encoding::string::encode(5, &self.nonce, buf);
        }
        encoding::string::encode_repeated(6, &self.removed_resources, buf);
    }
}

impl Message for EncodedDeltaDiscoveryResponse {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if !self.system_version_info.is_empty() {
            encoding::string::encode(1, &self.system_version_info, buf);
        }
        for r in &self.resources {
            r.write_prefix(buf);
            buf.put_slice(&r.resource);
            r.write_suffix(buf);
        }
        self.write_tail(buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => encoding::string::merge(wire_type, &mut self.system_version_info, buf, ctx),
            2 => {
                let mut r = envoy_types::pb::envoy::service::discovery::v3::Resource::default();
                encoding::message::merge(wire_type, &mut r, buf, ctx)?;
                let any = r.resource.unwrap_or_default();
                if any.type_url != MCP_RESOURCE_TYPE_URL {
                    #[allow(deprecated)] // prost offers no other way to build one
                    return Err(DecodeError::new(format!(
                        "resource of type {:?}, expected {MCP_RESOURCE_TYPE_URL}",
                        any.type_url
                    )));
                }
                self.resources.push(EncodedDeltaResource {
                    name: r.name,
                    version: r.version,
                    resource: any.value.into(),
                });
                Ok(())
            }
            4 => encoding::string::merge(wire_type, &mut self.type_url, buf, ctx),
            5 => encoding::string::merge(wire_type, &mut self.nonce, buf, ctx),
            6 => encoding::string::merge_repeated(wire_type, &mut self.removed_resources, buf, ctx),
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        string_len(1, &self.system_version_info)
            + self
                .resources
                .iter()
                .map(EncodedDeltaResource::encoded_len)
                .sum::<usize>()
            + string_len(4, &self.type_url)
            + string_len(5, &self.nonce)
            + encoding::string::encoded_len_repeated(6, &self.removed_resources)
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests;

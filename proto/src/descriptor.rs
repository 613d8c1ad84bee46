//! The descriptor pool of every schema meshhub knows: MCP and the Istio
//! configuration messages, compiled from `schema/` at build time.

use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};

/// The encoded `FileDescriptorSet` of everything under `schema/`.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/meshhub_descriptor.bin"));

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(FILE_DESCRIPTOR_SET)
        .expect("the descriptor set compiled by build.rs is valid")
});

/// The shared descriptor pool (built once, on first use).
pub fn pool() -> &'static DescriptorPool {
    &POOL
}

/// The descriptor of a message by its full name (`istio.networking.v1alpha3.VirtualService`).
pub fn message(full_name: &str) -> Option<MessageDescriptor> {
    pool().get_message_by_name(full_name)
}

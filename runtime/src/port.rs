//! Why a server port of the hub or the agent can't be opened: its address
//! can't be bound, or its gRPC reflection can't be built. Every function
//! opening a port answers with [`PortError`], so each binary's start error
//! has one variant for all its ports.

pub use crate::admin::BindError;
pub use crate::grpc::ReflectionError;

/// A port can't be opened.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// Its listen address can't be bound.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// Its gRPC reflection can't be built.
    #[error(transparent)]
    Reflection(#[from] ReflectionError),
}

//! Why a server port of the hub or the agent can't be opened: its address
//! can't be bound, or its gRPC reflection can't be built. Every function
//! opening a port answers with [`PortError`], so each binary's start error
//! has one variant for all its ports.

use std::net::SocketAddr;

use tokio::net::TcpListener;

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

/// A listen address can't be bound.
#[derive(Debug, thiserror::Error)]
#[error("can't listen on {addr} ({what})")]
pub struct BindError {
    /// Which port (`grpc`, `admin`, `sink`).
    pub what: &'static str,
    /// The address.
    pub addr: SocketAddr,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// Why reflection can't be built (a descriptor set that does not decode).
#[derive(Debug, thiserror::Error)]
#[error("can't build gRPC reflection")]
pub struct ReflectionError(#[source] pub(crate) tonic_reflection::server::Error);

/// Binds `addr` for the port called `what`.
pub async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, PortError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { what, addr, source }.into())
}

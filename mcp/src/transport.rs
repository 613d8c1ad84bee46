//! gRPC transport settings every meshhub server and client uses.
//!
//! HTTP/2's default flow-control windows (64 KiB per stream and per
//! connection) make a large full-state response wait for a round trip every
//! 64 KiB; Istio's peers raised them (Galley: 1 MiB per stream, 16 MiB per
//! connection; Pilot: 1 MiB). meshhub uses the same windows, keepalives that
//! match Galley's (30 s, 10 s timeout: istio#13910 was a keepalive mismatch),
//! and no Nagle delay.

use tonic::transport::{Endpoint, Server};

/// Per-stream receive window.
pub const STREAM_WINDOW: u32 = 1 << 20;
/// Per-connection receive window.
pub const CONNECTION_WINDOW: u32 = 16 << 20;
pub use crate::limits::{KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, MAX_CONCURRENT_STREAMS};

/// A tonic server builder with meshhub's transport settings.
pub fn server() -> Server {
    server_with(&crate::limits::Limits::default())
}

/// A tonic server builder with meshhub's transport settings and the
/// connection-level parts of `limits` (streams per connection, keepalive).
/// The stream-level parts are [`crate::limits::StreamLimitLayer`]'s.
pub fn server_with(limits: &crate::limits::Limits) -> Server {
    Server::builder()
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_concurrent_streams(limits.max_streams_per_connection)
        .http2_keepalive_interval(Some(limits.keepalive_interval))
        .http2_keepalive_timeout(Some(limits.keepalive_timeout))
        .tcp_nodelay(true)
}

/// Applies meshhub's transport settings to a client endpoint (the
/// engine's dialers do this themselves; the connect timeout is the caller's).
pub fn tune(endpoint: Endpoint) -> Endpoint {
    endpoint
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true)
}

/// Why a connection attempt failed, on one line with its causes (tonic's
/// own text is only "transport error"; the cause says "Connection refused",
/// "invalid peer certificate", ...).
pub fn connect_error(e: &tonic::transport::Error) -> String {
    format!("connect: {}", meshhub_proto::error_chain(e))
}

/// Why a dialed stream (the source dialing a sink, the sink client
/// dialing a source) could not be opened. A refusal keeps the peer's
/// status, so callers decide on its code, never on the text.
#[derive(Clone, Debug, thiserror::Error)]
pub enum DialError {
    /// The endpoint can't be used (its URI, its TLS files).
    #[error("{0}")]
    Endpoint(String),
    /// No connection (the text is [`connect_error`]'s).
    #[error("{0}")]
    Connect(String),
    /// The peer refused the call.
    #[error("{}: {}", .0.code(), .0.message())]
    Refused(tonic::Status),
    /// This process could not make the call (its request could not be
    /// built or queued).
    #[error("internal: {0}")]
    Internal(String),
}

//! The process runtime shared by `meshhub` and `meshhub-sink-agent` (the
//! role linkerd2's policy-controller runtime crate has there): logging
//! ([`logging`]), the Prometheus recorder ([`metrics`]), the admin HTTP
//! port's base routes and introspection ([`admin`], [`debug`], guarded by
//! [`auth`]), the gRPC server base with health and reflection ([`grpc`]),
//! signals ([`signal`]), the owned tasks and their graceful end
//! ([`lifecycle`]), [`entry`] (what `main` does) and [`error_chain`].

pub mod admin;
pub mod auth;
pub mod config_file;
pub mod debug;
pub mod entry;
pub mod grpc;
pub mod held;
pub mod lifecycle;
pub mod logging;
pub mod metrics;
pub mod port;
pub mod signal;

/// `e` and its causes on one line (defined in `meshhub-proto`, the lowest
/// crate that needs it: the Kubernetes glue uses it too).
pub use meshhub_proto::error_chain;

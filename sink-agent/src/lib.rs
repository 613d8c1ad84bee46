//! meshhub sink agent: runs in a remote cluster, receives that cluster's
//! mesh configuration over MCP (pushed by the hub to its `ResourceSink`, or
//! pulled from the hub's `ResourceSource`), validates and persists it, and
//! serves it again to the cluster's own consumers (`ResourceSource` and
//! MCP-over-xDS ADS).
//!
//! [`config`] parses and checks flags and the YAML file at the edge;
//! [`store`] is the persistent store (the engine's `Updater` and the single
//! writer of the local snapshot cache); [`app`] wires the gRPC services and
//! [`admin`] the admin HTTP port; [`apply`] puts what is ACKed into the
//! cluster's Kubernetes API (opt-in). "Apply" means only that: the store
//! *accepts* changes (validates, persists and publishes them).

pub mod admin;
pub mod app;
pub mod apply;
mod backoff;
pub mod config;
pub mod store;
pub mod upward;

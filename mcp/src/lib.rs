//! meshhub's MCP protocol engine.
//!
//! What it does: holds immutable per-group snapshots of encoded resources
//! ([`snapshot`], [`cache`]), runs the source and sink sides of MCP streams as
//! pure state machines ([`source`], [`sink`]), drives them over gRPC in all
//! four roles (serve or dial `ResourceSource`, serve or dial `ResourceSink`)
//! and MCP-over-xDS ([`ads`]), records every ACK and NACK ([`ledger`]), and
//! reconnects with backoff and jitter ([`reconnect`]).
//!
//! What it does not do: read Kubernetes, files or configuration, validate
//! objects or decide which cluster gets what. The hub and the sink agent do.

pub mod ads;
pub mod authz;
pub mod cache;
pub mod dial;
pub mod event;
pub mod group;
pub mod ledger;
pub mod limits;
pub mod listen;
pub mod reconnect;
pub mod sink;
pub mod snapshot;
pub mod source;
pub mod tls;
pub mod transport;

//! meshhub's MCP protocol engine.
//!
//! What it does: holds immutable per-group snapshots of encoded resources
//! ([`snapshot`], [`cache`]), runs the source and sink sides of MCP streams as
//! pure state machines ([`source`], [`sink`]), drives them over gRPC in all
//! four roles (serve or dial `ResourceSource`, serve or dial `ResourceSink`)
//! and MCP-over-xDS ([`ads`]), records every ACK and NACK ([`ledger`]), and
//! reconnects with backoff and jitter ([`reconnect`]).
//!
//! What it does not do: read Kubernetes, files or configuration files,
//! validate objects or decide which cluster gets what. The hub and the sink
//! agent do. It owns the configuration blocks of its own settings (limits,
//! a peer to dial, reconnect: [`settings`] says how such blocks are
//! checked); the files are theirs.

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
pub mod settings;
pub mod sink;
pub mod snapshot;
pub mod source;
pub mod tls;
pub mod transport;

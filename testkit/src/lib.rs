//! Test support shared by every crate's tests: waiting for a condition with
//! a deadline ([`wait`]), a throwaway PKI ([`pki`]), the Istio fixtures and
//! the fuzz corpora ([`fixtures`]), Istio's API module of the newest
//! release ([`istio_api`]), builders of the objects tests repeat
//! ([`objects`]), a hand-driven MCP consumer ([`mcp`]), raw bytes on a
//! socket ([`net`]), a minimal loopback HTTP client ([`http`]) and ports to
//! hand to something that binds them later ([`ports`]).
//!
//! A leaf crate: it knows nothing of meshhub beyond `meshhub-proto`'s wire
//! types, so every crate can dev-depend on it. What needs the hub or the
//! agent (starting one in-process or as a process) lives in `meshhub-e2e`.

pub mod fixtures;
pub mod http;
pub mod istio_api;
pub mod mcp;
pub mod net;
pub mod objects;
pub mod pki;
pub mod ports;
pub mod wait;

pub use wait::{DEADLINE, eventually, eventually_blocking, eventually_some, within};

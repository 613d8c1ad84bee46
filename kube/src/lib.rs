//! The one home of meshhub's Kubernetes glue, shared by the hub (its
//! Kubernetes source, leader election, shared pins, admission webhook) and
//! the sink agent (its applier):
//!
//! * [`client`]: where an API server is ([`Connection`]: a kubeconfig and
//!   context, or what `KUBECONFIG`/`~/.kube/config`/in-cluster say) and the
//!   client built from it; [`Clients`] builds one client per distinct
//!   connection, so every feature talking to the same API server shares it.
//! * [`discovery`]: which version of a kind the API server serves
//!   ([`Served`]), and the dynamic API of a served kind.
//! * [`object`]: a [`kube::api::DynamicObject`] as meshhub carries it (a
//!   [`meshhub_proto::object::Object`]) and the comparison of our object
//!   with a live one.
//! * [`error`]: a Kubernetes error as one line, with the API server's
//!   message.
//! * [`status`]: the `status` of Istio's objects (`IstioStatus`), read from
//!   a live object and written with server-side apply.
//!
//! Nothing here knows MCP: `meshhub-mcp` and `meshhub-proto` never see
//! Kubernetes; this crate sees `meshhub-proto` only for the kind table and
//! the object form.

pub mod client;
pub mod discovery;
pub mod error;
pub mod object;
pub mod status;

pub use client::{ClientError, Clients, Connection, ConnectionInvalid};
pub use discovery::{Served, discover};
pub use error::error_text;

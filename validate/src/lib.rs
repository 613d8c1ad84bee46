//! Semantic validation of Istio configuration: a pure library over
//! meshhub-proto's objects and descriptor pool, shared by the hub's sources,
//! its admission webhook and offline tools.
//!
//! The schema transcoder (meshhub-proto) checks what a schema can express
//! (known fields, types, enum names). This crate checks the rules a schema
//! cannot: the ones Istio's own admission webhook enforces
//! (`pkg/config/validation` in istio/istio), such as "a VirtualService needs
//! at least one host", "weights of several destinations must not all be
//! zero" or "a Gateway server on an HTTPS port needs TLS settings".
//!
//! The rules follow current Istio. Where the Istio 1.5 validation data set
//! (the fixtures under `shared/fixtures/istio/validation`) depends on a rule
//! that was relaxed later, the 1.5 rule is kept and says so in its comment.
//!
//! Validation works on the JSON form of `spec` (camelCase field names, enums
//! as names or numbers, their names read from the descriptor pool) and never
//! panics, whatever the JSON: a field of the wrong type is treated as absent
//! here and reported by the schema layer. Every problem of an object is
//! reported, each with a field path.
//!
//! The Gateway API kinds meshhub carries are checked for being well-formed
//! objects of their kind and, by a [`Validator`] given their CRDs
//! ([`CrdSchemas`]), against the CRDs' OpenAPI schemas and CEL rules as the
//! API server checks them (module [`crd`]). Other kinds outside the Istio
//! API groups pass unchecked. [`names`] holds the
//! naming rules (DNS labels and the like) for anyone who needs them.
//!
//! The size limits of Istio's CRDs (`maxItems`, `maxLength`,
//! `maxProperties` and their `min` counterparts), which the API server
//! enforces, come from a table of our own that a test compares with the
//! CRDs (module [`limits`]).

mod check;
pub mod crd;
mod enums;
mod envoy;
mod extensions;
mod gateway_api;
mod go_url;
mod hosts;
mod http;
mod json;
pub mod limits;
mod metadata;
pub mod names;
mod net;
mod networking;
mod problem;
mod report;
mod schema;
mod security;
mod selectors;
mod validator;
mod values;
mod verdict;

#[cfg(test)]
mod tests;

pub use check::{is_checked_kind, problems, validate};
pub use crd::{CrdError, CrdSchemas, NotEvaluated};
pub use problem::{Problem, ValidationError};
pub use validator::Validator;
pub use verdict::{Finding, Verdict};

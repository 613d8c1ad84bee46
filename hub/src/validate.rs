//! Semantic validation of Istio configuration.
//!
//! The schema transcoder checks what a schema can express (known fields,
//! types, enum names). This module checks the rules a schema cannot: the ones
//! Istio's own admission webhook enforces (`pkg/config/validation` in
//! istio/istio), such as "a VirtualService needs at least one host", "weights
//! of several destinations must not all be zero" or "a Gateway server on an
//! HTTPS port needs TLS settings".
//!
//! The rules follow current Istio. Where the Istio 1.5 validation data set
//! (the fixtures under `shared/fixtures/istio/validation`) depends on a rule
//! that was relaxed later, the 1.5 rule is kept and says so in its comment.
//!
//! Validation works on the JSON form of `spec` (camelCase field names, enums
//! as names or numbers) and never panics, whatever the JSON: a field of the
//! wrong type is treated as absent here and reported by the schema layer.
//! Every problem of an object is reported, each with a field path.
//!
//! Kinds this module does not know (anything outside the Istio API groups
//! below) pass unchecked.

use std::fmt;

use meshhub_proto::object::Object;
use serde_json::Value;

mod common;
mod extensions;
mod networking;
mod security;
mod virtual_service;

#[cfg(test)]
mod tests;

use common::Report;

/// One problem found in an object: where, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Field path from the object's top level, e.g. `spec.http[0].route`.
    pub path: String,
    /// What is wrong, e.g. `must not be empty`.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// An object that breaks one or more semantic rules.
///
/// Displays as `VirtualService default/reviews: spec.hosts: must not be
/// empty`, with further problems appended after `; `.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError {
    /// The object's kind.
    pub kind: String,
    /// The object's namespace (`default` when the object has none).
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// Every problem found; never empty.
    pub problems: Vec<Problem>,
}

impl ValidationError {
    /// One line per problem, each prefixed with kind and `namespace/name`.
    pub fn messages(&self) -> Vec<String> {
        self.problems
            .iter()
            .map(|p| format!("{} {}/{}: {p}", self.kind, self.namespace, self.name))
            .collect()
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}: ", self.kind, self.namespace, self.name)?;
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// The Istio kinds this module validates, keyed by API group and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IstioKind {
    VirtualService,
    DestinationRule,
    Gateway,
    ServiceEntry,
    Sidecar,
    EnvoyFilter,
    WorkloadEntry,
    WorkloadGroup,
    ProxyConfig,
    AuthorizationPolicy,
    PeerAuthentication,
    RequestAuthentication,
    Telemetry,
    WasmPlugin,
}

impl IstioKind {
    /// The kind for `group`/`kind`, or `None` for a kind this module does
    /// not check. The group matters: Gateway API also has a `Gateway`.
    fn of(group: &str, kind: &str) -> Option<Self> {
        Some(match (group, kind) {
            ("networking.istio.io", "VirtualService") => Self::VirtualService,
            ("networking.istio.io", "DestinationRule") => Self::DestinationRule,
            ("networking.istio.io", "Gateway") => Self::Gateway,
            ("networking.istio.io", "ServiceEntry") => Self::ServiceEntry,
            ("networking.istio.io", "Sidecar") => Self::Sidecar,
            ("networking.istio.io", "EnvoyFilter") => Self::EnvoyFilter,
            ("networking.istio.io", "WorkloadEntry") => Self::WorkloadEntry,
            ("networking.istio.io", "WorkloadGroup") => Self::WorkloadGroup,
            ("networking.istio.io", "ProxyConfig") => Self::ProxyConfig,
            ("security.istio.io", "AuthorizationPolicy") => Self::AuthorizationPolicy,
            ("security.istio.io", "PeerAuthentication") => Self::PeerAuthentication,
            ("security.istio.io", "RequestAuthentication") => Self::RequestAuthentication,
            ("telemetry.istio.io", "Telemetry") => Self::Telemetry,
            ("extensions.istio.io", "WasmPlugin") => Self::WasmPlugin,
            _ => return None,
        })
    }
}

/// Whether [`validate`] has rules for objects of this API group and kind.
pub fn is_checked_kind(group: &str, kind: &str) -> bool {
    IstioKind::of(group, kind).is_some()
}

/// Checks one object against Istio's semantic rules for its kind.
///
/// Returns every problem found. Objects of kinds outside the Istio API groups
/// always pass.
pub fn validate(obj: &Object) -> Result<(), ValidationError> {
    let problems = problems(obj);
    if problems.is_empty() {
        return Ok(());
    }
    Err(ValidationError {
        kind: obj.kind.clone(),
        namespace: namespace_of(obj).to_owned(),
        name: obj.metadata.name.clone(),
        problems,
    })
}

/// The namespace an object lands in: its own, or `default`.
fn namespace_of(obj: &Object) -> &str {
    match obj.metadata.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns,
        _ => "default",
    }
}

/// Every problem of `obj`, in field order; empty when it is valid.
pub fn problems(obj: &Object) -> Vec<Problem> {
    let Some(kind) = IstioKind::of(obj.group(), &obj.kind) else {
        return Vec::new();
    };
    let mut r = Report::default();
    check_dry_run_annotation(&mut r, obj, kind);

    // A missing spec is an empty message to Istio: the kind's rules then say
    // what is missing. A spec that is not an object cannot be checked at all.
    let empty = Value::Object(serde_json::Map::new());
    let spec = match obj.spec() {
        None | Some(Value::Null) => &empty,
        Some(v @ Value::Object(_)) => v,
        Some(_) => {
            r.err("spec", "must be an object");
            return r.into_problems();
        }
    };
    let ns = namespace_of(obj);
    let name = obj.metadata.name.as_str();
    match kind {
        IstioKind::VirtualService => virtual_service::check(&mut r, spec, ns),
        IstioKind::DestinationRule => networking::destination_rule(&mut r, spec, ns),
        IstioKind::Gateway => networking::gateway(&mut r, spec, name),
        IstioKind::ServiceEntry => networking::service_entry(&mut r, spec, ns),
        IstioKind::Sidecar => networking::sidecar(&mut r, spec),
        IstioKind::EnvoyFilter => networking::envoy_filter(&mut r, spec),
        IstioKind::WorkloadEntry => networking::workload_entry(&mut r, spec),
        IstioKind::WorkloadGroup => networking::workload_group(&mut r, spec),
        IstioKind::ProxyConfig => networking::proxy_config(&mut r, spec),
        IstioKind::AuthorizationPolicy => security::authorization_policy(&mut r, spec),
        IstioKind::PeerAuthentication => security::peer_authentication(&mut r, spec),
        IstioKind::RequestAuthentication => security::request_authentication(&mut r, spec),
        IstioKind::Telemetry => extensions::telemetry(&mut r, spec),
        IstioKind::WasmPlugin => extensions::wasm_plugin(&mut r, spec),
    }
    r.into_problems()
}

/// The annotation that turns an AuthorizationPolicy into a dry run.
const DRY_RUN_ANNOTATION: &str = "istio.io/dry-run";

/// `istio.io/dry-run` is only meaningful on ALLOW/DENY AuthorizationPolicies
/// and must hold a boolean; Istio rejects it everywhere else.
fn check_dry_run_annotation(r: &mut Report, obj: &Object, kind: IstioKind) {
    let Some(value) = obj.metadata.annotations.get(DRY_RUN_ANNOTATION) else {
        return;
    };
    let path = format!("metadata.annotations[{DRY_RUN_ANNOTATION:?}]");
    if kind != IstioKind::AuthorizationPolicy {
        r.err(path, "only supported on AuthorizationPolicy; remove it");
        return;
    }
    let action = obj
        .spec()
        .map(|s| common::enum_field(s, "action", security::ACTIONS))
        .unwrap_or("ALLOW");
    if action != "ALLOW" && action != "DENY" {
        r.err(
            path,
            format!("only supported with action ALLOW or DENY, found {action}"),
        );
    } else if !matches!(
        value.as_str(),
        "1" | "t" | "T" | "TRUE" | "true" | "True" | "0" | "f" | "F" | "FALSE" | "false" | "False"
    ) {
        r.err(path, format!("must be a boolean, found {value:?}"));
    }
}

//! The entry points: which kinds have rules, and running them on an object.

use meshhub_proto::object::Object;
use serde_json::Value;

use crate::crd::CrdSchemas;
use crate::enums::AUTHORIZATION_ACTION;
use crate::json::enum_field;
use crate::metadata::check_resource_name;
use crate::networking::{
    destination_rule, envoy_filter, gateway, proxy_config, service_entry, sidecar, virtual_service,
    workload,
};
use crate::problem::{Problem, ValidationError};
use crate::report::Report;
use crate::{extensions, security};

/// The Istio kinds this crate validates, keyed by API group and kind.
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
    TrafficExtension,
}

impl IstioKind {
    /// The kind for `group`/`kind`, or `None` for a kind this crate does
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
            ("extensions.istio.io", "TrafficExtension") => Self::TrafficExtension,
            _ => return None,
        })
    }
}

/// Whether [`validate`] has rules for objects of this API group and kind.
pub fn is_checked_kind(group: &str, kind: &str) -> bool {
    IstioKind::of(group, kind).is_some() || crate::gateway_api::kind_of(group, kind).is_some()
}

/// Checks one object against Istio's semantic rules for its kind.
///
/// Returns every problem found. The Gateway API kinds meshhub carries are
/// checked for being well-formed objects of their kind; their CRDs' rules
/// are checked by a [`crate::Validator`] given the CRDs. Objects of other
/// kinds outside the Istio API groups always pass.
pub fn validate(obj: &Object) -> Result<(), ValidationError> {
    into_result(obj, problems(obj))
}

/// `Ok` when `problems` is empty, else the error naming `obj`.
pub(crate) fn into_result(obj: &Object, problems: Vec<Problem>) -> Result<(), ValidationError> {
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
    problems_with(obj, None)
}

/// [`problems`], with the schemas and rules of `crds` for the kinds they
/// hold.
pub(crate) fn problems_with(obj: &Object, crds: Option<&CrdSchemas>) -> Vec<Problem> {
    let Some(kind) = IstioKind::of(obj.group(), &obj.kind) else {
        return match crate::gateway_api::kind_of(obj.group(), &obj.kind) {
            Some(kind) => crate::gateway_api::problems(obj, kind, crds),
            // Any other custom resource whose CRD was given (a source's
            // `extraKinds`): what its API server would say.
            None => crds
                .and_then(|c| c.problems(obj))
                .map(|found| {
                    let mut r = Report::default();
                    check_resource_name(&mut r, obj);
                    let mut problems = r.into_problems();
                    problems.extend(found);
                    problems
                })
                .unwrap_or_default(),
        };
    };
    let mut r = Report::default();
    check_resource_name(&mut r, obj);
    let name = obj.metadata.name.as_str();
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
    crate::schema::check(&mut r, obj.group(), &obj.kind, spec);
    crate::limits::check(&mut r, &obj.kind, spec);
    let ns = namespace_of(obj);
    match kind {
        IstioKind::VirtualService => virtual_service::check(&mut r, spec, ns),
        IstioKind::DestinationRule => destination_rule::check(&mut r, spec, ns),
        IstioKind::Gateway => gateway::check(&mut r, spec, name),
        IstioKind::ServiceEntry => service_entry::check(&mut r, spec, ns),
        IstioKind::Sidecar => sidecar::check(&mut r, spec),
        IstioKind::EnvoyFilter => envoy_filter::check(&mut r, spec),
        IstioKind::WorkloadEntry => workload::check_entry(&mut r, spec),
        IstioKind::WorkloadGroup => workload::check_group(&mut r, spec),
        IstioKind::ProxyConfig => proxy_config::check(&mut r, spec),
        IstioKind::AuthorizationPolicy => security::authorization_policy(&mut r, spec),
        IstioKind::PeerAuthentication => security::peer_authentication(&mut r, spec),
        IstioKind::RequestAuthentication => security::request_authentication(&mut r, spec),
        IstioKind::Telemetry => extensions::telemetry(&mut r, spec),
        IstioKind::WasmPlugin => extensions::wasm_plugin(&mut r, spec),
        IstioKind::TrafficExtension => extensions::traffic_extension(&mut r, spec),
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
        .map(|s| enum_field(s, "action", &AUTHORIZATION_ACTION))
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

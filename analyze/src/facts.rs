//! What analysis reads of an object: [`Facts`], taken from its JSON once
//! (when the object changes) so that analysing a cluster's set needs no
//! parsing and keeps only a few strings per object.
//!
//! Fields of the wrong type are treated as absent: the schema layer reports
//! them, analysis only looks at what it can read.

use std::collections::BTreeMap;

use meshhub_proto::object::Object;
use serde_json::Value;

use crate::since::Need;

/// The kinds analysis reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `networking.istio.io` VirtualService.
    VirtualService,
    /// `networking.istio.io` DestinationRule.
    DestinationRule,
    /// `networking.istio.io` Gateway.
    Gateway,
    /// `networking.istio.io` ServiceEntry.
    ServiceEntry,
    /// `networking.istio.io` Sidecar.
    Sidecar,
    /// `telemetry.istio.io` Telemetry.
    Telemetry,
    /// Another Istio kind (`AuthorizationPolicy`, `TrafficExtension`, …):
    /// read only for what it needs of Istio's releases.
    Other(&'static str),
    /// A Gateway API route (`HTTPRoute`, `GRPCRoute`, `TCPRoute`,
    /// `TLSRoute`): its parents and backends.
    Route(&'static str),
    /// A Gateway API `Gateway` (`gateway.networking.k8s.io`): a parent.
    GatewayApiGateway,
    /// A Gateway API `ListenerSet`: a parent.
    ListenerSet,
    /// A Gateway API `ReferenceGrant`.
    ReferenceGrant,
}

/// The Gateway API's group.
pub const GATEWAY_API_GROUP: &str = "gateway.networking.k8s.io";

/// The Gateway API route kinds analysis reads.
const ROUTE_KINDS: &[&str] = &["HTTPRoute", "GRPCRoute", "TCPRoute", "TLSRoute"];

/// The Istio kinds analysis reads only for their needs (the API group of
/// each: kinds of other groups are not Istio's).
const OTHER_KINDS: &[(&str, &str)] = &[
    ("networking.istio.io", "EnvoyFilter"),
    ("networking.istio.io", "ProxyConfig"),
    ("networking.istio.io", "WorkloadEntry"),
    ("networking.istio.io", "WorkloadGroup"),
    ("security.istio.io", "AuthorizationPolicy"),
    ("security.istio.io", "PeerAuthentication"),
    ("security.istio.io", "RequestAuthentication"),
    ("extensions.istio.io", "WasmPlugin"),
    ("extensions.istio.io", "TrafficExtension"),
];

impl Kind {
    /// The kind for an API group and kind, if analysis reads it.
    pub fn of(group: &str, kind: &str) -> Option<Self> {
        Some(match (group, kind) {
            ("networking.istio.io", "VirtualService") => Self::VirtualService,
            ("networking.istio.io", "DestinationRule") => Self::DestinationRule,
            ("networking.istio.io", "Gateway") => Self::Gateway,
            ("networking.istio.io", "ServiceEntry") => Self::ServiceEntry,
            ("networking.istio.io", "Sidecar") => Self::Sidecar,
            ("telemetry.istio.io", "Telemetry") => Self::Telemetry,
            (GATEWAY_API_GROUP, "Gateway") => Self::GatewayApiGateway,
            (GATEWAY_API_GROUP, "ListenerSet") => Self::ListenerSet,
            (GATEWAY_API_GROUP, "ReferenceGrant") => Self::ReferenceGrant,
            (GATEWAY_API_GROUP, k) => {
                return ROUTE_KINDS
                    .iter()
                    .find(|r| **r == k)
                    .map(|r| Self::Route(r));
            }
            _ => {
                return OTHER_KINDS
                    .iter()
                    .find(|(g, k)| *g == group && *k == kind)
                    .map(|(_, k)| Self::Other(k));
            }
        })
    }

    /// The kind's name (`VirtualService`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::VirtualService => "VirtualService",
            Self::DestinationRule => "DestinationRule",
            Self::Gateway => "Gateway",
            Self::ServiceEntry => "ServiceEntry",
            Self::Sidecar => "Sidecar",
            Self::Telemetry => "Telemetry",
            Self::Other(kind) | Self::Route(kind) => kind,
            Self::GatewayApiGateway => "Gateway",
            Self::ListenerSet => "ListenerSet",
            Self::ReferenceGrant => "ReferenceGrant",
        }
    }

    /// Whether it is one of Istio's kinds (the since table applies).
    pub fn is_istio(self) -> bool {
        !matches!(
            self,
            Self::Route(_) | Self::GatewayApiGateway | Self::ListenerSet | Self::ReferenceGrant
        )
    }
}

/// What analysis reads of one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// Its kind.
    pub kind: Kind,
    /// Its namespace (`default` when it names none, as the hub serves it).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The kind's part.
    pub body: Body,
    /// What it uses that not every Istio release knows (the since table).
    pub needs: Vec<Need>,
}

/// The kind-specific part of [`Facts`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// A VirtualService.
    VirtualService(VirtualService),
    /// A DestinationRule: its host and subset names.
    DestinationRule {
        /// `spec.host`.
        host: String,
        /// `spec.subsets[].name`.
        subsets: Vec<String>,
    },
    /// A Gateway.
    Gateway(Gateway),
    /// A ServiceEntry.
    ServiceEntry(ServiceEntry),
    /// A Sidecar: whether it selects workloads (a non-empty
    /// `workloadSelector.labels`) or applies to its whole namespace.
    Sidecar {
        /// It has workload selector labels.
        selects: bool,
    },
    /// A Telemetry: whether it has a `selector`.
    Telemetry {
        /// It has a `selector`.
        selects: bool,
    },
    /// A kind read only for its needs.
    Other,
    /// A Gateway API route.
    Route(Route),
    /// A Gateway API Gateway or ListenerSet: its listeners.
    Listeners(Listeners),
    /// A ReferenceGrant.
    ReferenceGrant(ReferenceGrant),
}

/// A reference to a parent (`parentRefs[]`) with the defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParentRef {
    /// `spec.parentRefs[0]`.
    pub path: String,
    /// `group` (default `gateway.networking.k8s.io`).
    pub group: String,
    /// `kind` (default `Gateway`).
    pub kind: String,
    /// `namespace` (default the route's).
    pub namespace: String,
    /// `name`.
    pub name: String,
    /// `sectionName`; empty when none.
    pub section: String,
}

/// A reference to a backend (`rules[].backendRefs[]`, and the
/// `requestMirror` filters' `backendRef`) or to a listener's certificate
/// (`tls.certificateRefs[]`) with the defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendRef {
    /// `spec.rules[0].backendRefs[1]`.
    pub path: String,
    /// `group` (default `""`, the core group).
    pub group: String,
    /// `kind` (default `Service` for a backend, `Secret` for a
    /// certificate).
    pub kind: String,
    /// `namespace` (default the route's).
    pub namespace: String,
    /// `name`.
    pub name: String,
}

/// What analysis reads of a Gateway API route.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Route {
    /// `spec.parentRefs`.
    pub parents: Vec<ParentRef>,
    /// Every backend reference.
    pub backends: Vec<BackendRef>,
}

/// What analysis reads of a Gateway API Gateway or ListenerSet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listeners {
    /// `spec.listeners[].name`.
    pub names: Vec<String>,
    /// The certificates its listeners terminate TLS with
    /// (`spec.listeners[].tls.certificateRefs[]`), only where istiod reads
    /// them: TLS mode `Terminate` (the default), without Istio's
    /// `gateway.istio.io/tls-terminate-mode` option set to
    /// `ISTIO_SIMPLE` or `ISTIO_MUTUAL` (which use the workload's
    /// certificate instead).
    pub certificates: Vec<BackendRef>,
}

/// What analysis reads of a ReferenceGrant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReferenceGrant {
    /// `spec.from[]`: (group, kind, namespace).
    pub from: Vec<(String, String, String)>,
    /// `spec.to[]`: (group, kind, name; empty for any name).
    pub to: Vec<(String, String, String)>,
}

/// What analysis reads of a VirtualService.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VirtualService {
    /// `spec.hosts`.
    pub hosts: Vec<String>,
    /// `spec.gateways`.
    pub gateways: Vec<String>,
    /// `spec.exportTo`.
    pub export_to: Vec<String>,
    /// Every route and mirror destination, with its field path.
    pub destinations: Vec<Destination>,
    /// Every `http[].delegate`, with its field path: (path, namespace,
    /// name); the namespace is the VirtualService's when it names none.
    pub delegates: Vec<(String, String, String)>,
}

/// One destination of a VirtualService route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// `spec.http[0].route[1].destination`.
    pub path: String,
    /// Whether it is a mirror (Istio words its message differently).
    pub mirror: bool,
    /// `host`.
    pub host: String,
    /// `subset`; empty when none.
    pub subset: String,
}

/// A DestinationRule's facts, borrowed.
#[derive(Clone, Copy, Debug)]
pub struct DestinationRule<'a> {
    /// `spec.host`.
    pub host: &'a str,
    /// `spec.subsets[].name`.
    pub subsets: &'a [String],
}

/// What analysis reads of a Gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gateway {
    /// `spec.selector`.
    pub selector: BTreeMap<String, String>,
    /// `spec.servers`.
    pub servers: Vec<Server>,
}

/// One server of a Gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Server {
    /// `port.number`.
    pub port: u32,
    /// `hosts`.
    pub hosts: Vec<String>,
    /// `bind`.
    pub bind: String,
    /// `tls`, when present.
    pub tls: Option<Tls>,
}

/// The certificate part of a server's `tls`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tls {
    /// `credentialName`.
    pub credential_name: String,
    /// `serverCertificate`.
    pub server_certificate: String,
    /// `privateKey`.
    pub private_key: String,
}

/// What analysis reads of a ServiceEntry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceEntry {
    /// `spec.hosts`.
    pub hosts: Vec<String>,
    /// `spec.addresses`.
    pub addresses: Vec<String>,
    /// `spec.ports[].number`.
    pub ports: Vec<u32>,
}

impl Facts {
    /// What analysis reads of `obj`; `None` for a kind it does not read.
    pub fn of(obj: &Object) -> Option<Self> {
        let kind = Kind::of(obj.group(), &obj.kind)?;
        let namespace = match obj.metadata.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => ns.to_owned(),
            _ => "default".to_owned(),
        };
        let empty = Value::Null;
        let spec = obj.spec().unwrap_or(&empty);
        let body = match kind {
            Kind::VirtualService => Body::VirtualService(virtual_service(spec, &namespace)),
            Kind::DestinationRule => Body::DestinationRule {
                host: string(spec, "host"),
                subsets: list(spec, "subsets")
                    .iter()
                    .map(|s| string(s, "name"))
                    .collect(),
            },
            Kind::Gateway => Body::Gateway(gateway(spec)),
            Kind::ServiceEntry => Body::ServiceEntry(ServiceEntry {
                hosts: strings(spec, "hosts"),
                addresses: strings(spec, "addresses"),
                ports: list(spec, "ports")
                    .iter()
                    .filter_map(|p| number(p, "number"))
                    .collect(),
            }),
            Kind::Sidecar => Body::Sidecar {
                selects: spec
                    .get("workloadSelector")
                    .and_then(|s| s.get("labels"))
                    .and_then(Value::as_object)
                    .is_some_and(|l| !l.is_empty()),
            },
            Kind::Telemetry => Body::Telemetry {
                selects: spec.get("selector").is_some_and(|s| !s.is_null()),
            },
            Kind::Other(_) => Body::Other,
            Kind::Route(_) => Body::Route(route(spec, &namespace)),
            Kind::GatewayApiGateway | Kind::ListenerSet => {
                Body::Listeners(listeners(spec, &namespace))
            }
            Kind::ReferenceGrant => Body::ReferenceGrant(ReferenceGrant {
                from: list(spec, "from")
                    .iter()
                    .map(|f| {
                        (
                            string(f, "group"),
                            string(f, "kind"),
                            string(f, "namespace"),
                        )
                    })
                    .collect(),
                to: list(spec, "to")
                    .iter()
                    .map(|t| (string(t, "group"), string(t, "kind"), string(t, "name")))
                    .collect(),
            }),
        };
        let needs = if kind.is_istio() {
            crate::since::needs(kind.as_str(), spec)
        } else {
            Vec::new()
        };
        Some(Self {
            kind,
            namespace,
            name: obj.metadata.name.clone(),
            body,
            needs,
        })
    }
}

fn virtual_service(spec: &Value, namespace: &str) -> VirtualService {
    let mut vs = VirtualService {
        hosts: strings(spec, "hosts"),
        gateways: strings(spec, "gateways"),
        export_to: strings(spec, "exportTo"),
        ..VirtualService::default()
    };
    // Istio's order: tcp, tls, then http routes; then http mirrors.
    for section in ["tcp", "tls", "http"] {
        for (i, rule) in list(spec, section).iter().enumerate() {
            for (j, route) in list(rule, "route").iter().enumerate() {
                if let Some(d) = route.get("destination") {
                    vs.destinations.push(destination(
                        format!("spec.{section}[{i}].route[{j}].destination"),
                        false,
                        d,
                    ));
                }
            }
        }
    }
    for (i, rule) in list(spec, "http").iter().enumerate() {
        if let Some(d) = rule.get("mirror").filter(|m| m.is_object()) {
            vs.destinations
                .push(destination(format!("spec.http[{i}].mirror"), true, d));
        }
        for (j, m) in list(rule, "mirrors").iter().enumerate() {
            if let Some(d) = m.get("destination") {
                vs.destinations.push(destination(
                    format!("spec.http[{i}].mirrors[{j}].destination"),
                    true,
                    d,
                ));
            }
        }
        if let Some(d) = rule.get("delegate").filter(|d| d.is_object()) {
            let ns = string(d, "namespace");
            vs.delegates.push((
                format!("spec.http[{i}].delegate"),
                if ns.is_empty() {
                    namespace.to_owned()
                } else {
                    ns
                },
                string(d, "name"),
            ));
        }
    }
    vs
}

fn route(spec: &Value, namespace: &str) -> Route {
    let or = |v: String, default: &str| if v.is_empty() { default.to_owned() } else { v };
    let parents = list(spec, "parentRefs")
        .iter()
        .enumerate()
        .map(|(i, p)| ParentRef {
            path: format!("spec.parentRefs[{i}]"),
            // An explicit empty group is the core group (a Service parent).
            group: p
                .get("group")
                .and_then(Value::as_str)
                .unwrap_or(GATEWAY_API_GROUP)
                .to_owned(),
            kind: or(string(p, "kind"), "Gateway"),
            namespace: or(string(p, "namespace"), namespace),
            name: string(p, "name"),
            section: string(p, "sectionName"),
        })
        .collect();
    let backend = |path: String, b: &Value| reference(path, b, "Service", namespace);
    let mut backends = Vec::new();
    // A `requestMirror` filter's backend, on a rule or on one backend.
    let mirrors = |at: &str, filters: &[Value], out: &mut Vec<BackendRef>| {
        for (k, f) in filters.iter().enumerate() {
            if let Some(b) = f.get("requestMirror").and_then(|m| m.get("backendRef")) {
                out.push(backend(
                    format!("{at}.filters[{k}].requestMirror.backendRef"),
                    b,
                ));
            }
        }
    };
    for (i, rule) in list(spec, "rules").iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        for (j, b) in list(rule, "backendRefs").iter().enumerate() {
            let at = format!("{at}.backendRefs[{j}]");
            backends.push(backend(at.clone(), b));
            mirrors(&at, list(b, "filters"), &mut backends);
        }
        mirrors(&at, list(rule, "filters"), &mut backends);
    }
    Route { parents, backends }
}

/// Istio's listener option choosing a TLS mode of its own.
const TLS_TERMINATE_MODE: &str = "gateway.istio.io/tls-terminate-mode";

fn listeners(spec: &Value, namespace: &str) -> Listeners {
    let mut out = Listeners::default();
    for (i, l) in list(spec, "listeners").iter().enumerate() {
        out.names.push(string(l, "name"));
        let Some(tls) = l.get("tls") else { continue };
        // istiod's buildTLS: only `Terminate` reads certificateRefs, and
        // not when an Istio option picks the workload's certificate.
        let mode = string(tls, "mode");
        let istio_mode = tls
            .get("options")
            .and_then(|o| o.get(TLS_TERMINATE_MODE))
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !(mode.is_empty() || mode == "Terminate")
            || matches!(istio_mode, "ISTIO_SIMPLE" | "ISTIO_MUTUAL")
        {
            continue;
        }
        for (j, c) in list(tls, "certificateRefs").iter().enumerate() {
            out.certificates.push(reference(
                format!("spec.listeners[{i}].tls.certificateRefs[{j}]"),
                c,
                "Secret",
                namespace,
            ));
        }
    }
    out
}

/// A reference with its defaults: the core group, `kind`, the referring
/// object's namespace.
fn reference(path: String, r: &Value, kind: &str, namespace: &str) -> BackendRef {
    let or = |v: String, default: &str| if v.is_empty() { default.to_owned() } else { v };
    BackendRef {
        path,
        group: string(r, "group"),
        kind: or(string(r, "kind"), kind),
        namespace: or(string(r, "namespace"), namespace),
        name: string(r, "name"),
    }
}

fn destination(path: String, mirror: bool, d: &Value) -> Destination {
    Destination {
        path,
        mirror,
        host: string(d, "host"),
        subset: string(d, "subset"),
    }
}

fn gateway(spec: &Value) -> Gateway {
    Gateway {
        selector: spec
            .get("selector")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                    .collect()
            })
            .unwrap_or_default(),
        servers: list(spec, "servers")
            .iter()
            .map(|s| Server {
                port: s.get("port").and_then(|p| number(p, "number")).unwrap_or(0),
                hosts: strings(s, "hosts"),
                bind: string(s, "bind"),
                tls: s.get("tls").filter(|t| t.is_object()).map(|t| Tls {
                    credential_name: string(t, "credentialName"),
                    server_certificate: string(t, "serverCertificate"),
                    private_key: string(t, "privateKey"),
                }),
            })
            .collect(),
    }
}

fn list<'v>(v: &'v Value, key: &str) -> &'v [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn string(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    list(v, key)
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// A port number, written as a number or a string of digits (JSON from
/// YAML may carry either).
fn number(v: &Value, key: &str) -> Option<u32> {
    match v.get(key)? {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

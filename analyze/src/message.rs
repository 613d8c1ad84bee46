//! What analysis says: a [`Message`] with Istio's code and severity, about
//! one object.

use std::fmt;
use std::sync::Arc;

/// How serious a message is (Istio's levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Worth knowing; nothing is wrong.
    Info,
    /// Probably not what was meant.
    Warning,
    /// The configuration will not work as written.
    Error,
}

impl Severity {
    /// The spelling Istio uses (`Error`, `Warning`, `Info`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Info => "Info",
            Self::Warning => "Warning",
            Self::Error => "Error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A message type: Istio's code and name where Istio has one
/// (`pkg/config/analysis/msg/messages.yaml`), `MH…` for meshhub's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Code {
    /// `IST0101`.
    pub code: &'static str,
    /// `ReferencedResourceNotFound`.
    pub name: &'static str,
    /// Its severity.
    pub severity: Severity,
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.code)
    }
}

/// IST0101: a resource being referenced does not exist (a Gateway, a
/// DestinationRule subset, a delegate VirtualService).
pub const REFERENCED_RESOURCE_NOT_FOUND: Code = Code {
    code: "IST0101",
    name: "ReferencedResourceNotFound",
    severity: Severity::Error,
};
/// IST0109: VirtualServices bound to the mesh gateway define the same host.
pub const CONFLICTING_MESH_GATEWAY_VIRTUAL_SERVICE_HOSTS: Code = Code {
    code: "IST0109",
    name: "ConflictingMeshGatewayVirtualServiceHosts",
    severity: Severity::Error,
};
/// IST0111: several Sidecars of one namespace have no workload selector.
pub const MULTIPLE_SIDECARS_WITHOUT_WORKLOAD_SELECTORS: Code = Code {
    code: "IST0111",
    name: "MultipleSidecarsWithoutWorkloadSelectors",
    severity: Severity::Error,
};
/// IST0132: a VirtualService's hosts are not among its Gateway's hosts.
pub const VIRTUAL_SERVICE_HOST_NOT_FOUND_IN_GATEWAY: Code = Code {
    code: "IST0132",
    name: "VirtualServiceHostNotFoundInGateway",
    severity: Severity::Warning,
};
/// IST0138: Gateways selecting the same workloads share a certificate.
pub const GATEWAY_DUPLICATE_CERTIFICATE: Code = Code {
    code: "IST0138",
    name: "GatewayDuplicateCertificate",
    severity: Severity::Warning,
};
/// IST0145: Gateways with the same selector and port claim the same host.
pub const CONFLICTING_GATEWAYS: Code = Code {
    code: "IST0145",
    name: "ConflictingGateways",
    severity: Severity::Error,
};
/// IST0160: several Telemetries of one namespace have no workload selector.
pub const MULTIPLE_TELEMETRIES_WITHOUT_WORKLOAD_SELECTORS: Code = Code {
    code: "IST0160",
    name: "MultipleTelemetriesWithoutWorkloadSelectors",
    severity: Severity::Error,
};
/// IST0176: a Gateway API CRD of the cluster is older (its
/// `gateway.networking.k8s.io/bundle-version`) than the cluster's Istio
/// release needs; istiod ignores the CRD and every object of its kind.
pub const GATEWAY_API_CRD_VERSION_BELOW_MINIMUM: Code = Code {
    code: "IST0176",
    name: "GatewayAPICRDVersionBelowMinimum",
    severity: Severity::Warning,
};
/// MH0001 (meshhub's own; Istio has no analyzer for it): ServiceEntries for
/// different hosts claim the same address and port.
pub const SERVICE_ENTRY_ADDRESS_CONFLICT: Code = Code {
    code: "MH0001",
    name: "ServiceEntryAddressConflict",
    severity: Severity::Warning,
};
/// MH0002 (meshhub's own): an object, field or enum value needs a newer
/// Istio than the cluster runs (the older istiod would drop it silently),
/// or a value does that the older release's validation refuses.
pub const ISTIO_VERSION_SKEW: Code = Code {
    code: "MH0002",
    name: "IstioVersionSkew",
    severity: Severity::Warning,
};
/// MH0003 (meshhub's own; Istio's controller reports it as the route's
/// `ResolvedRefs=False`, reason `RefNotPermitted`, once the route is in the
/// cluster): a Gateway API route refers to a backend in another namespace
/// and no ReferenceGrant of the cluster's set permits it.
pub const REFERENCE_NOT_PERMITTED: Code = Code {
    code: "MH0003",
    name: "ReferenceNotPermitted",
    severity: Severity::Error,
};
/// MH0004 (meshhub's own): a Gateway API route's parent (a Gateway or a
/// ListenerSet, or the listener its `sectionName` names) is not in the
/// cluster's set. A warning, and not Istio's IST0101: the parent may be
/// created in the cluster itself rather than distributed by meshhub
/// (Gateways often are), which the hub cannot see; if it is not there,
/// the cluster's istiod reports the route `Accepted=False`,
/// `NoMatchingParent`.
pub const GATEWAY_API_PARENT_NOT_FOUND: Code = Code {
    code: "MH0004",
    name: "GatewayApiParentNotFound",
    severity: Severity::Warning,
};

/// Every code analysis can raise, in code order.
pub const CODES: &[Code] = &[
    REFERENCED_RESOURCE_NOT_FOUND,
    CONFLICTING_MESH_GATEWAY_VIRTUAL_SERVICE_HOSTS,
    MULTIPLE_SIDECARS_WITHOUT_WORKLOAD_SELECTORS,
    VIRTUAL_SERVICE_HOST_NOT_FOUND_IN_GATEWAY,
    GATEWAY_DUPLICATE_CERTIFICATE,
    CONFLICTING_GATEWAYS,
    MULTIPLE_TELEMETRIES_WITHOUT_WORKLOAD_SELECTORS,
    GATEWAY_API_CRD_VERSION_BELOW_MINIMUM,
    SERVICE_ENTRY_ADDRESS_CONFLICT,
    ISTIO_VERSION_SKEW,
    REFERENCE_NOT_PERMITTED,
    GATEWAY_API_PARENT_NOT_FOUND,
];

/// The code called `code` (`IST0101`), if analysis raises it.
pub fn find_code(code: &str) -> Option<Code> {
    CODES.iter().copied().find(|c| c.code == code)
}

/// One finding of analysis about one object.
///
/// Displays as `Error [IST0101] VirtualService bookinfo/reviews
/// spec.gateways[0]: Referenced gateway not found: "bookinfo-gateway"`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Message {
    /// What kind of finding.
    pub code: Code,
    /// The object's kind (`VirtualService`).
    pub kind: String,
    /// Its namespace; empty for a cluster-scoped object (a
    /// CustomResourceDefinition).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The field the finding is about (`spec.gateways[0]`); empty for the
    /// object as a whole.
    pub path: String,
    /// What was found, in Istio's words where Istio has the code. Shared:
    /// the set's analysis, every cluster's merge of it and the hub's view
    /// of it hold one copy.
    pub text: Arc<str>,
}

impl Message {
    /// `Kind namespace/name` (`Kind name`, cluster-scoped).
    pub fn object(&self) -> String {
        if self.namespace.is_empty() {
            format!("{} {}", self.kind, self.name)
        } else {
            format!("{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} [{}] {}",
            self.code.severity,
            self.code.code,
            self.object()
        )?;
        if !self.path.is_empty() {
            write!(f, " {}", self.path)?;
        }
        write!(f, ": {}", self.text)
    }
}

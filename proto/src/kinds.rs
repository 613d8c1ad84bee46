//! The kind table: Kubernetes GVK ↔ MCP collection ↔ ADS type URL ↔ body
//! message.
//!
//! Every kind of configuration meshhub carries has one [`Kind`] entry. The
//! same kind has several names on the wire:
//!
//! * classic MCP (`ResourceSource`/`ResourceSink`) names it by its
//!   **collection**, `istio/networking/v1alpha3/virtualservices`;
//! * MCP-over-xDS names it by a **GVK string** `group/version/Kind` as the ADS
//!   type URL. istiod 1.8–1.23 asks for the *legacy* version
//!   (`networking.istio.io/v1alpha3/VirtualService`), 1.24+ for the *current*
//!   one (`networking.istio.io/v1/VirtualService`), and matches the answer by
//!   the exact string, so the ADS server must echo whatever was requested
//!   (reference §3.3). Any served version resolves here.
//! * the body of each resource is a protobuf message whose name does not
//!   follow the GVK: `istio.networking.v1alpha3.VirtualService` even for
//!   `networking.istio.io/v1`.
//!
//! Kinds without a schema travel as a `google.protobuf.Struct` between
//! meshhub's own hub and sink agents: the user-configured ones (`extraKinds`,
//! e.g. a `ConfigMap`) and the built-in Gateway API kinds ([`Family`],
//! [`gateway_api`]), which Istio has no protobuf schema for.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use prost_reflect::MessageDescriptor;

pub mod gateway_api;

/// Body message of every kind without a schema.
pub const STRUCT_MESSAGE: &str = "google.protobuf.Struct";

/// Where a kind comes from, which decides how it travels and who reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// Istio's own kinds (`*.istio.io`): protobuf bodies, offered to istiod
    /// over MCP-over-xDS.
    Istio,
    /// The Kubernetes Gateway API kinds Istio implements
    /// (`gateway.networking.k8s.io`, `gateway.networking.x-k8s.io`):
    /// built in, `Struct` bodies between meshhub's hub and agents, reaching
    /// a cluster only through its agent's applier (istiod's `xds://` config
    /// source never asks for them), and delivered only to clusters whose
    /// agent reports their CRD.
    GatewayApi,
    /// A kind the configuration added (`extraKinds`): `Struct` bodies.
    Extra,
}

/// One kind of configuration and all its names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kind {
    group: String,
    versions: Vec<String>,
    /// Shared: every object of the kind held by the hub points at it.
    kind: Arc<str>,
    plural: String,
    namespaced: bool,
    /// Shared like `kind`.
    collection: Arc<str>,
    legacy_type_url: String,
    current_type_url: String,
    message: String,
    family: Family,
}

impl Kind {
    /// A kind without a schema: its objects travel as a
    /// `google.protobuf.Struct` of every top-level field except `apiVersion`,
    /// `kind`, `metadata` and `status`.
    ///
    /// Its collection is `k8s/<group or "core">/<version>/<plural>` and its
    /// ADS type URL `<group or "core">/<version>/<Kind>` (the empty group is
    /// rendered as `core`, as istiod renders `core/v1alpha1/MeshConfig`).
    pub fn schemaless(
        group: impl Into<String>,
        version: impl Into<String>,
        kind: impl Into<String>,
        plural: impl Into<String>,
        namespaced: bool,
    ) -> Result<Self, KindError> {
        let (group, version, kind, plural) =
            (group.into(), version.into(), kind.into(), plural.into());
        for (what, value) in [("version", &version), ("kind", &kind), ("plural", &plural)] {
            if value.is_empty() || value.contains('/') {
                return Err(KindError::Invalid {
                    kind: kind.clone(),
                    reason: format!("{what} {value:?} must be non-empty and contain no '/'"),
                });
            }
        }
        if group.contains('/') {
            return Err(KindError::Invalid {
                kind,
                reason: format!("group {group:?} must contain no '/'"),
            });
        }
        let g = if group.is_empty() { "core" } else { &group };
        let collection = format!("k8s/{g}/{version}/{plural}");
        let type_url = format!("{g}/{version}/{kind}");
        Ok(Self {
            collection: collection.into(),
            legacy_type_url: type_url.clone(),
            current_type_url: type_url,
            message: STRUCT_MESSAGE.to_owned(),
            group,
            versions: vec![version],
            kind: kind.into(),
            plural,
            namespaced,
            family: Family::Extra,
        })
    }

    /// Where the kind comes from.
    pub fn family(&self) -> Family {
        self.family
    }

    /// Whether the kind is meshhub's own (Istio's or the Gateway API's),
    /// not one the configuration added.
    pub fn is_builtin(&self) -> bool {
        self.family != Family::Extra
    }

    /// Whether the ADS port (MCP-over-xDS, istiod's `xds://` config source)
    /// offers the kind. The Gateway API kinds are not offered: istiod asks
    /// a config source only for MeshConfig and Istio's kinds, and reads the
    /// Gateway API from its own cluster's API (docs/interop.md).
    pub fn offered_over_ads(&self) -> bool {
        self.family != Family::GatewayApi
    }

    /// The Kubernetes API group (`networking.istio.io`; empty for core).
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Served versions, the preferred one first.
    pub fn versions(&self) -> &[String] {
        &self.versions
    }

    /// The preferred version (what objects turned back from MCP carry).
    pub fn preferred_version(&self) -> &str {
        // A kind always has at least one version (checked on construction).
        self.versions.first().map_or("", String::as_str)
    }

    /// Whether `version` is served.
    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }

    /// `group/preferred-version`, or just the version for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.preferred_version().to_owned()
        } else {
            format!("{}/{}", self.group, self.preferred_version())
        }
    }

    /// The kind (`VirtualService`).
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The kind, shared (a clone is a reference count, not a copy).
    pub fn kind_shared(&self) -> &Arc<str> {
        &self.kind
    }

    /// The lower-case plural resource name (`virtualservices`).
    pub fn plural(&self) -> &str {
        &self.plural
    }

    /// Whether objects live in a namespace.
    pub fn namespaced(&self) -> bool {
        self.namespaced
    }

    /// Classic MCP collection (`istio/networking/v1alpha3/virtualservices`).
    pub fn collection(&self) -> &str {
        &self.collection
    }

    /// The collection, shared (a clone is a reference count, not a copy).
    pub fn collection_shared(&self) -> &Arc<str> {
        &self.collection
    }

    /// The ADS type URL istiod 1.8–1.23 requests
    /// (`networking.istio.io/v1alpha3/VirtualService`).
    pub fn legacy_type_url(&self) -> &str {
        &self.legacy_type_url
    }

    /// The ADS type URL istiod 1.24+ requests
    /// (`networking.istio.io/v1/VirtualService`).
    pub fn current_type_url(&self) -> &str {
        &self.current_type_url
    }

    /// Every ADS type URL that names this kind: `group/version/Kind` for each
    /// served version (`core` for the empty group), preferred version first.
    pub fn type_urls(&self) -> impl Iterator<Item = String> + '_ {
        let g = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        self.versions
            .iter()
            .map(move |v| format!("{g}/{v}/{}", self.kind))
    }

    /// Full name of the body message (`istio.networking.v1alpha3.VirtualService`).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// `type.googleapis.com/<message>`: the type URL of the body `Any`.
    pub fn body_type_url(&self) -> String {
        crate::type_url(&self.message)
    }

    /// Whether the body is a `google.protobuf.Struct` of the whole object
    /// rather than the protobuf message of its `spec`.
    pub fn is_schemaless(&self) -> bool {
        self.message == STRUCT_MESSAGE
    }

    /// The body message's descriptor, if the descriptor pool has it.
    pub fn descriptor(&self) -> Option<MessageDescriptor> {
        crate::descriptor::message(&self.message)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.kind)
    }
}

/// Why a kind can't join a table.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KindError {
    /// The kind's names are malformed.
    #[error("kind {kind:?}: {reason}")]
    Invalid {
        /// The kind.
        kind: String,
        /// What is wrong.
        reason: String,
    },
    /// Another kind already uses one of its names.
    #[error("kind {kind}: {what} {name:?} is already used by {existing}")]
    Duplicate {
        /// The kind being added.
        kind: String,
        /// Which name clashes (`collection`, `type URL`, ...).
        what: &'static str,
        /// The clashing name.
        name: String,
        /// The kind already holding it.
        existing: String,
    },
}

/// One builtin Istio kind. `versions` are the served versions from Istio's
/// CRDs (`crd-all.gen.yaml`), ordered by Kubernetes version priority
/// (GA > beta > alpha), which is what discovery reports as preferred.
/// `package` is the proto package below `istio.` that holds the body
/// message; it also names the classic MCP collection
/// (`istio/<package with '/'>/<plural>`), as Istio's own collections do.
struct Builtin {
    group: &'static str,
    versions: &'static [&'static str],
    kind: &'static str,
    plural: &'static str,
    legacy_version: &'static str,
    current_version: &'static str,
    package: &'static str,
}

const NET: &str = "networking.istio.io";
const SEC: &str = "security.istio.io";
const NET_VERSIONS: &[&str] = &["v1", "v1beta1", "v1alpha3"];
const SEC_VERSIONS: &[&str] = &["v1", "v1beta1"];

/// Istio's kinds as istiod requests them over MCP-over-xDS (reference §3.3):
/// legacy = 1.8–1.23, current = 1.24+.
const BUILTINS: &[Builtin] = &[
    net("VirtualService", "virtualservices"),
    net("DestinationRule", "destinationrules"),
    net("Gateway", "gateways"),
    net("ServiceEntry", "serviceentries"),
    net("Sidecar", "sidecars"),
    Builtin {
        group: NET,
        versions: &["v1alpha3"],
        kind: "EnvoyFilter",
        plural: "envoyfilters",
        legacy_version: "v1alpha3",
        current_version: "v1alpha3",
        package: "networking.v1alpha3",
    },
    net("WorkloadEntry", "workloadentries"),
    net("WorkloadGroup", "workloadgroups"),
    Builtin {
        group: NET,
        versions: &["v1beta1"],
        kind: "ProxyConfig",
        plural: "proxyconfigs",
        legacy_version: "v1beta1",
        current_version: "v1beta1",
        package: "networking.v1beta1",
    },
    sec("AuthorizationPolicy", "authorizationpolicies"),
    sec("PeerAuthentication", "peerauthentications"),
    sec("RequestAuthentication", "requestauthentications"),
    Builtin {
        group: "telemetry.istio.io",
        versions: &["v1", "v1alpha1"],
        kind: "Telemetry",
        plural: "telemetries",
        legacy_version: "v1alpha1",
        current_version: "v1",
        package: "telemetry.v1alpha1",
    },
    Builtin {
        group: "extensions.istio.io",
        versions: &["v1alpha1"],
        kind: "WasmPlugin",
        plural: "wasmplugins",
        legacy_version: "v1alpha1",
        current_version: "v1alpha1",
        package: "extensions.v1alpha1",
    },
    // Istio 1.30+ (istio.io/api 1.30); istiod 1.30+ asks an xds:// source
    // for it, older ones never subscribe.
    Builtin {
        group: "extensions.istio.io",
        versions: &["v1alpha1"],
        kind: "TrafficExtension",
        plural: "trafficextensions",
        legacy_version: "v1alpha1",
        current_version: "v1alpha1",
        package: "extensions.v1alpha1",
    },
];

/// A `networking.istio.io` kind served as v1/v1beta1/v1alpha3 whose body is
/// `istio.networking.v1alpha3.<Kind>`.
const fn net(kind: &'static str, plural: &'static str) -> Builtin {
    Builtin {
        group: NET,
        versions: NET_VERSIONS,
        kind,
        plural,
        legacy_version: "v1alpha3",
        current_version: "v1",
        package: "networking.v1alpha3",
    }
}

/// A `security.istio.io` kind served as v1/v1beta1 whose body is
/// `istio.security.v1beta1.<Kind>`.
const fn sec(kind: &'static str, plural: &'static str) -> Builtin {
    Builtin {
        group: SEC,
        versions: SEC_VERSIONS,
        kind,
        plural,
        legacy_version: "v1beta1",
        current_version: "v1",
        package: "security.v1beta1",
    }
}

impl Builtin {
    fn to_kind(&self) -> Kind {
        Kind {
            group: self.group.to_owned(),
            versions: self.versions.iter().map(|v| (*v).to_owned()).collect(),
            kind: self.kind.into(),
            plural: self.plural.to_owned(),
            namespaced: true,
            collection: format!("istio/{}/{}", self.package.replace('.', "/"), self.plural).into(),
            legacy_type_url: format!("{}/{}/{}", self.group, self.legacy_version, self.kind),
            current_type_url: format!("{}/{}/{}", self.group, self.current_version, self.kind),
            message: format!("istio.{}.{}", self.package, self.kind),
            family: Family::Istio,
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    kinds: Vec<Kind>,
    by_collection: HashMap<String, usize>,
    by_type_url: HashMap<String, usize>,
    by_group_kind: HashMap<(String, String), usize>,
    by_message: HashMap<String, usize>,
}

/// Every kind meshhub knows, with lookups by each of its names.
///
/// Cheap to clone (an [`Arc`] inside); adding a kind builds a new table.
/// Iteration order is the order kinds were added (builtins first, in a fixed
/// order).
#[derive(Clone, Debug, Default)]
pub struct KindTable {
    inner: Arc<Inner>,
}

impl KindTable {
    /// A table without kinds.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Istio's kinds (VirtualService, DestinationRule, Gateway, ServiceEntry,
    /// Sidecar, EnvoyFilter, WorkloadEntry, WorkloadGroup, ProxyConfig,
    /// AuthorizationPolicy, PeerAuthentication, RequestAuthentication,
    /// Telemetry, WasmPlugin, TrafficExtension), then the Gateway API kinds
    /// Istio implements ([`gateway_api::KINDS`]).
    pub fn builtin() -> Self {
        let mut inner = Inner::default();
        let kinds = BUILTINS.iter().map(Builtin::to_kind).chain(
            gateway_api::KINDS
                .iter()
                .map(gateway_api::GatewayApiKind::to_kind),
        );
        for k in kinds {
            // The builtin table is fixed and tested for clashes.
            if let Err(e) = inner.push(k) {
                unreachable!("builtin kind table is inconsistent: {e}");
            }
        }
        Self {
            inner: Arc::new(inner),
        }
    }

    /// This table plus `kind`. Fails if any of its names (collection, a type
    /// URL, group+kind, a specific body message) is taken.
    pub fn with_kind(&self, kind: Kind) -> Result<Self, KindError> {
        let mut inner = Inner::default();
        for k in &self.inner.kinds {
            inner.push(k.clone())?;
        }
        inner.push(kind)?;
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// This table plus every kind in `kinds`.
    pub fn with_kinds(&self, kinds: impl IntoIterator<Item = Kind>) -> Result<Self, KindError> {
        let mut inner = Inner::default();
        for k in self.inner.kinds.iter().cloned().chain(kinds) {
            inner.push(k)?;
        }
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// The kind of a classic MCP collection.
    pub fn by_collection(&self, collection: &str) -> Option<&Kind> {
        self.get(self.inner.by_collection.get(collection))
    }

    /// The kind of an ADS type URL `group/version/Kind`, for any served
    /// version (legacy or current).
    pub fn by_type_url(&self, type_url: &str) -> Option<&Kind> {
        self.get(self.inner.by_type_url.get(type_url))
    }

    /// The kind of a Kubernetes group and kind, whatever the version.
    pub fn by_group_kind(&self, group: &str, kind: &str) -> Option<&Kind> {
        self.get(
            self.inner
                .by_group_kind
                .get(&(group.to_owned(), kind.to_owned())),
        )
    }

    /// The kind of a Kubernetes group, version and kind; `None` if the version
    /// is not served.
    pub fn by_gvk(&self, group: &str, version: &str, kind: &str) -> Option<&Kind> {
        self.by_group_kind(group, kind)
            .filter(|k| k.serves(version))
    }

    /// The kind of an object's `apiVersion` (`group/version`, or `version` for
    /// core) and `kind`.
    pub fn by_api_version(&self, api_version: &str, kind: &str) -> Option<&Kind> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.by_gvk(group, version, kind)
    }

    /// The kind whose body is the message `message`. Kinds without a schema
    /// share `google.protobuf.Struct`, which names none of them.
    pub fn by_message(&self, message: &str) -> Option<&Kind> {
        self.get(self.inner.by_message.get(message))
    }

    /// Every kind, in a stable order.
    pub fn iter(&self) -> std::slice::Iter<'_, Kind> {
        self.inner.kinds.iter()
    }

    /// Number of kinds.
    pub fn len(&self) -> usize {
        self.inner.kinds.len()
    }

    /// Whether the table has no kinds.
    pub fn is_empty(&self) -> bool {
        self.inner.kinds.is_empty()
    }

    fn get(&self, i: Option<&usize>) -> Option<&Kind> {
        i.and_then(|&i| self.inner.kinds.get(i))
    }
}

impl<'a> IntoIterator for &'a KindTable {
    type Item = &'a Kind;
    type IntoIter = std::slice::Iter<'a, Kind>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl Inner {
    fn push(&mut self, kind: Kind) -> Result<(), KindError> {
        if kind.versions.is_empty() {
            return Err(KindError::Invalid {
                kind: kind.kind.to_string(),
                reason: "no served version".to_owned(),
            });
        }
        let i = self.kinds.len();
        let clash = |what: &'static str, name: &str, existing: usize| KindError::Duplicate {
            kind: kind.kind.to_string(),
            what,
            name: name.to_owned(),
            existing: self.kinds[existing].kind.to_string(),
        };
        if let Some(&e) = self.by_collection.get(&*kind.collection) {
            return Err(clash("collection", &kind.collection, e));
        }
        let gk = (kind.group.clone(), kind.kind.to_string());
        if let Some(&e) = self.by_group_kind.get(&gk) {
            return Err(clash("group and kind", &format!("{}/{}", gk.0, gk.1), e));
        }
        let mut urls: Vec<String> = kind.type_urls().collect();
        urls.push(kind.legacy_type_url.clone());
        urls.push(kind.current_type_url.clone());
        for url in &urls {
            if let Some(&e) = self.by_type_url.get(url) {
                return Err(clash("type URL", url, e));
            }
        }
        if !kind.is_schemaless() {
            if let Some(&e) = self.by_message.get(&kind.message) {
                return Err(clash("body message", &kind.message, e));
            }
            self.by_message.insert(kind.message.clone(), i);
        }
        self.by_collection.insert(kind.collection.to_string(), i);
        self.by_group_kind.insert(gk, i);
        for url in urls {
            self.by_type_url.insert(url, i);
        }
        self.kinds.push(kind);
        Ok(())
    }
}

#[cfg(test)]
mod tests;

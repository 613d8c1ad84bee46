//! The Istio enums the rules read, by their full protobuf names. Their value
//! names and numbers come from meshhub-proto's descriptor pool (the schemas
//! the transcoder uses), so the rules and the schemas cannot drift apart.

use std::collections::BTreeMap;
use std::sync::OnceLock;

/// An enum of the descriptor pool, resolved on first use.
#[derive(Debug)]
pub(crate) struct IstioEnum {
    full_name: &'static str,
    names: OnceLock<BTreeMap<i32, Box<str>>>,
}

impl IstioEnum {
    const fn new(full_name: &'static str) -> Self {
        Self {
            full_name,
            names: OnceLock::new(),
        }
    }

    /// Value names by number; empty if the pool lacks the enum (a test
    /// below guarantees it does not).
    fn names(&self) -> &BTreeMap<i32, Box<str>> {
        self.names.get_or_init(|| {
            meshhub_proto::descriptor::pool()
                .get_enum_by_name(self.full_name)
                .map(|e| e.values().map(|v| (v.number(), v.name().into())).collect())
                .unwrap_or_default()
        })
    }

    /// The name of value `number`, if the enum has one.
    pub(crate) fn name_of(&self, number: i32) -> Option<&str> {
        self.names().get(&number).map(AsRef::as_ref)
    }

    /// The name of the default value (number 0), what an absent field reads
    /// as.
    pub(crate) fn default_name(&self) -> &str {
        self.name_of(0).unwrap_or("")
    }
}

macro_rules! istio_enums {
    ($($(#[$doc:meta])* $name:ident = $full:literal;)*) => {
        $( $(#[$doc])* pub(crate) static $name: IstioEnum = IstioEnum::new($full); )*

        /// Every enum above, for the test that they all resolve.
        #[cfg(test)]
        pub(crate) static ALL: &[&IstioEnum] = &[$(&$name),*];
    };
}

istio_enums! {
    /// Gateway server and sidecar ingress TLS modes.
    SERVER_TLS_MODE = "istio.networking.v1alpha3.ServerTLSSettings.TLSmode";
    /// DestinationRule (upstream) TLS modes.
    CLIENT_TLS_MODE = "istio.networking.v1alpha3.ClientTLSSettings.TLSmode";
    /// How a ServiceEntry's endpoints are found.
    RESOLUTION = "istio.networking.v1alpha3.ServiceEntry.Resolution";
    /// Whether HTTP/1.1 connections are upgraded to HTTP/2.
    H2_UPGRADE_POLICY = "istio.networking.v1alpha3.ConnectionPoolSettings.HTTPSettings.H2UpgradePolicy";
    /// A Sidecar's outbound traffic policy.
    OUTBOUND_MODE = "istio.networking.v1alpha3.OutboundTrafficPolicy.Mode";
    /// How traffic reaches a sidecar listener.
    CAPTURE_MODE = "istio.networking.v1alpha3.CaptureMode";
    /// Where an EnvoyFilter patch applies.
    APPLY_TO = "istio.networking.v1alpha3.EnvoyFilter.ApplyTo";
    /// Which generated configuration an EnvoyFilter patch targets.
    PATCH_CONTEXT = "istio.networking.v1alpha3.EnvoyFilter.PatchContext";
    /// What an EnvoyFilter patch does.
    PATCH_OPERATION = "istio.networking.v1alpha3.EnvoyFilter.Patch.Operation";
    /// AuthorizationPolicy actions.
    AUTHORIZATION_ACTION = "istio.security.v1beta1.AuthorizationPolicy.Action";
    /// Telemetry metric tag overrides.
    TAG_OPERATION = "istio.telemetry.v1alpha1.MetricsOverrides.TagOverride.Operation";
    /// Where a WasmPlugin env value comes from.
    ENV_VALUE_SOURCE = "istio.extensions.v1alpha1.EnvValueSource";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_enum_is_in_the_descriptor_pool() {
        for e in ALL {
            assert!(
                meshhub_proto::descriptor::pool()
                    .get_enum_by_name(e.full_name)
                    .is_some(),
                "{} is not in the pool",
                e.full_name
            );
            assert!(!e.default_name().is_empty(), "{}", e.full_name);
        }
    }

    #[test]
    fn numbers_read_as_the_pool_names_them() {
        assert_eq!(SERVER_TLS_MODE.default_name(), "PASSTHROUGH");
        assert_eq!(SERVER_TLS_MODE.name_of(4), Some("ISTIO_MUTUAL"));
        assert_eq!(CLIENT_TLS_MODE.default_name(), "DISABLE");
        assert_eq!(APPLY_TO.name_of(11), Some("LISTENER_FILTER"));
        assert_eq!(PATCH_OPERATION.name_of(7), Some("REPLACE"));
        assert_eq!(AUTHORIZATION_ACTION.name_of(3), Some("CUSTOM"));
        assert_eq!(RESOLUTION.name_of(99), None);
        assert_eq!(CAPTURE_MODE.name_of(-1), None);
    }
}

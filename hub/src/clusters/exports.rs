//! What a cluster may export to the others (`clusters[].exports`): the
//! namespaces (and optionally the names) whose Services its agent may turn
//! into ServiceEntries of every other cluster, and how many.
//!
//! Anything an agent reports is input from outside (DESIGN.md, trust
//! boundaries): an export outside its cluster's policy is refused and
//! reported (`/status`, `meshhub_upward_export_refusals_total`, the audit
//! record `export_refused`), never merged.
//!
//! The default, for a cluster without `exports:`, allows every namespace
//! but the system ones ([`SYSTEM_NAMESPACES`]): what runs there (istiod,
//! the gateways, the API server's own Services) is the mesh's and the
//! platform's, not an application's, and a ServiceEntry for
//! `istiod.istio-system.svc.clusterset.local` made of one cluster's
//! gateway is a way to take traffic meant for the control plane. Every
//! other namespace is allowed because exporting is opt-in already (a
//! `ServiceExport` object in the exporting cluster) and the MCS API's
//! namespace sameness says a namespace means the same thing in every
//! cluster; a hub that trusts its clusters less lists what each may
//! export.

use std::collections::BTreeSet;

use meshhub_mcp::settings::SettingError;
use meshhub_validate::names::is_dns1123_label;
use serde::Deserialize;

/// Namespaces no cluster exports from unless its `exports.allow` names
/// them.
pub const SYSTEM_NAMESPACES: [&str; 4] = [
    "istio-system",
    "kube-system",
    "kube-public",
    "kube-node-lease",
];
/// Default cap on the Services one cluster exports (`exports.maxServices`).
pub const DEFAULT_MAX_SERVICES: usize = 1_000;
/// Default cap on the gateway addresses of one export, which become that
/// cluster's endpoints in the generated entry (`exports.maxEndpoints`).
pub const DEFAULT_MAX_ENDPOINTS: usize = 16;

/// Which namespaces a cluster may export from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Namespaces {
    /// Every namespace but [`SYSTEM_NAMESPACES`] (the default).
    AllButSystem,
    /// Only these, each with every name (`None`) or the names listed.
    Only(Vec<(String, Option<BTreeSet<String>>)>),
}

/// One cluster's export policy, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportPolicy {
    /// What it may export.
    pub namespaces: Namespaces,
    /// At most this many exports are merged (the ones the hub saw first).
    pub max_services: usize,
    /// An export with more gateway addresses than this is refused.
    pub max_endpoints: usize,
}

impl Default for ExportPolicy {
    fn default() -> Self {
        Self {
            namespaces: Namespaces::AllButSystem,
            max_services: DEFAULT_MAX_SERVICES,
            max_endpoints: DEFAULT_MAX_ENDPOINTS,
        }
    }
}

impl ExportPolicy {
    /// Why `namespace/name` may not be exported, if it may not.
    pub fn refuses(&self, namespace: &str, name: &str) -> Option<String> {
        match &self.namespaces {
            Namespaces::AllButSystem => SYSTEM_NAMESPACES.contains(&namespace).then(|| {
                format!(
                    "namespace {namespace} is a system namespace: no cluster exports from it unless its exports.allow names it"
                )
            }),
            Namespaces::Only(list) => match list.iter().find(|(ns, _)| ns == namespace) {
                None => Some(format!(
                    "namespace {namespace} is not in this cluster's exports.allow"
                )),
                Some((_, Some(names))) if !names.contains(name) => Some(format!(
                    "{namespace}/{name} is not among the names this cluster's exports.allow lists for {namespace}"
                )),
                Some(_) => None,
            },
        }
    }
}

/// `clusters[].exports` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawExportPolicy {
    #[serde(default)]
    allow: Option<Vec<RawAllow>>,
    #[serde(default)]
    max_services: Option<usize>,
    #[serde(default)]
    max_endpoints: Option<usize>,
}

/// One entry of `exports.allow`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawAllow {
    namespace: String,
    #[serde(default)]
    names: Option<Vec<String>>,
}

impl RawExportPolicy {
    /// Checks it; errors name the key below `at` (`clusters[0].exports`).
    pub fn check(self, at: &str) -> Result<ExportPolicy, SettingError> {
        let mut policy = ExportPolicy::default();
        if let Some(allow) = self.allow {
            let mut list: Vec<(String, Option<BTreeSet<String>>)> = Vec::new();
            for (i, a) in allow.into_iter().enumerate() {
                if !is_dns1123_label(&a.namespace) {
                    return Err(SettingError::new(
                        format!("{at}.allow[{i}].namespace"),
                        format!("{:?} is not a valid namespace name", a.namespace),
                    ));
                }
                if list.iter().any(|(ns, _)| *ns == a.namespace) {
                    return Err(SettingError::new(
                        format!("{at}.allow[{i}].namespace"),
                        format!("{} is listed twice", a.namespace),
                    ));
                }
                let names = match a.names {
                    None => None,
                    Some(names) => {
                        for (j, n) in names.iter().enumerate() {
                            if !is_dns1123_label(n) {
                                return Err(SettingError::new(
                                    format!("{at}.allow[{i}].names[{j}]"),
                                    format!("{n:?} is not a valid Service name"),
                                ));
                            }
                        }
                        Some(names.into_iter().collect())
                    }
                };
                list.push((a.namespace, names));
            }
            policy.namespaces = Namespaces::Only(list);
        }
        for (key, value, target) in [
            ("maxServices", self.max_services, &mut policy.max_services),
            (
                "maxEndpoints",
                self.max_endpoints,
                &mut policy.max_endpoints,
            ),
        ] {
            match value {
                Some(0) => {
                    return Err(SettingError::new(
                        format!("{at}.{key}"),
                        "must be at least 1 (to export nothing, use `allow: []`)",
                    ));
                }
                Some(n) => *target = n,
                None => {}
            }
        }
        Ok(policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<ExportPolicy, SettingError> {
        serde_saphyr::from_str::<RawExportPolicy>(yaml)
            .map_err(|e| SettingError::new("exports", e.to_string()))?
            .check("clusters[0].exports")
    }

    #[test]
    fn the_default_refuses_the_system_namespaces_only() {
        let p = ExportPolicy::default();
        for ns in SYSTEM_NAMESPACES {
            assert!(p.refuses(ns, "istiod").is_some(), "{ns}");
        }
        assert!(p.refuses("shop", "cart").is_none());
        assert_eq!(parse("{}").unwrap(), p);
    }

    #[test]
    fn allow_lists_namespaces_and_names() {
        let p = parse(
            "allow: [{namespace: shop}, {namespace: istio-system, names: [mesh-api]}]\nmaxServices: 5\nmaxEndpoints: 2",
        )
        .unwrap();
        assert!(p.refuses("shop", "anything").is_none());
        assert!(
            p.refuses("istio-system", "mesh-api").is_none(),
            "named explicitly"
        );
        assert!(p.refuses("istio-system", "istiod").is_some());
        assert!(p.refuses("payments", "card").is_some());
        assert_eq!((p.max_services, p.max_endpoints), (5, 2));
        let none = parse("allow: []").unwrap();
        assert!(none.refuses("shop", "cart").is_some());
    }

    #[test]
    fn bad_settings_name_their_key() {
        let e = parse("allow: [{namespace: Shop}]").unwrap_err();
        assert!(
            e.to_string()
                .contains("clusters[0].exports.allow[0].namespace"),
            "{e}"
        );
        let e = parse("allow: [{namespace: a}, {namespace: a}]").unwrap_err();
        assert!(e.to_string().contains("allow[1].namespace"), "{e}");
        let e = parse("allow: [{namespace: a, names: [x_y]}]").unwrap_err();
        assert!(e.to_string().contains("allow[0].names[0]"), "{e}");
        let e = parse("maxServices: 0").unwrap_err();
        assert!(e.to_string().contains("maxServices"), "{e}");
        assert!(
            parse("namespaces: [a]").is_err(),
            "unknown keys are refused"
        );
    }
}

//! The Istio and Gateway API CRDs installed in the agent's cluster (an
//! agent that applies reads them with the applier's client).
//!
//! * Istio's: each one's served versions and the newest Istio release whose
//!   additions its schema knows (the since table, meshhub-analyze). An
//!   older CRD refuses (the applier's strict field validation) what a newer
//!   release added; the hub checks the cluster against it (MH0002).
//! * The Gateway API's: each one's served versions, bundle version and
//!   channel. The hub delivers a Gateway API kind only to a cluster that
//!   serves it (docs/gateway-api.md).

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use meshhub_proto::kinds::gateway_api::is_gateway_api_group;
use meshhub_proto::upward::{GatewayApiCrd, IstioCrd};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// How often the CRDs are read (they change with an Istio upgrade).
pub const INTERVAL: Duration = Duration::from_secs(60);

/// The CRDs of a cluster the agent reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterCrds {
    /// Istio's, by name.
    pub istio: Vec<IstioCrd>,
    /// The Gateway API's, by name.
    pub gateway_api: Vec<GatewayApiCrd>,
}

/// What the last read found: the CRDs, or why it failed.
pub type Crds = Result<ClusterCrds, String>;

/// Reads the cluster's Istio CRDs every `every` until `shutdown`,
/// publishing what changed.
pub async fn run(
    client: kube::Client,
    every: Duration,
    tx: watch::Sender<Option<Crds>>,
    shutdown: CancellationToken,
) {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let params = ListParams::default();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let Some(read) = super::next_round(&mut tick, &shutdown, api.list(&params)).await else {
            return;
        };
        let crds: Crds = match read {
            Ok(list) => Ok(ClusterCrds {
                istio: istio_crds(&list.items),
                gateway_api: gateway_api_crds(&list.items),
            }),
            Err(e) => Err(meshhub_runtime::error_chain(&e)),
        };
        tx.send_if_modified(|old| {
            let changed = old.as_ref() != Some(&crds);
            if changed {
                if let Err(e) = &crds {
                    warn!(error = %e, "can't read the cluster's CRDs");
                }
                *old = Some(crds);
            }
            changed
        });
    }
}

/// The Istio CRDs among `items` (group `*.istio.io`), by name.
pub fn istio_crds(items: &[CustomResourceDefinition]) -> Vec<IstioCrd> {
    let mut out: Vec<IstioCrd> = items
        .iter()
        .filter(|c| c.spec.group.ends_with(".istio.io"))
        .filter_map(|c| {
            let json = serde_json::to_value(c).ok()?;
            let (kind, paths) = meshhub_analyze::since::crd_paths(&json)?;
            let knows = meshhub_analyze::since::crd_knows(&kind, &paths);
            Some(IstioCrd {
                name: c.metadata.name.clone().unwrap_or_default(),
                served_versions: served_versions(c),
                storage_version: c
                    .spec
                    .versions
                    .iter()
                    .find(|v| v.storage)
                    .map(|v| v.name.clone())
                    .unwrap_or_default(),
                kind,
                knows: format!("1.{knows}"),
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The versions a CRD serves.
fn served_versions(c: &CustomResourceDefinition) -> Vec<String> {
    c.spec
        .versions
        .iter()
        .filter(|v| v.served)
        .map(|v| v.name.clone())
        .collect()
}

/// The annotation of a Gateway API CRD naming its release.
const BUNDLE_VERSION: &str = "gateway.networking.k8s.io/bundle-version";
/// The annotation of a Gateway API CRD naming its channel.
const CHANNEL: &str = "gateway.networking.k8s.io/channel";

/// The Gateway API CRDs among `items` (groups `gateway.networking.k8s.io`
/// and `gateway.networking.x-k8s.io`), by name.
pub fn gateway_api_crds(items: &[CustomResourceDefinition]) -> Vec<GatewayApiCrd> {
    let mut out: Vec<GatewayApiCrd> = items
        .iter()
        .filter(|c| is_gateway_api_group(&c.spec.group))
        .map(|c| {
            let annotation = |key: &str| {
                c.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(key))
                    .cloned()
                    .unwrap_or_default()
            };
            GatewayApiCrd {
                name: c.metadata.name.clone().unwrap_or_default(),
                group: c.spec.group.clone(),
                kind: c.spec.names.kind.clone(),
                served_versions: served_versions(c),
                bundle_version: annotation(BUNDLE_VERSION),
                channel: annotation(CHANNEL),
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn istio_crds_are_reported_with_what_their_schema_knows() {
        let crd = |group: &str, kind: &str, lb: serde_json::Value| -> CustomResourceDefinition {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{}s.{group}", kind.to_lowercase())},
                "spec": {
                    "group": group,
                    "names": {"kind": kind, "plural": format!("{}s", kind.to_lowercase())},
                    "scope": "Namespaced",
                    "versions": [
                        {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": {"type": "object", "properties": {"trafficPolicy": {"type": "object", "properties": {"loadBalancer": lb}}}}}}}},
                        {"name": "v1alpha3", "served": true, "storage": false}
                    ]
                }
            }))
            .unwrap()
        };
        let old =
            serde_json::json!({"type": "object", "properties": {"simple": {"type": "string"}}});
        let got = istio_crds(&[
            crd("networking.istio.io", "DestinationRule", old),
            crd("example.com", "Widget", serde_json::json!({})),
        ]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].name, "destinationrules.networking.istio.io");
        assert_eq!(got[0].served_versions, ["v1", "v1alpha3"]);
        assert_eq!(got[0].storage_version, "v1");
        assert_eq!(got[0].knows, "1.23", "it lacks warmup (1.24)");
    }

    #[test]
    fn gateway_api_crds_are_reported_with_their_versions_and_release() {
        let crd = |group: &str, kind: &str| -> CustomResourceDefinition {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {
                    "name": format!("{}s.{group}", kind.to_lowercase()),
                    "annotations": {BUNDLE_VERSION: "v1.4.0", CHANNEL: "experimental"},
                },
                "spec": {
                    "group": group,
                    "names": {"kind": kind, "plural": format!("{}s", kind.to_lowercase())},
                    "scope": "Namespaced",
                    "versions": [
                        {"name": "v1", "served": true, "storage": true},
                        {"name": "v1beta1", "served": false, "storage": false}
                    ]
                }
            }))
            .unwrap()
        };
        let got = gateway_api_crds(&[
            crd("gateway.networking.k8s.io", "HTTPRoute"),
            crd("gateway.networking.x-k8s.io", "XListenerSet"),
            crd("networking.istio.io", "Gateway"),
        ]);
        let names: Vec<&str> = got.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "httproutes.gateway.networking.k8s.io",
                "xlistenersets.gateway.networking.x-k8s.io"
            ]
        );
        assert_eq!(got[0].served_versions, ["v1"], "v1beta1 is not served");
        assert_eq!(got[0].kind, "HTTPRoute");
        assert_eq!(got[0].bundle_version, "v1.4.0");
        assert_eq!(got[0].channel, "experimental");
    }
}

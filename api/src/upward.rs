//! What a remote cluster reports about itself over the upward channel
//! (`meshhub/v1alpha1/clusterstatus` and `serviceexports`), as the hub's
//! `/status` shows it and `meshhubctl` reads it.

use std::collections::BTreeMap;

use meshhub_mcp::ledger::At;
use serde::{Deserialize, Serialize};

mod gateway_status;

pub use gateway_status::{
    ACCEPTED, Acceptance, ConditionStatus, ConditionView, GatewayApiStatusView, ObjectStatusView,
    ParentRole, ParentStatusView,
};

/// One cluster's report, and the state of the hub's upward stream to it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterReportView {
    /// Whether the hub's upward stream to the agent is up.
    pub connected: bool,
    /// Why the last upward stream ended or was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The agent does not serve the upward report: it answered the
    /// subscription `UNIMPLEMENTED` (a `ResourceSink`-only sink, an older
    /// agent). The hub asks again only after a long wait (docs/upward.md);
    /// what is shown besides is the last report received, if any.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unserved: bool,
    /// When the agent built the report held (none: nothing received yet).
    #[serde(default)]
    pub observed: Option<At>,
    /// Per collection: what the agent holds and serves.
    #[serde(default)]
    pub collections: BTreeMap<String, HeldView>,
    /// The agent's local consumers (the cluster's istiod among them).
    #[serde(default)]
    pub consumers: Vec<LocalConsumerView>,
    /// The applier's result per collection (agent with `--apply`).
    #[serde(default)]
    pub applied: BTreeMap<String, AppliedView>,
    /// What the cluster's istiod holds (agent with an istiod address).
    #[serde(default)]
    pub istiod: Option<IstiodView>,
    /// The Services the cluster exports (KEP-1645): the last complete set
    /// the agent sent, each merged or refused.
    #[serde(default)]
    pub exports: Vec<ExportView>,
    /// How many of the exports are refused, by reason (none: none is).
    /// `exports` lists every export merged but at most
    /// [`REFUSED_EXPORTS_LISTED`] refused ones: a cluster reporting a
    /// flood of exports does not make `/status` as large.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exports_refused: Option<RefusedExportsView>,
    /// Whether the exports can be trusted as the cluster's whole set
    /// (none: nothing received yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exports_state: Option<ExportsStateView>,
    /// The Istio the cluster runs, as its agent sees it (none: no report,
    /// or an agent older than the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub istio: Option<IstioRuntimeView>,
    /// The cluster's Gateway API CRDs (none: the agent reads no CRDs, or
    /// is older than the field; the hub then delivers the Gateway API
    /// kinds as any kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_api: Option<GatewayApiCrdsView>,
    /// What the cluster's Gateway API controllers wrote in the status of
    /// the objects its agent applied (none: an agent that does not apply,
    /// or older than the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_api_status: Option<GatewayApiStatusView>,
    /// The cluster's Services its agent listed: how many, not which (the
    /// hub keeps the names for analysis; none: an agent that lists none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<ServicesView>,
}

/// What the hub holds of a cluster's Services.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServicesView {
    /// How many names the hub holds.
    pub count: usize,
    /// Services the agent (or the hub's own bound) left out: a name after
    /// the last one held is unknown.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: u64,
    /// Why the agent's last list failed (the names are then the last
    /// ones listed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// The list's version, as the agent digested it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The Gateway API CRDs of a cluster, as its agent read them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayApiCrdsView {
    /// Each CRD.
    #[serde(default)]
    pub crds: Vec<GatewayApiCrdView>,
    /// Why they could not be read (the hub keeps what it last knew).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// One Gateway API CRD of a cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayApiCrdView {
    /// `httproutes.gateway.networking.k8s.io`.
    pub name: String,
    /// Its group.
    pub group: String,
    /// Its kind.
    pub kind: String,
    /// Its served versions.
    #[serde(default)]
    pub served_versions: Vec<String>,
    /// Its Gateway API release (`v1.4.0`; empty: not said).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bundle_version: String,
    /// Its channel (`standard`, `experimental`; empty: not said).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub channel: String,
}

/// What Istio a cluster runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IstioRuntimeView {
    /// Each istiod the agent sees.
    #[serde(default)]
    pub istiods: Vec<IstiodInstanceView>,
    /// The cluster's Istio CRDs (an agent that applies).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crds: Vec<IstioCrdView>,
    /// Why they could not be read.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub crds_error: String,
}

/// One Istio CRD of a cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IstioCrdView {
    /// `destinationrules.networking.istio.io`.
    pub name: String,
    /// Its kind.
    pub kind: String,
    /// Its served versions.
    #[serde(default)]
    pub served_versions: Vec<String>,
    /// Its storage version.
    #[serde(default)]
    pub storage_version: String,
    /// The newest Istio release (`1.28`) whose additions its schema knows.
    pub knows: String,
}

/// One istiod of a cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IstiodInstanceView {
    /// `consumer` (it dialed the agent) or `version-endpoint`.
    pub source: String,
    /// Its node id, or the URL read.
    pub name: String,
    /// Its release; empty when unknown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// Its revision; empty: default or not said.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub revision: String,
    /// Why the version endpoint could not be read.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

impl IstioRuntimeView {
    /// The release version skew is checked against: the oldest any istiod
    /// of the cluster runs (an object reaches every istiod of its cluster,
    /// so the oldest is the one that would cut it), or older when an Istio
    /// CRD of the cluster knows less (its API server would refuse the
    /// rest); `None` when no istiod names a release.
    pub fn oldest(&self) -> Option<meshhub_analyze::IstioVersion> {
        let istiod = self
            .istiods
            .iter()
            .filter_map(|i| meshhub_analyze::IstioVersion::parse(&i.version).ok())
            .filter(|v| !v.is_placeholder())
            .min()?;
        Some(match self.crds_know() {
            Some(crds) if crds < istiod => crds,
            _ => istiod,
        })
    }

    /// The newest release any istiod of the cluster runs (`None`: none
    /// names one): the one that requires the most of the Gateway API CRDs
    /// (IST0176).
    pub fn newest(&self) -> Option<meshhub_analyze::IstioVersion> {
        self.istiods
            .iter()
            .filter_map(|i| meshhub_analyze::IstioVersion::parse(&i.version).ok())
            .filter(|v| !v.is_placeholder())
            .max()
    }

    /// The release the cluster's Istio CRDs all know (the least of them).
    pub fn crds_know(&self) -> Option<meshhub_analyze::IstioVersion> {
        self.crds
            .iter()
            .filter_map(|c| meshhub_analyze::IstioVersion::parse(&c.knows).ok())
            .min()
    }

    /// The releases as a table cell shows them: `1.23.2, 1.28.3 (canary)`;
    /// `unknown` when no istiod names one.
    pub fn summary(&self) -> String {
        let mut seen: Vec<String> = self
            .istiods
            .iter()
            .filter(|i| !i.version.is_empty())
            .map(|i| {
                if i.revision.is_empty() || i.revision == "default" {
                    i.version.clone()
                } else {
                    format!("{} ({})", i.version, i.revision)
                }
            })
            .collect();
        seen.sort();
        seen.dedup();
        let mut out = if seen.is_empty() {
            "unknown".to_owned()
        } else {
            seen.join(", ")
        };
        if let Some(crds) = self.crds_know() {
            out.push_str(&format!("; CRDs {crds}"));
        }
        out
    }
}

/// Whether an agent says its exports are its cluster's whole set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Completeness {
    /// Every watch they are built from listed.
    Complete,
    /// Some watch has not (re-)listed: the hub keeps the last complete set.
    Incomplete,
    /// The agent does not say (older than the field): taken as complete.
    #[default]
    Unknown,
}

/// The state of a cluster's exports on the hub.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportsStateView {
    /// What the agent's last report says.
    pub completeness: Completeness,
    /// The agent's watches that have not (re-)listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_for: Vec<String>,
    /// The exports shown and merged are not the latest the agent sent
    /// (that one is not known to be complete): they are the last
    /// complete set, or none when no complete set was received yet.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stale: bool,
    /// Since when they are stale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_since: Option<At>,
}

/// One collection as the agent holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldView {
    /// The hub's version the agent holds.
    pub hub_version: String,
    /// The version it serves locally.
    pub served_version: String,
    /// Resources.
    pub resources: u32,
    /// The last change it refused (`version: message`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refused: String,
    /// The hub's version of that refused change (empty: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refused_version: String,
    /// Why it refused `refused_version` (the agent's reason alone).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refusal: String,
    /// The hub's version of the last change it ACKed (or loaded).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub acked_version: String,
}

/// One local consumer of the agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalConsumerView {
    /// Its address.
    pub peer: String,
    /// Its node id.
    pub node_id: String,
    /// `mcp`, `ads` or `delta-ads`.
    pub protocol: String,
    /// Per collection (or type URL): the version ACKed and the state.
    pub collections: BTreeMap<String, ConsumerCollectionView>,
}

/// One collection of a local consumer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerCollectionView {
    /// The version it ACKed.
    pub acked_version: String,
    /// `SYNCED`, `NACKED`, ...
    pub state: String,
    /// The NACK's message.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nack_message: String,
}

/// The applier's result for one collection.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedView {
    /// Objects desired in the cluster's API.
    pub desired: u32,
    /// The last sync succeeded.
    pub ok: bool,
    /// The objects that failed, with why.
    #[serde(default)]
    pub failures: Vec<ObjectProblemView>,
}

/// An object and what is wrong with it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectProblemView {
    /// Its collection.
    pub collection: String,
    /// `namespace/name`.
    pub name: String,
    /// Its version as served (may be empty).
    #[serde(default)]
    pub version: String,
    /// Why.
    pub reason: String,
}

/// What the cluster's istiod holds, compared with what the agent serves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IstiodView {
    /// Where the agent reads it.
    pub address: String,
    /// Whether the last read succeeded.
    pub reachable: bool,
    /// Why it did not.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// When.
    #[serde(default)]
    pub checked: Option<At>,
    /// Served objects istiod holds.
    pub held: u32,
    /// Served objects istiod dropped.
    #[serde(default)]
    pub dropped: Vec<ObjectProblemView>,
    /// The collections compared.
    #[serde(default)]
    pub collections: Vec<String>,
}

/// At most this many of a cluster's refused exports are listed in its
/// report's `exports` (those the hub saw first).
pub const REFUSED_EXPORTS_LISTED: usize = 100;

/// A cluster's refused exports, counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedExportsView {
    /// How many are refused.
    pub count: usize,
    /// How many per reason (`policy`, `cap`, `invalid`).
    #[serde(default)]
    pub by_reason: BTreeMap<String, usize>,
    /// How many of them `exports` lists.
    pub listed: usize,
}

/// One exported Service of a cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportView {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `ClusterSetIP` or `Headless`.
    #[serde(default)]
    pub r#type: String,
    /// `name:port/protocol` per port.
    #[serde(default)]
    pub ports: Vec<String>,
    /// `address:port` per gateway address.
    #[serde(default)]
    pub gateways: Vec<String>,
    /// Why it is not exported (the Service is missing, no gateway).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub problem: String,
    /// A conflict with other clusters' exports of the same Service (MCS
    /// rules), when there is one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub conflict: String,
    /// Why the hub does not merge it (`policy: …`, `cap: …`, `invalid:
    /// …`); the other clusters' exports of the Service stand.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub refused: String,
    /// When this hub process first saw it: the conflict order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_seen: Option<At>,
    /// When the ServiceExport was created, as its agent reports it (shown
    /// only: the conflict order is the hub's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<At>,
}

impl ClusterReportView {
    /// The objects istiod dropped, per collection, when the report is
    /// about `acked` (per collection: the hub version the agent ACKed):
    /// a report about an older version says nothing about the current one.
    pub fn dropped_at(
        &self,
        acked: impl Fn(&str) -> Option<String>,
    ) -> BTreeMap<String, Vec<ObjectProblemView>> {
        let mut out: BTreeMap<String, Vec<ObjectProblemView>> = BTreeMap::new();
        let Some(istiod) = &self.istiod else {
            return out;
        };
        for d in &istiod.dropped {
            let held = self.collections.get(&d.collection).map(|c| &c.hub_version);
            if held.is_some() && held == acked(&d.collection).as_ref() {
                out.entry(d.collection.clone()).or_default().push(d.clone());
            }
        }
        out
    }
}

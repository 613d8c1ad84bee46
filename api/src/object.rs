//! `GET /debug/object?kind=K&namespace=NS&name=N` ([`ObjectQuery`] →
//! [`ObjectView`]): everything the hub knows of one object — which sources
//! define it (and which definition is served), its validation result,
//! which clusters' groups receive it and, per cluster, what each peer of
//! the group sent, ACKed or NACKed of it. `meshhubctl describe` shows it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use meshhub_mcp::ledger::SyncState;

use crate::analysis::AnalysisMessage;
use serde::{Deserialize, Serialize};

/// The query: a kind (any name [`crate::kinds::find_kind`] knows), and the
/// object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectQuery {
    /// The kind.
    pub kind: String,
    /// The namespace (or give `name` as `namespace/name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

/// The answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectView {
    /// The kind (`VirtualService`).
    pub kind: String,
    /// Its API version (`networking.istio.io/v1`).
    pub api_version: String,
    /// The MCP collection.
    pub collection: String,
    /// The MCP name, `namespace/name`.
    pub name: String,
    /// Whether it is served, and why not.
    pub validation: Validation,
    /// Every definition of it, the served one first.
    pub definitions: Vec<Definition>,
    /// The MCP resource version served (empty when not served).
    pub version: String,
    /// Every group that receives it.
    pub clusters: Vec<ClusterDelivery>,
    /// Per cluster, the analysis messages about it in the group's latest
    /// build (only clusters with messages).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub analysis: BTreeMap<String, Vec<AnalysisMessage>>,
}

/// The validation result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Validation {
    /// Served, or kept out of every snapshot.
    pub result: ValidationResult,
    /// Why it was rejected (every reason of every rejected definition).
    pub messages: Vec<String>,
    /// Warnings about the served definition (fields pruned).
    pub warnings: Vec<String>,
}

/// Whether the object is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValidationResult {
    /// A definition passed validation and is served.
    Accepted,
    /// Every definition was rejected: served to no cluster.
    Rejected,
}

/// Where an entry came from: source, unit (a file path relative to the
/// source's root) and position in it. Ordered, so that conflicts between
/// definitions of one object have a deterministic winner (the smallest
/// origin).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Origin {
    /// The source's name.
    pub source: Arc<str>,
    /// The unit (file path relative to the source root).
    pub unit: Arc<str>,
    /// Document number in the unit, from 1 (0: the unit as a whole).
    pub document: usize,
    /// Line where the document starts, when known.
    pub line: Option<usize>,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.source, self.unit)?;
        if self.document > 0 {
            write!(f, "#{}", self.document)?;
        }
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        Ok(())
    }
}

/// One definition of the object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Definition {
    /// Where: source, unit (file path, Kubernetes object), document, line
    /// (always known for what the store resolved).
    pub origin: Option<Origin>,
    /// The Kubernetes `resourceVersion`, for objects from an API server.
    pub resource_version: Option<String>,
    /// What became of it.
    pub state: DefinitionState,
    /// Why it was rejected.
    pub reasons: Vec<String>,
}

/// What became of one definition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DefinitionState {
    /// The definition served.
    Served,
    /// Another definition of the same object wins.
    Ignored,
    /// It failed validation.
    Rejected,
}

impl DefinitionState {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Served => "served",
            Self::Ignored => "ignored",
            Self::Rejected => "rejected",
        }
    }
}

impl fmt::Display for DefinitionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// The object in one cluster's group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterDelivery {
    /// The group (cluster) name.
    pub cluster: String,
    /// The group's current version of the collection (empty when the group
    /// is not published).
    pub collection_version: String,
    /// Whether the group's current snapshot holds the object's current
    /// definition (a group a rollout holds on its previous version serves
    /// an older one, or none).
    pub in_snapshot: bool,
    /// Why the cluster is not delivered the object at all (it lacks the
    /// kind's CRD, docs/gateway-api.md); absent when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withheld: Option<String>,
    /// Every peer of the group: the agent's dialer, connected consumers.
    pub peers: Vec<PeerDelivery>,
    /// What the cluster's agent reports of the object (the upward
    /// channel): delivered (held at the current version), applied to the
    /// cluster's API, held by the cluster's istiod. Absent without a
    /// report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<ReportedDelivery>,
}

/// The object in one cluster, as that cluster's agent reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedDelivery {
    /// The agent holds the collection at the version the group has now.
    pub delivered: bool,
    /// Applied to the cluster's API: `yes`, `no: <why>`, or `-` (the agent
    /// does not apply).
    pub applied: String,
    /// Held by the cluster's istiod: `yes`, `DROPPED: <why>`, or `-` (not
    /// compared: no istiod address, or istiod unreachable).
    pub held_by_istiod: String,
    /// A Gateway API object the agent applied: whether the cluster's
    /// controller accepted the hub's version of it — `yes`, `pending`, or
    /// `no: <where>: <reason>: <message>` ([`crate::upward::Acceptance`]).
    /// Absent for other kinds and agents that do not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<String>,
    /// What the cluster's controllers wrote in the object's status (absent
    /// as `accepted` is, or before the agent saw the object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_status: Option<crate::upward::ObjectStatusView>,
}

/// What one peer of a group has of the object's collection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerDelivery {
    /// The cluster name (agent dialer) or socket address (consumer).
    pub peer: String,
    /// How the peer is connected to the hub.
    pub role: PeerRole,
    /// `mcp`, `ads` or `delta-ads`.
    pub protocol: meshhub_mcp::ledger::StreamProtocol,
    /// Its node id.
    pub node_id: String,
    /// Whether its stream is up.
    pub connected: bool,
    /// Whether it has the object's current version.
    pub delivery: Delivery,
    /// The ledger's sync state of the collection.
    pub state: SyncState,
    /// Last version sent.
    pub sent: Option<String>,
    /// Last version ACKed.
    pub acked: Option<String>,
    /// Last version NACKed.
    pub nacked: Option<String>,
    /// The NACK's message.
    pub message: Option<String>,
}

/// How a peer is connected to the hub.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerRole {
    /// A cluster's sink agent: the hub dials it.
    Agent,
    /// A consumer that dialed the hub.
    Consumer,
}

impl PeerRole {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Consumer => "consumer",
        }
    }
}

impl fmt::Display for PeerRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// Whether a peer has the object's current collection version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Delivery {
    /// The current collection version, so the object, was ACKed.
    Acked,
    /// The current version was NACKed.
    Nacked,
    /// Sent, not answered yet.
    Sent,
    /// The current version was not sent yet: the peer has an older
    /// version, or nothing.
    Behind,
}

impl Delivery {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acked => "ACKED",
            Self::Nacked => "NACKED",
            Self::Sent => "SENT",
            Self::Behind => "BEHIND",
        }
    }
}

impl fmt::Display for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

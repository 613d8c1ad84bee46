//! `GET /status`: the hub's state in one document — sources, rejected
//! entries, conflicts, groups with their collection versions, reloads,
//! leader election, every remote cluster and consumer with what it was
//! sent, ACKed and NACKed, pins, TLS.
//!
//! The sections that are the hub's own business (the pipeline's status,
//! reloads, leader election, TLS) are type parameters of [`StatusView`]:
//! the hub fills them with its types; a reader that does not show them
//! (meshhubctl) reads them as [`Skipped`]. What both sides read is defined
//! here once.

use std::collections::BTreeMap;

use meshhub_mcp::ledger::{At, CollectionStatus, PeerStatus};
use serde::{Deserialize, Serialize};

use crate::analysis::ClusterAnalysis;
use crate::history::{PinView, UnresolvedPin};

/// The `/status` document, with the hub's own sections as `Pipeline`
/// (flattened: its fields are the document's first ones), `Reload`,
/// `Leader` and `Tls`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusView<Pipeline, Reload, Leader, Tls> {
    /// The pipeline's status (sources, rejected, conflicts, ...).
    #[serde(flatten)]
    pub pipeline: Pipeline,
    /// Every group.
    #[serde(default)]
    pub groups: Vec<GroupView>,
    /// Configuration reloads: the file, the last refused configuration.
    pub config: Reload,
    /// Leader election for the dial-out role: whether this replica leads
    /// (and dials the agents), who holds the lease.
    pub leader: Leader,
    /// One row per remote cluster (configured with an agent): its dialer's
    /// connection and per-collection sync state.
    #[serde(default)]
    pub remotes: Vec<RemoteView>,
    /// The consumers that dialed in (connected, then recently gone).
    #[serde(default)]
    pub consumers: Vec<PeerStatus>,
    /// Every peer of the engine (dialers and consumers).
    #[serde(default)]
    pub ledger: Vec<PeerStatus>,
    /// Groups served a pinned (historical) version instead of the latest.
    #[serde(default)]
    pub pins: Vec<PinView>,
    /// Shared pins (from another replica) this replica can't serve: the
    /// version is not in its history.
    #[serde(default)]
    pub unresolved_pins: Vec<UnresolvedPin>,
    /// TLS on the gRPC port: the certificate served, reloads, the last
    /// refused file (`null`: plaintext).
    pub grpc_tls: Option<Tls>,
    /// Per cluster: the analysis of its latest build, and the version
    /// held back (empty when analysis is off).
    #[serde(default)]
    pub analysis: Vec<ClusterAnalysis>,
    /// Sharded dial-out (`leaderElection.shards`): every shard, its holder
    /// and its clusters (empty when not sharded).
    #[serde(default)]
    pub shards: Vec<ShardView>,
    /// Objects not delivered to a cluster because it can't take their
    /// kind (a Gateway API kind whose CRD its agent reports missing), per
    /// cluster and collection (docs/gateway-api.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<WithheldView>,
}

/// A collection's objects not delivered to one cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WithheldView {
    /// The cluster (group).
    pub cluster: String,
    /// The collection (served to it empty).
    pub collection: String,
    /// How many objects it would hold.
    pub objects: usize,
    /// Why, for people.
    pub reason: String,
}

/// One shard of a sharded dial-out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardView {
    /// The shard's number.
    pub shard: u32,
    /// The replica holding its lease (and dialing its clusters), as this
    /// replica last read it; `None`: free.
    pub holder: Option<String>,
    /// How many configured clusters fall in it.
    #[serde(default)]
    pub clusters: usize,
}

/// A section of [`StatusView`] read and thrown away (and written as
/// `null`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Skipped;

impl<'de> Deserialize<'de> for Skipped {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| Skipped)
    }
}

/// `/status` as a reader that needs none of the hub's own sections sees
/// it.
pub type StatusSummary = StatusView<Skipped, Skipped, Skipped, Skipped>;

/// One group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupView {
    /// The group (cluster) name.
    pub name: String,
    /// Whether a snapshot is published.
    pub published: bool,
    /// Open collection watches (streams) on it.
    pub watches: usize,
    /// Per collection.
    pub collections: BTreeMap<String, CollectionView>,
}

/// One collection of one group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionView {
    /// The collection version.
    pub version: String,
    /// Number of resources.
    pub resources: usize,
}

/// One remote cluster on the status page (`Default`: a cluster not yet
/// dialed, nothing known of it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteView {
    /// The cluster (and group).
    pub cluster: String,
    /// The agent's address.
    pub address: String,
    /// Whether a stream to the agent is up.
    pub connected: bool,
    /// When the current (or last) stream came up.
    pub connected_since: Option<At>,
    /// When it went down.
    pub disconnected_at: Option<At>,
    /// Why the last stream ended or the last dial failed.
    pub last_error: Option<String>,
    /// Streams opened so far by the current dialer.
    pub streams: u64,
    /// Sharded dial-out: the cluster's shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    /// The replica that dials it (leader election: the leader; sharded:
    /// the holder of its shard; `None` without election or while nobody
    /// holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialed_by: Option<String>,
    /// Per collection: sent and ACKed versions, the NACK, the state
    /// (`DROPPED` when the cluster's istiod does not hold objects of the
    /// version it ACKed).
    pub collections: BTreeMap<String, CollectionStatus>,
    /// Per collection: the objects the cluster's istiod dropped (those of
    /// the `DROPPED` collections).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dropped: BTreeMap<String, Vec<crate::upward::ObjectProblemView>>,
    /// What the cluster reports about itself (the upward channel); absent
    /// while nothing was received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<crate::upward::ClusterReportView>,
}

//! `GET /rollout`: the hub's staged rollout, as the hub answers and
//! `meshhubctl rollout status` / `meshhubctl wait` read it.

use std::collections::BTreeMap;

use meshhub_rollout::{Millis, Policy, Rollout};
use serde::{Deserialize, Serialize};

/// What `GET /rollout` shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    /// Whether a policy is configured.
    pub enabled: bool,
    /// The policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// The current (or last) rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
    /// This replica follows the leader's decisions (leader election): the
    /// rollout shown is the leader's, and operators' actions go to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub following: bool,
    /// The replica whose decisions these are (with leader election).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// Clusters that refused a version and whose content has not changed
    /// since: left out of later rollouts (still failing).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub standing: BTreeMap<String, Standing>,
    /// Clusters whose decided version this replica cannot produce (not in
    /// its history), with that version: nothing is pushed to them; they
    /// keep what they hold.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unavailable: BTreeMap<String, String>,
    /// The current rollout's metric gates as last evaluated, per gate and
    /// cluster (the leader's; empty on a follower and before the first
    /// evaluation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<GateReading>,
    /// Clusters of the rollout that ACKed their new version and wait for
    /// their Gateway API controller to accept objects of it (the leader's):
    /// the objects (`<kind> <namespace/name>`, at most 10 each).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub awaiting_acceptance: BTreeMap<String, Vec<String>>,
}

/// One metric gate's last value for one cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateReading {
    /// The rollout it was evaluated for.
    pub rollout: u64,
    /// The wave (index) it was evaluated for.
    pub wave: usize,
    /// The gate's name.
    pub gate: String,
    /// The cluster.
    pub cluster: String,
    /// The sample that decided (the first that fails, else the last);
    /// `None`: the query returned no sample.
    pub value: Option<f64>,
    /// Whether it held.
    pub passed: bool,
    /// When (the hub's clock, Unix milliseconds).
    pub at: Millis,
}

/// A cluster's refusal of a version that keeps it out of later rollouts
/// until its content changes (or an operator resumes it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Standing {
    /// The version it refused.
    pub version: String,
    /// Why (the NACK's message, what its istiod dropped).
    pub message: String,
    /// The rollout it failed in — the one that sent it the version; 0:
    /// none known (rollouts count from 1; the version was sent before
    /// what this hub's decisions say, e.g. before a restart).
    pub rollout: u64,
}

impl Standing {
    /// The rollout that sent the refused version, when known.
    pub fn sent_by(&self) -> Option<u64> {
        (self.rollout != 0).then_some(self.rollout)
    }
}

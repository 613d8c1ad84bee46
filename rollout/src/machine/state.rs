//! Where a rollout and each of its clusters stand: the machine's
//! serializable state.

use serde::{Deserialize, Serialize};

use super::Millis;

/// What one cluster goes from and to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// The version it is served now (`None`: nothing yet), kept while it
    /// waits and restored by a rollback.
    pub from: Option<String>,
    /// The new version.
    pub to: String,
}

/// One cluster within a rollout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// Its versions.
    pub step: Step,
    /// The index of its wave.
    pub wave: usize,
    /// Where it stands.
    pub state: ClusterState,
}

/// Where one cluster stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum ClusterState {
    /// Served its previous version, waiting for its turn.
    Held,
    /// Served the new version, no ACK yet.
    Released {
        /// Since when.
        at: Millis,
    },
    /// ACKed the new version.
    Acked {
        /// When.
        at: Millis,
    },
    /// Refused the new version (or its istiod dropped part of it).
    Failed {
        /// Why.
        message: String,
    },
    /// Served its previous version again after a failure.
    RolledBack,
    /// Taken out of this rollout by an operator: held on its previous
    /// version.
    Excluded,
    /// Refused the new version before its wave came (an earlier rollout
    /// had sent it): held on its previous version and left out of this
    /// rollout, which goes on without it.
    Refused {
        /// Why.
        message: String,
    },
    /// Pinned by an operator (`meshhubctl pin`): served its pin, outside
    /// the rollout's waves (they do not wait for it) until unpinned; then
    /// it rejoins as [`Rollout::unpin`] says.
    Pinned {
        /// Its state when pinned (restored when it was out of the
        /// rollout: excluded, refused, failed, rolled back).
        before: Box<ClusterState>,
    },
}

impl ClusterState {
    /// The state's name for metrics and pages (`held`, `updating`, `acked`,
    /// `failed`, `rolled_back`, `excluded`, `refused`, `pinned`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Released { .. } => "updating",
            Self::Acked { .. } => "acked",
            Self::Failed { .. } => "failed",
            Self::RolledBack => "rolled_back",
            Self::Excluded => "excluded",
            Self::Refused { .. } => "refused",
            Self::Pinned { .. } => "pinned",
        }
    }

    /// Whether the cluster is to be served its previous version (`from`)
    /// rather than the new one (`to`). A pinned cluster is served its pin
    /// whatever this says; its rollout version is its previous one.
    pub fn wants_previous(&self) -> bool {
        matches!(
            self,
            Self::Held
                | Self::Excluded
                | Self::RolledBack
                | Self::Pinned { .. }
                | Self::Refused { .. }
                | Self::Failed { .. }
        )
    }

    /// Whether its wave no longer waits for it.
    pub(super) fn settled(&self) -> bool {
        matches!(
            self,
            Self::Acked { .. } | Self::Excluded | Self::Pinned { .. } | Self::Refused { .. }
        )
    }

    /// Whether it is outside the wave's gates and updates.
    pub fn left_out(&self) -> bool {
        matches!(
            self,
            Self::Excluded | Self::Pinned { .. } | Self::Refused { .. }
        )
    }
}

/// Where the rollout stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "phase")]
pub enum Phase {
    /// Clusters of the current wave are being updated.
    Updating,
    /// Every cluster of the current wave ACKed; running until `until`.
    Baking {
        /// End of the bake time.
        until: Millis,
    },
    /// The current wave's gates are being evaluated.
    Gating,
    /// The current wave passed; the next waits for an operator.
    AwaitingPromotion,
    /// Every wave passed.
    Completed,
    /// Stopped by a failure; updated clusters left as they are.
    Halted {
        /// The failure.
        failure: Failure,
    },
    /// Stopped by a failure; updated clusters serve their previous version
    /// again.
    RolledBack {
        /// The failure.
        failure: Failure,
    },
    /// Replaced by a newer change's rollout.
    Superseded {
        /// The newer rollout.
        by: u64,
    },
}

impl Phase {
    /// Whether nothing further happens without an operator or a new
    /// change.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::Completed
                | Self::Halted { .. }
                | Self::RolledBack { .. }
                | Self::Superseded { .. }
        )
    }

    /// The phase's name, for metrics and tables.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Updating => "updating",
            Self::Baking { .. } => "baking",
            Self::Gating => "gating",
            Self::AwaitingPromotion => "awaiting_promotion",
            Self::Completed => "completed",
            Self::Halted { .. } => "halted",
            Self::RolledBack { .. } => "rolled_back",
            Self::Superseded { .. } => "superseded",
        }
    }
}

/// Why a rollout stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// The wave it stopped in.
    pub wave: String,
    /// The cluster that failed, where one did.
    pub cluster: Option<String>,
    /// What kind of failure.
    pub cause: Cause,
    /// The details (the NACK's message, the gate's value, the clusters
    /// that did not ACK in time).
    pub message: String,
}

/// The kinds of failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Cause {
    /// A cluster refused the new version: its agent NACKed it, or its
    /// Gateway API controller did not accept an object of it (the message
    /// says which).
    Nack,
    /// A cluster's istiod dropped an object of the new version.
    Dropped,
    /// A gate did not hold.
    Gate {
        /// The gate.
        name: String,
    },
    /// The wave took longer than the progress deadline.
    Deadline,
    /// An operator aborted it.
    Aborted {
        /// Who.
        by: String,
    },
}

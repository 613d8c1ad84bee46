//! What the hub tells the machine, what the machine asks of the hub and
//! reports, and the operators' refusals.

use serde::{Deserialize, Serialize};

use super::Failure;

/// How a cluster refused a version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Rejection {
    /// Its agent (or consumer) NACKed.
    Nack,
    /// Its istiod dropped an object (the upward channel's report).
    Dropped,
    /// Its Gateway API controller (its istiod) wrote `Accepted=False` on
    /// an object of the version (the upward channel's report). It fails
    /// the rollout as a NACK does, and shows as one ([`super::Cause::Nack`]:
    /// a failure's cause is shared with replicas of other releases, which
    /// must read it).
    NotAccepted,
}

/// One gate that did not hold for one cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateFailure {
    /// The cluster.
    pub cluster: String,
    /// The gate (a metric gate's name, or `analysis`).
    pub gate: String,
    /// What was seen.
    pub message: String,
}

/// What the hub tells the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// `cluster` ACKed `version` of every collection the change touched.
    Acked {
        /// The cluster.
        cluster: String,
        /// The version.
        version: String,
    },
    /// `cluster` refused `version`.
    Rejected {
        /// The cluster.
        cluster: String,
        /// The version.
        version: String,
        /// How.
        how: Rejection,
        /// The peer's message.
        message: String,
    },
    /// The gates of `wave` were evaluated (during its bake or at its end):
    /// the ones that did not hold (empty: all held).
    Gates {
        /// The wave index.
        wave: usize,
        /// Whether this is the evaluation at the end of the bake (which
        /// passes the wave when empty).
        last: bool,
        /// What failed.
        failures: Vec<GateFailure>,
    },
    /// Time passed.
    Tick,
}

/// What the machine asks the hub to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "command")]
pub enum Command {
    /// Keep serving `cluster` its previous version (`None`: nothing new).
    Hold {
        /// The cluster.
        cluster: String,
        /// Its previous version.
        version: Option<String>,
    },
    /// Serve `cluster` the new version.
    Release {
        /// The cluster.
        cluster: String,
        /// The new version.
        version: String,
    },
    /// Serve `cluster` its previous version again (a failure's rollback).
    RollBack {
        /// The cluster.
        cluster: String,
        /// Its previous version.
        version: Option<String>,
    },
    /// Evaluate the gates of `wave` for its clusters and answer with
    /// [`Input::Gates`] (`last: true`).
    EvaluateGates {
        /// The wave index.
        wave: usize,
        /// Its clusters (excluded ones left out).
        clusters: Vec<String>,
    },
    /// Something to tell the audit log, metrics and the logs.
    Report(Event),
}

/// A step of a rollout worth recording.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "event")]
pub enum Event {
    /// A rollout started (replacing `supersedes`, if any).
    Started {
        /// The rollout.
        id: u64,
        /// The one it replaces.
        supersedes: Option<u64>,
    },
    /// A wave started.
    WaveStarted {
        /// The wave.
        wave: String,
        /// Its clusters.
        clusters: Vec<String>,
    },
    /// A wave passed its ACKs, bake and gates.
    WavePassed {
        /// The wave.
        wave: String,
    },
    /// The next wave waits for an operator.
    AwaitingPromotion {
        /// The wave that passed.
        wave: String,
    },
    /// An operator acted.
    Operator {
        /// What (`promote`, `abort`, `resume`).
        action: String,
        /// On which cluster, if one.
        cluster: Option<String>,
        /// Who.
        by: String,
    },
    /// A cluster refused the new version before its wave (an earlier
    /// rollout had sent it): it stays on its previous version, out of
    /// this rollout.
    ClusterRefused {
        /// The cluster.
        cluster: String,
        /// Why.
        message: String,
    },
    /// A cluster was pinned (it leaves the waves) or unpinned (it rejoins).
    ClusterPinned {
        /// The cluster.
        cluster: String,
        /// Pinned (`true`) or unpinned.
        pinned: bool,
    },
    /// A cluster left the configuration and so the rollout.
    ClusterRemoved {
        /// The cluster.
        cluster: String,
    },
    /// Every wave passed.
    Completed,
    /// The rollout stopped.
    Failed {
        /// Why.
        failure: Failure,
        /// Whether the updated clusters were rolled back.
        rolled_back: Vec<String>,
    },
}

/// An operator's action the rollout's state does not allow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The rollout finished (completed or superseded).
    #[error("the rollout is {phase}: nothing to {action}")]
    Finished {
        /// Its phase.
        phase: &'static str,
        /// The action refused.
        action: &'static str,
    },
    /// The action needs another phase.
    #[error("the rollout is {phase}; {action} needs it {needs}")]
    WrongPhase {
        /// Its phase.
        phase: &'static str,
        /// The action refused.
        action: &'static str,
        /// What it needs.
        needs: &'static str,
    },
    /// The cluster is not part of this rollout.
    #[error("cluster {0:?} is not part of this rollout (its group did not change)")]
    UnknownCluster(String),
}

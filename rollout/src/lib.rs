//! meshhub progressive delivery, as a pure library: a rollout
//! [`policy`](Policy) (waves of clusters, bake times, gates, what a failure
//! does), its [`plan`](plan()) for one change (which changed clusters go in
//! which wave), and the [`Rollout`] state machine that walks a change
//! through the waves; and the [`serving::decide`] function, the one place
//! that weighs pins, the rollout and the newest build into what a cluster
//! is served.
//!
//! Nothing here does I/O or reads a clock: the hub feeds the machine the
//! ledger's ACKs and NACKs, the upward channel's DROPPED reports, gate
//! results and the time, and carries out the commands it returns through
//! its pins. So every transition is unit-tested, and the state survives a
//! restart as plain serialized data.

mod machine;
mod plan;
mod policy;
pub mod serving;

pub use machine::{
    Cause, ClusterState, Command, Event, Failure, GateFailure, Input, Millis, Phase, Refused,
    Rejection, Rollout, Step, Target,
};
pub use plan::{ClusterInfo, PlannedWave, plan};
pub use policy::{
    Comparison, IMPLICIT_WAVE, Members, MetricGate, NoData, OnFailure, Policy, Promotion, Wave,
};

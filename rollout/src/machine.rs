//! The rollout state machine: one change walked through its waves.
//!
//! Sans I/O: the hub feeds it [`Input`]s (ACKs and rejections from the
//! ledger and the upward channel, gate results, the time, operators'
//! commands) with the current time, and carries out the [`Command`]s it
//! returns (hold a cluster on its previous version, release the new one,
//! roll back, evaluate gates, report). Its whole state serializes, so a
//! restarted hub (or another replica) continues where it was:
//! [`Rollout::restore`] gives the commands that re-establish what each
//! cluster is served.
//!
//! ```text
//!            start                 every cluster of the wave ACKed
//!   ──────────────▶ Updating ─────────────────────────────▶ Baking
//!                     ▲   │ NACK / DROPPED / deadline          │ bake time over
//!   next wave ────────┘   ▼                                    ▼
//!     ▲             Halted | RolledBack ◀── gate failed ──── Gating
//!     │                  │ resume                              │ gates passed
//!     │                  ▼                                     ▼
//!     └──── promote ── AwaitingPromotion ◀── manual ─── (wave passed) ── last wave ──▶ Completed
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::plan::PlannedWave;
use crate::policy::OnFailure;

mod io;
mod operator;
mod state;
#[cfg(test)]
mod tests;

/// Milliseconds since the Unix epoch (the hub's clock, passed in).
pub type Millis = u64;

pub use self::io::{Command, Event, GateFailure, Input, Refused, Rejection};
pub use self::state::{Cause, ClusterState, Failure, Phase, Step, Target};

/// One change's rollout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// Its id (increasing per hub).
    pub id: u64,
    /// When it started.
    pub started: Millis,
    /// The waves.
    pub waves: Vec<PlannedWave>,
    /// The policy's progress deadline per wave.
    pub deadline_ms: u64,
    /// The policy's failure handling.
    pub on_failure: OnFailure,
    /// Every changed cluster.
    pub targets: BTreeMap<String, Target>,
    /// The current wave.
    pub wave: usize,
    /// When the current wave started (the deadline counts from here).
    pub wave_started: Millis,
    /// Where it stands.
    pub phase: Phase,
}

impl Rollout {
    /// A rollout of `steps` (cluster → versions) over `waves` (from
    /// [`crate::plan()`], naming exactly the clusters of `steps`), started
    /// at `now`, replacing `supersedes`: every cluster held on its
    /// previous version, then the first wave released.
    pub fn start(
        id: u64,
        now: Millis,
        waves: Vec<PlannedWave>,
        steps: BTreeMap<String, Step>,
        deadline_ms: u64,
        on_failure: OnFailure,
        supersedes: Option<u64>,
    ) -> (Self, Vec<Command>) {
        let mut targets = BTreeMap::new();
        for (i, w) in waves.iter().enumerate() {
            for c in &w.clusters {
                if let Some(step) = steps.get(c) {
                    targets.insert(
                        c.clone(),
                        Target {
                            step: step.clone(),
                            wave: i,
                            state: ClusterState::Held,
                        },
                    );
                }
            }
        }
        // A step no wave names (the caller's plan left it out) is updated
        // with the last wave rather than never.
        let mut waves = waves;
        let last = waves.len().saturating_sub(1);
        for (c, step) in steps {
            if targets.contains_key(&c) {
                continue;
            }
            if let Some(w) = waves.get_mut(last) {
                w.clusters.push(c.clone());
            }
            targets.insert(
                c,
                Target {
                    step,
                    wave: last,
                    state: ClusterState::Held,
                },
            );
        }
        let mut rollout = Self {
            id,
            started: now,
            waves,
            deadline_ms,
            on_failure,
            targets,
            wave: 0,
            wave_started: now,
            phase: Phase::Updating,
        };
        let mut out = vec![Command::Report(Event::Started { id, supersedes })];
        out.extend(rollout.targets.iter().map(|(c, t)| Command::Hold {
            cluster: c.clone(),
            version: t.step.from.clone(),
        }));
        rollout.start_wave(now, 0, &mut out);
        (rollout, out)
    }

    /// The commands that re-establish what every cluster is served, for a
    /// restarted hub (or a replica taking over): the holds, releases and
    /// rollbacks in force, then what the current phase waits for.
    pub fn restore(&self) -> Vec<Command> {
        let mut out: Vec<Command> = self
            .targets
            .iter()
            .map(|(c, t)| match t.state {
                ClusterState::Held
                | ClusterState::Excluded
                | ClusterState::Pinned { .. }
                | ClusterState::Refused { .. } => Command::Hold {
                    cluster: c.clone(),
                    version: t.step.from.clone(),
                },
                ClusterState::RolledBack | ClusterState::Failed { .. } => Command::RollBack {
                    cluster: c.clone(),
                    version: t.step.from.clone(),
                },
                ClusterState::Released { .. } | ClusterState::Acked { .. } => Command::Release {
                    cluster: c.clone(),
                    version: t.step.to.clone(),
                },
            })
            .collect();
        if self.phase == Phase::Gating {
            out.push(self.evaluate_gates());
        }
        out
    }

    /// Marks the rollout replaced by rollout `by` (its successor's
    /// [`Rollout::start`] gives the commands).
    pub fn supersede(&mut self, by: u64) {
        self.phase = Phase::Superseded { by };
    }

    /// Feeds `input` at `now`; returns what to do.
    pub fn handle(&mut self, now: Millis, input: Input) -> Vec<Command> {
        let mut out = Vec::new();
        // A stopped rollout still learns what clusters ACK (an operator may
        // have promoted one) and refuse (never offered that again), and
        // nothing else; a superseded one nothing (its successor decides).
        let superseded = matches!(self.phase, Phase::Superseded { .. });
        if superseded
            || (self.phase.is_terminal()
                && !matches!(input, Input::Acked { .. } | Input::Rejected { .. }))
        {
            return out;
        }
        match input {
            Input::Acked { cluster, version } => self.acked(now, &cluster, &version, &mut out),
            Input::Rejected {
                cluster,
                version,
                how,
                message,
            } => self.rejected(now, cluster, &version, how, message, &mut out),
            Input::Gates {
                wave,
                last,
                failures,
            } => self.gates(now, wave, last, failures, &mut out),
            Input::Tick => self.tick(now, &mut out),
        }
        out
    }

    /// `cluster` left the configuration: it leaves the rollout (its wave
    /// no longer waits for it; a wave it alone was left in is done, and
    /// bakes). Nothing is served to it any more, so no command names it.
    pub fn forget(&mut self, now: Millis, cluster: &str) -> Vec<Command> {
        let mut out = Vec::new();
        if self.targets.remove(cluster).is_none() {
            return out;
        }
        for w in &mut self.waves {
            w.clusters.retain(|c| c != cluster);
        }
        // A later wave left without clusters is dropped (it would bake
        // and gate nothing); the current one finishes as it is.
        let mut i = self.wave + 1;
        while i < self.waves.len() {
            if self.waves[i].clusters.is_empty() && !self.targets.values().any(|t| t.wave == i) {
                self.waves.remove(i);
                for t in self.targets.values_mut() {
                    if t.wave > i {
                        t.wave -= 1;
                    }
                }
            } else {
                i += 1;
            }
        }
        out.push(Command::Report(Event::ClusterRemoved {
            cluster: cluster.to_owned(),
        }));
        if self.phase == Phase::Updating {
            self.fill(now, &mut out);
        }
        out
    }

    /// The version the rollout wants `cluster` served: its previous one
    /// (`Some(None)`: it had none) or its new one; `None` when the cluster
    /// is not part of it, or the rollout was superseded (its successor
    /// decides).
    pub fn wanted(&self, cluster: &str) -> Option<Option<&str>> {
        if matches!(self.phase, Phase::Superseded { .. }) {
            return None;
        }
        let t = self.targets.get(cluster)?;
        Some(if t.state.wants_previous() {
            t.step.from.as_deref()
        } else {
            Some(t.step.to.as_str())
        })
    }

    /// The wave index `cluster` belongs to.
    pub fn wave_of(&self, cluster: &str) -> Option<usize> {
        self.targets.get(cluster).map(|t| t.wave)
    }

    /// The current wave's name (`None`: no waves).
    pub fn wave_name(&self) -> Option<&str> {
        self.waves.get(self.wave).map(|w| w.name.as_str())
    }

    fn acked(&mut self, now: Millis, cluster: &str, version: &str, out: &mut Vec<Command>) {
        let Some(t) = self.targets.get_mut(cluster) else {
            return;
        };
        if t.step.to != version || !matches!(t.state, ClusterState::Released { .. }) {
            return;
        }
        t.state = ClusterState::Acked { at: now };
        if self.phase == Phase::Updating {
            self.fill(now, out);
        }
    }

    fn rejected(
        &mut self,
        now: Millis,
        cluster: String,
        version: &str,
        how: Rejection,
        message: String,
        out: &mut Vec<Command>,
    ) {
        let Some(t) = self.targets.get_mut(&cluster) else {
            return;
        };
        if t.step.to != version {
            return;
        }
        let sent = matches!(
            t.state,
            ClusterState::Released { .. } | ClusterState::Acked { .. }
        );
        if !sent || self.phase.is_terminal() {
            // Its answer to an earlier offer of this very version (an
            // earlier rollout's, or this one's before an operator took the
            // cluster out): it is not offered again, and this rollout goes
            // on. A pinned cluster's answers are its pin's.
            if matches!(
                t.state,
                ClusterState::Pinned { .. } | ClusterState::Refused { .. }
            ) {
                return;
            }
            if t.state == ClusterState::Held {
                t.state = ClusterState::Refused {
                    message: message.clone(),
                };
            } else if sent {
                // Sent after the rollout stopped (an operator's promote,
                // resume or unpin): the failure handling applies to it.
                t.state = match self.on_failure {
                    OnFailure::Rollback => ClusterState::RolledBack,
                    OnFailure::Halt => ClusterState::Failed {
                        message: message.clone(),
                    },
                };
            }
            out.push(Command::Report(Event::ClusterRefused { cluster, message }));
            if self.phase == Phase::Updating {
                self.fill(now, out);
            }
            return;
        }
        t.state = ClusterState::Failed {
            message: message.clone(),
        };
        let wave = self.waves[t.wave].name.clone();
        let cause = match how {
            Rejection::Nack | Rejection::NotAccepted => Cause::Nack,
            Rejection::Dropped => Cause::Dropped,
        };
        self.fail(
            now,
            Failure {
                wave,
                cluster: Some(cluster),
                cause,
                message,
            },
            out,
        );
    }

    fn gates(
        &mut self,
        now: Millis,
        wave: usize,
        last: bool,
        failures: Vec<GateFailure>,
        out: &mut Vec<Command>,
    ) {
        let current = matches!(self.phase, Phase::Baking { .. } | Phase::Gating);
        if wave != self.wave || !current {
            return;
        }
        if let Some(f) = failures.into_iter().next() {
            let failure = Failure {
                wave: self.waves[wave].name.clone(),
                cluster: Some(f.cluster),
                cause: Cause::Gate { name: f.gate },
                message: f.message,
            };
            self.fail(now, failure, out);
        } else if last && self.phase == Phase::Gating {
            self.wave_passed(now, out);
        }
    }

    fn tick(&mut self, now: Millis, out: &mut Vec<Command>) {
        let waiting = matches!(
            self.phase,
            Phase::Updating | Phase::Baking { .. } | Phase::Gating
        );
        if waiting && now >= self.wave_started.saturating_add(self.deadline_ms) {
            let message = self.deadline_message();
            let failure = Failure {
                wave: self.wave_name().unwrap_or_default().to_owned(),
                cluster: None,
                cause: Cause::Deadline,
                message,
            };
            self.fail(now, failure, out);
            return;
        }
        if let Phase::Baking { until } = self.phase
            && now >= until
        {
            self.phase = Phase::Gating;
            out.push(self.evaluate_gates());
        }
    }

    fn deadline_message(&self) -> String {
        let waiting: Vec<&str> = self
            .targets
            .iter()
            .filter(|(_, t)| {
                t.wave == self.wave
                    && matches!(t.state, ClusterState::Held | ClusterState::Released { .. })
            })
            .map(|(c, _)| c.as_str())
            .collect();
        let limit = self.deadline_ms as f64 / 1000.0;
        match self.phase {
            Phase::Updating => format!(
                "progress deadline ({limit}s) passed with clusters not ACKed: {}",
                waiting.join(", ")
            ),
            _ => format!("progress deadline ({limit}s) passed before the gates held"),
        }
    }

    /// Starts wave `index` (or completes the rollout past the last).
    fn start_wave(&mut self, now: Millis, index: usize, out: &mut Vec<Command>) {
        self.wave = index;
        self.wave_started = now;
        let Some(wave) = self.waves.get(index) else {
            self.phase = Phase::Completed;
            out.push(Command::Report(Event::Completed));
            return;
        };
        out.push(Command::Report(Event::WaveStarted {
            wave: wave.name.clone(),
            clusters: wave.clusters.clone(),
        }));
        self.phase = Phase::Updating;
        self.fill(now, out);
    }

    /// Releases held clusters of the current wave up to its concurrency;
    /// starts the bake once all ACKed.
    fn fill(&mut self, now: Millis, out: &mut Vec<Command>) {
        let wave = &self.waves[self.wave];
        let limit = wave.max_concurrent.unwrap_or(usize::MAX).max(1);
        let mut updating = self
            .targets
            .values()
            .filter(|t| t.wave == self.wave && matches!(t.state, ClusterState::Released { .. }))
            .count();
        for name in &wave.clusters {
            if updating >= limit {
                break;
            }
            let Some(t) = self.targets.get_mut(name) else {
                continue;
            };
            if t.state == ClusterState::Held {
                t.state = ClusterState::Released { at: now };
                out.push(Command::Release {
                    cluster: name.clone(),
                    version: t.step.to.clone(),
                });
                updating += 1;
            }
        }
        let done = self
            .targets
            .values()
            .filter(|t| t.wave == self.wave)
            .all(|t| t.state.settled());
        if done {
            let bake = self.waves[self.wave].bake_ms;
            self.phase = Phase::Baking {
                until: now.saturating_add(bake),
            };
            if bake == 0 {
                self.tick(now, out);
            }
        }
    }

    fn evaluate_gates(&self) -> Command {
        Command::EvaluateGates {
            wave: self.wave,
            clusters: self
                .targets
                .iter()
                .filter(|(_, t)| t.wave == self.wave && !t.state.left_out())
                .map(|(c, _)| c.clone())
                .collect(),
        }
    }

    fn wave_passed(&mut self, now: Millis, out: &mut Vec<Command>) {
        let wave = &self.waves[self.wave];
        out.push(Command::Report(Event::WavePassed {
            wave: wave.name.clone(),
        }));
        let last = self.wave + 1 >= self.waves.len();
        if wave.promotion == crate::policy::Promotion::Manual && !last {
            self.phase = Phase::AwaitingPromotion;
            out.push(Command::Report(Event::AwaitingPromotion {
                wave: wave.name.clone(),
            }));
        } else {
            self.start_wave(now, self.wave + 1, out);
        }
    }

    /// Stops the rollout for `failure`, rolling back per the policy.
    fn fail(&mut self, _now: Millis, failure: Failure, out: &mut Vec<Command>) {
        let mut rolled_back = Vec::new();
        if self.on_failure == OnFailure::Rollback {
            for (c, t) in &mut self.targets {
                if matches!(
                    t.state,
                    ClusterState::Released { .. }
                        | ClusterState::Acked { .. }
                        | ClusterState::Failed { .. }
                ) {
                    t.state = ClusterState::RolledBack;
                    out.push(Command::RollBack {
                        cluster: c.clone(),
                        version: t.step.from.clone(),
                    });
                    rolled_back.push(c.clone());
                }
            }
        }
        out.push(Command::Report(Event::Failed {
            failure: failure.clone(),
            rolled_back,
        }));
        self.phase = match self.on_failure {
            OnFailure::Rollback => Phase::RolledBack { failure },
            OnFailure::Halt => Phase::Halted { failure },
        };
    }
}

//! What an operator may do to a rollout (`meshhubctl rollout promote |
//! abort | resume [--cluster C]`), and when.

use super::{Cause, ClusterState, Command, Event, Failure, Millis, Phase, Refused, Rollout};

impl Rollout {
    /// `promote`: without a cluster, starts the next wave now — from a wave
    /// waiting for promotion, or cutting short a bake or a gate
    /// evaluation (the operator's judgment replaces them); with a cluster,
    /// serves that cluster the new version now, ahead of its wave (its
    /// ACK counts when its wave comes).
    pub fn promote(
        &mut self,
        now: Millis,
        cluster: Option<&str>,
        by: &str,
    ) -> Result<Vec<Command>, Refused> {
        self.refuse_if_finished("promote")?;
        let mut out = vec![operator("promote", cluster, by)];
        match cluster {
            Some(name) => {
                let t = self.target_mut(name)?;
                if matches!(
                    t.state,
                    ClusterState::Held | ClusterState::Excluded | ClusterState::Refused { .. }
                ) {
                    t.state = ClusterState::Released { at: now };
                    out.push(Command::Release {
                        cluster: name.to_owned(),
                        version: t.step.to.clone(),
                    });
                }
            }
            None => match self.phase {
                Phase::AwaitingPromotion | Phase::Baking { .. } | Phase::Gating => {
                    self.wave_passed_by_operator(now, &mut out);
                }
                _ => {
                    return Err(Refused::WrongPhase {
                        phase: self.phase.name(),
                        action: "promote",
                        needs: "baking, gating or awaiting promotion",
                    });
                }
            },
        }
        Ok(out)
    }

    /// `abort`: without a cluster, stops the rollout as a failure (the
    /// policy's `onFailure` decides whether updated clusters roll back);
    /// with a cluster, takes it out of the rollout and serves it its
    /// previous version (the rest goes on).
    pub fn abort(
        &mut self,
        now: Millis,
        cluster: Option<&str>,
        by: &str,
    ) -> Result<Vec<Command>, Refused> {
        self.refuse_if_finished("abort")?;
        let mut out = vec![operator("abort", cluster, by)];
        match cluster {
            Some(name) => {
                let t = self.target_mut(name)?;
                let was_sent = !matches!(
                    t.state,
                    ClusterState::Held | ClusterState::Excluded | ClusterState::Pinned { .. }
                );
                t.state = ClusterState::Excluded;
                let version = t.step.from.clone();
                out.push(if was_sent {
                    Command::RollBack {
                        cluster: name.to_owned(),
                        version,
                    }
                } else {
                    Command::Hold {
                        cluster: name.to_owned(),
                        version,
                    }
                });
                if self.phase == Phase::Updating {
                    self.fill(now, &mut out);
                }
            }
            None => {
                if matches!(self.phase, Phase::Halted { .. } | Phase::RolledBack { .. }) {
                    return Err(Refused::WrongPhase {
                        phase: self.phase.name(),
                        action: "abort",
                        needs: "in progress",
                    });
                }
                let failure = Failure {
                    wave: self.wave_name().unwrap_or_default().to_owned(),
                    cluster: None,
                    cause: Cause::Aborted { by: by.to_owned() },
                    message: format!("aborted by {by}"),
                };
                self.fail(now, failure, &mut out);
            }
        }
        Ok(out)
    }

    /// `resume`: without a cluster, restarts a halted or rolled-back
    /// rollout at the first wave not wholly ACKed (failed and rolled-back
    /// clusters are updated again); with a cluster, returns an excluded,
    /// failed or rolled-back cluster to the rollout (updated when its
    /// wave runs; at once if its wave is running or passed).
    pub fn resume(
        &mut self,
        now: Millis,
        cluster: Option<&str>,
        by: &str,
    ) -> Result<Vec<Command>, Refused> {
        self.refuse_if_finished("resume")?;
        let mut out = vec![operator("resume", cluster, by)];
        match cluster {
            Some(name) => {
                let t = self.target_mut(name)?;
                let returning = matches!(
                    t.state,
                    ClusterState::Excluded
                        | ClusterState::Failed { .. }
                        | ClusterState::RolledBack
                        | ClusterState::Refused { .. }
                );
                if returning {
                    self.rejoin(now, name, &mut out);
                }
            }
            None => {
                if !matches!(self.phase, Phase::Halted { .. } | Phase::RolledBack { .. }) {
                    return Err(Refused::WrongPhase {
                        phase: self.phase.name(),
                        action: "resume",
                        needs: "halted or rolled back",
                    });
                }
                for t in self.targets.values_mut() {
                    if matches!(
                        t.state,
                        ClusterState::Failed { .. }
                            | ClusterState::RolledBack
                            | ClusterState::Refused { .. }
                    ) {
                        t.state = ClusterState::Held;
                    }
                }
                let first = (0..self.waves.len())
                    .find(|&w| {
                        self.targets
                            .values()
                            .any(|t| t.wave == w && !t.state.settled())
                    })
                    .unwrap_or(self.waves.len());
                self.start_wave(now, first, &mut out);
            }
        }
        Ok(out)
    }

    /// `cluster` was pinned (`meshhubctl pin`): it leaves the waves — its
    /// wave does not wait for it, its gates leave it out, a failure does
    /// not roll it back — and is served its pin until unpinned.
    pub fn pin(&mut self, now: Millis, cluster: &str) -> Vec<Command> {
        let mut out = Vec::new();
        let Some(t) = self.targets.get_mut(cluster) else {
            return out;
        };
        if matches!(t.state, ClusterState::Pinned { .. }) {
            return out;
        }
        let before = std::mem::replace(&mut t.state, ClusterState::Held);
        t.state = ClusterState::Pinned {
            before: Box::new(before),
        };
        out.push(Command::Report(Event::ClusterPinned {
            cluster: cluster.to_owned(),
            pinned: true,
        }));
        if self.phase == Phase::Updating {
            self.fill(now, &mut out);
        }
        out
    }

    /// `cluster`'s pin was lifted: a cluster that was out of the rollout
    /// when pinned (excluded, refused, failed, rolled back) is so again;
    /// any other rejoins it as a cluster returned by `resume --cluster`
    /// does (its previous version until its wave runs; the new one at once
    /// if its wave runs or passed; its previous one while the rollout is
    /// stopped).
    pub fn unpin(&mut self, now: Millis, cluster: &str) -> Vec<Command> {
        let mut out = Vec::new();
        let Some(t) = self.targets.get_mut(cluster) else {
            return out;
        };
        let ClusterState::Pinned { before } = &t.state else {
            return out;
        };
        let before = (**before).clone();
        out.push(Command::Report(Event::ClusterPinned {
            cluster: cluster.to_owned(),
            pinned: false,
        }));
        if matches!(
            before,
            ClusterState::Excluded
                | ClusterState::Refused { .. }
                | ClusterState::Failed { .. }
                | ClusterState::RolledBack
        ) {
            t.state = before;
            return out;
        }
        self.rejoin(now, cluster, &mut out);
        out
    }

    /// Returns `name` to the rollout: held until its wave runs, released at
    /// once when its wave is running or has passed (in any phase: a wave
    /// baking, gating or awaiting promotion has passed its updates, and a
    /// completed rollout every wave), held while the rollout is stopped
    /// (updated when it resumes).
    fn rejoin(&mut self, now: Millis, name: &str, out: &mut Vec<Command>) {
        let current = self.wave;
        let (phase, completed) = (self.phase.clone(), self.phase == Phase::Completed);
        let Some(t) = self.targets.get_mut(name) else {
            return;
        };
        t.state = ClusterState::Held;
        let stopped = matches!(
            phase,
            Phase::Halted { .. } | Phase::RolledBack { .. } | Phase::Superseded { .. }
        );
        if stopped || (t.wave > current && !completed) {
            return;
        }
        if t.wave == current && phase == Phase::Updating {
            self.fill(now, out);
            return;
        }
        t.state = ClusterState::Released { at: now };
        out.push(Command::Release {
            cluster: name.to_owned(),
            version: t.step.to.clone(),
        });
    }

    fn refuse_if_finished(&self, action: &'static str) -> Result<(), Refused> {
        match self.phase {
            Phase::Completed | Phase::Superseded { .. } => Err(Refused::Finished {
                phase: self.phase.name(),
                action,
            }),
            _ => Ok(()),
        }
    }

    fn target_mut(&mut self, name: &str) -> Result<&mut super::Target, Refused> {
        self.targets
            .get_mut(name)
            .ok_or_else(|| Refused::UnknownCluster(name.to_owned()))
    }

    fn wave_passed_by_operator(&mut self, now: Millis, out: &mut Vec<Command>) {
        if self.phase != Phase::AwaitingPromotion {
            out.push(Command::Report(Event::WavePassed {
                wave: self.wave_name().unwrap_or_default().to_owned(),
            }));
        }
        self.start_wave(now, self.wave + 1, out);
    }
}

fn operator(action: &str, cluster: Option<&str>, by: &str) -> Command {
    Command::Report(Event::Operator {
        action: action.to_owned(),
        cluster: cluster.map(str::to_owned),
        by: by.to_owned(),
    })
}

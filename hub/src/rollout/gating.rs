//! The controller's side of the metric gates: what to ask the gates'
//! task ([`super::gates`]) and when, and what its answers mean.

use meshhub_rollout::{Input, MetricGate, Phase};
use tokio::sync::mpsc;

use super::{Controller, GateLink, Millis, Serve, gates};

impl Controller {
    /// Metric gates are evaluated by the task reading `requests` (answers
    /// go to [`Controller::gate_answer`]); `interval` paces evaluations
    /// during a bake and retries.
    #[must_use]
    pub fn with_gates(
        mut self,
        requests: mpsc::Sender<gates::GateRequest>,
        interval: std::time::Duration,
    ) -> Self {
        self.gates = Some(GateLink {
            requests,
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
        });
        self
    }

    /// The metric gates of the current rollout's wave `index`, those for
    /// the bake only with `during_bake`.
    pub(super) fn wave_gates(&self, index: usize, during_bake: bool) -> Vec<MetricGate> {
        let Some(r) = &self.rollout else {
            return Vec::new();
        };
        let Some(name) = r.waves.get(index).map(|w| &w.name) else {
            return Vec::new();
        };
        self.started_under
            .as_ref()
            .unwrap_or(&self.policy)
            .waves
            .iter()
            .find(|w| &w.name == name)
            .map(|w| {
                w.metrics
                    .iter()
                    .filter(|g| !during_bake || g.during_bake)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Asks the gates' task to evaluate wave `wave`'s gates (`last`: the
    /// evaluation that passes the wave). Whether the request was queued.
    pub(super) fn request_gates(&mut self, wave: usize, last: bool, clusters: Vec<String>) -> bool {
        let gates = self.wave_gates(wave, !last);
        let (Some(link), Some(r)) = (&self.gates, &self.rollout) else {
            return false;
        };
        let request = gates::GateRequest {
            rollout: r.id,
            wave,
            last,
            clusters,
            gates: gates.into(),
        };
        link.requests.try_send(request).is_ok()
    }

    /// The gates' task answered.
    pub fn gate_answer(&mut self, now: Millis, answer: gates::GateAnswer) -> Serve {
        let req = answer.request;
        let current = self
            .rollout
            .as_ref()
            .is_some_and(|r| r.id == req.rollout && r.wave == req.wave);
        if !current {
            return Serve::new();
        }
        match answer.result {
            Ok(evaluation) => {
                self.gate_readings = evaluation
                    .readings
                    .into_iter()
                    .map(|r| meshhub_api::rollout::GateReading {
                        rollout: req.rollout,
                        wave: req.wave,
                        gate: r.gate,
                        cluster: r.cluster,
                        value: r.value,
                        passed: r.passed,
                        at: now,
                    })
                    .collect();
                self.feed(
                    now,
                    Input::Gates {
                        wave: req.wave,
                        last: req.last,
                        failures: evaluation.failures,
                    },
                )
            }
            // No evidence either way: ask again after the interval (the
            // progress deadline bounds the waiting).
            Err(_) => {
                if req.last {
                    self.next_evaluation = self.gates.as_ref().map(|l| now + l.interval_ms);
                }
                Serve::new()
            }
        }
    }

    /// Keeps [`Controller::next_evaluation`] right for the phase: every
    /// interval while a wave with `duringBake` gates bakes; a pending retry
    /// while gating; nothing otherwise.
    pub(super) fn schedule_evaluations(&mut self, now: Millis) {
        let Some(r) = &self.rollout else {
            self.next_evaluation = None;
            return;
        };
        match r.phase {
            Phase::Baking { .. } => {
                let during = !self.wave_gates(r.wave, true).is_empty();
                match (during, &self.gates) {
                    (true, Some(link)) => {
                        self.next_evaluation.get_or_insert(now + link.interval_ms);
                    }
                    _ => self.next_evaluation = None,
                }
            }
            Phase::Gating => {}
            _ => self.next_evaluation = None,
        }
    }
}

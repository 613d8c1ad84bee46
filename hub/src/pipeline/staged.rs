//! The staged rollout inside the pipeline task: its controller and what
//! feeds it — the ledger's deliveries, operators' requests, metric gates'
//! answers, the clusters' reports, the leadership and the leader's shared
//! decisions, and the clock.

use std::sync::Arc;
use std::time::Duration;

use meshhub_mcp::ledger::{Delivery, Ledger};
use tokio::sync::{broadcast, mpsc, watch};
use tracing::{debug, warn};

use super::Pipeline;
use crate::leader::LeaderStatus;
use crate::rollout;

/// A staged rollout's controller and what feeds it in the pipeline task.
pub(super) struct Staged {
    pub(super) controller: rollout::Controller,
    ledger: Ledger,
    deliveries: broadcast::Receiver<Delivery>,
    /// `None` once every sender is gone.
    requests: Option<mpsc::Receiver<rollout::Request>>,
    /// The metric gates' answers (`None`: no gates, or their task ended).
    gate_answers: Option<mpsc::Receiver<rollout::gates::GateAnswer>>,
    /// What the clusters report up (their istiod's drops, what each agent
    /// ACKed and refused); `None`: not followed, or its owner ended.
    reports: Option<watch::Receiver<crate::upward::Reports>>,
    /// With leader election: whether this replica leads, and the leader's
    /// decisions ([`rollout::shared`]).
    replicas: Option<Replicas>,
    /// The dialed clusters, their labels and the policy, as configuration
    /// reloads change them (`None`: not followed, or their owner ended).
    reloads: Option<Reloads>,
}

/// What configuration reloads change of the rollout.
struct Reloads {
    agents: watch::Receiver<crate::clusters::Agents>,
    labels: watch::Receiver<rollout::ClusterLabels>,
    policy: watch::Receiver<Option<meshhub_rollout::Policy>>,
}

/// What decides whether this replica's controller leads or follows.
struct Replicas {
    leader: watch::Receiver<LeaderStatus>,
    mirrored: rollout::shared::MirrorReceiver,
    /// The last decisions read of a current leadership term.
    accepted: Option<Arc<rollout::shared::Mirrored>>,
}

/// What wakes the pipeline for the rollout.
pub(super) enum StagedEvent {
    Delivery(Result<Delivery, broadcast::error::RecvError>),
    /// `None`: every sender is gone.
    Request(Option<rollout::Request>),
    /// `None`: the gates' task ended.
    Gates(Option<rollout::gates::GateAnswer>),
    /// The clusters' reports changed (`false`: their owner ended).
    Reports(bool),
    /// The leadership or the leader's decisions changed (`false`: their
    /// owner ended).
    Replicas(bool),
    /// The dialed clusters, their labels or the policy changed (`false`:
    /// their owner ended).
    Reloaded(bool),
    Tick,
}

impl Pipeline {
    /// Stages changes of the dialed clusters through `controller` (see
    /// [`crate::rollout`]): it learns their ACKs and NACKs from `ledger`
    /// and operators' actions from `requests`.
    pub fn stage_rollouts(
        mut self,
        controller: rollout::Controller,
        ledger: Ledger,
        requests: mpsc::Receiver<rollout::Request>,
        gate_answers: Option<mpsc::Receiver<rollout::gates::GateAnswer>>,
    ) -> Self {
        self.rollout = Some(Staged {
            controller,
            deliveries: ledger.deliveries(),
            ledger,
            requests: Some(requests),
            gate_answers,
            reports: None,
            replicas: None,
            reloads: None,
        });
        self
    }

    /// The staged rollout is decided by the leader among the replicas
    /// (`leader`) and followed by the others through the shared decisions
    /// (`mirrored`); the controller starts as a follower.
    pub fn share_rollouts(
        mut self,
        leader: watch::Receiver<LeaderStatus>,
        mirrored: rollout::shared::MirrorReceiver,
    ) -> Self {
        if let Some(s) = self.rollout.as_mut() {
            s.replicas = Some(Replicas {
                leader,
                mirrored,
                accepted: None,
            });
        }
        self
    }

    /// The staged rollout governs the dialed clusters `agents` has, placed
    /// in waves by their `labels` under `policy`, as configuration reloads
    /// change them.
    pub fn follow_reloads(
        mut self,
        agents: watch::Receiver<crate::clusters::Agents>,
        labels: watch::Receiver<rollout::ClusterLabels>,
        policy: watch::Receiver<Option<meshhub_rollout::Policy>>,
    ) -> Self {
        if let Some(s) = self.rollout.as_mut() {
            s.reloads = Some(Reloads {
                agents,
                labels,
                policy,
            });
        }
        self
    }

    /// The staged rollout also hears the clusters' reports: what each
    /// agent ACKed and refused, and what its istiod dropped.
    pub fn follow_reports(mut self, reports: watch::Receiver<crate::upward::Reports>) -> Self {
        if let Some(s) = self.rollout.as_mut() {
            s.reports = Some(reports);
        }
        self
    }
}

impl Staged {
    /// The next thing the rollout must hear.
    pub(super) async fn next(&mut self) -> StagedEvent {
        let tick_at = self.controller.next_tick();
        let request = async {
            match self.requests.as_mut() {
                Some(r) => r.recv().await,
                None => std::future::pending().await,
            }
        };
        let gate_answer = async {
            match self.gate_answers.as_mut() {
                Some(r) => r.recv().await,
                None => std::future::pending().await,
            }
        };
        let report = async {
            match self.reports.as_mut() {
                Some(r) => r.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        let replicas = async {
            match self.replicas.as_mut() {
                Some(r) => tokio::select! {
                    c = r.leader.changed() => c.is_ok(),
                    c = r.mirrored.changed() => c.is_ok(),
                },
                None => std::future::pending().await,
            }
        };
        let reloaded = async {
            match self.reloads.as_mut() {
                Some(r) => tokio::select! {
                    c = r.agents.changed() => c.is_ok(),
                    c = r.labels.changed() => c.is_ok(),
                    c = r.policy.changed() => c.is_ok(),
                },
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            d = self.deliveries.recv() => StagedEvent::Delivery(d),
            ok = reloaded => StagedEvent::Reloaded(ok),
            r = request => StagedEvent::Request(r),
            a = gate_answer => StagedEvent::Gates(a),
            ok = report => StagedEvent::Reports(ok),
            ok = replicas => StagedEvent::Replicas(ok),
            () = sleep_until_ms(tick_at) => StagedEvent::Tick,
        }
    }

    /// The ACKs already in the ledger and the reports of the clusters the
    /// controller just sent their new version: what to serve.
    pub(super) fn acks_already_in(&mut self) -> rollout::Serve {
        let clusters = self.controller.take_released();
        if clusters.is_empty() {
            return Vec::new();
        }
        let now = rollout::now_ms();
        // Only the released clusters' dial-out streams are read.
        let peers = self.ledger.view_of(|p| clusters.contains(&p.peer));
        self.controller.acks_already_in(now, &peers, &clusters)
    }

    /// Feeds `ev` to the controller: what to serve.
    pub(super) fn handle(&mut self, ev: StagedEvent) -> rollout::Serve {
        let now = rollout::now_ms();
        match ev {
            StagedEvent::Delivery(Ok(d)) => self.controller.delivery(now, &d),
            StagedEvent::Delivery(Err(broadcast::error::RecvError::Lagged(missed))) => {
                debug!(missed, "rollout: deliveries missed; reading the ledger");
                self.controller.reconcile(now, &self.ledger.view())
            }
            // The ledger lives as long as the hub.
            StagedEvent::Delivery(Err(broadcast::error::RecvError::Closed)) => Vec::new(),
            StagedEvent::Tick => self.controller.tick(now),
            StagedEvent::Gates(Some(answer)) => self.controller.gate_answer(now, answer),
            StagedEvent::Gates(None) => {
                self.gate_answers = None;
                Vec::new()
            }
            StagedEvent::Reports(true) => {
                let reports = self.reports.as_mut().map(|r| r.borrow_and_update().clone());
                reports.map_or_else(Vec::new, |r| self.controller.reports(now, &r))
            }
            StagedEvent::Reports(false) => {
                self.reports = None;
                Vec::new()
            }
            StagedEvent::Replicas(true) => self.role(now),
            // The election or the follower ended (shutting down): keep
            // the role as it is.
            StagedEvent::Replicas(false) => {
                self.replicas = None;
                Vec::new()
            }
            StagedEvent::Reloaded(true) => match self.reloads.as_mut() {
                Some(r) => {
                    let agents = r.agents.borrow_and_update().clone();
                    let labels = r.labels.borrow_and_update().clone();
                    if let Some(policy) = r.policy.borrow_and_update().clone() {
                        self.controller.set_policy(policy);
                    }
                    let clusters = rollout::dialed_clusters(&agents, &labels);
                    self.controller.set_clusters(now, clusters)
                }
                None => Vec::new(),
            },
            StagedEvent::Reloaded(false) => {
                self.reloads = None;
                Vec::new()
            }
            StagedEvent::Request(None) => {
                self.requests = None;
                Vec::new()
            }
            StagedEvent::Request(Some(r)) => {
                match self
                    .controller
                    .act(now, r.action, r.cluster.as_deref(), &r.by)
                {
                    Ok(serve) => {
                        let _ = r.reply.send(Ok(()));
                        serve
                    }
                    Err(e) => {
                        let _ = r.reply.send(Err(e));
                        Vec::new()
                    }
                }
            }
        }
    }

    /// The leadership or the shared decisions changed. This replica leads
    /// once it holds the lease and has read the decisions (so it continues
    /// them instead of starting over); it takes the lead from the freshest
    /// decisions read, and again when its term changed meanwhile (the
    /// lease lost and won back between two looks: another replica may
    /// have decided in between). Otherwise it follows them.
    fn role(&mut self, now: rollout::Millis) -> rollout::Serve {
        let Some(r) = self.replicas.as_mut() else {
            return Vec::new();
        };
        let status = r.leader.borrow_and_update().clone();
        // Decisions of an older leadership term than those this replica
        // already accepted are a former leader's late write: the freshest
        // term read stands (0: a hub before terms were shared, read as
        // before). Not compared with the Lease's term: between a new
        // leader winning the lease and writing its first decisions, the
        // ConfigMap rightly holds the previous term's, which the new
        // leader continues from — a replica started in that window (the
        // new leader itself, in a rolling restart) must accept them.
        let read = r.mirrored.borrow_and_update().clone();
        let accepted_term = r.accepted.as_ref().map_or(0, |m| m.decisions.term);
        let current = read
            .as_ref()
            .is_none_or(|m| m.decisions.term == 0 || m.decisions.term >= accepted_term);
        if current {
            r.accepted = read;
        } else {
            warn!(
                term = read.as_ref().map(|m| m.decisions.term),
                accepted.term = accepted_term,
                lease.term = status.term,
                "shared rollout decisions of an older leadership term than those already read ignored"
            );
        }
        let mirrored = r.accepted.clone();
        let c = &mut self.controller;
        if !(status.is_leader && mirrored.is_some()) {
            return c.follow(mirrored);
        }
        if c.leading() && c.term() == status.term {
            // Versions the follow task read from the archive since.
            return c.learn(mirrored.as_deref());
        }
        let mut serve = c.follow(mirrored);
        serve.extend(c.lead(now, status.term));
        // The dialers may have been ACKed before.
        serve.extend(c.reconcile(now, &self.ledger.view()));
        serve
    }
}

/// Sleeps until `at` (milliseconds since the epoch), forever if `None`.
async fn sleep_until_ms(at: Option<rollout::Millis>) {
    match at {
        Some(at) => {
            let wait = at.saturating_sub(rollout::now_ms());
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;

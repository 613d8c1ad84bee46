//! Staged rollout of changes to the remote clusters (`rollout:`): the
//! pipeline's publication of a changed group goes through the
//! [`Controller`], which decides, wave by wave, which clusters are served
//! the new snapshot and which keep their previous one, and rolls clusters
//! back on a failure.
//!
//! The decisions are [`meshhub_rollout::Rollout`]'s (sans I/O); this module
//! feeds it — the snapshots built, the ledger's ACKs and NACKs of each
//! cluster's dialer, the clock, operators' actions — and turns its commands
//! into what each group is served, audit records, metrics and a status
//! view. It lives inside the pipeline task (the one writer of what is
//! served), so no lock is shared.
//!
//! The rollout covers the clusters the hub dials (`clusters[].agent`); other
//! groups (the default group, consumers' own groups) get a change at once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use meshhub_mcp::cache::Group;

use meshhub_mcp::snapshot::Snapshot;
pub use meshhub_rollout::Millis;
use meshhub_rollout::{
    ClusterInfo, ClusterState, Command, Event, Input, Phase, Policy, Refused, Rollout, Step, plan,
};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};

use crate::audit::{AuditEvent, AuditLog};
use crate::history::version_id;

mod acceptance;
mod decide;
pub mod gates;
mod gating;
pub mod persist;
mod replicas;
mod restore;
pub mod routes;
pub mod shared;
mod signals;
pub mod spec;
mod view;

pub use self::restore::{Restored, restore};

use self::shared::{Decisions, Mirrored, Standing};

/// Gauge: 1 for the current rollout's phase (label `phase`).
pub const METRIC_PHASE: &str = "meshhub_rollout_phase";
/// Counter: rollout events (label `event`: started, wave_started,
/// wave_passed, completed, failed, operator).
pub const METRIC_EVENTS: &str = "meshhub_rollout_events_total";
/// Counter: clusters rolled back to their previous version.
pub const METRIC_ROLLBACKS: &str = "meshhub_rollout_rollbacks_total";
/// Gauge: clusters held on their previous version by the rollout.
pub const METRIC_HELD: &str = "meshhub_rollout_held_clusters";

/// Every phase, for the phase gauge.
const PHASES: [&str; 8] = [
    "updating",
    "baking",
    "gating",
    "awaiting_promotion",
    "completed",
    "halted",
    "rolled_back",
    "superseded",
];

/// An operator's action on the current rollout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    /// Start the next wave now (or update one cluster ahead of its wave).
    Promote,
    /// Stop (or take one cluster out and roll it back).
    Abort,
    /// Restart a halted or rolled-back rollout (or return one cluster).
    Resume,
}

/// Why an operator's action was not carried out.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// No rollout policy is configured.
    #[error("no rollout is configured (`rollout:` in the hub's configuration)")]
    NotConfigured,
    /// Nothing was rolled out since the hub started.
    #[error("no rollout yet: nothing changed since the hub started")]
    NoRollout,
    /// The rollout's state refuses it.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The pipeline is gone (shutting down).
    #[error("the hub is shutting down")]
    Gone,
    /// Another replica leads and decides the rollout.
    #[error("this replica does not lead the rollout; send it to the leader ({})", leader.as_deref().unwrap_or("not known yet"))]
    NotLeader {
        /// The leader's identity, when its decisions were read.
        leader: Option<String>,
    },
}

/// An operator's request, sent to the pipeline task.
#[derive(Debug)]
pub struct Request {
    /// What.
    pub action: Action,
    /// On which cluster (all: `None`).
    pub cluster: Option<String>,
    /// Who asked (for the audit log).
    pub by: String,
    /// The answer.
    pub reply: oneshot::Sender<Result<(), ActionError>>,
}

pub use meshhub_api::rollout::View;

/// One cluster's snapshots in the current rollout.
#[derive(Clone, Debug)]
struct Versions {
    from: Option<Arc<Snapshot>>,
    to: Arc<Snapshot>,
    /// The collections `to` changed, with their new version, not yet ACKed
    /// by the cluster's dialer (filled again whenever the cluster is sent
    /// `to`).
    unacked: BTreeMap<String, String>,
    /// The Gateway API objects `to` brought whose acceptance by the
    /// cluster's controller is still awaited ([`acceptance`]).
    unaccepted: acceptance::Awaited,
    /// What its istiod had dropped when it was sent `to`: not this
    /// rollout's doing.
    prior_drops: BTreeSet<(String, String, String)>,
}

/// The rollout controller (see the module documentation).
#[derive(Debug)]
pub struct Controller {
    /// The policy the next rollout follows.
    policy: Policy,
    /// The policy the rollout in flight started under, when a reload
    /// changed it since (its gates keep their definitions).
    started_under: Option<Policy>,
    /// The clusters the hub dials, with their labels, in configuration
    /// order.
    clusters: Vec<(String, BTreeMap<String, String>)>,
    rollout: Option<Rollout>,
    versions: HashMap<String, Versions>,
    /// What the rollout decided each governed group is served, by version
    /// id (recorded even when this replica cannot produce it), and the
    /// snapshots of those decisions this replica has.
    serving: HashMap<String, Arc<Snapshot>>,
    serving_ids: BTreeMap<String, String>,
    /// Decisions this replica cannot produce: cluster → version id.
    unavailable: BTreeMap<String, String>,
    /// Snapshots of versions restored or read from the history, by
    /// `(cluster, version id)`.
    known: shared::Snapshots,
    /// The clusters pinned by operators.
    pinned: BTreeSet<String>,
    /// Clusters' standing failures.
    standing: BTreeMap<String, Standing>,
    /// Refusals already counted: told again, they are not new ones.
    counted: shared::CountedRefusals,
    /// Per cluster, the last version (id) a rollout sent it, and which.
    sent_by: BTreeMap<String, (String, u64)>,
    /// Clusters sent their new version since the pipeline last asked
    /// ([`Controller::take_released`]): their ACKs may be in already.
    released: BTreeSet<String>,
    /// The clusters' last reports (for the drops already standing when a
    /// cluster is sent a version).
    last_reports: Option<crate::upward::Reports>,
    /// The clusters whose last report is looked at again with the next,
    /// though it did not change: what they await changed since.
    recheck: signals::Recheck,
    /// Drops already fed to the machine: `(cluster, version, collection,
    /// name)`.
    fed_drops: BTreeSet<(String, String, String, String)>,
    /// Every governed group's newest snapshot (the last build's).
    latest: HashMap<Group, Arc<Snapshot>>,
    /// Whether this replica decides or follows another's decisions.
    mode: Mode,
    /// The last refused version each agent reported, per collection.
    refusals: HashMap<String, HashMap<String, signals::SeenRefusal>>,
    /// The leadership term of this replica's decisions ([`Decisions::term`]).
    term: u64,
    next_id: u64,
    audit: AuditLog,
    view: watch::Sender<Arc<View>>,
    /// The decisions to save or share ([`persist::StateFile`],
    /// [`shared::SharedRollout`]).
    saved: watch::Sender<Option<Arc<Decisions>>>,
    /// A rollout saved before a restart, applied at the first build.
    restored: Option<Restored>,
    /// Where metric gates are evaluated (`None`: no wave has one).
    gates: Option<GateLink>,
    /// When gates are next evaluated: while a wave with `duringBake` gates
    /// bakes, or again after an evaluation that could not be made.
    next_evaluation: Option<Millis>,
    /// The current rollout's gates as last evaluated (shown on `/rollout`).
    gate_readings: Vec<meshhub_api::rollout::GateReading>,
}

/// Who decides the rollout.
#[derive(Debug)]
enum Mode {
    /// This replica (a hub alone, or the leader).
    Leading,
    /// Another replica, the leader: this one serves what its decisions say
    /// (`None` until they were read once: governed groups wait).
    Following(Option<Arc<Mirrored>>),
}

/// The controller's side of the metric gates' task.
#[derive(Debug)]
struct GateLink {
    requests: mpsc::Sender<gates::GateRequest>,
    interval_ms: Millis,
}

/// What a group must be served now.
pub type Serve = Vec<(Group, Arc<Snapshot>)>;

/// Every cluster's labels (`clusters[].clusterLabels`), by name.
pub type ClusterLabels = Arc<BTreeMap<String, BTreeMap<String, String>>>;

/// The clusters a rollout governs: the dialed ones (`agents`), in
/// configuration order, with their labels.
pub fn dialed_clusters(
    agents: &[crate::clusters::AgentSpec],
    labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> Vec<(String, BTreeMap<String, String>)> {
    agents
        .iter()
        .map(|a| {
            let l = labels.get(&a.cluster).cloned().unwrap_or_default();
            (a.cluster.clone(), l)
        })
        .collect()
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Controller {
    /// A controller of `policy` over the dialed `clusters` (name, labels).
    pub fn new(
        policy: Policy,
        clusters: Vec<(String, BTreeMap<String, String>)>,
        audit: AuditLog,
    ) -> (Self, watch::Receiver<Arc<View>>) {
        let (view, rx) = watch::channel(Arc::new(View {
            enabled: true,
            policy: Some(policy.clone()),
            ..View::default()
        }));
        let c = Self {
            policy,
            started_under: None,
            clusters,
            rollout: None,
            versions: HashMap::new(),
            serving: HashMap::new(),
            serving_ids: BTreeMap::new(),
            unavailable: BTreeMap::new(),
            known: shared::Snapshots::new(),
            pinned: BTreeSet::new(),
            standing: BTreeMap::new(),
            counted: shared::CountedRefusals::default(),
            sent_by: BTreeMap::new(),
            released: BTreeSet::new(),
            last_reports: None,
            recheck: signals::Recheck::Every,
            fed_drops: BTreeSet::new(),
            latest: HashMap::new(),
            mode: Mode::Leading,
            refusals: HashMap::new(),
            term: 0,
            next_id: 1,
            audit,
            view,
            saved: watch::channel(None).0,
            restored: None,
            gates: None,
            next_evaluation: None,
            gate_readings: Vec::new(),
        };
        (c, rx)
    }

    /// Starts as a follower of another replica's decisions (leader
    /// election: every replica starts so, and leads once it holds the
    /// lease and has read the shared decisions).
    #[must_use]
    pub fn following(mut self) -> Self {
        self.mode = Mode::Following(None);
        self.publish_view();
        self
    }

    /// Whether this replica decides the rollout.
    pub fn leading(&self) -> bool {
        matches!(self.mode, Mode::Leading)
    }

    /// The policy changed (a configuration reload): it applies to the next
    /// rollout; the one in flight keeps its waves, deadline, failure
    /// handling and gates.
    pub fn set_policy(&mut self, policy: Policy) {
        if policy == self.policy {
            return;
        }
        let in_flight = self
            .rollout
            .as_ref()
            .is_some_and(|r| !r.phase.is_terminal());
        if in_flight && self.started_under.is_none() {
            self.started_under = Some(self.policy.clone());
        }
        info!(
            in_flight,
            "rollout policy changed: the next rollout follows it"
        );
        self.policy = policy;
        self.publish_view();
    }

    /// The dialed clusters changed (a configuration reload): `clusters`
    /// (name, labels) are governed from now on. A removed cluster leaves
    /// the rollout in flight (its wave stops waiting for it) and is
    /// forgotten; an added one is governed from its first snapshot on
    /// (served at once, as any cluster's first); new labels place clusters
    /// in the waves of the next rollout (one in flight keeps its plan).
    /// Returns what to serve.
    pub fn set_clusters(
        &mut self,
        now: Millis,
        clusters: Vec<(String, BTreeMap<String, String>)>,
    ) -> Serve {
        let kept: BTreeSet<&str> = clusters.iter().map(|(c, _)| c.as_str()).collect();
        let removed: Vec<String> = self
            .clusters
            .iter()
            .map(|(c, _)| c.clone())
            .filter(|c| !kept.contains(c.as_str()))
            .collect();
        for (c, _) in &clusters {
            if !self.governs(c) {
                info!(cluster = %c, "rollout: cluster added; its changes go through the waves from its first snapshot on");
            }
        }
        self.clusters = clusters;
        if removed.is_empty() {
            self.publish_view();
            return Serve::new();
        }
        let mut commands = Vec::new();
        for c in &removed {
            info!(cluster = %c, "rollout: cluster removed");
            self.serving.remove(c);
            self.serving_ids.remove(c);
            self.latest.remove(c.as_str());
            self.versions.remove(c);
            self.refusals.remove(c);
            self.unavailable.remove(c);
            self.standing.remove(c);
            self.counted.forget(c);
            self.sent_by.remove(c);
            self.known.retain(|(cluster, _), _| cluster != c);
            if let Some(r) = self.rollout.as_mut() {
                commands.extend(r.forget(now, c));
            }
        }
        if !self.leading() {
            // The leader's decisions say what its rollout does (this copy
            // is replaced by the next ones it publishes).
            self.publish_view();
            return Serve::new();
        }
        self.carry_out(now, commands)
    }

    /// The decisions to save or share, newest first (for
    /// [`persist::StateFile::run`], [`shared::SharedRollout::publish`]).
    pub fn states(&self) -> watch::Receiver<Option<Arc<Decisions>>> {
        self.saved.subscribe()
    }

    /// Whether changes of `group` go through the rollout.
    pub fn governs(&self, group: &str) -> bool {
        self.clusters.iter().any(|(c, _)| c == group)
    }

    /// A build changed governed groups: `latest` is every governed group's
    /// newest snapshot (changed or not). Groups never served before are
    /// served at once (nothing to protect); a rollout starts (superseding
    /// one in flight) for every group whose served snapshot differs from
    /// its newest. Returns what to serve now.
    pub fn built(&mut self, now: Millis, latest: &HashMap<Group, Arc<Snapshot>>) -> Serve {
        self.latest = latest
            .iter()
            .filter(|(g, _)| self.governs(g))
            .map(|(g, s)| (g.clone(), s.clone()))
            .collect();
        if !self.leading() {
            return self.mirror_serve();
        }
        let mut serve = self.retry_unavailable();
        // Saved decisions wait for a build with snapshots: continuing them
        // from nothing would drop them.
        if !latest.is_empty()
            && let Some(restored) = self.restored.take()
            && self.resume(now, restored, latest, &mut serve)
        {
            self.publish_view();
            return serve;
        }
        let mut steps = BTreeMap::new();
        let mut versions = HashMap::new();
        let mut first = Vec::new();
        // A cluster whose newest version is the one it refused stays out:
        // that version is never offered to it again.
        let refused: BTreeSet<String> = self
            .clusters
            .clone()
            .into_iter()
            .filter_map(|(c, _)| {
                let id = version_id(latest.get(c.as_str())?);
                self.still_refused(&c, &id).then_some(c)
            })
            .collect();
        for (cluster, _) in &self.clusters {
            let Some(to) = latest.get(cluster.as_str()) else {
                continue;
            };
            // A cluster the rollout being replaced sent its new version
            // without an ACK yet goes from what it had before: its answer
            // to the unACKed version must not be lost with that rollout.
            let unanswered = self.rollout.as_ref().and_then(|r| {
                let t = r.targets.get(cluster)?;
                matches!(t.state, ClusterState::Released { .. })
                    .then(|| t.step.from.clone())
                    .flatten()
            });
            let Some(from_id) = unanswered.or_else(|| self.serving_ids.get(cluster).cloned())
            else {
                // The first snapshot of a cluster: nothing to protect.
                first.push((cluster.clone(), to.clone()));
                continue;
            };
            let to_id = version_id(to);
            if from_id == to_id || refused.contains(cluster) {
                continue;
            }
            // Fails closed when this replica lacks it: the cluster is
            // held on it (nothing pushed) rather than given the newest.
            let from = self.resolve(cluster, &from_id);
            steps.insert(
                cluster.clone(),
                Step {
                    from: Some(from_id),
                    to: to_id,
                },
            );
            versions.insert(
                cluster.clone(),
                Versions {
                    unacked: changed_collections(from.as_ref(), to),
                    unaccepted: acceptance::awaited(
                        from.as_deref(),
                        to,
                        self.last_reports
                            .as_ref()
                            .and_then(|r| r.get(cluster))
                            .map(|r| &**r),
                    ),
                    from,
                    to: to.clone(),
                    prior_drops: BTreeSet::new(),
                },
            );
        }
        for (cluster, to) in first {
            self.set_serving(&cluster, to.clone());
            serve.push((Group::from(cluster.as_str()), to));
        }
        if steps.is_empty() || self.is_current(&steps, latest) {
            self.publish_view();
            return serve;
        }
        let changed: BTreeSet<String> = steps.keys().cloned().collect();
        let infos: Vec<ClusterInfo<'_>> = self
            .clusters
            .iter()
            .map(|(name, labels)| ClusterInfo { name, labels })
            .collect();
        let waves = plan(&self.policy, &infos, &changed);
        let supersedes = match &mut self.rollout {
            Some(r) if !matches!(r.phase, Phase::Completed | Phase::Superseded { .. }) => {
                let old = r.id;
                r.supersede(self.next_id);
                Some(old)
            }
            _ => None,
        };
        let id = self.next_id;
        self.next_id += 1;
        self.started_under = None;
        let (rollout, commands) = Rollout::start(
            id,
            now,
            waves,
            steps,
            self.policy.progress_deadline_ms,
            self.policy.on_failure,
            supersedes,
        );
        self.rollout = Some(rollout);
        self.versions = versions;
        self.recheck = signals::Recheck::Every;
        let mut commands = commands;
        commands.extend(self.pin_commands(now));
        serve.extend(self.carry_out(now, commands));
        serve
    }

    /// Whether the clusters not served their newest snapshot (`steps`)
    /// are exactly what the current rollout is about (a build that changed
    /// nothing of theirs): then it goes on, or stays stopped, as it is.
    fn is_current(
        &self,
        steps: &BTreeMap<String, Step>,
        latest: &HashMap<Group, Arc<Snapshot>>,
    ) -> bool {
        let Some(r) = &self.rollout else {
            return false;
        };
        if matches!(r.phase, Phase::Superseded { .. }) {
            return false;
        }
        steps
            .iter()
            .all(|(c, s)| r.targets.get(c).is_some_and(|t| t.step.to == s.to))
            && r.targets.iter().all(|(c, t)| {
                latest
                    .get(c.as_str())
                    .is_none_or(|l| version_id(l) == t.step.to)
            })
    }

    /// Time passed.
    pub fn tick(&mut self, now: Millis) -> Serve {
        if !self.leading() {
            return Serve::new();
        }
        if let (Some(at), Some(r)) = (self.next_evaluation, &self.rollout)
            && now >= at
        {
            self.next_evaluation = None;
            let (wave, phase) = (r.wave, r.phase.clone());
            let clusters: Vec<String> = r
                .targets
                .iter()
                .filter(|(_, t)| t.wave == wave && !t.state.left_out())
                .map(|(c, _)| c.clone())
                .collect();
            let last = phase == Phase::Gating;
            let queued = self.request_gates(wave, last, clusters);
            if matches!(phase, Phase::Baking { .. }) || !queued {
                let interval = self.gates.as_ref().map_or(1_000, |l| l.interval_ms);
                self.next_evaluation = Some(now + interval);
            }
        }
        let mut serve = self.refusals_due(now);
        serve.extend(self.feed(now, Input::Tick));
        serve
    }

    /// When the current rollout next needs [`Controller::tick`] (the end of
    /// a bake, the progress deadline).
    pub fn next_tick(&self) -> Option<Millis> {
        if !self.leading() {
            return None;
        }
        let r = self.rollout.as_ref()?;
        let deadline = r.wave_started.saturating_add(r.deadline_ms);
        let next = match r.phase {
            Phase::Baking { until } => Some(until.min(deadline)),
            Phase::Updating | Phase::Gating => Some(deadline),
            _ => None,
        };
        [next, self.next_evaluation, self.next_refusal_due()]
            .into_iter()
            .flatten()
            .min()
    }

    /// An operator's action.
    pub fn act(
        &mut self,
        now: Millis,
        action: Action,
        cluster: Option<&str>,
        by: &str,
    ) -> Result<Serve, ActionError> {
        if let Mode::Following(m) = &self.mode {
            return Err(ActionError::NotLeader {
                leader: m.as_ref().and_then(|m| m.decisions.by.clone()),
            });
        }
        if let Some(c) = cluster
            && action != Action::Abort
            && self.standing.contains_key(c)
            && self
                .rollout
                .as_ref()
                .is_none_or(|r| !r.targets.contains_key(c))
        {
            return Ok(self.retry_standing(now, c, by));
        }
        let r = self.rollout.as_mut().ok_or(ActionError::NoRollout)?;
        let commands = match action {
            Action::Promote => r.promote(now, cluster, by)?,
            Action::Abort => r.abort(now, cluster, by)?,
            Action::Resume => r.resume(now, cluster, by)?,
        };
        // Resume, and promote of one cluster, offer the version again even
        // to a cluster that refused it: the operator asks for it.
        if action == Action::Resume || (action == Action::Promote && cluster.is_some()) {
            self.forgive(cluster, by);
        }
        Ok(self.carry_out(now, commands))
    }

    fn feed(&mut self, now: Millis, input: Input) -> Serve {
        if !self.leading() {
            return Serve::new();
        }
        let Some(r) = self.rollout.as_mut() else {
            return Serve::new();
        };
        let commands = r.handle(now, input);
        self.carry_out(now, commands)
    }

    /// Carries out `commands`: reports, gate evaluations (none configured
    /// beyond the ledger's: they hold at once), then what each cluster
    /// must be served given its state.
    fn carry_out(&mut self, now: Millis, commands: Vec<Command>) -> Serve {
        let mut pending = commands;
        while !pending.is_empty() {
            let mut next = Vec::new();
            for c in pending {
                match c {
                    Command::Report(event) => {
                        self.note_failure(&event);
                        self.report(event);
                    }
                    Command::EvaluateGates { wave, clusters } => {
                        if self.wave_gates(wave, false).is_empty() {
                            // Only the ledger's gate, which held already.
                            if let Some(r) = self.rollout.as_mut() {
                                next.extend(r.handle(
                                    now,
                                    Input::Gates {
                                        wave,
                                        last: true,
                                        failures: Vec::new(),
                                    },
                                ));
                            }
                        } else if self.request_gates(wave, true, clusters) {
                            self.next_evaluation = None;
                        } else {
                            let interval = self.gates.as_ref().map_or(1_000, |l| l.interval_ms);
                            self.next_evaluation = Some(now + interval);
                        }
                    }
                    Command::Release { cluster, .. } => self.sent_new_version(&cluster),
                    Command::Hold { .. } | Command::RollBack { .. } => {}
                }
            }
            pending = next;
        }
        self.schedule_evaluations(now);
        let serve = self.desired();
        self.publish_view();
        serve
    }

    /// The phase and held-clusters gauges, for the rollout (this replica's
    /// or the one it follows).
    fn gauges(&self) {
        let Some(r) = &self.rollout else { return };
        let held = r
            .targets
            .values()
            .filter(|t| t.state.wants_previous() && !matches!(t.state, ClusterState::Pinned { .. }))
            .count();
        metrics::gauge!(METRIC_HELD).set(held as f64);
        for p in PHASES {
            metrics::gauge!(METRIC_PHASE, "phase" => p).set(if p == r.phase.name() {
                1.0
            } else {
                0.0
            });
        }
    }

    fn report(&self, event: Event) {
        let (name, detail) = match &event {
            Event::Started { .. } => ("started", String::new()),
            Event::WaveStarted { wave, clusters } => {
                ("wave_started", format!("{wave}: {}", clusters.join(", ")))
            }
            Event::WavePassed { wave } => ("wave_passed", wave.clone()),
            Event::AwaitingPromotion { wave } => ("awaiting_promotion", wave.clone()),
            Event::Operator { action, by, .. } => ("operator", format!("{action} by {by}")),
            Event::ClusterRemoved { cluster } => ("cluster_removed", cluster.clone()),
            Event::ClusterRefused { cluster, message } => {
                ("cluster_refused", format!("{cluster}: {message}"))
            }
            Event::ClusterPinned { cluster, pinned } => (
                if *pinned {
                    "cluster_pinned"
                } else {
                    "cluster_unpinned"
                },
                cluster.clone(),
            ),
            Event::Completed => ("completed", String::new()),
            Event::Failed {
                failure,
                rolled_back,
            } => {
                metrics::counter!(METRIC_ROLLBACKS).increment(rolled_back.len() as u64);
                ("failed", failure.message.clone())
            }
        };
        metrics::counter!(METRIC_EVENTS, "event" => name).increment(1);
        let id = self.rollout.as_ref().map_or(0, |r| r.id);
        if name == "failed" {
            warn!(rollout = id, event = name, %detail, "rollout");
        } else {
            info!(rollout = id, event = name, %detail, "rollout");
        }
        self.audit.record(AuditEvent::Rollout { id, step: event });
    }
}

/// The collections of `to` whose version differs from `from`'s, with
/// their new version.
fn changed_collections(from: Option<&Arc<Snapshot>>, to: &Snapshot) -> BTreeMap<String, String> {
    to.collections()
        .filter(|(name, c)| from.is_none_or(|f| f.collection(name).version() != c.version()))
        .map(|(name, c)| (name.to_string(), c.version().to_owned()))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;

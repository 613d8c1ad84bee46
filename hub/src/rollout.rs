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
use meshhub_mcp::ledger::{Delivery, Outcome, PeerStatus, Role};
use meshhub_mcp::snapshot::Snapshot;
pub use meshhub_rollout::Millis;
use meshhub_rollout::{
    ClusterInfo, ClusterState, Command, Event, Input, Phase, Policy, Refused, Rejection, Rollout,
    Step, plan,
};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};

use crate::audit::{AuditEvent, AuditLog};
use crate::history::version_id;

pub mod gates;
mod gating;
pub mod persist;
pub mod routes;
pub mod shared;
pub mod spec;

use self::shared::{Decisions, Mirrored};

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

/// What `/rollout` shows.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    /// Whether a policy is configured.
    pub enabled: bool,
    /// The policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// The current (or last) rollout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
    /// This replica follows the leader's decisions (leader election): the
    /// rollout shown is the leader's, and operators' actions go to it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub following: bool,
    /// The replica whose decisions these are (with leader election).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
}

/// One cluster's snapshots in the current rollout.
#[derive(Clone, Debug)]
struct Versions {
    from: Option<Arc<Snapshot>>,
    to: Arc<Snapshot>,
    /// The collections `to` changed, with their new version, not yet ACKed
    /// by the cluster's dialer.
    unacked: BTreeMap<String, String>,
}

/// The rollout controller (see the module documentation).
#[derive(Debug)]
pub struct Controller {
    policy: Policy,
    /// The clusters the hub dials, with their labels, in configuration
    /// order.
    clusters: Vec<(String, BTreeMap<String, String>)>,
    rollout: Option<Rollout>,
    versions: HashMap<String, Versions>,
    /// What each governed group is served now, and its version id.
    serving: HashMap<String, Arc<Snapshot>>,
    serving_ids: BTreeMap<String, String>,
    /// Every governed group's newest snapshot (the last build's).
    latest: HashMap<Group, Arc<Snapshot>>,
    /// Whether this replica decides or follows another's decisions.
    mode: Mode,
    /// Shared versions this replica could not serve, already warned of.
    unresolved: BTreeSet<(String, String)>,
    /// The last refused version each agent reported, per collection.
    refusals: HashMap<(String, String), String>,
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

/// Decisions saved before a restart (or followed before this replica led),
/// with the snapshots of the versions they name.
#[derive(Debug, Default)]
pub struct Restored {
    /// The rollout.
    pub rollout: Option<Rollout>,
    /// Per cluster, the version id it was served.
    pub serving: BTreeMap<String, String>,
    /// `(cluster, version id)` → the snapshot.
    pub snapshots: shared::Snapshots,
}

/// What a group must be served now.
pub type Serve = Vec<(Group, Arc<Snapshot>)>;

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
            clusters,
            rollout: None,
            versions: HashMap::new(),
            serving: HashMap::new(),
            serving_ids: BTreeMap::new(),
            latest: HashMap::new(),
            mode: Mode::Leading,
            unresolved: BTreeSet::new(),
            refusals: HashMap::new(),
            term: 0,
            next_id: 1,
            audit,
            view,
            saved: watch::channel(None).0,
            restored: None,
            gates: None,
            next_evaluation: None,
        };
        (c, rx)
    }

    /// Continues `restored` (saved before a restart) at the first build.
    #[must_use]
    pub fn restoring(mut self, restored: Restored) -> Self {
        self.restore_from(restored);
        self
    }

    fn restore_from(&mut self, restored: Restored) {
        if let Some(r) = &restored.rollout {
            self.next_id = self.next_id.max(r.id + 1);
        }
        self.restored = Some(restored);
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

    /// The decisions to save or share, newest first (for
    /// [`persist::StateFile::run`], [`shared::SharedRollout::publish`]).
    pub fn states(&self) -> watch::Receiver<Option<Arc<Decisions>>> {
        self.saved.subscribe()
    }

    fn set_serving(&mut self, cluster: &str, snapshot: Arc<Snapshot>) {
        self.serving_ids
            .insert(cluster.to_owned(), version_id(&snapshot));
        self.serving.insert(cluster.to_owned(), snapshot);
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
        let mut serve = Serve::new();
        if let Some(restored) = self.restored.take()
            && self.resume(now, restored, latest, &mut serve)
        {
            self.publish_view();
            return serve;
        }
        let mut steps = BTreeMap::new();
        let mut versions = HashMap::new();
        let mut first = Vec::new();
        for (cluster, _) in &self.clusters {
            let Some(to) = latest.get(cluster.as_str()) else {
                continue;
            };
            let Some(from) = self.serving.get(cluster) else {
                // The first snapshot of a cluster: nothing to protect.
                first.push((cluster.clone(), to.clone()));
                continue;
            };
            if Arc::ptr_eq(from, to) || version_id(from) == version_id(to) {
                continue;
            }
            steps.insert(
                cluster.clone(),
                Step {
                    from: Some(version_id(from)),
                    to: version_id(to),
                },
            );
            versions.insert(
                cluster.clone(),
                Versions {
                    from: Some(from.clone()),
                    to: to.clone(),
                    unacked: changed_collections(Some(from), to),
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

    /// The first build after a restart with saved decisions (or after this
    /// replica took the lead): every cluster of the rollout is served what
    /// its state says (its previous or its new version), every other one
    /// the version it was served (so a change made meanwhile goes through
    /// a rollout too), as far as the snapshots are known; the others their
    /// newest. If the rollout is unfinished and the sources still produce
    /// its new versions, it goes on where it was (returns true); otherwise
    /// the caller starts a new one from what is served now, superseding it.
    fn resume(
        &mut self,
        now: Millis,
        restored: Restored,
        latest: &HashMap<Group, Arc<Snapshot>>,
        serve: &mut Serve,
    ) -> bool {
        let Restored {
            rollout,
            serving,
            snapshots,
        } = restored;
        let find = |cluster: &str, id: &str| {
            snapshots
                .get(&(cluster.to_owned(), id.to_owned()))
                .cloned()
                .or_else(|| latest.get(cluster).filter(|l| version_id(l) == id).cloned())
        };
        let finished = rollout
            .as_ref()
            .is_none_or(|r| matches!(r.phase, Phase::Completed | Phase::Superseded { .. }));
        let mut versions = HashMap::new();
        let names: Vec<String> = self.clusters.iter().map(|(c, _)| c.clone()).collect();
        for cluster in names {
            let Some(newest) = latest.get(cluster.as_str()) else {
                continue;
            };
            let mut served = newest.clone();
            let target = rollout
                .as_ref()
                .filter(|_| !finished)
                .and_then(|r| r.targets.get(&cluster));
            if let Some(t) = target {
                let from = t.step.from.as_deref().and_then(|id| find(&cluster, id));
                let to = find(&cluster, &t.step.to);
                let want = match t.state {
                    ClusterState::Held | ClusterState::Excluded | ClusterState::RolledBack => {
                        from.clone()
                    }
                    _ => to.clone(),
                };
                match (want, to) {
                    (Some(want), Some(to)) => {
                        served = want;
                        versions.insert(
                            cluster.clone(),
                            Versions {
                                // Every cluster not yet ACKed: a held one
                                // is released later and must ACK then.
                                unacked: match t.state {
                                    ClusterState::Acked { .. } => BTreeMap::new(),
                                    _ => changed_collections(from.as_ref(), &to),
                                },
                                from,
                                to,
                            },
                        );
                    }
                    _ => warn!(
                        cluster = %cluster,
                        "a version of the saved rollout is not in the history; the cluster is served its newest"
                    ),
                }
            } else if let Some(id) = serving.get(&cluster) {
                match find(&cluster, id) {
                    Some(s) => served = s,
                    None => warn!(
                        cluster = %cluster,
                        version = %id,
                        "the version the cluster was served is not in the history; it is served its newest"
                    ),
                }
            }
            if self.serving_ids.get(&cluster) != Some(&version_id(&served)) {
                self.set_serving(&cluster, served.clone());
                serve.push((Group::from(cluster.as_str()), served));
            }
        }
        let Some(rollout) = rollout else {
            return false;
        };
        let unchanged = rollout.targets.iter().all(|(c, t)| {
            latest
                .get(c.as_str())
                .is_some_and(|l| version_id(l) == t.step.to)
        });
        info!(
            rollout = rollout.id,
            phase = rollout.phase.name(),
            unchanged,
            "rollout restored"
        );
        let commands = rollout.restore();
        self.rollout = Some(rollout);
        self.versions = versions;
        if finished || !unchanged {
            return false;
        }
        serve.extend(self.carry_out(now, commands));
        true
    }

    /// Takes the lead (leader election): continues from the decisions
    /// followed so far, as a restarted hub continues from its state file.
    /// `term` marks its decisions (the elector's `transitions`). The caller
    /// then reads the ledger ([`Controller::reconcile`]): the dialers may
    /// have been ACKed before this.
    pub fn lead(&mut self, now: Millis, term: u64) -> Serve {
        self.term = term;
        let Mode::Following(mirrored) = std::mem::replace(&mut self.mode, Mode::Leading) else {
            return Serve::new();
        };
        let m = mirrored.as_deref().cloned().unwrap_or_default();
        let mut snapshots = m.snapshots;
        for (cluster, s) in &self.serving {
            if let Some(id) = self.serving_ids.get(cluster) {
                snapshots
                    .entry((cluster.clone(), id.clone()))
                    .or_insert_with(|| s.clone());
            }
        }
        info!(
            rollout = m.decisions.rollout.as_ref().map(|r| r.id),
            previous_leader = ?m.decisions.by,
            "leading the rollout: continuing from the shared decisions"
        );
        let restored = Restored {
            rollout: m.decisions.rollout,
            serving: m.decisions.serving,
            snapshots,
        };
        self.restore_from(restored);
        if self.latest.is_empty() {
            // Applied at the first build.
            self.publish_view();
            return Serve::new();
        }
        let latest = self.latest.clone();
        self.built(now, &latest)
    }

    /// Follows another replica's decisions (this one lost the lead, or
    /// never had it): its own rollout stops deciding.
    pub fn follow(&mut self, mirrored: Option<Arc<Mirrored>>) -> Serve {
        if self.leading() {
            info!("following the leader's rollout decisions");
        }
        self.mode = Mode::Following(mirrored);
        self.versions.clear();
        self.restored = None;
        self.next_evaluation = None;
        self.mirror_serve()
    }

    /// The leader's decisions changed (ignored while leading: they are this
    /// replica's own).
    pub fn mirror(&mut self, mirrored: Option<Arc<Mirrored>>) -> Serve {
        if self.leading() {
            return Serve::new();
        }
        self.follow(mirrored)
    }

    /// A follower serves each governed cluster the version the leader
    /// serves it, found among its newest builds, what it serves and its
    /// history; one it can't find keeps what it is served (warned once,
    /// counted in [`shared::METRIC_UNRESOLVED`]). A cluster the leader has
    /// not served yet gets its newest, as the leader does a first build.
    fn mirror_serve(&mut self) -> Serve {
        let Mode::Following(Some(m)) = &self.mode else {
            return Serve::new();
        };
        let m = m.clone();
        let mut serve = Serve::new();
        let mut unresolved = 0_u32;
        let names: Vec<String> = self.clusters.iter().map(|(c, _)| c.clone()).collect();
        for cluster in names {
            let Some(newest) = self.latest.get(cluster.as_str()).cloned() else {
                continue;
            };
            let want = match m.decisions.serving.get(&cluster) {
                None => Some(newest),
                Some(id) if self.serving_ids.get(&cluster) == Some(id) => continue,
                Some(id) => {
                    let found = [Some(&newest), self.serving.get(&cluster)]
                        .into_iter()
                        .flatten()
                        .find(|s| version_id(s) == *id)
                        .cloned()
                        .or_else(|| m.snapshots.get(&(cluster.clone(), id.clone())).cloned());
                    if found.is_none() {
                        unresolved += 1;
                        if self.unresolved.insert((cluster.clone(), id.clone())) {
                            warn!(cluster = %cluster, version = %id, "the leader serves a version this replica has not recorded; it keeps serving what it served");
                        }
                    }
                    found
                }
            };
            let Some(want) = want else { continue };
            if self
                .serving
                .get(&cluster)
                .is_none_or(|s| !Arc::ptr_eq(s, &want))
            {
                self.set_serving(&cluster, want.clone());
                serve.push((Group::from(cluster.as_str()), want));
            }
        }
        metrics::gauge!(shared::METRIC_UNRESOLVED).set(f64::from(unresolved));
        self.rollout = m.decisions.rollout.clone();
        self.gauges();
        self.publish_view();
        serve
    }

    /// A delivery recorded by the ledger.
    pub fn delivery(&mut self, now: Millis, d: &Delivery) -> Serve {
        // Only the hub's dialer to the cluster speaks for it.
        if d.role != Role::Source || d.peer != d.group {
            return Serve::new();
        }
        let Some(v) = self.versions.get_mut(&d.group) else {
            return Serve::new();
        };
        if v.unacked.get(&d.collection) != Some(&d.version) {
            return Serve::new();
        }
        let input = match d.outcome {
            Outcome::Ack => {
                v.unacked.remove(&d.collection);
                if !v.unacked.is_empty() {
                    return Serve::new();
                }
                Input::Acked {
                    cluster: d.group.clone(),
                    version: version_id(&v.to),
                }
            }
            Outcome::Nack => Input::Rejected {
                cluster: d.group.clone(),
                version: version_id(&v.to),
                how: Rejection::Nack,
                message: format!(
                    "{} {}: {}",
                    d.collection,
                    d.version,
                    d.message.as_deref().unwrap_or("NACKed")
                ),
            },
        };
        self.feed(now, input)
    }

    /// Deliveries were missed (the ledger's broadcast lagged): what the
    /// dialers ACKed, read from the ledger's view instead.
    pub fn reconcile(&mut self, now: Millis, peers: &[PeerStatus]) -> Serve {
        let mut serve = Serve::new();
        let clusters: Vec<String> = self.versions.keys().cloned().collect();
        for cluster in clusters {
            let Some(p) = peers
                .iter()
                .find(|p| p.role == Role::Source && p.peer == cluster && p.group == cluster)
            else {
                continue;
            };
            for (collection, c) in &p.collections {
                for (version, outcome) in [
                    (c.acked.as_ref().map(|a| &a.version), Outcome::Ack),
                    (c.nacked.as_ref().map(|n| &n.version), Outcome::Nack),
                ] {
                    let Some(version) = version else { continue };
                    let d = Delivery {
                        role: Role::Source,
                        peer: cluster.clone(),
                        node_id: p.node_id.clone(),
                        group: cluster.clone(),
                        collection: collection.clone(),
                        version: version.clone(),
                        outcome,
                        code: None,
                        message: c.nacked.as_ref().map(|n| n.message.clone()),
                    };
                    serve.extend(self.delivery(now, &d));
                }
            }
        }
        serve
    }

    /// The clusters' reports changed: what each agent holds and refused
    /// counts as its ACK or NACK (the only way this replica hears a cluster
    /// another replica dials: sharded dial-out), and a cluster of the
    /// rollout whose istiod dropped an object of its new version fails it
    /// (istiod ACKs what it drops, so only this report tells).
    pub fn reports(&mut self, now: Millis, reports: &crate::upward::Reports) -> Serve {
        let mut serve = Serve::new();
        for d in held_deliveries(&self.versions, reports, &mut self.refusals) {
            serve.extend(self.delivery(now, &d));
        }
        let mut drops = Vec::new();
        for (cluster, v) in &self.versions {
            let Some(istiod) = reports.get(cluster).and_then(|r| r.view.istiod.as_ref()) else {
                continue;
            };
            let of_new_version = istiod.dropped.iter().find(|d| {
                v.to.collection(&d.collection)
                    .keys()
                    .iter()
                    .any(|k| *k.name == *d.name && *k.version == *d.version)
            });
            if let Some(d) = of_new_version {
                drops.push(Input::Rejected {
                    cluster: cluster.clone(),
                    version: version_id(&v.to),
                    how: Rejection::Dropped,
                    message: format!(
                        "istiod dropped {} {} (version {}): {}",
                        d.collection, d.name, d.version, d.reason
                    ),
                });
            }
        }
        for input in drops {
            serve.extend(self.feed(now, input));
        }
        serve
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
                .filter(|(_, t)| t.wave == wave && t.state != ClusterState::Excluded)
                .map(|(c, _)| c.clone())
                .collect();
            let last = phase == Phase::Gating;
            let queued = self.request_gates(wave, last, clusters);
            if matches!(phase, Phase::Baking { .. }) || !queued {
                let interval = self.gates.as_ref().map_or(1_000, |l| l.interval_ms);
                self.next_evaluation = Some(now + interval);
            }
        }
        self.feed(now, Input::Tick)
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
        match (next, self.next_evaluation) {
            (Some(n), Some(e)) => Some(n.min(e)),
            (n, e) => n.or(e),
        }
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
        let r = self.rollout.as_mut().ok_or(ActionError::NoRollout)?;
        let commands = match action {
            Action::Promote => r.promote(now, cluster, by)?,
            Action::Abort => r.abort(now, cluster, by)?,
            Action::Resume => r.resume(now, cluster, by)?,
        };
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
                    Command::Report(event) => self.report(event),
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
                    Command::Release { .. } | Command::Hold { .. } | Command::RollBack { .. } => {}
                }
            }
            pending = next;
        }
        self.schedule_evaluations(now);
        let serve = self.desired();
        self.publish_view();
        serve
    }

    /// The groups whose served snapshot must change for the rollout's
    /// state: held, excluded and rolled-back clusters get their previous
    /// snapshot, the others the new one.
    fn desired(&mut self) -> Serve {
        let Some(r) = &self.rollout else {
            return Serve::new();
        };
        let mut serve = Vec::new();
        for (cluster, t) in &r.targets {
            let Some(v) = self.versions.get(cluster) else {
                continue;
            };
            let want = match t.state {
                ClusterState::Held | ClusterState::Excluded | ClusterState::RolledBack => {
                    v.from.clone()
                }
                ClusterState::Released { .. }
                | ClusterState::Acked { .. }
                | ClusterState::Failed { .. } => Some(v.to.clone()),
            };
            let Some(want) = want else { continue };
            let current = self.serving.get(cluster);
            if current.is_none_or(|s| !Arc::ptr_eq(s, &want)) {
                serve.push((cluster.clone(), want));
            }
        }
        for (cluster, want) in &serve {
            self.set_serving(cluster, want.clone());
        }
        self.gauges();
        serve
            .into_iter()
            .map(|(c, s)| (Group::from(c.as_str()), s))
            .collect()
    }

    /// The phase and held-clusters gauges, for the rollout (this replica's
    /// or the one it follows).
    fn gauges(&self) {
        let Some(r) = &self.rollout else { return };
        let held = r
            .targets
            .values()
            .filter(|t| {
                matches!(
                    t.state,
                    ClusterState::Held | ClusterState::Excluded | ClusterState::RolledBack
                )
            })
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

    fn publish_view(&self) {
        let decisions = Decisions {
            by: None,
            rollout: self.rollout.clone(),
            serving: self.serving_ids.clone(),
            term: self.term,
        };
        self.saved.send_if_modified(|saved| {
            if saved.as_deref() == Some(&decisions) {
                return false;
            }
            *saved = Some(Arc::new(decisions));
            true
        });
        let (following, leader) = match &self.mode {
            Mode::Leading => (false, None),
            Mode::Following(m) => (true, m.as_ref().and_then(|m| m.decisions.by.clone())),
        };
        self.view.send_replace(Arc::new(View {
            enabled: true,
            policy: Some(self.policy.clone()),
            rollout: self.rollout.clone(),
            following,
            leader,
        }));
    }
}

/// The decisions saved in `file`, with the snapshots of the versions they
/// name read back from `history` (blocking; at start).
pub fn restore(
    file: &persist::StateFile,
    history: &crate::history::History,
) -> Result<Option<Restored>, persist::LoadError> {
    let Some(decisions) = file.load()? else {
        return Ok(None);
    };
    let mut snapshots = shared::Snapshots::new();
    for (cluster, id) in decisions.versions() {
        let key = (cluster.to_owned(), id.to_owned());
        if snapshots.contains_key(&key) {
            continue;
        }
        match history.snapshot(cluster, id) {
            Ok(s) => {
                snapshots.insert(key, s);
            }
            Err(e) => {
                warn!(cluster = %cluster, version = %id, error = %e, "a version of the saved rollout can't be read from the history");
            }
        }
    }
    Ok(Some(Restored {
        rollout: decisions.rollout,
        serving: decisions.serving,
        snapshots,
    }))
}

/// What the agents' reports say of the rollout's collections awaiting an
/// ACK, as the deliveries the ledger would record had this replica pushed
/// them: an agent whose last ACKed change is the awaited version ACKed it;
/// one whose last
/// refused change *became* that version (`refusals`: the last refused
/// version seen per cluster and collection) NACKed it — a refusal already
/// there when first seen may be an old one (a rolled-back version resumed)
/// and is left to the ledger of the replica that dials the cluster, or to
/// the progress deadline.
fn held_deliveries(
    versions: &HashMap<String, Versions>,
    reports: &crate::upward::Reports,
    refusals: &mut HashMap<(String, String), String>,
) -> Vec<Delivery> {
    let mut out = Vec::new();
    for (cluster, report) in reports.iter() {
        for (collection, held) in &report.view.collections {
            let key = (cluster.clone(), collection.clone());
            let before = refusals.insert(key, held.refused_version.clone());
            let Some(version) = versions
                .get(cluster)
                .and_then(|v| v.unacked.get(collection))
            else {
                continue;
            };
            let newly_refused = before.is_some_and(|b| b != held.refused_version);
            // The version held may still be on its way into the cluster's
            // API (and refused there): only the one ACKed counts.
            let outcome = if held.refused_version == *version {
                if !newly_refused {
                    continue;
                }
                Outcome::Nack
            } else if held.acked_version == *version {
                Outcome::Ack
            } else {
                continue;
            };
            let prefix = format!("{version}: ");
            out.push(Delivery {
                role: Role::Source,
                peer: cluster.clone(),
                node_id: cluster.clone(),
                group: cluster.clone(),
                collection: collection.clone(),
                version: version.clone(),
                outcome,
                code: None,
                message: (outcome == Outcome::Nack).then(|| {
                    held.refused
                        .strip_prefix(&prefix)
                        .unwrap_or(&held.refused)
                        .to_owned()
                }),
            });
        }
    }
    out
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
mod tests;

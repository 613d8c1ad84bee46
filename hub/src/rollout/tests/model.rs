//! A model-based test of the serving decision and the rollout machine
//! together: seeded random sequences of events — good, bad (NACKed) and
//! dropping builds, deliveries, time, pins and unpins, operators' promote /
//! abort / resume (with and without `--cluster`), restarts from the saved
//! decisions with a full, partial or empty history (directly, or following
//! and then taking the lead), clusters removed and added by reloads —
//! checking after every step what each cluster is served, and at the end
//! that the fleet converges.
//!
//! The pipeline's part is modelled faithfully: the groups a controller
//! call names, and pin changes, go through [`meshhub_rollout::serving::decide`]
//! exactly as `Pipeline::serve_group` does; a restarted process starts
//! with nothing served; the hub's MCP source keeps one response per
//! cluster and collection awaiting its answer (a newer one waits for it,
//! and only the newest is sent then) and never sends a version again once
//! it was answered (`mcp/src/source.rs`); agents ACK good versions and
//! NACK bad ones (keeping what they hold), report a drop of a dropping
//! version's object, and report upward what they hold and their last
//! refusal (cleared by the next ACK) — which repeats a refusal the ledger
//! told already.
//!
//! Invariants, after every step:
//! 1. A cluster is never served a version it refused (NACK, or its istiod
//!    dropped an object new in it, while the version's rollout was not
//!    superseded) —
//!    unless an operator pinned it, or resumed or promoted it (which is
//!    asking for it again).
//! 2. While a rollout is rolled back, none of its clusters is served its
//!    new version, and 3. while it runs, no cluster of a later wave is
//!    served its new version before its wave — unless an operator pinned,
//!    promoted or resumed that cluster.
//! 4. A rollout never runs into its deadline waiting only for pinned
//!    clusters (a pin takes a cluster out of the waves).
//! 5. An operator's resume (or promote) of a cluster is not undone: it has
//!    no standing failure until its agent refuses again (a NACK or a drop
//!    answered after the resume) — a refusal told again (a report, a
//!    restart) is not a new one.
//!
//! And at the end: once pins are lifted, a good change reaches every
//! cluster and nothing fails, every cluster is served — and its agent
//! holds — its newest version.
//!
//! CI runs [`SEQUENCES`] sequences; `MESHHUB_MODEL_CASES=100000` runs more,
//! `MESHHUB_MODEL_SEED=<hex>` replays the sequences of a printed seed:
//!
//! ```text
//! MESHHUB_MODEL_SEED=<seed> cargo test -p meshhub --lib rollout::tests::model
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use meshhub_mcp::cache::Group;
use meshhub_mcp::ledger::{Delivery, Outcome, Role};
use meshhub_mcp::snapshot::Snapshot;
use meshhub_rollout::{ClusterState, Phase, serving};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use super::{DR, VS, dropped, holding, policy_of, snapshot, unlabelled, wave};
use crate::audit::AuditLog;
use crate::history::version_id;
use crate::rollout::shared::{Mirrored, Snapshots};
use crate::rollout::{Action, Controller, Millis, Restored, Serve};

/// Sequences CI runs.
const SEQUENCES: u32 = 1_500;
/// Events per sequence, at most.
const EVENTS: usize = 60;
/// The clusters; waves `[a]`, `[b]`, then the implicit one (`c`, `d`).
const CLUSTERS: [&str; 4] = ["a", "b", "c", "d"];

#[derive(Clone, Debug)]
enum Op {
    /// A build changing the clusters of `changed` (bit masks over
    /// [`CLUSTERS`]); `bad` ones are NACKed, `dropping` ones have an
    /// object their istiod drops.
    Build {
        changed: u8,
        bad: u8,
        dropping: u8,
    },
    /// Agents answer the next `n` pushes.
    Deliver(u8),
    /// Time passes.
    Tick(u16),
    /// Pin a cluster to one of its versions (`back` builds ago).
    Pin {
        cluster: usize,
        back: usize,
    },
    Unpin(usize),
    /// promote / abort / resume, on the whole rollout or one cluster.
    Operator {
        action: u8,
        cluster: Option<usize>,
    },
    /// The hub restarts (or another replica takes the lead: `follow`)
    /// with its saved decisions and a history holding all (2), some (1)
    /// or none (0) of the versions they name.
    Restart {
        history: u8,
        follow: bool,
    },
    /// A reload removes a cluster, or adds it back.
    Reload(usize),
    /// A cluster's agent reports upward (again: its stream reconnected)
    /// what it holds and its last refusal.
    Report(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u8..16, 0u8..16, 0u8..16).prop_map(|(changed, bad, dropping)| Op::Build {
            changed,
            bad: bad & 0b0110,
            dropping: dropping & dropping.rotate_left(1) & 0b1010,
        }),
        6 => (1u8..5).prop_map(Op::Deliver),
        3 => (0u16..30_000).prop_map(Op::Tick),
        1 => (0..4usize, 0..3usize).prop_map(|(cluster, back)| Op::Pin { cluster, back }),
        1 => (0..4usize).prop_map(Op::Unpin),
        1 => (0u8..3, proptest::option::of(0..4usize))
            .prop_map(|(action, cluster)| Op::Operator { action, cluster }),
        1 => (0u8..3, any::<bool>()).prop_map(|(history, follow)| Op::Restart { history, follow }),
        1 => (1..4usize).prop_map(Op::Reload),
        2 => (0..4usize).prop_map(Op::Report),
    ]
}

/// The modelled hub, its sources, its history and the clusters' agents.
struct Sim {
    now: Millis,
    ctl: Controller,
    term: u64,
    configured: Vec<String>,
    builds: BTreeMap<String, Vec<Arc<Snapshot>>>,
    latest: HashMap<Group, Arc<Snapshot>>,
    history: Snapshots,
    /// What the hub process serves each group (its snapshot cache).
    served: BTreeMap<String, Arc<Snapshot>>,
    /// The hub's MCP source, per cluster and collection.
    streams: BTreeMap<(String, &'static str), Stream>,
    /// The responses awaiting an answer, in the order they were sent.
    pending: VecDeque<(String, &'static str)>,
    /// What each agent holds (its last ACKed version).
    holds: BTreeMap<String, String>,
    /// Each agent's report of the virtual services: the version it last
    /// ACKed and the one it last refused (cleared by an ACK).
    reported: BTreeMap<String, (String, String)>,
    /// Clusters an operator resumed (or promoted) whose agent has refused
    /// nothing since: they must not have a standing failure.
    resumed: BTreeSet<String>,
    pins: BTreeMap<String, Arc<Snapshot>>,
    /// Versions each cluster refused while not pinned.
    refused: BTreeMap<String, BTreeSet<String>>,
    /// `(rollout, cluster)` an operator promoted or resumed.
    forced: BTreeSet<(u64, String)>,
    log: Vec<String>,
}

fn controller(clusters: &[String]) -> Controller {
    let policy = policy_of(vec![wave("canary", &["a"]), wave("second", &["b"])]);
    let names: Vec<&str> = clusters.iter().map(String::as_str).collect();
    Controller::new(policy, unlabelled(&names), AuditLog::default()).0
}

/// The hub's MCP source for one cluster and collection: one response
/// awaits its answer at a time, and a version answered is not sent again.
#[derive(Default)]
struct Stream {
    /// The response awaiting its answer.
    awaiting: Option<Arc<Snapshot>>,
    /// The version of the collection last answered.
    answered: Option<String>,
    /// The version of the collection last ACKed (the ledger's view).
    acked: Option<String>,
}

/// The collections of every snapshot (only the virtual services change).
const COLLECTIONS: [&str; 2] = [VS, DR];

/// `cluster`'s agent's answer to `collection` of `snapshot`.
fn answer(cluster: &str, snapshot: &Snapshot, collection: &str, outcome: Outcome) -> Delivery {
    Delivery {
        role: Role::Source,
        peer: cluster.to_owned(),
        node_id: cluster.to_owned(),
        group: cluster.to_owned(),
        collection: collection.into(),
        version: snapshot.collection(collection).version().to_owned(),
        outcome,
        code: None,
        message: (outcome == Outcome::Nack).then(|| "bad route".to_owned()),
    }
}

fn content(snapshot: &Snapshot) -> String {
    snapshot
        .collection(VS)
        .keys()
        .first()
        .map(|k| k.version.to_string())
        .unwrap_or_default()
}

impl Sim {
    fn new() -> Self {
        let configured: Vec<String> = CLUSTERS.iter().map(|c| (*c).to_owned()).collect();
        let mut sim = Self {
            now: 1_000,
            ctl: controller(&configured),
            term: 1,
            configured,
            builds: BTreeMap::new(),
            latest: HashMap::new(),
            history: Snapshots::new(),
            served: BTreeMap::new(),
            streams: BTreeMap::new(),
            pending: VecDeque::new(),
            holds: BTreeMap::new(),
            reported: BTreeMap::new(),
            resumed: BTreeSet::new(),
            pins: BTreeMap::new(),
            refused: BTreeMap::new(),
            forced: BTreeSet::new(),
            log: Vec::new(),
        };
        sim.build(0b1111, 0, 0);
        sim
    }

    fn build(&mut self, changed: u8, bad: u8, dropping: u8) {
        for (i, c) in CLUSTERS.iter().enumerate() {
            if changed & (1 << i) == 0 || !self.configured.iter().any(|x| x == c) {
                continue;
            }
            let builds = self.builds.entry((*c).to_owned()).or_default();
            let mut version = format!("{c}{}", builds.len() + 1);
            if bad & (1 << i) != 0 {
                version.push_str("-bad");
            } else if dropping & (1 << i) != 0 {
                version.push_str("-drop");
            }
            let s = snapshot(&version);
            builds.push(s.clone());
            self.history
                .insert(((*c).to_owned(), version_id(&s)), s.clone());
            self.latest.insert(Group::from(*c), s);
        }
        let serve = self.ctl.built(self.now, &self.latest);
        self.apply(serve);
    }

    /// The pipeline: every group a controller call named goes through the
    /// one serving decision.
    fn apply(&mut self, serve: Serve) {
        let mut serve = serve;
        // The ledger (`acks_already_in`): a collection of a cluster sent
        // its new version (again) was ACKed already if its stream's last
        // ACK is of that version.
        for _ in 0..3 {
            let released = self.ctl.take_released();
            if released.is_empty() {
                break;
            }
            for c in released {
                let Some(to) = self.ctl.versions.get(&c).map(|v| v.to.clone()) else {
                    continue;
                };
                for collection in COLLECTIONS {
                    let acked = self
                        .streams
                        .get(&(c.clone(), collection))
                        .and_then(|st| st.acked.as_deref());
                    if acked != Some(to.collection(collection).version()) {
                        continue;
                    }
                    let d = answer(&c, &to, collection, Outcome::Ack);
                    serve.extend(self.ctl.delivery(self.now, &d));
                }
            }
        }
        let unavailable: Vec<String> = self.ctl.unavailable_clusters().cloned().collect();
        for g in serve.iter().map(|(g, _)| g.to_string()).chain(unavailable) {
            self.serve_group(&g);
        }
    }

    fn serve_group(&mut self, cluster: &str) {
        if !self.configured.iter().any(|c| c == cluster) {
            return;
        }
        let decided = serving::decide(
            self.pins.get(cluster).cloned(),
            self.ctl.governs(cluster),
            || self.ctl.decision(cluster),
            || self.latest.get(cluster).cloned(),
        );
        let s = match decided {
            serving::Served::Serve(s, _) => s,
            serving::Served::Keep => return,
            serving::Served::Withdraw => {
                self.served.remove(cluster);
                return;
            }
        };
        if self.served.get(cluster).is_some_and(|x| Arc::ptr_eq(x, &s)) {
            return;
        }
        self.served.insert(cluster.to_owned(), s);
        for collection in COLLECTIONS {
            self.send(cluster, collection);
        }
    }

    /// The MCP source sends `cluster` what it is served of `collection`,
    /// unless a response awaits its answer or that version was answered.
    fn send(&mut self, cluster: &str, collection: &'static str) {
        let Some(s) = self.served.get(cluster) else {
            return;
        };
        let stream = self
            .streams
            .entry((cluster.to_owned(), collection))
            .or_default();
        let of = s.collection(collection);
        if stream.awaiting.is_some() || stream.answered.as_deref() == Some(of.version()) {
            return;
        }
        stream.awaiting = Some(s.clone());
        self.pending.push_back((cluster.to_owned(), collection));
    }

    fn deliver(&mut self, n: u8) {
        for _ in 0..n {
            let Some((cluster, collection)) = self.pending.pop_front() else {
                return;
            };
            let key = (cluster.clone(), collection);
            let Some(s) = self.streams.get_mut(&key).and_then(|st| st.awaiting.take()) else {
                continue;
            };
            let version = content(&s);
            let id = version_id(&s);
            let pinned = self.pins.contains_key(&cluster);
            // Only the changing collection is refused.
            let outcome = if version.ends_with("-bad") && collection == VS {
                if !pinned {
                    self.refused
                        .entry(cluster.clone())
                        .or_default()
                        .insert(id.clone());
                }
                self.resumed.remove(&cluster);
                Outcome::Nack
            } else {
                Outcome::Ack
            };
            let vs = s.collection(VS).version().to_owned();
            if collection == VS {
                let report = self.reported.entry(cluster.clone()).or_default();
                match outcome {
                    Outcome::Ack => {
                        self.holds.insert(cluster.clone(), id.clone());
                        *report = (vs, String::new());
                    }
                    Outcome::Nack => report.1 = vs,
                }
            }
            if let Some(st) = self.streams.get_mut(&key) {
                let answered = s.collection(collection).version().to_owned();
                if outcome == Outcome::Ack {
                    st.acked = Some(answered.clone());
                }
                st.answered = Some(answered);
            }
            let d = answer(&cluster, &s, collection, outcome);
            let serve = self.ctl.delivery(self.now, &d);
            self.apply(serve);
            if collection == VS && outcome == Outcome::Ack && version.ends_with("-drop") {
                // A drop refuses the version of a rollout that sent it, also
                // one that stopped or completed since (that cluster is rolled
                // back); one superseded meanwhile gave way to a newer
                // decision.
                let during = self.ctl.rollout.as_ref().is_some_and(|r| {
                    !matches!(r.phase, Phase::Superseded { .. })
                        && r.targets.get(&cluster).is_some_and(|t| t.step.to == id)
                });
                if !pinned && during {
                    self.refused.entry(cluster.clone()).or_default().insert(id);
                }
                self.resumed.remove(&cluster);
                let serve = self.ctl.reports(self.now, &dropped(&cluster, &version));
                self.apply(serve);
            }
            // The newest of the collection, now that nothing awaits.
            self.send(&cluster, collection);
        }
    }

    /// `cluster`'s agent reports what it holds and its last refusal.
    fn report(&mut self, cluster: usize) {
        let c = CLUSTERS[cluster];
        if !self.configured.iter().any(|x| x == c) {
            return;
        }
        let (held, refused) = self.reported.get(c).cloned().unwrap_or_default();
        let serve = self.ctl.reports(self.now, &holding(c, &held, &refused));
        self.apply(serve);
    }

    fn tick(&mut self, ms: u16) {
        self.now += Millis::from(ms);
        let serve = self.ctl.tick(self.now);
        self.apply(serve);
    }

    fn pin(&mut self, cluster: usize, back: usize) {
        let c = CLUSTERS[cluster];
        let Some(builds) = self.builds.get(c) else {
            return;
        };
        let Some(s) = builds.iter().rev().nth(back).cloned() else {
            return;
        };
        if !self.configured.iter().any(|x| x == c) {
            return;
        }
        self.pins.insert(c.to_owned(), s);
        self.pins_changed(c);
    }

    fn unpin(&mut self, cluster: usize) {
        let c = CLUSTERS[cluster];
        if self.pins.remove(c).is_some() {
            self.pins_changed(c);
        }
    }

    /// The pipeline's `apply_pins`: the rollout learns the pins, then the
    /// group and whatever the rollout changed are served again.
    fn pins_changed(&mut self, cluster: &str) {
        let pinned = self.pins.keys().cloned().collect();
        let serve = self.ctl.set_pins(self.now, pinned);
        self.serve_group(cluster);
        self.apply(serve);
    }

    fn operator(&mut self, action: u8, cluster: Option<usize>) {
        let action = [Action::Promote, Action::Abort, Action::Resume][usize::from(action)];
        let cluster = cluster.map(|i| CLUSTERS[i]);
        let id = self.ctl.rollout.as_ref().map(|r| r.id);
        let targets: Vec<String> = self
            .ctl
            .rollout
            .as_ref()
            .map(|r| r.targets.keys().cloned().collect())
            .unwrap_or_default();
        let Ok(serve) = self.ctl.act(self.now, action, cluster, "model") else {
            return;
        };
        if let Some(id) = id {
            let affected: Vec<String> = match cluster {
                Some(c) => vec![c.to_owned()],
                None => targets,
            };
            for c in affected {
                if action == Action::Resume || (action == Action::Promote && cluster.is_some()) {
                    // Asking for the refused version again.
                    self.refused.remove(&c);
                    self.resumed.insert(c.clone());
                }
                if action != Action::Abort {
                    self.forced.insert((id, c));
                }
            }
        }
        self.apply(serve);
    }

    fn restart(&mut self, history: u8, follow: bool) {
        let decisions = self
            .ctl
            .states()
            .borrow()
            .as_deref()
            .cloned()
            .unwrap_or_default();
        let mut snapshots = Snapshots::new();
        for (i, (c, v)) in decisions.versions().enumerate() {
            let keep = match history {
                0 => false,
                1 => i % 2 == 0,
                _ => true,
            };
            let key = (c.to_owned(), v.to_owned());
            if let (true, Some(s)) = (keep, self.history.get(&key)) {
                snapshots.insert(key, s.clone());
            }
        }
        // A new process: nothing served, no push answered (new streams).
        self.served.clear();
        self.streams.clear();
        self.pending.clear();
        let mut ctl = controller(&self.configured);
        let pinned = self.pins.keys().cloned().collect();
        if follow {
            ctl = ctl.following();
            ctl.follow(Some(Arc::new(Mirrored {
                decisions,
                snapshots,
            })));
            let serve = ctl.built(self.now, &self.latest);
            self.ctl = ctl;
            self.apply(serve);
            self.term += 1;
            let serve = self.ctl.lead(self.now, self.term);
            self.apply(serve);
        } else {
            self.ctl = ctl.restoring(Restored {
                rollout: decisions.rollout,
                serving: decisions.serving,
                snapshots,
                standing: decisions.standing,
                counted_refusals: decisions.counted_refusals,
            });
            let serve = self.ctl.built(self.now, &self.latest);
            self.apply(serve);
        }
        let serve = self.ctl.set_pins(self.now, pinned);
        self.apply(serve);
        for c in self.pins.keys().cloned().collect::<Vec<_>>() {
            self.serve_group(&c);
        }
    }

    fn reload(&mut self, cluster: usize) {
        let c = CLUSTERS[cluster].to_owned();
        if let Some(i) = self.configured.iter().position(|x| *x == c) {
            self.configured.remove(i);
            self.served.remove(&c);
            self.latest.remove(c.as_str());
            self.pending.retain(|(x, _)| *x != c);
            self.streams.retain(|(x, _), _| *x != c);
            // Its pin stays (stored by cluster name), as in the hub.
            self.refused.remove(&c);
            self.holds.remove(&c);
            self.reported.remove(&c);
            self.resumed.remove(&c);
        } else {
            self.configured.push(c.clone());
            self.configured
                .sort_by_key(|x| CLUSTERS.iter().position(|c| c == x));
        }
        let clusters = unlabelled(
            &self
                .configured
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        let serve = self.ctl.set_clusters(self.now, clusters);
        self.apply(serve);
        if self.configured.contains(&c) {
            self.build(1 << cluster, 0, 0);
        } else {
            let serve = self.ctl.built(self.now, &self.latest);
            self.apply(serve);
        }
    }

    fn step(&mut self, op: &Op) {
        self.log.push(format!("{op:?}"));
        match *op {
            Op::Build {
                changed,
                bad,
                dropping,
            } => self.build(changed, bad, dropping),
            Op::Deliver(n) => self.deliver(n),
            Op::Tick(ms) => self.tick(ms),
            Op::Pin { cluster, back } => self.pin(cluster, back),
            Op::Unpin(c) => self.unpin(c),
            Op::Operator { action, cluster } => self.operator(action, cluster),
            Op::Restart { history, follow } => self.restart(history, follow),
            Op::Reload(c) => self.reload(c),
            Op::Report(c) => self.report(c),
        }
    }

    fn check(&self) -> Result<(), String> {
        let standing = &self.ctl.standing;
        if let Some(c) = self.resumed.iter().find(|c| standing.contains_key(*c)) {
            return Err(format!(
                "{c} was resumed by an operator and refused nothing since, yet has a standing failure {:?}; {}",
                standing[c],
                self.state()
            ));
        }
        for (c, s) in &self.served {
            if self.pins.contains_key(c) {
                continue;
            }
            let id = version_id(s);
            if self.refused.get(c).is_some_and(|r| r.contains(&id)) {
                return Err(format!(
                    "{c} is served {} ({id}), a version it refused; {}",
                    content(s),
                    self.state()
                ));
            }
        }
        let Some(r) = &self.ctl.rollout else {
            return Ok(());
        };
        if let Phase::RolledBack { failure } = &r.phase
            && failure.cause == meshhub_rollout::Cause::Deadline
        {
            let waited: Vec<&String> = r
                .targets
                .iter()
                .filter(|(_, t)| {
                    t.wave == r.wave
                        && matches!(t.state, ClusterState::Held | ClusterState::RolledBack)
                })
                .map(|(c, _)| c)
                .collect();
            if !waited.is_empty() && waited.iter().all(|c| self.pins.contains_key(*c)) {
                return Err(format!(
                    "rollout {} ran into its deadline waiting for pinned clusters {waited:?}",
                    r.id
                ));
            }
        }
        for (c, t) in &r.targets {
            let Some(s) = self.served.get(c) else {
                continue;
            };
            let forced = self.forced.contains(&(r.id, c.clone()));
            if self.pins.contains_key(c) || version_id(s) != t.step.to || forced {
                continue;
            }
            if matches!(r.phase, Phase::RolledBack { .. }) {
                return Err(format!(
                    "{c} is served {} although rollout {} rolled back",
                    content(s),
                    r.id
                ));
            }
            let running = matches!(
                r.phase,
                Phase::Updating | Phase::Baking { .. } | Phase::Gating | Phase::AwaitingPromotion
            );
            if running && t.wave > r.wave {
                return Err(format!(
                    "{c} (wave {}) is served {} while rollout {} is in wave {}",
                    t.wave,
                    content(s),
                    r.id,
                    r.wave
                ));
            }
        }
        Ok(())
    }

    fn state(&self) -> String {
        format!(
            "rollout {:?}; decided {:?}; unavailable {:?}",
            self.ctl.rollout.as_ref().map(|r| (
                r.id,
                r.phase.name(),
                r.targets
                    .iter()
                    .map(|(c, t)| (c.clone(), t.state.clone()))
                    .collect::<Vec<(String, ClusterState)>>()
            )),
            self.ctl.serving_ids,
            self.ctl.unavailable
        )
    }

    /// Pins lifted, a good change everywhere, then answers and time until
    /// nothing moves: every cluster must be on its newest version.
    fn converge(&mut self) -> Result<(), String> {
        for c in self.pins.keys().cloned().collect::<Vec<_>>() {
            self.pins.remove(&c);
            self.pins_changed(&c);
        }
        self.build(0b1111, 0, 0);
        for _ in 0..100 {
            self.deliver(u8::MAX);
            self.tick(5_000);
            let done = self
                .ctl
                .rollout
                .as_ref()
                .is_none_or(|r| r.phase == Phase::Completed);
            if done && self.pending.is_empty() {
                break;
            }
        }
        for c in &self.configured {
            let newest = version_id(&self.latest[c.as_str()]);
            let served = self.served.get(c).map(|s| version_id(s));
            if served.as_deref() != Some(newest.as_str()) || self.holds.get(c) != Some(&newest) {
                return Err(format!(
                    "{c} did not converge: served {served:?}, holds {:?}, newest {newest}; rollout {:?}",
                    self.holds.get(c),
                    self.ctl.rollout.as_ref().map(|r| (
                        r.id,
                        r.phase.name(),
                        r.targets
                            .iter()
                            .map(|(c, t)| (c.clone(), t.state.clone()))
                            .collect::<Vec<(String, ClusterState)>>()
                    ))
                ));
            }
        }
        Ok(())
    }
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut sim = Sim::new();
    // Everything starts served and held.
    sim.deliver(u8::MAX);
    for op in ops {
        sim.step(op);
        sim.check()
            .map_err(|e| TestCaseError::fail(format!("{e}\nafter: {:#?}", sim.log)))?;
    }
    sim.converge()
        .map_err(|e| TestCaseError::fail(format!("{e}\nafter: {:#?}", sim.log)))
}

fn seed() -> [u8; 32] {
    let text = std::env::var("MESHHUB_MODEL_SEED").ok();
    let mut seed = [0_u8; 32];
    match text {
        Some(t) => {
            let bytes = hex::decode(t.trim()).expect("MESHHUB_MODEL_SEED: 64 hex digits");
            seed.copy_from_slice(&bytes);
        }
        None => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos();
            for (i, b) in seed.iter_mut().enumerate() {
                *b = (t >> ((i % 16) * 8)) as u8 ^ (i as u8).wrapping_mul(131);
            }
        }
    }
    seed
}

#[test]
fn no_cluster_is_served_what_it_refused_or_what_its_wave_has_not_reached_and_the_fleet_converges() {
    let cases = std::env::var("MESHHUB_MODEL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SEQUENCES);
    let seed = seed();
    println!(
        "model seed: {} ({cases} sequences; replay with MESHHUB_MODEL_SEED)",
        hex::encode(seed)
    );
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    let result = runner.run(&proptest::collection::vec(op(), 1..EVENTS), |ops| run(&ops));
    if let Err(e) = result {
        panic!("model seed {}: {e}", hex::encode(seed));
    }
}

mod regressions;

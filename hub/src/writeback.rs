//! Status write-back (`statusWriteBack` on a Kubernetes source): each Istio
//! object the source reads gets its distribution written into its own
//! `status`, as Istio does with `conditions` and `validationMessages`: a
//! `Distributed` condition (`True`: "ACKed by 3/3 clusters"; `False`: the
//! NACK, the DROPPED reason or the rejection, naming the cluster;
//! `Unknown` while on its way) and the analysis messages about it.
//!
//! One writer task per such source, owned by the app. The source reports
//! every object it sees ([`Feed`]: its generation and live status); the
//! writer follows the pipeline's status, the snapshots, the ledger's ACKs
//! and NACKs and the clusters' reports, works out each object's status
//! ([`desired`]) and writes it only when it differs from the live one and
//! from what it last wrote. Writes are server-side applies to the status
//! subresource under meshhub's field manager, one per object at a time,
//! coalesced (a newer status replaces a queued one), rate-limited (`qps`,
//! `burst`), at most [`MAX_IN_FLIGHT`] at once, and retried with backoff
//! ([`queue`]); an object deleted meanwhile is not an error. One replica
//! writes: the leader, which dials the clusters; with sharded dial-out the
//! holder of `<leaseName>-rollout`, which hears the clusters other
//! replicas dial through their agents' reports ([`reported`]). On shutdown, writes under way are dropped: the next start works
//! the statuses out again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use meshhub_kube::error::error_text;
use meshhub_kube::status::gateway::FleetStatus;
use meshhub_kube::status::{Applied, IstioStatus};
use meshhub_mcp::cache::SnapshotCache;
use meshhub_mcp::ledger::Ledger;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::clusters::{Agents, remote_views};
use crate::leader::LeaderStatus;
use crate::pipeline::Status;
use crate::source::kube::{Feed, Seen};
use crate::store::ObjectKey;

pub mod basis;
pub mod desired;
pub mod gateway;
pub mod heard;
pub mod queue;
pub mod reported;

pub use crate::source::kube::spec::write_back::WriteBackSpec;

use basis::Basis;
use desired::Standing;
use heard::Heard;
use queue::Queue;

/// Status writes under way at once.
pub const MAX_IN_FLIGHT: usize = 8;
/// How long changes are gathered before the statuses are worked out again.
const SETTLE: Duration = Duration::from_millis(250);
/// The statuses are worked out again at least this often (a peer that
/// connects or is sent a version says nothing to the ledger's ACK feed).
const REFRESH: Duration = Duration::from_secs(5);
/// After the hub is ready, how long the writer waits for every remote
/// cluster to be heard from before it writes (so that a restart does not
/// turn every object `Unknown` and back).
const STARTUP_GRACE: Duration = Duration::from_secs(30);

/// What the writer reads of the rest of the hub.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// The pipeline's status (served and rejected objects, analysis).
    pub status: watch::Receiver<Arc<Status>>,
    /// The published snapshots.
    pub cache: SnapshotCache,
    /// The ACK/NACK ledger.
    pub ledger: Ledger,
    /// The remote clusters.
    pub agents: watch::Receiver<Agents>,
    /// The clusters' upward reports.
    pub reports: watch::Receiver<crate::upward::Reports>,
    /// Whether this replica dials the clusters (which of them, sharded).
    pub leader: watch::Receiver<LeaderStatus>,
    /// Whether this replica writes the statuses: the leader; with sharded
    /// dial-out the holder of `<leaseName>-rollout`.
    pub writes: watch::Receiver<LeaderStatus>,
}

/// Whether an input changed (`ok`), else marks it as ended.
fn follow(ok: bool, open: &mut bool) -> bool {
    *open &= ok;
    ok
}

/// A status the writer wants on an object: Istio's `IstioStatus`, or
/// meshhub's part of a Gateway API object's status.
#[derive(Clone, Debug, PartialEq)]
pub enum Wanted {
    /// An Istio object's.
    Istio(IstioStatus),
    /// A Gateway API object's.
    Gateway(FleetStatus),
}

impl Wanted {
    /// Whether `self` and `other` say the same (but for times).
    fn same_as(&self, other: &Wanted) -> bool {
        match (self, other) {
            (Self::Istio(a), Self::Istio(b)) => a.same_as(b),
            (Self::Gateway(a), Self::Gateway(b)) => a.same_as(b),
            _ => false,
        }
    }

    /// What `seen` holds live of what the writer writes.
    fn live(seen: &Seen) -> Option<Wanted> {
        match &seen.gateway {
            Some(g) => g.ours.clone().map(Self::Gateway),
            None => seen.status.clone().map(Self::Istio),
        }
    }
}

/// One object the writer follows.
#[derive(Debug)]
struct Tracked {
    seen: Seen,
    /// Per cluster, the object version it was last seen to hold.
    held: HashMap<String, Arc<str>>,
    /// What the writer last wrote.
    written: Option<Written>,
}

#[derive(Debug)]
struct Written {
    status: Wanted,
    /// The resourceVersion the write made.
    resource_version: Option<String>,
    /// The source saw that write.
    confirmed: bool,
}

type Write = (Arc<str>, Result<Applied, kube::Error>, Duration);

/// The writer of one source's statuses.
pub struct Writer {
    source: Arc<str>,
    client: kube::Client,
    inputs: Inputs,
    feed: mpsc::Receiver<Feed>,
    objects: HashMap<Arc<str>, Tracked>,
    queue: Queue<Arc<str>, Wanted>,
    limiter: DefaultDirectRateLimiter,
    /// When the pipeline was first seen ready.
    ready_at: Option<Instant>,
    /// Consecutive failed writes (logged once per run of failures).
    failing: u64,
    /// What the statuses were last worked out from.
    basis: Option<Basis>,
    /// The objects the source saw since the last pass.
    dirty: HashSet<Arc<str>>,
    /// What enters a status of the clusters' reports.
    heard: Heard,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("source", &self.source)
            .field("objects", &self.objects.len())
            .field("queued", &self.queue.len())
            .finish_non_exhaustive()
    }
}

impl Writer {
    /// The writer of source `source` (its client, its feed).
    pub fn new(
        source: &str,
        spec: &WriteBackSpec,
        client: kube::Client,
        inputs: Inputs,
        feed: mpsc::Receiver<Feed>,
    ) -> Self {
        let quota = Quota::per_second(spec.qps).allow_burst(spec.burst);
        Self {
            source: Arc::from(source),
            client,
            inputs,
            feed,
            objects: HashMap::new(),
            queue: Queue::default(),
            limiter: RateLimiter::direct(quota),
            ready_at: None,
            failing: 0,
            basis: None,
            dirty: HashSet::new(),
            heard: Heard::default(),
        }
    }

    /// Runs until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut deliveries = self.inputs.ledger.deliveries();
        let mut status = self.inputs.status.clone();
        let mut reports = self.inputs.reports.clone();
        let mut agents = self.inputs.agents.clone();
        let mut leader = self.inputs.leader.clone();
        let mut writer = self.inputs.writes.clone();
        let mut writes: FuturesUnordered<BoxFuture<'static, Write>> = FuturesUnordered::new();
        let mut settle_at: Option<Instant> = Some(Instant::now());
        let mut refresh = tokio::time::interval(REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut feed_open = true;
        // Whether each input may still change (a sender gone never does:
        // its branch would be ready forever).
        let mut open = [true; 6];
        let source = self.source.clone();
        loop {
            let now = Instant::now();
            let can_write = writes.len() < MAX_IN_FLIGHT && self.queue.has_ready(now);
            let retry_at = self
                .queue
                .next_due()
                .filter(|_| writes.len() < MAX_IN_FLIGHT);
            let settle = async {
                match settle_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let retry = async {
                match retry_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let mut changed = false;
            tokio::select! {
                _ = shutdown.cancelled() => break,
                ev = self.feed.recv(), if feed_open => match ev {
                    Some(ev) => {
                        self.absorb(ev);
                        changed = true;
                    }
                    None => feed_open = false,
                },
                r = status.changed(), if open[0] => changed = follow(r.is_ok(), &mut open[0]),
                r = reports.changed(), if open[1] => changed = follow(r.is_ok(), &mut open[1]),
                r = agents.changed(), if open[2] => changed = follow(r.is_ok(), &mut open[2]),
                // Without leader election its sender is gone from the start.
                r = leader.changed(), if open[3] => changed = follow(r.is_ok(), &mut open[3]),
                r = writer.changed(), if open[5] => changed = follow(r.is_ok(), &mut open[5]),
                r = deliveries.recv(), if open[4] => {
                    let closed = matches!(r, Err(tokio::sync::broadcast::error::RecvError::Closed));
                    changed = follow(!closed, &mut open[4]);
                }
                _ = refresh.tick() => changed = true,
                _ = settle => {
                    settle_at = None;
                    if let Some(later) = self.work_out() {
                        settle_at = Some(later);
                    }
                }
                _ = retry => {}
                _ = self.limiter.until_ready(), if can_write => {
                    if let Some((unit, status)) = self.queue.pop(Instant::now()) {
                        match self.write(unit.clone(), status) {
                            Some(w) => writes.push(w),
                            None => self.queue.done(&unit, true, Instant::now()),
                        }
                    }
                }
                Some((unit, result, took)) = writes.next() => self.finished(unit, result, took),
            }
            if changed {
                // Sooner than a startup wait: every cluster may be heard now.
                let soon = Instant::now() + SETTLE;
                settle_at = Some(settle_at.map_or(soon, |at| at.min(soon)));
            }
            metrics::gauge!("meshhub_status_writeback_queue_depth", "source" => source.to_string())
                .set(self.queue.len() as f64);
            metrics::gauge!("meshhub_status_writeback_in_flight", "source" => source.to_string())
                .set(writes.len() as f64);
        }
        debug!(
            dropped = self.queue.len() + writes.len(),
            "status writer stopped"
        );
    }

    /// Takes in what the source saw.
    fn absorb(&mut self, ev: Feed) {
        match ev {
            Feed::Gone(unit) => {
                self.objects.remove(&unit);
                self.dirty.remove(&unit);
                self.queue.remove(&unit);
            }
            Feed::Seen(seen) => {
                let seen = *seen;
                match self.objects.get_mut(&seen.unit) {
                    Some(t) => {
                        if let Some(w) = &mut t.written {
                            if w.resource_version.is_some()
                                && w.resource_version == seen.resource_version
                            {
                                w.confirmed = true;
                            } else if w.confirmed
                                && !Wanted::live(&seen).is_some_and(|s| s.same_as(&w.status))
                            {
                                // Someone else wrote it since: ours is not
                                // there any more.
                                t.written = None;
                            }
                        }
                        self.dirty.insert(seen.unit.clone());
                        t.seen = seen;
                    }
                    None => {
                        self.dirty.insert(seen.unit.clone());
                        self.objects.insert(
                            seen.unit.clone(),
                            Tracked {
                                seen,
                                held: HashMap::new(),
                                written: None,
                            },
                        );
                    }
                }
                metrics::gauge!("meshhub_status_writeback_objects", "source" => self.source.to_string())
                    .set(self.objects.len() as f64);
            }
        }
    }

    /// Works out the objects' statuses and queues what differs: every
    /// object's when what enters a status changed since the last pass
    /// ([`Basis`]), else only those the source saw since (its own writes
    /// come back so), else none. Returns
    /// when to look again if writing must wait (startup).
    fn work_out(&mut self) -> Option<Instant> {
        let writes = self.inputs.writes.borrow().clone();
        if writes.enabled && !writes.is_leader {
            self.queue.clear();
            self.basis = None;
            // Not kept while another replica writes (they hold every
            // cluster's report of the time).
            self.heard = Heard::default();
            return None;
        }
        let leader = self.inputs.leader.borrow().clone();
        let status = self.inputs.status.borrow().clone();
        if !status.ready {
            return None;
        }
        let agents = self.inputs.agents.borrow().clone();
        let ledger = self.inputs.ledger.view();
        self.heard.update(&self.inputs.reports.borrow());
        let mut remotes = remote_views(
            &agents,
            &leader,
            &ledger,
            self.heard.views(),
            crate::upward::peer_name,
        );
        // Clusters another replica dials (sharded): their agents' reports.
        reported::fill_from_reports(&mut remotes, |cluster, collection| {
            let snapshot = self.inputs.cache.snapshot(cluster)?;
            Some(snapshot.collection(collection).version().to_owned())
        });
        let now = Instant::now();
        let ready_at = *self.ready_at.get_or_insert(now);
        let heard = remotes.iter().all(|r| {
            r.collections
                .values()
                .any(|c| c.acked.is_some() || c.nacked.is_some())
        });
        if !heard && now < ready_at + STARTUP_GRACE {
            return Some(ready_at + STARTUP_GRACE);
        }
        let basis = Basis::of(
            &status,
            &remotes,
            |c| self.inputs.cache.snapshot(c),
            |c| self.heard.gateway_shared(c),
        );
        // The same basis: only the objects seen since can have changed.
        let all = self.basis.as_ref() != Some(&basis);
        if !all && self.dirty.is_empty() {
            return None;
        }
        let dirty = std::mem::take(&mut self.dirty);
        let started = Instant::now();
        let snapshots: HashMap<&str, _> = remotes
            .iter()
            .map(|r| (r.cluster.as_str(), self.inputs.cache.snapshot(&r.cluster)))
            .collect();
        let remotes: HashMap<&str, _> = remotes.iter().map(|r| (r.cluster.as_str(), r)).collect();
        let messages = desired::messages_by_object(&status.analysis);
        let rejected: HashMap<&str, &Vec<String>> = status
            .rejected
            .iter()
            .filter_map(|r| {
                let o = r.origin.as_ref()?;
                (o.source == self.source).then_some((&*o.unit, &r.reasons))
            })
            .collect();
        let time = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        // Gateway API objects: each cluster's word of its controllers,
        // and the collections a cluster is withheld (no CRD: no word).
        let gateway_words: HashMap<&str, Option<&meshhub_api::upward::GatewayApiStatusView>> =
            remotes
                .keys()
                .map(|c| (*c, self.heard.gateway(c)))
                .collect();
        let withheld: HashSet<(&str, &str)> = status
            .withheld
            .iter()
            .map(|w| (w.cluster.as_str(), w.collection.as_str()))
            .collect();
        let visit = self
            .objects
            .iter_mut()
            .filter(|(unit, _)| all || dirty.contains(*unit));
        for (unit, t) in visit {
            let generation = t.seen.generation;
            let name = t.seen.mcp_name();
            let key = ObjectKey {
                collection: t.seen.collection.clone(),
                name: Arc::from(name.as_str()),
            };
            let served = match (status.served.get(&key), status.served.origin(&key)) {
                (Some(object), Some(origin))
                    if origin.source == self.source && origin.unit == *unit =>
                {
                    if object.resource_version.as_deref() != t.seen.delivered.as_deref() {
                        continue; // the pipeline has not built this definition yet
                    }
                    Ok(object)
                }
                (Some(_), Some(origin)) => Err((
                    "Ignored",
                    format!("another definition of it is served: {origin}"),
                )),
                _ => match rejected.get(&**unit) {
                    Some(reasons) => Err((
                        "Rejected",
                        format!("refused by meshhub's validation: {}", reasons.join("; ")),
                    )),
                    // Not through the pipeline yet.
                    None => continue,
                },
            };
            let wanted = if let Some(g) = &t.seen.gateway {
                let before = match t.written.as_ref().map(|w| &w.status) {
                    Some(Wanted::Gateway(f)) => Some(f),
                    _ => g.ours.as_ref(),
                };
                Wanted::Gateway(match served {
                    Ok(object) => {
                        let words = object
                            .groups
                            .iter()
                            .filter(|c| !withheld.contains(&(&***c, &*key.collection)))
                            .filter_map(|c| Some((c.to_string(), *gateway_words.get(&**c)?)))
                            .collect();
                        gateway::fleet_status(
                            g.shape,
                            &g.parent_refs,
                            &key.collection,
                            &name,
                            &object.resource.version,
                            &words,
                            generation,
                            before,
                            &time,
                        )
                    }
                    Err((reason, why)) => gateway::not_served(
                        g.shape,
                        &g.parent_refs,
                        reason,
                        &why,
                        generation,
                        before,
                        &time,
                    ),
                })
            } else {
                let condition = match served {
                    Ok(object) => {
                        let version = object.resource.version.clone();
                        let mut standings = BTreeMap::new();
                        for g in object.groups.iter() {
                            let Some(remote) = remotes.get(&**g) else {
                                continue; // a group no agent is dialed for
                            };
                            let snapshot = snapshots.get(&**g).cloned().flatten();
                            let s = desired::standing(
                                remote,
                                snapshot.as_deref(),
                                &key.collection,
                                &name,
                                &version,
                                t.held.get(&**g).map(|v| &**v),
                            );
                            if s == Standing::Acked {
                                t.held.insert(g.to_string(), version.clone());
                            }
                            standings.insert(g.to_string(), s);
                        }
                        desired::distributed(&standings, generation)
                    }
                    Err((reason, why)) => desired::not_served(reason, &why, generation),
                };
                let kind = &t.seen.resource.kind;
                let messages = messages
                    .get(&format!("{kind} {name}"))
                    .map(|m| m.iter().cloned().collect())
                    .unwrap_or_default();
                let before = match t.written.as_ref().map(|w| &w.status) {
                    Some(Wanted::Istio(s)) => Some(s),
                    _ => t.seen.status.as_ref(),
                };
                Wanted::Istio(desired::status(
                    condition, messages, generation, before, &time,
                ))
            };
            let live = Wanted::live(&t.seen);
            let same = |s: Option<&Wanted>| s.is_some_and(|s| s.same_as(&wanted));
            if same(t.written.as_ref().map(|w| &w.status))
                || same(live.as_ref()) && t.written.is_none()
            {
                self.queue.remove(unit);
            } else if !same(self.queue.waiting(unit)) && !same(self.queue.in_flight(unit)) {
                self.queue.push(unit.clone(), wanted);
            } else if same(self.queue.in_flight(unit)) {
                self.queue.remove(unit);
            }
        }
        self.basis = Some(basis);
        let scope = if all { "all" } else { "seen" };
        metrics::histogram!("meshhub_status_writeback_work_out_seconds", "source" => self.source.to_string(), "scope" => scope)
            .record(started.elapsed().as_secs_f64());
        None
    }

    /// The write of `status` to `unit`'s object (`None`: it is gone).
    fn write(&self, unit: Arc<str>, status: Wanted) -> Option<BoxFuture<'static, Write>> {
        let t = self.objects.get(&unit)?;
        let client = self.client.clone();
        let resource = t.seen.resource.clone();
        let namespace = t.seen.namespace.clone();
        let name = t.seen.name.clone();
        Some(Box::pin(async move {
            let started = Instant::now();
            let result = match &status {
                Wanted::Istio(s) => {
                    meshhub_kube::status::apply(client, &resource, namespace.as_deref(), &name, s)
                        .await
                }
                Wanted::Gateway(f) => {
                    meshhub_kube::status::gateway::write(
                        client,
                        &resource,
                        namespace.as_deref(),
                        &name,
                        f,
                    )
                    .await
                }
            };
            (unit, result, started.elapsed())
        }))
    }

    /// A write ended.
    fn finished(&mut self, unit: Arc<str>, result: Result<Applied, kube::Error>, took: Duration) {
        let source = self.source.to_string();
        metrics::histogram!("meshhub_status_writeback_write_seconds", "source" => source.clone())
            .record(took.as_secs_f64());
        let now = Instant::now();
        let written = self.queue.in_flight(&unit).cloned();
        match result {
            Ok(Applied::Written(resource_version)) => {
                metrics::counter!("meshhub_status_writeback_writes_total", "source" => source, "result" => "written").increment(1);
                if self.failing > 0 {
                    info!(failures = self.failing, "status writes succeed again");
                    self.failing = 0;
                }
                if let (Some(t), Some(status)) = (self.objects.get_mut(&unit), written) {
                    t.written = Some(Written {
                        status,
                        resource_version,
                        confirmed: false,
                    });
                }
                self.queue.done(&unit, true, now);
            }
            Ok(Applied::Gone) => {
                metrics::counter!("meshhub_status_writeback_writes_total", "source" => source, "result" => "gone").increment(1);
                debug!(object = %unit, "object gone before its status was written");
                self.queue.done(&unit, true, now);
            }
            Err(e) => {
                metrics::counter!("meshhub_status_writeback_errors_total", "source" => source)
                    .increment(1);
                if self.failing == 0 {
                    warn!(object = %unit, error = %error_text(&e), "status write failed; retrying with backoff");
                } else {
                    debug!(object = %unit, error = %error_text(&e), "status write failed");
                }
                self.failing += 1;
                self.queue.done(&unit, false, now);
            }
        }
    }
}

//! Leader election for the dial-out role: several hub replicas serve the
//! consumers that dial in, but only one at a time dials the sink agents.
//!
//! The replicas share one `coordination.k8s.io/v1` Lease. The [`Elector`]
//! is its only client in this process and the single writer of
//! [`LeaderStatus`]; [`crate::clusters::run`] follows that and runs the
//! dialers only while this replica leads.
//!
//! The rules are client-go's: a lease is taken when it is free (no holder)
//! or expired; expiry is judged by **when this replica saw the record
//! change** (its `resourceVersion`) plus `leaseDurationSeconds`, on the
//! local monotonic clock, so clock skew between replicas does not matter.
//! Every write is a replace at the `resourceVersion` read (optimistic
//! concurrency: of two replicas racing, one gets a conflict). The leader
//! renews every `retryPeriod` and gives up (stops its dialers) when it
//! could not renew for `renewDeadline`, which is shorter than the lease, so
//! it stops pushing before anyone else may start. On graceful shutdown the
//! leader releases the lease (no holder, one second) so that another
//! replica takes over at its next try instead of after the lease expires.
//!
//! The decision is pure ([`decide`], [`Observer`], [`must_step_down`]);
//! [`Elector::run`] only does the API calls around it.
//!
//! With `shards`, the same rules hold per shard: [`shards::ShardElector`]
//! replaces the one lease by one per shard plus one membership lease per
//! replica, and each replica dials only the clusters of its shards.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use meshhub_kube::error_text;
use meshhub_mcp::ledger::At;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub mod shards;
pub mod spec;

pub use shards::{ShardElector, ShardsStatus};
pub use spec::LeaderElectionSpec;

/// The election as `/status` shows it (`leader`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LeaderStatus {
    /// Whether leader election is on (off: this replica always dials).
    pub enabled: bool,
    /// This replica's identity.
    pub identity: Option<String>,
    /// The Lease, `namespace/name`.
    pub lease: Option<String>,
    /// Whether this replica holds the lease (and dials the agents).
    pub is_leader: bool,
    /// The holder last seen (this replica or another one).
    pub holder: Option<String>,
    /// When this replica last became leader or stopped being it.
    pub since: Option<At>,
    /// How often this replica became leader or lost it.
    pub transitions: u64,
    /// The Lease's `leaseTransitions` as last read or written: the
    /// leadership term, equal on every replica, higher for every new
    /// holder. Decisions shared between replicas carry it (fencing).
    #[serde(default)]
    pub term: u64,
    /// The last failed call to the API server (cleared by a success).
    pub last_error: Option<String>,
    /// Sharded dial-out (`leaderElection.shards`): the shards, their
    /// holders and the ones this replica dials. `is_leader` then means
    /// "holds at least one shard".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<ShardsStatus>,
}

impl LeaderStatus {
    /// Leader election off: the replica dials, as a single hub does.
    pub fn disabled() -> Self {
        Self::default()
    }

    /// Whether this replica should run its dialers (some of them, with
    /// shards).
    pub fn dials(&self) -> bool {
        !self.enabled || self.is_leader
    }

    /// Whether this replica dials `cluster`: always without election, when
    /// it leads with one lease, when it holds the cluster's shard with
    /// shards.
    pub fn dials_cluster(&self, cluster: &str) -> bool {
        match &self.shards {
            Some(shards) if self.enabled => shards.dials(cluster),
            _ => self.dials(),
        }
    }
}

/// What the election needs from a Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// `holderIdentity` (`None` or empty: free).
    pub holder: Option<String>,
    /// `leaseDurationSeconds`.
    pub duration: Duration,
    /// `metadata.resourceVersion`: changes with every write.
    pub version: String,
    /// `leaseTransitions`: the term.
    pub term: u64,
}

impl LeaseRecord {
    /// The record of `lease`.
    pub fn of(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        Self {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            duration: Duration::from_secs(
                spec.and_then(|s| s.lease_duration_seconds)
                    .unwrap_or(0)
                    .max(0)
                    .unsigned_abs()
                    .into(),
            ),
            version: lease.metadata.resource_version.clone().unwrap_or_default(),
            term: spec
                .and_then(|s| s.lease_transitions)
                .unwrap_or(0)
                .max(0)
                .unsigned_abs()
                .into(),
        }
    }
}

/// Remembers when the lease record was first seen in its current version:
/// the start of its validity on this replica's clock.
#[derive(Debug, Default)]
pub struct Observer {
    seen: Option<(String, Instant)>,
}

impl Observer {
    /// Records the version read at `now`; returns when that version was
    /// first seen.
    pub fn observe(&mut self, version: &str, now: Instant) -> Instant {
        match &self.seen {
            Some((v, at)) if v == version => *at,
            _ => {
                self.seen = Some((version.to_owned(), now));
                now
            }
        }
    }
}

/// What to do with the lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// There is none: create it, held by us.
    Create,
    /// Free or expired: take it.
    Acquire,
    /// Ours: renew it.
    Renew,
    /// Another replica's, valid until `until` unless renewed.
    Wait {
        /// The holder.
        holder: String,
        /// When it expires if it is not renewed.
        until: Instant,
    },
}

/// The decision for replica `me` given the lease (if any), when its current
/// version was first seen, and `now`.
pub fn decide(
    lease: Option<&LeaseRecord>,
    me: &str,
    observed_at: Instant,
    now: Instant,
) -> Decision {
    let Some(lease) = lease else {
        return Decision::Create;
    };
    match &lease.holder {
        None => Decision::Acquire,
        Some(h) if h == me => Decision::Renew,
        Some(h) => {
            let until = observed_at + lease.duration;
            if now >= until {
                Decision::Acquire
            } else {
                Decision::Wait {
                    holder: h.clone(),
                    until,
                }
            }
        }
    }
}

/// Whether a leader whose last successful renewal was at `last_renewal`
/// must give up at `now`.
pub fn must_step_down(last_renewal: Instant, renew_deadline: Duration, now: Instant) -> bool {
    now.saturating_duration_since(last_renewal) >= renew_deadline
}

/// The lease spec written by `me` when it takes the lease over from
/// `previous` (or creates it).
pub fn acquired_spec(previous: Option<&LeaseSpec>, me: &str, duration: Duration) -> LeaseSpec {
    let now = micro_now();
    let changed_hands = previous
        .and_then(|p| p.holder_identity.as_deref())
        .is_none_or(|h| h != me);
    let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(me.to_owned()),
        lease_duration_seconds: Some(seconds(duration)),
        acquire_time: Some(now.clone()),
        renew_time: Some(now),
        lease_transitions: Some(if previous.is_some() && changed_hands {
            transitions.saturating_add(1)
        } else {
            transitions
        }),
        ..previous.cloned().unwrap_or_default()
    }
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX).max(1)
}

fn micro_now() -> MicroTime {
    MicroTime(Timestamp::try_from(SystemTime::now()).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// How one round ended (with the lease's term as read or written).
enum Round {
    /// We hold the lease (created, acquired or renewed).
    Leading(u64),
    /// Someone else does (or nobody, after a lost race).
    Following(Option<String>, u64),
}

/// The term of a lease spec.
fn term_of(spec: Option<&LeaseSpec>) -> u64 {
    spec.and_then(|s| s.lease_transitions)
        .unwrap_or(0)
        .max(0)
        .unsigned_abs()
        .into()
}

/// The election loop of this replica.
pub struct Elector {
    api: Api<Lease>,
    spec: LeaderElectionSpec,
    status: watch::Sender<LeaderStatus>,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// Runs the election `spec` asks for — one Lease ([`Elector`]) or shards
/// ([`ShardElector`]) — over `client` on `tasks` until `shutdown`, in a span
/// naming its Lease; returns its status.
pub fn spawn(
    spec: &LeaderElectionSpec,
    client: kube::Client,
    tasks: &tokio_util::task::TaskTracker,
    shutdown: CancellationToken,
) -> watch::Receiver<LeaderStatus> {
    use tracing::Instrument as _;
    let span = tracing::info_span!(
        "leader",
        leader.identity = %spec.identity,
        lease.name = %spec.lease_name,
        lease.namespace = %spec.namespace,
        shards = ?spec.shards
    );
    match spec.shards {
        Some(count) => {
            let (elector, status) = ShardElector::new(spec, count, client);
            tasks.spawn(elector.run(shutdown).instrument(span));
            status
        }
        None => {
            let (elector, status) = Elector::new(spec, client);
            tasks.spawn(elector.run(shutdown).instrument(span));
            status
        }
    }
}

impl Elector {
    /// An elector over `client` (the app's client of the spec's
    /// connection), and the reader of its status.
    pub fn new(
        spec: &LeaderElectionSpec,
        client: kube::Client,
    ) -> (Self, watch::Receiver<LeaderStatus>) {
        let (status, rx) = watch::channel(LeaderStatus {
            enabled: true,
            identity: Some(spec.identity.clone()),
            lease: Some(format!("{}/{}", spec.namespace, spec.lease_name)),
            ..LeaderStatus::default()
        });
        metrics::gauge!("meshhub_leader").set(0.0);
        let api = Api::namespaced(client, &spec.namespace);
        (
            Self {
                api,
                spec: spec.clone(),
                status,
            },
            rx,
        )
    }

    /// Campaigns, leads and renews until `shutdown`; then releases the
    /// lease if it holds it.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut observer = Observer::default();
        let mut last_renewal: Option<Instant> = None;
        loop {
            let started = Instant::now();
            // A leader's call may take until its renew deadline; a
            // follower's, until the next round is due anyway.
            let budget = match last_renewal {
                Some(at) => (at + self.spec.renew_deadline).saturating_duration_since(started),
                None => self.spec.renew_deadline,
            };
            let round = tokio::select! {
                () = shutdown.cancelled() => break,
                r = tokio::time::timeout(budget, self.round(&mut observer, started)) => {
                    r.unwrap_or_else(|_| Err("the API server did not answer in time".to_owned()))
                }
            };
            match round {
                Ok(Round::Leading(term)) => {
                    last_renewal = Some(started);
                    self.lead(term);
                }
                Ok(Round::Following(holder, term)) => {
                    last_renewal = None;
                    self.follow(holder, Some(term));
                }
                Err(e) => {
                    self.status.send_modify(|s| s.last_error = Some(e.clone()));
                    if let Some(at) = last_renewal {
                        if must_step_down(at, self.spec.renew_deadline, Instant::now()) {
                            warn!(error = %e, renew.deadline = ?self.spec.renew_deadline, "can't renew the lease; giving up the leadership");
                            last_renewal = None;
                            self.follow(None, None);
                        } else {
                            warn!(error = %e, "can't renew the lease; retrying");
                        }
                    } else {
                        warn!(error = %e, "can't read or take the lease; retrying");
                    }
                }
            }
            let next = started + self.spec.retry_period;
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(next) => {}
            }
        }
        if self.status.borrow().is_leader {
            self.follow(None, None);
            // Bounded: shutdown must not hang on an unreachable API server.
            match tokio::time::timeout(self.spec.renew_deadline, self.release()).await {
                Ok(Ok(true)) => info!("lease released; another replica can take over at once"),
                Ok(Ok(false)) => debug!("the lease was not ours any more"),
                Ok(Err(e)) => warn!(error = %e, "can't release the lease; it expires by itself"),
                Err(_) => warn!("releasing the lease timed out; it expires by itself"),
            }
        }
    }

    /// One read (and maybe one write) of the lease.
    async fn round(&self, observer: &mut Observer, now: Instant) -> Result<Round, String> {
        let me = self.spec.identity.as_str();
        let name = self.spec.lease_name.as_str();
        let lease = self.api.get_opt(name).await.map_err(|e| error_text(&e))?;
        let record = lease.as_ref().map(LeaseRecord::of);
        let read_term = record.as_ref().map_or(0, |r| r.term);
        let observed_at = record
            .as_ref()
            .map_or(now, |r| observer.observe(&r.version, now));
        match decide(record.as_ref(), me, observed_at, now) {
            Decision::Create => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        namespace: Some(self.spec.namespace.clone()),
                        labels: Some(meshhub_kube::object::own_labels()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(acquired_spec(None, me, self.spec.lease_duration)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(l) => Ok(Round::Leading(term_of(l.spec.as_ref()))),
                    // Another replica created it first.
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        Ok(Round::Following(None, read_term))
                    }
                    Err(e) => Err(error_text(&e)),
                }
            }
            Decision::Acquire | Decision::Renew => {
                let mut lease = lease.unwrap_or_default();
                let spec = match lease.spec.take() {
                    Some(mut spec)
                        if record.as_ref().and_then(|r| r.holder.as_deref()) == Some(me) =>
                    {
                        spec.renew_time = Some(micro_now());
                        spec.lease_duration_seconds = Some(seconds(self.spec.lease_duration));
                        spec
                    }
                    previous => acquired_spec(previous.as_ref(), me, self.spec.lease_duration),
                };
                lease.spec = Some(spec);
                // `lease` carries the resourceVersion read: a concurrent
                // write makes this a conflict, not a silent overwrite.
                match self.api.replace(name, &PostParams::default(), &lease).await {
                    Ok(l) => Ok(Round::Leading(term_of(l.spec.as_ref()))),
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        Ok(Round::Following(record.and_then(|r| r.holder), read_term))
                    }
                    Err(e) => Err(error_text(&e)),
                }
            }
            Decision::Wait { holder, .. } => Ok(Round::Following(Some(holder), read_term)),
        }
    }

    /// Gives the lease up: no holder, the shortest duration. Returns
    /// whether it was ours.
    async fn release(&self) -> Result<bool, String> {
        let name = self.spec.lease_name.as_str();
        let Some(mut lease) = self.api.get_opt(name).await.map_err(|e| error_text(&e))? else {
            return Ok(false);
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(false);
        };
        if spec.holder_identity.as_deref() != Some(self.spec.identity.as_str()) {
            return Ok(false);
        }
        let now = micro_now();
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        self.api
            .replace(name, &PostParams::default(), &lease)
            .await
            .map_err(|e| error_text(&e))?;
        Ok(true)
    }

    fn lead(&self, term: u64) {
        let me = self.spec.identity.clone();
        let became = self.status.send_if_modified(|s| {
            let became = !s.is_leader || s.term != term;
            s.term = term;
            if became {
                s.is_leader = true;
                s.since = Some(At(SystemTime::now()));
                s.transitions += 1;
            }
            s.holder = Some(me.clone());
            s.last_error = None;
            became
        });
        if became {
            metrics::gauge!("meshhub_leader").set(1.0);
            metrics::counter!("meshhub_leader_transitions_total", "event" => "acquired")
                .increment(1);
            info!(leader.identity = %me, lease.name = %self.spec.lease_name, lease.namespace = %self.spec.namespace, "became the leader (of the dial-out, or of the rollout: lease.name says)");
        }
    }

    fn follow(&self, holder: Option<String>, term: Option<u64>) {
        let lost = self.status.send_if_modified(|s| {
            let lost = s.is_leader;
            if lost {
                s.is_leader = false;
                s.since = Some(At(SystemTime::now()));
                s.transitions += 1;
            }
            let new_term = term.is_some_and(|t| t != s.term);
            if let Some(t) = term {
                s.term = t;
            }
            let changed = lost || new_term || s.holder != holder || s.last_error.is_some();
            s.holder.clone_from(&holder);
            s.last_error = None;
            changed
        });
        if lost {
            metrics::gauge!("meshhub_leader").set(0.0);
            metrics::counter!("meshhub_leader_transitions_total", "event" => "lost").increment(1);
            info!(leader.identity = %self.spec.identity, lease.name = %self.spec.lease_name, leader.holder = ?holder, "not the leader any more (lease.name says of what)");
        }
    }
}

#[cfg(test)]
mod tests;

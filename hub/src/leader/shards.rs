//! Sharded dial-out (`leaderElection.shards`): the clusters are split into
//! S shards by a stable hash of their names ([`plan::shard_of`]); each
//! shard is one `coordination.k8s.io/v1` Lease (`<leaseName>-shard-<i>`),
//! and each replica dials the clusters of the shards it holds.
//!
//! Every replica also holds a membership Lease of its own
//! (`<leaseName>-member-<hash of its identity>`). Each round (every
//! `retryPeriod`) a replica renews it, lists the group's Leases (one call,
//! by label), takes as live the members whose lease changed within its
//! duration on this replica's clock (the same rule as [`super::decide`]),
//! computes the plan of [`plan::plan`] (at most ⌈S / live replicas⌉ each,
//! keeping valid holdings) and acts on its own part: it renews the shards
//! planned for it that it holds, takes those that are free or expired, and
//! gives up (stops dialing, then releases) those planned for another.
//!
//! A shard this replica could not renew for `renewDeadline` is dropped from
//! what it dials at once, before any other replica may take it (the lease
//! outlives the deadline): two replicas dial one cluster for at most the
//! time between the new holder's take-over and the old holder's next
//! round. On graceful shutdown the replica releases its shards and its
//! membership, so the others take over at their next round.
//!
//! [`ShardElector`] is the only client of these Leases in this process and
//! the single writer of the [`LeaderStatus`] the dialer owner follows.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::SystemTime;

use futures::future::join_all;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use meshhub_api::status::ShardView;
use meshhub_kube::error_text;
use meshhub_mcp::ledger::At;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{
    Decision, LeaderElectionSpec, LeaderStatus, LeaseRecord, Observer, acquired_spec, decide,
    micro_now, must_step_down, seconds,
};

pub mod plan;

pub use plan::shard_of;

/// The label every lease of a sharded group carries: the group's
/// `leaseName`.
pub const GROUP_LABEL: &str = "meshhub.io/dial-out";
/// The label telling a shard's lease (`shard`) from a replica's
/// membership (`member`).
pub const ROLE_LABEL: &str = "meshhub.io/lease-role";

/// A member Lease nobody renewed for this many lease durations belongs to
/// a replica that is gone for good (identities are pod names: a replaced
/// pod never comes back) and is deleted, so the group does not grow with
/// every restart of the Deployment.
const STALE_MEMBER_LEASES: u32 = 20;

/// The sharded dial-out as `/status` shows it (`leader.shards`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ShardsStatus {
    /// How many shards there are.
    pub count: u32,
    /// The live replicas seen in the last round (sorted).
    pub members: Vec<String>,
    /// The shards this replica holds and dials.
    pub held: BTreeSet<u32>,
    /// Every shard and its holder, as last read (this replica's own
    /// holdings as it knows them).
    pub shards: Vec<ShardView>,
}

impl ShardsStatus {
    /// Whether this replica dials `cluster`.
    pub fn dials(&self, cluster: &str) -> bool {
        self.held.contains(&shard_of(cluster, self.count))
    }
}

/// The name of shard `i`'s lease.
pub fn shard_lease(lease_name: &str, i: u32) -> String {
    format!("{lease_name}-shard-{i}")
}

/// The name of `identity`'s membership lease.
pub fn member_lease(lease_name: &str, identity: &str) -> String {
    format!("{lease_name}-member-{:016x}", plan::fnv1a(identity))
}

/// What one round read and did.
#[derive(Default)]
struct Round {
    members: Vec<String>,
    holders: Vec<Option<String>>,
    /// The first failed call, if any (the others were still made).
    error: Option<String>,
}

/// The sharded election of this replica.
pub struct ShardElector {
    api: Api<Lease>,
    spec: LeaderElectionSpec,
    count: u32,
    status: watch::Sender<LeaderStatus>,
}

impl std::fmt::Debug for ShardElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardElector")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl ShardElector {
    /// An elector of `count` shards over `client`, and the reader of its
    /// status.
    pub fn new(
        spec: &LeaderElectionSpec,
        count: u32,
        client: kube::Client,
    ) -> (Self, watch::Receiver<LeaderStatus>) {
        let (status, rx) = watch::channel(LeaderStatus {
            enabled: true,
            identity: Some(spec.identity.clone()),
            lease: Some(format!("{}/{}", spec.namespace, spec.lease_name)),
            shards: Some(ShardsStatus {
                count,
                shards: (0..count)
                    .map(|shard| ShardView {
                        shard,
                        holder: None,
                        clusters: 0,
                    })
                    .collect(),
                ..ShardsStatus::default()
            }),
            ..LeaderStatus::default()
        });
        for shard in 0..count {
            metrics::gauge!("meshhub_shard_held", "shard" => shard.to_string()).set(0.0);
        }
        let api = Api::namespaced(client, &spec.namespace);
        (
            Self {
                api,
                spec: spec.clone(),
                count,
                status,
            },
            rx,
        )
    }

    /// Campaigns, holds and renews until `shutdown`; then releases its
    /// shards and its membership.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut observers: HashMap<String, Observer> = HashMap::new();
        // Shard → when this replica last renewed it.
        let mut held: BTreeMap<u32, Instant> = BTreeMap::new();
        loop {
            let started = Instant::now();
            // A round may take until the first renew deadline of a held
            // shard (or a whole deadline when none is held).
            let budget = held.values().min().map_or(self.spec.renew_deadline, |at| {
                (*at + self.spec.renew_deadline).saturating_duration_since(started)
            });
            let round = tokio::select! {
                () = shutdown.cancelled() => break,
                r = tokio::time::timeout(budget, self.round(&mut observers, &mut held, started)) => r,
            };
            let round = round.unwrap_or_else(|_| Round {
                error: Some("the API server did not answer in time".to_owned()),
                ..Round::default()
            });
            // Stop dialing what could not be renewed in time, before any
            // other replica may take it.
            let now = Instant::now();
            held.retain(|shard, at| {
                let keep = !must_step_down(*at, self.spec.renew_deadline, now);
                if !keep {
                    warn!(shard, renew.deadline = ?self.spec.renew_deadline, "can't renew the shard's lease; giving it up");
                }
                keep
            });
            self.publish(&held, Some(round));
            let next = started + self.spec.retry_period;
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(next) => {}
            }
        }
        let mine: Vec<u32> = held.keys().copied().collect();
        held.clear();
        self.publish(&held, None);
        // Bounded: shutdown must not hang on an unreachable API server.
        match tokio::time::timeout(self.spec.renew_deadline, self.release_all(&mine)).await {
            Ok(Ok(())) => info!(
                shards = mine.len(),
                "shards and membership released; the other replicas take over at once"
            ),
            Ok(Err(e)) => warn!(error = %e, "can't release the shards; they expire by themselves"),
            Err(_) => warn!("releasing the shards timed out; they expire by themselves"),
        }
    }

    /// One round: renew the membership, read the group, act on this
    /// replica's part of the plan.
    async fn round(
        &self,
        observers: &mut HashMap<String, Observer>,
        held: &mut BTreeMap<u32, Instant>,
        now: Instant,
    ) -> Round {
        let me = self.spec.identity.as_str();
        let mut round = Round::default();
        let list = match self
            .api
            .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={}", self.spec.lease_name)))
            .await
        {
            Ok(l) => l.items,
            Err(e) => {
                round.error = Some(error_text(&e));
                return round;
            }
        };
        let by_name: BTreeMap<String, Lease> = list
            .into_iter()
            .filter_map(|l| l.metadata.name.clone().map(|n| (n, l)))
            .collect();
        // Leases deleted meanwhile are forgotten.
        observers.retain(|name, _| by_name.contains_key(name));

        // Membership: ours renewed (or created), the others' judged live
        // on our clock.
        let member_name = member_lease(&self.spec.lease_name, me);
        if let Err(e) = self
            .write(&member_name, "member", by_name.get(&member_name), true)
            .await
        {
            round.error.get_or_insert(e);
        }
        let mut members: BTreeSet<String> = BTreeSet::from([me.to_owned()]);
        for (name, lease) in &by_name {
            if role(lease) != Some("member") || *name == member_name {
                continue;
            }
            let record = LeaseRecord::of(lease);
            let observed_at = observers
                .entry(name.clone())
                .or_default()
                .observe(&record.version, now);
            match decide(Some(&record), me, observed_at, now) {
                Decision::Wait { holder, .. } => {
                    members.insert(holder);
                }
                _ if now.duration_since(observed_at)
                    >= self.spec.lease_duration * STALE_MEMBER_LEASES =>
                {
                    self.forget(name, &record.version).await;
                }
                _ => {}
            }
        }
        let members: Vec<String> = members.into_iter().collect();

        // The shards: who validly holds each.
        let mut holders: BTreeMap<u32, String> = BTreeMap::new();
        let mut decisions = Vec::with_capacity(self.count as usize);
        for shard in 0..self.count {
            let name = shard_lease(&self.spec.lease_name, shard);
            let lease = by_name.get(&name);
            let record = lease.map(LeaseRecord::of);
            let observed_at = record.as_ref().map_or(now, |r| {
                observers
                    .entry(name.clone())
                    .or_default()
                    .observe(&r.version, now)
            });
            let decision = decide(record.as_ref(), me, observed_at, now);
            match &decision {
                Decision::Renew => {
                    holders.insert(shard, me.to_owned());
                }
                Decision::Wait { holder, .. } => {
                    holders.insert(shard, holder.clone());
                }
                Decision::Create | Decision::Acquire => {}
            }
            decisions.push((shard, name, decision));
        }
        let planned = plan::plan(self.count, &members, &holders);

        // Give up first what is planned for another: stop dialing it, then
        // release it.
        let give_up: Vec<u32> = holders
            .iter()
            .filter(|(s, h)| *h == me && planned[**s as usize].as_deref() != Some(me))
            .map(|(s, _)| *s)
            .collect();
        if !give_up.is_empty() {
            for s in &give_up {
                held.remove(s);
                holders.remove(s);
            }
            self.publish(held, None);
            info!(shards = ?give_up, members = members.len(), "rebalancing: giving shards up to other replicas");
            let releases = give_up.iter().map(|s| {
                let name = shard_lease(&self.spec.lease_name, *s);
                let lease = by_name.get(&name).cloned();
                async move { self.release(&name, lease).await }
            });
            for r in join_all(releases).await {
                if let Err(e) = r {
                    round.error.get_or_insert(e);
                }
            }
        }

        // Renew or take what is planned for us.
        let by_name = &by_name;
        let writes = decisions
            .iter()
            .filter(|(s, _, d)| {
                planned[*s as usize].as_deref() == Some(me)
                    && matches!(d, Decision::Renew | Decision::Acquire | Decision::Create)
            })
            .map(|(s, name, _)| async move {
                (
                    *s,
                    self.write(name, "shard", by_name.get(name), false).await,
                )
            });
        for (shard, result) in join_all(writes).await {
            match result {
                Ok(true) => {
                    held.insert(shard, now);
                    holders.insert(shard, me.to_owned());
                }
                // Lost a race: another replica wrote first.
                Ok(false) => {
                    held.remove(&shard);
                    holders.remove(&shard);
                }
                Err(e) => {
                    round.error.get_or_insert(e);
                }
            }
        }
        // A shard held before but now another's (or not planned): dropped.
        held.retain(|s, _| holders.get(s).map(String::as_str) == Some(me));
        round.members = members;
        round.holders = (0..self.count).map(|s| holders.get(&s).cloned()).collect();
        round
    }

    /// Creates, takes or renews the lease `name` (read as `current`) for
    /// this replica. `Ok(false)`: another replica wrote it first.
    async fn write(
        &self,
        name: &str,
        role_value: &str,
        current: Option<&Lease>,
        member: bool,
    ) -> Result<bool, String> {
        let me = self.spec.identity.as_str();
        let duration = self.spec.lease_duration;
        let result = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        namespace: Some(self.spec.namespace.clone()),
                        labels: Some(self.labels(role_value)),
                        ..ObjectMeta::default()
                    },
                    spec: Some(acquired_spec(None, me, duration)),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(lease) => {
                let mut lease = lease.clone();
                let ours = LeaseRecord::of(&lease).holder.as_deref() == Some(me);
                let spec = match lease.spec.take() {
                    Some(mut spec) if ours || member => {
                        spec.holder_identity = Some(me.to_owned());
                        spec.renew_time = Some(micro_now());
                        spec.lease_duration_seconds = Some(seconds(duration));
                        spec
                    }
                    previous => acquired_spec(previous.as_ref(), me, duration),
                };
                lease.spec = Some(spec);
                // At the resourceVersion read: a concurrent write is a
                // conflict, not an overwrite.
                self.api.replace(name, &PostParams::default(), &lease).await
            }
        };
        match result {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(error_text(&e)),
        }
    }

    /// Releases the lease `name` (read as `current`) if it is ours: no
    /// holder, the shortest duration.
    async fn release(&self, name: &str, current: Option<Lease>) -> Result<(), String> {
        let lease = match current {
            Some(l) => Some(l),
            None => self.api.get_opt(name).await.map_err(|e| error_text(&e))?,
        };
        let Some(mut lease) = lease else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.spec.identity.as_str()) {
            return Ok(());
        }
        let now = micro_now();
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        match self.api.replace(name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            // Changed since read: not ours any more.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(error_text(&e)),
        }
    }

    /// Releases `shards` and this replica's membership (read afresh).
    async fn release_all(&self, shards: &[u32]) -> Result<(), String> {
        let names: Vec<String> = shards
            .iter()
            .map(|s| shard_lease(&self.spec.lease_name, *s))
            .collect();
        let results = join_all(names.iter().map(|n| self.release(n, None))).await;
        results.into_iter().collect::<Result<(), String>>()?;
        // The membership is this replica's alone: deleted, not left behind
        // (the next pod has another identity).
        let member = member_lease(&self.spec.lease_name, &self.spec.identity);
        match self.api.delete(&member, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(error_text(&e)),
        }
    }

    /// Deletes the stale member Lease `name` at `version` (not if it was
    /// renewed meanwhile: the precondition fails); a failure is logged and
    /// tried again next round.
    async fn forget(&self, name: &str, version: &str) {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(version.to_owned()),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(name, &params).await {
            Ok(_) => info!(lease = %name, "deleted the membership of a replica gone for good"),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                warn!(lease = %name, error = %error_text(&e), "can't delete a stale membership")
            }
        }
    }

    fn labels(&self, role_value: &str) -> BTreeMap<String, String> {
        let mut labels = meshhub_kube::object::own_labels();
        labels.insert(GROUP_LABEL.to_owned(), self.spec.lease_name.clone());
        labels.insert(ROLE_LABEL.to_owned(), role_value.to_owned());
        labels
    }

    /// Publishes what this replica holds (and, after a round, what it
    /// read), counting transitions.
    fn publish(&self, held: &BTreeMap<u32, Instant>, round: Option<Round>) {
        let me = self.spec.identity.clone();
        let now: BTreeSet<u32> = held.keys().copied().collect();
        self.status.send_if_modified(|s| {
            let Some(shards) = s.shards.as_mut() else {
                return false;
            };
            let before = shards.clone();
            let last_error = s.last_error.clone();
            let gained: Vec<u32> = now.difference(&shards.held).copied().collect();
            let lost: Vec<u32> = shards.held.difference(&now).copied().collect();
            for shard in &gained {
                metrics::gauge!("meshhub_shard_held", "shard" => shard.to_string()).set(1.0);
                metrics::counter!("meshhub_shard_transitions_total", "shard" => shard.to_string(), "event" => "acquired").increment(1);
            }
            for shard in &lost {
                metrics::gauge!("meshhub_shard_held", "shard" => shard.to_string()).set(0.0);
                metrics::counter!("meshhub_shard_transitions_total", "shard" => shard.to_string(), "event" => "lost").increment(1);
            }
            if !gained.is_empty() || !lost.is_empty() {
                info!(acquired = ?gained, lost = ?lost, held = ?now, "shards this replica dials changed");
                s.transitions += (gained.len() + lost.len()) as u64;
                s.since = Some(At(SystemTime::now()));
            }
            shards.held.clone_from(&now);
            s.is_leader = !now.is_empty();
            if let Some(round) = round {
                // A round that could not read the group keeps the last
                // view (an empty one would show every shard free).
                if !round.holders.is_empty() {
                    shards.members = round.members;
                    for view in &mut shards.shards {
                        view.holder = round.holders.get(view.shard as usize).cloned().flatten();
                    }
                }
                s.last_error = round.error;
            }
            for view in &mut shards.shards {
                if now.contains(&view.shard) {
                    view.holder = Some(me.clone());
                } else if view.holder.as_deref() == Some(me.as_str()) {
                    view.holder = None;
                }
            }
            *shards != before || s.last_error != last_error
        });
    }
}

/// The role label of a lease of the group.
fn role(lease: &Lease) -> Option<&str> {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ROLE_LABEL))
        .map(String::as_str)
}

#[cfg(test)]
mod tests;

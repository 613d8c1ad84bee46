//! Remote clusters: the hub dials the `ResourceSink` of a sink agent for
//! every cluster configured with `agent:` and pushes that cluster's group to
//! it, one dialer task per cluster.
//!
//! [`run`] is the single owner of the dialers. It follows the configured
//! agents (a `watch` fed by configuration reloads) and changes only what
//! changed: a new cluster gets a dialer, a removed one loses it, a changed
//! agent setting restarts that cluster's dialer and no other. Each dialer
//! reconnects with exponential backoff and full jitter and records every
//! stream, ACK and NACK in the engine's ledger, where [`remote_views`] finds
//! them for the status page.
//!
//! With leader election on, the dialers run only while this replica leads
//! ([`crate::leader`]): they start when it becomes leader and stop (their
//! streams ending cleanly) when it stops being it. With shards, a cluster's
//! dialer runs only while this replica holds the cluster's shard. Each
//! stream carries the replica's identity as `meshhub-replica` request
//! metadata, which the agent shows.
//!
//! Dialers started together (at start, on becoming leader, on taking a
//! shard over) spread their first dial: each waits a random delay, uniform
//! in `[0, min(n × 1 ms, 1 s))` for `n` dialers started at once
//! ([`first_dial_spread`]), so a thousand clusters are not dialed in the
//! same millisecond and a single one is dialed at once.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use meshhub_api::status::RemoteView;
use meshhub_api::upward::{ClusterReportView, ObjectProblemView};
use meshhub_mcp::cache::{Group, SnapshotCache};
use meshhub_mcp::dial::{Connections, DialTarget};
use meshhub_mcp::ledger::{CollectionStatus, Ledger, PeerStatus, Role, SyncState};
use meshhub_mcp::source::SourceConfig;
use meshhub_mcp::source::dialer::{self, SinkTarget};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, error, info, info_span};

use crate::leader::{LeaderStatus, shards::shard_of};

pub mod exports;
pub mod spec;

pub use spec::AgentSpec;

/// The configured agents, as the reloader publishes them.
pub type Agents = Arc<Vec<AgentSpec>>;

/// Why an agent can't be dialed (the address was checked by the
/// configuration; tonic may still refuse it).
#[derive(Debug, thiserror::Error)]
#[error("cluster {cluster}: agent address {address:?}")]
pub struct EndpointError {
    /// The cluster.
    pub cluster: String,
    /// The address.
    pub address: String,
    /// Why.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// The gRPC endpoint for an agent (see
/// [`meshhub_mcp::dial::DialSpec::target`]).
pub fn endpoint(spec: &AgentSpec) -> Result<DialTarget, EndpointError> {
    spec.dial.target().map_err(|e| EndpointError {
        cluster: spec.cluster.clone(),
        address: spec.dial.address.clone(),
        source: e.into(),
    })
}

/// What a dialer task needs besides its agent.
#[derive(Clone)]
pub struct DialerDeps {
    /// Where the groups are read.
    pub cache: SnapshotCache,
    /// Where streams are recorded.
    pub ledger: Ledger,
    /// Owns the dialer tasks.
    pub tasks: TaskTracker,
    /// gRPC message limit both ways.
    pub max_message_bytes: usize,
    /// This replica's identity, sent to the agents (leader election on).
    pub replica: Option<String>,
    /// The agents' connections, shared with the upward subscribers.
    pub connections: Arc<Connections>,
}

struct Running {
    spec: AgentSpec,
    stop: CancellationToken,
}

/// Keeps one dialer per configured agent until `shutdown`, following
/// `agents`, while `leader` says this replica dials (always, without leader
/// election). The current values are applied at once.
pub async fn run(
    mut agents: watch::Receiver<Agents>,
    mut leader: watch::Receiver<LeaderStatus>,
    deps: DialerDeps,
    shutdown: CancellationToken,
) {
    let mut running: BTreeMap<String, Running> = BTreeMap::new();
    let mut follow_agents = true;
    let mut follow_leader = true;
    let mut counted = None;
    loop {
        let all = agents.borrow_and_update().clone();
        let status = leader.borrow_and_update().clone();
        if let Some(shards) = &status.shards
            && counted.as_ref() != Some(&all)
        {
            count_shards(&all, shards.count);
            counted = Some(all.clone());
        }
        let wanted: Vec<AgentSpec> = all
            .iter()
            .filter(|a| status.dials_cluster(&a.cluster))
            .cloned()
            .collect();
        if wanted.is_empty() && !running.is_empty() && status.shards.is_none() {
            info!(
                dialers = running.len(),
                "not the leader; stopping the dialers"
            );
        }
        reconcile(&mut running, &wanted, &deps, &shutdown);
        tokio::select! {
            () = shutdown.cancelled() => break,
            // A gone sender (the reloader, or no election) keeps its last
            // value: stop following it.
            r = agents.changed(), if follow_agents => follow_agents = r.is_ok(),
            r = leader.changed(), if follow_leader => follow_leader = r.is_ok(),
        }
    }
    // Dialers hold child tokens of `shutdown`: they end with it.
}

/// Sets `meshhub_shard_clusters` per shard: how many of `agents` fall in
/// each.
fn count_shards(agents: &[AgentSpec], count: u32) {
    let mut per_shard = vec![0_u32; count as usize];
    for a in agents {
        per_shard[shard_of(&a.cluster, count) as usize] += 1;
    }
    for (shard, n) in per_shard.into_iter().enumerate() {
        metrics::gauge!("meshhub_shard_clusters", "shard" => shard.to_string()).set(f64::from(n));
    }
}

/// Per dialer started in one go, how much the spread of first dials grows.
pub const FIRST_DIAL_SPREAD_PER_DIALER: Duration = Duration::from_millis(1);
/// The widest spread of first dials, whatever their number.
pub const FIRST_DIAL_SPREAD_MAX: Duration = Duration::from_secs(1);

/// The window over which `n` dialers started together spread their first
/// dial: `min(n × 1 ms, 1 s)`.
pub fn first_dial_spread(n: usize) -> Duration {
    FIRST_DIAL_SPREAD_PER_DIALER
        .saturating_mul(u32::try_from(n).unwrap_or(u32::MAX))
        .min(FIRST_DIAL_SPREAD_MAX)
}

/// Starts, stops and restarts dialers so that exactly `wanted` run.
fn reconcile(
    running: &mut BTreeMap<String, Running>,
    wanted: &[AgentSpec],
    deps: &DialerDeps,
    shutdown: &CancellationToken,
) {
    let wanted: BTreeMap<&str, &AgentSpec> =
        wanted.iter().map(|a| (a.cluster.as_str(), a)).collect();
    running.retain(|cluster, r| {
        // Only the dial settings matter to a dialer (not the export policy).
        let keep = wanted
            .get(cluster.as_str())
            .is_some_and(|w| w.dial == r.spec.dial);
        if !keep {
            r.stop.cancel();
            if wanted.contains_key(cluster.as_str()) {
                info!(%cluster, "agent settings changed; restarting its dialer");
            } else {
                info!(%cluster, "not dialing this cluster any more; dialer stopped");
            }
        }
        keep
    });
    let starting = wanted.keys().filter(|c| !running.contains_key(**c)).count();
    let spread = first_dial_spread(starting);
    for (cluster, spec) in wanted {
        if running.contains_key(cluster) {
            continue;
        }
        let endpoint = match endpoint(spec) {
            Ok(e) => deps.connections.share(cluster, e),
            Err(e) => {
                error!(error = %meshhub_runtime::error_chain(&e), "can't dial this agent");
                continue;
            }
        };
        let stop = shutdown.child_token();
        let target = SinkTarget {
            name: cluster.to_owned(),
            group: Group::from(cluster),
            endpoint,
            reconnect: spec.dial.reconnect.clone(),
            config: Arc::new(SourceConfig::default()),
            max_message_bytes: deps.max_message_bytes,
            replica: deps.replica.clone(),
        };
        let delay = spread.mul_f64(rand::random::<f64>());
        info!(%cluster, agent.address = %spec.dial.address, first_dial.delay = ?delay, "dialing the cluster's sink agent");
        let (cache, ledger, stopped) = (deps.cache.clone(), deps.ledger.clone(), stop.clone());
        deps.tasks.spawn(
            async move {
                tokio::select! {
                    () = stopped.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
                dialer::run(target, cache, ledger, stopped).await;
            }
            .instrument(info_span!("cluster", cluster = %cluster)),
        );
        running.insert(
            cluster.to_owned(),
            Running {
                spec: (*spec).clone(),
                stop,
            },
        );
    }
}

/// Whether a ledger entry is a dialer's: a dialer records its cluster as
/// both peer and group, while a dialed-in consumer's peer is its socket
/// address (which a cluster name, an RFC 1123 label, can't be).
pub fn is_dialer(p: &PeerStatus) -> bool {
    p.role == Role::Source && p.peer == p.group
}

/// Per peer name, its first connected entry among `entries`, else its
/// first (one pass: the rows below look their cluster up, not scan the
/// ledger once per cluster).
fn by_peer<'a>(entries: impl Iterator<Item = &'a PeerStatus>) -> HashMap<&'a str, &'a PeerStatus> {
    let mut found: HashMap<&str, &PeerStatus> = HashMap::new();
    for p in entries {
        match found.entry(p.peer.as_str()) {
            Entry::Vacant(v) => {
                v.insert(p);
            }
            Entry::Occupied(mut o) => {
                if p.connected && !o.get().connected {
                    o.insert(p);
                }
            }
        }
    }
    found
}

/// The objects the cluster's istiod dropped per `report`, of the versions
/// `collections` ACKed; those collections are marked `DROPPED`.
pub fn mark_dropped(
    collections: &mut BTreeMap<String, CollectionStatus>,
    report: &ClusterReportView,
) -> BTreeMap<String, Vec<ObjectProblemView>> {
    let dropped = report.dropped_at(|c| {
        collections
            .get(c)
            .filter(|s| s.state == SyncState::Synced)
            .and_then(|s| s.acked.as_ref().map(|v| v.version.clone()))
    });
    for c in dropped.keys() {
        if let Some(s) = collections.get_mut(c) {
            s.state = SyncState::Dropped;
        }
    }
    dropped
}

/// One row per configured agent, with its dialer's ledger entry (the live
/// one, or the newest retained one). `ledger` is [`Ledger::view`]: live
/// peers first. `reports` holds what each cluster reported over the
/// upward channel (its stream is the ledger's sink peer `upward_peer`):
/// a collection whose ACKed version the cluster's istiod does not fully
/// hold shows as `DROPPED`, with the objects.
pub fn remote_views(
    agents: &[AgentSpec],
    leader: &LeaderStatus,
    ledger: &[PeerStatus],
    reports: &BTreeMap<String, ClusterReportView>,
    upward_peer: impl Fn(&str) -> String,
) -> Vec<RemoteView> {
    let dialers = by_peer(ledger.iter().filter(|p| is_dialer(p)));
    let sinks = by_peer(ledger.iter().filter(|p| p.role == Role::Sink));
    agents
        .iter()
        .map(|a| {
            let p = dialers.get(a.cluster.as_str()).copied();
            let mut collections = p.map(|p| p.collections.clone()).unwrap_or_default();
            let report = reports.get(&a.cluster).map(|r| {
                let name = upward_peer(&a.cluster);
                let up = sinks.get(name.as_str()).copied();
                let mut r = r.clone();
                r.connected = up.is_some_and(|p| p.connected);
                r.last_error = up.and_then(|p| p.last_error.clone());
                r
            });
            let dropped = report
                .as_ref()
                .map(|r| mark_dropped(&mut collections, r))
                .unwrap_or_default();
            let shard = leader
                .shards
                .as_ref()
                .map(|s| shard_of(&a.cluster, s.count));
            let dialed_by = match (&leader.shards, shard) {
                (Some(s), Some(shard)) => {
                    s.shards.get(shard as usize).and_then(|v| v.holder.clone())
                }
                _ if leader.enabled => leader.holder.clone(),
                _ => None,
            };
            RemoteView {
                shard,
                dialed_by,
                cluster: a.cluster.clone(),
                address: a.dial.address.clone(),
                connected: p.is_some_and(|p| p.connected),
                connected_since: p.and_then(|p| p.connected_since),
                disconnected_at: p.and_then(|p| p.disconnected_at),
                last_error: p.and_then(|p| p.last_error.clone()),
                streams: p.map_or(0, |p| p.streams),
                collections,
                dropped,
                report,
            }
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;

//! The upward channel, hub side: for every cluster with an agent the hub
//! subscribes, as an MCP sink, to the agent's own `ResourceSource` of its
//! cluster's state (`meshhub/v1alpha1/clusterstatus`,
//! `meshhub/v1alpha1/serviceexports`; see the agent's `upward` module).
//!
//! * **Who may publish what.** The hub dials the address configured for
//!   cluster X (with the cluster's `agent.tls`: the agent's certificate is
//!   verified as for the push stream), and attributes everything it reads
//!   there to X. A report naming another cluster is NACKed and dropped
//!   (`meshhub_upward_refused_total`): an agent can only publish for its
//!   own cluster. The agent, in turn, serves the channel only to the hub
//!   identities allowed to push to it.
//! * **Transport**: the engine's sink client ([`sink_client::connect_once`])
//!   in a reconnect loop of its own ([`subscribe`]), with the cluster's
//!   `agent` dial settings; one subscriber per agent, on every replica
//!   (reading is harmless, and every replica must generate the same objects
//!   from the exports).
//! * **Agents that do not serve it.** A peer that answers the subscription
//!   `UNIMPLEMENTED` (a `ResourceSink`-only sink: Istio 1.5's, an older
//!   agent, a bench's light sink) is marked *unserved* and asked again only
//!   after [`UNSERVED_RETRY`] (jittered), not at the reconnect backoff: the
//!   answer will not change until another process serves the address, and
//!   a thousand such peers asked every 30 s cost the hub a core. One log
//!   line per change of that state; `/status` shows it
//!   (`report.unserved`), the gauge `meshhub_upward_unserved_clusters`
//!   counts such clusters.
//! * **State**: one task ([`state::run`]) owns what the clusters reported
//!   and publishes it as a `watch` of [`Reports`]. A cut stream keeps the
//!   last report (the reconnect's full state replaces it); a cluster
//!   removed from the configuration loses its report and its exports.
//!   Every subscriber has a generation ([`Update::generation`]): what a
//!   stopped one still sends is dropped there. Exports are merged only
//!   once complete, and judged per cluster ([`judge`], under [`crate::clusters::exports`])
//!   first.
//! * **Exports** become generated ServiceEntries through [`mcs`], a source
//!   of the pipeline like any other.

pub mod contribution;
pub mod entry;
pub mod judge;
pub mod mcs;
pub mod state;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use meshhub_mcp::ledger::{Ledger, PeerRecord, Role};
use meshhub_mcp::reconnect::{Attempt, Backoff};
use meshhub_mcp::sink::client::{self as sink_client, SourceTarget};
use meshhub_mcp::sink::{ApplyError, Change, SinkCollection, SinkConfig, Updater};
use meshhub_mcp::source::drive::{End, settle};
use meshhub_mcp::transport::DialError;
use meshhub_proto::mcp::SinkNode;
use meshhub_proto::upward::{
    CLUSTER_STATUS, CLUSTER_STATUS_MESSAGE, ClusterStatus, SERVICE_EXPORT_MESSAGE, SERVICE_EXPORTS,
    ServiceExport,
};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, error, info, info_span, warn};

use crate::clusters::exports::ExportPolicy;
use crate::clusters::{AgentSpec, Agents, endpoint};

pub use state::{ClusterReport, Reports};

/// The ledger name of a cluster's upward stream (a cluster name has no
/// `/`, so it can't be mistaken for a source's or a dialer's).
pub fn peer_name(cluster: &str) -> String {
    format!("upward/{cluster}")
}

/// The node id the hub announces to agents.
const NODE_ID: &str = "meshhub-hub";

/// What a cluster's subscriber (or [`run`], which starts and stops them)
/// tells the state task.
#[derive(Debug)]
pub struct Update {
    /// The cluster.
    pub cluster: String,
    /// The generation of the subscriber that sent it: every subscriber
    /// started gets a new one, and the state task takes an update only
    /// from its cluster's current generation, so that a report read by a
    /// subscriber being stopped can't land after its cluster is gone (or
    /// after its replacement started) and bring it back.
    pub generation: u64,
    /// What happened.
    pub what: What,
}

/// What an [`Update`] says.
#[derive(Debug)]
pub enum What {
    /// A subscriber of this generation starts (the cluster is configured,
    /// or its agent settings changed) with this export policy.
    Started {
        /// What the cluster may export.
        policy: ExportPolicy,
    },
    /// The cluster's export policy changed (its subscriber runs on).
    Policy(ExportPolicy),
    /// The cluster's report (`None`: the agent serves none).
    Status(Option<Box<ClusterStatus>>),
    /// The cluster's exports (full state) at the collection's version.
    Exports {
        /// The collection's `system_version_info`.
        version: String,
        /// Its exports.
        exports: Vec<ServiceExport>,
    },
    /// The agent stopped (`true`) or started (`false`) serving the
    /// upward report.
    Unserved(bool),
    /// The cluster has no agent any more.
    Gone,
}

/// Decodes what one agent publishes, attributed to its cluster.
struct ClusterUpdater {
    cluster: String,
    generation: u64,
    tx: mpsc::Sender<Update>,
    /// Whether the agent answered the last subscription `UNIMPLEMENTED`
    /// (written by the subscriber task and, through `apply`, by its
    /// stream: one task).
    unserved: AtomicBool,
}

impl ClusterUpdater {
    fn new(cluster: String, generation: u64, tx: mpsc::Sender<Update>) -> Self {
        Self {
            cluster,
            generation,
            tx,
            unserved: AtomicBool::new(false),
        }
    }

    /// Records whether the agent serves the upward report; logs, counts
    /// and tells the state task only when that changes.
    async fn set_unserved(&self, unserved: bool) {
        if self.unserved.swap(unserved, Ordering::Relaxed) == unserved {
            return;
        }
        let gauge = metrics::gauge!("meshhub_upward_unserved_clusters");
        if unserved {
            gauge.increment(1.0);
            warn!(cluster = %self.cluster, retry.after = ?UNSERVED_RETRY, "the agent does not serve the upward report (UNIMPLEMENTED); asking again after a long wait");
        } else {
            gauge.decrement(1.0);
            info!(cluster = %self.cluster, "the agent no longer refuses the upward report as UNIMPLEMENTED");
        }
        // Only fails when the hub is shutting down.
        let _ = self.tx.send(self.update(What::Unserved(unserved))).await;
    }

    fn update(&self, what: What) -> Update {
        Update {
            cluster: self.cluster.clone(),
            generation: self.generation,
            what,
        }
    }

    /// The subscriber ends: its cluster leaves the gauge.
    fn stopped(&self) {
        if self.unserved.swap(false, Ordering::Relaxed) {
            metrics::gauge!("meshhub_upward_unserved_clusters").decrement(1.0);
        }
    }
}

/// Decodes the body of a resource as `M`, checking its type.
fn decode<M: prost::Message + Default>(
    r: &meshhub_proto::mcp::Resource,
    message: &str,
) -> Result<M, String> {
    let name = r.metadata.as_ref().map_or("", |m| m.name.as_str());
    let body = r.body.as_ref().ok_or_else(|| format!("{name}: no body"))?;
    if meshhub_proto::message_name(&body.type_url) != message {
        return Err(format!("{name}: body is {}, not {message}", body.type_url));
    }
    M::decode(body.value.as_slice()).map_err(|e| format!("{name}: undecodable body: {e}"))
}

impl Updater for ClusterUpdater {
    async fn apply(&self, change: Change) -> Result<(), ApplyError> {
        self.set_unserved(false).await;
        let update = match change.collection.as_str() {
            CLUSTER_STATUS => {
                let mut report = None;
                for r in &change.resources {
                    let status: ClusterStatus =
                        decode(r, CLUSTER_STATUS_MESSAGE).map_err(ApplyError::Invalid)?;
                    if status.cluster != self.cluster {
                        metrics::counter!("meshhub_upward_refused_total", "cluster" => self.cluster.clone())
                            .increment(1);
                        error!(cluster = %self.cluster, reported = %status.cluster, "an agent reported for another cluster; refused");
                        return Err(ApplyError::Invalid(format!(
                            "a report for cluster {:?}: this agent may only publish for cluster {:?}",
                            status.cluster, self.cluster
                        )));
                    }
                    report = Some(Box::new(status));
                }
                self.update(What::Status(report))
            }
            SERVICE_EXPORTS => {
                let mut exports = Vec::with_capacity(change.resources.len());
                for r in &change.resources {
                    let e: ServiceExport =
                        decode(r, SERVICE_EXPORT_MESSAGE).map_err(ApplyError::Invalid)?;
                    let name = r.metadata.as_ref().map_or("", |m| m.name.as_str());
                    if name != format!("{}/{}", e.namespace, e.name) {
                        return Err(ApplyError::Invalid(format!(
                            "{name}: the export inside is {}/{}",
                            e.namespace, e.name
                        )));
                    }
                    exports.push(e);
                }
                self.update(What::Exports {
                    version: change.version.clone(),
                    exports,
                })
            }
            other => return Err(ApplyError::Invalid(format!("not subscribed: {other}"))),
        };
        metrics::counter!("meshhub_upward_updates_total", "collection" => change.collection.clone())
            .increment(1);
        self.tx
            .send(update)
            .await
            .map_err(|_| ApplyError::Unavailable {
                message: "the hub is shutting down".to_owned(),
                retry_after: None,
            })
    }

    fn held(&self, _: &str) -> HashMap<String, String> {
        HashMap::new()
    }
}

/// What the subscribers need.
#[derive(Clone)]
pub struct UpwardDeps {
    /// Where the upward streams are recorded.
    pub ledger: Ledger,
    /// Owns the subscriber tasks.
    pub tasks: TaskTracker,
    /// gRPC message limit both ways.
    pub max_message_bytes: usize,
    /// The agents' connections, shared with the push dialers.
    pub connections: Arc<meshhub_mcp::dial::Connections>,
    /// How long to wait before asking an agent that does not serve the
    /// upward report again ([`UNSERVED_RETRY`]; shorter in tests).
    pub unserved_retry: Duration,
}

/// The longest wait before asking an agent that answered `UNIMPLEMENTED`
/// again; each wait is uniform in `[½, 1] ×` this (jitter spreads a fleet
/// of such agents, and no wait is short). A periodic question rather than
/// one tied to the push stream's reconnect: every replica subscribes, and
/// only one of them (the leader, the shard holder) pushes.
pub const UNSERVED_RETRY: Duration = Duration::from_secs(600);

/// A wait before asking an agent that does not serve the report again.
fn unserved_wait(max: Duration) -> Duration {
    max.mul_f64(0.5 + rand::random::<f64>() / 2.0)
}

/// The status of an attempt the agent refused with `UNIMPLEMENTED`, whether
/// at the call or as the stream's first word.
fn unimplemented(outcome: &Result<(End, bool), DialError>) -> Option<&tonic::Status> {
    match outcome {
        Err(DialError::Refused(s)) | Ok((End::Failed(s), false))
            if s.code() == tonic::Code::Unimplemented =>
        {
            Some(s)
        }
        _ => None,
    }
}

/// One cluster's subscriber: subscribes until `shutdown`, reconnecting
/// with the agent's backoff, or after [`unserved_wait`] when the agent
/// does not serve the report. Each attempt counts in
/// `meshhub_upward_attempts_total`.
async fn subscribe(
    target: SourceTarget,
    updater: ClusterUpdater,
    ledger: Ledger,
    shutdown: CancellationToken,
    unserved_retry: Duration,
) {
    let span =
        info_span!("mcp.sink.client", source = %target.name, endpoint = %target.endpoint.uri());
    async {
        let record: PeerRecord = ledger.register(Role::Sink, target.name.clone(), "");
        record.identify(&target.config.node.id, "");
        let mut backoff = Backoff::new(target.reconnect.clone());
        loop {
            metrics::counter!("meshhub_upward_attempts_total").increment(1);
            let outcome =
                sink_client::connect_once(&target, &updater, &record, &shutdown).await;
            // A stopped subscriber (settings changed, cluster removed) says
            // nothing more: its replacement, or `Gone`, has the last word.
            let stopped = shutdown.is_cancelled();
            let delay = if let Some(status) = unimplemented(&outcome) {
                record.disconnected(Some(format!("{}: {}", status.code(), status.message())));
                if !stopped {
                    updater.set_unserved(true).await;
                }
                unserved_wait(unserved_retry)
            } else {
                if !stopped && !matches!(&outcome, Ok((End::Shutdown, _))) {
                    // Any other answer (the call taken, a refusal for another
                    // reason, no connection): nothing says it does not serve
                    // the report, and `last_error` tells the rest.
                    updater.set_unserved(false).await;
                }
                match settle(outcome, &record, "source") {
                    Attempt::Stop => break,
                    Attempt::Healthy => backoff.reset(),
                    Attempt::Failed => {}
                }
                backoff.next_delay()
            };
            metrics::counter!("meshhub_mcp_reconnects_total", "role" => "sink", "peer" => target.name.clone()).increment(1);
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
            }
        }
        updater.stopped();
    }
    .instrument(span)
    .await;
}

struct Running {
    spec: AgentSpec,
    generation: u64,
    stop: CancellationToken,
}

/// Keeps one upward subscriber per configured agent until `shutdown`,
/// following `agents`; updates go to `tx` (the state task).
pub async fn run(
    mut agents: watch::Receiver<Agents>,
    deps: UpwardDeps,
    tx: mpsc::Sender<Update>,
    shutdown: CancellationToken,
) {
    let mut running: BTreeMap<String, Running> = BTreeMap::new();
    let mut generations = 0_u64;
    loop {
        let wanted = agents.borrow_and_update().clone();
        reconcile(
            &mut running,
            &mut generations,
            &wanted,
            &deps,
            &tx,
            &shutdown,
        )
        .await;
        tokio::select! {
            () = shutdown.cancelled() => break,
            r = agents.changed() => if r.is_err() {
                // The reloader is gone: the agents stay as they are.
                shutdown.cancelled().await;
                break;
            },
        }
    }
}

async fn reconcile(
    running: &mut BTreeMap<String, Running>,
    generations: &mut u64,
    wanted: &[AgentSpec],
    deps: &UpwardDeps,
    tx: &mpsc::Sender<Update>,
    shutdown: &CancellationToken,
) {
    let wanted: BTreeMap<&str, &AgentSpec> =
        wanted.iter().map(|a| (a.cluster.as_str(), a)).collect();
    let mut gone = Vec::new();
    let mut policies = Vec::new();
    running.retain(|cluster, r| {
        let keep = match wanted.get(cluster.as_str()) {
            Some(w) if w.dial == r.spec.dial => {
                if w.exports != r.spec.exports {
                    policies.push((cluster.clone(), r.generation, w.exports.clone()));
                    r.spec.exports = w.exports.clone();
                }
                true
            }
            _ => false,
        };
        if !keep {
            r.stop.cancel();
            if !wanted.contains_key(cluster.as_str()) {
                gone.push((cluster.clone(), r.generation));
            }
        }
        keep
    });
    // Sends fail only when the hub is shutting down.
    let send = async |cluster, generation, what| {
        let _ = tx
            .send(Update {
                cluster,
                generation,
                what,
            })
            .await;
    };
    for (cluster, generation, policy) in policies {
        info!(%cluster, "the cluster's export policy changed");
        send(cluster, generation, What::Policy(policy)).await;
    }
    for (cluster, generation) in gone {
        info!(%cluster, "cluster has no agent any more; its report is dropped");
        send(cluster, generation, What::Gone).await;
    }
    for (cluster, spec) in wanted {
        if running.contains_key(cluster) {
            continue;
        }
        *generations += 1;
        let generation = *generations;
        // Before the subscriber can send anything (and even when none can
        // start: a replaced one's late reports are then dropped too).
        let what = What::Started {
            policy: spec.exports.clone(),
        };
        let cluster = cluster.to_owned();
        let _ = tx
            .send(Update {
                cluster: cluster.clone(),
                generation,
                what,
            })
            .await;
        let stop = shutdown.child_token();
        let endpoint = match endpoint(spec) {
            Ok(e) => e,
            Err(e) => {
                error!(error = %meshhub_runtime::error_chain(&e), "can't subscribe to this agent's upward channel");
                // Recorded all the same, without a subscriber: its removal
                // then says `Gone`, and a settings change tries again.
                running.insert(
                    cluster,
                    Running {
                        spec: spec.clone(),
                        generation,
                        stop,
                    },
                );
                continue;
            }
        };
        let target = SourceTarget {
            name: peer_name(&cluster),
            endpoint: deps.connections.share(&cluster, endpoint),
            config: Arc::new(SinkConfig {
                node: SinkNode {
                    id: NODE_ID.to_owned(),
                    annotations: HashMap::new(),
                },
                collections: [CLUSTER_STATUS, SERVICE_EXPORTS]
                    .map(|c| SinkCollection {
                        name: c.to_owned(),
                        incremental: false,
                    })
                    .to_vec(),
            }),
            reconnect: spec.dial.reconnect.clone(),
            max_message_bytes: deps.max_message_bytes,
        };
        let updater = ClusterUpdater::new(cluster.clone(), generation, tx.clone());
        deps.tasks.spawn(
            subscribe(
                target,
                updater,
                deps.ledger.clone(),
                stop.clone(),
                deps.unserved_retry,
            )
            .instrument(info_span!("upward", cluster = %cluster)),
        );
        running.insert(
            cluster,
            Running {
                spec: (*spec).clone(),
                generation,
                stop,
            },
        );
    }
}

#[cfg(test)]
mod tests;

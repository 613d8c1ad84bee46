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
//! * **Transport**: the engine's sink client in the engine's reconnect
//!   loop, with the cluster's `agent` dial settings; one subscriber per
//!   agent, on every replica (reading is harmless, and every replica must
//!   generate the same objects from the exports).
//! * **State**: one task ([`state::run`]) owns what the clusters reported
//!   and publishes it as a `watch` of [`Reports`]. A cut stream keeps the
//!   last report (the reconnect's full state replaces it); a cluster
//!   removed from the configuration loses its report and its exports.
//! * **Exports** become generated ServiceEntries through [`mcs`], a source
//!   of the pipeline like any other.

pub mod mcs;
pub mod state;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use meshhub_mcp::ledger::Ledger;
use meshhub_mcp::sink::client::{self as sink_client, SourceTarget};
use meshhub_mcp::sink::{ApplyError, Change, SinkCollection, SinkConfig, Updater};
use meshhub_proto::mcp::SinkNode;
use meshhub_proto::upward::{
    CLUSTER_STATUS, CLUSTER_STATUS_MESSAGE, ClusterStatus, SERVICE_EXPORT_MESSAGE, SERVICE_EXPORTS,
    ServiceExport,
};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, error, info, info_span};

use crate::clusters::{AgentSpec, Agents, endpoint};

pub use state::Reports;

/// The ledger name of a cluster's upward stream (a cluster name has no
/// `/`, so it can't be mistaken for a source's or a dialer's).
pub fn peer_name(cluster: &str) -> String {
    format!("upward/{cluster}")
}

/// The node id the hub announces to agents.
const NODE_ID: &str = "meshhub-hub";

/// What a cluster's subscriber tells the state task.
#[derive(Debug)]
pub enum Update {
    /// The cluster's report (`None`: the agent serves none).
    Status {
        /// The cluster.
        cluster: String,
        /// Its report.
        report: Option<Box<ClusterStatus>>,
    },
    /// The cluster's exports (full state).
    Exports {
        /// The cluster.
        cluster: String,
        /// Its exports.
        exports: Vec<ServiceExport>,
    },
    /// The cluster has no agent any more.
    Gone {
        /// The cluster.
        cluster: String,
    },
}

/// Decodes what one agent publishes, attributed to its cluster.
struct ClusterUpdater {
    cluster: String,
    tx: mpsc::Sender<Update>,
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
                Update::Status {
                    cluster: self.cluster.clone(),
                    report,
                }
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
                Update::Exports {
                    cluster: self.cluster.clone(),
                    exports,
                }
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
}

struct Running {
    spec: AgentSpec,
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
    loop {
        let wanted = agents.borrow_and_update().clone();
        reconcile(&mut running, &wanted, &deps, &tx, &shutdown).await;
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
    wanted: &[AgentSpec],
    deps: &UpwardDeps,
    tx: &mpsc::Sender<Update>,
    shutdown: &CancellationToken,
) {
    let wanted: BTreeMap<&str, &AgentSpec> =
        wanted.iter().map(|a| (a.cluster.as_str(), a)).collect();
    let mut gone = Vec::new();
    running.retain(|cluster, r| {
        let keep = wanted.get(cluster.as_str()) == Some(&&r.spec);
        if !keep {
            r.stop.cancel();
            if !wanted.contains_key(cluster.as_str()) {
                gone.push(cluster.clone());
            }
        }
        keep
    });
    for cluster in gone {
        info!(%cluster, "cluster has no agent any more; its report is dropped");
        let _ = tx.send(Update::Gone { cluster }).await;
    }
    for (cluster, spec) in wanted {
        if running.contains_key(cluster) {
            continue;
        }
        let endpoint = match endpoint(spec) {
            Ok(e) => e,
            Err(e) => {
                error!(error = %meshhub_runtime::error_chain(&e), "can't subscribe to this agent's upward channel");
                continue;
            }
        };
        let stop = shutdown.child_token();
        let target = SourceTarget {
            name: peer_name(cluster),
            endpoint,
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
        let updater = Arc::new(ClusterUpdater {
            cluster: cluster.to_owned(),
            tx: tx.clone(),
        });
        deps.tasks.spawn(
            sink_client::run(target, updater, deps.ledger.clone(), stop.clone())
                .instrument(info_span!("upward", cluster = %cluster)),
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

#[cfg(test)]
mod tests;

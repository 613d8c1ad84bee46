//! One complete state of a `ResourceSource` (the hub, or a sink agent
//! re-serving), as a consumer receives it: subscribe to the collections
//! with a node identity, keep the first full response of each, end the
//! stream. `get` and `diff` read the hub and the agents this way, so what
//! they show is what the server really sends that identity.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use meshhub_api::node::{CLUSTER_ANNOTATION, UNKNOWN_CLUSTER};
use meshhub_mcp::group::refusal_reason;
use meshhub_mcp::ledger::{Ledger, Role};
use meshhub_mcp::sink::client::{SourceTarget, connect_once};
use meshhub_mcp::sink::{ApplyError, Change, SinkCollection, SinkConfig, Updater};
use meshhub_mcp::source::drive::End;
use meshhub_mcp::transport::DialError;
use meshhub_proto::mcp::{Resource, SinkNode};
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;

/// The node id `get` and `diff` announce (shown by `meshhubctl status`).
pub const NODE_ID: &str = "meshhubctl";

/// Largest response accepted.
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// One collection's full state.
#[derive(Debug, Default)]
pub struct Collection {
    /// Its version.
    pub version: String,
    /// Its resources, by name.
    pub resources: BTreeMap<String, Resource>,
}

/// What a server sent: collection → its state.
pub type State = BTreeMap<String, Collection>;

/// Keeps the first full state of every collection; cancels `done` when
/// each arrived.
struct Collector {
    got: Mutex<State>,
    pending: Mutex<BTreeSet<String>>,
    done: CancellationToken,
}

impl Updater for Collector {
    async fn apply(&self, change: Change) -> Result<(), ApplyError> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.remove(&change.collection) {
            let resources = change
                .resources
                .into_iter()
                .map(|r| {
                    let name = r.metadata.as_ref().map(|m| m.name.clone());
                    (name.unwrap_or_default(), r)
                })
                .collect();
            self.got.lock().unwrap_or_else(|e| e.into_inner()).insert(
                change.collection,
                Collection {
                    version: change.version,
                    resources,
                },
            );
        }
        if pending.is_empty() {
            self.done.cancel();
        }
        Ok(())
    }

    fn held(&self, _collection: &str) -> HashMap<String, String> {
        HashMap::new()
    }
}

/// Who to ask, and as whom.
pub struct Target<'a> {
    /// The server's URL.
    pub server: &'a str,
    /// The flag that sets `server`, for error messages (`--server`).
    pub flag: &'a str,
    /// The cluster whose view is wanted: sent as the `meshhub.io/cluster`
    /// node annotation, which the hub maps to that cluster's group (and
    /// refuses when no such cluster is configured). `None`: the default
    /// group.
    pub cluster: Option<&'a str>,
    /// Give up after this long.
    pub timeout: Duration,
}

/// Why no state was fetched.
#[derive(Debug)]
pub enum FetchError {
    /// The hub refused the stream: the cluster is not configured.
    UnknownCluster(String),
    /// Anything else, as a message saying what to do.
    Other(String),
}

impl From<String> for FetchError {
    fn from(m: String) -> Self {
        Self::Other(m)
    }
}

/// Subscribes to `collections` at `target` and returns the first full
/// state of each.
pub async fn state(target: &Target<'_>, collections: &[String]) -> Result<State, FetchError> {
    let endpoint = Endpoint::from_shared(target.server.to_owned())
        .map_err(|e| format!("{} {:?}: {e}", target.flag, target.server))?
        .connect_timeout(target.timeout);
    let annotations = target
        .cluster
        .map(|c| HashMap::from([(CLUSTER_ANNOTATION.to_owned(), c.to_owned())]))
        .unwrap_or_default();
    let source = SourceTarget {
        name: target.server.to_owned(),
        endpoint: meshhub_mcp::dial::DialTarget::plaintext(endpoint),
        config: Arc::new(SinkConfig {
            node: SinkNode {
                id: NODE_ID.to_owned(),
                annotations,
            },
            collections: collections
                .iter()
                .map(|c| SinkCollection {
                    name: c.clone(),
                    incremental: false,
                })
                .collect(),
        }),
        reconnect: Default::default(),
        max_message_bytes: MAX_MESSAGE_BYTES,
    };
    let done = CancellationToken::new();
    let collector = Collector {
        got: Mutex::default(),
        pending: Mutex::new(collections.iter().cloned().collect()),
        done: done.clone(),
    };
    let ledger = Ledger::new();
    let record = ledger.register(Role::Sink, target.server.to_owned(), "");
    let run = connect_once(&source, &collector, &record, &done);
    let ended = tokio::time::timeout(target.timeout, run)
        .await
        .map_err(|_| {
            format!(
                "{} did not send every collection within {:?} (raise --timeout)",
                target.server, target.timeout
            )
        })?;
    match ended {
        Ok((End::Shutdown, _)) => Ok(collector
            .got
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())),
        Ok((End::Failed(status), _)) if names_unknown_cluster(&status) => Err(
            FetchError::UnknownCluster(End::Failed(status).error().unwrap_or_default()),
        ),
        Err(DialError::Refused(status)) if names_unknown_cluster(&status) => Err(
            FetchError::UnknownCluster(DialError::Refused(status).to_string()),
        ),
        Ok((end, _)) => Err(FetchError::Other(format!(
            "{} ended the stream before every collection arrived: {}",
            target.server,
            end.error().unwrap_or_else(|| "closed by server".into())
        ))),
        Err(e) => Err(FetchError::Other(format!(
            "cannot connect to {} ({e}); is it running? Pass its gRPC address with {}",
            target.server, target.flag
        ))),
    }
}

/// Whether the hub refused the stream because the cluster it names is not
/// configured (the refusal's reason, not its text).
fn names_unknown_cluster(status: &tonic::Status) -> bool {
    refusal_reason(status).as_deref() == Some(UNKNOWN_CLUSTER)
}

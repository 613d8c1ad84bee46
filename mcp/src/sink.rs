//! The sink side of one MCP stream, as a pure state machine, and the
//! [`Updater`] that applies what a sink receives.
//!
//! Rules kept (reference §2.2, §2.4, §2.6, §2.16): the sink first sends one
//! request per collection (with `initial_resource_versions` for incremental
//! collections, from what it holds), then answers every response with exactly
//! one ACK or NACK; `error_detail` is unset on an ACK; a response for a
//! collection it did not ask for is NACKed with `UNIMPLEMENTED` (this also
//! answers a dialing source's `$triggerCollection` probe); a change the
//! updater rejects is NACKed with `INVALID_ARGUMENT` and the reason.

pub mod client;
pub mod drive;
pub mod server;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;

use meshhub_proto::RpcStatus;
use meshhub_proto::mcp::{RequestResources, Resource, Resources, SinkNode};

/// gRPC code `INVALID_ARGUMENT`.
pub const CODE_INVALID_ARGUMENT: i32 = 3;
/// gRPC code `UNIMPLEMENTED`.
pub const CODE_UNIMPLEMENTED: i32 = 12;

/// One collection a sink subscribes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkCollection {
    /// Collection name.
    pub name: String,
    /// Ask for incremental responses.
    pub incremental: bool,
}

/// Settings of the sink side.
#[derive(Clone, Debug, Default)]
pub struct SinkConfig {
    /// Who we are (sent on every request).
    pub node: SinkNode,
    /// What we subscribe to.
    pub collections: Vec<SinkCollection>,
}

/// One received response, ready to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// Collection name.
    pub collection: String,
    /// `system_version_info` of the response.
    pub version: String,
    /// The whole collection (full state) or the upserts (incremental).
    pub resources: Vec<Resource>,
    /// Removed names (incremental only).
    pub removed: Vec<String>,
    /// Whether this is a delta.
    pub incremental: bool,
    /// The response's nonce (echoed in the ACK/NACK).
    pub nonce: String,
}

/// Why an updater rejected a change; its text becomes the NACK's message,
/// its variant decides whether the stream asks for the collection again.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// The change itself is refused (a resource that does not validate, a
    /// collection not accepted, an object the cluster's API refuses): the
    /// refusal stands until the source has a new version.
    #[error("{0}")]
    Invalid(String),
    /// The change could not be taken now, for a reason expected to pass (a
    /// full disk, an API server that does not answer).
    #[error("{message}")]
    Unavailable {
        /// What failed.
        message: String,
        /// When to ask for the collection again: the stream then sends a
        /// new request for it (empty nonce, what it holds), which makes the
        /// source resend its current version, even the one just NACKed; a
        /// newer response meanwhile cancels the retry. `None`: the updater
        /// retries by itself and the NACK stands until a new version.
        retry_after: Option<std::time::Duration>,
    },
}

/// Applies received changes. Implementations validate, store and return an
/// error to NACK the whole response (keeping their previous state of the
/// collection).
pub trait Updater: Send + Sync + 'static {
    /// Applies one change.
    fn apply(&self, change: Change) -> impl Future<Output = Result<(), ApplyError>> + Send;

    /// What the updater holds of a collection (name → version), for
    /// `initial_resource_versions` when a stream (re)starts.
    fn held(&self, collection: &str) -> HashMap<String, String>;
}

/// What to do with a response.
#[derive(Debug, PartialEq)]
pub enum SinkStep {
    /// Apply it, then report the result with [`SinkStream::on_applied`].
    Apply(Change),
    /// Send this reply (a NACK) without applying anything.
    Reply(RequestResources),
}

/// The sink side of one stream.
#[derive(Debug)]
pub struct SinkStream {
    config: Arc<SinkConfig>,
    incremental: BTreeMap<String, bool>,
}

impl SinkStream {
    /// A new stream.
    pub fn new(config: Arc<SinkConfig>) -> Self {
        let incremental = config
            .collections
            .iter()
            .map(|c| (c.name.clone(), c.incremental))
            .collect();
        Self {
            config,
            incremental,
        }
    }

    /// The requests that open the stream, one per collection. `held` gives
    /// what the sink already holds, used for incremental collections.
    pub fn initial_requests(
        &self,
        held: impl Fn(&str) -> HashMap<String, String>,
    ) -> Vec<RequestResources> {
        self.config
            .collections
            .iter()
            .map(|c| self.subscribe(c, &held))
            .collect()
    }

    /// A new request for one configured collection (empty nonce, with what
    /// is held when incremental): the source answers it with its current
    /// version, even one this stream NACKed. `None` for a collection not
    /// configured.
    pub fn request_again(
        &self,
        collection: &str,
        held: impl Fn(&str) -> HashMap<String, String>,
    ) -> Option<RequestResources> {
        self.config
            .collections
            .iter()
            .find(|c| c.name == collection)
            .map(|c| self.subscribe(c, &held))
    }

    fn subscribe(
        &self,
        c: &SinkCollection,
        held: &impl Fn(&str) -> HashMap<String, String>,
    ) -> RequestResources {
        RequestResources {
            sink_node: Some(self.config.node.clone()),
            collection: c.name.clone(),
            initial_resource_versions: if c.incremental {
                held(&c.name)
            } else {
                HashMap::new()
            },
            response_nonce: String::new(),
            error_detail: None,
            incremental: c.incremental,
        }
    }

    /// Handles one response.
    pub fn on_response(&mut self, response: Resources) -> SinkStep {
        if !self.incremental.contains_key(&response.collection) {
            return SinkStep::Reply(self.reply(
                &response.collection,
                &response.nonce,
                Some(RpcStatus {
                    code: CODE_UNIMPLEMENTED,
                    message: format!("unsupported collection {:?}", response.collection),
                    details: vec![],
                }),
            ));
        }
        SinkStep::Apply(Change {
            collection: response.collection,
            version: response.system_version_info,
            resources: response.resources,
            removed: response.removed_resources,
            incremental: response.incremental,
            nonce: response.nonce,
        })
    }

    /// The ACK (on success) or NACK for an applied change.
    pub fn on_applied(
        &mut self,
        collection: &str,
        nonce: &str,
        result: &Result<(), ApplyError>,
    ) -> RequestResources {
        let error = result.as_ref().err().map(|e| RpcStatus {
            code: CODE_INVALID_ARGUMENT,
            message: e.to_string(),
            details: vec![],
        });
        self.reply(collection, nonce, error)
    }

    fn reply(&self, collection: &str, nonce: &str, error: Option<RpcStatus>) -> RequestResources {
        RequestResources {
            sink_node: Some(self.config.node.clone()),
            collection: collection.to_owned(),
            initial_resource_versions: HashMap::new(),
            response_nonce: nonce.to_owned(),
            // ACKs carry the collection's incremental flag; NACKs none (§2.4).
            incremental: error.is_none()
                && self.incremental.get(collection).copied().unwrap_or(false),
            error_detail: error,
        }
    }
}

/// An [`Updater`] keeping everything in memory: the latest state of every
/// collection (used by tests, `meshhubctl` and as the agent's base).
#[derive(Clone, Default)]
pub struct InMemoryUpdater {
    state: Arc<std::sync::Mutex<BTreeMap<String, BTreeMap<String, Resource>>>>,
    changes: Option<tokio::sync::mpsc::UnboundedSender<Change>>,
}

impl InMemoryUpdater {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store that also reports every applied change.
    pub fn with_changes() -> (Self, tokio::sync::mpsc::UnboundedReceiver<Change>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (
            Self {
                changes: Some(tx),
                ..Default::default()
            },
            rx,
        )
    }

    /// The current resources of a collection, by name.
    pub fn collection(&self, collection: &str) -> BTreeMap<String, Resource> {
        self.lock().get(collection).cloned().unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, BTreeMap<String, Resource>>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Applies a change to a name → resource map (full state replaces, a delta
/// upserts and removes).
pub fn apply_change(map: &mut BTreeMap<String, Resource>, change: &Change) {
    if !change.incremental {
        map.clear();
    }
    for name in &change.removed {
        map.remove(name);
    }
    for r in &change.resources {
        let name = r
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        map.insert(name, r.clone());
    }
}

impl Updater for InMemoryUpdater {
    async fn apply(&self, change: Change) -> Result<(), ApplyError> {
        {
            let mut state = self.lock();
            apply_change(state.entry(change.collection.clone()).or_default(), &change);
        }
        if let Some(tx) = &self.changes {
            let _ = tx.send(change);
        }
        Ok(())
    }

    fn held(&self, collection: &str) -> HashMap<String, String> {
        self.lock()
            .get(collection)
            .map(|m| {
                m.iter()
                    .map(|(k, r)| {
                        (
                            k.clone(),
                            r.metadata
                                .as_ref()
                                .map(|m| m.version.clone())
                                .unwrap_or_default(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VS: &str = "istio/networking/v1alpha3/virtualservices";

    fn sink(incremental: bool) -> SinkStream {
        SinkStream::new(Arc::new(SinkConfig {
            node: SinkNode {
                id: "cluster-a".into(),
                annotations: HashMap::new(),
            },
            collections: vec![SinkCollection {
                name: VS.into(),
                incremental,
            }],
        }))
    }

    #[test]
    fn initial_requests_carry_held_versions_only_when_incremental() {
        let held = |_: &str| HashMap::from([("ns/a".to_owned(), "1".to_owned())]);
        let full = sink(false).initial_requests(held);
        assert_eq!(full.len(), 1);
        assert!(full[0].initial_resource_versions.is_empty());
        assert!(full[0].response_nonce.is_empty());
        assert_eq!(full[0].sink_node.as_ref().unwrap().id, "cluster-a");
        let inc = sink(true).initial_requests(held);
        assert!(inc[0].incremental);
        assert_eq!(inc[0].initial_resource_versions.len(), 1);
    }

    #[test]
    fn unknown_collection_and_trigger_are_nacked_unimplemented() {
        let mut s = sink(false);
        for coll in ["$triggerCollection", "other/collection"] {
            let step = s.on_response(Resources {
                collection: coll.into(),
                nonce: "7".into(),
                ..Default::default()
            });
            let SinkStep::Reply(req) = step else {
                panic!("expected a NACK")
            };
            assert_eq!(req.error_detail.as_ref().unwrap().code, CODE_UNIMPLEMENTED);
            assert_eq!(req.response_nonce, "7");
            assert!(!req.incremental);
        }
    }

    #[test]
    fn asking_again_is_a_new_request_with_what_is_held() {
        let held = |_: &str| HashMap::from([("ns/a".to_owned(), "1".to_owned())]);
        let again = sink(true).request_again(VS, held).unwrap();
        assert!(again.response_nonce.is_empty() && again.error_detail.is_none());
        assert_eq!(again.initial_resource_versions.len(), 1);
        assert_eq!(again, sink(true).initial_requests(held).remove(0));
        assert!(sink(true).request_again("other/collection", held).is_none());
    }

    #[test]
    fn ack_has_no_error_detail_and_nack_has_the_reason() {
        let mut s = sink(true);
        let ack = s.on_applied(VS, "3", &Ok(()));
        assert!(ack.error_detail.is_none());
        assert!(ack.incremental);
        assert!(ack.initial_resource_versions.is_empty());
        let nack = s.on_applied(VS, "4", &Err(ApplyError::Invalid("ns/x: bad host".into())));
        let e = nack.error_detail.unwrap();
        assert_eq!(
            (e.code, e.message.as_str()),
            (CODE_INVALID_ARGUMENT, "ns/x: bad host")
        );
        assert!(!nack.incremental);
    }

    #[tokio::test]
    async fn in_memory_updater_applies_full_and_incremental() {
        use meshhub_proto::mcp::Metadata;
        let res = |n: &str, v: &str| Resource {
            metadata: Some(Metadata {
                name: n.into(),
                version: v.into(),
                ..Default::default()
            }),
            body: None,
        };
        let u = InMemoryUpdater::new();
        let change = |resources, removed: Vec<&str>, incremental| Change {
            collection: VS.into(),
            version: "v".into(),
            resources,
            removed: removed.into_iter().map(String::from).collect(),
            incremental,
            nonce: "1".into(),
        };
        u.apply(change(vec![res("a", "1"), res("b", "1")], vec![], false))
            .await
            .unwrap();
        u.apply(change(vec![res("c", "1")], vec!["a"], true))
            .await
            .unwrap();
        let keys: Vec<String> = u.collection(VS).into_keys().collect();
        assert_eq!(keys, ["b", "c"]);
        u.apply(change(vec![res("d", "1")], vec![], false))
            .await
            .unwrap();
        assert_eq!(
            u.held(VS),
            HashMap::from([("d".to_owned(), "1".to_owned())])
        );
    }
}

//! A consumer that watches one collection continuously, as istiod does:
//! an MCP sink stream (full state) to an agent's re-serve port or to the
//! hub, keeping every state it received. The tests read it to say what a
//! consumer *saw*, not what a poll happened to find: once names are
//! [`Watcher::guard`]ed, any state without one of them is recorded
//! ([`Watcher::lost`]), however briefly it was held.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use meshhub_mcp::ledger::{Ledger, Role};
use meshhub_mcp::sink::client::{SourceTarget, connect_once};
use meshhub_mcp::sink::{ApplyError, Change, SinkCollection, SinkConfig, Updater};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::Resource;
use meshhub_proto::object::Object;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;

/// The message limit of the stream.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// A state without some guarded names.
#[derive(Clone, Debug)]
pub struct Lost {
    /// Which change (1: the first state received).
    pub change: u64,
    /// The collection's version then.
    pub version: String,
    /// The guarded names it lacked (at most 10 of them).
    pub missing: Vec<String>,
    /// How many it lacked.
    pub count: usize,
    /// When it came.
    pub at: Instant,
}

#[derive(Debug, Default)]
struct State {
    current: BTreeMap<String, Resource>,
    version: String,
    changes: u64,
    guarded: BTreeSet<String>,
    lost: Vec<Lost>,
    /// Every state received, when kept.
    history: Option<Vec<BTreeMap<String, Resource>>>,
}

struct Inner {
    collection: String,
    state: Mutex<State>,
    changed: watch::Sender<u64>,
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The stream's updater (a local type over the shared state).
struct Sink(Arc<Inner>);

impl Updater for Sink {
    async fn apply(&self, change: Change) -> Result<(), ApplyError> {
        if change.collection != self.0.collection {
            return Err(ApplyError::Invalid(format!(
                "not subscribed: {}",
                change.collection
            )));
        }
        let n = {
            let mut s = self.0.lock();
            meshhub_mcp::sink::apply_change(&mut s.current, &change);
            s.changes += 1;
            s.version = change.version.clone();
            let missing: Vec<String> = s
                .guarded
                .iter()
                .filter(|n| !s.current.contains_key(*n))
                .cloned()
                .collect();
            if !missing.is_empty() {
                let lost = Lost {
                    change: s.changes,
                    version: change.version.clone(),
                    count: missing.len(),
                    missing: missing.into_iter().take(10).collect(),
                    at: Instant::now(),
                };
                s.lost.push(lost);
            }
            let now = s.current.clone();
            if let Some(h) = s.history.as_mut() {
                h.push(now);
            }
            s.changes
        };
        self.0.changed.send_replace(n);
        Ok(())
    }

    fn held(&self, _: &str) -> HashMap<String, String> {
        // A new stream starts from nothing: the full state is what counts.
        HashMap::new()
    }
}

/// A continuous consumer of one collection; stops when dropped.
pub struct Watcher {
    inner: Arc<Inner>,
    changed: watch::Receiver<u64>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<String>>,
}

impl Watcher {
    /// Subscribes to `collection` (full state) at `addr` as node `node_id`;
    /// `history`: keep every state received.
    pub fn start(addr: SocketAddr, node_id: &str, collection: &str, history: bool) -> Self {
        let (changed_tx, changed) = watch::channel(0);
        let inner = Arc::new(Inner {
            collection: collection.to_owned(),
            state: Mutex::new(State {
                history: history.then(Vec::new),
                ..State::default()
            }),
            changed: changed_tx,
        });
        let target = SourceTarget {
            name: format!("watcher/{node_id}"),
            endpoint: meshhub_mcp::dial::DialTarget::plaintext(
                Endpoint::from_shared(format!("http://{addr}")).expect("a loopback URI"),
            ),
            config: Arc::new(SinkConfig {
                node: meshhub_proto::mcp::SinkNode {
                    id: node_id.to_owned(),
                    annotations: HashMap::new(),
                },
                collections: vec![SinkCollection {
                    name: collection.to_owned(),
                    incremental: false,
                }],
            }),
            reconnect: Default::default(),
            max_message_bytes: MAX_MESSAGE,
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let sink = Sink(inner.clone());
            let stop = stop.clone();
            async move {
                let record = Ledger::new().register(Role::Sink, target.name.clone(), "");
                let end = connect_once(&target, &sink, &record, &stop).await;
                format!("{end:?}")
            }
        });
        Self {
            inner,
            changed,
            stop,
            task: Some(task),
        }
    }

    /// What it holds now.
    pub fn current(&self) -> BTreeMap<String, Resource> {
        self.inner.lock().current.clone()
    }

    /// The names it holds now.
    pub fn names(&self) -> BTreeSet<String> {
        self.inner.lock().current.keys().cloned().collect()
    }

    /// How many states it received.
    pub fn changes(&self) -> u64 {
        self.inner.lock().changes
    }

    /// Every state received so far (kept only when started with
    /// `history`).
    pub fn history(&self) -> Vec<BTreeMap<String, Resource>> {
        self.inner.lock().history.clone().unwrap_or_default()
    }

    /// From now on, every state received must hold `names` (they must be
    /// held now).
    pub fn guard(&self, names: impl IntoIterator<Item = String>) {
        let mut s = self.inner.lock();
        s.guarded.extend(names);
        let missing: Vec<&String> = s
            .guarded
            .iter()
            .filter(|n| !s.current.contains_key(*n))
            .take(10)
            .collect();
        assert!(missing.is_empty(), "guarded but not held: {missing:?}");
    }

    /// Stops guarding `name` (it is about to go, on purpose).
    pub fn unguard(&self, name: &str) {
        self.inner.lock().guarded.remove(name);
    }

    /// The states received without some guarded names.
    pub fn lost(&self) -> Vec<Lost> {
        self.inner.lock().lost.clone()
    }

    /// Whether its stream still runs (`Err`: how it ended).
    pub fn running(&self) -> Result<(), String> {
        if self
            .task
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            Err("the stream ended".to_owned())
        } else {
            Ok(())
        }
    }

    /// Waits (at most [`meshhub_testkit::DEADLINE`]) until what it holds
    /// satisfies `check`, looking at each state it receives.
    pub async fn wait(&mut self, what: &str, check: impl Fn(&BTreeMap<String, Resource>) -> bool) {
        self.wait_within(what, meshhub_testkit::DEADLINE, check)
            .await;
    }

    /// [`Watcher::wait`], at most `within`.
    pub async fn wait_within(
        &mut self,
        what: &str,
        within: std::time::Duration,
        check: impl Fn(&BTreeMap<String, Resource>) -> bool,
    ) {
        let wait = async {
            loop {
                if check(&self.inner.lock().current) {
                    return;
                }
                self.changed
                    .changed()
                    .await
                    .expect("the watcher's state outlives its stream");
            }
        };
        if tokio::time::timeout(within, wait).await.is_err() {
            let s = self.inner.lock();
            panic!(
                "{}: timed out after {within:?} waiting for {what}; it holds {} (version {}, {} changes): {:?}",
                self.inner.collection,
                s.current.len(),
                s.version,
                s.changes,
                s.current.keys().take(20).collect::<Vec<_>>()
            );
        }
    }

    /// Ends the stream and says how it ended.
    pub async fn stop(mut self) -> String {
        self.stop.cancel();
        let Some(task) = self.task.take() else {
            return "stopped before".to_owned();
        };
        match tokio::time::timeout(meshhub_testkit::DEADLINE, task).await {
            Ok(Ok(end)) => end,
            Ok(Err(e)) => format!("the watcher task failed: {e}"),
            Err(_) => "the watcher did not stop".to_owned(),
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A resource of `collection` as an object (its body decoded through the
/// built-in kind table).
pub fn object(collection: &str, r: &Resource) -> Object {
    let kinds = KindTable::builtin();
    let kind = kinds
        .by_collection(collection)
        .unwrap_or_else(|| panic!("no kind for {collection}"));
    meshhub_proto::transcode::resource_to_object(kind, r)
        .unwrap_or_else(|e| panic!("{collection}: undecodable resource: {e}"))
}

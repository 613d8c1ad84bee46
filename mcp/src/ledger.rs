//! The ACK/NACK ledger: per peer and collection, what was sent, ACKed and
//! NACKed, and when; per peer, when it connected and why it disconnected.
//!
//! Each stream (or dialer) owns its [`PeerRecord`] and is its only writer;
//! the [`Ledger`] hands out plain snapshots ([`PeerStatus`]) to status pages
//! and the CLI. Disconnected peers stay visible for a while (the newest
//! [`RETAINED_DISCONNECTED`]).

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokio::sync::{broadcast, watch};

use crate::event::Event;

/// How many disconnected peers stay listed.
pub const RETAINED_DISCONNECTED: usize = 256;
/// How many delivery results a slow [`Ledger::deliveries`] subscriber may
/// fall behind before it loses the oldest ones.
pub const DELIVERY_BACKLOG: usize = 1024;

/// Histogram (label `role`): from a response sent (source) or received
/// (sink) to its ACK — on the hub's dial-out, a push's round trip through
/// the agent, the fan-out latency dashboards show.
pub const METRIC_ACK_SECONDS: &str = "meshhub_mcp_ack_seconds";

/// The answer a peer gave to one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    /// Accepted.
    Ack,
    /// Rejected.
    Nack,
}

/// One delivery result (an ACK or a NACK), as [`Ledger::deliveries`]
/// subscribers see it: for audit logs, without making the engine know
/// about them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// Our role on the stream.
    pub role: Role,
    /// The peer (a consumer's address, a dialed cluster's name).
    pub peer: String,
    /// The node id it announced.
    pub node_id: String,
    /// The group served or received.
    pub group: String,
    /// The collection.
    pub collection: String,
    /// The version answered.
    pub version: String,
    /// ACK or NACK.
    pub outcome: Outcome,
    /// The gRPC code of a NACK.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// The peer's message with a NACK.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Which side of the protocol we play on a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// We serve resources (the peer is a sink).
    Source,
    /// We receive resources (the peer is a source).
    Sink,
}

impl Role {
    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Source => "source",
            Self::Sink => "sink",
        }
    }
}

/// Sync state of one collection with one peer (as `istioctl proxy-status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SyncState {
    /// Nothing sent yet.
    #[default]
    NotSent,
    /// Sent, not yet ACKed.
    Stale,
    /// The last version sent was ACKed.
    Synced,
    /// The last version sent was NACKed.
    Nacked,
    /// The current version could not be sent (too large).
    Blocked,
    /// ACKed, but the cluster's istiod does not hold some of its objects
    /// (istiod ACKs what its validation refuses). Never derived by the
    /// ledger: the hub sets it from the cluster's upward report.
    Dropped,
}

impl SyncState {
    /// The state's name as the ledger shows it (`NOT_SENT`, `SYNCED`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotSent => "NOT_SENT",
            Self::Stale => "STALE",
            Self::Synced => "SYNCED",
            Self::Nacked => "NACKED",
            Self::Blocked => "BLOCKED",
            Self::Dropped => "DROPPED",
        }
    }
}

impl std::fmt::Display for SyncState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The protocol of a stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StreamProtocol {
    /// MCP (`ResourceSource` / `ResourceSink`).
    #[default]
    #[serde(rename = "mcp")]
    Mcp,
    /// State-of-the-world MCP-over-xDS (istiod's `xds://` config source).
    #[serde(rename = "ads")]
    Ads,
    /// Delta MCP-over-xDS.
    #[serde(rename = "delta-ads")]
    DeltaAds,
    /// A name this version does not know (read from a newer process's
    /// JSON: one new protocol must not make the whole document unreadable).
    /// Never recorded by the ledger.
    #[serde(other, rename = "unknown")]
    Unknown,
}

impl StreamProtocol {
    /// Its name: `mcp`, `ads` or `delta-ads` (also the metrics' label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mcp => "mcp",
            Self::Ads => "ads",
            Self::DeltaAds => "delta-ads",
            Self::Unknown => "unknown",
        }
    }

    /// MCP-over-xDS, either form: what istiod's `xds://` speaks.
    pub fn is_xds(self) -> bool {
        matches!(self, Self::Ads | Self::DeltaAds)
    }
}

impl std::fmt::Display for StreamProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A point in time, shown as RFC 3339.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At(pub SystemTime);

impl Serialize for At {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_rfc3339_millis(self.0))
    }
}

impl<'de> Deserialize<'de> for At {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // What `serialize` wrote (readers of the status pages, meshhubctl).
        let text = String::deserialize(d)?;
        humantime::parse_rfc3339(&text)
            .map(At)
            .map_err(serde::de::Error::custom)
    }
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        humantime::format_rfc3339_seconds(self.0).fmt(f)
    }
}

fn now() -> At {
    At(SystemTime::now())
}

/// A version and when it happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versioned {
    /// Collection version.
    pub version: String,
    /// Response nonce.
    pub nonce: String,
    /// When.
    pub at: At,
}

/// A rejection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    /// Rejected version.
    pub version: String,
    /// gRPC code of `error_detail`.
    pub code: i32,
    /// The peer's message.
    pub message: String,
    /// When.
    pub at: At,
}

/// One collection with one peer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionStatus {
    /// Last response sent (source) or received (sink).
    pub sent: Option<Versioned>,
    /// Last ACK received (source) or sent (sink).
    pub acked: Option<Versioned>,
    /// Last NACK received (source) or sent (sink).
    pub nacked: Option<Rejection>,
    /// A version that could not be sent, and why.
    pub blocked: Option<Rejection>,
    /// ACKs counted.
    pub acks: u64,
    /// NACKs counted.
    pub nacks: u64,
    /// Stale ACK/NACKs ignored.
    pub stale: u64,
    /// Derived state.
    pub state: SyncState,
}

impl CollectionStatus {
    fn derive_state(&mut self) {
        let sent = self.sent.as_ref();
        self.state = match (sent, &self.blocked) {
            (_, Some(b)) if sent.is_none_or(|s| s.at.0 <= b.at.0) => SyncState::Blocked,
            (None, _) => SyncState::NotSent,
            (Some(s), _) => {
                if self.acked.as_ref().is_some_and(|a| a.nonce == s.nonce) {
                    SyncState::Synced
                } else if self
                    .nacked
                    .as_ref()
                    .is_some_and(|n| n.version == s.version && n.at.0 >= s.at.0)
                {
                    SyncState::Nacked
                } else {
                    SyncState::Stale
                }
            }
        };
    }
}

/// Everything known about one peer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerStatus {
    /// Unique within the process.
    pub id: u64,
    /// Our role.
    pub role: Role,
    /// The protocol of the stream.
    pub protocol: StreamProtocol,
    /// The peer: remote address of a dial-in consumer, or the name of a
    /// dialed cluster.
    pub peer: String,
    /// `SinkNode.id` (or the xDS node id) it announced.
    pub node_id: String,
    /// Snapshot group served or received.
    pub group: String,
    /// Whether a stream is up.
    pub connected: bool,
    /// When the current (or last) stream came up.
    pub connected_since: Option<At>,
    /// When it went down.
    pub disconnected_at: Option<At>,
    /// Why the last stream ended or the last dial failed.
    pub last_error: Option<String>,
    /// Streams opened (dialers reconnect).
    pub streams: u64,
    /// Per collection.
    pub collections: BTreeMap<String, CollectionStatus>,
    /// The replica of a meshhub hub that pushes on this stream (its
    /// `meshhub-replica` request metadata), when it sent one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// What the peer's node announced of [`NODE_META_KEPT`] (xDS node
    /// metadata, `SinkNode` annotations).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_meta: BTreeMap<String, String>,
}

/// The node metadata a record keeps (the rest is dropped: a record lives as
/// long as its stream, and its size is an idle stream's memory): the
/// Istio release and revision an istiod or proxy announces.
pub const NODE_META_KEPT: &[&str] = &["ISTIO_VERSION", "ISTIO_REVISION"];

/// One collection as a record keeps it: the rare parts boxed, the state
/// derived when someone looks.
#[derive(Clone, Debug, Default)]
struct Entry {
    sent: Option<Versioned>,
    acked: Option<Versioned>,
    nacked: Option<Box<Rejection>>,
    blocked: Option<Box<Rejection>>,
    acks: u64,
    nacks: u64,
    stale: u64,
}

impl Entry {
    fn status(&self) -> CollectionStatus {
        let mut c = CollectionStatus {
            sent: self.sent.clone(),
            acked: self.acked.clone(),
            nacked: self.nacked.as_deref().cloned(),
            blocked: self.blocked.as_deref().cloned(),
            acks: self.acks,
            nacks: self.nacks,
            stale: self.stale,
            state: SyncState::NotSent,
        };
        c.derive_state();
        c
    }
}

/// What a [`PeerRecord`] keeps: its peer's status in a compact form. Every
/// stream holds one for its whole life, so its size is a large part of an
/// idle stream's memory: the collections are one sorted vector (a
/// `BTreeMap` of full [`CollectionStatus`]es took ~11 KiB for 14
/// collections), and a [`PeerStatus`] is built only when someone looks.
#[derive(Debug)]
struct Record {
    /// Everything but the collections (`head.collections` stays empty).
    head: PeerStatus,
    /// By name.
    collections: Vec<(Box<str>, Entry)>,
    /// Where the last event's collection is in `collections`.
    last: usize,
}

impl Record {
    fn status(&self) -> PeerStatus {
        let mut s = self.head.clone();
        s.collections = self
            .collections
            .iter()
            .map(|(name, e)| (name.to_string(), e.status()))
            .collect();
        s
    }

    fn entry(&mut self, collection: &str) -> &mut Entry {
        // A response's ACK follows it: the collection of the last event is
        // tried first (one comparison where a search takes several).
        if let Some((name, _)) = self.collections.get(self.last)
            && **name == *collection
        {
            return &mut self.collections[self.last].1;
        }
        let i = match self
            .collections
            .binary_search_by(|(name, _)| (**name).cmp(collection))
        {
            Ok(i) => i,
            Err(i) => {
                self.collections
                    .insert(i, (collection.into(), Entry::default()));
                i
            }
        };
        self.last = i;
        &mut self.collections[i].1
    }
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    live: BTreeMap<u64, watch::Receiver<Record>>,
    gone: VecDeque<PeerStatus>,
}

/// Read handle on every peer's status; cheap to clone.
#[derive(Clone)]
pub struct Ledger {
    inner: Arc<Mutex<Registry>>,
    deliveries: broadcast::Sender<Delivery>,
    /// Bumped on every change of any peer's record.
    changes: Arc<watch::Sender<u64>>,
}

impl std::fmt::Debug for Ledger {
    /// The handle only; `peers()` reads the state.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ledger")
    }
}

impl Default for Ledger {
    fn default() -> Self {
        Self {
            inner: Arc::default(),
            deliveries: broadcast::channel(DELIVERY_BACKLOG).0,
            changes: Arc::new(watch::Sender::new(0)),
        }
    }
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every ACK and NACK recorded from now on. Recording never waits for
    /// a subscriber: one that falls more than [`DELIVERY_BACKLOG`] behind
    /// is told how many it lost (`RecvError::Lagged`).
    pub fn deliveries(&self) -> broadcast::Receiver<Delivery> {
        self.deliveries.subscribe()
    }

    /// A counter bumped on every change of any peer's record — one
    /// registered, connected or disconnected, identified, a version sent,
    /// ACKed or NACKed, one gone: what a reader of [`Ledger::view`] waits
    /// for instead of polling it (the ACKs and NACKs themselves are in
    /// [`Ledger::deliveries`]).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a peer; the returned record is its only writer.
    pub fn register(
        &self,
        role: Role,
        peer: impl Into<String>,
        group: impl Into<String>,
    ) -> PeerRecord {
        let mut reg = self.lock();
        reg.next_id += 1;
        let id = reg.next_id;
        let status = PeerStatus {
            id,
            role,
            protocol: StreamProtocol::Mcp,
            peer: peer.into(),
            node_id: String::new(),
            group: group.into(),
            connected: false,
            connected_since: None,
            disconnected_at: None,
            last_error: None,
            streams: 0,
            collections: BTreeMap::new(),
            replica: None,
            node_meta: BTreeMap::new(),
        };
        let (tx, rx) = watch::channel(Record {
            head: status,
            collections: Vec::new(),
            last: 0,
        });
        reg.live.insert(id, rx);
        drop(reg);
        self.changed();
        PeerRecord {
            tx,
            ledger: self.clone(),
        }
    }

    /// The names of the peers of `role` whose last stream failed (live or
    /// retained), read without building any peer's status: what a reader
    /// asking only that wants at 10,000 peers, where [`Ledger::view`]
    /// copies every collection of every peer.
    pub fn failed(&self, role: Role) -> HashSet<String> {
        let reg = self.lock();
        let live = reg.live.values().filter_map(|rx| {
            let r = rx.borrow();
            (r.head.role == role && r.head.last_error.is_some()).then(|| r.head.peer.clone())
        });
        let live: Vec<String> = live.collect();
        reg.gone
            .iter()
            .filter(|p| p.role == role && p.last_error.is_some())
            .map(|p| p.peer.clone())
            .chain(live)
            .collect()
    }

    /// A snapshot of every live peer, then the retained disconnected ones
    /// (newest first).
    pub fn view(&self) -> Vec<PeerStatus> {
        self.view_of(|_| true)
    }

    /// [`Ledger::view`] of the peers `keep` chooses by everything but
    /// their collections (which it must not read: a live peer's are not
    /// built when it looks): only those peers' statuses are built, where a
    /// whole view at 10,000 peers copies every collection of every one.
    pub fn view_of(&self, keep: impl Fn(&PeerStatus) -> bool) -> Vec<PeerStatus> {
        let reg = self.lock();
        let mut out: Vec<PeerStatus> = reg
            .live
            .values()
            .filter_map(|rx| {
                let r = rx.borrow();
                keep(&r.head).then(|| r.status())
            })
            .collect();
        out.extend(reg.gone.iter().rev().filter(|p| keep(p)).cloned());
        out
    }
}

/// The writer of one peer's status.
pub struct PeerRecord {
    tx: watch::Sender<Record>,
    ledger: Ledger,
}

impl PeerRecord {
    /// The current status.
    pub fn status(&self) -> PeerStatus {
        self.tx.borrow().status()
    }

    /// Whether a stream is up (without building the whole status).
    pub fn is_connected(&self) -> bool {
        self.tx.borrow().head.connected
    }

    /// A stream came up.
    pub fn connected(&self) {
        self.update(|s| {
            s.head.connected = true;
            s.head.connected_since = Some(now());
            s.head.disconnected_at = None;
            s.head.streams += 1;
        });
        metrics::counter!("meshhub_mcp_streams_opened_total", "role" => self.role().as_str())
            .increment(1);
    }

    /// A stream ended or a dial failed.
    pub fn disconnected(&self, error: Option<String>) {
        // A dial failing again as before (every backoff step) changes
        // nothing a reader shows: no change to announce.
        let same = {
            let r = self.tx.borrow();
            !r.head.connected && (error.is_none() || error == r.head.last_error)
        };
        if same {
            return;
        }
        self.update(|s| {
            if s.head.connected {
                s.head.disconnected_at = Some(now());
            }
            s.head.connected = false;
            if error.is_some() {
                s.head.last_error = error;
            }
        });
    }

    /// Records the protocol the stream speaks (when not MCP).
    pub fn protocol(&self, protocol: StreamProtocol) {
        self.update(|s| s.head.protocol = protocol);
    }

    /// Records the node the peer announced, and the group it was placed in.
    pub fn identify(&self, node_id: &str, group: &str) {
        self.update(|s| {
            s.head.node_id = node_id.to_owned();
            s.head.group = group.to_owned();
        });
    }

    /// Records what the peer's node announced of [`NODE_META_KEPT`].
    pub fn node_meta<'a>(&self, meta: impl IntoIterator<Item = (&'a String, &'a String)>) {
        let kept: BTreeMap<String, String> = meta
            .into_iter()
            .filter(|(k, _)| NODE_META_KEPT.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !kept.is_empty() {
            self.update(|s| s.head.node_meta = kept);
        }
    }

    /// Records the hub replica that pushes on this stream.
    pub fn replica(&self, replica: &str) {
        self.update(|s| s.head.replica = Some(replica.to_owned()));
    }

    /// Changes the record, and says so to the ledger's readers.
    fn update(&self, f: impl FnOnce(&mut Record)) {
        self.tx.send_modify(f);
        self.ledger.changed();
    }

    fn role(&self) -> Role {
        self.tx.borrow().head.role
    }

    fn announce(
        &self,
        collection: &str,
        version: &str,
        outcome: Outcome,
        nack: Option<(i32, &str)>,
    ) {
        if self.ledger.deliveries.receiver_count() == 0 {
            return;
        }
        let s = &self.tx.borrow().head;
        // No receiver left is not an error: nobody audits.
        let _ = self.ledger.deliveries.send(Delivery {
            role: s.role,
            peer: s.peer.clone(),
            node_id: s.node_id.clone(),
            group: s.group.clone(),
            collection: collection.to_owned(),
            version: version.to_owned(),
            outcome,
            code: nack.map(|(c, _)| c),
            message: nack.map(|(_, m)| m.to_owned()),
        });
    }

    fn collection(&self, collection: &str, f: impl FnOnce(&mut Entry)) {
        self.update(|s| f(s.entry(collection)));
    }

    /// Records a source-side event.
    pub fn record(&self, event: &Event) {
        let role = self.role().as_str();
        match event {
            Event::Subscribed { collection, .. } => self.collection(collection, |_| {}),
            Event::Sent {
                collection,
                version,
                nonce,
                bytes,
                ..
            } => {
                self.sent(collection, version, nonce);
                metrics::counter!("meshhub_mcp_responses_total", "role" => role, "collection" => collection.clone()).increment(1);
                metrics::histogram!("meshhub_mcp_response_bytes", "collection" => collection.clone()).record(*bytes as f64);
            }
            Event::Acked {
                collection,
                version,
                nonce,
            } => self.acked(collection, version, nonce),
            Event::Nacked {
                collection,
                version,
                code,
                message,
                ..
            } => self.nacked(collection, version, *code, message),
            Event::Stale { collection, .. } => {
                self.collection(collection, |c| c.stale += 1);
                metrics::counter!("meshhub_mcp_stale_total", "role" => role, "collection" => collection.clone()).increment(1);
            }
            Event::TooLarge {
                collection,
                version,
                bytes,
                limit,
            } => {
                let message =
                    format!("response of {bytes} bytes exceeds the peer's limit of {limit}");
                self.collection(collection, |c| {
                    c.blocked = Some(Box::new(Rejection {
                        version: version.clone(),
                        code: 8,
                        message,
                        at: now(),
                    }))
                });
                metrics::counter!("meshhub_mcp_oversized_total", "collection" => collection.clone()).increment(1);
            }
        }
    }

    /// A response was sent (source) or received (sink).
    pub fn sent(&self, collection: &str, version: &str, nonce: &str) {
        self.collection(collection, |c| {
            c.sent = Some(Versioned {
                version: version.to_owned(),
                nonce: nonce.to_owned(),
                at: now(),
            });
            c.blocked = None;
        });
    }

    /// An ACK was received (source) or sent (sink).
    pub fn acked(&self, collection: &str, version: &str, nonce: &str) {
        let mut took = None;
        self.collection(collection, |c| {
            took = c
                .sent
                .as_ref()
                .filter(|s| s.nonce == nonce)
                .and_then(|s| SystemTime::now().duration_since(s.at.0).ok());
            c.acked = Some(Versioned {
                version: version.to_owned(),
                nonce: nonce.to_owned(),
                at: now(),
            });
            c.acks += 1;
        });
        self.announce(collection, version, Outcome::Ack, None);
        metrics::counter!("meshhub_mcp_acks_total", "role" => self.role().as_str(), "collection" => collection.to_owned()).increment(1);
        if let Some(took) = took {
            metrics::histogram!(METRIC_ACK_SECONDS, "role" => self.role().as_str())
                .record(took.as_secs_f64());
        }
    }

    /// A NACK was received (source) or sent (sink).
    pub fn nacked(&self, collection: &str, version: &str, code: i32, message: &str) {
        self.collection(collection, |c| {
            c.nacked = Some(Box::new(Rejection {
                version: version.to_owned(),
                code,
                message: message.to_owned(),
                at: now(),
            }));
            c.nacks += 1;
        });
        self.announce(collection, version, Outcome::Nack, Some((code, message)));
        metrics::counter!("meshhub_mcp_nacks_total", "role" => self.role().as_str(), "collection" => collection.to_owned(), "code" => code.to_string()).increment(1);
    }
}

impl Drop for PeerRecord {
    fn drop(&mut self) {
        let mut status = self.tx.borrow().status();
        if status.connected {
            status.connected = false;
            status.disconnected_at = Some(now());
        }
        let mut reg = self.ledger.lock();
        reg.live.remove(&status.id);
        reg.gone.push_back(status);
        while reg.gone.len() > RETAINED_DISCONNECTED {
            reg.gone.pop_front();
        }
        drop(reg);
        self.ledger.changed();
    }
}

#[cfg(test)]
mod tests;

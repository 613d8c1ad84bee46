//! The upstream MCP source: subscribes, as a sink, to another
//! `istio.mcp.v1alpha1.ResourceSource` (Istio 1.5 Galley, another meshhub,
//! an MCP server of Nacos or Higress) and delivers what it serves as
//! objects, which then go through the same transcoding, validation,
//! precedence and grouping as files and Kubernetes objects.
//!
//! * **Transport** is the engine's sink client ([`connect_once`]) in the
//!   engine's reconnect loop ([`reconnect_loop`]: exponential backoff with
//!   full jitter, reset after a healthy stream).
//! * **Units**: one per object, `<collection>/<namespace>/<name>` (the MCP
//!   name after the collection). A full-state response replaces the
//!   collection: objects missing from it are removed (empty units); an
//!   incremental one upserts and removes. An object whose content did not
//!   change is not sent again.
//! * **Objects**: the body is decoded with the kind's schema back into an
//!   object ([`transcode::resource_to_object`]); `metadata.name`
//!   (`namespace/name`) gives namespace and name, `metadata.version` the
//!   resource version (so the hub serves the upstream's versions), labels,
//!   annotations and create time are kept.
//! * **A resource that can't be decoded** is an entry with an error
//!   (reported on `/status`, served to no one) and the response is ACKed:
//!   one bad object never makes the upstream withhold the others, and
//!   NACKing would only park the collection at the upstream.
//! * **Readiness**: [`SourceEvent::Synced`] once every subscribed collection
//!   was answered (even empty) or refused.
//! * **Refused collections**: a collection the upstream does not serve and
//!   refuses by ending the stream (Galley 1.5: `INVALID_ARGUMENT
//!   unsupported collection "…"`; or `UNIMPLEMENTED`/`NOT_FOUND` naming it)
//!   is dropped from the subscription, its objects removed, and reported as
//!   a problem; the others go on at once. It is asked for again after the
//!   next disconnection for another reason (the upstream may have been
//!   upgraded).
//! * **Disconnections** keep the objects last received (a reconnect's full
//!   state reconciles them) and are reported as the problem
//!   `disconnected from <address>: <reason>` until a response arrives on a
//!   new stream.
//! * **A collection never answered** (a server that silently ignores what
//!   it does not serve) keeps the hub unready and is reported as a problem
//!   after [`UNANSWERED_AFTER`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use meshhub_mcp::dial::DialTarget;
use meshhub_mcp::ledger::{Ledger, PeerRecord, Role};
use meshhub_mcp::reconnect::{Attempt, Backoff, ReconnectPolicy, reconnect_loop};
use meshhub_mcp::sink::client::{SourceTarget, connect_once};
use meshhub_mcp::sink::{ApplyError, Change, SinkCollection, SinkConfig, Updater};
use meshhub_mcp::source::drive::{End, settle};
use meshhub_mcp::transport::DialError;
use meshhub_proto::kinds::{Kind, KindTable};
use meshhub_proto::mcp::{Resource, SinkNode};
use meshhub_proto::object::Object;
use meshhub_proto::transcode;
use meshhub_runtime::error_chain;
use prost::Message as _;
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tracing::{Instrument as _, debug, info, warn};

use super::{Entry, Origin, Source, SourceError, SourceEvent};

pub mod spec;

pub use spec::McpSourceSpec;

/// How long a stream may leave a subscribed collection unanswered before
/// that is reported.
pub const UNANSWERED_AFTER: Duration = Duration::from_secs(15);

/// Status codes with which an upstream refuses a collection it does not
/// serve, when the message names the collection.
const REFUSAL_CODES: [Code; 3] = [Code::InvalidArgument, Code::Unimplemented, Code::NotFound];

/// A subscribed upstream `ResourceSource`.
pub struct McpSource {
    name: Arc<str>,
    address: String,
    endpoint: DialTarget,
    kinds: KindTable,
    collections: Vec<String>,
    node: SinkNode,
    incremental: bool,
    reconnect: ReconnectPolicy,
    max_message_bytes: usize,
    ledger: Ledger,
}

impl std::fmt::Debug for McpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSource")
            .field("name", &self.name)
            .field("address", &self.address)
            .field("collections", &self.collections.len())
            .finish_non_exhaustive()
    }
}

impl McpSource {
    /// A source as configured: decodes with `kinds`, records its stream in
    /// `ledger` (role sink), accepts messages up to `max_message_bytes`.
    /// Fails when the endpoint can't be built (the TLS files are read here).
    pub fn new(
        spec: &McpSourceSpec,
        kinds: &KindTable,
        ledger: Ledger,
        max_message_bytes: usize,
    ) -> Result<Self, SourceError> {
        // The TLS files are checked now and read again at every connection
        // attempt (rotated client certificates are used by the next one).
        let endpoint = spec.dial.target().map_err(|e| SourceError::Endpoint {
            source_name: spec.name.clone(),
            address: spec.dial.address.clone(),
            source: e.into(),
        })?;
        Ok(Self {
            name: Arc::from(spec.name.as_str()),
            address: spec.dial.address.clone(),
            endpoint,
            kinds: kinds.clone(),
            collections: spec.collections.clone(),
            node: SinkNode {
                id: spec.node_id.clone(),
                annotations: HashMap::new(),
            },
            incremental: spec.incremental,
            reconnect: spec.dial.reconnect.clone(),
            max_message_bytes,
            ledger,
        })
    }

    async fn run_inner(
        self,
        events: mpsc::Sender<SourceEvent>,
        shutdown: CancellationToken,
    ) -> Result<(), SourceError> {
        let record = self.ledger.register(Role::Sink, self.address.clone(), "");
        record.identify(&self.node.id, "");
        // Stops the loop on shutdown, or when the pipeline is gone.
        let stop = shutdown.child_token();
        let forward = Forward {
            state: Mutex::new(State::new(
                self.name.clone(),
                self.address.clone(),
                self.kinds.clone(),
                self.collections.clone(),
            )),
            events,
            stop: stop.clone(),
            gone: AtomicBool::new(false),
        };
        info!(collections = self.collections.len(), "subscribing");
        let (me, fw, rec, st) = (&self, &forward, &record, &stop);
        reconnect_loop(
            Backoff::new(self.reconnect.clone()),
            &stop,
            move || async move { me.attempt(fw, rec, st).await },
            |delay| {
                metrics::counter!("meshhub_mcp_reconnects_total", "role" => "sink", "peer" => self.name.to_string()).increment(1);
                debug!(?delay, "reconnecting after backoff");
            },
        )
        .await;
        if forward.gone.load(Ordering::Relaxed) && !shutdown.is_cancelled() {
            return Err(SourceError::PipelineGone(self.name.to_string()));
        }
        Ok(())
    }

    /// One stream: subscribe to what is not refused, apply until it ends,
    /// then say how it ended.
    async fn attempt(
        &self,
        forward: &Forward,
        record: &PeerRecord,
        stop: &CancellationToken,
    ) -> Attempt {
        let collections = forward.lock().subscription(self.incremental);
        if collections.is_empty() {
            // Everything refused: nothing to ask for until the next start.
            stop.cancelled().await;
            return Attempt::Stop;
        }
        let target = SourceTarget {
            name: self.name.to_string(),
            endpoint: self.endpoint.clone(),
            config: Arc::new(SinkConfig {
                node: self.node.clone(),
                collections,
            }),
            reconnect: self.reconnect.clone(),
            max_message_bytes: self.max_message_bytes,
        };
        let stream = connect_once(&target, forward, record, stop);
        tokio::pin!(stream);
        let mut deadline = tokio::time::Instant::now() + UNANSWERED_AFTER;
        let mut watched = false;
        let outcome = loop {
            tokio::select! {
                outcome = &mut stream => break outcome,
                () = tokio::time::sleep_until(deadline), if !watched => {
                    if !record.is_connected() {
                        // Still connecting: that is not the upstream's silence.
                        deadline += UNANSWERED_AFTER;
                        continue;
                    }
                    watched = true;
                    let events = forward.lock().note_unanswered();
                    forward.emit(events).await;
                }
            }
        };
        let ended = match &outcome {
            Ok((End::Shutdown, _)) => None,
            Ok((End::Failed(status), _)) => Some(Ended::Status {
                code: status.code(),
                message: status.message().to_owned(),
            }),
            Ok((end, _)) => {
                Some(Ended::Other(end.error().unwrap_or_else(|| {
                    "the upstream closed the stream".to_owned()
                })))
            }
            Err(DialError::Refused(status)) => Some(Ended::Status {
                code: status.code(),
                message: status.message().to_owned(),
            }),
            Err(e) => Some(Ended::Other(e.to_string())),
        };
        let refused = match ended {
            None => false,
            Some(ended) => {
                let (events, refused) = forward.lock().on_ended(&ended);
                forward.emit(events).await;
                refused
            }
        };
        match settle(outcome, record, "upstream") {
            // Progress: go on with the other collections soon.
            Attempt::Failed if refused => Attempt::Healthy,
            verdict => verdict,
        }
    }
}

impl Source for McpSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(
        self: Box<Self>,
        events: mpsc::Sender<SourceEvent>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), SourceError>> {
        let span = tracing::info_span!("source.mcp", source.name = %self.name, upstream.addr = %self.address);
        (*self).run_inner(events, shutdown).instrument(span).boxed()
    }
}

/// The [`Updater`] of the sink client: turns changes into source events
/// and forwards them to the pipeline before the response is ACKed.
struct Forward {
    /// Only ever locked between awaits (the sink client applies one change
    /// at a time, and the loop around it is the same task).
    state: Mutex<State>,
    events: mpsc::Sender<SourceEvent>,
    stop: CancellationToken,
    gone: AtomicBool,
}

impl Forward {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends events to the pipeline; false (and the loop stops) if it is
    /// gone.
    async fn emit(&self, events: Vec<SourceEvent>) -> bool {
        for ev in events {
            if self.events.send(ev).await.is_err() {
                self.gone.store(true, Ordering::Relaxed);
                self.stop.cancel();
                return false;
            }
        }
        true
    }
}

impl Updater for Forward {
    async fn apply(&self, change: Change) -> Result<(), ApplyError> {
        let events = self.lock().apply(&change);
        if self.emit(events).await {
            Ok(())
        } else {
            Err(ApplyError::Unavailable {
                message: "the hub is shutting down".to_owned(),
                retry_after: None,
            })
        }
    }

    fn held(&self, collection: &str) -> HashMap<String, String> {
        self.lock().held(collection)
    }
}

/// How a stream ended (not by shutdown).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The upstream ended it with a status.
    Status {
        /// The status code.
        code: Code,
        /// Its message.
        message: String,
    },
    /// It ended otherwise: closed by the upstream, or the call could not
    /// be made (the reason).
    Other(String),
}

impl Ended {
    /// The collection of `subscribed` the upstream refused, if that is
    /// why the stream ended: a refusal code and a message naming it (the
    /// longest name that appears, so no collection is mistaken for another
    /// whose name contains it).
    pub fn refused<'a>(&self, subscribed: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
        let message = match self {
            Self::Status { code, message } if REFUSAL_CODES.contains(code) => message.as_str(),
            _ => return None,
        };
        subscribed
            .into_iter()
            .filter(|c| message.contains(*c))
            .max_by_key(|c| c.len())
    }

    /// One line: the reason.
    fn reason(&self) -> String {
        match self {
            Self::Status { code, message } => format!("{code:?}: {message}"),
            Self::Other(t) => t.clone(),
        }
    }
}

/// What was delivered of one object (or of one name, when its resources
/// could not be read).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Delivered {
    /// `metadata.version` (for `initial_resource_versions`).
    version: String,
    /// Digest of the encoded resources, to skip unchanged ones.
    digest: [u8; 32],
}

/// The source's state: what it delivered, which collections are answered
/// and refused, and its problems. Pure: changes and stream ends in, source
/// events out.
#[derive(Debug)]
pub struct State {
    source: Arc<str>,
    address: String,
    kinds: KindTable,
    /// Subscribed collections, as configured.
    collections: Vec<String>,
    /// Per collection: MCP name → what was delivered.
    held: BTreeMap<String, BTreeMap<String, Delivered>>,
    /// Collections answered at least once.
    answered: BTreeSet<String>,
    /// Collections refused, with the upstream's reason.
    refused: BTreeMap<String, String>,
    /// Refused collections left out of the subscription until the next
    /// disconnection for another reason.
    skip: BTreeSet<String>,
    synced: bool,
    disconnected: Option<String>,
    unanswered: Option<String>,
    reported: Vec<String>,
}

impl State {
    /// A source that delivered nothing yet.
    pub fn new(
        source: Arc<str>,
        address: String,
        kinds: KindTable,
        collections: Vec<String>,
    ) -> Self {
        Self {
            source,
            address,
            kinds,
            collections,
            held: BTreeMap::new(),
            answered: BTreeSet::new(),
            refused: BTreeMap::new(),
            skip: BTreeSet::new(),
            synced: false,
            disconnected: None,
            unanswered: None,
            reported: Vec::new(),
        }
    }

    /// What the next stream subscribes to.
    pub fn subscription(&self, incremental: bool) -> Vec<SinkCollection> {
        self.collections
            .iter()
            .filter(|c| !self.skip.contains(*c))
            .map(|c| SinkCollection {
                name: c.clone(),
                incremental,
            })
            .collect()
    }

    /// What is held of a collection: MCP name → version.
    pub fn held(&self, collection: &str) -> HashMap<String, String> {
        self.held
            .get(collection)
            .map(|m| {
                m.iter()
                    .map(|(n, d)| (n.clone(), d.version.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Applies a response: the unit events of what changed, the health
    /// when it changed, and [`SourceEvent::Synced`] when this was the last
    /// collection to be answered.
    pub fn apply(&mut self, change: &Change) -> Vec<SourceEvent> {
        let collection = change.collection.as_str();
        // A response proves the stream works.
        self.disconnected = None;
        self.refused.remove(collection);
        let units = decode(&self.source, self.kinds.by_collection(collection), change);
        let held = self.held.entry(collection.to_owned()).or_default();
        let mut out = Vec::new();
        let mut gone: Vec<String> = if change.incremental {
            change.removed.clone()
        } else {
            held.keys()
                .filter(|n| !units.contains_key(*n))
                .cloned()
                .collect()
        };
        gone.retain(|n| !units.contains_key(n));
        for name in gone {
            if held.remove(&name).is_some() {
                out.push(unit_event(&self.source, collection, &name, Vec::new()));
            }
        }
        for (name, (entries, delivered)) in units {
            if held.get(&name) == Some(&delivered) {
                continue; // unchanged
            }
            held.insert(name.clone(), delivered);
            out.push(unit_event(&self.source, collection, &name, entries));
        }
        debug!(%collection, version = %change.version, incremental = change.incremental, units = out.len(), "applied");
        self.answered.insert(collection.to_owned());
        self.finish(&mut out);
        out
    }

    /// A stream ended. Returns the events and whether it ended because the
    /// upstream refused a collection (dropped from the subscription).
    pub fn on_ended(&mut self, ended: &Ended) -> (Vec<SourceEvent>, bool) {
        let subscribed = self
            .collections
            .iter()
            .filter(|c| !self.skip.contains(*c))
            .map(String::as_str);
        let mut out = Vec::new();
        let refused = ended.refused(subscribed).map(str::to_owned);
        let was_refusal = refused.is_some();
        match refused {
            Some(collection) => {
                let reason = ended.reason();
                warn!(%collection, %reason, "the upstream refuses a collection; subscribing to the others");
                self.skip.insert(collection.clone());
                // Not served: what it held is gone.
                for name in self
                    .held
                    .remove(&collection)
                    .unwrap_or_default()
                    .into_keys()
                {
                    out.push(unit_event(&self.source, &collection, &name, Vec::new()));
                }
                self.refused.insert(collection, reason);
            }
            None => {
                let problem = format!("disconnected from {}: {}", self.address, ended.reason());
                if self.disconnected.as_deref() != Some(&problem) {
                    warn!(problem = %problem, "upstream unavailable; keeping its objects");
                }
                self.disconnected = Some(problem);
                // The upstream may have been upgraded: ask again.
                self.skip.clear();
            }
        }
        self.finish(&mut out);
        (out, was_refusal)
    }

    /// The stream left collections unanswered for [`UNANSWERED_AFTER`]:
    /// reports them (until they are answered).
    pub fn note_unanswered(&mut self) -> Vec<SourceEvent> {
        let waiting = self.waiting();
        if waiting.is_empty() {
            return Vec::new();
        }
        let problem = format!(
            "no answer from {} for {} collection(s) after {}: {} (a server that does not serve them should refuse them; or list the served ones in mcp.collections)",
            self.address,
            waiting.len(),
            humantime::format_duration(UNANSWERED_AFTER),
            waiting.join(", ")
        );
        warn!(problem = %problem, "collections unanswered");
        self.unanswered = Some(problem);
        let mut out = Vec::new();
        self.finish(&mut out);
        out
    }

    /// Subscribed collections neither answered nor refused.
    fn waiting(&self) -> Vec<&str> {
        self.collections
            .iter()
            .filter(|c| !self.answered.contains(*c) && !self.refused.contains_key(*c))
            .map(String::as_str)
            .collect()
    }

    /// Appends the health when it changed, then [`SourceEvent::Synced`]
    /// when every collection is now answered or refused (the first time).
    fn finish(&mut self, out: &mut Vec<SourceEvent>) {
        let now_synced = !self.synced && self.waiting().is_empty();
        if now_synced {
            self.synced = true;
            self.unanswered = None;
            let objects: usize = self.held.values().map(BTreeMap::len).sum();
            info!(
                collections = self.answered.len(),
                refused = self.refused.len(),
                objects,
                "initial state received"
            );
        }
        out.extend(self.health());
        if now_synced {
            out.push(SourceEvent::Synced {
                source: self.source.clone(),
            });
        }
    }

    /// The current problems, if they changed since last reported.
    fn health(&mut self) -> Option<SourceEvent> {
        let problems: Vec<String> = self
            .disconnected
            .iter()
            .cloned()
            .chain(self.refused.iter().map(|(c, reason)| {
                format!(
                    "{} refuses collection {c} ({reason}); not subscribed",
                    self.address
                )
            }))
            .chain(self.unanswered.iter().cloned())
            .collect();
        if problems == self.reported {
            return None;
        }
        self.reported = problems.clone();
        Some(SourceEvent::Health {
            source: self.source.clone(),
            problems,
        })
    }
}

/// The unit event of one object (no entries: it is gone).
fn unit_event(source: &Arc<str>, collection: &str, name: &str, entries: Vec<Entry>) -> SourceEvent {
    SourceEvent::Unit {
        source: source.clone(),
        unit: unit_name(collection, name),
        entries,
    }
}

/// The unit of one object: `<collection>/<MCP name>`.
fn unit_name(collection: &str, name: &str) -> Arc<str> {
    Arc::from(format!("{collection}/{name}").as_str())
}

/// The resources of a change by MCP name, each with its entries (one per
/// resource of that name: more than one is a conflict the store reports)
/// and what is delivered. `kind` is `None` for a collection outside the
/// kind table (configuration prevents that; every resource is then an
/// error).
fn decode(
    source: &Arc<str>,
    kind: Option<&Kind>,
    change: &Change,
) -> BTreeMap<String, (Vec<Entry>, Delivered)> {
    let mut by_name: BTreeMap<String, Vec<&Resource>> = BTreeMap::new();
    for r in &change.resources {
        let name = r
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        by_name.entry(name).or_default().push(r);
    }
    by_name
        .into_iter()
        .map(|(name, resources)| {
            let unit = unit_name(&change.collection, &name);
            let mut digest = Sha256::new();
            let mut version = String::new();
            let entries = resources
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    digest.update(r.encode_to_vec());
                    if let Some(m) = &r.metadata {
                        version.clone_from(&m.version);
                    }
                    let parsed = match kind {
                        Some(kind) => to_object(kind, r),
                        None => Err(format!(
                            "collection {}: no kind of the hub",
                            change.collection
                        )),
                    };
                    if let Err(e) = &parsed {
                        warn!(collection = %change.collection, name = %name, error = %e, "resource can't be read; reported, the others are kept (ACK)");
                    }
                    Entry {
                        origin: Origin {
                            source: source.clone(),
                            unit: unit.clone(),
                            document: if resources.len() > 1 { i + 1 } else { 0 },
                            line: None,
                        },
                        parsed,
                        changed_by: None,
                    }
                })
                .collect();
            let delivered = Delivered {
                version,
                digest: digest.finalize().into(),
            };
            (name, (entries, delivered))
        })
        .collect()
}

/// One MCP resource of `kind` as an object: namespace and name from
/// `metadata.name`, the resource version from `metadata.version`, labels,
/// annotations and create time kept, the body decoded with the kind's
/// schema. Errors are one line with their causes.
pub fn to_object(kind: &Kind, resource: &Resource) -> Result<Object, String> {
    let mut obj = transcode::resource_to_object(kind, resource).map_err(|e| error_chain(&e))?;
    if let Some(m) = &resource.metadata
        && !m.version.is_empty()
    {
        obj.metadata.resource_version = Some(m.version.clone());
    }
    Ok(obj)
}

#[cfg(test)]
mod tests;

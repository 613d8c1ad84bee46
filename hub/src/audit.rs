//! The audit log: one JSON object per line (JSON Lines) for every source
//! change, validation rejection, publication per group, delivery result
//! (ACK/NACK) per peer, and pin/unpin, to a size-rotated file and/or
//! stdout.
//!
//! Writing never slows the pipeline: records go through a bounded queue
//! ([`QUEUE`]) to one writer task; when the queue is full the record is
//! dropped and counted ([`METRIC_DROPPED`]). Delivery results come from the
//! engine's ledger ([`Ledger::deliveries`]), so the engine knows nothing of
//! this log.
//!
//! No secret material is written: objects are named (kind, namespace/name),
//! never their content; rejection reasons of `Secret` objects are withheld;
//! callers are named by the identity the admin layer established, never by
//! a token.
//!
//! Schema: see `docs/operations.md` ("Audit log"); every line carries
//! `schemaVersion` ([`SCHEMA_VERSION`]).

pub mod rotate;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use meshhub_mcp::ledger::{Delivery, Ledger};
use meshhub_mcp::settings::SettingError;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument as _, info_span, warn};

use self::rotate::RotatingFile;

/// Version of the record schema; changes when a field changes meaning or
/// disappears (new fields don't change it).
pub const SCHEMA_VERSION: u32 = 1;
/// Capacity of the queue to the writer.
pub const QUEUE: usize = 4096;
/// Default `audit.maxBytes`.
pub const DEFAULT_MAX_BYTES: u64 = 100 * 1024 * 1024;
/// Default `audit.keep`.
pub const DEFAULT_KEEP: usize = 5;

/// Counter: audit records written.
pub const METRIC_RECORDS: &str = "meshhub_audit_records_total";
/// Counter: audit records dropped because the writer fell behind.
pub const METRIC_DROPPED: &str = "meshhub_audit_dropped_total";
/// Counter: audit records that could not be written (I/O errors).
pub const METRIC_WRITE_ERRORS: &str = "meshhub_audit_write_errors_total";

/// `audit:` as written in the configuration file.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawAudit {
    #[serde(default)]
    file: Option<PathBuf>,
    #[serde(default)]
    stdout: bool,
    #[serde(default)]
    max_bytes: Option<u64>,
    #[serde(default)]
    keep: Option<usize>,
}

/// Where the audit log goes (`audit:`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditSpec {
    /// The file (relative paths: from the configuration file's directory).
    pub file: Option<PathBuf>,
    /// Also (or only) to stdout, one line per record.
    pub stdout: bool,
    /// Size at which the file rotates.
    pub max_bytes: u64,
    /// Rotated files kept (`audit.log.1` ... `audit.log.<keep>`).
    pub keep: usize,
}

impl RawAudit {
    /// Checks the block; `base` is the configuration file's directory.
    /// Errors name the field (without the `audit.` prefix).
    pub fn check(self, base: &Path) -> Result<AuditSpec, SettingError> {
        if self.file.is_none() && !self.stdout {
            return Err(SettingError::new("file", "set a file or `stdout: true`"));
        }
        let max_bytes = self.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
        if max_bytes < 1024 {
            return Err(SettingError::new(
                "maxBytes",
                format!("{max_bytes} is below 1024"),
            ));
        }
        Ok(AuditSpec {
            file: self.file.map(|f| base.join(f)),
            stdout: self.stdout,
            max_bytes,
            keep: self.keep.unwrap_or(DEFAULT_KEEP),
        })
    }
}

/// An object named in a record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ObjectRef {
    /// Its kind.
    pub kind: String,
    /// `namespace/name`.
    pub name: String,
    /// Kubernetes resourceVersion, when it came from an API server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AuditEvent {
    /// A source replaced a unit (a file, a Kubernetes object, an upstream
    /// resource); `objects` empty: the unit is gone.
    SourceChange {
        /// The source.
        source: String,
        /// The unit (file path, `group/Kind/ns/name`, `collection/name`).
        unit: String,
        /// The objects it now defines.
        objects: Vec<ObjectRef>,
        /// Entries that could not be read.
        unreadable: usize,
        /// Who made the change, when the source knows (Kubernetes field
        /// manager).
        #[serde(rename = "changedBy", skip_serializing_if = "Option::is_none")]
        changed_by: Option<String>,
    },
    /// An entry kept out of every snapshot (reported once, when it first
    /// appears).
    Rejected {
        /// Where it came from.
        origin: String,
        /// Its kind, when readable.
        #[serde(skip_serializing_if = "Option::is_none")]
        kind: Option<String>,
        /// `namespace/name`, when readable.
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Why (withheld for `Secret` objects).
        reasons: Vec<String>,
    },
    /// A group's snapshot changed.
    Published {
        /// The group (cluster).
        cluster: String,
        /// The history version id of what the sources produced.
        version: String,
        /// Resources in it.
        resources: usize,
        /// The pinned version served instead, when the group is pinned.
        #[serde(rename = "servedPinned", skip_serializing_if = "Option::is_none")]
        served_pinned: Option<String>,
        /// Why the version is held back from the cluster (analysis
        /// messages of the codes `analysis.holdBack` names); empty when
        /// it is served.
        #[serde(rename = "heldBack", skip_serializing_if = "Vec::is_empty")]
        held_back: Vec<String>,
        /// The version is staged: the rollout decides when (and whether)
        /// the cluster is served it; `Rollout` records say when.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        staged: bool,
    },
    /// The analysis of a group's latest build differs from the previous
    /// one (written when it changes, not on every build).
    Analysis {
        /// The group (cluster).
        cluster: String,
        /// The version analysed.
        version: String,
        /// Every message (empty: the build is clean again).
        messages: Vec<String>,
    },
    /// A peer answered a response.
    Delivery(Delivery),
    /// A group was pinned to a version.
    Pin {
        /// The group (cluster).
        cluster: String,
        /// The version served from now on.
        version: String,
        /// Who asked.
        by: String,
    },
    /// The rollout serves a cluster a version this replica cannot produce
    /// (not in its history): nothing is pushed to the cluster, which keeps
    /// what it holds, until the version is available.
    Unavailable {
        /// The cluster.
        cluster: String,
        /// The version decided.
        version: String,
    },
    /// A cluster's refusal of its newest version, told while it was not
    /// part of the current rollout, stands: later rollouts leave it out
    /// until its content changes or an operator resumes it (a refusal
    /// within a rollout is that rollout's `Rollout` record).
    StandingFailure {
        /// The cluster.
        cluster: String,
        /// The version (id) it refused.
        version: String,
        /// The rollout that sent it that version; `None`: not known (sent
        /// before this hub's decisions say).
        rollout: Option<u64>,
        /// Why (the refusal's message).
        message: String,
    },
    /// An operator forgave a cluster's standing failure (`resume`,
    /// `resume --cluster`, `promote --cluster`): the version it refused
    /// may be offered to it again. The refusals counted stay counted: only
    /// a new one makes it stand again.
    StandingForgiven {
        /// The cluster.
        cluster: String,
        /// The version (id) it had refused.
        version: String,
        /// The rollout its standing failure named (`None`: none known).
        rollout: Option<u64>,
        /// Who asked.
        by: String,
    },
    /// A step of a staged rollout (`rollout:`).
    Rollout {
        /// The rollout.
        id: u64,
        /// What happened.
        step: meshhub_rollout::Event,
    },
    /// A cluster's istiod does not hold an object the cluster's agent
    /// serves it (reported by the agent over the upward channel).
    IstiodDropped {
        /// The cluster.
        cluster: String,
        /// The collection.
        collection: String,
        /// `namespace/name`.
        name: String,
        /// The object's version.
        version: String,
        /// Why, as far as istiod says.
        reason: String,
    },
    /// An object a cluster's istiod had dropped is held again (or no
    /// longer served).
    IstiodHeld {
        /// The cluster.
        cluster: String,
        /// The collection.
        collection: String,
        /// `namespace/name`.
        name: String,
    },
    /// A cluster's exported Service is refused by the hub (outside the
    /// cluster's export policy, over its caps, or invalid on its own):
    /// not merged into any ServiceEntry (written when it becomes refused
    /// or its reason changes).
    ExportRefused {
        /// The exporting cluster.
        cluster: String,
        /// The Service's namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Why (`policy: …`, `cap: …`, `invalid: …`).
        reason: String,
    },
    /// More of a cluster's exports became refused at once than are
    /// written one by one (`export_refused`, the first
    /// [`crate::upward::state::REFUSALS_ITEMIZED`] of one judgement): how
    /// many more, by reason. A cluster reporting a flood of exports would
    /// otherwise fill the audit queue, and other records would be dropped.
    ExportsRefused {
        /// The exporting cluster.
        cluster: String,
        /// How many more became refused.
        count: usize,
        /// Of those, how many per reason (`policy`, `cap`, `invalid`).
        #[serde(rename = "byReason")]
        by_reason: std::collections::BTreeMap<String, usize>,
    },
    /// A group's pin was lifted.
    Unpin {
        /// The group (cluster).
        cluster: String,
        /// The version it was pinned to.
        version: String,
        /// Who asked.
        by: String,
    },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Line<'a> {
    schema_version: u32,
    time: String,
    #[serde(flatten)]
    event: &'a AuditEvent,
}

/// Whether a kind holds secret material whose details must not be logged.
pub fn is_secret(kind: &str) -> bool {
    kind.eq_ignore_ascii_case("Secret")
}

/// The handle every component records through; cheap to clone. A disabled
/// log records nothing.
#[derive(Clone, Debug, Default)]
pub struct AuditLog {
    tx: Option<mpsc::Sender<(SystemTime, AuditEvent)>>,
}

impl AuditLog {
    /// A log that records nothing (no `audit:` block).
    pub fn disabled() -> Self {
        Self::default()
    }

    /// A log whose records a test reads.
    #[cfg(test)]
    pub(crate) fn capture() -> (Self, mpsc::Receiver<(SystemTime, AuditEvent)>) {
        let (tx, rx) = mpsc::channel(1024);
        (Self { tx: Some(tx) }, rx)
    }

    /// Whether records go anywhere.
    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Queues a record; never waits. A full queue drops it (counted).
    pub fn record(&self, event: AuditEvent) {
        let Some(tx) = &self.tx else { return };
        if tx.try_send((SystemTime::now(), event)).is_err() {
            metrics::counter!(METRIC_DROPPED).increment(1);
        }
    }

    /// Opens the file and starts the writer (and the follower of the
    /// ledger's delivery results) on `tasks`, until `shutdown`; what is
    /// queued then is still written.
    pub fn start(
        spec: &AuditSpec,
        ledger: &Ledger,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> std::io::Result<Self> {
        let file = spec
            .file
            .as_deref()
            .map(|p| RotatingFile::open(p, spec.max_bytes, spec.keep))
            .transpose()?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let log = Self { tx: Some(tx) };
        let writer = Writer {
            file,
            stdout: spec.stdout,
        };
        tasks.spawn(
            writer
                .run(rx, ledger.deliveries(), log.clone(), shutdown)
                .instrument(info_span!("audit")),
        );
        // Register the metrics so they show as 0 before anything happens.
        metrics::counter!(METRIC_DROPPED).increment(0);
        metrics::counter!(METRIC_WRITE_ERRORS).increment(0);
        Ok(log)
    }
}

struct Writer {
    file: Option<RotatingFile>,
    stdout: bool,
}

impl Writer {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<(SystemTime, AuditEvent)>,
        mut deliveries: broadcast::Receiver<Delivery>,
        log: AuditLog,
        shutdown: CancellationToken,
    ) {
        // The writer's own handle only feeds delivery results in; drop the
        // sender so the queue closes when every other holder is gone.
        let feed = log;
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                d = deliveries.recv() => match d {
                    Ok(d) => feed.record(AuditEvent::Delivery(d)),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        metrics::counter!(METRIC_DROPPED).increment(n);
                        warn!(lost = n, "audit log fell behind the delivery results");
                    }
                    Err(broadcast::error::RecvError::Closed) => {}
                },
                rec = rx.recv() => match rec {
                    Some((at, ev)) => {
                        self.write(at, &ev);
                        // Write what else is queued before flushing once.
                        while let Ok((at, ev)) = rx.try_recv() {
                            self.write(at, &ev);
                        }
                        self.flush();
                    }
                    None => break,
                },
            }
        }
        while let Ok((at, ev)) = rx.try_recv() {
            self.write(at, &ev);
        }
        self.flush();
    }

    fn write(&mut self, at: SystemTime, event: &AuditEvent) {
        let line = Line {
            schema_version: SCHEMA_VERSION,
            time: humantime::format_rfc3339_millis(at).to_string(),
            event,
        };
        let Ok(json) = serde_json::to_vec(&line) else {
            metrics::counter!(METRIC_WRITE_ERRORS).increment(1);
            return;
        };
        if let Some(f) = &mut self.file
            && let Err(e) = f.write_line(&json)
        {
            metrics::counter!(METRIC_WRITE_ERRORS).increment(1);
            warn!(error = %e, file = %f.path().display(), "can't write the audit log");
        }
        if self.stdout {
            let mut out = std::io::stdout().lock();
            if out
                .write_all(&json)
                .and_then(|()| out.write_all(b"\n"))
                .is_err()
            {
                metrics::counter!(METRIC_WRITE_ERRORS).increment(1);
            }
        }
        metrics::counter!(METRIC_RECORDS).increment(1);
    }

    fn flush(&mut self) {
        if let Some(f) = &mut self.file
            && let Err(e) = f.flush()
        {
            metrics::counter!(METRIC_WRITE_ERRORS).increment(1);
            warn!(error = %e, "can't flush the audit log");
        }
    }
}

#[cfg(test)]
mod tests;

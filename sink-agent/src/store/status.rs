//! What the store holds, as its readers see it: `/status`, readiness and
//! the tests read [`StoreStatus`] through a `watch` channel; only the
//! store's writer task changes it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use meshhub_mcp::ledger::At;
use meshhub_mcp::snapshot::CollectionSnapshot;
use serde::Serialize;
use tokio::sync::watch;

/// Where a collection's current state came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// Loaded from the data directory at start.
    Disk,
    /// Received from the hub since start.
    Hub,
}

/// The last change of a collection the store refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The hub's version of the refused change.
    pub version: String,
    /// The NACK's message.
    pub message: String,
    /// When.
    pub at: At,
}

/// One collection the store holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CollectionInfo {
    /// The hub's `system_version_info` of the state held.
    pub version: String,
    /// The version local consumers are served (a digest of names and
    /// resource versions, stable across restarts).
    pub served_version: String,
    /// Number of resources.
    pub resources: usize,
    /// Total encoded size of the resources.
    pub bytes: usize,
    /// Where the state came from.
    pub origin: Origin,
    /// When it was received, or loaded.
    pub updated_at: At,
    /// The last refused change, if any since start.
    pub refused: Option<Refusal>,
    /// The hub's version of the last change ACKed (or the state loaded at
    /// start; empty: none). `version` is held as soon as it is persisted,
    /// before the cluster's API has taken it, so it may be one that is
    /// then refused.
    pub acked_version: String,
}

/// What the store holds, for `/status` and readiness.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StoreStatus {
    /// The persisted state was loaded and published.
    pub loaded: bool,
    /// The data directory.
    pub data_dir: PathBuf,
    /// Files skipped on load, with the reason.
    pub load_errors: Vec<String>,
    /// Per collection held.
    pub collections: BTreeMap<String, CollectionInfo>,
    /// While writes fail: the last failure (cleared by the next write that
    /// succeeds).
    pub persist_failure: Option<PersistFailure>,
}

/// The last failed write, while writes fail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PersistFailure {
    /// The collection whose change could not be written.
    pub collection: String,
    /// The hub's version of that change.
    pub version: String,
    /// Why (the OS error, e.g. `No space left on device`).
    pub message: String,
    /// Failed writes in a row.
    pub consecutive: u32,
    /// When.
    pub at: At,
}

pub(super) fn info(
    version: &str,
    c: &CollectionSnapshot,
    origin: Origin,
    at: At,
    refused: Option<Refusal>,
    acked_version: String,
) -> CollectionInfo {
    CollectionInfo {
        version: version.to_owned(),
        served_version: c.version().to_owned(),
        resources: c.len(),
        bytes: c.encoded_bytes(),
        origin,
        updated_at: at,
        refused,
        acked_version,
    }
}

/// Records a refused change in the status (the collection's state stays;
/// the version refused is no longer the one ACKed).
pub(super) fn refused(
    status: &watch::Sender<Arc<StoreStatus>>,
    collection: &str,
    version: &str,
    message: &str,
) {
    metrics::counter!("meshhub_agent_changes_total", "result" => "refused").increment(1);
    let refusal = Refusal {
        version: version.to_owned(),
        message: message.to_owned(),
        at: At(SystemTime::now()),
    };
    status.send_modify(|s| {
        let s = Arc::make_mut(s);
        match s.collections.get_mut(collection) {
            Some(c) => {
                // Refused now, so not held as ACKed (a version loaded from
                // disk counts as ACKed until the API says otherwise).
                if c.acked_version == version {
                    c.acked_version.clear();
                }
                c.refused = Some(refusal);
            }
            None => {
                s.collections.insert(
                    collection.to_owned(),
                    CollectionInfo {
                        version: String::new(),
                        served_version: meshhub_mcp::snapshot::EMPTY.version().to_owned(),
                        resources: 0,
                        bytes: 0,
                        origin: Origin::Hub,
                        updated_at: refusal.at,
                        refused: Some(refusal),
                        acked_version: String::new(),
                    },
                );
            }
        }
    });
}

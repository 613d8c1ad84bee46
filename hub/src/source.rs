//! Sources of objects.
//!
//! Every source delivers, through one channel into the pipeline (the store's
//! single writer): its initial state, then [`SourceEvent::Synced`], then
//! changes. A source speaks in **units**: a unit is what the source replaces
//! as a whole (a file for the file source). A [`SourceEvent::Unit`] replaces
//! everything that unit defined before; a unit with no entries is gone.
//! Entries that could not be read (a broken YAML document) travel as errors,
//! so that they are reported next to the objects that did parse.

pub mod file;
pub mod kube;
pub mod mcp;
pub mod spec;

pub use spec::SourceSpec;

use std::sync::Arc;

use futures::future::BoxFuture;
use meshhub_proto::object::Object;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use meshhub_api::object::Origin;

/// One entry of a unit: an object, or why a document could not be read.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// Where it came from.
    pub origin: Origin,
    /// The object, or the reason it could not be read.
    pub parsed: Result<Object, String>,
    /// Who made the change, when the source knows it (Kubernetes: the
    /// field manager of the newest `managedFields` entry). For history
    /// and the audit log only.
    pub changed_by: Option<Arc<str>>,
}

/// What a source tells the pipeline.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceEvent {
    /// The unit's entries, replacing whatever it defined before. Empty
    /// `entries`: the unit is gone.
    Unit {
        /// The source's name.
        source: Arc<str>,
        /// The unit.
        unit: Arc<str>,
        /// Its entries, in order.
        entries: Vec<Entry>,
    },
    /// The source has delivered its initial state.
    Synced {
        /// The source's name.
        source: Arc<str>,
    },
    /// What currently keeps the source from seeing every change (replaces
    /// what it reported before; empty: healthy again). Shown on `/status`.
    Health {
        /// The source's name.
        source: Arc<str>,
        /// One line per problem.
        problems: Vec<String>,
    },
}

/// Why a source stopped.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The watcher could not be set up.
    #[error("source {source_name}: can't watch {path}")]
    Watch {
        /// The source.
        source_name: String,
        /// The watched path.
        path: String,
        /// Why.
        #[source]
        source: notify::Error,
    },
    /// The connection to an upstream MCP source could not be set up (its
    /// address or TLS files; both were checked by the configuration).
    #[error("source {source_name}: can't set up the connection to {address}")]
    Endpoint {
        /// The source.
        source_name: String,
        /// The upstream's address.
        address: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The pipeline is gone (shutting down).
    #[error("source {0}: the pipeline stopped")]
    PipelineGone(String),
}

/// A source of objects.
pub trait Source: Send + 'static {
    /// Its name (unique among the configured sources).
    fn name(&self) -> &str;

    /// Runs the source until `shutdown`: sends the initial state, then
    /// [`SourceEvent::Synced`], then changes.
    fn run(
        self: Box<Self>,
        events: mpsc::Sender<SourceEvent>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), SourceError>>;
}

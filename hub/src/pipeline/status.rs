//! The pipeline's status: what readiness and the status page read of it,
//! replaced as a whole after every change (readers hold an `Arc`).

use std::sync::Arc;

use serde::Serialize;

use super::Pipeline;
use crate::store::{Conflict, Rejected, ServedObjects, Warning};

/// One source's state, for the status page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SourceStatus {
    /// The source's name.
    pub name: String,
    /// Whether it has delivered its initial state.
    pub synced: bool,
    /// Units (files, Kubernetes objects) it currently defines.
    pub units: usize,
    /// What currently keeps it from seeing every change (a watch failing,
    /// a kind it may not list), as the source last reported; empty when
    /// healthy.
    pub problems: Vec<String>,
}

/// What the pipeline knows of one source.
#[derive(Clone, Debug, Default)]
pub(super) struct SourceState {
    pub(super) synced: bool,
    pub(super) problems: Vec<String>,
}

/// The pipeline's state, for readiness and the status page. Replaced as a
/// whole after every change (readers hold an `Arc`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Status {
    /// Every source synced and the first snapshots are published.
    pub ready: bool,
    /// The sources.
    pub sources: Vec<SourceStatus>,
    /// Number of snapshot builds published so far.
    pub generation: u64,
    /// When the last build was published (RFC 3339).
    pub published_at: Option<String>,
    /// How long the changes of the last build waited, in milliseconds.
    pub last_wait_ms: Option<u64>,
    /// Objects served.
    pub objects: usize,
    /// Entries kept out of every snapshot, with reasons.
    pub rejected: Vec<Rejected>,
    /// Objects defined more than once, and which definition is served.
    pub conflicts: Vec<Conflict>,
    /// Warnings about served objects.
    pub warnings: Vec<Warning>,
    /// Every served object and where its definition came from, for
    /// `/debug/object` (not part of `/status`: it holds every object).
    #[serde(skip)]
    pub served: Arc<ServedObjects>,
    /// Per group, the analysis of its latest build (`/status` shows it
    /// as its own section, `analysis`).
    #[serde(skip)]
    pub analysis: crate::analysis::AnalysisView,
    /// Objects a cluster is not delivered ([`carried`]; `/status` shows
    /// it as its own section, `withheld`).
    #[serde(skip)]
    pub withheld: Vec<meshhub_api::status::WithheldView>,
}

impl Pipeline {
    pub(super) fn base_status(&self) -> Status {
        Status {
            ready: self.generation > 0 && self.all_synced(),
            sources: self
                .sources
                .iter()
                .map(|(name, state)| SourceStatus {
                    name: name.to_string(),
                    synced: state.synced,
                    units: self.store.unit_count(name),
                    problems: state.problems.clone(),
                })
                .collect(),
            generation: self.generation,
            ..Status::default()
        }
    }

    /// Refreshes the source part of the status, keeping the rest.
    pub(super) fn update_status(&mut self) {
        let prev = self.status.borrow().clone();
        let mut status = self.base_status();
        status.published_at = prev.published_at.clone();
        status.last_wait_ms = prev.last_wait_ms;
        status.objects = prev.objects;
        status.rejected = prev.rejected.clone();
        status.conflicts = prev.conflicts.clone();
        status.warnings = prev.warnings.clone();
        status.served = prev.served.clone();
        status.analysis = prev.analysis.clone();
        status.withheld = prev.withheld.clone();
        self.status.send_replace(Arc::new(status));
    }
}

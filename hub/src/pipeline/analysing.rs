//! Each changed group's build analysed: before it is served when the
//! analysis decides (a code is held back: [`Analysis::check`]), else beside
//! serving ([`crate::analysis::background`]): the build is served at once
//! and its analysis, done on the blocking pool, comes back to
//! [`Pipeline::analysed`], which takes it if the build is still the
//! group's latest and shows it (`/status`, metrics, audit).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use meshhub_analyze::Facts;
use meshhub_mcp::cache::Group;
use meshhub_mcp::snapshot::Snapshot;

use super::Pipeline;
use crate::analysis::background::Analysed;
use crate::analysis::{Decision, Job};
use crate::history::version_id;

/// While analyses come back, the status shows them at most this often
/// (and when the queue runs empty): each showing copies the status and
/// every group's analysis, and wakes the status writer and the console.
const SHOW_EVERY: Duration = Duration::from_secs(1);

/// The analyses one build queues: the jobs, and each content's facts once
/// (groups of the same content share them).
#[derive(Default)]
pub(super) struct Queued {
    pub(super) jobs: Vec<Job>,
    facts: HashMap<String, Arc<[Arc<Facts>]>>,
}

impl Pipeline {
    /// Analyses `group`'s new build `snapshot` (its objects' `facts`), or
    /// queues its analysis on `jobs` when it runs beside serving; the
    /// reasons it is held back (none: serve it).
    pub(super) fn analyse_build(
        &mut self,
        group: &Group,
        snapshot: &Arc<Snapshot>,
        facts: Option<&Arc<[Arc<Facts>]>>,
        queued: &mut Queued,
    ) -> Vec<String> {
        if !self.analysis.enabled() {
            return Vec::new();
        }
        let version = version_id(snapshot);
        if self.background.is_some() {
            let facts = queued
                .facts
                .entry(version.clone())
                .or_insert_with(|| facts.cloned().unwrap_or_else(|| Arc::from(Vec::new())))
                .clone();
            queued.jobs.push(self.analysis.job(group, &version, facts));
            self.good.insert(group.clone(), snapshot.clone());
            return Vec::new();
        }
        let serving = self.good.get(group).map(|s| version_id(s));
        let facts = facts.cloned().unwrap_or_else(|| Arc::from(Vec::new()));
        match self
            .analysis
            .check_shared(group, &version, facts, serving, &self.record.audit)
        {
            Decision::Serve => {
                self.good.insert(group.clone(), snapshot.clone());
                Vec::new()
            }
            Decision::HoldBack(reasons) => reasons,
        }
    }

    /// Analyses done beside serving (`first`, and every chunk already
    /// back): each is taken if its build is still its group's latest (a
    /// newer one's is on its way; a group gone is forgotten), and the
    /// status shows them when the queue ran empty or [`SHOW_EVERY`] after
    /// it last did.
    pub(super) fn analysed(&mut self, first: Analysed) {
        let mut idle = first.idle;
        let mut done = first.done;
        if let Some(b) = self.background.as_mut() {
            while let Ok(more) = b.results.try_recv() {
                idle = more.idle;
                done.extend(more.done);
            }
        }
        for d in done {
            let latest = self.published.get(&d.group).map(|s| version_id(s));
            if latest.as_deref() != Some(d.version.as_str()) {
                continue;
            }
            // Nothing is held back in this mode: served whatever it says.
            self.analysis.take(d, None, &self.record.audit);
            self.analysis_unshown = true;
        }
        let now = tokio::time::Instant::now();
        let due = self
            .analysis_shown_at
            .is_none_or(|at| now.duration_since(at) >= SHOW_EVERY);
        if self.analysis_unshown && (idle || due) {
            let mut status = (**self.status.borrow()).clone();
            status.analysis = self.analysis.view();
            self.status.send_replace(Arc::new(status));
            self.analysis_unshown = false;
            self.analysis_shown_at = Some(now);
        }
    }
}

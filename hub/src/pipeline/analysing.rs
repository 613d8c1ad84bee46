//! Each changed group's build analysed: before it is served when the
//! analysis decides (a code is held back: [`Analysis::check`]), else beside
//! serving ([`crate::analysis::background`]): the build is served at once
//! and its analysis, done on the blocking pool, comes back to
//! [`Pipeline::analysed`], which takes it if the build is still the
//! group's latest and shows it (`/status`, metrics, audit).

use std::sync::Arc;

use meshhub_analyze::Facts;
use meshhub_mcp::cache::Group;
use meshhub_mcp::snapshot::Snapshot;

use super::Pipeline;
use crate::analysis::{Decision, Done, Job};
use crate::history::version_id;

impl Pipeline {
    /// Analyses `group`'s new build `snapshot` (its objects' `facts`), or
    /// queues its analysis on `jobs` when it runs beside serving; the
    /// reasons it is held back (none: serve it).
    pub(super) fn analyse_build(
        &mut self,
        group: &Group,
        snapshot: &Arc<Snapshot>,
        facts: Option<&Vec<&Arc<Facts>>>,
        jobs: &mut Vec<Job>,
    ) -> Vec<String> {
        if !self.analysis.enabled() {
            return Vec::new();
        }
        let version = version_id(snapshot);
        if self.background.is_some() {
            let facts = facts
                .map(|f| f.iter().map(|a| Arc::clone(a)).collect())
                .unwrap_or_default();
            jobs.push(self.analysis.job(group, &version, facts));
            self.good.insert(group.clone(), snapshot.clone());
            return Vec::new();
        }
        let serving = self.good.get(group).map(|s| version_id(s));
        let facts = facts.into_iter().flatten().map(|f| &***f);
        match self
            .analysis
            .check(group, &version, facts, serving, &self.record.audit)
        {
            Decision::Serve => {
                self.good.insert(group.clone(), snapshot.clone());
                Vec::new()
            }
            Decision::HoldBack(reasons) => reasons,
        }
    }

    /// Analyses done beside serving: each is taken if its build is still
    /// its group's latest (a newer one's is on its way; a group gone is
    /// forgotten), and the status shows them.
    pub(super) fn analysed(&mut self, done: Vec<Done>) {
        let mut taken = false;
        for d in done {
            let latest = self.published.get(&d.group).map(|s| version_id(s));
            if latest.as_deref() != Some(d.version.as_str()) {
                continue;
            }
            // Nothing is held back in this mode: served whatever it says.
            self.analysis.take(d, None, &self.record.audit);
            taken = true;
        }
        if taken {
            let mut status = (**self.status.borrow()).clone();
            status.analysis = self.analysis.view();
            self.status.send_replace(Arc::new(status));
        }
    }
}

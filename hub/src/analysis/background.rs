//! Analysis beside serving: when no code is held back (the default), a
//! build's analysis decides nothing about serving it, so the pipeline
//! serves the build at once and hands its changed groups' analyses
//! ([`Job`]) to this task, which runs them on the blocking pool and sends
//! the results back ([`Done`]) for the pipeline — the analysis' single
//! writer — to take. A change every cluster receives is then pushed to
//! every cluster before, not after, N analyses.
//!
//! Jobs queue per group, the newest replacing an older one not yet run
//! (a burst of builds analyses each group's latest once); they run in
//! chunks of [`CHUNK`], so that results show as they come and a newer
//! build's job replaces its group's still-queued one meanwhile. The task
//! ends with `shutdown` or when the pipeline drops its handle, after the
//! chunk under way.

use std::collections::BTreeMap;

use meshhub_mcp::cache::Group;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, error, info_span};

use super::{Done, Job, Memo};

/// Groups analysed per run on the blocking pool.
pub const CHUNK: usize = 64;

/// The pipeline's handle on the task.
#[derive(Debug)]
pub struct Background {
    jobs: mpsc::UnboundedSender<Vec<Job>>,
    /// The analyses done, a chunk at a time.
    pub results: mpsc::Receiver<Vec<Done>>,
    task: JoinHandle<()>,
}

impl Background {
    /// Starts the task; it ends with `shutdown`.
    pub fn spawn(shutdown: CancellationToken) -> Self {
        let (jobs, rx) = mpsc::unbounded_channel();
        let (tx, results) = mpsc::channel(4);
        let task = tokio::spawn(run(rx, tx, shutdown).instrument(info_span!("analysis")));
        Self {
            jobs,
            results,
            task,
        }
    }

    /// Queues `jobs` (each replaces its group's job not yet run).
    pub fn queue(&self, jobs: Vec<Job>) {
        if !jobs.is_empty() {
            // The task ends only after the pipeline: a send then is lost
            // with the pipeline's end anyway.
            let _ = self.jobs.send(jobs);
        }
    }

    /// Stops the task (after the chunk under way) and waits for it.
    pub async fn stop(self) {
        drop(self.jobs);
        drop(self.results);
        if let Err(e) = self.task.await {
            error!(error = %e, "the analysis task failed");
        }
    }
}

async fn run(
    mut jobs: mpsc::UnboundedReceiver<Vec<Job>>,
    results: mpsc::Sender<Vec<Done>>,
    shutdown: CancellationToken,
) {
    let mut pending: BTreeMap<Group, Job> = BTreeMap::new();
    let mut memo = Memo::default();
    let add = |pending: &mut BTreeMap<Group, Job>, batch: Vec<Job>| {
        for j in batch {
            pending.insert(j.group.clone(), j);
        }
    };
    loop {
        if pending.is_empty() {
            tokio::select! {
                () = shutdown.cancelled() => return,
                batch = jobs.recv() => match batch {
                    Some(b) => add(&mut pending, b),
                    None => return,
                },
            }
        }
        while let Ok(b) = jobs.try_recv() {
            add(&mut pending, b);
        }
        let chunk: Vec<Job> = std::iter::from_fn(|| pending.pop_first().map(|(_, j)| j))
            .take(CHUNK)
            .collect();
        let mut m = std::mem::take(&mut memo);
        let ran = tokio::task::spawn_blocking(move || {
            let done: Vec<Done> = chunk.into_iter().map(|j| j.run(&mut m)).collect();
            (done, m)
        })
        .await;
        let done = match ran {
            Ok((done, m)) => {
                memo = m;
                done
            }
            Err(e) => {
                error!(error = %e, "an analysis failed; its groups are analysed again at their next build");
                continue;
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            sent = results.send(done) => if sent.is_err() { return },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use meshhub_analyze::Facts;
    use meshhub_proto::object::Object;

    use super::*;
    use crate::analysis::{Analysis, AnalysisSpec};

    fn unbound_vs() -> Arc<Facts> {
        let obj: Object = serde_saphyr::from_str(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs, namespace: ns}\nspec:\n  hosts: [a.example.com]\n  gateways: [gw]\n",
        )
        .unwrap();
        Arc::new(Facts::of(&obj).unwrap())
    }

    #[tokio::test]
    async fn a_groups_newer_job_replaces_its_queued_one_and_every_group_is_analysed() {
        let analysis = Analysis::new(AnalysisSpec {
            enabled: true,
            hold_back: Default::default(),
        });
        let shutdown = CancellationToken::new();
        let mut bg = Background::spawn(shutdown.clone());
        let vs = unbound_vs();
        // More groups than a chunk, and a second build of each queued at
        // once: each group's newest analysed, once, in chunks.
        let groups: Vec<Group> = (0..CHUNK + 5)
            .map(|i| Group::from(format!("c{i:03}").as_str()))
            .collect();
        let jobs = |v: &str| {
            groups
                .iter()
                .map(|g| analysis.job(g, v, vec![vs.clone()]))
                .collect::<Vec<_>>()
        };
        bg.queue(jobs("v1"));
        bg.queue(jobs("v2"));
        let mut seen: BTreeMap<Group, Vec<String>> = BTreeMap::new();
        while seen.len() < groups.len() {
            let done = bg.results.recv().await.expect("results");
            assert!(done.len() <= CHUNK);
            for d in done {
                assert!(!d.messages.is_empty(), "the unbound route is reported");
                seen.entry(d.group).or_default().push(d.version);
            }
        }
        // Both queued before the task ran (one thread): only the newest.
        for (g, versions) in &seen {
            assert_eq!(versions, &["v2"], "{g}");
        }
        bg.stop().await;
    }
}

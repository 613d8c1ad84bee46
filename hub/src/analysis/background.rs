//! Analysis beside serving: when no code is held back (the default), a
//! build's analysis decides nothing about serving it, so the pipeline
//! serves the build at once and hands its changed groups' analyses
//! ([`Job`]) to this task, which runs them on its worker thread, below
//! serving's priority ([`super::worker`]), and sends
//! the results back ([`Done`]) for the pipeline — the analysis' single
//! writer — to take. A change every cluster receives is then pushed to
//! every cluster before, not after, N analyses.
//!
//! Jobs queue per group, first in first out, the newest replacing an
//! older one not yet run in its place (a burst of builds analyses each
//! group's latest once, and a group that changes all the time does not
//! starve the others); they run in chunks of [`CHUNK`], so that results
//! come as they are done and a newer build's job replaces its group's
//! still-queued one meanwhile. Each chunk's results say whether the queue
//! was empty after it ([`Analysed::idle`]). The task
//! ends with `shutdown` or when the pipeline drops its handle, after the
//! chunk under way.

use std::collections::{HashMap, VecDeque};

use meshhub_mcp::cache::Group;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, error, info_span};

use super::worker::Worker;
use super::{Done, Job, Memo};

/// Groups analysed per run on the worker.
pub const CHUNK: usize = 64;

/// One chunk's analyses.
#[derive(Debug)]
pub struct Analysed {
    /// The analyses.
    pub done: Vec<Done>,
    /// Nothing was queued after them.
    pub idle: bool,
}

/// The jobs not yet run: first in first out, one per group.
#[derive(Debug, Default)]
struct Pending {
    order: VecDeque<Group>,
    jobs: HashMap<Group, Job>,
}

impl Pending {
    /// Queues `job`, in the place of its group's queued one if any.
    fn add(&mut self, job: Job) {
        if !self.jobs.contains_key(&job.group) {
            self.order.push_back(job.group.clone());
        }
        self.jobs.insert(job.group.clone(), job);
    }

    /// The next `n` jobs.
    fn take(&mut self, n: usize) -> Vec<Job> {
        let mut out = Vec::new();
        while out.len() < n {
            let Some(group) = self.order.pop_front() else {
                break;
            };
            if let Some(job) = self.jobs.remove(&group) {
                out.push(job);
            }
        }
        out
    }

    fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

/// The pipeline's handle on the task.
#[derive(Debug)]
pub struct Background {
    jobs: mpsc::UnboundedSender<Vec<Job>>,
    /// The analyses done, a chunk at a time.
    pub results: mpsc::Receiver<Analysed>,
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
    jobs: mpsc::UnboundedReceiver<Vec<Job>>,
    results: mpsc::Sender<Analysed>,
    shutdown: CancellationToken,
) {
    let worker = Worker::spawn();
    analyse(&worker, jobs, results, shutdown).await;
    worker.stop().await;
}

async fn analyse(
    worker: &Worker,
    mut jobs: mpsc::UnboundedReceiver<Vec<Job>>,
    results: mpsc::Sender<Analysed>,
    shutdown: CancellationToken,
) {
    let mut pending = Pending::default();
    let mut memo = Memo::default();
    loop {
        if pending.is_empty() {
            tokio::select! {
                () = shutdown.cancelled() => return,
                batch = jobs.recv() => match batch {
                    Some(b) => b.into_iter().for_each(|j| pending.add(j)),
                    None => return,
                },
            }
        }
        while let Ok(b) = jobs.try_recv() {
            b.into_iter().for_each(|j| pending.add(j));
        }
        let chunk = pending.take(CHUNK);
        let mut m = std::mem::take(&mut memo);
        let ran = worker
            .run(move || {
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
                error!(error = %e, "an analysis failed; its chunk's groups are analysed again at their next build");
                continue;
            }
        };
        let idle = pending.is_empty() && jobs.is_empty();
        tokio::select! {
            () = shutdown.cancelled() => return,
            sent = results.send(Analysed { done, idle }) => if sent.is_err() { return },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
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

    #[test]
    fn the_queue_is_first_in_first_out_and_a_newer_job_keeps_its_groups_place() {
        let analysis = Analysis::new(AnalysisSpec {
            enabled: true,
            hold_back: Default::default(),
        });
        let job = |g: &str, v: &str| analysis.job(&Group::from(g), v, Arc::from(Vec::new()));
        let mut p = Pending::default();
        p.add(job("z", "v1"));
        p.add(job("a", "v1"));
        p.add(job("z", "v2"));
        p.add(job("m", "v1"));
        let taken: Vec<(String, String)> = p
            .take(10)
            .into_iter()
            .map(|j| (j.group.to_string(), j.version))
            .collect();
        assert_eq!(
            taken,
            [
                ("z".to_owned(), "v2".to_owned()),
                ("a".to_owned(), "v1".to_owned()),
                ("m".to_owned(), "v1".to_owned())
            ]
        );
        assert!(p.is_empty());
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
                .map(|g| analysis.job(g, v, Arc::from(vec![vs.clone()])))
                .collect::<Vec<_>>()
        };
        bg.queue(jobs("v1"));
        bg.queue(jobs("v2"));
        let mut seen: BTreeMap<Group, Vec<String>> = BTreeMap::new();
        let mut idle = false;
        while seen.len() < groups.len() {
            let a = bg.results.recv().await.expect("results");
            assert!(a.done.len() <= CHUNK);
            idle = a.idle;
            for d in a.done {
                assert!(!d.messages.is_empty(), "the unbound route is reported");
                seen.entry(d.group).or_default().push(d.version);
            }
        }
        // Both queued before the task ran (one thread): only the newest.
        for (g, versions) in &seen {
            assert_eq!(versions, &["v2"], "{g}");
        }
        assert!(idle, "the last chunk says the queue is empty");
        bg.stop().await;
    }
}

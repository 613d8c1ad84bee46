//! The thread analyses beside serving run on: one, at a lower scheduling
//! priority than the threads that serve ([`NICENESS`]). When a change
//! reaches every cluster, the pushes to every cluster and the analyses of
//! every group are due at once; on a machine with few cores the analyses
//! would take half of it while the pushes wait. Lowered, they run on what
//! serving leaves: the pushes (and their ACKs) come first, the analyses
//! right after, and an idle machine runs them as fast as before.
//!
//! Linux applies a niceness set for a thread id to that thread alone (see
//! setpriority(2)); elsewhere, or where it is refused, the worker runs at
//! the process' priority and says so once.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::thread::JoinHandle;

use tokio::sync::oneshot;
use tracing::{debug, warn};

/// How much lower than serving the worker runs: at nice 10 against 0, the
/// kernel gives it about a tenth of a contended core (weights 110 and 1024).
pub const NICENESS: i32 = 10;

type Work = Box<dyn FnOnce() + Send>;

/// The worker thread and the way to it.
#[derive(Debug)]
pub struct Worker {
    work: Option<mpsc::Sender<Work>>,
    thread: Option<JoinHandle<()>>,
}

/// The work did not finish: it panicked (the worker goes on), or the
/// worker is gone.
#[derive(Debug, thiserror::Error)]
pub enum Lost {
    #[error("the analysis panicked")]
    Panicked,
    #[error("the analysis worker is gone")]
    Gone,
}

impl Worker {
    /// Starts the thread; where no thread can be started, the work runs
    /// on tokio's blocking pool at the process' priority (said once).
    pub fn spawn() -> Self {
        let (work, rx) = mpsc::channel::<Work>();
        let spawned = std::thread::Builder::new()
            .name("meshhub-analysis".into())
            .spawn(move || {
                lower_priority();
                // Ends when every sender is gone.
                while let Ok(w) = rx.recv() {
                    w();
                }
            });
        match spawned {
            Ok(thread) => Self {
                work: Some(work),
                thread: Some(thread),
            },
            Err(e) => {
                warn!(error = %e, "no analysis worker thread: analyses run on the blocking pool at the process' priority");
                Self {
                    work: None,
                    thread: None,
                }
            }
        }
    }

    /// Runs `f` on the worker, after the work queued before it.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Lost> {
        let (tx, rx) = oneshot::channel();
        let work: Work = Box::new(move || {
            let out = catch_unwind(AssertUnwindSafe(f)).map_err(|_| Lost::Panicked);
            // The caller may have stopped waiting: nothing to tell.
            let _ = tx.send(out);
        });
        match &self.work {
            Some(thread) => thread.send(work).map_err(|_| Lost::Gone)?,
            None => drop(tokio::task::spawn_blocking(work)),
        }
        rx.await.map_err(|_| Lost::Gone)?
    }

    /// Lets the thread finish the work queued and waits for it.
    pub async fn stop(mut self) {
        // Closing the channel ends the thread's loop.
        self.work = None;
        if let Some(thread) = self.thread.take() {
            let joined = tokio::task::spawn_blocking(move || thread.join()).await;
            if !matches!(joined, Ok(Ok(()))) {
                warn!("the analysis worker ended abnormally");
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Without `stop` (a task aborted), the thread ends by itself once
        // the sender is gone, after the work under way.
        self.work = None;
    }
}

/// Lowers the calling thread's priority by [`NICENESS`].
fn lower_priority() {
    let tid = rustix::thread::gettid();
    let now = rustix::process::getpriority_process(Some(tid)).unwrap_or(0);
    match rustix::process::setpriority_process(Some(tid), now + NICENESS) {
        Ok(()) => debug!(
            niceness = now + NICENESS,
            "the analysis worker runs below serving"
        ),
        Err(e) => warn!(error = %e, "the analysis worker runs at the process' priority"),
    }
}

/// The calling thread's niceness (for tests).
#[cfg(test)]
fn niceness() -> i32 {
    rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_below_the_callers_priority_and_survives_a_panic() {
        let worker = Worker::spawn();
        let caller = niceness();
        let there = worker.run(niceness).await.unwrap();
        // Linux caps niceness at 19.
        assert_eq!(there, (caller + NICENESS).min(19));
        assert!(matches!(
            worker.run(|| panic!("an analyzer bug")).await,
            Err(Lost::Panicked)
        ));
        assert_eq!(worker.run(|| 42).await.unwrap(), 42);
        worker.stop().await;
    }
}

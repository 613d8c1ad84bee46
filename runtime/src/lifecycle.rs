//! Owned tasks and their graceful end: one [`CancellationToken`] ends
//! everything, a [`TaskTracker`] owns every task, and [`Lifecycle::stop`]
//! waits for them at most the grace period.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

/// The shutdown token, the task tracker and the grace period of a process.
#[derive(Clone, Debug)]
pub struct Lifecycle {
    /// Cancelled when the process stops.
    pub shutdown: CancellationToken,
    /// Owns every task.
    pub tasks: TaskTracker,
    /// How long [`Lifecycle::stop`] waits for the tasks.
    pub grace: Duration,
}

impl Lifecycle {
    /// A new lifecycle with `grace`.
    pub fn new(grace: Duration) -> Self {
        Self {
            shutdown: CancellationToken::new(),
            tasks: TaskTracker::new(),
            grace,
        }
    }

    /// Handles for the tasks a binary starts: the shutdown token they end
    /// on and the tracker that owns them.
    pub fn handles(&self) -> (CancellationToken, TaskTracker) {
        (self.shutdown.clone(), self.tasks.clone())
    }

    /// Cancels every task and waits for them, at most the grace period;
    /// logs `"{name} stopped"`. Returns whether every task ended in time.
    pub async fn stop(&self, name: &str) -> bool {
        self.shutdown.cancel();
        self.tasks.close();
        match tokio::time::timeout(self.grace, self.tasks.wait()).await {
            Ok(()) => {
                info!("{name} stopped");
                true
            }
            Err(_) => {
                warn!(grace = ?self.grace, tasks = self.tasks.len(), "grace period over; exiting with tasks still running");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn stop_gives_up_after_the_grace_period() {
        let life = Lifecycle::new(Duration::from_secs(2));
        // A task that ignores the shutdown token.
        life.tasks
            .spawn(async { tokio::time::sleep(Duration::from_secs(3600)).await });
        assert!(!life.stop("test").await);
    }

    #[tokio::test(start_paused = true)]
    async fn stop_waits_for_tasks_that_end() {
        let life = Lifecycle::new(Duration::from_secs(2));
        let token = life.shutdown.clone();
        life.tasks.spawn(async move { token.cancelled().await });
        assert!(life.stop("test").await);
    }
}

//! The console's one watch of the hub's state: a task that rebuilds the
//! fleet when something it shows changed — any peer's record in the ledger
//! (a stream connected or gone, a version sent, an ACK or NACK:
//! [`meshhub_mcp::ledger::Ledger::changes`]), a report, the rollout, the
//! pipeline's status, the clusters, pins, leader election — and never
//! otherwise (an idle fleet costs nothing; ages tick in the page) — once
//! per burst (it waits [`SETTLE`] for the rest, then takes every
//! signal queued meanwhile), and publishes it only when it differs. Open
//! consoles' event streams ([`super::events`]) follow its output: however
//! many consoles are open, the hub builds the fleet once per change. With
//! no stream open it builds nothing and keeps no fleet.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument as _, debug, error, info_span};

use super::Inputs;
use super::model::{Fleet, Query};
use super::renders::Renders;

/// How long the feed waits after a change for others to settle before it
/// rebuilds (a push to 1,000 clusters is 1,000 ACKs).
const SETTLE: Duration = Duration::from_millis(250);

/// The fleet as the feed last built it (`None` while no stream is open),
/// and how to follow it.
#[derive(Clone)]
pub struct Feed {
    fleet: Arc<watch::Sender<Option<Arc<Fleet>>>>,
    /// Bumped on every round the feed woke for, whether the fleet changed
    /// or not (what a cluster's page shows is more than its row).
    rounds: Arc<watch::Sender<u64>>,
    demand: Arc<Notify>,
    /// The fleet page's fragments per fleet and query, shared by the
    /// streams showing the same page (dropped with the fleet).
    renders: Arc<Renders<Fleet, Query>>,
}

impl Feed {
    /// A receiver of the fleet (its current value first: `None` until the
    /// first build after the feed woke); wakes the feed.
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<Fleet>>> {
        let rx = self.fleet.subscribe();
        self.demand.notify_one();
        rx
    }

    /// A receiver of the feed's rounds (and so a stream that keeps the
    /// feed awake, like [`Feed::subscribe`]), with the fleet's receiver.
    pub fn subscribe_rounds(&self) -> (watch::Receiver<u64>, watch::Receiver<Option<Arc<Fleet>>>) {
        (self.rounds.subscribe(), self.subscribe())
    }

    /// The fleet the feed holds now (none while no stream is open).
    pub fn current(&self) -> Option<Arc<Fleet>> {
        self.fleet.borrow().clone()
    }

    /// The fleet page's renders, shared by its streams.
    pub fn renders(&self) -> &Arc<Renders<Fleet, Query>> {
        &self.renders
    }
}

/// Starts the feed's task on `tasks`; it ends with `shutdown`.
pub fn spawn(
    inputs: Inputs,
    tasks: &tokio_util::task::TaskTracker,
    shutdown: CancellationToken,
) -> Feed {
    let feed = Feed {
        fleet: Arc::new(watch::Sender::new(None)),
        rounds: Arc::new(watch::Sender::new(0)),
        demand: Arc::new(Notify::new()),
        renders: Arc::new(Renders::new("fleet")),
    };
    tasks.spawn(run(inputs, feed.clone(), shutdown).instrument(info_span!("console.feed")));
    feed
}

async fn run(inputs: Inputs, feed: Feed, shutdown: CancellationToken) {
    let mut changes = Changes::new(&inputs);
    // The last build failed: wait for a change before the next.
    let mut failed = false;
    loop {
        if feed.fleet.receiver_count() == 0 {
            // Nobody follows: keep nothing, build nothing.
            feed.fleet.send_replace(None);
            feed.renders.clear();
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = feed.demand.notified() => {}
            }
            // What changed while nobody watched is in the build below.
            changes = Changes::new(&inputs);
        } else if feed.fleet.borrow().is_some() || failed {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = changes.next() => {}
                // The last stream closed: drop the fleet (above).
                _ = feed.fleet.closed() => continue,
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(SETTLE) => {}
            }
            // The burst's other signals are in this build.
            changes.drain();
        } else {
            // A stream is open and no fleet built yet (it subscribed
            // before this task first looked): build it now.
            changes.drain();
        }
        let built = {
            let inputs = inputs.clone();
            tokio::task::spawn_blocking(move || super::build_fleet(&inputs)).await
        };
        let fleet = match built {
            Ok(f) => f,
            Err(e) => {
                error!(error = %e, "building the console's fleet failed; trying again at the next change");
                failed = true;
                continue;
            }
        };
        failed = false;
        let changed = feed.fleet.send_if_modified(|current| {
            if current.as_deref() == Some(&fleet) {
                return false;
            }
            *current = Some(Arc::new(fleet));
            true
        });
        feed.rounds.send_modify(|n| *n += 1);
        if changed {
            metrics::counter!("meshhub_console_fleet_builds_total").increment(1);
            debug!("console fleet changed");
        }
    }
}

/// The signals of what the fleet shows.
struct Changes {
    ledger: watch::Receiver<u64>,
    inputs: Inputs,
}

impl Changes {
    fn new(inputs: &Inputs) -> Self {
        let mut inputs = inputs.clone();
        inputs.mark_seen();
        let mut ledger = inputs.admin.ledger.changes();
        ledger.borrow_and_update();
        Self { ledger, inputs }
    }

    /// Takes every signal already queued: the build that follows covers
    /// them.
    fn drain(&mut self) {
        self.ledger.borrow_and_update();
        self.inputs.mark_seen();
    }

    /// The next change of any input.
    async fn next(&mut self) {
        let i = &mut self.inputs;
        let pins = async {
            match &mut i.pins {
                Some(p) => change(p).await,
                None => std::future::pending().await,
            }
        };
        // Each branch's future waits on its own for an input that closed
        // (the leader's, without leader election, is closed from the
        // start): waiting in a branch's handler instead would stall every
        // other branch.
        tokio::select! {
            () = change(&mut self.ledger) => {}
            () = change(&mut i.admin.status) => {}
            () = change(&mut i.admin.reports) => {}
            () = change(&mut i.admin.agents) => {}
            () = change(&mut i.admin.leader) => {}
            () = change(&mut i.rollout) => {}
            () = change(&mut i.labels) => {}
            () = pins => {}
        }
    }
}

/// The next change of `rx`; never, once its sender is gone (a closed
/// input never changes again).
async fn change<T>(rx: &mut watch::Receiver<T>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
pub(crate) mod tests;

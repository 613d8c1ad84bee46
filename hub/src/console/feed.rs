//! The console's one watch of the hub's state: a task that rebuilds the
//! fleet when something it shows changed — a delivery (ACK/NACK), a
//! report, the rollout, the pipeline's status, the clusters, pins, leader
//! election, and every 2 s for what has no signal (a stream's connection)
//! — at most every [`SETTLE`], and publishes it only when it differs. Open
//! consoles' event streams ([`super::events`]) follow its output: however
//! many consoles are open, the hub builds the fleet once per change. With
//! no stream open it builds nothing.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::Inputs;
use super::model::Fleet;

/// How long the feed waits after a change for others to settle before it
/// rebuilds (a push to 1,000 clusters is 1,000 ACKs).
const SETTLE: Duration = Duration::from_millis(250);

/// How often it looks again without a signal.
const TICK: Duration = Duration::from_secs(2);

/// The fleet as the feed last built it, and how to ask it to start.
#[derive(Clone)]
pub struct Feed {
    fleet: watch::Receiver<Option<Arc<Fleet>>>,
    demand: Arc<Notify>,
}

impl Feed {
    /// A receiver of every fleet built from now on (the current one marked
    /// unseen, so that a new stream sends it at once; `None` until the
    /// first is built); wakes the feed.
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<Fleet>>> {
        let mut rx = self.fleet.clone();
        rx.mark_changed();
        self.demand.notify_one();
        rx
    }
}

/// Starts the feed's task on `tasks`; it ends with `shutdown`.
pub fn spawn(
    inputs: Inputs,
    tasks: &tokio_util::task::TaskTracker,
    shutdown: CancellationToken,
) -> Feed {
    let (tx, rx) = watch::channel(None);
    let demand = Arc::new(Notify::new());
    tasks.spawn(run(inputs, tx, demand.clone(), shutdown));
    Feed { fleet: rx, demand }
}

async fn run(
    inputs: Inputs,
    tx: watch::Sender<Option<Arc<Fleet>>>,
    demand: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let mut changes = Changes::new(&inputs);
    loop {
        // The sender's own handle held by `Feed` counts as one receiver.
        if tx.receiver_count() <= 1 {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = demand.notified() => {}
            }
            // Whatever changed while nobody watched is stale news.
            changes = Changes::new(&inputs);
        } else {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = changes.next() => {}
                _ = tokio::time::sleep(TICK) => {}
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(SETTLE) => {}
            }
        }
        let built = {
            let inputs = inputs.clone();
            tokio::task::spawn_blocking(move || super::build_fleet(&inputs)).await
        };
        let Ok(fleet) = built else { return };
        let sent = tx.send_if_modified(|current| {
            if current.as_deref() == Some(&fleet) {
                return false;
            }
            *current = Some(Arc::new(fleet));
            true
        });
        if sent {
            metrics::counter!("meshhub_console_fleet_builds_total").increment(1);
            debug!("console fleet changed");
        }
    }
}

/// The signals of what the fleet shows.
struct Changes {
    deliveries: broadcast::Receiver<meshhub_mcp::ledger::Delivery>,
    inputs: Inputs,
}

impl Changes {
    fn new(inputs: &Inputs) -> Self {
        let mut inputs = inputs.clone();
        inputs.mark_seen();
        Self {
            deliveries: inputs.admin.ledger.deliveries(),
            inputs,
        }
    }

    /// The next change of any input.
    async fn next(&mut self) {
        let i = &mut self.inputs;
        let pins = async {
            match &mut i.pins {
                Some(p) => p.changed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = self.deliveries.recv() => {
                if matches!(r, Err(broadcast::error::RecvError::Closed)) {
                    std::future::pending::<()>().await;
                }
            }
            r = i.admin.status.changed() => closed(r).await,
            r = i.admin.reports.changed() => closed(r).await,
            r = i.admin.agents.changed() => closed(r).await,
            r = i.admin.leader.changed() => closed(r).await,
            r = i.rollout.changed() => closed(r).await,
            r = i.labels.changed() => closed(r).await,
            r = pins => closed(r).await,
        }
    }
}

/// A closed input never changes again: wait for the others.
async fn closed(r: Result<(), watch::error::RecvError>) {
    if r.is_err() {
        std::future::pending::<()>().await;
    }
}

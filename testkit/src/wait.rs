//! Waiting with a deadline. A test synchronises on what it can observe,
//! never on a guessed sleep: where the code under test gives a signal (a
//! readiness future, a `watch` channel, a stream's next message) the test
//! awaits it under [`within`]; where it gives none, [`eventually`] polls.
//! Either way a failure names what was awaited instead of hanging the run.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How long any single wait may take before the test fails. Generous: the
/// machines that run the suite are small and shared.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// How often [`eventually`] asks again.
const POLL: Duration = Duration::from_millis(10);

/// Polls `check` every 10 ms until it holds; panics naming `what` after
/// [`DEADLINE`]. Uses tokio's clock, so a paused-time test advances
/// through the polls instead of waiting for them.
pub async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    eventually_some(what, async || check().await.then_some(())).await;
}

/// Polls `check` every 10 ms until it returns `Some`, and returns that
/// value; panics naming `what` after [`DEADLINE`].
pub async fn eventually_some<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        // Checked between polls rather than by a timeout around the whole
        // loop: under a paused clock a timeout would fire while a check
        // awaits real I/O.
        assert!(
            Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Awaits `signal` for at most [`DEADLINE`]; panics naming `what` when it
/// does not come.
pub async fn within<F: Future>(what: &str, signal: F) -> F::Output {
    tokio::time::timeout(DEADLINE, signal)
        .await
        .unwrap_or_else(|_| panic!("timed out after {DEADLINE:?} waiting for {what}"))
}

/// [`eventually_some`] for tests without a runtime (process-level tests
/// driving child processes): polls every 20 ms on the calling thread.
pub fn eventually_blocking<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {DEADLINE:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

//! The backoff of the hub's Kubernetes watchers: the engine's reconnect
//! policy (exponential, full jitter, reset by the first good event), so
//! that a failing API server is retried the way every dialer retries its
//! peer, instead of kube-runtime's own schedule (or none).

use std::time::Duration;

use meshhub_mcp::reconnect::{Backoff, ReconnectPolicy};

/// kube-runtime's watchers retry from 0.8 s up to 30 s; the same bounds,
/// with full jitter.
pub const WATCH_RETRY: ReconnectPolicy = ReconnectPolicy {
    initial: Duration::from_millis(800),
    max: Duration::from_secs(30),
    factor: 2.0,
};

/// A backoff for `WatchStreamExt::backoff`: reset on every good event
/// (kube-runtime's `StreamBackoff` does that).
#[derive(Debug)]
pub struct WatchBackoff(Backoff);

impl WatchBackoff {
    /// A fresh backoff with [`WATCH_RETRY`].
    pub fn new() -> Self {
        Self(Backoff::new(WATCH_RETRY))
    }
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.0.next()
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.0.reset();
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::utils::Backoff as _;

    use super::*;

    #[test]
    fn waits_stay_within_the_policy_and_reset_starts_over() {
        let mut b = WatchBackoff::new();
        for _ in 0..20 {
            let d = b.next().expect("never ends");
            assert!(d <= WATCH_RETRY.max, "{d:?}");
        }
        b.reset();
        let first = b.next().unwrap();
        assert!(first <= WATCH_RETRY.initial, "{first:?}");
    }
}

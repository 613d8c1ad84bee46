//! The agent's retry schedule, for a change that failed to persist (asked
//! for again) and a Kubernetes sync that failed (retried by the applier).
//!
//! backon's exponential schedule with backon's jitter, which waits between
//! one and two steps: a retry never comes sooner than its step (so a
//! failing disk or API server is not hammered), and the retries of many
//! collections spread out. The steps stop at half the cap, so no wait is
//! longer than `max`. (The engine's reconnect policy uses full jitter
//! instead, which may wait almost nothing: right for many peers
//! reconnecting to one hub, not for a retry that must back off.)

use std::time::Duration;

use backon::{BackoffBuilder as _, ExponentialBackoff, ExponentialBuilder};

/// One failing thing's retry schedule; start a new one after a success.
#[derive(Debug)]
pub struct Retry {
    schedule: ExponentialBackoff,
    max: Duration,
}

impl Retry {
    /// Waits from `[first, 2·first)`, doubling, never longer than `max`.
    pub fn new(first: Duration, max: Duration) -> Self {
        let schedule = ExponentialBuilder::default()
            .with_min_delay(first)
            .with_max_delay(max / 2)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times()
            .build();
        Self { schedule, max }
    }

    /// The wait before the next retry.
    pub fn next_delay(&mut self) -> Duration {
        self.schedule.next().unwrap_or(self.max).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_within_one_and_two_steps_and_never_pass_the_cap() {
        let first = Duration::from_millis(500);
        let max = Duration::from_secs(10);
        for _ in 0..50 {
            let mut r = Retry::new(first, max);
            let waits: Vec<Duration> = (0..10).map(|_| r.next_delay()).collect();
            for (i, w) in waits.iter().enumerate() {
                let step = (first * 2u32.pow(i as u32)).min(max / 2);
                assert!(
                    *w >= step && *w < step * 2,
                    "wait {i}: {w:?}, step {step:?}"
                );
                assert!(*w <= max, "{w:?}");
            }
        }
        // Jittered: two schedules rarely agree.
        let a: Vec<_> = {
            let mut r = Retry::new(first, max);
            (0..5).map(|_| r.next_delay()).collect()
        };
        let b: Vec<_> = {
            let mut r = Retry::new(first, max);
            (0..5).map(|_| r.next_delay()).collect()
        };
        assert_ne!(a, b);
    }
}

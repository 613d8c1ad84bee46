//! Reconnection policy shared by every dialer: exponential backoff with full
//! jitter, a sane first interval, a cap, and a reset only after a stream
//! proved healthy (its first good message).
//!
//! The exponential schedule comes from `backon` (maintained; the `backoff`
//! crate is unmaintained, RUSTSEC-2025-0012). backon's own jitter adds up to
//! one more delay on top (so it can exceed the cap); we apply "full jitter"
//! instead: each wait is uniform in `[0, schedule]`, never above the cap.
//! That spreads the reconnects of many peers after a hub restart.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Reconnect settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ReconnectPolicy {
    /// First backoff ceiling (≤ 1 s recommended).
    pub initial: Duration,
    /// Largest ceiling.
    pub max: Duration,
    /// Growth factor per failed attempt.
    pub factor: f32,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(30),
            factor: 2.0,
        }
    }
}

/// The state of one dialer's backoff.
#[derive(Debug)]
pub struct Backoff {
    policy: ReconnectPolicy,
    schedule: ExponentialBackoff,
    rng: SmallRng,
}

impl Backoff {
    /// A fresh backoff with a random seed.
    pub fn new(policy: ReconnectPolicy) -> Self {
        Self::with_rng(policy, SmallRng::from_os_rng())
    }

    /// A fresh backoff with a fixed seed (tests).
    pub fn seeded(policy: ReconnectPolicy, seed: u64) -> Self {
        Self::with_rng(policy, SmallRng::seed_from_u64(seed))
    }

    fn with_rng(policy: ReconnectPolicy, rng: SmallRng) -> Self {
        let schedule = Self::schedule(&policy);
        Self {
            policy,
            schedule,
            rng,
        }
    }

    fn schedule(policy: &ReconnectPolicy) -> ExponentialBackoff {
        ExponentialBuilder::default()
            .with_min_delay(policy.initial)
            .with_max_delay(policy.max)
            .with_factor(policy.factor)
            .without_max_times()
            .build()
    }

    /// The ceiling of the next wait (before jitter).
    fn ceiling(&mut self) -> Duration {
        self.schedule
            .next()
            .unwrap_or(self.policy.max)
            .min(self.policy.max)
    }

    /// The next wait: uniform in `[0, ceiling]`.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling();
        let nanos = ceiling.as_nanos().min(u64::MAX as u128) as u64;
        Duration::from_nanos(self.rng.random_range(0..=nanos))
    }

    /// Back to the first interval (call after a healthy response).
    pub fn reset(&mut self) {
        self.schedule = Self::schedule(&self.policy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ceilings(policy: &ReconnectPolicy, n: usize) -> Vec<Duration> {
        let mut b = Backoff::seeded(policy.clone(), 1);
        (0..n).map(|_| b.ceiling()).collect()
    }

    #[test]
    fn ceilings_grow_exponentially_to_the_cap() {
        let p = ReconnectPolicy::default();
        let c = ceilings(&p, 10);
        assert_eq!(c[0], Duration::from_millis(500));
        assert_eq!(c[1], Duration::from_secs(1));
        assert_eq!(c[2], Duration::from_secs(2));
        assert_eq!(c[5], Duration::from_secs(16));
        assert_eq!(c[6], Duration::from_secs(30));
        assert_eq!(c[9], Duration::from_secs(30));
    }

    #[test]
    fn every_delay_is_within_its_ceiling_and_jittered() {
        let p = ReconnectPolicy::default();
        let expected = ceilings(&p, 40);
        for seed in 0..50 {
            let mut b = Backoff::seeded(p.clone(), seed);
            for ceiling in &expected {
                let d = b.next_delay();
                assert!(d <= *ceiling, "{d:?} > {ceiling:?}");
            }
        }
        // Jitter: different seeds give different waits.
        let firsts: std::collections::HashSet<Duration> = (0..20)
            .map(|s| Backoff::seeded(p.clone(), s).next_delay())
            .collect();
        assert!(firsts.len() > 10);
    }

    #[test]
    fn reset_goes_back_to_the_first_interval() {
        let p = ReconnectPolicy::default();
        let mut b = Backoff::seeded(p.clone(), 3);
        for _ in 0..8 {
            b.next_delay();
        }
        assert_eq!(b.ceiling(), p.max);
        b.reset();
        assert_eq!(b.ceiling(), p.initial);
    }
}

//! Reconnection policy shared by every dialer: exponential backoff with full
//! jitter, a sane first interval, a cap, and a reset only after a stream
//! proved healthy (its first good message).
//!
//! The exponential schedule comes from `backon` (maintained; the `backoff`
//! crate is unmaintained, RUSTSEC-2025-0012). backon's own jitter adds up to
//! one more delay on top (so it can exceed the cap); we apply "full jitter"
//! instead: each wait is uniform in `[0, schedule]`, never above the cap.
//! That spreads the reconnects of many peers after a hub restart.

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;

use crate::settings::{SettingError, duration};

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

/// A `reconnect:` block as written: every key optional, defaults from
/// [`ReconnectPolicy::default`].
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawReconnect {
    /// `initial` (`500ms`).
    #[serde(default, deserialize_with = "duration")]
    pub initial: Option<Duration>,
    /// `max` (`30s`).
    #[serde(default, deserialize_with = "duration")]
    pub max: Option<Duration>,
    /// `factor` (`2`).
    #[serde(default)]
    pub factor: Option<f32>,
}

impl RawReconnect {
    /// The checked policy (errors name the key within the block).
    pub fn check(&self) -> Result<ReconnectPolicy, SettingError> {
        let defaults = ReconnectPolicy::default();
        let reconnect = ReconnectPolicy {
            initial: self.initial.unwrap_or(defaults.initial),
            max: self.max.unwrap_or(defaults.max),
            factor: self.factor.unwrap_or(defaults.factor),
        };
        if reconnect.initial.is_zero() {
            return Err(SettingError::new("initial", "must be positive"));
        }
        if reconnect.max < reconnect.initial {
            return Err(SettingError::new(
                "max",
                format!(
                    "{} is shorter than reconnect.initial {}",
                    humantime::format_duration(reconnect.max),
                    humantime::format_duration(reconnect.initial)
                ),
            ));
        }
        if !(reconnect.factor.is_finite() && reconnect.factor >= 1.0) {
            return Err(SettingError::new(
                "factor",
                format!("{} must be a number >= 1", reconnect.factor),
            ));
        }
        Ok(reconnect)
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

/// The waits, forever: for code that takes a backoff as an iterator of
/// delays (kube-runtime's watchers, through an adapter where Kubernetes is
/// seen).
impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_delay())
    }
}

/// How one connection attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// It failed before the peer sent anything: back off further.
    Failed,
    /// The stream delivered at least one message before it ended: start
    /// the backoff over.
    Healthy,
    /// Do not reconnect (shutdown).
    Stop,
}

/// Runs `attempt` until it returns [`Attempt::Stop`] or `shutdown`, waiting
/// `backoff.next_delay()` between attempts and resetting the backoff after
/// a healthy one. `on_wait` sees each wait before it starts.
pub async fn reconnect_loop<F, Fut>(
    mut backoff: Backoff,
    shutdown: &tokio_util::sync::CancellationToken,
    mut attempt: F,
    mut on_wait: impl FnMut(Duration),
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Attempt>,
{
    loop {
        match attempt().await {
            Attempt::Stop => return,
            Attempt::Healthy => backoff.reset(),
            Attempt::Failed => {}
        }
        if shutdown.is_cancelled() {
            return;
        }
        let delay = backoff.next_delay();
        on_wait(delay);
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
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
    fn as_an_iterator_it_never_ends_and_stays_within_the_ceilings() {
        let p = ReconnectPolicy::default();
        let expected = ceilings(&p, 12);
        let waits: Vec<Duration> = Backoff::seeded(p, 5).take(12).collect();
        assert_eq!(waits.len(), 12);
        for (w, c) in waits.iter().zip(&expected) {
            assert!(w <= c, "{w:?} > {c:?}");
        }
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

#[cfg(test)]
mod paused_time {
    use std::sync::{Arc, Mutex};

    use tokio::time::Instant;
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// Drives the loop with a scripted sequence of outcomes and records when
    /// each attempt started, on tokio's paused clock.
    async fn run(script: Vec<Attempt>, seed: u64) -> (Vec<Duration>, Vec<Duration>) {
        let policy = ReconnectPolicy::default();
        let starts = Arc::new(Mutex::new(Vec::new()));
        let waits = Arc::new(Mutex::new(Vec::new()));
        let shutdown = CancellationToken::new();
        let t0 = Instant::now();
        let mut script = script.into_iter();
        let (s, w) = (starts.clone(), waits.clone());
        reconnect_loop(
            Backoff::seeded(policy, seed),
            &shutdown,
            move || {
                s.lock().unwrap().push(t0.elapsed());
                let next = script.next().unwrap_or(Attempt::Stop);
                async move { next }
            },
            move |d| w.lock().unwrap().push(d),
        )
        .await;
        let starts = starts.lock().unwrap().clone();
        let waits = waits.lock().unwrap().clone();
        (starts, waits)
    }

    #[tokio::test(start_paused = true)]
    async fn waits_between_attempts_stay_within_the_exponential_ceilings() {
        for seed in 0..20 {
            let failures = vec![Attempt::Failed; 12];
            let (starts, waits) = run(failures, seed).await;
            assert_eq!(starts.len(), 13);
            let mut ceilings = Backoff::seeded(ReconnectPolicy::default(), seed);
            for (i, pair) in starts.windows(2).enumerate() {
                let gap = pair[1] - pair[0];
                // The paused clock advances by the wait, rounded up to
                // tokio's 1 ms timer resolution.
                assert!(
                    gap >= waits[i] && gap - waits[i] < Duration::from_millis(1),
                    "attempt {i}: {gap:?} vs {:?}",
                    waits[i]
                );
                let ceiling = ceilings.ceiling();
                assert!(
                    waits[i] <= ceiling,
                    "wait {i}: {:?} > {ceiling:?}",
                    waits[i]
                );
                assert!(ceiling <= Duration::from_secs(30));
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_healthy_stream_resets_the_backoff() {
        // Eight failures push the ceiling to the cap; then a healthy stream.
        let mut script = vec![Attempt::Failed; 8];
        script.push(Attempt::Healthy);
        script.push(Attempt::Failed);
        let (_, waits) = run(script, 7).await;
        // The wait after the healthy stream is bounded by the first ceiling.
        assert!(
            waits[8] <= ReconnectPolicy::default().initial,
            "{:?}",
            waits[8]
        );
        // Without the reset it could have been up to 30 s: check the script
        // really reached the cap (some wait before it exceeded 8 s).
        assert!(
            waits[..8].iter().any(|w| *w > Duration::from_secs(8)),
            "{waits:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_stops_a_pending_wait() {
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let attempts = Arc::new(Mutex::new(0));
        let a = attempts.clone();
        let task = tokio::spawn(async move {
            reconnect_loop(
                Backoff::seeded(
                    ReconnectPolicy {
                        initial: Duration::from_secs(60),
                        max: Duration::from_secs(60),
                        factor: 2.0,
                    },
                    1,
                ),
                &stop,
                move || {
                    *a.lock().unwrap() += 1;
                    async { Attempt::Failed }
                },
                |_| {},
            )
            .await
        });
        tokio::task::yield_now().await;
        shutdown.cancel();
        task.await.unwrap();
        assert_eq!(*attempts.lock().unwrap(), 1);
    }
}

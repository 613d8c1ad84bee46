//! The debouncer: when the pipeline's pending changes are due.

use std::time::Duration;

use tokio::time::Instant;

use super::Debounce;

/// The debouncer's clock logic, kept pure for tests.
#[derive(Clone, Debug)]
pub struct Debouncer {
    quiet: Duration,
    max_wait: Duration,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Debouncer {
    /// A debouncer with these settings and nothing pending.
    pub fn new(settings: Debounce) -> Self {
        Self {
            quiet: settings.quiet,
            max_wait: settings.max_wait,
            first: None,
            last: None,
        }
    }

    /// A change arrived at `now`.
    pub fn touch(&mut self, now: Instant) {
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// Whether a change is pending.
    pub fn pending(&self) -> bool {
        self.first.is_some()
    }

    /// When pending changes are due: after the quiet period since the last
    /// change, at the latest the maximum wait after the first one.
    pub fn deadline(&self) -> Option<Instant> {
        let (first, last) = (self.first?, self.last?);
        Some((last + self.quiet).min(first + self.max_wait))
    }

    /// Takes the pending changes at `now`: how long the oldest one waited.
    pub fn take(&mut self, now: Instant) -> Option<Duration> {
        let first = self.first.take()?;
        self.last = None;
        Some(now.saturating_duration_since(first))
    }
}

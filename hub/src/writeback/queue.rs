//! The writes waiting for their turn: one per object (a newer status
//! replaces a queued one, so a burst of changes costs one write per
//! object), first in first out, with a failed write retried after an
//! exponential delay. At most one write per object is in flight; a status
//! queued meanwhile waits for it. Pure: the writer task gives the time.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// First retry delay after a failed write.
pub const RETRY_INITIAL: Duration = Duration::from_secs(1);
/// Longest retry delay.
pub const RETRY_MAX: Duration = Duration::from_secs(60);

/// The queue of writes: keys `K`, values `V` (what to write).
#[derive(Debug)]
pub struct Queue<K, V> {
    /// What waits, per key, with the failures of its key so far.
    waiting: HashMap<K, Waiting<V>>,
    /// Keys in the order they may go (a key may appear after it left
    /// `waiting`: skipped).
    ready: VecDeque<K>,
    /// Keys delayed after a failure, by when they may go.
    delayed: BinaryHeap<Reverse<(Instant, K)>>,
    /// Writes under way, with what they write and the failures so far.
    in_flight: HashMap<K, (V, u32)>,
}

#[derive(Debug)]
struct Waiting<V> {
    value: V,
    failures: u32,
    /// Not before (after a failure).
    due: Option<Instant>,
    /// In `ready` (or `delayed`) already.
    listed: bool,
}

impl<K: Clone + Eq + Hash + Ord, V: Clone> Default for Queue<K, V> {
    fn default() -> Self {
        Self {
            waiting: HashMap::new(),
            ready: VecDeque::new(),
            delayed: BinaryHeap::new(),
            in_flight: HashMap::new(),
        }
    }
}

impl<K: Clone + Eq + Hash + Ord, V: Clone> Queue<K, V> {
    /// Queues `value` for `key`, replacing what waits for it.
    pub fn push(&mut self, key: K, value: V) {
        if let Some(w) = self.waiting.get_mut(&key) {
            w.value = value;
            return;
        }
        let listed = !self.in_flight.contains_key(&key);
        if listed {
            self.ready.push_back(key.clone());
        }
        self.waiting.insert(
            key,
            Waiting {
                value,
                failures: 0,
                due: None,
                listed,
            },
        );
    }

    /// What waits for `key` (not what is in flight).
    pub fn waiting(&self, key: &K) -> Option<&V> {
        self.waiting.get(key).map(|w| &w.value)
    }

    /// What is being written for `key`.
    pub fn in_flight(&self, key: &K) -> Option<&V> {
        self.in_flight.get(key).map(|(v, _)| v)
    }

    /// Drops what waits for `key` (no longer needed).
    pub fn remove(&mut self, key: &K) {
        self.waiting.remove(key);
    }

    /// Drops everything waiting (writes in flight end as they will).
    pub fn clear(&mut self) {
        self.waiting.clear();
        self.ready.clear();
        self.delayed.clear();
    }

    /// How many writes wait.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// How many writes are under way.
    pub fn flying(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether a write may go at `now`.
    pub fn has_ready(&mut self, now: Instant) -> bool {
        self.promote(now);
        while let Some(k) = self.ready.front() {
            if self.waiting.get(k).is_some_and(|w| w.listed) {
                return true;
            }
            self.ready.pop_front();
        }
        false
    }

    /// When the next delayed write may go (delayed keys removed or listed
    /// again since are dropped here, so no timer fires for them).
    pub fn next_due(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, key))) = self.delayed.peek() {
            if self.waiting.get(key).is_some_and(|w| w.due == Some(*at)) {
                return Some(*at);
            }
            self.delayed.pop();
        }
        None
    }

    /// The next write that may go at `now`: it is in flight until
    /// [`Queue::done`].
    pub fn pop(&mut self, now: Instant) -> Option<(K, V)> {
        self.promote(now);
        while let Some(key) = self.ready.pop_front() {
            if !self.waiting.get(&key).is_some_and(|w| w.listed) {
                continue; // removed, or waiting for its write in flight
            }
            let w = self.waiting.remove(&key).expect("checked");
            self.in_flight
                .insert(key.clone(), (w.value.clone(), w.failures));
            return Some((key, w.value));
        }
        None
    }

    /// The write of `key` ended (`ok`: written, or nothing to write to).
    /// A failed write goes again after a delay, unless a newer value
    /// waits (which then goes after that delay).
    pub fn done(&mut self, key: &K, ok: bool, now: Instant) {
        let Some((value, failures)) = self.in_flight.remove(key) else {
            return;
        };
        if ok {
            // A newer value waiting goes now.
            if self.waiting.contains_key(key) {
                self.list(key.clone());
            }
            return;
        }
        let failures = failures + 1;
        let w = self.waiting.entry(key.clone()).or_insert(Waiting {
            value,
            failures,
            due: None,
            listed: false,
        });
        w.failures = failures;
        w.due = Some(now + retry_delay(failures));
        self.list(key.clone());
    }

    /// Lists a waiting key: ready, or delayed until its due time.
    fn list(&mut self, key: K) {
        let Some(w) = self.waiting.get_mut(&key) else {
            return;
        };
        w.listed = true;
        match w.due {
            Some(at) => self.delayed.push(Reverse((at, key))),
            None => self.ready.push_back(key),
        }
    }

    /// Moves the delayed keys due at `now` to the ready ones.
    fn promote(&mut self, now: Instant) {
        while let Some(Reverse((at, _))) = self.delayed.peek() {
            if *at > now {
                break;
            }
            let Reverse((_, key)) = self.delayed.pop().expect("peeked");
            if let Some(w) = self.waiting.get_mut(&key) {
                w.due = None;
                self.ready.push_back(key);
            }
        }
    }
}

/// The delay after `failures` failed writes in a row.
pub fn retry_delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    RETRY_INITIAL.saturating_mul(1 << exp).min(RETRY_MAX)
}

#[cfg(test)]
mod tests;

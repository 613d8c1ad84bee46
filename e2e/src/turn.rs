//! Who may use the machine now. The e2e tests are one test binary, so
//! libtest runs two of them at once where one binary per file used to run
//! the files one after another. Tests of different files were never side
//! by side, and some would not bear it: the ones that start kube-apiservers,
//! istiod or a long fault loop assert timings (lease takeovers, latencies,
//! memory and task baselines) that a neighbour's load would make flaky.
//!
//! So each test takes a [`Turn`] for its group (its module, i.e. its former
//! file) before it starts anything: tests of one group share the machine
//! as they did inside their own binary; a test of another group waits until
//! the group before it is done, in the order the tests asked. The suite's
//! concurrency is what it was, and the binaries linked are one.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, PoisonError};

/// The machine held by a group while its tests run; dropping it (also
/// while a test panics) lets the next group in.
#[derive(Debug)]
#[must_use = "the turn ends when dropped"]
pub struct Turn {
    _private: (),
}

struct Machine {
    /// The group running, and how many of its tests are.
    running: Option<(&'static str, usize)>,
    /// Tests waiting, in the order they asked: (ticket, group).
    queue: VecDeque<(u64, &'static str)>,
    next_ticket: u64,
}

impl Machine {
    /// Whether `ticket` of `group` may start: its group is the one running
    /// (or none is), and no test of another group asked before it.
    fn may_start(&self, ticket: u64, group: &str) -> bool {
        let compatible = self.running.is_none_or(|(g, _)| g == group);
        compatible
            && self
                .queue
                .iter()
                .take_while(|(t, _)| *t != ticket)
                .all(|(_, g)| *g == group)
    }
}

static MACHINE: Mutex<Machine> = Mutex::new(Machine {
    running: None,
    queue: VecDeque::new(),
    next_ticket: 0,
});
static CHANGED: Condvar = Condvar::new();

/// Waits for `group`'s turn (pass `module_path!()`) and holds it until
/// the returned [`Turn`] is dropped. The mutex is held only to update the
/// bookkeeping, never while a test runs.
pub fn turn(group: &'static str) -> Turn {
    let mut m = MACHINE.lock().unwrap_or_else(PoisonError::into_inner);
    let ticket = m.next_ticket;
    m.next_ticket += 1;
    m.queue.push_back((ticket, group));
    while !m.may_start(ticket, group) {
        m = CHANGED.wait(m).unwrap_or_else(PoisonError::into_inner);
    }
    m.queue.retain(|(t, _)| *t != ticket);
    let running = m.running.map_or(0, |(_, n)| n);
    m.running = Some((group, running + 1));
    drop(m);
    // Another test of the same group, queued behind this one, may start too.
    CHANGED.notify_all();
    Turn { _private: () }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut m = MACHINE.lock().unwrap_or_else(PoisonError::into_inner);
        m.running = match m.running {
            Some((g, n)) if n > 1 => Some((g, n - 1)),
            _ => None,
        };
        drop(m);
        CHANGED.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(running: Option<(&'static str, usize)>, queue: &[(u64, &'static str)]) -> Machine {
        Machine {
            running,
            queue: queue.iter().copied().collect(),
            next_ticket: 10,
        }
    }

    #[test]
    fn a_group_shares_the_machine_and_others_wait_in_order() {
        // An idle machine: the first asker starts.
        assert!(machine(None, &[(0, "a")]).may_start(0, "a"));
        // A test of the running group joins it.
        assert!(machine(Some(("a", 1)), &[(2, "a")]).may_start(2, "a"));
        // Another group waits while one runs.
        assert!(!machine(Some(("a", 1)), &[(1, "b")]).may_start(1, "b"));
        // A test of the running group does not pass a group that asked
        // before it: the turn goes in order.
        let m = machine(Some(("a", 1)), &[(1, "b"), (2, "a")]);
        assert!(!m.may_start(2, "a") && !m.may_start(1, "b"));
        // Once the machine is free, the earliest group goes first.
        let m = machine(None, &[(1, "b"), (2, "a"), (3, "b")]);
        assert!(m.may_start(1, "b") && !m.may_start(2, "a") && !m.may_start(3, "b"));
    }
}

//! The one decision of what a cluster is served.
//!
//! Several things have a say in what a cluster gets: the newest build the
//! analysis lets through, an operator's pin, and — for the clusters the hub
//! dials, when a rollout policy is configured — the rollout's decision
//! (wave by wave, holds, rollbacks, what the leader decided). This function
//! is the one place that weighs them; the hub's pipeline asks it for every
//! change of any input and serves exactly what it answers, so no path (a
//! build, a pin, an unpin, a restart, a leadership change) can bypass
//! another.
//!
//! ```text
//!   pin ───────────────────────────────────────────▶ served (operator's word)
//!   governed by the rollout ── rollout decision ───▶ served
//!                           └─ none it can produce ─▶ nothing pushed: keeps what it holds
//!   not governed ── newest build analysis passes ──▶ served
//! ```

/// Why a cluster is served what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// An operator pinned it.
    Pinned,
    /// The rollout decided it.
    Rollout,
    /// Its newest build (that analysis lets through): no rollout governs it.
    Newest,
}

/// What one cluster is served, from every input: `pin` (the pinned
/// snapshot, if any), whether a rollout `governs` the cluster, the
/// rollout's `decision` (only read when it governs: `None` when it has
/// none this replica can produce), and the `newest` servable build. `None`:
/// nothing is pushed; the cluster keeps what it holds.
pub fn decide<T>(
    pin: Option<T>,
    governs: bool,
    decision: impl FnOnce() -> Option<T>,
    newest: impl FnOnce() -> Option<T>,
) -> Option<(T, Basis)> {
    if let Some(p) = pin {
        return Some((p, Basis::Pinned));
    }
    if governs {
        // Fails closed: a decision that can't be produced is never
        // replaced by the newest build.
        return decision().map(|d| (d, Basis::Rollout));
    }
    newest().map(|n| (n, Basis::Newest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_wins_then_the_rollout_then_the_newest_and_a_missing_decision_keeps() {
        let none = || None::<&str>;
        assert_eq!(
            decide(Some("pin"), true, || Some("r"), || Some("n")),
            Some(("pin", Basis::Pinned))
        );
        assert_eq!(
            decide(None, true, || Some("r"), || Some("n")),
            Some(("r", Basis::Rollout))
        );
        assert_eq!(decide(None, true, none, || Some("n")), None, "fails closed");
        assert_eq!(
            decide(None, false, || Some("r"), || Some("n")),
            Some(("n", Basis::Newest))
        );
        assert_eq!(decide(None, false, none, none), None);
    }
}

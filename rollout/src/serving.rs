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
//!                           └─ one it can't produce ─▶ withdrawn: the agent keeps what it ACKed
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

/// What the rollout says of one cluster it governs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ruling<T> {
    /// Serve this.
    Serve(T),
    /// No decision yet: push nothing; what is served stays.
    Keep,
    /// Its decided version can't be produced here: stop serving what was
    /// served (it is not what the rollout wants, maybe the very version
    /// the cluster refused); streams end and the cluster's agent keeps
    /// what it last ACKed.
    Withdraw,
}

/// The one decision for a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Served<T> {
    /// Serve `T`.
    Serve(T, Basis),
    /// Push nothing; what is served stays.
    Keep,
    /// Stop serving what is served.
    Withdraw,
}

/// What one cluster is served, from every input: `pin` (the pinned
/// snapshot, if any), whether a rollout `governs` the cluster, the
/// rollout's `ruling` (only asked when it governs), and the `newest`
/// servable build (only asked when it does not).
pub fn decide<T>(
    pin: Option<T>,
    governs: bool,
    ruling: impl FnOnce() -> Ruling<T>,
    newest: impl FnOnce() -> Option<T>,
) -> Served<T> {
    if let Some(p) = pin {
        return Served::Serve(p, Basis::Pinned);
    }
    if governs {
        // Fails closed: a decision that can't be produced is never
        // replaced by the newest build.
        return match ruling() {
            Ruling::Serve(d) => Served::Serve(d, Basis::Rollout),
            Ruling::Keep => Served::Keep,
            Ruling::Withdraw => Served::Withdraw,
        };
    }
    newest().map_or(Served::Keep, |n| Served::Serve(n, Basis::Newest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_wins_then_the_rollout_then_the_newest_and_a_missing_decision_keeps() {
        let serve = || Ruling::Serve("r");
        assert_eq!(
            decide(Some("pin"), true, serve, || Some("n")),
            Served::Serve("pin", Basis::Pinned)
        );
        assert_eq!(
            decide(None, true, serve, || Some("n")),
            Served::Serve("r", Basis::Rollout)
        );
        assert_eq!(
            decide(None, true, || Ruling::Keep, || Some("n")),
            Served::Keep,
            "fails closed"
        );
        assert_eq!(
            decide(None, true, || Ruling::Withdraw, || Some("n")),
            Served::Withdraw
        );
        assert_eq!(
            decide(None, false, serve, || Some("n")),
            Served::Serve("n", Basis::Newest)
        );
        assert_eq!(decide::<&str>(None, false, serve, || None), Served::Keep);
    }
}

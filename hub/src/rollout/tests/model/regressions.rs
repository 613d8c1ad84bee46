//! Sequences the model checks every run: ones it once failed on (shrunk),
//! and the cases a fix was about.

use super::*;

/// A sequence the model once failed on (shrunk): b's bad version NACKed
/// and left standing, b resumed by an operator while a rollout without it
/// runs, then deliveries. (Its agent then answered every push, the same
/// version twice too; the MCP source never sends a version again once it
/// was answered, so the second NACK was a duplicate — now not counted
/// twice: the resume holds, invariant 5.)
#[test]
fn a_refusal_arriving_after_a_resume_outside_the_rollout_is_honoured() {
    let ops = [
        Op::Build {
            changed: 0b1011,
            bad: 0b0010,
            dropping: 0,
        },
        Op::Pin {
            cluster: 0,
            back: 0,
        },
        Op::Tick(1_000),
        Op::Build {
            changed: 0b1000,
            bad: 0,
            dropping: 0,
        },
        Op::Tick(1_000),
        Op::Deliver(2),
        Op::Build {
            changed: 0b0100,
            bad: 0,
            dropping: 0,
        },
        Op::Operator {
            action: 2,
            cluster: Some(1),
        },
        Op::Deliver(2),
        Op::Reload(2),
        Op::Tick(1_000),
    ];
    if let Err(e) = run(&ops) {
        panic!("{e}");
    }
}

/// b's bad version NACKed (the ledger) and left standing, b resumed by an
/// operator while a rollout without it runs, then b's agent reports
/// upward the refusal the ledger told (its report before did not show
/// it): the same refusal, not a new one — the resume holds (invariant 5),
/// and at the end b takes its newest version.
#[test]
fn a_refusal_reported_again_after_a_resume_does_not_undo_it() {
    let ops = [
        Op::Report(1),
        Op::Build {
            changed: 0b0010,
            bad: 0b0010,
            dropping: 0,
        },
        Op::Deliver(1),
        Op::Build {
            changed: 0b0100,
            bad: 0,
            dropping: 0,
        },
        Op::Operator {
            action: 2,
            cluster: Some(1),
        },
        Op::Report(1),
        Op::Build {
            changed: 0b1000,
            bad: 0,
            dropping: 0,
        },
    ];
    if let Err(e) = run(&ops) {
        panic!("{e}");
    }
}

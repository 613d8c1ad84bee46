//! The harness in quick mode: every scenario runs end to end over real
//! processes and loopback gRPC, every consumer's content matches what the
//! hub published (the harness fails otherwise), and the table is printed.
//! Timings are not asserted: they mean nothing at these sizes or in debug.

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn quick_suite_delivers_correct_data_and_prints_the_table() {
    // Scenario `clusters` runs real sink agents: the binaries beside the
    // tests', built (before the clock starts) if stale.
    let bins = meshhub_e2e::bin_dir();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_meshhub-bench"))
        .args(["all", "--quick"])
        .env("MESHHUB_E2E_BIN_DIR", bins)
        .output()
        .expect("the harness starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "harness failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    // The oracle ran: every consumer held exactly the published content.
    let oracle = stdout
        .lines()
        .find(|l| l.starts_with("oracle: ok ("))
        .unwrap_or_else(|| panic!("no oracle line in\n{stdout}"));
    let checks: u64 = oracle
        .trim_start_matches("oracle: ok (")
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a check count");
    // P1: 20 streams × (initial + 2 changes) rounds; P2: 100; P3: 2 × 8;
    // P4: 1; clusters: 21 clusters × 4 checks (initial, after the changes,
    // after each storm) — each times the collections, which are at least 4.
    assert!(
        checks >= 4 * (20 * 3 + 100 + 16 + 1 + 21 * 4),
        "only {checks} checks"
    );
    // The table, with every figure and its target.
    for needle in [
        "| figure | measured | target | met |",
        "| P1 change fan-out",
        "p99 ≤ 50 ms",
        "| P2 hub RSS per idle synced stream",
        "≤ 32 KiB",
        "| P3 full-state fan-out vs raw loopback TCP",
        "≥ 50 %",
        "| P4 ingest",
        "≤ 2 s",
        "≤ 4×",
        "| clusters: a change every cluster receives",
        "| clusters: a change of one cluster",
        "| clusters: hub RSS per idle synced cluster",
        "≤ 48 KiB",
        "| storm: hub SIGKILLed and restarted",
        "| storm: … content resent",
        "< 5 %",
        "| storm: 20 light sinks restarted at once",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in\n{stdout}");
    }
    let elapsed = started.elapsed();
    eprintln!("{stdout}\nquick mode took {elapsed:?}");
    assert!(
        elapsed < Duration::from_secs(120),
        "quick mode is meant for CI"
    );
}

//! The chaos soak (issue 13): see `meshhub_e2e::chaos`. Short by default
//! (`MESHHUB_CHAOS_DURATION`, default 75s of faults, about 2–3 minutes in
//! all); `MESHHUB_CHAOS_SEED` replays a run (the seed is printed).

use std::time::{Duration, Instant};

use meshhub_e2e::chaos::{Report, Soak, soak::CLUSTERS};
use meshhub_e2e::turn;

fn duration() -> Duration {
    std::env::var("MESHHUB_CHAOS_DURATION")
        .ok()
        .map(|d| humantime::parse_duration(&d).expect("MESHHUB_CHAOS_DURATION: a duration"))
        .unwrap_or(Duration::from_secs(75))
}

fn seed() -> u64 {
    std::env::var("MESHHUB_CHAOS_SEED")
        .ok()
        .map(|s| s.parse().expect("MESHHUB_CHAOS_SEED: a number"))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos() as u64
        })
}

#[test]
fn every_cluster_converges_to_the_hubs_snapshot_after_random_faults() {
    let _turn = turn(module_path!());
    let seed = seed();
    eprintln!("chaos: seed {seed} (MESHHUB_CHAOS_SEED={seed} replays this run)");
    let ran = duration();
    let mut soak = Soak::start(seed, 40);
    let mut report = Report {
        seed,
        ..Report::default()
    };

    let started = Instant::now();
    soak.chaos(ran);
    report.ran = started.elapsed();
    // Every view equals the hub's snapshot for its cluster, which equals
    // the generator's model: no lost update.
    report.convergence = soak.converge(Duration::from_secs(120));
    report.faults = soak.faults.clone();
    report.changes = soak.generator.counts.clone();
    report.consumer_updates = soak.consumer_updates();
    for c in CLUSTERS {
        report
            .final_objects
            .insert(c.to_owned(), soak.generator.expected(c).len());
    }

    // No resend loop: with nothing changing, the hub sends nothing and no
    // NACK arrives, over a quiet window of 3 s (an observation window, not
    // a wait for an event).
    meshhub_testkit::eventually_blocking("every agent ACKed the hub's versions", || {
        let s = soak.hub().status();
        CLUSTERS
            .iter()
            .all(|c| meshhub_e2e::synced(&s, c, meshhub_testkit::objects::VS))
            .then_some(())
    });
    let responses = soak.hub_counter("meshhub_mcp_responses_total");
    let nacks = soak.hub_counter("meshhub_mcp_nacks_total");
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(
            soak.hub_counter("meshhub_mcp_responses_total"),
            responses,
            "the hub sends responses while nothing changes (a resend loop?)"
        );
    }
    assert_eq!(soak.hub_counter("meshhub_mcp_nacks_total"), nacks);
    report.hub_responses_last_life = responses;

    // The hub's memory is bounded.
    let (_, memory) =
        meshhub_testkit::http::get_blocking(soak.hub().admin, "/debug/memory").expect("memory");
    let memory: serde_json::Value = serde_json::from_str(&memory).expect("memory JSON");
    report.hub_rss = memory["rss_bytes"].as_u64().unwrap_or_default();
    eprintln!("chaos: hub /debug/memory at the end: {memory}");
    // Measured 79–93 MiB at the end of 30 s to 5 min runs (peak 98 MiB,
    // debug build); twice that means something accumulates.
    const RSS_BOUND: u64 = 192 << 20;
    assert!(
        report.hub_rss > 0 && report.hub_rss < RSS_BOUND,
        "hub RSS {} at the end (bound {RSS_BOUND})",
        report.hub_rss
    );

    // What each agent persisted: with the hub down, each agent restarted
    // (SIGKILL) serves what it loads from its data directory, which must
    // be the hub's last snapshot for its cluster.
    let snapshots: Vec<_> = (0..CLUSTERS.len())
        .map(|i| soak.hub_view(i).expect("hub view"))
        .collect();
    soak.hub.take().expect("hub").proc.kill();
    for (i, want) in snapshots.iter().enumerate() {
        soak.restart_agent(i);
        let got = soak.agent_view(i).expect("agent view after restart");
        assert_eq!(
            got.digest(),
            want.digest(),
            "agent {} persisted state != the hub's snapshot",
            CLUSTERS[i]
        );
    }

    let panics = soak.panics();
    assert!(panics.is_empty(), "panics: {panics:#?}");
    eprintln!("chaos: {report:#?}");
    eprintln!(
        "chaos: seed {seed}: {} faults in {:?}, {} changes, {} consumer updates, lost updates 0, convergence after the last fault {:?}, consumer restarts {}",
        report.faults.values().sum::<u64>(),
        report.ran,
        report.changes.values().sum::<u64>(),
        report.consumer_updates,
        report.convergence,
        soak.consumer_restarts
    );
    assert!(report.faults.values().sum::<u64>() > 0, "no fault injected");
}

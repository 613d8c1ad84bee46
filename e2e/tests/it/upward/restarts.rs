//! An agent restart withdraws nothing (issue 38, item 1): west's real sink
//! agent, exporting [`SERVICES`] Services (ServiceExports in its real
//! kube-apiserver), is killed (SIGKILL) and started again [`RESTARTS`]
//! times; every other time it is killed again as soon as the hub has read
//! its first report, while it is still listing (counted, and at least once
//! required: the hub must have been handed incomplete reports). Two
//! consumers watch continuously (every state they are served, not a
//! poll): east's real sink agent's re-serve port, as east's istiod reads
//! it, and a subscriber to the hub as cluster east. Neither may ever be
//! served a state without one of the exported Services. That the watch
//! would see a withdrawal is shown at the end: one export deleted in west
//! disappears at both consumers.
//!
//! Size: the issue's, 1,000 Services × 20 restarts (1,000 is also the
//! default `exports.maxServices`, so the whole set is merged). Measured in
//! a debug build on two cores: about 37 s in all — 11 s creating the
//! 2,000 objects, 19 s for the 20 restarts; each restart's lists (process
//! start to exports complete) 0.3–0.7 s, the hub trusting the new set
//! 1.2–2.1 s after the start (its reconnect backoff included). Cheap
//! enough for CI as it is: no smaller size is needed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use meshhub_e2e::kube::{ControlPlanes, delete};
use meshhub_e2e::mcs::{export_many, install_mcs_crds};
use meshhub_e2e::watcher::Watcher;
use meshhub_e2e::yaml::{cluster, files_hub};
use meshhub_e2e::*;
use meshhub_testkit::http::get_blocking;
use meshhub_testkit::{DEADLINE, eventually_blocking};
use serde_json::Value;

const SE: &str = "istio/networking/v1alpha3/serviceentries";
const CLUSTER_STATUS: &str = "meshhub/v1alpha1/clusterstatus";
/// Services west exports.
const SERVICES: usize = 1_000;
/// Times west's agent is restarted.
const RESTARTS: usize = 20;

/// Whether the agent says its exports are complete (its gauge; absent
/// before its first publication: not complete).
fn agent_complete(agent: &AgentProc) -> bool {
    get_blocking(agent.admin, "/metrics").is_some_and(|(code, body)| {
        code == 200
            && body.lines().any(|l| {
                l.strip_prefix("meshhub_agent_service_exports_complete")
                    .is_some_and(|v| v.trim() == "1")
            })
    })
}

/// Whether a hub ACKed the agent's report (its `/status`, the upward
/// streams).
fn hub_read(agent_status: &Value) -> bool {
    agent_status["upward"].as_array().is_some_and(|peers| {
        peers
            .iter()
            .any(|p| !p["collections"][CLUSTER_STATUS]["acked"].is_null())
    })
}

/// Whether the hub trusts west's exports from a report received after
/// `since`: the report says they are complete, the hub is not holding a
/// newer set back, and it ACKed that report after `since`.
fn hub_trusts(status: &Value, since: SystemTime) -> bool {
    let report = &remote(status, "west")["report"];
    let state = &report["exports_state"];
    if state["completeness"] != "complete" || state["stale"] == true {
        return false;
    }
    let acked = status["ledger"]
        .as_array()
        .and_then(|l| l.iter().find(|p| p["peer"] == "upward/west"))
        .and_then(|p| p["collections"][CLUSTER_STATUS]["acked"]["at"].as_str())
        .and_then(|at| humantime::parse_rfc3339(at).ok());
    acked.is_some_and(|at| at >= since)
}

/// Minimum, median and maximum, in ms.
fn spread(mut samples: Vec<Duration>) -> String {
    if samples.is_empty() {
        return "none".to_owned();
    }
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "min {:.0} ms, median {:.0} ms, max {:.0} ms (n={})",
        ms(samples[0]),
        ms(samples[samples.len() / 2]),
        ms(samples[samples.len() - 1]),
        samples.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_an_exporting_agent_withdraws_nothing() {
    let _turn = turn(module_path!());
    let test_started = Instant::now();
    let planes = ControlPlanes::start_bare(&["west"]).await;
    install_mcs_crds(&planes, "west").await;
    planes.namespace("west", "shop").await;
    let west_kube = planes.client("west").await;
    let names: Vec<String> = (0..SERVICES).map(|i| format!("svc-{i:04}")).collect();
    let creating = Instant::now();
    export_many(&west_kube, "shop", &names, 8).await;
    let created = creating.elapsed();

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let logs = dir.join("logs");
    let objects = dir.join("objects");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::create_dir_all(&objects).unwrap();
    let east_agent = AgentProc::start("east", dir, &logs, None);
    let kubeconfig = planes.cluster("west").kubeconfig.display().to_string();
    let flags = [
        "--mcs",
        "--mcs-kubeconfig",
        &kubeconfig,
        "--mcs-gateways",
        "192.0.2.20:15443",
    ]
    .map(str::to_owned);
    let mut west = AgentProc::start_with("west", dir, &logs, None, &flags);
    let clusters = cluster("east", "", format!("http://{}", east_agent.sink), "")
        + &cluster("west", "", format!("http://{}", west.sink), "");
    let config = dir.join("hub.yaml");
    std::fs::write(&config, files_hub(objects.display(), &clusters, "")).unwrap();
    let hub = tokio::task::block_in_place(|| HubProc::start("hub", &config, &logs));

    let entries: BTreeSet<String> = names
        .iter()
        .map(|n| format!("shop/{n}-clusterset"))
        .collect();
    let mut at_agent = Watcher::start(east_agent.grpc, "watch-east-agent", SE, false);
    let mut at_hub = Watcher::start(hub.grpc, "east", SE, false);
    let generating = Instant::now();
    for w in [&mut at_agent, &mut at_hub] {
        // The hub's first generation of a thousand entries takes a while
        // in a debug build: a longer bound than the default.
        w.wait_within("every exported Service's entry", 6 * DEADLINE, |m| {
            entries.iter().all(|e| m.contains_key(e))
        })
        .await;
        w.guard(entries.iter().cloned());
    }
    let generated = generating.elapsed();
    println!(
        "setup: {SERVICES} Services and ServiceExports created in {:.1} s; their entries at both consumers {:.1} s after the watch started; {:.1} s in all",
        created.as_secs_f64(),
        generated.as_secs_f64(),
        test_started.elapsed().as_secs_f64()
    );

    // How often the hub shows west's exports incomplete while the agent
    // restarts: evidence that the hub was handed incomplete reports (a
    // sample every 100 ms; not a synchronisation).
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = std::thread::spawn({
        let (sampling, admin) = (sampling.clone(), hub.admin);
        move || {
            let (mut incomplete, mut samples) = (0_u32, 0_u32);
            while sampling.load(Ordering::Relaxed) {
                if let Some((200, body)) = get_blocking(admin, "/status")
                    && let Ok(s) = serde_json::from_str::<Value>(&body)
                {
                    samples += 1;
                    let state = &remote(&s, "west")["report"]["exports_state"];
                    if state["completeness"] == "incomplete" {
                        incomplete += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (incomplete, samples)
        }
    });

    // The restarts. Every other one is killed again as soon as it is up;
    // the others are waited for: the agent's lists, then the hub trusting
    // the new agent's complete set.
    let restarting = Instant::now();
    let (mut lists, mut trusted) = (Vec::new(), Vec::new());
    let mut killed_listing = 0;
    for i in 0..RESTARTS {
        let since = SystemTime::now();
        tokio::task::block_in_place(|| west.crash_and_restart(dir, &logs));
        if i % 2 == 0 && i + 1 < RESTARTS {
            // Killed by the next round once the hub took its first report:
            // count whether that was while it was still listing.
            tokio::task::block_in_place(|| {
                eventually_blocking("the hub reading the restarted agent", || {
                    hub_read(&west.status()).then_some(())
                })
            });
            if !agent_complete(&west) {
                killed_listing += 1;
            }
            continue;
        }
        let started = west.started;
        tokio::task::block_in_place(|| {
            eventually_blocking("the restarted agent's exports complete", || {
                agent_complete(&west).then_some(())
            });
            lists.push(started.elapsed());
            eventually_blocking("the hub trusting the restarted agent's exports", || {
                hub_trusts(&hub.status(), since).then_some(())
            });
            trusted.push(started.elapsed());
        });
        for w in [&at_agent, &at_hub] {
            assert!(w.lost().is_empty(), "after restart {i}: {:?}", w.lost());
        }
    }
    let restarts_took = restarting.elapsed();
    sampling.store(false, Ordering::Relaxed);
    let (incomplete, samples) = sampler.join().expect("the sampler");

    // The watch sees a withdrawal: one export deleted.
    let gone = "shop/svc-0000-clusterset";
    for w in [&at_agent, &at_hub] {
        w.unguard(gone);
    }
    assert!(
        delete(
            &west_kube,
            "multicluster.x-k8s.io/v1alpha1",
            "ServiceExport",
            "shop",
            "svc-0000"
        )
        .await
    );
    for w in [&mut at_agent, &mut at_hub] {
        w.wait("the deleted export's entry withdrawn", |m| {
            !m.contains_key(gone) && m.len() == SERVICES - 1
        })
        .await;
    }
    assert!(
        killed_listing > 0,
        "no restart was killed while listing after the hub read it: the hub was never handed an incomplete report"
    );
    for (who, w) in [("east's agent", &at_agent), ("the hub", &at_hub)] {
        assert!(
            w.lost().is_empty(),
            "{who} served states without exported Services: {:?}",
            w.lost()
        );
        assert_eq!(w.running(), Ok(()), "{who}'s stream ran throughout");
    }
    println!(
        "{RESTARTS} restarts of west's agent with {SERVICES} exports in {:.1} s ({killed_listing} of {} killed again while still listing; the hub showed west's exports incomplete in {incomplete} of {samples} samples); process start to exports complete (the lists): {}; to the hub trusting them: {}; states served: {} at east's agent, {} by the hub; whole test {:.1} s",
        restarts_took.as_secs_f64(),
        RESTARTS / 2,
        spread(lists),
        spread(trusted),
        at_agent.changes(),
        at_hub.changes(),
        test_started.elapsed().as_secs_f64()
    );
    assert!(test_started.elapsed() < 10 * DEADLINE, "bounded");
    drop((hub, east_agent, west));
}

//! The reconnect storms of scenario `clusters` (issue 29), on its running
//! rig with every cluster synced and nothing changed since:
//!
//! * the hub is killed (`SIGKILL`: no goodbye) and started again: the time
//!   from the kill until every cluster ACKed every collection on a new
//!   stream, and the content bytes the sinks received meanwhile, against
//!   the initial full sync's (the sinks declare what they hold, as the
//!   agent does from its persisted store, so nothing unchanged is resent);
//! * every light sink restarts at once (all servers stop, 1 s later they
//!   listen again on the same addresses with what they held): the time from
//!   their restart until every cluster is synced again, and the bytes.

use anyhow::Result;
use serde_json::json;

use super::super::harness::{Server, mib};
use super::{Rig, Targets, agents_synced, max_ns, sinks_cmd};
use crate::proc::now_ns;
use crate::report::Results;
use crate::sinks::cluster_name;

/// How long the sinks stay down in the reverse storm.
const SINKS_DOWN_MS: u64 = 1000;

pub(super) async fn storms(rig: &mut Rig, results: &mut Results) -> Result<()> {
    let total = rig.n + rig.agents.names.len();
    // Every cluster synced again within the target, with (nearly) nothing
    // resent when nothing changed.
    let t = Targets::at(rig.n);
    let full = rig.full_bytes.max(1) as f64;

    // The hub dies and comes back.
    sinks_cmd(&mut rig.sinks, json!({"cmd": "reset_bytes"})).await?;
    let t_kill = now_ns();
    rig.hub.child.kill().await?;
    // As `meshhub` runs (the change rounds' hub too): no RSS is read
    // after this.
    rig.hub = Server::start_config(&rig.config, &cluster_name(0), &[]).await?;
    rig.hub.ready(rig.fleet.objects()).await?;
    let ready_s = (now_ns() - t_kill) as f64 / 1e9;
    let synced = sinks_cmd(
        &mut rig.sinks,
        json!({"cmd": "synced", "since_ns": t_kill, "timeout_ms": 280_000}),
    )
    .await?;
    let agents =
        agents_synced(&mut rig.hub, &rig.agents.names, json!({"since_ns": t_kill})).await?;
    let last = max_ns(&synced).max(agents.into_iter().max().unwrap_or(0));
    let hub_s = (last - t_kill) as f64 / 1e9;
    let hub_bytes = synced["bytes"].as_u64().unwrap_or_default() as f64;
    rig.oracle(results).await?;

    // Every sink restarts at once.
    sinks_cmd(&mut rig.sinks, json!({"cmd": "reset_bytes"})).await?;
    let restarted = sinks_cmd(
        &mut rig.sinks,
        json!({"cmd": "restart", "down_ms": SINKS_DOWN_MS}),
    )
    .await?;
    let back = restarted["at_ns"].as_u64().unwrap_or_default();
    let synced = sinks_cmd(
        &mut rig.sinks,
        json!({"cmd": "synced", "since_ns": back, "timeout_ms": 280_000}),
    )
    .await?;
    let sinks_s = (max_ns(&synced) - back) as f64 / 1e9;
    let sinks_bytes = synced["bytes"].as_u64().unwrap_or_default() as f64;
    rig.oracle(results).await?;

    let f = &mut results.figures;
    f.insert("storm.hub_restart_synced_s".into(), hub_s);
    f.insert("storm.hub_restart_ready_s".into(), ready_s);
    f.insert("storm.hub_restart_bytes".into(), hub_bytes);
    f.insert("storm.hub_restart_bytes_ratio".into(), hub_bytes / full);
    f.insert("storm.sinks_restart_synced_s".into(), sinks_s);
    f.insert("storm.sinks_restart_bytes".into(), sinks_bytes);
    f.insert("storm.sinks_restart_bytes_ratio".into(), sinks_bytes / full);
    results.row(
        format!("storm: hub SIGKILLed and restarted with {total} clusters, kill → every cluster synced again"),
        format!("{hub_s:.2} s (hub ready after {ready_s:.2} s)"),
        &format!("≤ {:.0} s {}", t.storm_s, t.at),
        t.judge(hub_s <= t.storm_s),
    );
    results.row(
        "storm: … content resent, nothing having changed (light sinks)".into(),
        format!(
            "{:.1} KiB = {:.2} % of the full sync's {:.1} MiB",
            hub_bytes / 1024.0,
            100.0 * hub_bytes / full,
            mib(full)
        ),
        &if t.storm_bytes > 0.0 {
            format!("< {:.0} % {}", t.storm_bytes * 100.0, t.at)
        } else {
            format!("0 B {}", t.at)
        },
        t.judge(if t.storm_bytes > 0.0 {
            hub_bytes / full < t.storm_bytes
        } else {
            hub_bytes == 0.0
        }),
    );
    results.row(
        format!(
            "storm: {} light sinks restarted at once ({SINKS_DOWN_MS} ms down), back → every one synced",
            rig.n
        ),
        format!(
            "{sinks_s:.2} s, {:.1} KiB resent ({:.2} %)",
            sinks_bytes / 1024.0,
            100.0 * sinks_bytes / full
        ),
        &format!("≤ {:.0} s {}", t.storm_s, t.at),
        t.judge(sinks_s <= t.storm_s),
    );
    Ok(())
}

use std::path::Path;

use meshhub_mcp::ledger::{Ledger, Role};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::*;

fn read(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn records_and_delivery_results_are_written_as_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("audit/audit.log");
    let spec = RawAudit {
        file: Some("audit/audit.log".into()),
        ..RawAudit::default()
    }
    .check(dir.path())
    .unwrap();
    let ledger = Ledger::new();
    let tasks = TaskTracker::new();
    let shutdown = CancellationToken::new();
    let log = AuditLog::start(&spec, &ledger, &tasks, shutdown.clone()).unwrap();
    log.record(AuditEvent::Pin {
        cluster: "west".into(),
        version: "abc".into(),
        by: "alice".into(),
    });
    let peer = ledger.register(Role::Source, "west", "west");
    peer.sent("vs", "v1", "1");
    peer.nacked("vs", "v1", 3, "VirtualService ns/bad: rejected");

    // Poll the file: the writer runs on its own.
    let lines = meshhub_testkit::eventually_some("two audit lines", async || {
        Some(read(&file)).filter(|lines| lines.len() >= 2)
    })
    .await;
    assert_eq!(lines[0]["schemaVersion"], SCHEMA_VERSION);
    assert_eq!(lines[0]["event"], "pin");
    assert_eq!(lines[0]["by"], "alice");
    assert!(lines[0]["time"].as_str().unwrap().ends_with('Z'));
    assert_eq!(lines[1]["event"], "delivery");
    assert_eq!(lines[1]["outcome"], "NACK");
    assert_eq!(lines[1]["peer"], "west");
    assert_eq!(lines[1]["message"], "VirtualService ns/bad: rejected");

    // What is queued at shutdown is still written.
    log.record(AuditEvent::Unpin {
        cluster: "west".into(),
        version: "abc".into(),
        by: "admin-port".into(),
    });
    shutdown.cancel();
    tasks.close();
    tasks.wait().await;
    let lines = read(&file);
    assert_eq!(lines.last().unwrap()["event"], "unpin");
}

#[test]
fn a_disabled_log_records_nothing_and_config_needs_a_destination() {
    let log = AuditLog::disabled();
    assert!(!log.enabled());
    log.record(AuditEvent::Pin {
        cluster: "w".into(),
        version: "v".into(),
        by: "b".into(),
    });
    let base = Path::new("/etc");
    assert_eq!(RawAudit::default().check(base).unwrap_err().field, "file");
    let raw: RawAudit = serde_json::from_value(serde_json::json!({"stdout": true})).unwrap();
    let spec = raw.check(base).unwrap();
    assert_eq!(
        (spec.max_bytes, spec.keep),
        (DEFAULT_MAX_BYTES, DEFAULT_KEEP)
    );
    let raw: RawAudit =
        serde_json::from_value(serde_json::json!({"file": "a.log", "maxBytes": 10})).unwrap();
    assert_eq!(raw.check(base).unwrap_err().field, "maxBytes");
    assert!(serde_json::from_value::<RawAudit>(serde_json::json!({"path": "x"})).is_err());
}

#[test]
fn secret_kinds_are_recognised() {
    assert!(is_secret("Secret"));
    assert!(!is_secret("VirtualService"));
}

#[test]
fn a_full_queue_drops_instead_of_waiting() {
    // A log whose writer never runs: the queue fills, then records drop.
    let (tx, mut rx) = mpsc::channel(1);
    let log = AuditLog { tx: Some(tx) };
    for _ in 0..3 {
        log.record(AuditEvent::Pin {
            cluster: "w".into(),
            version: "v".into(),
            by: "b".into(),
        });
    }
    // Returned at once three times: nothing waited; one was queued.
    assert!(rx.try_recv().is_ok());
    assert!(rx.try_recv().is_err(), "the others were dropped");
}

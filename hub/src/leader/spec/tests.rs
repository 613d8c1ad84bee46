use std::time::Duration;

use super::*;
use crate::config::testing::{SOURCES, err, parse};

#[test]
fn leader_election_is_off_by_default_and_when_not_enabled() {
    assert_eq!(parse(SOURCES).unwrap().leader_election, None);
    let c = parse(&format!(
        "{SOURCES}leaderElection:\n  enabled: false\n  leaseName: x\n"
    ))
    .unwrap();
    assert_eq!(c.leader_election, None);
}

#[test]
fn leader_election_gets_defaults_and_typed_values() {
    let c = parse(&format!(
        "{SOURCES}leaderElection:\n  enabled: true\n  namespace: mesh\n  identity: hub-0\n"
    ))
    .unwrap();
    let l = c.leader_election.unwrap();
    assert_eq!(l.namespace, "mesh");
    assert_eq!(l.lease_name, DEFAULT_LEASE_NAME);
    assert_eq!(l.identity, "hub-0");
    assert_eq!(l.lease_duration, Duration::from_secs(15));
    assert_eq!(l.renew_deadline, Duration::from_secs(10));
    assert_eq!(l.retry_period, Duration::from_secs(2));
    assert_eq!(l.connection, meshhub_kube::Connection::default());
    // Without an identity: POD_NAME, or the host name and the process id.
    let c = parse(&format!("{SOURCES}leaderElection: {{enabled: true}}\n")).unwrap();
    let identity = c.leader_election.unwrap().identity;
    let pid = std::process::id().to_string();
    assert!(
        std::env::var("POD_NAME").is_ok() || identity.ends_with(&pid),
        "{identity}"
    );
    let c = parse(&format!(
        "{SOURCES}leaderElection:\n  enabled: true\n  leaseDuration: 3s\n  renewDeadline: 2s\n  retryPeriod: 500ms\n"
    ))
    .unwrap();
    let l = c.leader_election.unwrap();
    assert_eq!(l.retry_period, Duration::from_millis(500));
}

#[test]
fn leader_election_errors_name_the_setting() {
    let le = |body: &str| {
        err(&format!(
            "{SOURCES}leaderElection:\n  enabled: true\n{body}"
        ))
    };
    let e = le("  leaseDuration: 10s\n  renewDeadline: 10s\n");
    assert!(
        e.contains("leaderElection.renewDeadline")
            && e.contains("shorter than leaderElection.leaseDuration"),
        "{e}"
    );
    let e = le("  renewDeadline: 5s\n  retryPeriod: 5s\n");
    assert!(
        e.contains("leaderElection.retryPeriod") && e.contains("renewDeadline"),
        "{e}"
    );
    let e = le("  leaseDuration: 2500ms\n  renewDeadline: 1s\n  retryPeriod: 100ms\n");
    assert!(e.contains("leaderElection.leaseDuration"), "{e}");
    let e = le("  namespace: Not_A_Namespace\n");
    assert!(e.contains("leaderElection.namespace"), "{e}");
    let e = le("  leaseName: \"a b\"\n");
    assert!(e.contains("leaderElection.leaseName"), "{e}");
    let e = le("  identity: \"hub 0\"\n");
    assert!(e.contains("leaderElection.identity"), "{e}");
    let e = le("  kubeconfig: missing.yaml\n");
    assert!(e.contains("leaderElection.kubeconfig"), "{e}");
    // A bad duration is named by its line.
    let e = le("  renewDeadline: soon\n");
    assert!(e.contains("meshhub.yaml:5") && e.contains("soon"), "{e}");
    let e = le("  leaseDurationSeconds: 3\n");
    assert!(e.contains("leaseDurationSeconds"), "{e}");
}

#[test]
fn shards_are_off_by_default_and_checked() {
    let c = parse(&format!("{SOURCES}leaderElection: {{enabled: true}}\n")).unwrap();
    assert_eq!(c.leader_election.unwrap().shards, None);
    let c = parse(&format!(
        "{SOURCES}leaderElection: {{enabled: true, shards: 0}}\n"
    ))
    .unwrap();
    assert_eq!(c.leader_election.unwrap().shards, None);
    let c = parse(&format!(
        "{SOURCES}leaderElection: {{enabled: true, shards: 12}}\n"
    ))
    .unwrap();
    assert_eq!(c.leader_election.unwrap().shards, Some(12));
    let e = err(&format!(
        "{SOURCES}leaderElection: {{enabled: true, shards: 5000}}\n"
    ));
    assert!(e.contains("leaderElection.shards"), "{e}");
    let e = err(&format!(
        "{SOURCES}leaderElection: {{enabled: true, shards: 4, leaseName: {}}}\n",
        "a".repeat(41)
    ));
    assert!(e.contains("leaderElection.leaseName"), "{e}");
}

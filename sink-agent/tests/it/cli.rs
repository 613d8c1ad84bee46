//! The binary's edge: configuration errors name the setting and exit 2
//! before anything is served.

use std::process::Command;

fn agent() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_meshhub-sink-agent"));
    // Only what the test sets counts.
    for (k, _) in std::env::vars() {
        if k.starts_with("MESHHUB_AGENT_") {
            c.env_remove(k);
        }
    }
    c
}

#[test]
fn a_missing_cluster_exits_2_naming_the_setting() {
    let out = agent()
        .args(["--data-dir", "/nonexistent/x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cluster: required"), "{err}");
}

#[test]
fn a_bad_environment_value_exits_2_naming_the_setting() {
    let out = agent()
        .env("MESHHUB_AGENT_CLUSTER", "east")
        .env("MESHHUB_AGENT_DATA_DIR", "/nonexistent/x")
        .env("MESHHUB_AGENT_MODE", "sideways")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    // clap refuses it while parsing, naming the flag the variable stands
    // for and the values it takes.
    assert!(
        err.contains("'sideways' for '--mode") && err.contains("[possible values: push, pull]"),
        "{err}"
    );
}

#[test]
fn an_unknown_key_in_the_file_exits_2_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.yaml");
    std::fs::write(&file, "cluster: east\ndataDir: /nonexistent/x\nport: 1\n").unwrap();
    let out = agent().arg("--config").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("agent.yaml:3") && err.contains("port"),
        "{err}"
    );
}

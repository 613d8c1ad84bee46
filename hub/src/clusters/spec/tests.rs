use std::time::Duration;

use meshhub_mcp::reconnect::ReconnectPolicy;

use super::*;
use crate::config::testing::{SOURCES, err, parse};

#[test]
fn clusters_are_checked() {
    let e = err(&format!(
        "{SOURCES}clusters:\n  - name: east\n  - name: east\n"
    ));
    assert!(
        e.contains("clusters[1].name: duplicate cluster name \"east\""),
        "{e}"
    );
    let e = err(&format!("{SOURCES}clusters:\n  - name: default\n"));
    assert!(
        e.contains("clusters[0].name") && e.contains("reserved"),
        "{e}"
    );
    let e = err(&format!("{SOURCES}clusters:\n  - name: East_1\n"));
    assert!(e.contains("clusters[0].name"), "{e}");
    let e = err(&format!(
        "{SOURCES}clusters:\n  - name: east\n    namespaces: [\"Bad NS\"]\n"
    ));
    assert!(e.contains("clusters[0].namespaces[0]"), "{e}");
}

#[test]
fn cluster_agents_get_defaults_and_typed_values() {
    let c = parse(&format!(
        "{SOURCES}clusters:\n  - name: east\n    agent: {{address: \"http://10.0.0.1:9911\"}}\n  - name: west\n    agent:\n      address: http://agent.west:9911\n      connectTimeout: 2s\n      reconnect: {{initial: 100ms, max: 5s, factor: 3}}\n  - name: local\n"
    ))
    .unwrap();
    assert_eq!(c.clusters.len(), 3);
    assert_eq!(c.agents.len(), 2, "local has no agent");
    let east = &c.agents[0];
    assert_eq!(east.cluster, "east");
    assert_eq!(east.dial.address, "http://10.0.0.1:9911");
    assert_eq!(east.dial.connect_timeout, DEFAULT_AGENT_CONNECT_TIMEOUT);
    assert_eq!(east.dial.reconnect, ReconnectPolicy::default());
    let west = &c.agents[1];
    assert_eq!(west.dial.connect_timeout, Duration::from_secs(2));
    assert_eq!(west.dial.reconnect.initial, Duration::from_millis(100));
    assert_eq!(west.dial.reconnect.max, Duration::from_secs(5));
    assert_eq!(west.dial.reconnect.factor, 3.0);
}

#[test]
fn bad_agent_settings_are_named() {
    let agent = |block: &str| {
        err(&format!(
            "{SOURCES}clusters:\n  - name: east\n    agent: {block}\n"
        ))
    };
    // https needs a tls block; a tls block needs https.
    let e = agent("{address: \"https://a:9911\"}");
    assert!(
        e.contains("clusters[0].agent.tls") && e.contains("tls.ca"),
        "{e}"
    );
    let e = agent("{address: \"http://a:9911\", tls: {ca: ca.pem}}");
    assert!(
        e.contains("clusters[0].agent.address") && e.contains("https://"),
        "{e}"
    );
    let e = agent("{address: \"a:9911\"}");
    assert!(e.contains("clusters[0].agent.address"), "{e}");
    let e = agent("{address: \"http://a\"}");
    assert!(e.contains("needs a port"), "{e}");
    let e = agent("{address: \"http://a:1\", connectTimeout: 0s}");
    assert!(e.contains("agent.connectTimeout"), "{e}");
    let e = agent("{address: \"http://a:1\", reconnect: {initial: 2s, max: 1s}}");
    assert!(e.contains("agent.reconnect.max"), "{e}");
    let e = agent("{address: \"http://a:1\", reconnect: {factor: 0.5}}");
    assert!(e.contains("agent.reconnect.factor"), "{e}");
    let e = agent("{address: \"https://a:1\", tls: {}}");
    assert!(e.contains("missing field `ca`") && e.contains(":5"), "{e}");
}

#[test]
fn export_policies_are_typed_and_need_an_agent() {
    let c = parse(&format!(
        "{SOURCES}clusters:\n  - name: east\n    agent: {{address: \"http://10.0.0.1:9911\"}}\n  - name: west\n    agent: {{address: \"http://10.0.0.2:9911\"}}\n    exports:\n      allow: [{{namespace: shop, names: [cart]}}]\n      maxServices: 10\n"
    ))
    .unwrap();
    assert_eq!(
        c.agents[0].exports,
        crate::clusters::exports::ExportPolicy::default()
    );
    let west = &c.agents[1].exports;
    assert_eq!(west.max_services, 10);
    assert!(west.refuses("shop", "cart").is_none());
    assert!(west.refuses("shop", "checkout").is_some());
    let e = err(&format!(
        "{SOURCES}clusters:\n  - name: east\n    exports: {{maxServices: 10}}\n"
    ));
    assert!(
        e.contains("clusters[0].exports") && e.contains("agent"),
        "{e}"
    );
    let e = err(&format!(
        "{SOURCES}clusters:\n  - name: east\n    agent: {{address: \"http://10.0.0.1:9911\"}}\n    exports: {{allow: [{{namespace: a, nmes: [b]}}]}}\n"
    ));
    assert!(e.contains("nmes"), "unknown keys are refused: {e}");
}

use std::time::Duration;

use meshhub_mcp::reconnect::ReconnectPolicy;

use super::*;
use crate::config::testing::{err, parse};
use crate::source::SourceSpec;

#[test]
fn mcp_sources_get_defaults_and_every_collection_of_the_kind_table() {
    // An extra kind of a Kubernetes source listed after it is subscribed too.
    let c = parse(
        "sources:\n  - mcp: {address: \"http://galley.istio-system:9901\"}\n  - kubernetes: {extraKinds: [{version: v1, kind: ConfigMap}]}\n",
    )
    .unwrap();
    let SourceSpec::Mcp(m) = &c.sources[0] else {
        panic!("an mcp source")
    };
    assert_eq!(m.name, "mcp:http://galley.istio-system:9901");
    assert_eq!(m.dial.address, "http://galley.istio-system:9901");
    let all: Vec<String> = c.kinds.iter().map(|k| k.collection().to_owned()).collect();
    assert_eq!(m.collections, all);
    assert!(m.collections.iter().any(|c| c == "k8s/core/v1/configmaps"));
    assert_eq!(m.dial.tls, None);
    assert_eq!(m.node_id, "");
    assert!(!m.incremental);
    assert_eq!(m.dial.connect_timeout, DEFAULT_MCP_CONNECT_TIMEOUT);
    assert_eq!(m.dial.reconnect, ReconnectPolicy::default());

    let c = parse(
        "sources:\n  - name: upstream\n    mcp:\n      address: http://10.0.0.1:9901\n      collections: [istio/networking/v1alpha3/virtualservices]\n      nodeId: east\n      incremental: true\n      connectTimeout: 2s\n      reconnect: {initial: 100ms, max: 5s}\n",
    )
    .unwrap();
    let SourceSpec::Mcp(m) = &c.sources[0] else {
        panic!("an mcp source")
    };
    assert_eq!(m.name, "upstream");
    assert_eq!(m.collections, ["istio/networking/v1alpha3/virtualservices"]);
    assert_eq!(m.node_id, "east");
    assert!(m.incremental);
    assert_eq!(m.dial.connect_timeout, Duration::from_secs(2));
    assert_eq!(m.dial.reconnect.initial, Duration::from_millis(100));
    assert_eq!(m.dial.reconnect.max, Duration::from_secs(5));
}

#[test]
fn mcp_source_errors_name_the_setting() {
    let mcp = |block: &str| err(&format!("sources:\n  - mcp: {block}\n"));
    let e = mcp("{address: \"galley:9901\"}");
    assert!(e.contains("sources[0].mcp.address"), "{e}");
    let e = mcp("{address: \"http://galley\"}");
    assert!(
        e.contains("sources[0].mcp.address") && e.contains("needs a port"),
        "{e}"
    );
    let e = mcp("{address: \"https://galley:9901\"}");
    assert!(
        e.contains("sources[0].mcp.tls") && e.contains("tls.ca"),
        "{e}"
    );
    let e = mcp("{address: \"http://galley:9901\", tls: {ca: ca.pem}}");
    assert!(
        e.contains("sources[0].mcp.address") && e.contains("https://"),
        "{e}"
    );
    let e = mcp("{address: \"https://galley:9901\", tls: {ca: /nonexistent/ca.pem}}");
    assert!(
        e.contains("sources[0].mcp.tls") && e.contains("/nonexistent/ca.pem"),
        "{e}"
    );
    let e = mcp("{address: \"http://g:1\", collections: []}");
    assert!(
        e.contains("sources[0].mcp.collections: must not be empty"),
        "{e}"
    );
    let e = mcp("{address: \"http://g:1\", collections: [istio/networking/v1alpha3/gatewayz]}");
    assert!(
        e.contains("sources[0].mcp.collections[0]") && e.contains("gatewayz"),
        "{e}"
    );
    let e = mcp(
        "{address: \"http://g:1\", collections: [istio/networking/v1alpha3/gateways, istio/networking/v1alpha3/gateways]}",
    );
    assert!(
        e.contains("sources[0].mcp.collections[1]: duplicate"),
        "{e}"
    );
    let e = mcp("{address: \"http://g:1\", connectTimeout: 0s}");
    assert!(e.contains("sources[0].mcp.connectTimeout"), "{e}");
    let e = mcp("{address: \"http://g:1\", reconnect: {factor: 0.5}}");
    assert!(e.contains("sources[0].mcp.reconnect.factor"), "{e}");
    let e = mcp("{address: \"http://g:1\", nodeID: x}");
    assert!(e.contains("nodeID"), "{e}");
    let e = mcp("{}");
    assert!(e.contains("missing field `address`"), "{e}");
    let e = err("sources:\n  - file: {path: objects}\n    mcp: {address: \"http://g:1\"}\n");
    assert!(
        e.contains("sources[0]") && e.contains("exactly one of"),
        "{e}"
    );
    let e =
        err("sources:\n  - mcp: {address: \"http://g:1\"}\n  - mcp: {address: \"http://g:1\"}\n");
    assert!(e.contains("sources[1].name: duplicate source name"), "{e}");
}

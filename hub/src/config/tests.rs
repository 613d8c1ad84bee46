use super::*;

fn args() -> Args {
    Args::parse_from(["meshhub"])
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("objects")).unwrap();
    let path = dir.path().join("meshhub.yaml");
    Config::from_yaml(&args(), &path, text)
}

fn err(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

const SOURCES: &str = "sources:\n  - file: {path: objects}\n";

#[test]
fn flags_have_loopback_defaults() {
    let a = args();
    assert_eq!(a.grpc_addr.to_string(), "127.0.0.1:9901");
    assert_eq!(a.admin_addr.to_string(), "127.0.0.1:9902");
    assert_eq!(a.shutdown_grace, Duration::from_secs(10));
    assert!(a.config.is_none());
    let a = Args::try_parse_from([
        "meshhub",
        "--grpc-addr",
        "0.0.0.0:15010",
        "--shutdown-grace",
        "1s",
    ])
    .unwrap();
    assert_eq!(a.grpc_addr.port(), 15010);
    assert_eq!(a.shutdown_grace, Duration::from_secs(1));
    let e = Args::try_parse_from(["meshhub", "--admin-addr", "nowhere"]).unwrap_err();
    assert!(e.to_string().contains("--admin-addr"), "{e}");
}

#[test]
fn the_embedded_default_is_valid() {
    let c = Config::from_args(args()).unwrap();
    assert_eq!(c.sources.len(), 1);
    let names: Vec<&str> = c.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["east", "west"]);
    assert_eq!(c.debounce, Debounce::default());
    assert_eq!(c.unknown_fields, UnknownFields::Reject);
    let SourceSpec::File(f) = &c.sources[0] else {
        panic!("the embedded default is a file source")
    };
    assert!(f.root.join("meshhub.yaml").is_file());
    assert_eq!(f.exclude, std::slice::from_ref(&c.config_file));
}

#[test]
fn minimal_file_gets_defaults_and_typed_values() {
    let c = parse(&format!(
        "{SOURCES}clusters:\n  - name: east\n    namespaces: [a, b]\n    labels: {{tier: x}}\ndebounce:\n  quiet: 250ms\n  maxWait: 2s\nunknownFields: prune\n"
    ))
    .unwrap();
    assert_eq!(c.sources[0].name(), "file:objects");
    assert_eq!(c.clusters[0].selector.namespaces.len(), 2);
    assert_eq!(c.clusters[0].selector.labels["tier"], "x");
    assert_eq!(c.debounce.quiet, Duration::from_millis(250));
    assert_eq!(c.debounce.max_wait, Duration::from_secs(2));
    assert_eq!(c.unknown_fields, UnknownFields::Prune);
}

#[test]
fn unknown_fields_are_named_with_their_line() {
    let e = err(&format!(
        "{SOURCES}clusters:\n  - name: east\n    namespace: [a]\n"
    ));
    assert!(e.contains("namespace"), "{e}");
    assert!(e.contains("meshhub.yaml:5"), "{e}");
    let e = err(&format!("{SOURCES}debounce:\n  quiet: 100ms\n  max: 1s\n"));
    assert!(e.contains("max"), "{e}");
}

#[test]
fn bad_values_name_the_setting() {
    let e = err(&format!("{SOURCES}debounce:\n  quiet: soon\n"));
    assert!(e.contains("invalid duration \"soon\""), "{e}");
    assert!(e.contains("meshhub.yaml:4"), "{e}");
    let e = err(&format!("{SOURCES}unknownFields: ignore\n"));
    assert!(e.contains("ignore"), "{e}");
    let e = err(&format!("{SOURCES}debounce:\n  quiet: 2s\n"));
    assert!(e.contains("debounce.quiet"), "{e}");
    let e = err(&format!("{SOURCES}debounce:\n  maxWait: 0s\n  quiet: 0s\n"));
    assert!(e.contains("debounce.maxWait"), "{e}");
}

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
fn sources_are_checked() {
    let e = err("clusters: []\n");
    assert!(e.contains("sources: at least one source"), "{e}");
    let e = err("sources:\n  - file: {path: missing}\n");
    assert!(
        e.contains("sources[0].file.path") && e.contains("not a directory"),
        "{e}"
    );
    let e = err("sources:\n  - name: x\n");
    assert!(e.contains("sources[0]"), "{e}");
    let e = err(
        "sources:\n  - {name: a, file: {path: objects}}\n  - {name: a, file: {path: objects}}\n",
    );
    assert!(e.contains("sources[1].name: duplicate source name"), "{e}");
}

#[test]
fn a_missing_file_is_named() {
    let a = Args::parse_from(["meshhub", "--config", "/nonexistent/meshhub.yaml"]);
    let e = Config::from_args(a).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/meshhub.yaml"), "{e}");
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
    assert_eq!(east.address, "http://10.0.0.1:9911");
    assert_eq!(east.connect_timeout, DEFAULT_AGENT_CONNECT_TIMEOUT);
    assert_eq!(east.reconnect, ReconnectPolicy::default());
    let west = &c.agents[1];
    assert_eq!(west.connect_timeout, Duration::from_secs(2));
    assert_eq!(west.reconnect.initial, Duration::from_millis(100));
    assert_eq!(west.reconnect.max, Duration::from_secs(5));
    assert_eq!(west.reconnect.factor, 3.0);
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
fn reparse_keeps_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("objects")).unwrap();
    let path = dir.path().join("meshhub.yaml");
    let c = Config::from_yaml(&args(), &path, SOURCES).unwrap();
    let again = c
        .reparse(&format!("{SOURCES}clusters:\n  - name: east\n"))
        .unwrap();
    assert_eq!(again.grpc_addr, c.grpc_addr);
    assert_eq!(again.config_file, c.config_file);
    assert_eq!(again.clusters.len(), 1);
}

#[test]
fn kubernetes_sources_are_checked_and_get_defaults() {
    let c = parse("sources:\n  - kubernetes: {}\n").unwrap();
    let SourceSpec::Kubernetes(k) = &c.sources[0] else {
        panic!("a kubernetes source")
    };
    assert_eq!(k.name, "kubernetes");
    assert_eq!(k.connection.kubeconfig, None);
    assert!(k.namespaces.is_empty());
    assert_eq!(k.discovery_interval, DEFAULT_DISCOVERY_INTERVAL);
    assert_eq!(
        c.kinds.iter().count(),
        meshhub_proto::kinds::KindTable::builtin().iter().count()
    );

    let c = parse(
        "sources:\n  - kubernetes:\n      context: west\n      namespaces: [bookinfo, bookinfo]\n      discoveryInterval: 10s\n      extraKinds:\n        - {version: v1, kind: ConfigMap}\n        - {group: networking.k8s.io, version: v1, kind: NetworkPolicy}\n        - {group: example.com, version: v1, kind: Widget, plural: widgetz, clusterScoped: true}\n",
    )
    .unwrap();
    let SourceSpec::Kubernetes(k) = &c.sources[0] else {
        panic!("a kubernetes source")
    };
    assert_eq!(k.name, "kubernetes:west");
    assert_eq!(k.namespaces, ["bookinfo"]);
    assert_eq!(k.discovery_interval, Duration::from_secs(10));
    let plurals: Vec<&str> = k.extra_kinds.iter().map(|e| e.plural.as_str()).collect();
    assert_eq!(plurals, ["configmaps", "networkpolicies", "widgetz"]);
    assert!(!k.extra_kinds[2].namespaced);
    for collection in [
        "k8s/core/v1/configmaps",
        "k8s/networking.k8s.io/v1/networkpolicies",
        "k8s/example.com/v1/widgetz",
    ] {
        assert!(c.kinds.by_collection(collection).is_some(), "{collection}");
    }
}

#[test]
fn kubernetes_source_errors_name_the_setting() {
    let e = err("sources:\n  - kubernetes: {kubeconfig: /nonexistent/kubeconfig}\n");
    assert!(e.contains("sources[0].kubernetes.kubeconfig"), "{e}");
    let e = err("sources:\n  - kubernetes: {namespaces: [Bad_NS]}\n");
    assert!(e.contains("sources[0].kubernetes.namespaces[0]"), "{e}");
    let e = err("sources:\n  - kubernetes: {discoveryInterval: 10ms}\n");
    assert!(e.contains("discoveryInterval"), "{e}");
    let e = err(
        "sources:\n  - kubernetes: {extraKinds: [{group: networking.istio.io, version: v1, kind: VirtualService}]}\n",
    );
    assert!(e.contains("extraKinds[0].group"), "{e}");
    let e = err("sources:\n  - file: {path: objects}\n    kubernetes: {}\n");
    assert!(e.contains("exactly one of"), "{e}");
    let e = err("sources:\n  - kubernetes: {}\n  - kubernetes: {}\n");
    assert!(e.contains("duplicate source name"), "{e}");
}

#[test]
fn plurals_are_guessed_like_kubernetes_does() {
    for (kind, plural) in [
        ("ConfigMap", "configmaps"),
        ("Ingress", "ingresses"),
        ("NetworkPolicy", "networkpolicies"),
        ("Gateway", "gateways"),
        ("Endpoints", "endpointses"),
    ] {
        assert_eq!(guess_plural(kind), plural, "{kind}");
    }
}

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
    assert_eq!(m.address, "http://galley.istio-system:9901");
    let all: Vec<String> = c.kinds.iter().map(|k| k.collection().to_owned()).collect();
    assert_eq!(m.collections, all);
    assert!(m.collections.iter().any(|c| c == "k8s/core/v1/configmaps"));
    assert_eq!(m.tls, None);
    assert_eq!(m.node_id, "");
    assert!(!m.incremental);
    assert_eq!(m.connect_timeout, DEFAULT_MCP_CONNECT_TIMEOUT);
    assert_eq!(m.reconnect, ReconnectPolicy::default());

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
    assert_eq!(m.connect_timeout, Duration::from_secs(2));
    assert_eq!(m.reconnect.initial, Duration::from_millis(100));
    assert_eq!(m.reconnect.max, Duration::from_secs(5));
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
fn the_webhook_is_off_by_default_and_checked_when_on() {
    assert_eq!(parse(SOURCES).unwrap().webhook, None);

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("objects")).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["meshhub.meshhub.svc".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
    let path = dir.path().join("meshhub.yaml");
    let parse_here = |text: &str| Config::from_yaml(&args(), &path, text);

    let c = parse_here(&format!(
        "{SOURCES}webhook:\n  tls: {{cert: tls.crt, key: tls.key}}\n"
    ))
    .unwrap();
    let w = c.webhook.expect("on");
    assert_eq!(w.addr, DEFAULT_WEBHOOK_ADDR.parse::<SocketAddr>().unwrap());
    assert_eq!(w.path, "/validate");
    assert_eq!(w.cert, dir.path().join("tls.crt"));

    let c = parse_here(&format!(
        "{SOURCES}webhook:\n  addr: 127.0.0.1:0\n  path: /admit\n  tls: {{cert: tls.crt, key: tls.key}}\n"
    ))
    .unwrap();
    let w = c.webhook.unwrap();
    assert_eq!(w.addr.to_string(), "127.0.0.1:0");
    assert_eq!(w.path, "/admit");

    let e = |block: &str| {
        parse_here(&format!("{SOURCES}webhook:\n{block}"))
            .unwrap_err()
            .to_string()
    };
    assert!(
        e("  addr: 127.0.0.1:0\n").contains("tls"),
        "tls is required"
    );
    let bad_addr = e("  addr: nowhere\n  tls: {cert: tls.crt, key: tls.key}\n");
    assert!(bad_addr.contains("webhook.addr"), "{bad_addr}");
    let bad_path = e("  path: validate\n  tls: {cert: tls.crt, key: tls.key}\n");
    assert!(bad_path.contains("webhook.path"), "{bad_path}");
    let missing = e("  tls: {cert: nope.crt, key: tls.key}\n");
    assert!(
        missing.contains("webhook.tls") && missing.contains("nope.crt"),
        "{missing}"
    );
    // A key that doesn't fit the certificate.
    std::fs::write(
        dir.path().join("other.key"),
        rcgen::KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    let mismatch = e("  tls: {cert: tls.crt, key: other.key}\n");
    assert!(mismatch.contains("webhook.tls"), "{mismatch}");
}

#[test]
fn the_grpc_port_needs_tls_or_insecure_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("objects")).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["meshhub.meshhub.svc".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
    std::fs::write(dir.path().join("ca.crt"), cert.pem()).unwrap();
    let path = dir.path().join("meshhub.yaml");
    let wide = Args::parse_from(["meshhub", "--grpc-addr", "0.0.0.0:9901"]);
    let parse_with = |args: &Args, text: &str| Config::from_yaml(args, &path, text);

    // The default (loopback) serves plaintext without asking.
    let c = parse_with(&args(), SOURCES).unwrap();
    assert_eq!(c.grpc_tls, None);
    // Beyond loopback, plaintext is refused with the way out named...
    let e = parse_with(&wide, SOURCES).unwrap_err().to_string();
    assert!(
        e.contains("grpcTls") && e.contains("0.0.0.0:9901") && e.contains("insecure"),
        "{e}"
    );
    // ...unless asked for, in the file or by flag (kept across reloads).
    assert!(parse_with(&wide, &format!("{SOURCES}insecure: true\n")).is_ok());
    let flagged = Args::parse_from(["meshhub", "--grpc-addr", "0.0.0.0:9901", "--insecure"]);
    let c = parse_with(&flagged, SOURCES).unwrap();
    assert!(c.insecure);
    assert!(c.reparse(SOURCES).unwrap().insecure);
    // Or TLS, with paths relative to the file.
    let c = parse_with(
        &wide,
        &format!("{SOURCES}grpcTls: {{cert: tls.crt, key: tls.key, clientCa: ca.crt}}\n"),
    )
    .unwrap();
    let tls = c.grpc_tls.unwrap();
    assert_eq!(tls.cert, dir.path().join("tls.crt"));
    assert_eq!(tls.client_ca, Some(dir.path().join("ca.crt")));
    let e = parse_with(
        &wide,
        &format!("{SOURCES}grpcTls: {{cert: nope.crt, key: tls.key}}\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("grpcTls") && e.contains("nope.crt"), "{e}");
}

#[test]
fn identity_lists_are_checked_and_enforced_only_with_client_certificates() {
    let c = parse(&format!(
        "{SOURCES}clusters:\n  - name: east\n    identities: ['spiffe://east.example/**']\ndefaultIdentities: [istiod.example]\n"
    ))
    .unwrap();
    assert!(c.access.configured());
    assert_eq!(c.access.groups.len(), 2);
    assert_eq!(c.access.groups[0].0.as_ref(), "east");
    assert_eq!(c.access.groups[1].0.as_ref(), "default");
    assert!(!c.access.enforced, "no grpcTls.clientCa: not enforceable");
    let e = err(&format!(
        "{SOURCES}clusters:\n  - name: east\n    identities: [ok, 'a b']\n"
    ));
    assert!(e.contains("clusters[0].identities[1]"), "{e}");
    assert!(!parse(SOURCES).unwrap().access.configured());
}

#[test]
fn limits_default_for_a_large_hub_and_are_checked() {
    let c = parse(SOURCES).unwrap();
    assert_eq!(c.limits, meshhub_mcp::limits::Limits::default());
    assert_eq!(c.limits.max_streams, 20_000);
    let c = parse(&format!(
        "{SOURCES}limits:\n  newStreamsPerSecond: 50\n  newStreamsBurst: 100\n  maxStreams: 10\n  maxMessageSize: 1048576\n  sendTimeout: 0s\n  keepaliveInterval: 1m\n"
    ))
    .unwrap();
    assert_eq!(c.limits.new_streams_per_second.get(), 50);
    assert_eq!(c.limits.max_streams, 10);
    assert_eq!(c.limits.max_message_bytes, 1 << 20);
    assert_eq!(c.limits.send_timeout, None, "0s turns the deadline off");
    assert_eq!(c.limits.keepalive_interval, Duration::from_secs(60));
    assert!(
        err(&format!("{SOURCES}limits: {{newStreamsBurst: 0}}\n"))
            .contains("limits.newStreamsBurst")
    );
    assert!(
        err(&format!("{SOURCES}limits: {{maxMessageSize: 10}}\n"))
            .contains("limits.maxMessageSize")
    );
    assert!(err(&format!("{SOURCES}limits: {{maxStreamz: 10}}\n")).contains("maxStreamz"));
}

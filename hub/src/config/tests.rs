use meshhub_testkit::pki::Leaf;

use super::testing::{SOURCES, args, err, parse};
use super::*;

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
fn a_missing_file_is_named() {
    let a = Args::parse_from(["meshhub", "--config", "/nonexistent/meshhub.yaml"]);
    let e = Config::from_args(a).unwrap_err().to_string();
    assert!(e.contains("/nonexistent/meshhub.yaml"), "{e}");
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
fn the_grpc_port_needs_tls_or_insecure_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("objects")).unwrap();
    let leaf = Leaf::self_signed(&["meshhub.meshhub.svc"]);
    leaf.write(&dir.path().join("tls.crt"), &dir.path().join("tls.key"));
    std::fs::write(dir.path().join("ca.crt"), &leaf.cert).unwrap();
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

#[test]
fn a_rollout_needs_history_and_works_with_replicas() {
    let base = format!(
        "{SOURCES}clusters:\n- name: east\n  agent: {{address: 'http://127.0.0.1:9911'}}\n"
    );
    let rollout = "rollout:\n  waves:\n  - {name: all, rest: true}\n";
    let e = err(&format!("{base}{rollout}"));
    assert!(e.contains("rollout: needs `history:`"), "{e}");
    let sharded = parse(&format!(
        "{base}{rollout}history: {{dir: h}}\nleaderElection: {{enabled: true, shards: 4}}\n"
    ));
    assert!(
        sharded.is_ok(),
        "sharded replicas share it too: {sharded:?}"
    );
    let elected = parse(&format!(
        "{base}{rollout}history: {{dir: h}}\nleaderElection: {{enabled: true}}\n"
    ));
    assert!(elected.is_ok(), "replicas share the rollout: {elected:?}");
    let e = err(&format!(
        "{base}history: {{dir: h}}\nrollout:\n  waves:\n  - {{name: w, clusters: [west]}}\n"
    ));
    assert!(
        e.contains("rollout.waves[0].clusters[0]: \"west\" is not a cluster with an `agent:`"),
        "{e}"
    );
    let ok = parse(&format!("{base}history: {{dir: h}}\n{rollout}")).unwrap();
    assert_eq!(ok.rollout.unwrap().policy.waves[0].name, "all");
}

#[test]
fn status_write_back_works_with_replicas_sharded_or_not() {
    let base = "sources:\n  - kubernetes: {statusWriteBack: {enabled: true}}\n";
    for election in ["{enabled: true}", "{enabled: true, shards: 12}"] {
        let text = format!("{base}leaderElection: {election}\n");
        assert!(parse(&text).is_ok(), "{election}: {:?}", parse(&text));
    }
}

#[test]
fn validation_crds_are_read_at_load_and_a_bad_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("objects")).unwrap();
    let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec:\n  group: example.com\n  names: {kind: Widget, plural: widgets}\n  scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object}}}}\n";
    std::fs::write(dir.path().join("crds.yaml"), crd).unwrap();
    let path = dir.path().join("meshhub.yaml");
    let c = Config::from_yaml(
        &args(),
        &path,
        &format!("{SOURCES}validation:\n  crds: [crds.yaml]\n"),
    )
    .unwrap();
    assert_eq!(c.validation.crds, [dir.path().join("crds.yaml")]);
    assert_eq!(
        c.validation.validator.crds().kinds(),
        ["example.com/v1 Widget"]
    );
    let e = Config::from_yaml(
        &args(),
        &path,
        &format!("{SOURCES}validation:\n  crds: [missing.yaml]\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("validation.crds") && e.contains("missing.yaml"),
        "{e}"
    );
    std::fs::write(
        dir.path().join("notes.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n",
    )
    .unwrap();
    let e = Config::from_yaml(
        &args(),
        &path,
        &format!("{SOURCES}validation:\n  crds: [notes.yaml]\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("no CustomResourceDefinition"), "{e}");
}

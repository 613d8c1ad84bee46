use clap::Parser as _;
use meshhub_testkit::pki::Leaf;

use super::*;

fn args(cluster: Option<&str>, data: Option<&str>) -> Args {
    Args {
        cluster: cluster.map(str::to_owned),
        data_dir: data.map(PathBuf::from),
        ..Args::default()
    }
}

fn err(args: Args, file: Option<&str>) -> String {
    let e = Config::from_parts(args, file.map(|t| (Path::new("agent.yaml"), t))).unwrap_err();
    e.to_string()
}

#[test]
fn defaults_are_push_on_loopback_with_every_builtin_collection() {
    let c = Config::from_parts(
        args(Some("east"), Some("/nonexistent/meshhub-agent-data")),
        None,
    )
    .unwrap();
    assert_eq!(
        c.mode,
        Mode::Push {
            listen: DEFAULT_SINK_ADDR,
            tls: None,
        }
    );
    assert_eq!(c.grpc_addr, DEFAULT_GRPC_ADDR);
    assert_eq!(c.admin_addr, DEFAULT_ADMIN_ADDR);
    assert_eq!(c.collections.len(), KindTable::builtin().len());
    assert!(
        c.collections
            .contains(&"istio/networking/v1alpha3/virtualservices".to_owned())
    );
    assert_eq!(c.max_message_bytes, DEFAULT_MAX_MESSAGE_BYTES);
    assert!(c.incremental);
    assert_eq!(c.shutdown_grace, DEFAULT_SHUTDOWN_GRACE);
}

#[test]
fn cluster_and_data_dir_are_required_and_named() {
    let e = err(args(None, Some("/nonexistent/meshhub-agent-data")), None);
    assert!(
        e.starts_with("cluster: required") && e.contains("MESHHUB_AGENT_CLUSTER"),
        "{e}"
    );
    let e = err(args(Some("east"), None), None);
    assert!(
        e.starts_with("dataDir: required") && e.contains("--data-dir"),
        "{e}"
    );
    let e = err(
        args(Some("East_1"), Some("/nonexistent/meshhub-agent-data")),
        None,
    );
    assert!(e.starts_with("cluster: "), "{e}");
}

#[test]
fn the_file_fills_what_flags_leave_out_and_flags_win() {
    let file = "cluster: west\ndataDir: /var/lib/agent\nmode: pull\nhubUrl: http://hub:9901\n\
                collections: [istio/networking/v1alpha3/gateways]\nmaxMessageSize: 8MiB\n\
                incremental: false\nshutdownGrace: 3s\n";
    let c = Config::from_parts(
        Args {
            cluster: Some("east".into()),
            ..Args::default()
        },
        Some((Path::new("a.yaml"), file)),
    )
    .unwrap();
    assert_eq!(c.cluster, "east");
    assert_eq!(c.data_dir, PathBuf::from("/var/lib/agent"));
    assert_eq!(
        c.mode,
        Mode::Pull {
            hub_url: "http://hub:9901".into(),
            tls: None,
        }
    );
    assert_eq!(c.collections, ["istio/networking/v1alpha3/gateways"]);
    assert_eq!(c.max_message_bytes, 8 << 20);
    assert!(!c.incremental, "the file turns the default off");
    assert_eq!(c.shutdown_grace, Duration::from_secs(3));
}

#[test]
fn bad_values_name_their_setting() {
    let base = || args(Some("east"), Some("/nonexistent/meshhub-agent-data"));
    let with = |f: fn(&mut Args)| {
        let mut a = base();
        f(&mut a);
        err(a, None)
    };
    assert!(with(|a| a.mode = Some(ModeName::Pull)).starts_with("hubUrl (pull mode): required"));
    assert!(
        with(|a| {
            a.mode = Some(ModeName::Pull);
            a.hub_url = Some("https://hub:1".into());
        })
        .starts_with("hubUrl: ")
    );
    assert!(with(|a| a.hub_url = Some("http://hub:1".into())).starts_with("hubUrl: "));
    assert!(
        with(|a| a.collections = Some(vec!["istio/nope/v1/things".into()]))
            .starts_with("collections[0]: ")
    );
    // A size that parses but is below the minimum: the merge names it.
    assert!(with(|a| a.max_message_size = Some(10)).starts_with("maxMessageSize: "));

    // The same bad values in the file name the file's key.
    let file = |text: &str| err(base(), Some(text));
    assert!(
        file("mode: both\n").starts_with("mode: "),
        "{}",
        file("mode: both\n")
    );
    assert!(file("grpcAddr: nowhere\n").starts_with("grpcAddr: "));
    assert!(file("sinkAddr: 1.2.3.4\n").starts_with("sinkAddr: "));
    assert!(file("adminAddr: x\n").starts_with("adminAddr: "));
    assert!(file("maxMessageSize: 12 parsecs\n").starts_with("maxMessageSize: "));
    assert!(file("maxMessageSize: 10\n").starts_with("maxMessageSize: "));
    assert!(file("shutdownGrace: soon\n").starts_with("shutdownGrace: "));
    assert!(file("apply: {enabled: true, resync: soon}\n").starts_with("apply.resync: "));
}

/// Parses flags as the binary does (clap, with the value parsers).
fn flags(list: &[&str]) -> Result<Args, String> {
    Args::try_parse_from(std::iter::once("meshhub-sink-agent").chain(list.iter().copied()))
        .map_err(|e| e.to_string())
}

#[test]
fn flags_arrive_typed_and_bad_values_name_the_flag() {
    let a = flags(&[
        "--mode",
        "pull",
        "--sink-addr",
        "0.0.0.0:1",
        "--grpc-addr",
        " 127.0.0.1:2",
        "--admin-addr",
        "[::1]:3",
        "--max-message-size",
        "8MiB",
        "--incremental",
        "YES",
        "--shutdown-grace",
        "1m 30s",
        "--insecure",
        "--apply-force",
        "off",
        "--apply-resync",
        "45s",
    ])
    .unwrap();
    assert_eq!(a.mode, Some(ModeName::Pull));
    assert_eq!(a.sink_addr, Some("0.0.0.0:1".parse().unwrap()));
    assert_eq!(a.grpc_addr, Some("127.0.0.1:2".parse().unwrap()));
    assert_eq!(a.admin_addr, Some("[::1]:3".parse().unwrap()));
    assert_eq!(a.max_message_size, Some(8 << 20));
    assert_eq!(a.incremental, Some(true));
    assert_eq!(a.shutdown_grace, Some(Duration::from_secs(90)));
    assert_eq!(a.insecure, Some(true), "a bare --insecure means true");
    assert_eq!(a.apply, None);
    assert_eq!(a.apply_force, Some(false));
    assert_eq!(a.apply_resync, Some(Duration::from_secs(45)));

    for (flag, value, expect) in [
        ("--mode", "both", "[possible values: push, pull]"),
        ("--mode", "Push", "[possible values: push, pull]"),
        ("--grpc-addr", "nowhere", "is not a socket address"),
        ("--sink-addr", "1.2.3.4", "is not a socket address"),
        ("--admin-addr", "localhost:80", "is not a socket address"),
        ("--max-message-size", "12 parsecs", "unknown unit"),
        ("--max-message-size", "MiB", "is not a size"),
        ("--incremental", "maybe", "is not a boolean"),
        ("--insecure", "maybe", "is not a boolean"),
        ("--apply", "maybe", "is not a boolean"),
        ("--apply-force", "2", "is not a boolean"),
        ("--shutdown-grace", "soon", "invalid duration"),
        ("--apply-resync", "5 fortnights", "invalid duration"),
    ] {
        let e = flags(&[flag, value]).unwrap_err();
        assert!(
            e.contains(&format!("'{flag}")) && e.contains(value) && e.contains(expect),
            "{flag} {value}: {e}"
        );
    }
}

#[test]
fn unknown_keys_in_the_file_are_errors_with_a_line() {
    let e = err(
        args(Some("east"), Some("/nonexistent/meshhub-agent-data")),
        Some("cluster: east\nclustr: west\n"),
    );
    assert!(
        e.starts_with("config file agent.yaml:2: ") && e.contains("clustr"),
        "{e}"
    );
}

#[test]
fn sizes_parse_with_units() {
    assert_eq!(values::size("4194304"), Ok(4_194_304));
    assert_eq!(values::size("64MiB"), Ok(64 << 20));
    assert_eq!(values::size("512 KiB"), Ok(512 << 10));
    assert_eq!(values::size("10MB"), Ok(10_000_000));
    assert!(values::size("MiB").is_err());
}

#[test]
fn applying_is_off_by_default_and_checked_when_on() {
    let base = || args(Some("east"), Some("/nonexistent/meshhub-agent-data"));
    assert_eq!(Config::from_parts(base(), None).unwrap().apply, None);

    // From the file, with defaults.
    let c = Config::from_parts(
        base(),
        Some((Path::new("agent.yaml"), "apply: {enabled: true}\n")),
    )
    .unwrap();
    let a = c.apply.expect("applying on");
    assert_eq!(a.connection.kubeconfig, None);
    assert!(!a.force);
    assert_eq!(a.source_cluster, DEFAULT_SOURCE_CLUSTER);
    assert_eq!(a.resync, DEFAULT_APPLY_RESYNC);

    // Flags win over the file; `--apply` alone means true.
    let parsed = Args::try_parse_from([
        "meshhub-sink-agent",
        "--apply",
        "--apply-force",
        "true",
        "--apply-source-cluster",
        "hub-cluster",
        "--apply-resync",
        "30s",
    ])
    .unwrap();
    let c = Config::from_parts(
        Args {
            cluster: Some("east".into()),
            data_dir: Some(PathBuf::from("/nonexistent/meshhub-agent-data")),
            ..parsed
        },
        Some((
            Path::new("agent.yaml"),
            "apply: {enabled: false, force: false}\n",
        )),
    )
    .unwrap();
    let a = c.apply.expect("the flag turns it on");
    assert!(a.force);
    assert_eq!(a.source_cluster, "hub-cluster");
    assert_eq!(a.resync, Duration::from_secs(30));

    let e = err(
        Args {
            apply: Some(true),
            apply_kubeconfig: Some(PathBuf::from("/nonexistent/kubeconfig")),
            ..base()
        },
        None,
    );
    assert!(e.contains("apply.kubeconfig"), "{e}");
    let e = flags(&["--apply", "maybe"]).unwrap_err();
    assert!(e.contains("--apply") && e.contains("not a boolean"), "{e}");
    // In the file, YAML itself types it: the error gives the line.
    let e = err(base(), Some("apply: {enabled: maybe}\n"));
    assert!(
        e.starts_with("config file agent.yaml:1: ") && e.contains("boolean"),
        "{e}"
    );
    let e = err(base(), Some("apply: {enabled: true, resync: 10ms}\n"));
    assert!(e.contains("apply.resync"), "{e}");
    let e = err(
        base(),
        Some("apply: {enabled: true, sourceCluster: Not_A_Name}\n"),
    );
    assert!(e.contains("apply.sourceCluster"), "{e}");
}

#[test]
fn apply_namespaces_from_the_file_or_the_flag() {
    let base = || args(Some("east"), Some("/nonexistent/meshhub-agent-data"));
    let c = Config::from_parts(
        base(),
        Some((
            Path::new("agent.yaml"),
            "apply: {enabled: true, namespaces: [bookinfo, istio-config]}\n",
        )),
    )
    .unwrap();
    let a = c.apply.expect("applying on");
    assert_eq!(
        a.namespaces.into_iter().collect::<Vec<_>>(),
        ["bookinfo", "istio-config"]
    );
    let parsed = Args::try_parse_from([
        "meshhub-sink-agent",
        "--apply",
        "--apply-namespaces",
        "bookinfo,other",
    ])
    .unwrap();
    let c = Config::from_parts(
        Args {
            cluster: Some("east".into()),
            data_dir: Some(PathBuf::from("/nonexistent/meshhub-agent-data")),
            ..parsed
        },
        Some((Path::new("agent.yaml"), "apply: {namespaces: [ignored]}\n")),
    )
    .unwrap();
    assert_eq!(
        c.apply.unwrap().namespaces.into_iter().collect::<Vec<_>>(),
        ["bookinfo", "other"]
    );
    // Default: every namespace.
    let c = Config::from_parts(
        base(),
        Some((Path::new("agent.yaml"), "apply: {enabled: true}\n")),
    )
    .unwrap();
    assert!(c.apply.unwrap().namespaces.is_empty());
    let e = err(
        base(),
        Some("apply: {enabled: true, namespaces: [Not_A_Namespace]}\n"),
    );
    assert!(e.contains("apply.namespaces"), "{e}");
}

#[test]
fn ports_beyond_loopback_need_tls_or_insecure_and_pull_mode_speaks_tls() {
    let dir = tempfile::tempdir().unwrap();
    let leaf = Leaf::self_signed(&["agent.example"]);
    let file = |name: &str, text: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let crt = file("tls.crt", leaf.cert.clone());
    let pem_key = file("tls.key", leaf.key.clone());
    let wide = |a: Args| Args {
        sink_addr: Some("0.0.0.0:9911".parse().unwrap()),
        grpc_addr: Some("0.0.0.0:9912".parse().unwrap()),
        ..a
    };
    let base = || args(Some("east"), Some("/nonexistent/meshhub-agent-data"));

    // Loopback defaults: plaintext without asking.
    let c = Config::from_parts(base(), None).unwrap();
    assert!(c.grpc_tls.is_none() && !c.insecure);
    // Beyond loopback: refused, naming the port and the way out.
    let e = err(wide(base()), None);
    assert!(e.contains("0.0.0.0:9912") && e.contains("insecure"), "{e}");
    // TLS on the re-serve port only: the sink port is still plaintext.
    let tls_grpc = |a: Args| Args {
        grpc_tls_cert: Some(crt.clone()),
        grpc_tls_key: Some(pem_key.clone()),
        ..a
    };
    let e = err(tls_grpc(wide(base())), None);
    assert!(e.contains("sink port") && e.contains("0.0.0.0:9911"), "{e}");
    // Both ports with TLS, or --insecure.
    let both = Args {
        sink_tls_cert: Some(crt.clone()),
        sink_tls_key: Some(pem_key.clone()),
        ..tls_grpc(wide(base()))
    };
    let c = Config::from_parts(both, None).unwrap();
    assert_eq!(c.grpc_tls.unwrap().cert, crt);
    let c = Config::from_parts(
        Args {
            insecure: Some(true),
            ..wide(base())
        },
        None,
    )
    .unwrap();
    assert!(c.insecure);
    assert!(
        Config::from_parts(
            wide(base()),
            Some((Path::new("a.yaml"), "insecure: true\n"))
        )
        .is_ok()
    );

    // Pull mode: https:// needs hubTlsCa, and the other way round.
    let pull = |url: &str| Args {
        mode: Some(ModeName::Pull),
        hub_url: Some(url.into()),
        ..base()
    };
    let e = err(pull("https://hub:9901"), None);
    assert!(e.contains("hubTlsCa"), "{e}");
    let e = err(
        Args {
            hub_tls_ca: Some(crt.clone()),
            ..pull("http://hub:9901")
        },
        None,
    );
    assert!(e.contains("https://"), "{e}");
    let c = Config::from_parts(
        Args {
            hub_tls_ca: Some(crt.clone()),
            hub_tls_cert: Some(crt.clone()),
            hub_tls_key: Some(pem_key.clone()),
            hub_tls_server_name: Some("meshhub.example".into()),
            ..pull("https://hub:9901")
        },
        None,
    )
    .unwrap();
    let Mode::Pull { tls: Some(tls), .. } = c.mode else {
        panic!("pull with TLS: {:?}", c.mode)
    };
    assert_eq!(tls.server_name.as_deref(), Some("meshhub.example"));
    let e = err(
        Args {
            hub_tls_ca: Some(crt.clone()),
            hub_tls_cert: Some(crt.clone()),
            ..pull("https://hub:9901")
        },
        None,
    );
    assert!(e.contains("hubTlsCert") && e.contains("together"), "{e}");
}

#[test]
fn allowed_hub_identities_need_mutual_tls() {
    let e = err(
        Args {
            sink_allowed_identities: Some(vec!["meshhub.example".into()]),
            ..args(Some("east"), Some("/nonexistent/meshhub-agent-data"))
        },
        None,
    );
    assert!(
        e.contains("sinkAllowedIdentities") && e.contains("sinkTlsClientCa"),
        "{e}"
    );
}

#[test]
fn limits_are_read_and_checked_like_the_hubs_and_max_message_size_wins() {
    let base = || args(Some("east"), Some("/nonexistent/meshhub-agent-data"));
    let c = Config::from_parts(base(), None).unwrap();
    assert_eq!(c.limits, meshhub_mcp::limits::Limits::default());

    let file = "limits:\n  newStreamsPerSecond: 50\n  maxStreams: 10\n  maxMessageSize: 1048576\n  sendTimeout: 0s\n  keepaliveInterval: 1m\n";
    let c = Config::from_parts(base(), Some((Path::new("a.yaml"), file))).unwrap();
    assert_eq!(c.limits.new_streams_per_second.get(), 50);
    assert_eq!(c.limits.max_streams, 10);
    assert_eq!(c.limits.send_timeout, None, "0s turns the deadline off");
    assert_eq!(c.limits.keepalive_interval, Duration::from_secs(60));
    assert_eq!(c.limits.connection_streams_burst.get(), 20, "a default");
    assert_eq!(
        c.max_message_bytes,
        1 << 20,
        "limits.maxMessageSize applies"
    );
    assert_eq!(c.limits.max_message_bytes, 1 << 20);

    // The top-level maxMessageSize wins over limits.maxMessageSize, the
    // flag over both.
    let file = "maxMessageSize: 2MiB\nlimits: {maxMessageSize: 1048576}\n";
    let c = Config::from_parts(base(), Some((Path::new("a.yaml"), file))).unwrap();
    assert_eq!(
        (c.max_message_bytes, c.limits.max_message_bytes),
        (2 << 20, 2 << 20)
    );
    let mut flagged = base();
    flagged.max_message_size = Some(3 << 20);
    let c = Config::from_parts(flagged, Some((Path::new("a.yaml"), file))).unwrap();
    assert_eq!(
        (c.max_message_bytes, c.limits.max_message_bytes),
        (3 << 20, 3 << 20)
    );

    let e = err(base(), Some("limits: {newStreamsBurst: 0}\n"));
    assert!(
        e.starts_with("limits.newStreamsBurst: must be positive"),
        "{e}"
    );
    let e = err(base(), Some("limits: {maxMessageSize: 10}\n"));
    assert!(e.starts_with("limits.maxMessageSize: "), "{e}");
    let e = err(base(), Some("limits: {maxStreamz: 10}\n"));
    assert!(e.contains("maxStreamz"), "{e}");
}

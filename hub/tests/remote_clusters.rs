//! Remote clusters in-process over real gRPC on loopback: the hub dials
//! sink agents (the real agent library), reloads of the configuration file
//! touch only the cluster that changed, agents take pushes over mutual TLS
//! from the hub's identity only. (A NACK as `meshhubctl status` shows it:
//! `ctl/tests/it/status.rs`.)

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser as _;
use meshhub::app::Hub;
use meshhub::clusters::is_dialer;
use meshhub::config::{Args, Config};
use meshhub_mcp::authz::AllowList;
use meshhub_mcp::ledger::{PeerStatus, SyncState};
use meshhub_proto::kinds::KindTable;
use meshhub_sink_agent::app::Agent;
use meshhub_sink_agent::config::{Config as AgentConfig, Mode, SinkTls};

const VS: &str = "istio/networking/v1alpha3/virtualservices";
const DEADLINE: Duration = Duration::from_secs(20);

fn vs(name: &str, ns: &str, host: &str, labels: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {ns}\n{labels}spec:\n  hosts: [{host}]\n  http:\n  - route:\n    - destination:\n        host: {host}\n"
    )
}

/// Polls `check` until it holds or the deadline passes.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A cluster entry of the hub's YAML with an agent at `addr`.
fn cluster(name: &str, selector: &str, addr: impl std::fmt::Display) -> String {
    format!(
        "  - name: {name}\n{selector}    agent:\n      address: http://{addr}\n      connectTimeout: 2s\n      reconnect: {{initial: 50ms, max: 500ms}}\n"
    )
}

fn write_config(path: &Path, clusters: &str) {
    let text = format!(
        "sources:\n  - name: files\n    file: {{path: ../objects}}\nclusters:\n{clusters}debounce:\n  quiet: 20ms\n  maxWait: 200ms\n"
    );
    // Replace atomically, as editors and ConfigMaps do.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A temp tree: `objects/` (the file source) and `etc/meshhub.yaml`.
fn tree() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("objects")).unwrap();
    std::fs::create_dir_all(dir.path().join("etc")).unwrap();
    let config = dir.path().join("etc/meshhub.yaml");
    (dir, config)
}

async fn start_hub(config: &Path) -> Hub {
    let args = Args::parse_from([
        "meshhub",
        "--grpc-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--shutdown-grace",
        "5s",
        "--config",
        config.to_str().unwrap(),
    ]);
    let hub = Hub::start(Config::from_args(args).unwrap()).await.unwrap();
    tokio::time::timeout(DEADLINE, hub.ready())
        .await
        .expect("ready");
    hub
}

async fn start_agent(cluster: &str, data: &Path) -> Agent {
    start_agent_with(cluster, data, None).await
}

async fn start_agent_with(cluster: &str, data: &Path, tls: Option<SinkTls>) -> Agent {
    start_agent_allowing(cluster, data, tls, None).await
}

async fn start_agent_allowing(
    cluster: &str,
    data: &Path,
    tls: Option<SinkTls>,
    sink_allowed_identities: Option<AllowList>,
) -> Agent {
    Agent::start(AgentConfig {
        cluster: cluster.into(),
        data_dir: data.to_owned(),
        mode: Mode::Push {
            listen: "127.0.0.1:0".parse().unwrap(),
            tls,
        },
        grpc_addr: "127.0.0.1:0".parse().unwrap(),
        grpc_tls: None,
        insecure: false,
        sink_allowed_identities,
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        admin_token_file: None,
        collections: KindTable::builtin()
            .iter()
            .map(|k| k.collection().to_owned())
            .collect(),
        max_message_bytes: 64 * 1024 * 1024,
        limits: meshhub_mcp::limits::Limits::default(),
        incremental: false,
        shutdown_grace: Duration::from_secs(5),
        apply: None,
    })
    .await
    .unwrap()
}

/// The names of the virtual services an agent serves locally.
fn held(agent: &Agent, cluster: &str) -> Vec<String> {
    agent
        .cache()
        .snapshot(cluster)
        .map(|s| {
            s.collection(VS)
                .keys()
                .iter()
                .map(|k| k.name.to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The live dialer entry of `cluster` in the hub's ledger.
fn dialer(hub: &Hub, cluster: &str) -> Option<PeerStatus> {
    hub.ledger()
        .view()
        .into_iter()
        .find(|p| is_dialer(p) && p.peer == cluster && p.connected)
}

fn vs_state(p: &PeerStatus) -> Option<SyncState> {
    p.collections.get(VS).map(|c| c.state)
}

#[tokio::test]
async fn dials_agents_and_reloads_touch_only_the_cluster_that_changed() {
    let (dir, config) = tree();
    let objects = dir.path().join("objects");
    std::fs::write(objects.join("a.yaml"), vs("a", "bookinfo", "a", "")).unwrap();
    std::fs::write(
        objects.join("w.yaml"),
        vs(
            "w",
            "other",
            "w",
            "  labels: {topology.meshhub.io/west: \"true\"}\n",
        ),
    )
    .unwrap();
    let east = start_agent("east", &dir.path().join("east")).await;
    let west = start_agent("west", &dir.path().join("west")).await;
    let east_c = cluster(
        "east",
        "    namespaces: [bookinfo]\n",
        east.sink_addr().unwrap(),
    );
    write_config(&config, &east_c);
    let hub = start_hub(&config).await;

    eventually("east gets bookinfo/a and ACKs", || async {
        held(&east, "east") == ["bookinfo/a"]
            && dialer(&hub, "east").and_then(|p| vs_state(&p)) == Some(SyncState::Synced)
    })
    .await;
    let east_before = dialer(&hub, "east").unwrap();
    assert_eq!(east_before.streams, 1);

    // Add west (file watch): only west is dialed; east's stream stays.
    let west_c = |selector: &str| cluster("west", selector, west.sink_addr().unwrap());
    write_config(
        &config,
        &format!(
            "{east_c}{}",
            west_c("    labels: {topology.meshhub.io/west: \"true\"}\n")
        ),
    );
    eventually("west gets other/w", || async {
        held(&west, "west") == ["other/w"]
            && dialer(&hub, "west").and_then(|p| vs_state(&p)) == Some(SyncState::Synced)
    })
    .await;
    let east_now = dialer(&hub, "east").unwrap();
    assert_eq!(
        east_now.id, east_before.id,
        "east's dialer was not restarted"
    );
    assert_eq!(east_now.connected_since, east_before.connected_since);
    let west_before = dialer(&hub, "west").unwrap();

    // Change west's selector: its snapshots are rebuilt, nothing redialed.
    write_config(
        &config,
        &format!("{east_c}{}", west_c("    namespaces: [bookinfo]\n")),
    );
    eventually("west gets bookinfo/a instead", || async {
        held(&west, "west") == ["bookinfo/a"]
    })
    .await;
    let west_now = dialer(&hub, "west").unwrap();
    assert_eq!(west_now.id, west_before.id);
    assert_eq!(west_now.streams, 1);
    assert_eq!(dialer(&hub, "east").unwrap().id, east_before.id);

    // A bad configuration is reported and the running one kept.
    let mut reload = hub.reload_status();
    let applied = reload.borrow().reloads;
    write_config(&config, "  - name: Not_A_Label\n");
    let status = reload
        .wait_for(|s| s.last_error.is_some())
        .await
        .unwrap()
        .clone();
    let error = status.last_error.as_deref().unwrap();
    assert!(error.contains("Not_A_Label"), "{error}");
    assert_eq!(status.reloads, applied);
    assert!(dialer(&hub, "east").is_some() && dialer(&hub, "west").is_some());
    assert!(hub.cache().snapshot("west").is_some());

    // Remove west: its dialer stops and its group is withdrawn; east stays.
    write_config(&config, &east_c);
    eventually("west is gone", || async {
        dialer(&hub, "west").is_none() && hub.cache().snapshot("west").is_none()
    })
    .await;
    let status = reload.borrow().clone();
    assert!(
        status.last_error.is_none(),
        "a good reload clears the error"
    );
    assert_eq!(dialer(&hub, "east").unwrap().id, east_before.id);
    // The agent keeps serving what it last received.
    assert_eq!(held(&west, "west"), ["bookinfo/a"]);

    // A forced reload (SIGHUP) of an unchanged file changes nothing.
    let before = reload.borrow().reloads;
    hub.reload().await;
    reload.wait_for(|s| s.reloads > before).await.unwrap();
    assert_eq!(dialer(&hub, "east").unwrap().id, east_before.id);

    assert!(hub.shutdown().await);
    east.shutdown().await;
    west.shutdown().await;
}

/// A CA, an agent certificate for localhost/127.0.0.1 and a hub client
/// certificate, as PEM files in `dir`.
fn pki(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let write = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    write("ca.pem", ca.pem());
    for (name, sans) in [
        (
            "agent",
            vec!["localhost".to_owned(), "127.0.0.1".to_owned()],
        ),
        ("hub", vec!["meshhub.istio-system.svc".to_owned()]),
    ] {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(sans)
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        write(&format!("{name}.pem"), cert.pem());
        write(&format!("{name}-key.pem"), key.serialize_pem());
    }
}

/// An agent whose sink port requires mutual TLS (certificates from
/// [`pki`]), and a hub dialing it over https with the given `tls:` block
/// (paths relative to the hub's config in etc/). One virtual service to push.
async fn mtls_mesh(hub_tls: &str) -> (tempfile::TempDir, Agent, Hub) {
    mtls_mesh_allowing(hub_tls, None).await
}

/// [`mtls_mesh`] with an agent that lets only `allowed` push.
async fn mtls_mesh_allowing(
    hub_tls: &str,
    allowed: Option<&[&str]>,
) -> (tempfile::TempDir, Agent, Hub) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (dir, config) = tree();
    let pki_dir = dir.path().join("pki");
    std::fs::create_dir_all(&pki_dir).unwrap();
    pki(&pki_dir);
    std::fs::write(
        dir.path().join("objects/vs.yaml"),
        vs("reviews", "bookinfo", "reviews", ""),
    )
    .unwrap();
    let agent = start_agent_allowing(
        "east",
        &dir.path().join("east-data"),
        Some(SinkTls {
            cert: pki_dir.join("agent.pem"),
            key: pki_dir.join("agent-key.pem"),
            client_ca: Some(pki_dir.join("ca.pem")),
        }),
        allowed.map(|a| AllowList::parse(a).unwrap()),
    )
    .await;
    let port = agent.sink_addr().expect("push mode").port();
    let cluster = format!(
        "  - name: east\n    agent:\n      address: https://localhost:{port}\n      connectTimeout: 2s\n      reconnect: {{initial: 50ms, max: 500ms}}\n      tls: {hub_tls}\n"
    );
    write_config(&config, &cluster);
    let hub = start_hub(&config).await;
    (dir, agent, hub)
}

#[tokio::test]
async fn the_hub_pushes_to_an_agent_over_mutual_tls() {
    let (_dir, agent, hub) =
        mtls_mesh("{ca: ../pki/ca.pem, cert: ../pki/hub.pem, key: ../pki/hub-key.pem}").await;
    eventually(
        "the agent to hold the virtual service over mTLS",
        || async { held(&agent, "east") == ["bookinfo/reviews"] },
    )
    .await;
    eventually("the hub's ledger to show east SYNCED", || async {
        dialer(&hub, "east").and_then(|p| vs_state(&p)) == Some(SyncState::Synced)
    })
    .await;
    hub.shutdown().await;
    agent.shutdown().await;
}

#[tokio::test]
async fn an_agent_requiring_mutual_tls_refuses_a_hub_without_a_certificate() {
    let (_dir, agent, hub) = mtls_mesh("{ca: ../pki/ca.pem}").await;
    eventually("the refused connection in the hub's ledger", || async {
        hub.ledger()
            .view()
            .iter()
            .any(|p| is_dialer(p) && p.peer == "east" && !p.connected && p.last_error.is_some())
    })
    .await;
    assert!(held(&agent, "east").is_empty(), "nothing reached the agent");
    hub.shutdown().await;
    agent.shutdown().await;
}

#[tokio::test]
async fn an_agent_lets_only_the_hubs_identity_push() {
    const HUB_TLS: &str = "{ca: ../pki/ca.pem, cert: ../pki/hub.pem, key: ../pki/hub-key.pem}";
    // The hub's certificate names meshhub.istio-system.svc: allowed.
    let (_dir, agent, hub) = mtls_mesh_allowing(HUB_TLS, Some(&["meshhub.istio-system.svc"])).await;
    eventually("the allowed hub's push to arrive", || async {
        held(&agent, "east") == ["bookinfo/reviews"]
    })
    .await;
    hub.shutdown().await;
    agent.shutdown().await;

    // Another identity only: the same hub (a trusted certificate) is refused.
    let (_dir, agent, hub) = mtls_mesh_allowing(HUB_TLS, Some(&["*.other.svc"])).await;
    eventually("the refusal in the hub's ledger", || async {
        hub.ledger().view().iter().any(|p| {
            is_dialer(p)
                && p.peer == "east"
                && p.last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("may not push"))
        })
    })
    .await;
    assert!(held(&agent, "east").is_empty(), "nothing reached the agent");
    hub.shutdown().await;
    agent.shutdown().await;
}

#[test]
fn agent_tls_settings_are_checked_before_serving() {
    let (dir, config) = tree();
    let https_without_tls = "  - name: east\n    agent:\n      address: https://localhost:9911\n";
    write_config(&config, https_without_tls);
    let args = |path: &Path| Args::parse_from(["meshhub", "--config", path.to_str().unwrap()]);
    let err = Config::from_args(args(&config)).unwrap_err().to_string();
    assert!(
        err.contains("clusters[0].agent.tls") && err.contains("tls.ca"),
        "{err}"
    );
    let missing_ca = "  - name: east\n    agent:\n      address: https://localhost:9911\n      tls: {ca: ../nowhere.pem}\n";
    write_config(&config, missing_ca);
    let err = Config::from_args(args(&config)).unwrap_err().to_string();
    assert!(
        err.contains("clusters[0].agent.tls") && err.contains("nowhere.pem"),
        "{err}"
    );
    drop(dir);
}

//! Remote clusters in-process over real gRPC on loopback: the hub dials
//! sink agents (the real agent library), reloads of the configuration file
//! touch only the cluster that changed, agents take pushes over mutual TLS
//! from the hub's identity only. (A NACK as `meshhubctl status` shows it:
//! `ctl/tests/it/status.rs`.)

use std::path::Path;

use clap::Parser as _;
use meshhub::app::Hub;
use meshhub::clusters::is_dialer;
use meshhub::config::{Args, Config};
use meshhub_e2e::inproc::{
    ANY_PORT, agent_config, dialer, hub_of_file, push, start_agent, tree, write_hub_config,
};
use meshhub_e2e::yaml;
use meshhub_mcp::authz::AllowList;
use meshhub_mcp::ledger::{PeerStatus, SyncState};
use meshhub_sink_agent::app::Agent;
use meshhub_sink_agent::config::{Config as AgentConfig, Mode, SinkTls};
use meshhub_testkit::objects::{VS, virtual_service as vs};
use meshhub_testkit::pki::Ca;
use meshhub_testkit::{eventually, within};

use crate::support::names;

/// A cluster entry of the hub's YAML with an agent at `addr`.
fn cluster(name: &str, selector: &str, addr: impl std::fmt::Display) -> String {
    yaml::cluster(name, selector, format!("http://{addr}"), "")
}

fn write_config(path: &Path, clusters: &str) {
    write_hub_config(path, clusters, "");
}

async fn east_agent(cluster: &str, data: &Path) -> Agent {
    start_agent(agent_config(cluster, data, push())).await
}

/// The names of the virtual services an agent serves locally.
fn held(agent: &Agent, cluster: &str) -> Vec<String> {
    names(agent.cache(), cluster)
}

/// The state of the virtual services on a dialer's stream.
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
    let east = east_agent("east", &dir.path().join("east")).await;
    let west = east_agent("west", &dir.path().join("west")).await;
    let east_c = cluster(
        "east",
        "    namespaces: [bookinfo]\n",
        east.sink_addr().unwrap(),
    );
    write_config(&config, &east_c);
    let hub = hub_of_file(&config).await;

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
    let status = within(
        "the bad reload reported",
        reload.wait_for(|s| s.last_error.is_some()),
    )
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
    within("the forced reload", reload.wait_for(|s| s.reloads > before))
        .await
        .unwrap();
    assert_eq!(dialer(&hub, "east").unwrap().id, east_before.id);

    assert!(hub.shutdown().await);
    east.shutdown().await;
    west.shutdown().await;
}

/// A CA, an agent certificate for localhost/127.0.0.1 and a hub client
/// certificate (for meshhub.istio-system.svc), as PEM files in `dir`.
fn pki(dir: &Path) {
    let ca = Ca::new("meshhub test root");
    ca.write(&dir.join("ca.pem"));
    ca.server(&["localhost", "127.0.0.1"])
        .write_pem(dir, "agent");
    ca.server(&["meshhub.istio-system.svc"])
        .write_pem(dir, "hub");
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
    let tls = SinkTls {
        cert: pki_dir.join("agent.pem"),
        key: pki_dir.join("agent-key.pem"),
        client_ca: Some(pki_dir.join("ca.pem")),
    };
    let mode = Mode::Push {
        listen: ANY_PORT.parse().unwrap(),
        tls: Some(tls),
    };
    let agent = start_agent(AgentConfig {
        sink_allowed_identities: allowed.map(|a| AllowList::parse(a).unwrap()),
        ..agent_config("east", &dir.path().join("east-data"), mode)
    })
    .await;
    let port = agent.sink_addr().expect("push mode").port();
    let cluster = yaml::cluster(
        "east",
        "",
        format!("https://localhost:{port}"),
        &format!("      tls: {hub_tls}\n"),
    );
    write_config(&config, &cluster);
    let hub = hub_of_file(&config).await;
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
    // The same identity reads the cluster's upward channel, on the same
    // port and TLS.
    let upward = meshhub::upward::peer_name("east");
    eventually("the hub's upward stream to east", || async {
        hub.ledger().view().iter().any(|p| {
            p.role == meshhub_mcp::ledger::Role::Sink
                && p.peer == upward
                && p.connected
                && p.collections
                    .get(meshhub_proto::upward::CLUSTER_STATUS)
                    .is_some_and(|c| c.acks > 0)
        })
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
    // Nor may it read the cluster's status.
    let upward = meshhub::upward::peer_name("east");
    eventually("the upward refusal in the hub's ledger", || async {
        hub.ledger().view().iter().any(|p| {
            p.peer == upward
                && p.last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("may not read this cluster's status"))
        })
    })
    .await;
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

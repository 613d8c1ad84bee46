//! Both directions with real components: three real kube-apiservers (a
//! primary and two remotes, `east` and `west`, with the MCS CRDs), a real
//! sink agent per remote reporting its cluster up to the hub (its store,
//! its consumers, what its istiod holds, its `ServiceExport`s), and a real
//! istiod 1.28 per remote reading its agent over `xds://`.
//!
//! Checked: a `ServiceExport` created in west produces a ServiceEntry
//! (`<svc>.<ns>.svc.clusterset.local`, endpoints west's gateway) in east's
//! istiod and not in west's; deleting the export removes it; an EnvoyFilter
//! istiod drops (unknown Envoy type; istiod ACKs anyway) shows as DROPPED
//! for the cluster in `/status`, `meshhubctl status` and `describe`; the
//! hub restarting and an agent's upward stream being cut lose nothing and
//! reconcile (an export deleted while the agent was down is withdrawn when
//! it is back). The export → ServiceEntry-in-istiod latency is printed.

mod hostile;
mod restarts;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use meshhub_e2e::istio::{ConfigSource, ISTIOD_START, Istiod, istiod_bin, tail};
use meshhub_e2e::kube::{ControlPlanes, apply_yaml, rbac_manifest};
use meshhub_e2e::mcs::{install_mcs_crds, service, service_export, unexport};
use meshhub_e2e::yaml::cluster;
use meshhub_e2e::*;
use meshhub_testkit::ports::free_addr;
use meshhub_testkit::{DEADLINE, eventually_blocking};
use serde_json::Value;

const EF: &str = "istio/networking/v1alpha3/envoyfilters";
const VS: &str = "istio/networking/v1alpha3/virtualservices";

/// An EnvoyFilter meshhub accepts but istiod's validation drops.
const UNKNOWN_TYPE_FILTER: &str = "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata:\n  name: unknown-type\n  namespace: bookinfo\nspec:\n  configPatches:\n  - applyTo: HTTP_FILTER\n    patch:\n      operation: INSERT_BEFORE\n      value:\n        name: example.bogus\n        typed_config:\n          '@type': type.googleapis.com/istio.bogus.v3.Bogus\n";

const REVIEWS_VS: &str = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews, namespace: bookinfo}\nspec:\n  hosts: [reviews.bookinfo.svc.cluster.local]\n  http:\n  - route:\n    - destination: {host: reviews.bookinfo.svc.cluster.local}\n";

/// One remote cluster: its agent's ports and flags, its istiod.
struct Remote {
    name: &'static str,
    ports: (SocketAddr, SocketAddr, SocketAddr),
    flags: Vec<String>,
    agent: Option<AgentProc>,
    istiod: Istiod,
}

impl Remote {
    fn start_agent(&mut self, dir: &Path, logs: &Path) {
        self.agent = Some(AgentProc::start_with(
            self.name,
            dir,
            logs,
            Some(self.ports),
            &self.flags,
        ));
    }

    fn stop_agent(&mut self) {
        if let Some(mut a) = self.agent.take() {
            a.proc.kill();
        }
    }

    fn service_entry(&self, name: &str) -> Option<Value> {
        self.istiod
            .config("ServiceEntry", "shop", &format!("{name}-clusterset"))
    }
}

fn hub_config(primary: &Path, east: SocketAddr, west: SocketAddr) -> String {
    format!(
        "sources:\n  - name: primary\n    kubernetes:\n      kubeconfig: {}\n      namespaces: [bookinfo]\nclusters:\n{}{}debounce:\n  quiet: 20ms\n  maxWait: 200ms\n",
        primary.display(),
        cluster("east", "", format!("http://{east}"), ""),
        cluster("west", "", format!("http://{west}"), ""),
    )
}

/// Waits for `check` (blocking), failing with the istiods' log tails.
fn until(what: &str, remotes: &[&Remote], check: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if check() {
            return start.elapsed();
        }
        if start.elapsed() > DEADLINE {
            let logs: Vec<String> = remotes
                .iter()
                .map(|r| format!("{}:\n{}", r.name, tail(&r.istiod.proc.stderr(), 15)))
                .collect();
            panic!("timed out waiting for {what}\n{}", logs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_reach_other_clusters_istiod_and_istiod_drops_show() {
    let _turn = turn(module_path!());
    let bin = istiod_bin();
    let planes = ControlPlanes::start_bare(&["primary", "east", "west"]).await;
    planes.install_istio_crds("primary", &[]).await;
    planes.namespace("primary", "bookinfo").await;
    for c in ["east", "west"] {
        planes.install_istio_crds(c, &[]).await;
        install_mcs_crds(&planes, c).await;
        planes.namespace(c, "istio-system").await;
        planes.namespace(c, "shop").await;
        // The agent reads exports as its ServiceAccount, bound by the RBAC
        // shipped in deploy/rbac/sink-agent.yaml.
        planes.namespace(c, "meshhub").await;
        apply_yaml(&planes.client(c).await, &rbac_manifest("sink-agent.yaml")).await;
    }
    let primary = planes.client("primary").await;
    let west_kube = planes.client("west").await;
    apply_yaml(&primary, REVIEWS_VS).await;
    apply_yaml(&primary, UNKNOWN_TYPE_FILTER).await;
    // The same Service exists in both remotes; only west exports it.
    for c in ["east", "west"] {
        apply_yaml(&planes.client(c).await, &service("shop", "cart")).await;
    }

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();

    // Per remote: the agent, told where istiod's debug port will be (chosen
    // now), then istiod reading the agent's ADS port.
    let mut remotes = Vec::new();
    for (name, gateway) in [("east", "192.0.2.10:15443"), ("west", "192.0.2.20:15443")] {
        let kubeconfig = planes.cluster(name).kubeconfig.clone();
        let agent_kubeconfig = planes
            .service_account_kubeconfig(name, "meshhub", "meshhub-agent")
            .await;
        let istiod_http = free_addr();
        let flags = [
            "--mcs",
            "--mcs-kubeconfig",
            &agent_kubeconfig.display().to_string(),
            "--mcs-gateways",
            gateway,
            "--istiod-debug-url",
            &format!("http://{istiod_http}"),
            "--istiod-check-interval",
            "300ms",
            "--report-interval",
            "200ms",
        ]
        .map(str::to_owned)
        .to_vec();
        let agent = AgentProc::start_with(name, dir, &logs, None, &flags);
        // Kept across the agent's restarts.
        let ports = (agent.sink, agent.grpc, agent.admin);
        // istiod exits when its xds:// source does not answer at start:
        // the agent first.
        let istiod = Istiod::spawn_at(
            &format!("istiod-{name}"),
            bin,
            &kubeconfig,
            ConfigSource::Xds(agent.grpc),
            dir,
            &logs,
            istiod_http.port(),
        );
        let r = Remote {
            name,
            ports,
            flags,
            agent: Some(agent),
            istiod,
        };
        remotes.push(r);
    }
    let config = dir.join("hub.yaml");
    std::fs::write(
        &config,
        hub_config(
            &planes.cluster("primary").kubeconfig,
            remotes[0].ports.0,
            remotes[1].ports.0,
        ),
    )
    .unwrap();
    let mut hub = tokio::task::block_in_place(|| HubProc::start("hub", &config, &logs));
    tokio::task::block_in_place(|| {
        for r in &mut remotes {
            r.istiod.wait_ready(ISTIOD_START);
        }
    });
    let (east, west) = (&remotes[0], &remotes[1]);
    tokio::task::block_in_place(|| {
        until("the VirtualService in both istiods", &[east, west], || {
            [east, west].iter().all(|r| {
                r.istiod
                    .config("VirtualService", "bookinfo", "reviews")
                    .is_some()
            })
        });
    });

    // 1. istiod drops the EnvoyFilter (and ACKs): DROPPED for both
    // clusters, with the reason, while the VirtualServices are SYNCED.
    let status = tokio::task::block_in_place(|| {
        eventually_blocking("east's EnvoyFilters DROPPED", || {
            let s = hub.status();
            let e = remote(&s, "east");
            (e["collections"][EF]["state"] == "DROPPED"
                && remote(&s, "west")["collections"][EF]["state"] == "DROPPED"
                && e["collections"][VS]["state"] == "SYNCED")
                .then_some(s)
        })
    });
    let e = remote(&status, "east");
    assert_eq!(e["dropped"][EF][0]["name"], "bookinfo/unknown-type", "{e}");
    assert!(
        e["dropped"][EF][0]["reason"]
            .as_str()
            .unwrap()
            .contains("/debug/configz"),
        "{e}"
    );
    assert_eq!(e["report"]["istiod"]["reachable"], true, "{e}");
    assert!(e["report"]["istiod"]["held"].as_u64().unwrap() >= 1, "{e}");
    assert!(
        e["report"]["consumers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["node_id"]
                .as_str()
                .is_some_and(|n| n.starts_with("sidecar~"))),
        "east's istiod is among the agent's consumers: {e}"
    );
    let admin = format!("http://{}", hub.admin);
    let (ok, out, err) = meshhubctl(&["status", "--admin", &admin]);
    assert!(ok.success(), "{err}");
    assert!(out.contains("HELD BY ISTIOD"), "{out}");
    assert!(out.contains("DROPPED"), "{out}");
    assert!(
        out.contains("istiod dropped bookinfo/unknown-type"),
        "{out}"
    );
    let (ok, out, err) = meshhubctl(&[
        "describe",
        "EnvoyFilter",
        "bookinfo/unknown-type",
        "--admin",
        &admin,
    ]);
    assert!(ok.success(), "{err}");
    assert!(out.contains("HELD BY ISTIOD"), "{out}");
    assert!(out.contains("DROPPED:"), "{out}");
    let (ok, out, _) = meshhubctl(&[
        "describe",
        "VirtualService",
        "bookinfo/reviews",
        "--admin",
        &admin,
    ]);
    assert!(ok.success());
    assert!(!out.contains("DROPPED"), "{out}");

    // 2. West exports cart: a ServiceEntry in east's istiod, not west's.
    let mut samples = Vec::new();
    for round in 0..5 {
        let started = Instant::now();
        apply_yaml(&west_kube, &service_export("shop", "cart")).await;
        let took = tokio::task::block_in_place(|| {
            until(
                "cart's ServiceEntry in east's istiod",
                &[east, west],
                || east.service_entry("cart").is_some(),
            );
            started.elapsed()
        });
        samples.push(took);
        let se = east.service_entry("cart").unwrap();
        assert_eq!(
            se["spec"]["hosts"][0], "cart.shop.svc.clusterset.local",
            "{se}"
        );
        assert_eq!(se["spec"]["endpoints"][0]["address"], "192.0.2.20", "{se}");
        assert_eq!(se["spec"]["endpoints"][0]["ports"]["http"], 15443, "{se}");
        assert_eq!(se["spec"]["ports"][0]["number"], 80, "{se}");
        assert!(
            se["metadata"]["annotations"]["meshhub.io/generated-from"]
                .as_str()
                .unwrap()
                .contains("ServiceExport west/shop/cart"),
            "{se}"
        );
        assert!(
            west.service_entry("cart").is_none(),
            "the only exporter does not receive its own export"
        );
        if round == 4 {
            break;
        }
        // 3. Deleting the export removes it.
        assert!(unexport(&west_kube, "shop", "cart").await);
        tokio::task::block_in_place(|| {
            until(
                "cart's ServiceEntry gone from east's istiod",
                &[east, west],
                || east.service_entry("cart").is_none(),
            );
        });
    }
    samples.sort();
    println!(
        "export -> ServiceEntry in the consuming istiod (west ServiceExport created -> east istiod /debug/configz, n={}, debounce 20ms/200ms): min {:.0} ms, median {:.0} ms, max {:.0} ms",
        samples.len(),
        samples[0].as_secs_f64() * 1e3,
        samples[samples.len() / 2].as_secs_f64() * 1e3,
        samples[samples.len() - 1].as_secs_f64() * 1e3,
    );
    let status = hub.status();
    let exports = &remote(&status, "west")["report"]["exports"];
    assert_eq!(exports[0]["name"], "cart", "{exports}");
    assert_eq!(exports[0]["gateways"][0], "192.0.2.20:15443", "{exports}");

    // 4. The hub restarts; meanwhile west exports orders. Nothing is lost:
    // cart stays, orders arrives, the drop is shown again.
    hub.proc.kill();
    apply_yaml(&west_kube, &service("shop", "orders")).await;
    apply_yaml(&west_kube, &service_export("shop", "orders")).await;
    hub = tokio::task::block_in_place(|| HubProc::start("hub", &config, &logs));
    tokio::task::block_in_place(|| {
        until(
            "orders in east's istiod after the hub's restart",
            &[east, west],
            || east.service_entry("orders").is_some(),
        );
    });
    assert!(
        east.service_entry("cart").is_some(),
        "cart survived the restart"
    );
    tokio::task::block_in_place(|| {
        eventually_blocking("DROPPED again after the restart", || {
            (remote(&hub.status(), "east")["collections"][EF]["state"] == "DROPPED").then_some(())
        })
    });

    // 5. West's upward stream is cut (its agent is down); an export
    // deleted meanwhile is withdrawn once the agent is back.
    remotes[1].stop_agent();
    tokio::task::block_in_place(|| {
        eventually_blocking("the hub sees west's upward stream down", || {
            (remote(&hub.status(), "west")["report"]["connected"] == false).then_some(())
        })
    });
    assert!(unexport(&west_kube, "shop", "orders").await);
    assert!(
        remotes[0].service_entry("orders").is_some(),
        "the last report stands while the stream is down"
    );
    remotes[1].start_agent(dir, &logs);
    let (east, west) = (&remotes[0], &remotes[1]);
    tokio::task::block_in_place(|| {
        until("orders withdrawn after west is back", &[east, west], || {
            east.service_entry("orders").is_none()
        });
    });
    assert!(
        east.service_entry("cart").is_some(),
        "cart is still exported"
    );
    drop(hub);
    drop(remotes);
}

/// Resident set size of a process (`VmRSS`), in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// The bench figure: the hub's memory per exported Service. A stand-in
/// for west's agent (the agent's own upward snapshot code, served by the
/// engine's `ResourceSource`) publishes 10,000 exports at once; the real
/// hub binary aggregates them into 10,000 ServiceEntries for east (each
/// validated, placed, snapshotted). The hub's RSS is read before and
/// after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a bench figure (about 3 minutes in a debug build): cargo test -p meshhub-e2e --test it upward::hub_memory -- --ignored --nocapture"]
async fn hub_memory_per_exported_service() {
    use std::sync::Arc;

    use meshhub_mcp::cache;
    use meshhub_mcp::group::SingleGroup;
    use meshhub_mcp::ledger::Ledger;
    use meshhub_mcp::source::SourceConfig;
    use meshhub_mcp::source::server::{Shared, SourceServer};
    use meshhub_proto::upward::{ClusterStatus, GatewayAddress, ServiceExport, ServicePort};

    const EXPORTS: usize = 10_000;
    const SE: &str = "istio/networking/v1alpha3/serviceentries";
    let _turn = turn(module_path!());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();

    let (writer, reader) = cache::new();
    let report = || ClusterStatus {
        cluster: "west".into(),
        ..Default::default()
    };
    writer.set(
        "west",
        Arc::new(meshhub_sink_agent::upward::snapshot("west", report(), &[])),
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let tasks = tokio_util::task::TaskTracker::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let west = listener.local_addr().unwrap();
    let service = SourceServer::new(Shared {
        cache: reader,
        groups: Arc::new(SingleGroup("west".into())),
        ledger: Ledger::new(),
        config: Arc::new(SourceConfig::default()),
        shutdown: stop.clone(),
        tasks: tasks.clone(),
    })
    .into_service(256 << 20);
    let server = tokio::spawn({
        let stop = stop.clone();
        async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    stop.cancelled_owned(),
                )
                .await
        }
    });
    // East's agent is not running: east only consumes.
    let east = free_addr();
    let config = dir.join("hub.yaml");
    let objects = dir.join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    std::fs::write(
        &config,
        meshhub_e2e::yaml::files_hub(
            objects.display(),
            &(cluster("east", "", format!("http://{east}"), "")
                + &cluster(
                    "west",
                    // Above the default cap of 1,000 exports per cluster.
                    &format!("    exports: {{maxServices: {EXPORTS}}}\n"),
                    format!("http://{west}"),
                    "",
                )),
            "",
        ),
    )
    .unwrap();
    let hub = tokio::task::block_in_place(|| HubProc::start("hub", &config, &logs));
    let before = rss(hub.proc.pid());

    let exports: Vec<ServiceExport> = (0..EXPORTS)
        .map(|i| ServiceExport {
            namespace: format!("ns-{}", i % 100),
            name: format!("svc-{i}"),
            r#type: "ClusterSetIP".into(),
            ports: vec![ServicePort {
                name: "http".into(),
                port: 80,
                protocol: "TCP".into(),
                app_protocol: String::new(),
            }],
            gateways: vec![GatewayAddress {
                address: "192.0.2.20".into(),
                port: 15443,
            }],
            created: None,
            problem: String::new(),
        })
        .collect();
    let started = Instant::now();
    writer.set(
        "west",
        Arc::new(meshhub_sink_agent::upward::snapshot(
            "west",
            report(),
            &exports,
        )),
    );
    tokio::task::block_in_place(|| {
        eventually_blocking("10,000 ServiceEntries in east's group", || {
            let s = hub.status();
            let n = s["groups"]
                .as_array()?
                .iter()
                .find(|g| g["name"] == "east")?["collections"][SE]["resources"]
                .as_u64()?;
            (n as usize == EXPORTS).then_some(())
        })
    });
    let took = started.elapsed();
    let after = rss(hub.proc.pid());
    let per = after.saturating_sub(before) as f64 / EXPORTS as f64;
    println!(
        "hub memory per exported service ({EXPORTS} exports from one cluster -> {EXPORTS} ServiceEntries for another, debug build): RSS {:.1} MiB -> {:.1} MiB, {:.2} KiB per export; all generated and published in {:.2} s",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        per / 1024.0,
        took.as_secs_f64(),
    );
    assert!(per < 64.0 * 1024.0, "{per} bytes per export");
    // The generated entries carry their origin.
    let (ok, out, err) = meshhubctl(&[
        "describe",
        "ServiceEntry",
        "ns-7/svc-7-clusterset",
        "--admin",
        &format!("http://{}", hub.admin),
        "-o",
        "json",
    ]);
    assert!(ok.success(), "{err}");
    assert!(out.contains("serviceexports"), "{out}");
    stop.cancel();
    let _ = server.await;
    drop(hub);
}

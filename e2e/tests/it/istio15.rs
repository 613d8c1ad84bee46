//! Istio 1.5's classic MCP programs against meshhub, built from Istio's Go
//! sources (`e2e/peers/istio.sh istio15`):
//!
//! * `mcpc` (Istio's MCP sink client, the code Pilot 1.5 used) subscribes to
//!   the hub's `ResourceSource`: every collection it asks for is answered,
//!   decoded by Istio 1.5's own gogo types and ACKed; a change reaches it.
//! * The hub dials Istio 1.5's `ResourceSink` server (`mcpsink15`): it
//!   receives the objects, and a change it refuses is NACKed and shows in the
//!   hub's ledger, while its other collections stay SYNCED.
//! * Galley 1.5 as the source: `meshhubctl watch` and a sink agent in pull
//!   mode subscribe to it and receive its files; the agent re-serves them.

use std::net::SocketAddr;
use std::path::Path;

use meshhub_e2e::istio::{Galley, McpSink15, Mcpc};
use meshhub_e2e::kube::ControlPlanes;
use meshhub_e2e::yaml::{cluster, files_hub};
use meshhub_e2e::*;
use meshhub_testkit::fixtures::write_atomic;
use meshhub_testkit::http::get_blocking;
use meshhub_testkit::objects::{VS, vs};
use meshhub_testkit::{DEADLINE, eventually_blocking};
use serde_json::Value;

const DR: &str = "istio/networking/v1alpha3/destinationrules";
const GW: &str = "istio/networking/v1alpha3/gateways";

fn dr(name: &str, host: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: {name}\n  namespace: bookinfo\nspec:\n  host: {host}\n  subsets:\n  - name: v1\n    labels: {{version: v1}}\n"
    )
}

fn gateway(name: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: {name}\n  namespace: bookinfo\nspec:\n  selector: {{istio: ingressgateway}}\n  servers:\n  - port: {{number: 80, name: http, protocol: HTTP}}\n    hosts: ['*']\n"
    )
}

fn write_objects(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    write_atomic(&dir.join("reviews-vs.yaml"), &vs("reviews", "reviews"));
    write_atomic(&dir.join("ratings-vs.yaml"), &vs("ratings", "ratings"));
    write_atomic(&dir.join("reviews-dr.yaml"), &dr("reviews", "reviews"));
    write_atomic(&dir.join("gateway.yaml"), &gateway("bookinfo-gateway"));
}

fn hub_config(objects: &Path, clusters: &[(&str, SocketAddr)]) -> String {
    let clusters: String = clusters
        .iter()
        .map(|(name, addr)| cluster(name, "", format!("http://{addr}"), ""))
        .collect();
    files_hub(objects.display(), &clusters, "")
}

/// The consumer row of the hub's `/status` whose node id is `id`.
fn consumer(status: &Value, id: &str) -> Option<Value> {
    status["consumers"]
        .as_array()?
        .iter()
        .find(|c| c["node_id"] == id && c["connected"] == true)
        .cloned()
}

/// The collections `mcpc` printed an apply for.
fn applied(out: &str) -> std::collections::BTreeSet<String> {
    out.lines()
        .filter_map(|l| l.strip_prefix("Incoming apply: "))
        .map(str::to_owned)
        .collect()
}

/// The test's directory: kept after the test (`i15dbg*` in the system's
/// temporary directory), the 1.5 programs' logs being the only account of
/// what they did.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("i15dbg")
        .disable_cleanup(true)
        .tempdir()
        .unwrap()
}

#[test]
fn mcpc_1_5_receives_every_collection_from_the_hub_and_acks_it() {
    let _turn = turn(module_path!());
    let tmp = scratch();
    let logs = tmp.path();
    let objects = tmp.path().join("objects");
    write_objects(&objects);
    let config = tmp.path().join("hub.yaml");
    write_atomic(&config, &hub_config(&objects, &[]));
    let hub = HubProc::start("hub", &config, logs);

    // Istio 1.5's sink client prints each apply; -output long prints each
    // object as Istio decoded it (its gogo types), body included.
    let mut mcpc = Mcpc::start(hub.grpc, "pilot-1-5", "long", logs);
    let out = mcpc.wait_for(DEADLINE, |out| {
        out.contains("\"reviews\"")
            && applied(out).contains(DR)
            && applied(out).contains(GW)
            && out.contains("bookinfo/bookinfo-gateway")
    });
    assert!(out.contains("bookinfo/reviews"), "{out}");
    assert!(out.contains("bookinfo/ratings"), "{out}");

    // Every collection mcpc asked for (Istio 1.5's Pilot collections: a
    // superset of what meshhub holds) was answered and ACKed: SYNCED, with
    // no NACK, in the hub's ledger.
    let row = eventually_blocking("mcpc ACKs every collection", || {
        let row = consumer(&hub.status(), "pilot-1-5")?;
        let cols = row["collections"].as_object()?;
        (cols.len() >= 10 && cols.values().all(|c| c["state"] == "SYNCED")).then_some(row)
    });
    let cols = row["collections"].as_object().unwrap();
    assert!(cols.contains_key(VS) && cols.contains_key(DR) && cols.contains_key(GW));
    assert!(
        cols.keys().any(|k| k.starts_with("istio/authentication/")),
        "mcpc subscribed to 1.5-only collections too: {:?}",
        cols.keys()
    );
    assert!(cols.values().all(|c| c["nacks"] == 0), "{row}");

    // A change reaches the 1.5 sink.
    write_atomic(
        &objects.join("reviews-vs.yaml"),
        &vs("reviews", "reviews-v2"),
    );
    mcpc.wait_for(DEADLINE, |out| out.contains("\"reviews-v2\""));
    eventually_blocking("mcpc ACKs the change", || {
        let s = hub.status();
        let row = consumer(&s, "pilot-1-5")?;
        let c = &row["collections"][VS];
        (c["state"] == "SYNCED" && c["acks"].as_u64() >= Some(2)).then_some(())
    });
}

#[test]
fn the_hub_dials_istio_1_5_sinks_and_records_their_nacks() {
    let _turn = turn(module_path!());
    let tmp = scratch();
    let logs = tmp.path();
    let objects = tmp.path().join("objects");
    write_objects(&objects);
    let collections = [VS, DR, GW];
    let east = McpSink15::start("sink-east", &collections, None, logs);
    // west's sink refuses any change holding bookinfo/ratings.
    let west = McpSink15::start("sink-west", &collections, Some("bookinfo/ratings"), logs);
    let config = tmp.path().join("hub.yaml");
    write_atomic(
        &config,
        &hub_config(&objects, &[("east", east.grpc), ("west", west.grpc)]),
    );
    let hub = HubProc::start("hub", &config, logs);

    // east holds everything, decoded by Istio 1.5's types.
    let state = eventually_blocking("east's 1.5 sink holds the objects", || {
        let s = east.state();
        (s[VS].as_array().map(Vec::len) == Some(2) && s[GW].as_array().map(Vec::len) == Some(1))
            .then_some(s)
    });
    let reviews = state[VS]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "bookinfo/reviews")
        .expect("reviews");
    assert_eq!(reviews["body"]["hosts"][0], "reviews", "{reviews}");
    assert_eq!(
        reviews["typeUrl"], "type.googleapis.com/istio.networking.v1alpha3.VirtualService",
        "{reviews}"
    );
    assert_eq!(state[DR][0]["body"]["host"], "reviews");
    eventually_blocking("east SYNCED", || {
        let s = hub.status();
        (synced(&s, "east", VS) && synced(&s, "east", DR) && synced(&s, "east", GW)).then_some(())
    });

    // west NACKs the virtual services (with Istio's sink's message) and
    // holds none of them; its other collections are ACKed.
    let nack = eventually_blocking("west NACKs virtual services", || {
        let s = hub.status();
        let c = remote(&s, "west")["collections"][VS].clone();
        (c["state"] == "NACKED" && synced(&s, "west", DR) && synced(&s, "west", GW)).then_some(c)
    });
    assert!(
        nack["nacked"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("mcpsink15 refuses bookinfo/ratings")),
        "{nack}"
    );
    assert!(west.state()[VS].is_null(), "{}", west.state());
    assert_eq!(west.state()[DR].as_array().map(Vec::len), Some(1));

    // Removing the refused object lets the next version through.
    std::fs::remove_file(objects.join("ratings-vs.yaml")).unwrap();
    eventually_blocking("west takes the next version", || {
        let s = hub.status();
        (synced(&s, "west", VS) && west.state()[VS].as_array().map(Vec::len) == Some(1))
            .then_some(())
    });
    eventually_blocking("east drops ratings", || {
        (east.state()[VS].as_array().map(Vec::len) == Some(1)).then_some(())
    });
}

/// Istio 1.5 apiVersions (Galley 1.5 knows no `v1`).
fn galley_objects(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let v1alpha3 =
        |text: String| text.replace("networking.istio.io/v1\n", "networking.istio.io/v1alpha3\n");
    write_atomic(
        &dir.join("reviews-vs.yaml"),
        &v1alpha3(vs("reviews", "reviews")),
    );
    write_atomic(
        &dir.join("reviews-dr.yaml"),
        &v1alpha3(dr("reviews", "reviews")),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn meshhubctl_and_a_pull_agent_subscribe_to_galley_1_5() {
    let _turn = turn(module_path!());
    // Galley needs a Kubernetes API even to serve files.
    let planes = ControlPlanes::start(&["primary"]).await;
    let tmp = scratch();
    let logs = tmp.path();
    let files = tmp.path().join("galley-files");
    galley_objects(&files);
    let kubeconfig = planes.cluster("primary").kubeconfig.clone();
    let galley = tokio::task::block_in_place(|| {
        Galley::start("galley", &files, &kubeconfig, 0, tmp.path(), logs)
    });
    let galley_url = format!("http://{}", galley.mcp);

    // meshhubctl subscribes as a sink and prints Galley's objects.
    let (status, stdout, stderr) = tokio::task::block_in_place(|| {
        eventually_blocking("meshhubctl gets Galley's virtual service", || {
            let r = meshhubctl(&[
                "watch",
                "--server",
                &galley_url,
                "--once",
                "-o",
                "json",
                "-c",
                VS,
            ]);
            (r.0.success() && r.1.contains("\"reviews\"")).then_some(r)
        })
    });
    assert!(status.success(), "{stderr}");
    let vs_line: Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["metadata"]["name"] == "reviews")
        .unwrap_or_else(|| panic!("no reviews in {stdout}"));
    assert_eq!(vs_line["kind"], "VirtualService", "{vs_line}");
    assert_eq!(vs_line["spec"]["hosts"][0], "reviews", "{vs_line}");

    // A sink agent in pull mode takes Galley as its hub, stores what it
    // receives and re-serves it.
    let data = tmp.path().join("agent-data");
    let args: Vec<String> = [
        "--cluster",
        "east",
        "--mode",
        "pull",
        "--hub-url",
        &galley_url,
        "--data-dir",
        &data.display().to_string(),
        "--grpc-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--collections",
        &format!("{VS},{DR}"),
        "--shutdown-grace",
        "2s",
    ]
    .map(str::to_owned)
    .to_vec();
    let mut agent = Proc::spawn("agent-east", "meshhub-sink-agent", &args, logs);
    let fields = tokio::task::block_in_place(|| agent.wait_log("meshhub-sink-agent started", 0));
    let grpc = fields["grpc.addr"].as_str().unwrap().to_owned();
    let admin: SocketAddr = fields["admin.addr"].as_str().unwrap().parse().unwrap();
    tokio::task::block_in_place(|| {
        eventually_blocking("the agent serves Galley's state", || {
            let (code, body) = get_blocking(admin, "/status")?;
            let s: Value = serde_json::from_str(&body).ok()?;
            (code == 200
                && s["store"]["collections"][VS]["served_version"].is_string()
                && s["store"]["collections"][DR]["served_version"].is_string())
            .then_some(())
        })
    });
    let (status, stdout, stderr) = tokio::task::block_in_place(|| {
        meshhubctl(&[
            "watch",
            "--server",
            &format!("http://{grpc}"),
            "--once",
            "-o",
            "json",
            "-c",
            DR,
        ])
    });
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("\"host\":\"reviews\""), "{stdout}");

    // A change in Galley's files reaches the agent.
    let v1alpha3 = vs("reviews", "reviews-v2")
        .replace("networking.istio.io/v1\n", "networking.istio.io/v1alpha3\n");
    write_atomic(&files.join("reviews-vs.yaml"), &v1alpha3);
    // Galley 1.5 re-reads its files on SIGUSR1 (or with --watchConfigFiles).
    galley.proc.signal("USR1");
    tokio::task::block_in_place(|| {
        eventually_blocking("the agent re-serves Galley's change", || {
            let (ok, out, _) = meshhubctl(&[
                "watch",
                "--server",
                &format!("http://{grpc}"),
                "--once",
                "-o",
                "json",
                "-c",
                VS,
            ]);
            (ok.success() && out.contains("reviews-v2")).then_some(())
        })
    });
}

/// The hub's `mcp` source with Galley 1.5 as the upstream, beside a file
/// source: Galley's objects are served with the hub's own; a collection
/// Galley 1.5 does not serve (it ends the stream with INVALID_ARGUMENT)
/// never stops the others; a change in Galley arrives; while Galley is
/// down the hub keeps its objects and says so; after Galley restarts, its
/// full state reconciles what changed meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn the_hub_aggregates_galley_1_5_through_an_mcp_source() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start(&["primary"]).await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let files = dir.join("galley-files");
    galley_objects(&files);
    let kubeconfig = planes.cluster("primary").kubeconfig.clone();
    let local = dir.join("local");
    std::fs::create_dir_all(&local).unwrap();
    write_atomic(&local.join("ratings-vs.yaml"), &vs("ratings", "ratings"));

    tokio::task::block_in_place(|| {
        let mut galley = Galley::start("galley", &files, &kubeconfig, 0, dir, dir);
        let config = dir.join("hub.yaml");
        // Default collections: every kind meshhub knows, several of which
        // Galley 1.5 does not serve.
        write_atomic(
            &config,
            &format!(
                "sources:\n  - name: local\n    file: {{path: {}}}\n  - name: upstream\n    mcp:\n      address: http://{}\n      reconnect: {{initial: 100ms, max: 500ms}}\ndebounce:\n  quiet: 20ms\n  maxWait: 200ms\n",
                local.display(),
                galley.mcp
            ),
        );
        let hub = HubProc::start("hub", &config, dir);
        let hub_url = format!("http://{}", hub.grpc);
        let watch = |collection: &str| -> Vec<Value> {
            let (status, out, err) = meshhubctl(&[
                "watch", "--server", &hub_url, "--once", "-o", "json", "-c", collection,
            ]);
            assert!(status.success(), "{err}");
            out.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect()
        };
        let host_of = |objects: &[Value], name: &str| -> Option<String> {
            objects
                .iter()
                .find(|o| o["metadata"]["name"] == name)
                .and_then(|o| o["spec"]["hosts"][0].as_str().map(str::to_owned))
        };

        // Galley's objects and the local file's, served together.
        let objects = eventually_blocking("Galley's and the file's objects on the hub", || {
            let o = watch(VS);
            (host_of(&o, "reviews").is_some() && host_of(&o, "ratings").is_some()).then_some(o)
        });
        assert_eq!(host_of(&objects, "reviews").as_deref(), Some("reviews"));
        let drs = watch(DR);
        assert!(
            drs.iter().any(|o| o["spec"]["host"] == "reviews"),
            "{drs:?}"
        );
        let upstream = |status: &Value| -> Value {
            status["sources"]
                .as_array()
                .and_then(|s| s.iter().find(|s| s["name"] == "upstream"))
                .cloned()
                .unwrap_or(Value::Null)
        };
        let src = upstream(&hub.status());
        assert_eq!(src["synced"], true, "{src}");

        // A change in Galley reaches the hub.
        let v1alpha3 = |text: String| {
            text.replace("networking.istio.io/v1\n", "networking.istio.io/v1alpha3\n")
        };
        write_atomic(
            &files.join("reviews-vs.yaml"),
            &v1alpha3(vs("reviews", "reviews-v2")),
        );
        galley.proc.signal("USR1");
        eventually_blocking("Galley's change on the hub", || {
            (host_of(&watch(VS), "reviews").as_deref() == Some("reviews-v2")).then_some(())
        });

        // Galley down: the hub keeps serving its objects and reports it.
        let port = galley.mcp.port();
        galley.proc.kill();
        let problem = eventually_blocking("the hub reports the lost upstream", || {
            let src = upstream(&hub.status());
            src["problems"].as_array().and_then(|p| {
                p.iter()
                    .filter_map(Value::as_str)
                    .find(|p| p.starts_with("disconnected from"))
                    .map(str::to_owned)
            })
        });
        assert!(problem.contains(&galley.mcp.to_string()), "{problem}");
        assert_eq!(
            host_of(&watch(VS), "reviews").as_deref(),
            Some("reviews-v2")
        );

        // Meanwhile the file changes; Galley restarts on the same port and
        // its full state reconciles: the deleted DestinationRule goes.
        std::fs::remove_file(files.join("reviews-dr.yaml")).unwrap();
        let galley = Galley::start("galley", &files, &kubeconfig, port, dir, dir);
        eventually_blocking("the hub reconciles after Galley's restart", || {
            let drs = watch(DR);
            let src = upstream(&hub.status());
            let healthy = src["problems"].as_array().is_none_or(|p| {
                !p.iter()
                    .any(|p| p.as_str().is_some_and(|p| p.starts_with("disconnected")))
            });
            (healthy && !drs.iter().any(|o| o["metadata"]["name"] == "reviews")).then_some(())
        });
        assert_eq!(host_of(&watch(VS), "ratings").as_deref(), Some("ratings"));
        drop(galley);
    });
}

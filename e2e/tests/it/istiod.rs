//! A real istiod (`pilot-discovery` of Istio 1.28, built from its Go module
//! by `e2e/peers/istio.sh istiod`) consuming meshhub over MCP-over-xDS
//! (`meshConfig.configSources: [{address: xds://…}]`), as users run it.
//! istiod needs a Kubernetes API server even then, so it runs against a
//! harness kube-apiserver with the Istio CRDs.
//!
//! Checked from istiod's own `/debug/configz`: objects that exist only in
//! meshhub reach istiod with their content; an edit propagates; a deletion
//! removes the object; an object istiod's validation rejects is left out by
//! istiod, which logs it and still ACKs (istiod never NACKs config), so
//! meshhub's ledger shows SYNCED. The same with istiod pointed at a sink
//! agent's ADS (the agent re-serves what the hub pushed). The type URLs
//! istiod subscribed with are asserted and printed.

use std::path::Path;
use std::time::Instant;

use meshhub_e2e::istio::{Istiod, istiod_1_23_bin, istiod_bin, istiod_row, tail, until_istiod};
use meshhub_e2e::kube::ControlPlanes;
use meshhub_e2e::*;
use meshhub_testkit::eventually_blocking;
use meshhub_testkit::fixtures::write_atomic;
use serde_json::Value;

fn dr(name: &str, host: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: {name}\n  namespace: bookinfo\nspec:\n  host: {host}\n  trafficPolicy:\n    tls: {{mode: ISTIO_MUTUAL}}\n  subsets:\n  - name: v1\n    labels: {{version: v1}}\n"
    )
}

fn gateway(name: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: {name}\n  namespace: bookinfo\nspec:\n  selector: {{istio: ingressgateway}}\n  servers:\n  - port: {{number: 8080, name: http, protocol: HTTP}}\n    hosts: ['bookinfo.example.com']\n"
    )
}

fn weighted_vs(v1: u32, v2: u32) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: reviews\n  namespace: bookinfo\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {{host: reviews, subset: v1}}\n      weight: {v1}\n    - destination: {{host: reviews, subset: v2}}\n      weight: {v2}\n"
    )
}

/// An EnvoyFilter meshhub accepts but istiod's validation rejects: the
/// patch names a type in one of Istio's own packages that does not exist.
/// meshhub decodes patch values against Envoy's types as istiod does, but
/// passes the types of Istio's own packages undecoded (docs/validation.md,
/// accepted differences).
const UNKNOWN_TYPE_FILTER: &str = "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata:\n  name: unknown-type\n  namespace: bookinfo\nspec:\n  configPatches:\n  - applyTo: HTTP_FILTER\n    patch:\n      operation: INSERT_BEFORE\n      value:\n        name: example.bogus\n        typed_config:\n          '@type': type.googleapis.com/istio.bogus.v3.Bogus\n";

const EF: &str = "istio/networking/v1alpha3/envoyfilters";

fn write_objects(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    write_atomic(&dir.join("reviews-vs.yaml"), &weighted_vs(90, 10));
    write_atomic(
        &dir.join("reviews-dr.yaml"),
        &dr("reviews", "reviews.bookinfo.svc.cluster.local"),
    );
    write_atomic(&dir.join("ratings-dr.yaml"), &dr("ratings", "ratings"));
    write_atomic(&dir.join("gateway.yaml"), &gateway("bookinfo-gateway"));
    write_atomic(&dir.join("filter.yaml"), UNKNOWN_TYPE_FILTER);
}

/// The weights of the `reviews` VirtualService as istiod holds it.
fn weights(istiod: &Istiod) -> Option<Vec<u64>> {
    let vs = istiod.config("VirtualService", "bookinfo", "reviews")?;
    vs["spec"]["http"][0]["route"]
        .as_array()?
        .iter()
        .map(|r| r["weight"].as_u64())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn istiod_consumes_the_hub_and_an_agent_over_mcp_over_xds() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start(&["primary"]).await;
    planes.install_istio_crds("primary", &[]).await;
    planes.namespace("primary", "istio-system").await;
    let kubeconfig = planes.cluster("primary").kubeconfig.clone();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let logs = dir;
    let objects = dir.join("objects");
    write_objects(&objects);

    tokio::task::block_in_place(|| {
        // The hub pushes cluster east (namespace bookinfo) to an agent.
        let agent = AgentProc::start("east", dir, logs, None);
        let config = dir.join("hub.yaml");
        write_atomic(
            &config,
            &format!(
                "sources:\n  - name: files\n    file: {{path: {}}}\nclusters:\n  - name: east\n    namespaces: [bookinfo]\n    agent:\n      address: http://{}\n      reconnect: {{initial: 100ms, max: 1s}}\ndebounce:\n  quiet: 20ms\n  maxWait: 200ms\n",
                objects.display(),
                agent.sink
            ),
        );
        let hub = HubProc::start("hub", &config, logs);

        // One istiod on the hub's ADS, one on the agent's.
        let bin = istiod_bin();
        let on_hub = Istiod::start("istiod-hub", bin, &kubeconfig, hub.grpc, dir, logs);
        let on_agent = Istiod::start("istiod-agent", bin, &kubeconfig, agent.grpc, dir, logs);

        for istiod in [&on_hub, &on_agent] {
            until_istiod(istiod, "meshhub's objects in istiod", |i| {
                weights(i) == Some(vec![90, 10])
                    && i.config("DestinationRule", "bookinfo", "reviews").is_some()
                    && i.config("Gateway", "bookinfo", "bookinfo-gateway")
                        .is_some()
            });
            let dr = istiod
                .config("DestinationRule", "bookinfo", "reviews")
                .unwrap();
            assert_eq!(
                dr["spec"]["host"], "reviews.bookinfo.svc.cluster.local",
                "{dr}"
            );
            assert_eq!(
                dr["spec"]["trafficPolicy"]["tls"]["mode"], "ISTIO_MUTUAL",
                "{dr}"
            );
            assert_eq!(dr["spec"]["subsets"][0]["labels"]["version"], "v1", "{dr}");
            let gw = istiod
                .config("Gateway", "bookinfo", "bookinfo-gateway")
                .unwrap();
            assert_eq!(gw["spec"]["servers"][0]["hosts"][0], "bookinfo.example.com");
            assert_eq!(gw["spec"]["servers"][0]["port"]["number"], 8080);
            assert!(
                istiod
                    .config("EnvoyFilter", "bookinfo", "unknown-type")
                    .is_none(),
                "istiod rejected the EnvoyFilter, so it must not hold it"
            );
            // istiod logs the object it dropped...
            let log = eventually_blocking("istiod logs the rejected EnvoyFilter", || {
                let log = istiod.proc.stderr() + &istiod.proc.stdout();
                log.contains("Error adding a new resource to the store")
                    .then_some(log)
            });
            assert!(
                log.contains("referenced type unknown"),
                "{}",
                tail(&log, 20)
            );
        }

        // ...and ACKs: meshhub's ledger shows every type SYNCED, the
        // EnvoyFilter's too, with no NACK. Record the type URLs istiod
        // subscribed with (GVK strings, `v1` since Istio 1.24).
        let row = eventually_blocking("istiod ACKs every type on the hub", || {
            let row = istiod_row(&hub.status(), "istiod-hub")?;
            let cols = row["collections"].as_object()?;
            (cols.len() >= 10 && cols.values().all(|c| c["state"] == "SYNCED")).then_some(row)
        });
        let types: Vec<&String> = row["collections"].as_object().unwrap().keys().collect();
        println!("istiod 1.28 subscribed with: {types:?}");
        for t in [
            "networking.istio.io/v1/VirtualService",
            "networking.istio.io/v1/DestinationRule",
            "networking.istio.io/v1/Gateway",
            "networking.istio.io/v1alpha3/EnvoyFilter",
            "security.istio.io/v1/AuthorizationPolicy",
        ] {
            assert!(types.iter().any(|k| *k == t), "{t} not in {types:?}");
        }
        assert!(
            !types.iter().any(|k| k.contains("MeshConfig")),
            "MeshConfig is not answered, so it is not in the ledger: {types:?}"
        );
        assert!(
            row["collections"]
                .as_object()
                .unwrap()
                .values()
                .all(|c| c["nacks"] == 0),
            "{row}"
        );
        assert_eq!(
            row["collections"]["networking.istio.io/v1alpha3/EnvoyFilter"]["state"], "SYNCED",
            "istiod ACKs the response holding the object it rejected: {row}"
        );
        assert!(group_version(&hub.status(), "default", EF).is_some());

        // An edit propagates to both (through the agent too), timed.
        let edited = Instant::now();
        write_atomic(&objects.join("reviews-vs.yaml"), &weighted_vs(20, 80));
        let to_hub = until_istiod(&on_hub, "the edit in istiod (hub)", |i| {
            weights(i) == Some(vec![20, 80])
        });
        until_istiod(&on_agent, "the edit in istiod (agent)", |i| {
            weights(i) == Some(vec![20, 80])
        });
        let to_agent = edited.elapsed();

        // A deletion removes the object from both.
        let deleted = Instant::now();
        std::fs::remove_file(objects.join("gateway.yaml")).unwrap();
        for i in [&on_hub, &on_agent] {
            until_istiod(i, "the deletion in istiod", |i| {
                i.config("Gateway", "bookinfo", "bookinfo-gateway")
                    .is_none()
                    && i.config("VirtualService", "bookinfo", "reviews").is_some()
            });
        }
        println!(
            "file edit -> istiod: {} ms via the hub, {} ms via hub -> agent; deletion -> both: {} ms",
            to_hub.as_millis(),
            to_agent.as_millis(),
            deleted.elapsed().as_millis()
        );

        // Round trip: istiod serves what it holds to `GENERATOR=api` clients
        // (its "api" generator, reference §3.8); `meshhubctl watch --ads`
        // subscribes as istiod itself does and reads meshhub's object back
        // from istiod, SotW and Delta.
        let istiod_url = format!("http://{}", on_hub.grpc);
        for delta in [false, true] {
            let mut args = vec![
                "watch",
                "--ads",
                "--server",
                &istiod_url,
                "--once",
                "-o",
                "json",
            ];
            if delta {
                args.push("--delta");
            }
            args.extend(["-c", "networking.istio.io/v1/VirtualService"]);
            let (status, out, err) = meshhubctl(&args);
            assert!(status.success(), "delta={delta}: {err}");
            let vs = out
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|o| o["metadata"]["name"] == "reviews")
                .unwrap_or_else(|| panic!("delta={delta}: no reviews in {out}\n{err}"));
            assert_eq!(vs["spec"]["http"][0]["route"][1]["weight"], 80, "{vs}");
        }

        // The agent's istiod is a consumer of the agent, ACKing too.
        eventually_blocking("istiod ACKs on the agent", || {
            let s = agent.status();
            let row = istiod_row(&s, "istiod-agent")?;
            let vs = &row["collections"]["networking.istio.io/v1/VirtualService"];
            (vs["state"] == "SYNCED").then_some(())
        });
    });
}

/// Istio 1.23, the last release whose istiod subscribes with the old GVK
/// strings (`networking.istio.io/v1alpha3/VirtualService`, `security.istio.io/
/// v1beta1/…`): meshhub answers those type URLs from the same collections.
#[tokio::test(flavor = "multi_thread")]
async fn istiod_1_23_consumes_the_hub_with_v1alpha3_type_urls() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start(&["primary"]).await;
    planes.install_istio_crds("primary", &[]).await;
    planes.namespace("primary", "istio-system").await;
    let kubeconfig = planes.cluster("primary").kubeconfig.clone();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let objects = dir.join("objects");
    write_objects(&objects);
    write_atomic(
        &objects.join("peer-authn.yaml"),
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata:\n  name: strict\n  namespace: bookinfo\nspec:\n  mtls: {mode: STRICT}\n",
    );

    tokio::task::block_in_place(|| {
        let config = dir.join("hub.yaml");
        write_atomic(
            &config,
            &format!(
                "sources:\n  - name: files\n    file: {{path: {}}}\ndebounce:\n  quiet: 20ms\n  maxWait: 200ms\n",
                objects.display()
            ),
        );
        let hub = HubProc::start("hub", &config, dir);
        let istiod = Istiod::start(
            "istiod-1-23",
            istiod_1_23_bin(),
            &kubeconfig,
            hub.grpc,
            dir,
            dir,
        );
        until_istiod(&istiod, "meshhub's objects in istiod 1.23", |i| {
            weights(i) == Some(vec![90, 10])
                && i.config("Gateway", "bookinfo", "bookinfo-gateway")
                    .is_some()
                && i.config("PeerAuthentication", "bookinfo", "strict")
                    .is_some()
        });
        let pa = istiod
            .config("PeerAuthentication", "bookinfo", "strict")
            .unwrap();
        assert_eq!(pa["spec"]["mtls"]["mode"], "STRICT", "{pa}");

        let row = eventually_blocking("istiod 1.23 ACKs every type", || {
            let row = istiod_row(&hub.status(), "istiod-1-23")?;
            let cols = row["collections"].as_object()?;
            (cols.len() >= 10 && cols.values().all(|c| c["state"] == "SYNCED")).then_some(row)
        });
        let types: Vec<&String> = row["collections"].as_object().unwrap().keys().collect();
        println!("istiod 1.23 subscribed with: {types:?}");
        for t in [
            "networking.istio.io/v1alpha3/VirtualService",
            "networking.istio.io/v1alpha3/DestinationRule",
            "networking.istio.io/v1alpha3/Gateway",
            "security.istio.io/v1beta1/PeerAuthentication",
        ] {
            assert!(types.iter().any(|k| *k == t), "{t} not in {types:?}");
        }
        assert!(
            !types
                .iter()
                .any(|k| k.starts_with("networking.istio.io/v1/")),
            "{types:?}"
        );

        write_atomic(&objects.join("reviews-vs.yaml"), &weighted_vs(50, 50));
        until_istiod(&istiod, "the edit in istiod 1.23", |i| {
            weights(i) == Some(vec![50, 50])
        });
        std::fs::remove_file(objects.join("gateway.yaml")).unwrap();
        until_istiod(&istiod, "the deletion in istiod 1.23", |i| {
            i.config("Gateway", "bookinfo", "bookinfo-gateway")
                .is_none()
        });
    });
}

//! Version skew with real istiods (issue 36): one remote cluster runs
//! istiod 1.28.3, one istiod 1.23.2, each consuming its sink agent over
//! MCP-over-xDS; each agent reads its istiod's release from istiod's own
//! `/version` (its monitoring port) and reports it up.
//!
//! A DestinationRule with `trafficPolicy.loadBalancer.warmup` (Istio 1.24's)
//! reaches the 1.28.3 cluster, whose istiod holds the field; the hub flags
//! it for the 1.23.2 cluster (MH0002, naming the release) and, with
//! `analysis.holdBack: [MH0002]`, holds it back there. The proof that the
//! cut is real: an istiod 1.23.2 fed the same object by a hub without the
//! check holds the DestinationRule without the field (its `/debug/configz`),
//! having ACKed it.
//!
//! Then the applier: an agent applying into an API server with Istio
//! 1.23's CRDs is refused the field (strict field validation) and NACKs
//! naming it, instead of the API server pruning it silently; it reports
//! the cluster's Istio CRDs, the DestinationRule's as knowing 1.23.

use std::net::SocketAddr;
use std::path::Path;

use meshhub_e2e::istio::{
    ConfigSource, ISTIOD_START, Istiod, istio_1_23_crds, istiod_1_23_bin, istiod_bin,
};
use meshhub_e2e::kube::ControlPlanes;
use meshhub_e2e::*;
use meshhub_testkit::eventually_blocking;
use meshhub_testkit::fixtures::write_atomic;
use meshhub_testkit::ports::free_addr;
use serde_json::Value;

const GOOD: &str = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: ratings, namespace: bookinfo}\nspec:\n  host: ratings.bookinfo.svc.cluster.local\n  trafficPolicy:\n    loadBalancer: {simple: ROUND_ROBIN}\n";

/// The DestinationRule using a field Istio 1.24 added.
const WARMUP: &str = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: reviews, namespace: bookinfo}\nspec:\n  host: reviews.bookinfo.svc.cluster.local\n  trafficPolicy:\n    loadBalancer:\n      simple: LEAST_REQUEST\n      warmup: {duration: 30s}\n";

const DR: &str = "istio/networking/v1alpha3/destinationrules";

/// A sink agent for `cluster` and its istiod (`bin`), the agent reading
/// the istiod's `/version`. istiod dials the agent, and the agent must
/// know istiod's monitoring address when it starts: the agent's ports are
/// chosen first, istiod is spawned, then the agent starts, then istiod is
/// waited for.
fn cluster_with_istiod(
    cluster: &str,
    bin: &Path,
    kubeconfig: &Path,
    dir: &Path,
) -> (AgentProc, Istiod) {
    let ports: (SocketAddr, SocketAddr, SocketAddr) = (free_addr(), free_addr(), free_addr());
    let mut istiod = Istiod::spawn(
        &format!("istiod-{cluster}"),
        bin,
        kubeconfig,
        ConfigSource::Xds(ports.1),
        dir,
        dir,
    );
    let monitoring = istiod.monitoring;
    let agent = AgentProc::start_with(
        cluster,
        dir,
        dir,
        Some(ports),
        &[
            "--istiod-version-url".to_owned(),
            format!("http://{monitoring}"),
            "--istiod-check-interval".to_owned(),
            "200ms".to_owned(),
            "--report-interval".to_owned(),
            "200ms".to_owned(),
        ],
    );
    istiod.wait_ready(ISTIOD_START);
    assert_eq!(
        istiod.monitoring, monitoring,
        "istiod {cluster} was started again on other ports: its agent reads the old one"
    );
    (agent, istiod)
}

fn analysis<'a>(status: &'a Value, cluster: &str) -> &'a Value {
    status["analysis"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["cluster"] == cluster))
        .unwrap_or(&Value::Null)
}

fn mh0002(status: &Value, cluster: &str) -> Vec<String> {
    analysis(status, cluster)["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["code"] == "MH0002")
        .map(|m| format!("{} {} {}", m["origin"], m["path"], m["message"]))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_field_the_older_istiod_lacks_reaches_the_newer_and_is_held_from_the_older() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start(&["primary"]).await;
    planes.install_istio_crds("primary", &[]).await;
    planes.namespace("primary", "istio-system").await;
    let kubeconfig = planes.cluster("primary").kubeconfig.clone();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let objects = dir.join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    write_atomic(&objects.join("ratings.yaml"), GOOD);

    tokio::task::block_in_place(|| {
        let (east, east_istiod) = cluster_with_istiod("east", istiod_bin(), &kubeconfig, dir);
        let (west, west_istiod) = cluster_with_istiod("west", istiod_1_23_bin(), &kubeconfig, dir);
        let config = dir.join("hub.yaml");
        write_atomic(
            &config,
            &format!(
                "sources:\n  - name: files\n    file: {{path: {}}}\nclusters:\n  - name: east\n    namespaces: [bookinfo]\n    agent:\n      address: http://{}\n      reconnect: {{initial: 100ms, max: 1s}}\n  - name: west\n    namespaces: [bookinfo]\n    agent:\n      address: http://{}\n      reconnect: {{initial: 100ms, max: 1s}}\nanalysis:\n  holdBack: [MH0002]\ndebounce:\n  quiet: 20ms\n  maxWait: 200ms\n",
                objects.display(),
                east.sink,
                west.sink
            ),
        );
        let hub = HubProc::start("hub", &config, dir);

        // Each cluster's release, from its own istiod, on /status and in
        // `meshhubctl status`'s ISTIO column.
        eventually_blocking("both clusters' Istio releases reported", || {
            let s = hub.status();
            let release = |c: &str| {
                remote(&s, c)["report"]["istio"]["istiods"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find_map(|i| i["version"].as_str().map(str::to_owned))
            };
            (release("east").as_deref() == Some("1.28.3")
                && release("west").as_deref() == Some("1.23.2"))
            .then_some(())
        });
        let admin = format!("http://{}", hub.admin);
        let (ok, out, err) = meshhubctl(&["status", "--admin", &admin]);
        assert!(ok.success(), "{err}");
        println!("{out}");
        let head = out.lines().next().unwrap_or_default();
        assert!(head.contains("ISTIO"), "{out}");
        assert!(
            out.lines()
                .any(|l| l.starts_with("east") && l.contains("1.28.3")),
            "{out}"
        );
        assert!(
            out.lines()
                .any(|l| l.starts_with("west") && l.contains("1.23.2")),
            "{out}"
        );
        // The good object reached both istiods.
        for i in [&east_istiod, &west_istiod] {
            eventually_blocking("ratings in istiod", || {
                i.config("DestinationRule", "bookinfo", "ratings")
            });
        }
        let west_before =
            eventually_blocking("west serves destinationrules", || west.served_version(DR));

        // The field only 1.24+ knows: east's istiod holds it; west is
        // flagged and held back (its agent keeps serving the last version).
        write_atomic(&objects.join("reviews.yaml"), WARMUP);
        let dr = eventually_blocking("east's istiod holds reviews with warmup", || {
            east_istiod
                .config("DestinationRule", "bookinfo", "reviews")
                .filter(|dr| dr["spec"]["trafficPolicy"]["loadBalancer"]["warmup"].is_object())
        });
        println!("istiod 1.28.3 holds: {}", dr["spec"]["trafficPolicy"]);
        let s = eventually_blocking("west held back by MH0002", || {
            let s = hub.status();
            (analysis(&s, "west")["heldBack"]["codes"][0] == "MH0002").then_some(s)
        });
        let flagged = mh0002(&s, "west");
        assert_eq!(
            flagged,
            [
                "\"DestinationRule bookinfo/reviews\" \"spec.trafficPolicy.loadBalancer.warmup\" \"needs Istio 1.24; cluster west runs 1.23.2\""
            ],
            "{s}"
        );
        assert!(mh0002(&s, "east").is_empty(), "{s}");
        assert!(analysis(&s, "east")["heldBack"].is_null(), "{s}");
        assert_eq!(
            west.served_version(DR),
            Some(west_before),
            "west keeps its version"
        );
        assert!(
            west_istiod
                .config("DestinationRule", "bookinfo", "reviews")
                .is_none(),
            "west's istiod never received it"
        );

        // Without the check: istiod 1.23.2 fed by a hub that does not hold
        // back (the default: MH0002 only warns) takes the object, ACKs it,
        // and drops the field.
        let plain = dir.join("plain.yaml");
        write_atomic(
            &plain,
            &format!(
                "sources:\n  - name: files\n    file: {{path: {}}}\ndebounce:\n  quiet: 20ms\n  maxWait: 200ms\n",
                objects.display()
            ),
        );
        let unchecked = HubProc::start("hub-unchecked", &plain, dir);
        let old = Istiod::start(
            "istiod-1-23-unchecked",
            istiod_1_23_bin(),
            &kubeconfig,
            unchecked.grpc,
            dir,
            dir,
        );
        let cut = eventually_blocking("istiod 1.23.2 holds reviews (unchecked)", || {
            old.config("DestinationRule", "bookinfo", "reviews")
        });
        println!("istiod 1.23.2 holds: {}", cut["spec"]["trafficPolicy"]);
        assert_eq!(
            cut["spec"]["trafficPolicy"]["loadBalancer"]["simple"], "LEAST_REQUEST",
            "{cut}"
        );
        assert!(
            cut["spec"]["trafficPolicy"]["loadBalancer"]
                .get("warmup")
                .is_none(),
            "istiod 1.23.2 cut the field: {cut}"
        );
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn an_older_crd_refuses_the_field_instead_of_pruning_it() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start(&["west"]).await;
    planes
        .install_crds_file("west", &istio_1_23_crds(), &[])
        .await;
    planes.namespace("west", "bookinfo").await;
    let kubeconfig = planes.cluster("west").kubeconfig.clone();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let objects = dir.join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    write_atomic(&objects.join("reviews.yaml"), WARMUP);

    tokio::task::block_in_place(|| {
        let agent = AgentProc::start_with(
            "west",
            dir,
            dir,
            None,
            &[
                "--apply".to_owned(),
                "--apply-kubeconfig".to_owned(),
                kubeconfig.display().to_string(),
            ],
        );
        let config = dir.join("hub.yaml");
        write_atomic(
            &config,
            &format!(
                "sources:\n  - name: files\n    file: {{path: {}}}\nclusters:\n  - name: west\n    namespaces: [bookinfo]\n    agent:\n      address: http://{}\n      reconnect: {{initial: 100ms, max: 1s}}\ndebounce:\n  quiet: 20ms\n  maxWait: 200ms\n",
                objects.display(),
                agent.sink
            ),
        );
        let hub = HubProc::start("hub", &config, dir);
        let nack = eventually_blocking("the agent NACKs the DestinationRule", || {
            let s = hub.status();
            let c = &remote(&s, "west")["collections"][DR];
            (c["state"] == "NACKED").then(|| {
                c["nacked"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
        });
        println!("NACK: {nack}");
        assert!(
            nack.contains("warmup"),
            "the refusal names the field: {nack}"
        );
        // The agent reports the cluster's Istio CRDs and what they know.
        let crd = eventually_blocking("west reports its Istio CRDs", || {
            let s = hub.status();
            remote(&s, "west")["report"]["istio"]["crds"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["kind"] == "DestinationRule")
                .cloned()
        });
        assert_eq!(crd["knows"], "1.23", "{crd}");
        assert_eq!(crd["name"], "destinationrules.networking.istio.io", "{crd}");
    });
}

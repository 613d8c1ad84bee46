//! A WasmPlugin takes effect on every Istio release in the fleet (issue
//! 36). From 1.30, istiod reads only TrafficExtensions and translates
//! WasmPlugins itself only from its own cluster's API: a WasmPlugin
//! received over `xds://` is held and never applied. meshhub serves such
//! an istiod (which asks for the TrafficExtension type) each WasmPlugin a
//! second time as the TrafficExtension istiod would make of it
//! (`<name>~istio-translated-wasmplugin`); istiod 1.28 never asks for the
//! type and keeps reading WasmPlugins.
//!
//! Checked from each istiod's own `/debug/configz`: the newest istiod
//! (Istio master, `e2e/peers/istio.sh istiod-newest`) behind a sink agent
//! holds the translated TrafficExtension beside a real one, follows an
//! edit of the plugin and its deletion; istiod 1.28.3 on the hub holds the
//! WasmPlugin and no TrafficExtension.

use meshhub_e2e::istio::{
    Istiod, istio_newest_module_dir, istiod_bin, istiod_newest_bin, istiod_row, until_istiod,
};
use meshhub_e2e::kube::ControlPlanes;
use meshhub_e2e::*;
use meshhub_testkit::eventually_blocking;
use meshhub_testkit::fixtures::write_atomic;
use serde_json::Value;

const TRANSLATED: &str = "openid~istio-translated-wasmplugin";

fn plugin(url: &str) -> String {
    format!(
        "apiVersion: extensions.istio.io/v1alpha1\nkind: WasmPlugin\nmetadata: {{name: openid, namespace: bookinfo}}\nspec:\n  selector:\n    matchLabels: {{app: productpage}}\n  url: {url}\n  phase: AUTHN\n  priority: 7\n  pluginConfig: {{realm: bookinfo}}\n  match:\n  - mode: SERVER\n    ports: [{{number: 9080}}]\n"
    )
}

const EXTENSION: &str = "apiVersion: extensions.istio.io/v1alpha1\nkind: TrafficExtension\nmetadata: {name: stats, namespace: bookinfo}\nspec:\n  selector:\n    matchLabels: {app: reviews}\n  phase: STATS\n  wasm: {url: 'oci://registry.example/stats:1'}\n";

/// Waits for `check` on istiod's configz.
fn until(istiod: &Istiod, what: &str, check: impl Fn(&[Value]) -> bool) {
    until_istiod(istiod, what, |i| check(&i.configz()));
}

fn find<'a>(configz: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    configz.iter().find(|c| {
        c["kind"] == kind
            && c["metadata"]["namespace"] == "bookinfo"
            && c["metadata"]["name"] == name
    })
}

/// The type URLs of istiod `pod`'s consumer row, once it ACKed every one.
fn subscribed(status: &Value, pod: &str) -> Option<Vec<String>> {
    let row = istiod_row(status, pod)?;
    let cols = row["collections"].as_object()?;
    (cols.len() >= 10 && cols.values().all(|c| c["state"] == "SYNCED"))
        .then(|| cols.keys().cloned().collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wasm_plugin_reaches_istiod_1_28_as_itself_and_the_newest_as_a_traffic_extension() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start(&["primary"]).await;
    let crds = istio_newest_module_dir().join("manifests/charts/base/files/crd-all.gen.yaml");
    planes.install_crds_file("primary", &crds, &[]).await;
    planes.namespace("primary", "istio-system").await;
    let kubeconfig = planes.cluster("primary").kubeconfig.clone();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let objects = dir.join("objects");
    std::fs::create_dir_all(&objects).unwrap();
    write_atomic(
        &objects.join("plugin.yaml"),
        &plugin("oci://registry.example/openid:1"),
    );
    write_atomic(&objects.join("extension.yaml"), EXTENSION);

    tokio::task::block_in_place(|| {
        let agent = AgentProc::start("east", dir, dir, None);
        let config = dir.join("hub.yaml");
        write_atomic(
            &config,
            &format!(
                "sources:\n  - name: files\n    file: {{path: {}}}\nclusters:\n  - name: east\n    namespaces: [bookinfo]\n    agent:\n      address: http://{}\n      reconnect: {{initial: 100ms, max: 1s}}\ndebounce:\n  quiet: 20ms\n  maxWait: 200ms\n",
                objects.display(),
                agent.sink
            ),
        );
        let hub = HubProc::start("hub", &config, dir);
        // The newest istiod behind the agent (a remote cluster upgraded
        // first), istiod 1.28.3 on the hub.
        let newest = Istiod::start(
            "istiod-newest",
            istiod_newest_bin(),
            &kubeconfig,
            agent.grpc,
            dir,
            dir,
        );
        let older = Istiod::start("istiod-1-28", istiod_bin(), &kubeconfig, hub.grpc, dir, dir);

        until(
            &newest,
            "the translated and the real TrafficExtension in the newest istiod",
            |c| {
                find(c, "TrafficExtension", TRANSLATED).is_some()
                    && find(c, "TrafficExtension", "stats").is_some()
            },
        );
        let configz = newest.configz();
        let te = find(&configz, "TrafficExtension", TRANSLATED).unwrap();
        let spec = &te["spec"];
        assert_eq!(
            spec["wasm"]["url"], "oci://registry.example/openid:1",
            "{te}"
        );
        assert_eq!(spec["wasm"]["pluginConfig"]["realm"], "bookinfo", "{te}");
        assert_eq!(spec["phase"], "AUTHN", "{te}");
        assert_eq!(spec["priority"], 7, "{te}");
        assert_eq!(
            spec["selector"]["matchLabels"]["app"], "productpage",
            "{te}"
        );
        assert_eq!(spec["match"][0]["mode"], "SERVER", "{te}");
        assert_eq!(spec["match"][0]["ports"][0]["number"], 9080, "{te}");
        assert!(
            find(&configz, "WasmPlugin", "openid").is_some(),
            "istiod also holds the plugin itself"
        );
        let types = eventually_blocking("the newest istiod ACKs every type on the agent", || {
            subscribed(&agent.status(), "istiod-newest")
        });
        println!("the newest istiod subscribed with: {types:?}");
        assert!(
            types
                .iter()
                .any(|t| t == "extensions.istio.io/v1alpha1/TrafficExtension"),
            "{types:?}"
        );

        until(&older, "the WasmPlugin in istiod 1.28", |c| {
            find(c, "WasmPlugin", "openid").is_some()
        });
        let types = eventually_blocking("istiod 1.28 ACKs every type on the hub", || {
            subscribed(&hub.status(), "istiod-1-28")
        });
        assert!(
            !types.iter().any(|t| t.ends_with("/TrafficExtension")),
            "istiod 1.28 does not know the kind: {types:?}"
        );
        let configz = older.configz();
        assert!(
            find(&configz, "TrafficExtension", TRANSLATED).is_none()
                && find(&configz, "TrafficExtension", "stats").is_none(),
            "istiod 1.28 holds no TrafficExtension"
        );

        // An edit of the plugin reaches the translation.
        write_atomic(
            &objects.join("plugin.yaml"),
            &plugin("oci://registry.example/openid:2"),
        );
        until(&newest, "the edited plugin's translation", |c| {
            find(c, "TrafficExtension", TRANSLATED)
                .is_some_and(|te| te["spec"]["wasm"]["url"] == "oci://registry.example/openid:2")
        });
        // Its deletion removes it; the real TrafficExtension stays.
        std::fs::remove_file(objects.join("plugin.yaml")).unwrap();
        until(&newest, "the deleted plugin's translation gone", |c| {
            find(c, "TrafficExtension", TRANSLATED).is_none()
                && find(c, "TrafficExtension", "stats").is_some()
        });
        until(&older, "the deleted plugin gone from istiod 1.28", |c| {
            find(c, "WasmPlugin", "openid").is_none()
        });
    });
}

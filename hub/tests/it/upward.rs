//! The upward channel in process: an agent compares what it serves with
//! its istiod's `/debug/configz` (here a stand-in serving a chosen list)
//! and reports up; the hub shows the collection istiod does not fully hold
//! as DROPPED, naming the object, and SYNCED again once istiod holds it.
//! The agent also reads its istiod's release (`/version`, a stand-in here);
//! the hub checks each cluster against it (MH0002, holdable).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use meshhub_e2e::inproc::{agent_config, hub_of_file, push, start_agent, tree, write_hub_config};
use meshhub_e2e::yaml;
use meshhub_sink_agent::upward::{IstiodCheck, IstiodVersionCheck};
use meshhub_testkit::eventually;
use meshhub_testkit::objects::{VS, virtual_service};
use serde_json::Value;

const EF: &str = "istio/networking/v1alpha3/envoyfilters";

const FILTER: &str = "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata:\n  name: unknown-type\n  namespace: bookinfo\nspec:\n  configPatches:\n  - applyTo: HTTP_FILTER\n    patch:\n      operation: INSERT_BEFORE\n      value:\n        name: example.bogus\n        typed_config:\n          '@type': type.googleapis.com/istio.bogus.v3.Bogus\n";

const VS_ONLY: &str = r#"[{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"reviews","namespace":"bookinfo"},"spec":{}}]"#;
const BOTH: &str = r#"[{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"reviews","namespace":"bookinfo"},"spec":{}},{"apiVersion":"networking.istio.io/v1alpha3","kind":"EnvoyFilter","metadata":{"name":"unknown-type","namespace":"bookinfo"},"spec":{}}]"#;

async fn status(addr: std::net::SocketAddr) -> Value {
    let (code, body) = meshhub_testkit::http::get(addr, "/status").await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("status JSON")
}

fn east(s: &Value) -> Value {
    s["remotes"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["cluster"] == "east"))
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_object_shows_as_dropped_until_istiod_holds_it() {
    // istiod's debug port, serving a list we choose.
    let configz = Arc::new(Mutex::new(VS_ONLY.to_owned()));
    let body = configz.clone();
    let app = Router::new().route(
        "/debug/configz",
        get(move || {
            let body = body.lock().unwrap().clone();
            async move { body }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let istiod = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let (dir, config) = tree();
    let objects = dir.path().join("objects");
    std::fs::write(
        objects.join("vs.yaml"),
        virtual_service("reviews", "bookinfo", "reviews", ""),
    )
    .unwrap();
    std::fs::write(objects.join("ef.yaml"), FILTER).unwrap();
    let mut cfg = agent_config("east", &dir.path().join("agent"), push());
    cfg.upward.report_interval = Duration::from_millis(100);
    cfg.upward.istiod = Some(IstiodCheck {
        debug_url: format!("http://{istiod}"),
        interval: Duration::from_millis(100),
    });
    let agent = start_agent(cfg).await;
    write_hub_config(
        &config,
        &yaml::cluster(
            "east",
            "",
            format!("http://{}", agent.sink_addr().unwrap()),
            "",
        ),
        "",
    );
    let hub = hub_of_file(&config).await;
    let admin = hub.admin_addr();

    eventually(
        "east's EnvoyFilters DROPPED, its VirtualServices SYNCED",
        || async {
            let e = east(&status(admin).await);
            e["collections"][EF]["state"] == "DROPPED" && e["collections"][VS]["state"] == "SYNCED"
        },
    )
    .await;
    let e = east(&status(admin).await);
    assert_eq!(e["dropped"][EF][0]["name"], "bookinfo/unknown-type", "{e}");
    assert_eq!(e["report"]["istiod"]["held"], 1, "{e}");
    assert_eq!(e["report"]["connected"], true, "{e}");
    assert_eq!(
        e["report"]["collections"][VS]["resources"], 1,
        "what the agent holds: {e}"
    );

    // The agent shows the hub reading its state.
    let a = status(agent.admin_addr()).await;
    assert!(
        a["upward"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["connected"] == true
                && p["collections"][meshhub_proto::upward::CLUSTER_STATUS]["acks"]
                    .as_u64()
                    .is_some_and(|n| n > 0)),
        "{}",
        a["upward"]
    );

    // istiod takes it: SYNCED again, nothing dropped.
    *configz.lock().unwrap() = BOTH.to_owned();
    eventually("east's EnvoyFilters SYNCED again", || async {
        let e = east(&status(admin).await);
        e["collections"][EF]["state"] == "SYNCED" && e["dropped"].is_null()
    })
    .await;
    hub.shutdown().await;
    agent.shutdown().await;
    server.abort();
}

const KEEPALIVE: &str = "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: reviews\n  namespace: bookinfo\nspec:\n  host: reviews\n  trafficPolicy:\n    connectionPool:\n      http:\n        http2KeepAlive: {interval: 10s, timeout: 3s}\n";

fn east_analysis(s: &Value) -> Value {
    s["analysis"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["cluster"] == "east"))
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_newer_than_the_clusters_istio_is_flagged_and_held_until_it_upgrades() {
    // istiod's monitoring port: `/version`, answering a release we choose.
    let release = Arc::new(Mutex::new("1.28.3-unknown-unknown".to_owned()));
    let body = release.clone();
    let app = Router::new().route(
        "/version",
        get(move || {
            let body = body.lock().unwrap().clone();
            async move { body }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let istiod = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let (dir, config) = tree();
    let objects = dir.path().join("objects");
    std::fs::write(objects.join("dr.yaml"), KEEPALIVE).unwrap();
    let mut cfg = agent_config("east", &dir.path().join("agent"), push());
    cfg.upward.report_interval = Duration::from_millis(100);
    cfg.upward.istiod_version = Some(IstiodVersionCheck {
        url: format!("http://{istiod}"),
        interval: Duration::from_millis(100),
    });
    let agent = start_agent(cfg).await;
    write_hub_config(
        &config,
        &yaml::cluster(
            "east",
            "",
            format!("http://{}", agent.sink_addr().unwrap()),
            "",
        ),
        "analysis:\n  holdBack: [MH0002]\n",
    );
    let hub = hub_of_file(&config).await;
    let admin = hub.admin_addr();

    // The release is reported, and east is checked against it: held.
    eventually("east checked against 1.28.3 and held back", || async {
        let st = status(admin).await;
        let a = east_analysis(&st);
        a["heldBack"]["codes"][0] == "MH0002"
            && a["messages"].as_array().is_some_and(|m| {
                m.iter().any(|m| {
                    m["message"]
                        .as_str()
                        .is_some_and(|t| t.ends_with("cluster east runs 1.28.3"))
                })
            })
    })
    .await;
    let s = status(admin).await;
    let e = east(&s);
    let istiods = &e["report"]["istio"]["istiods"];
    assert_eq!(istiods[0]["source"], "version-endpoint", "{e}");
    assert_eq!(istiods[0]["version"], "1.28.3", "{e}");
    let m = &east_analysis(&s)["messages"][0];
    assert_eq!(m["code"], "MH0002", "{m}");
    assert_eq!(
        m["path"], "spec.trafficPolicy.connectionPool.http.http2KeepAlive",
        "{m}"
    );
    assert_eq!(
        m["message"], "needs Istio 1.31; cluster east runs 1.28.3",
        "{m}"
    );

    // istiod upgrades: the same build is analysed again and served.
    *release.lock().unwrap() = "1.31.0-unknown-unknown".to_owned();
    eventually("east served after its upgrade", || async {
        let a = east_analysis(&status(admin).await);
        a["heldBack"].is_null() && a["messages"].as_array().is_some_and(Vec::is_empty)
    })
    .await;
    hub.shutdown().await;
    agent.shutdown().await;
    server.abort();
}

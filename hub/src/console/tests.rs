//! The console behind a proxy that serves the admin port under a path, as
//! `kubectl proxy` does: every URL its pages and script use is relative,
//! and following them stays under the path. The fleet lists the consumers
//! that dial the hub.

use std::collections::{BTreeSet, VecDeque};

use axum::body::Body;
use axum::http::{Request, header};
use http_body_util::BodyExt as _;
use meshhub_mcp::ledger::{Ledger, PeerRecord, Role, StreamProtocol};
use meshhub_rollout::{ClusterState, OnFailure, Phase, PlannedWave, Promotion, Rollout, Step};
use tower::ServiceExt as _;

use super::feed::tests::{Keep, inputs};
use super::*;

/// Where `kubectl proxy` serves the admin port of the pod `meshhub-0`.
const PREFIX: &str = "/api/v1/namespaces/mesh/pods/meshhub-0:9902/proxy";

/// The attributes that hold a URL (or, `data-root`, the start of one).
const URL_ATTRS: &[&str] = &[
    "href",
    "src",
    "action",
    "data-url",
    "data-events",
    "data-root",
];

/// `reference` resolved against the absolute path `base` (RFC 3986 §5.2,
/// for the references a page holds: relative paths, with a query).
fn resolve(base: &str, reference: &str) -> String {
    assert!(!reference.starts_with('/'), "absolute: {reference}");
    let base = base.split('?').next().unwrap();
    let (path, query) = match reference.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (reference, None),
    };
    let merged = format!("{}{path}", &base[..=base.rfind('/').unwrap()]);
    let segments: Vec<&str> = merged.split('/').collect();
    let mut out: Vec<&str> = Vec::new();
    for (i, s) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *s {
            "." | ".." => {
                if *s == ".." && out.len() > 1 {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let mut url = out.join("/");
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    url
}

#[test]
fn references_resolve_as_a_browser_does() {
    let cluster = format!("{PREFIX}/console/clusters/east");
    assert_eq!(
        resolve(&cluster, "../../console/rollout"),
        format!("{PREFIX}/console/rollout")
    );
    assert_eq!(
        resolve(&format!("{PREFIX}/console?state=held"), "console?page=2"),
        format!("{PREFIX}/console?page=2")
    );
    assert_eq!(
        resolve(
            &format!("{PREFIX}/console/rollout"),
            "../rollout/promote?cluster=a"
        ),
        format!("{PREFIX}/rollout/promote?cluster=a")
    );
}

/// Every URL attribute's value in `html` (entities of a query undone).
fn urls(html: &str) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for attr in URL_ATTRS {
        let needle = format!(" {attr}=\"");
        for (at, _) in html.match_indices(&needle) {
            let rest = &html[at + needle.len()..];
            let value = rest.split('"').next().unwrap();
            out.push((*attr, value.replace("&amp;", "&")));
        }
    }
    out
}

/// What a browser would see: the admin port's console under [`PREFIX`].
struct Proxied {
    app: Router,
    _keep: Keep,
    _peers: Vec<PeerRecord>,
    shutdown: CancellationToken,
}

impl Proxied {
    async fn get(&self, path: &str) -> (u16, Option<String>, Option<String>, String) {
        let req = Request::get(path)
            .header(header::HOST, "127.0.0.1:9902")
            .body(Body::empty())
            .unwrap();
        let r = self.app.clone().oneshot(req).await.unwrap();
        let text = |h| {
            r.headers()
                .get(h)
                .and_then(|v: &axum::http::HeaderValue| v.to_str().ok())
                .map(str::to_owned)
        };
        let (kind, location) = (text(header::CONTENT_TYPE), text(header::LOCATION));
        let status = r.status().as_u16();
        // An event stream never ends: its head is enough.
        let body = if kind.as_deref() == Some("text/event-stream") {
            String::new()
        } else {
            let bytes = r.into_body().collect().await.unwrap().to_bytes();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        (status, kind, location, body)
    }
}

impl Drop for Proxied {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The console of a hub that dials `east` and `west` (`west` held by a
/// rollout waiting for its promotion), with an istiod dialing in that
/// NACKed and one that ACKed, under [`PREFIX`]; also the router alone.
fn proxied() -> (Proxied, Router) {
    let ledger = Ledger::new();
    let east = ledger.register(Role::Source, "east", "east");
    east.connected();
    east.sent("a", "v1", "1");
    east.acked("a", "v1", "1");
    let dial_in = |node: &str, addr: &str| {
        let p = ledger.register(Role::Source, addr, "east");
        p.identify(node, "east");
        p.protocol(StreamProtocol::Ads);
        p.connected();
        p.sent("a", "v1", "1");
        p
    };
    let nacking = dial_in("istiod-nacking.istio-system", "10.0.0.7:4711");
    nacking.nacked("a", "v1", 3, "unknown field \"hots\"");
    let acking = dial_in("istiod-fine.istio-system", "10.0.0.8:4711");
    acking.acked("a", "v1", "1");
    // An upstream source the hub receives from: not a consumer.
    let upstream = ledger.register(Role::Sink, "upstream:15010", "upstream");
    upstream.connected();

    let (inputs, keep) = inputs(&ledger, &["east", "west"]);
    let rollout = keep
        .iter()
        .find_map(|k| k.downcast_ref::<watch::Sender<Arc<View>>>())
        .unwrap();
    let target = |state| meshhub_rollout::Target {
        step: Step {
            from: Some("v1".into()),
            to: "v2".into(),
        },
        wave: 1,
        state,
    };
    let wave = |name: &str, c: &str| PlannedWave {
        name: name.into(),
        clusters: vec![c.into()],
        max_concurrent: None,
        bake_ms: 0,
        promotion: Promotion::Manual,
    };
    rollout.send_replace(Arc::new(View {
        enabled: true,
        rollout: Some(Rollout {
            id: 1,
            started: 0,
            waves: vec![wave("canary", "east"), wave("main", "west")],
            deadline_ms: 60_000,
            on_failure: OnFailure::Halt,
            targets: [
                ("east".to_owned(), target(ClusterState::Acked { at: 1 })),
                ("west".to_owned(), target(ClusterState::Held)),
            ]
            .into(),
            wave: 0,
            wave_started: 0,
            phase: Phase::AwaitingPromotion,
        }),
        ..View::default()
    }));
    let shutdown = CancellationToken::new();
    let state = ConsoleState::start(inputs, &TaskTracker::new(), shutdown.clone());
    let auth = AdminAuth::new(None, "127.0.0.1:9902".parse().unwrap());
    let plain = routes(state, &auth);
    let app = Router::new().nest(PREFIX, plain.clone());
    (
        Proxied {
            app,
            _keep: keep,
            _peers: vec![east, nacking, acking, upstream],
            shutdown,
        },
        plain,
    )
}

#[tokio::test]
async fn behind_a_path_prefix_every_url_of_the_console_stays_under_it() {
    let (console, plain) = proxied();
    let under = |url: &str| url.starts_with(&format!("{PREFIX}/"));

    // The redirects are relative too.
    for (path, base) in [
        ("/", format!("{PREFIX}/")),
        ("/console/", format!("{PREFIX}/console/")),
    ] {
        let r = plain
            .clone()
            .oneshot(
                Request::get(path)
                    .header(header::HOST, "127.0.0.1:9902")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let location = r.headers()[header::LOCATION].to_str().unwrap().to_owned();
        assert_eq!(
            resolve(&base, &location),
            format!("{PREFIX}/console"),
            "{path}"
        );
    }

    // Every page reached from the fleet, its links, forms, assets, event
    // streams and the script's requests.
    let mut queue = VecDeque::from([format!("{PREFIX}/console")]);
    let mut seen = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    let mut posts = BTreeSet::new();
    while let Some(url) = queue.pop_front() {
        if !seen.insert(url.clone()) || seen.len() > 80 {
            continue;
        }
        let (status, kind, _, body) = console.get(&url).await;
        assert_eq!(status, 200, "{url}: {body}");
        if !kind.as_deref().unwrap_or_default().starts_with("text/html") {
            continue;
        }
        for bad in [
            "href=\"/",
            "src=\"/",
            "action=\"/",
            "data-url=\"/",
            "data-events=\"/",
        ] {
            assert!(!body.contains(bad), "{url}: {bad} in {body}");
        }
        for (attr, value) in urls(&body) {
            kinds.insert(attr);
            if value.starts_with('#') {
                continue;
            }
            let target = match attr {
                // What the script prefixes its own requests with.
                "data-root" => resolve(&url, &format!("{value}console/session")),
                _ => resolve(&url, &value),
            };
            assert!(under(&target), "{url}: {attr}={value} leads to {target}");
            let path = &target[PREFIX.len()..];
            if attr == "data-url" {
                // The admin API's actions (not the console's routes).
                assert!(path.starts_with("/rollout/"), "{target}");
                posts.insert(path.to_owned());
            } else if attr == "data-root" || attr == "data-events" || attr == "src" {
                let (status, kind, _, _) = console.get(&target).await;
                let ok = if attr == "data-root" { 204 } else { 200 };
                assert_eq!(status, ok, "{url}: {attr} {target}");
                if attr == "data-events" {
                    assert_eq!(kind.as_deref(), Some("text/event-stream"));
                }
            } else if path.starts_with("/console") {
                queue.push_back(target);
            } else {
                // `/status`, linked from the consumers.
                assert_eq!(path, "/status", "{url}");
            }
        }
    }
    for page in [
        "/console",
        "/console/rollout",
        "/console/object",
        "/console/clusters/east",
        "/console/clusters/west",
        "/console/assets/console.css",
    ] {
        assert!(
            seen.iter()
                .any(|s| s.split('?').next() == Some(&format!("{PREFIX}{page}"))),
            "never reached {page}: {seen:?}"
        );
    }
    assert_eq!(
        kinds,
        URL_ATTRS.iter().copied().collect(),
        "every kind of URL seen"
    );
    assert!(
        posts.contains("/rollout/promote?cluster=west") && posts.contains("/rollout/abort"),
        "{posts:?}"
    );
}

#[test]
fn the_script_builds_no_url_of_its_own() {
    let code: String = assets::SCRIPT
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    for bad in ["\"/", "'/", "`/"] {
        assert!(
            !code.contains(bad),
            "a string starting with / in console.js"
        );
    }
    // Its requests: the page's event stream, the session check under the
    // page's root, the buttons' own URLs.
    let requests: Vec<&str> = code
        .match_indices("fetch(")
        .chain(code.match_indices("EventSource("))
        .map(|(at, _)| {
            let call = code[at..].split([',', ';']).next().unwrap();
            call.trim_end_matches(')')
        })
        .collect();
    assert_eq!(
        requests,
        [
            "fetch(root() + \"console/session\"",
            "fetch(b.dataset.url",
            "EventSource(url",
        ]
    );
    assert!(code.contains("const url = document.body.dataset.events;"));
}

#[tokio::test]
async fn the_fleet_lists_the_consumers_dialing_in_trouble_first() {
    let (console, _) = proxied();
    let (status, _, _, body) = console.get(&format!("{PREFIX}/console")).await;
    assert_eq!(status, 200);
    let section = body
        .split("<section id=\"fleet-consumers\"")
        .nth(1)
        .unwrap();
    let nacking = section.find("istiod-nacking.istio-system").unwrap();
    let fine = section.find("istiod-fine.istio-system").unwrap();
    assert!(nacking < fine, "trouble first: {section}");
    assert!(
        section.contains("unknown field &quot;hots&quot;"),
        "{section}"
    );
    assert!(section.contains("10.0.0.7:4711") && section.contains("ads"));
    // The cluster the hub dials and the upstream source are not consumers.
    assert_eq!(section.matches("data-consumer=").count(), 2, "{section}");
    assert!(!section.contains("<code>east</code></th>") && !section.contains("upstream"));
    // Filters apply to them: the trouble view keeps only the NACKing one.
    let (_, _, _, body) = console
        .get(&format!("{PREFIX}/console?state=trouble"))
        .await;
    let section = body
        .split("<section id=\"fleet-consumers\"")
        .nth(1)
        .unwrap();
    assert!(section.contains("istiod-nacking") && !section.contains("istiod-fine"));
}

#[test]
fn an_ads_consumer_on_what_its_type_urls_serve_is_synced() {
    use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource, Snapshot};
    const VS_URL: &str = "networking.istio.io/v1/VirtualService";
    let ledger = Ledger::new();
    let (mut inputs, _keep) = inputs(&ledger, &[]);
    let (writer, cache) = meshhub_mcp::cache::new();
    let vs = Arc::new(CollectionSnapshot::new(vec![EncodedResource {
        name: "bookinfo/reviews".into(),
        version: "1".into(),
        encoded: bytes::Bytes::from_static(b"x"),
    }]));
    let version = vs.version().to_owned();
    writer.set(
        "g",
        Arc::new(Snapshot::new().with_collection("istio/networking/v1alpha3/virtualservices", vs)),
    );
    inputs.admin.cache = cache;
    // istiod on ADS: its ledger rows are keyed by type URL.
    let p = ledger.register(Role::Source, "10.0.0.9:1", "g");
    p.identify("istiod-x.istio-system", "g");
    p.protocol(StreamProtocol::Ads);
    p.connected();
    p.sent(VS_URL, &version, "1");
    p.acked(VS_URL, &version, "1");
    let fleet = build(&inputs, None);
    assert_eq!(fleet.consumers.len(), 1);
    assert_eq!(
        fleet.consumers[0].health,
        super::model::Health::Synced,
        "ACKed what its group is served: {:?}",
        fleet.consumers[0]
    );
}

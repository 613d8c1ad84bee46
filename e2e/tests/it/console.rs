//! The web console in a real headless Chromium (Debian's `chromium` and
//! `chromium-driver`, `e2e/peers/chromium.sh`), against the real `meshhub`
//! with an admin token, dialing three real `meshhub-sink-agent`s: `r1`
//! applies what it receives to a real kube-apiserver whose
//! ValidatingAdmissionPolicy refuses VirtualServices for `blocked*` hosts
//! (so `r1` NACKs such a change), `r2` and `r3` persist and serve. The
//! hub rolls changes out in three waves (`r1`, `r2`, `r3`), the first
//! waiting for an operator's promotion; a failure halts the rollout.
//!
//! Checked in the browser, pages never reloaded while they follow the hub:
//! - the fleet lists the three clusters; the rollout page without the
//!   token has no action buttons, and the page's own POST is refused;
//! - a change: the rollout page shows wave 1 advance as `r1` ACKs and wait
//!   for promotion; the token entered on the page shows the buttons;
//!   Promote from the page starts wave 2, which the page shows ACKed;
//! - a change `r1` refuses: the open fleet page shows `r1` NACKED with the
//!   API server's message within a second or so of the hub's ledger
//!   recording it (printed), and the rollout page the failure, with a
//!   button "Resume r1" that returns `r1` to the rollout;
//! - the cluster page (history diff) and the object page render; keyboard
//!   navigation starts at a skip link; in Chromium's accessibility tree
//!   every link, button, text box and list box has a name, and the pages
//!   have their landmarks.
//!
//! Screenshots of each page are written to `target/console-screenshots/`
//! (`MESHHUB_SCREENSHOTS_DIR` elsewhere); docs/console.md shows them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fantoccini::Locator;
use fantoccini::key::Key;
use meshhub_e2e::browser::Browser;
use meshhub_e2e::kube::{ControlPlanes, apply_yaml, rbac_manifest};
use meshhub_e2e::yaml::cluster;
use meshhub_e2e::*;
use meshhub_testkit::eventually_some;
use meshhub_testkit::objects::{VS, vs};
use serde_json::Value;

const REMOTES: [&str; 3] = ["r1", "r2", "r3"];
const TOKEN: &str = "console-e2e-token";
/// How long any one step may take (a wave, a push).
const STEP: Duration = Duration::from_secs(60);

fn screenshots() -> PathBuf {
    std::env::var_os("MESHHUB_SCREENSHOTS_DIR").map_or_else(
        || {
            let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
                || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
                PathBuf::from,
            );
            target.join("console-screenshots")
        },
        PathBuf::from,
    )
}

fn hub_config(objects: &Path, agents: &[(&str, std::net::SocketAddr)]) -> String {
    let clusters: String = agents
        .iter()
        .map(|(name, addr)| {
            let labels = format!(
                "    namespaces: [bookinfo]\n    clusterLabels: {{tier: {}}}\n",
                if *name == "r1" { "canary" } else { "main" }
            );
            cluster(name, &labels, format!("http://{addr}"), "")
        })
        .collect();
    format!(
        "sources:\n  - name: files\n    file:\n      path: {}\nclusters:\n{clusters}debounce:\n  quiet: 200ms\n  maxWait: 1s\nhistory:\n  dir: history\nrollout:\n  progressDeadline: 2m\n  onFailure: halt\n  waves:\n  - name: canary\n    clusters: [r1]\n    bake: 1s\n    promotion: manual\n  - name: main\n    clusters: [r2]\n    bake: 1s\n  - name: last\n    clusters: [r3]\n    bake: 1s\n",
        objects.display()
    )
}

/// `r1`'s VirtualService collection as the hub's ledger has it.
fn r1_collection(hub: &HubProc) -> Value {
    remote(&hub.status(), "r1")["collections"][VS].clone()
}

/// `GET path` on the hub's admin port, parsed (`null` when it does not
/// answer JSON).
async fn admin_json(admin: std::net::SocketAddr, path: &'static str) -> Value {
    let body = tokio::task::spawn_blocking(move || {
        meshhub_testkit::http::get_blocking(admin, path).map(|(_, b)| b)
    })
    .await
    .unwrap()
    .unwrap_or_default();
    serde_json::from_str(&body).unwrap_or_default()
}

async fn rollout_phase(hub: &HubProc) -> String {
    let v = admin_json(hub.admin, "/rollout").await;
    v["rollout"]["phase"]["phase"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Opens `url` and waits until its event stream is up.
async fn open_live(b: &Browser, url: &str) {
    open_until(
        b,
        url,
        "the live stream",
        "return document.body.dataset.connected === '1' || null;",
    )
    .await;
}

/// Opens `url` and waits (up to [`STEP`]) for `js` to return something.
async fn open_until(b: &Browser, url: &str, what: &str, js: &str) -> Value {
    b.client.goto(url).await.unwrap();
    b.until(what, STEP, js).await
}

/// Marks the page; [`still_marked`] tells whether it was reloaded since.
async fn mark(b: &Browser) {
    b.eval("window.__notReloaded = true; return true;").await;
}

async fn still_marked(b: &Browser) -> bool {
    b.eval("return window.__notReloaded === true;").await == Value::Bool(true)
}

/// Every interactive node of the page's accessibility tree has a name,
/// and the page has its main and navigation landmarks.
async fn check_accessibility(b: &Browser, page: &str) {
    let nodes = b.accessibility_tree().await;
    let role = |n: &Value| n["role"]["value"].as_str().unwrap_or_default().to_owned();
    let name = |n: &Value| n["name"]["value"].as_str().unwrap_or_default().to_owned();
    let live = |n: &Value| n["ignored"] != Value::Bool(true);
    let roles: Vec<String> = nodes.iter().filter(|n| live(n)).map(role).collect();
    for landmark in ["main", "navigation"] {
        assert!(
            roles.iter().any(|r| r == landmark),
            "{page}: no {landmark} landmark in {roles:?}"
        );
    }
    let unnamed: Vec<String> = nodes
        .iter()
        .filter(|n| live(n))
        .filter(|n| {
            [
                "link", "button", "textbox", "combobox", "listbox", "checkbox",
            ]
            .contains(&role(n).as_str())
        })
        .filter(|n| name(n).trim().is_empty())
        .map(|n| n.to_string())
        .collect();
    assert!(
        unnamed.is_empty(),
        "{page}: controls without an accessible name: {unnamed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_console_follows_a_rollout_and_a_nack_live_in_a_real_browser() {
    let _turn = turn(module_path!());
    let planes = ControlPlanes::start_bare(&["r1"]).await;
    planes.install_istio_crds("r1", &[]).await;
    planes.namespace("r1", "bookinfo").await;
    planes.namespace("r1", "meshhub").await;
    planes.refuse_blocked_hosts("r1").await;
    let r1 = planes.client("r1").await;
    apply_yaml(&r1, &rbac_manifest("sink-agent.yaml")).await;
    let kubeconfig = planes
        .service_account_kubeconfig("r1", "meshhub", "meshhub-agent")
        .await;

    let tmp = KeepLogsOnPanic::new("console");
    let dir = tmp.path().to_owned();
    let dir = dir.as_path();
    let logs = dir.join("logs");
    let objects = dir.join("objects");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::create_dir_all(&objects).unwrap();
    let write_vs =
        |host: &str| std::fs::write(objects.join("reviews.yaml"), vs("reviews", host)).unwrap();
    write_vs("v1");
    let token = dir.join("token");
    std::fs::write(&token, TOKEN).unwrap();

    let mut agents = Vec::new();
    for r in REMOTES {
        let flags: Vec<String> = if r == "r1" {
            [
                "--apply",
                "--apply-kubeconfig",
                &kubeconfig.display().to_string(),
                "--apply-resync",
                "2s",
            ]
            .map(str::to_owned)
            .to_vec()
        } else {
            Vec::new()
        };
        agents.push(tokio::task::block_in_place(|| {
            AgentProc::start_with(r, dir, &logs, None, &flags)
        }));
    }
    let sinks: Vec<(&str, std::net::SocketAddr)> = REMOTES
        .iter()
        .zip(&agents)
        .map(|(r, a)| (*r, a.sink))
        .collect();
    let config = dir.join("meshhub.yaml");
    std::fs::write(&config, hub_config(&objects, &sinks)).unwrap();
    let hub = tokio::task::block_in_place(|| {
        HubProc::start_with(
            "hub",
            &config,
            &logs,
            &["--admin-token-file".to_owned(), token.display().to_string()],
        )
    });
    eventually_some("v1 ACKed by every remote", async || {
        let s = hub.status();
        REMOTES.iter().all(|r| synced(&s, r, VS)).then_some(())
    })
    .await;

    let shots = screenshots();
    let base = format!("http://{}", hub.admin);
    let b = Browser::start(&logs).await;

    // The fleet: three clusters, live.
    open_live(&b, &format!("{base}/console")).await;
    b.until(
        "three fleet rows",
        STEP,
        "return document.querySelectorAll('#fleet-rows tr.row').length === 3 || null;",
    )
    .await;
    check_accessibility(&b, "fleet").await;
    // Keyboard: the first Tab reaches the skip link, which leads to main.
    b.client
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .send_keys(&Key::Tab.to_string())
        .await
        .unwrap();
    let first = b
        .until(
            "focus on the skip link",
            STEP,
            "return document.activeElement && document.activeElement.textContent;",
        )
        .await;
    assert_eq!(first, "Skip to content");

    // The rollout page without the token: no buttons; its POST refused.
    open_until(
        &b,
        &format!("{base}/console/rollout"),
        "the token form",
        "return document.getElementById('admin-token') !== null || null;",
    )
    .await;
    let buttons = b
        .eval("return document.querySelectorAll('#actions button').length;")
        .await;
    assert_eq!(buttons, 0, "no action buttons without the token");
    let refused = b
        .client
        .execute_async(
            "const done = arguments[0]; fetch('/rollout/promote', {method: 'POST'}).then(r => done(r.status));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(refused, 401, "the page's POST without the token");
    check_accessibility(&b, "rollout").await;

    // A change: wave 1 advances on the page as r1 ACKs, then waits.
    mark(&b).await;
    write_vs("v2");
    let r1_acked = "const w = document.querySelector('li.wave'); \
         return (w && w.textContent.includes('1 acked') && \
                 document.querySelector('#rollout').textContent.includes('Waiting for an operator')) || null;";
    b.until("wave 1 ACKed and awaiting promotion", STEP, r1_acked)
        .await;
    assert!(still_marked(&b).await, "the page followed without a reload");
    assert_eq!(rollout_phase(&hub).await, "awaitingPromotion");

    // The token entered on the page shows the buttons; Promote starts wave 2.
    b.client
        .find(Locator::Id("admin-token"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    b.click("#session button[type=submit]").await;
    b.until(
        "the promote button",
        STEP,
        "return document.querySelector('#actions button[data-action=promote]') !== null || null;",
    )
    .await;
    check_accessibility(&b, "rollout with the actions").await;
    b.screenshot(&shots.join("rollout-awaiting-promotion.png"))
        .await;
    b.click("#actions button[data-action=promote]").await;
    let wave2_acked = "const w = document.querySelectorAll('li.wave')[1]; \
         return (w && w.textContent.includes('1 acked')) || null;";
    b.until("wave 2 ACKed on the page", STEP, wave2_acked).await;
    assert!(still_marked(&b).await);
    eventually_some("the rollout completed", async || {
        (rollout_phase(&hub).await == "completed").then_some(())
    })
    .await;
    b.screenshot(&shots.join("rollout.png")).await;

    // A change r1 refuses: the open fleet page shows the NACK.
    open_live(&b, &format!("{base}/console")).await;
    mark(&b).await;
    write_vs("blocked-reviews");
    // The hub's side: when its rollout recorded r1's refusal (the NACK
    // itself is on the ledger only until the rollout serves r1 its
    // previous version again, milliseconds later).
    let recorded = {
        let hub_admin = hub.admin;
        tokio::task::spawn(async move {
            let deadline = Instant::now() + STEP;
            loop {
                let v = admin_json(hub_admin, "/rollout").await;
                if let Some(m) = v["rollout"]["targets"]["r1"]["state"]["message"].as_str() {
                    return (Instant::now(), m.to_owned());
                }
                assert!(Instant::now() < deadline, "r1 never refused: {v}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let failing_row = "const r = document.querySelector('#fleet-rows tr[data-cluster=r1]'); \
         return (r && r.textContent.includes('Failing') && r.textContent.includes('blocked host') && r.textContent) || null;";
    let row = b
        .until(
            "r1 failing with the NACK's message on the fleet page",
            STEP,
            failing_row,
        )
        .await;
    let shown = Instant::now();
    let (recorded, message) = recorded.await.unwrap();
    let lag = shown.saturating_duration_since(recorded);
    println!("console: r1's NACK on the fleet page {lag:?} after the hub's rollout recorded it");
    // One feed round (250 ms to settle, a build, a render) plus the
    // page's own polling; generous for a loaded machine and a debug build.
    assert!(
        lag < Duration::from_secs(5),
        "the page showed the NACK {lag:?} after the hub"
    );
    assert!(still_marked(&b).await, "shown without a reload");
    assert!(
        message.contains("blocked host") && row.as_str().unwrap().contains(&message),
        "the row carries the NACK's message {message:?}: {row}"
    );
    let nacks = r1_collection(&hub)["nacks"].as_u64().unwrap_or_default();
    assert!(nacks >= 1, "the ledger counted r1's NACK");
    assert_eq!(b.text("#fleet-rows tr.row th").await, "r1", "trouble first");
    b.screenshot(&shots.join("fleet.png")).await;

    // The rollout page shows the failure with its cluster and message.
    b.client
        .goto(&format!("{base}/console/rollout"))
        .await
        .unwrap();
    let failure = b
        .until(
            "the failure",
            STEP,
            "const f = document.querySelector('.failure'); return f && f.textContent;",
        )
        .await;
    let failure = failure.as_str().unwrap();
    assert!(
        failure.contains("r1") && failure.contains("NACK"),
        "{failure}"
    );
    // The token kept in the tab shows r1's own button, named for it.
    let url = b
        .until(
            "r1's Resume button",
            STEP,
            "const b = document.querySelector('#rollout button[aria-label=\"Resume r1\"]'); \
             return b && b.dataset.url;",
        )
        .await;
    assert_eq!(url, "../rollout/resume?cluster=r1");
    check_accessibility(&b, "rollout with a cluster's actions").await;
    b.screenshot(&shots.join("rollout-failed.png")).await;
    // It returns r1 to the halted rollout: held until it resumes.
    b.click("#rollout button[aria-label=\"Resume r1\"]").await;
    let done = b
        .until(
            "the answer",
            STEP,
            "const r = document.getElementById('action-result').textContent; \
             return r.startsWith('Done') || r.startsWith('Refused') ? r : null;",
        )
        .await;
    assert_eq!(done, "Done: resume r1.");
    let v = admin_json(hub.admin, "/rollout").await;
    assert_eq!(
        v["rollout"]["targets"]["r1"]["state"]["state"], "held",
        "{v}"
    );

    // The cluster page with its history and a diff.
    open_until(
        &b,
        &format!("{base}/console/clusters/r1"),
        "the history",
        "return document.querySelectorAll('#d-from option').length >= 2 || null;",
    )
    .await;
    b.click("form[aria-label='Compare two versions'] button")
        .await;
    b.until(
        "a diff",
        STEP,
        "const d = document.querySelector('section.diff'); return d && d.textContent;",
    )
    .await;
    check_accessibility(&b, "cluster").await;
    b.screenshot(&shots.join("cluster.png")).await;

    // The object page.
    b.client
        .goto(&format!(
            "{base}/console/object?kind=VirtualService&namespace=bookinfo&name=reviews"
        ))
        .await
        .unwrap();
    let h2 = b.text("main h2").await;
    assert!(h2.contains("bookinfo/reviews"), "{h2}");
    check_accessibility(&b, "object").await;
    b.screenshot(&shots.join("object.png")).await;
    println!("console: screenshots in {}", shots.display());
    b.close().await;
}

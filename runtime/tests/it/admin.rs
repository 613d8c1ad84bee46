//! The runtime's admin routes over real loopback HTTP: readiness, log
//! levels changed at runtime (and their effect), introspection, the CPU
//! profile, and the protection of state-changing endpoints.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use meshhub_runtime::admin::{self, AdminBase, Identity};
use meshhub_runtime::logging::{self, Format, LogControl};
use meshhub_testkit::eventually;
use pprof::protos::Message as _;
use tokio_util::sync::CancellationToken;

/// A writer into a shared buffer: what the test process logged.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buffer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// The test process's global subscriber (one per process) and its control.
fn log() -> &'static (Buffer, LogControl) {
    static LOG: OnceLock<(Buffer, LogControl)> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf = Buffer::default();
        let writer = buf.clone();
        let (sub, control) =
            logging::subscriber(move || writer.clone(), Format::Text, false, "info").unwrap();
        tracing::subscriber::set_global_default(sub).unwrap();
        (buf, control)
    })
}

struct Admin {
    addr: SocketAddr,
    base: AdminBase,
    shutdown: CancellationToken,
}

impl Drop for Admin {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start(listen: &str, token_file: Option<PathBuf>, ready: Arc<AtomicBool>) -> Admin {
    let listener = tokio::net::TcpListener::bind(listen).await.unwrap();
    let bound = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let mut base = AdminBase::new(
        Arc::new(move || {
            if ready.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err("loading".to_owned())
            }
        }),
        Identity {
            name: "test",
            version: "1.2.3",
            config: serde_json::json!({"file": "/etc/test.yaml"}),
        },
        token_file,
        bound,
        shutdown.clone(),
    );
    base.debug.log = Some(log().1.clone());
    let router = admin::router(base.clone());
    tokio::spawn(admin::serve(listener, router, shutdown.clone()));
    Admin {
        addr: SocketAddr::from(([127, 0, 0, 1], bound.port())),
        base,
        shutdown,
    }
}

/// `method path` with an optional bearer token and body; status and body.
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, bytes::Bytes) {
    let client = Client::builder(TokioExecutor::new()).build_http();
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(t) = token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .body(Full::new(bytes::Bytes::from(body.to_owned())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

async fn text(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
    let (s, b) = call(addr, method, path, token, body).await;
    (s, String::from_utf8_lossy(&b).into_owned())
}

#[test]
fn a_debug_line_appears_only_after_its_module_is_raised() {
    let buf = Buffer::default();
    let writer = buf.clone();
    let (sub, control) =
        logging::subscriber(move || writer.clone(), Format::Text, false, "info").unwrap();
    tracing::subscriber::with_default(sub, || {
        tracing::debug!(target: "meshhub::pipeline", "first debug line");
        assert!(!buf.text().contains("first debug line"));
        let modules = std::collections::BTreeMap::from([(
            "meshhub::pipeline".to_owned(),
            "debug".to_owned(),
        )]);
        let filter = control.set_modules(&modules).unwrap();
        assert_eq!(filter, "info,meshhub::pipeline=debug");
        tracing::debug!(target: "meshhub::pipeline", "second debug line");
        tracing::debug!(target: "meshhub::store", "other module line");
        assert!(buf.text().contains("second debug line"));
        assert!(!buf.text().contains("other module line"));
    });
}

#[test]
fn text_logs_have_no_colour_when_asked_not_to() {
    let buf = Buffer::default();
    let writer = buf.clone();
    let (sub, _) =
        logging::subscriber(move || writer.clone(), Format::Text, false, "info").unwrap();
    tracing::subscriber::with_default(sub, || tracing::info!(answer = 42, "plain"));
    assert!(buf.text().contains("plain"));
    assert!(!buf.text().contains('\u{1b}'), "{:?}", buf.text());
}

#[test]
fn an_invalid_filter_is_refused_and_the_old_one_kept() {
    let (_, control) = logging::subscriber(std::io::sink, Format::Json, false, "warn").unwrap();
    let err = control.set("meshhub=notalevel").unwrap_err();
    assert!(err.to_string().contains("invalid log filter"), "{err}");
    assert_eq!(control.filter(), "warn");
}

#[tokio::test]
async fn readyz_follows_the_readiness_check_and_healthz_is_always_ok() {
    let ready = Arc::new(AtomicBool::new(false));
    let a = start("127.0.0.1:0", None, ready.clone()).await;
    assert_eq!(
        text(a.addr, "GET", "/healthz", None, "").await,
        (200, "ok\n".into())
    );
    assert_eq!(
        text(a.addr, "GET", "/readyz", None, "").await,
        (503, "not ready: loading\n".into())
    );
    ready.store(true, Ordering::SeqCst);
    assert_eq!(text(a.addr, "GET", "/readyz", None, "").await.0, 200);
    assert_eq!(text(a.addr, "GET", "/metrics", None, "").await.0, 200);
}

#[tokio::test]
async fn a_module_raised_at_runtime_logs_its_debug_lines() {
    let (buf, control) = log();
    let a = start("127.0.0.1:0", None, Arc::default()).await;
    tracing::debug!(target: "runtime_probe", "probe line one");
    assert!(!buf.text().contains("probe line one"));

    let (status, body) = text(
        a.addr,
        "PUT",
        "/debug/logging",
        None,
        r#"{"modules": {"runtime_probe": "debug"}}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        doc["filter"]
            .as_str()
            .unwrap()
            .ends_with("runtime_probe=debug"),
        "{doc}"
    );
    tracing::debug!(target: "runtime_probe", "probe line two");
    assert!(buf.text().contains("probe line two"), "{}", buf.text());

    let (status, body) = text(a.addr, "GET", "/debug/logging", None, "").await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["filter"],
        control.filter()
    );

    // Errors are 400 with a message, and the filter stays.
    let before = control.filter();
    for (bad, says) in [
        (r#"{"filter": "runtime_probe=loud"}"#, "invalid log filter"),
        (
            r#"{"filter": "info", "modules": {"a": "debug"}}"#,
            "exactly one",
        ),
        (r#"{"level": "info"}"#, "expected"),
        ("not json", "expected"),
    ] {
        let (status, body) = text(a.addr, "PUT", "/debug/logging", None, bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body.contains(says), "{bad}: {body}");
    }
    assert_eq!(control.filter(), before);
}

#[tokio::test]
async fn state_changing_endpoints_need_the_token_when_one_is_configured() {
    let dir = std::env::temp_dir().join(format!("meshhub-runtime-admin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, "right-token\n").unwrap();
    let a = start("127.0.0.1:0", Some(token_file), Arc::default()).await;
    let put = |token| {
        let addr = a.addr;
        async move {
            text(
                addr,
                "PUT",
                "/debug/logging",
                token,
                r#"{"modules": {"auth_probe": "warn"}}"#,
            )
            .await
        }
    };
    let (status, body) = put(None).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("Authorization: Bearer"), "{body}");
    assert_eq!(put(Some("wrong")).await.0, 403);
    assert_eq!(put(Some("right-token")).await.0, 200);
    // The profile is guarded too; reading is not.
    assert_eq!(
        text(a.addr, "GET", "/debug/pprof/profile?seconds=1", None, "")
            .await
            .0,
        401
    );
    assert_eq!(text(a.addr, "GET", "/debug/logging", None, "").await.0, 200);
    assert_eq!(text(a.addr, "GET", "/debug/process", None, "").await.0, 200);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn without_a_token_a_non_loopback_admin_port_refuses_changes() {
    let a = start("0.0.0.0:0", None, Arc::default()).await;
    let (status, body) = text(
        a.addr,
        "PUT",
        "/debug/logging",
        None,
        r#"{"filter": "trace"}"#,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("--admin-token-file"), "{body}");
    assert_ne!(log().1.filter(), "trace");
    assert_eq!(text(a.addr, "GET", "/debug/memory", None, "").await.0, 200);
}

#[tokio::test]
async fn process_and_memory_describe_this_process() {
    let a = start("127.0.0.1:0", None, Arc::default()).await;
    let (status, body) = text(a.addr, "GET", "/debug/process", None, "").await;
    assert_eq!(status, 200);
    let p: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(p["name"], "test");
    assert_eq!(p["version"], "1.2.3");
    assert_eq!(p["pid"], std::process::id());
    assert_eq!(p["config"]["file"], "/etc/test.yaml");
    assert!(p["uptime_seconds"].as_f64().unwrap() >= 0.0);
    assert!(!p["args"].as_array().unwrap().is_empty());

    let (status, body) = text(a.addr, "GET", "/debug/memory", None, "").await;
    assert_eq!(status, 200);
    let m: serde_json::Value = serde_json::from_str(&body).unwrap();
    let rss = m["rss_bytes"].as_u64().unwrap();
    assert!(rss > 1024 * 1024, "{m}");
    assert!(m["peak_rss_bytes"].as_u64().unwrap() >= rss, "{m}");
    assert!(m["tokio_alive_tasks"].as_u64().unwrap() >= 1, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_profile_is_pprof_protobuf_and_one_runs_at_a_time() {
    let a = start("127.0.0.1:0", None, Arc::default()).await;
    assert_eq!(
        text(a.addr, "GET", "/debug/pprof/profile?seconds=0", None, "")
            .await
            .0,
        400
    );
    assert_eq!(
        text(a.addr, "GET", "/debug/pprof/profile?seconds=61", None, "")
            .await
            .0,
        400
    );

    let addr = a.addr;
    let first =
        tokio::spawn(
            async move { call(addr, "GET", "/debug/pprof/profile?seconds=2", None, "").await },
        );
    eventually("the profile to start", async || {
        a.base.debug.profiler.busy()
    })
    .await;
    let (status, body) = text(a.addr, "GET", "/debug/pprof/profile?seconds=1", None, "").await;
    assert_eq!(status, 409, "{body}");

    // Something to sample while it runs (the sampler starts only after it
    // read the binary's symbols): spin until the answer is in.
    let stop = Arc::new(AtomicBool::new(false));
    let spin = std::thread::spawn({
        let stop = stop.clone();
        move || {
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            x
        }
    });
    let (status, bytes) = first.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    spin.join().unwrap();
    assert_eq!(status, 200);
    let profile = pprof::protos::Profile::decode(bytes).unwrap();
    assert!(!profile.sample_type.is_empty());
    assert!(!profile.sample.is_empty(), "no samples of a busy thread");
    assert!(!a.base.debug.profiler.busy());
}

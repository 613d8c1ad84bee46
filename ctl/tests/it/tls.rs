//! `meshhubctl watch` dials the hub's gRPC port with mutual TLS (rcgen
//! certificates, real gRPC over loopback): a certificate for cluster east
//! reads east; without a client certificate the handshake fails.

use std::path::Path;

use meshhub::app::Hub;
use meshhub_e2e::inproc::mtls_hub;
use meshhub_testkit::objects::VS;

use crate::support::meshhubctl;

fn ctl_args(dir: &Path, hub: &Hub, who: &str, cluster: &str) -> Vec<String> {
    let p = |name: String| -> String { dir.join(name).display().to_string() };
    vec![
        "watch".into(),
        "--server".into(),
        format!("https://{}", hub.grpc_addr()),
        "--tls-ca".into(),
        p("ca.pem".into()),
        "--tls-cert".into(),
        p(format!("{who}.pem")),
        "--tls-key".into(),
        p(format!("{who}-key.pem")),
        "--tls-server-name".into(),
        "localhost".into(),
        "--cluster".into(),
        cluster.into(),
        "-c".into(),
        VS.into(),
        "--once".into(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meshhubctl_watches_a_tls_port() {
    let dir = tempfile::tempdir().unwrap();
    let hub = mtls_hub(dir.path()).await;
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        meshhubctl(&args).await
    };
    let out = run(ctl_args(dir.path(), &hub, "east", "east")).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("name: reviews"), "{stdout}");
    assert!(!stdout.contains("ratings"), "{stdout}");
    // Without a client certificate, the handshake fails.
    let mut args = ctl_args(dir.path(), &hub, "east", "east");
    args.drain(5..9);
    let out = run(args).await;
    assert!(!out.status.success());
    hub.shutdown().await;
}

//! `meshhubctl watch` dials the hub's gRPC port with mutual TLS (rcgen
//! certificates, real gRPC over loopback): a certificate for cluster east
//! reads east; without a client certificate the handshake fails.

use std::path::Path;
use std::time::Duration;

use clap::Parser as _;
use meshhub::app::Hub;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};

use crate::support::VS;

const EAST_ID: &str = "spiffe://east.example/ns/istio-system/sa/istiod";
const WEST_ID: &str = "spiffe://west.example/ns/istio-system/sa/istiod";

const OBJECTS: &str = r#"
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: east-ns}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: ratings, namespace: west-ns}
spec:
  hosts: [ratings]
  http:
  - route:
    - destination: {host: ratings}
"#;

/// A CA, the hub's serving certificate, and client certificates for the
/// east and west identities, in `dir`.
fn pki(dir: &Path) {
    let write = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let root = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    write("ca.pem", root.pem());
    let key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &root)
        .unwrap();
    write("server.pem", server.pem());
    write("server-key.pem", key.serialize_pem());
    for (name, id) in [("east", EAST_ID), ("west", WEST_ID)] {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![SanType::URI(id.try_into().unwrap())];
        let cert = params.signed_by(&key, &root).unwrap();
        write(&format!("{name}.pem"), cert.pem());
        write(&format!("{name}-key.pem"), key.serialize_pem());
    }
}

async fn start_hub(dir: &Path) -> Hub {
    let _ = rustls::crypto::ring::default_provider().install_default();
    pki(dir);
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    std::fs::write(dir.join("objects/vs.yaml"), OBJECTS).unwrap();
    let path = dir.join("meshhub.yaml");
    let text = "\
sources:
  - name: files
    file: {path: objects}
clusters:
  - name: east
    namespaces: [east-ns]
    identities: ['spiffe://east.example/**']
  - name: west
    namespaces: [west-ns]
    identities: ['spiffe://west.example/ns/*/sa/istiod']
grpcTls: {cert: server.pem, key: server-key.pem, clientCa: ca.pem}
debounce: {quiet: 20ms, maxWait: 200ms}
";
    std::fs::write(&path, text).unwrap();
    let args = meshhub::config::Args::parse_from([
        "meshhub",
        "--grpc-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--shutdown-grace",
        "5s",
    ]);
    let config = meshhub::config::Config::from_yaml(&args, &path, text).unwrap();
    assert!(config.access.enforced);
    let hub = Hub::start(config).await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), hub.ready())
        .await
        .expect("hub ready");
    hub
}

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
    let hub = start_hub(dir.path()).await;
    let run = |args: Vec<String>| async move {
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_meshhubctl"))
            .args(&args)
            .kill_on_drop(true)
            .output();
        tokio::time::timeout(Duration::from_secs(30), child)
            .await
            .expect("meshhubctl finishes")
            .expect("meshhubctl runs")
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

//! gRPC reflection and health on every gRPC port of the real binaries, seen
//! by an independent client: grpcurl, built from its Go module by
//! `e2e/peers/grpcurl.sh` (cached outside the repository; or set
//! `MESHHUB_GRPCURL_BIN`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use meshhub_e2e::*;

fn grpcurl_bin() -> PathBuf {
    std::env::var_os("MESHHUB_GRPCURL_BIN").map_or_else(
        || peer_script("grpcurl.sh", &[], "the reflection tests need grpcurl"),
        PathBuf::from,
    )
}

/// `grpcurl -plaintext <addr> <args…>`: its stdout, or a panic with stderr.
fn grpcurl(bin: &Path, addr: SocketAddr, args: &[&str]) -> String {
    let out = Command::new(bin)
        .arg("-plaintext")
        .arg(addr.to_string())
        .args(args)
        .output()
        .expect("grpcurl runs");
    assert!(
        out.status.success(),
        "grpcurl {addr} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn grpcurl_lists_describes_and_checks_every_grpc_port() {
    let _turn = turn(module_path!());
    let bin = grpcurl_bin();
    let dir = tempfile::tempdir().unwrap();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/meshhub.yaml");
    let hub = HubProc::start("hub", &config, dir.path());
    let agent = AgentProc::start("east", dir.path(), dir.path(), None);

    for (port, addr, own) in [
        ("hub", hub.grpc, "istio.mcp.v1alpha1.ResourceSource"),
        (
            "agent re-serve",
            agent.grpc,
            "istio.mcp.v1alpha1.ResourceSource",
        ),
        ("agent sink", agent.sink, "istio.mcp.v1alpha1.ResourceSink"),
    ] {
        let listed: Vec<String> = grpcurl(&bin, addr, &["list"])
            .lines()
            .map(str::to_owned)
            .collect();
        for want in [own, "grpc.health.v1.Health"] {
            assert!(listed.iter().any(|l| l == want), "{port}: {listed:?}");
        }
        let described = grpcurl(&bin, addr, &["describe", own]);
        assert!(
            described.contains("rpc EstablishResourceStream"),
            "{port}: {described}"
        );
        let health = grpcurl(&bin, addr, &["grpc.health.v1.Health/Check"]);
        assert!(health.contains("\"SERVING\""), "{port}: {health}");
    }
}

//! The Kubernetes Gateway API module (`sigs.k8s.io/gateway-api`) in the Go
//! module cache: its CRDs, installed into real API servers by the tests.
//! Read at test time, never committed.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::kube::{ControlPlanes, apply_yaml, rbac_manifest};

/// The release `e2e/peers/gateway-api.sh` downloads by default (Istio 1.31
/// builds against it).
pub const VERSION: &str = "v1.6.0";

/// The module's directory: `MESHHUB_GATEWAY_API_DIR` if set, else what
/// `e2e/peers/gateway-api.sh` prints (it downloads the module when the
/// cache lacks it).
pub fn module_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::var_os("MESHHUB_GATEWAY_API_DIR")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                crate::peer_script(
                    "gateway-api.sh",
                    &[VERSION],
                    "the Gateway API tests need its CRDs",
                )
            });
        assert!(
            dir.is_dir(),
            "the Gateway API module is not at {}",
            dir.display()
        );
        dir
    })
    .clone()
}

/// The CRD files of `channel` (`standard` or `experimental`): every
/// `config/crd/<channel>/*.yaml` that holds CRDs (not the
/// ValidatingAdmissionPolicy beside them), by name.
pub fn crd_files(channel: &str) -> Vec<PathBuf> {
    let dir = module_dir().join("config/crd").join(channel);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.starts_with("gateway.networking")
                && name.ends_with(".yaml")
                && !name.contains("_vap_")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no CRDs under {}", dir.display());
    files
}

/// Installs the Gateway API CRDs of `channel` into cluster `name` and
/// waits until each is established.
pub async fn install(planes: &ControlPlanes, name: &str, channel: &str) {
    for file in crd_files(channel) {
        planes.install_crds_file(name, &file, &[]).await;
    }
}

/// Makes remote cluster `name` ready for an applying agent and its own
/// istiod: namespaces `meshhub` and `istio-system`, the agent's RBAC
/// (deploy/rbac/sink-agent.yaml); returns the agent's kubeconfig (its
/// ServiceAccount's).
pub async fn prepare_remote(planes: &ControlPlanes, name: &str) -> PathBuf {
    planes.namespace(name, "meshhub").await;
    planes.namespace(name, "istio-system").await;
    apply_yaml(
        &planes.client(name).await,
        &rbac_manifest("sink-agent.yaml"),
    )
    .await;
    planes
        .service_account_kubeconfig(name, "meshhub", "meshhub-agent")
        .await
}

/// A sink agent for cluster `name` applying to its API with `kubeconfig`.
pub fn applying_agent(
    name: &str,
    dir: &std::path::Path,
    logs: &std::path::Path,
    kubeconfig: &std::path::Path,
) -> crate::AgentProc {
    crate::AgentProc::start_with(
        name,
        dir,
        logs,
        None,
        &[
            "--apply".to_owned(),
            "--apply-kubeconfig".to_owned(),
            kubeconfig.display().to_string(),
        ],
    )
}

/// Gateway `bookinfo/ingress` of class `istio`, one HTTP listener `http`
/// on port 80 taking routes of its own namespace.
pub const GATEWAY: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: ingress, namespace: bookinfo}
spec:
  gatewayClassName: istio
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
";

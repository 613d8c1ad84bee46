//! Helm, built from its Go module by `e2e/peers/helm.sh` (cached outside the
//! repository), to render the charts of `deploy/charts/` exactly as users'
//! `helm install` would, and a server-side apply of what it rendered.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};

use crate::kube::{TEST_MANAGER, api_for};

/// `helm`: `MESHHUB_HELM_BIN` if set, else what `e2e/peers/helm.sh` builds
/// (about 3 minutes cold on 2 cores). Runs once per test process.
pub fn helm_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("MESHHUB_HELM_BIN") {
            return PathBuf::from(bin);
        }
        crate::peer_script("helm.sh", &[], "the chart tests need helm")
    })
}

/// The chart directory `deploy/charts/<name>`.
pub fn chart(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/charts")
        .join(name)
}

/// The Kubernetes version charts are rendered for: the harness's API
/// server. (Helm built with `go install` carries no default Kubernetes
/// version of its own: it assumes v1.20.)
pub const KUBE_VERSION: &str = "v1.35.4";

/// `helm template <release> <chart> -n <namespace> <args…>` for
/// [`KUBE_VERSION`]: the rendered manifests, or Helm's error text.
pub fn template(
    release: &str,
    chart_name: &str,
    namespace: &str,
    args: &[&str],
) -> Result<String, String> {
    let out = Command::new(helm_bin())
        .arg("template")
        .arg(release)
        .arg(chart(chart_name))
        .args(["--namespace", namespace, "--kube-version", KUBE_VERSION])
        .args(args)
        .output()
        .expect("helm runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `helm lint <chart> <args…>`: success, or Helm's output.
pub fn lint(chart_name: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(helm_bin())
        .arg("lint")
        .arg(chart(chart_name))
        .args(["--kube-version", KUBE_VERSION])
        .args(args)
        .output()
        .expect("helm runs");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The objects of rendered manifests.
pub fn objects(manifests: &str) -> Vec<DynamicObject> {
    meshhub_proto::transcode::parse_yaml(manifests)
        .into_iter()
        .map(|doc| {
            let obj = doc.unwrap_or_else(|e| panic!("rendered YAML does not parse: {e}"));
            let value = serde_json::to_value(&obj).expect("object as JSON");
            serde_json::from_value(value).expect("a Kubernetes object")
        })
        .collect()
}

/// `kind/name` of an object.
pub fn key(obj: &DynamicObject) -> String {
    format!(
        "{}/{}",
        obj.types.as_ref().map_or("?", |t| t.kind.as_str()),
        obj.metadata.name.as_deref().unwrap_or("?")
    )
}

/// Server-side applies every object into `namespace` (namespaced kinds
/// without one, as `helm install -n` does); with `dry_run`, as `dryRun=All`,
/// so the API server runs every admission and validation step and stores
/// nothing. The objects it refused, with the reason.
pub async fn apply(
    client: &kube::Client,
    objects: &[DynamicObject],
    namespace: &str,
    dry_run: bool,
) -> Vec<String> {
    let mut refused = Vec::new();
    for obj in objects {
        let mut obj = obj.clone();
        let types = obj.types.as_ref().expect("apiVersion and kind");
        let gvk = GroupVersionKind::try_from(types).expect("a GVK");
        let (_, caps) = match discovery::pinned_kind(client, &gvk).await {
            Ok(found) => found,
            Err(e) => {
                refused.push(format!("{}: {e}", key(&obj)));
                continue;
            }
        };
        if caps.scope == Scope::Namespaced && obj.metadata.namespace.is_none() {
            obj.metadata.namespace = Some(namespace.to_owned());
        }
        let obj = &obj;
        let api = api_for(client, obj).await;
        let mut params = PatchParams::apply(TEST_MANAGER).force();
        if dry_run {
            params = params.dry_run();
        }
        let name = obj.metadata.name.clone().unwrap_or_default();
        if let Err(e) = api.patch(&name, &params, &Patch::Apply(obj)).await {
            refused.push(format!("{}: {e}", key(obj)));
        }
    }
    refused
}

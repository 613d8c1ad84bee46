//! Istio's API module (`istio.io/api`) of the newest release meshhub's
//! schema covers, read at test time from the Go module cache: its CRDs and
//! `.proto` files are the facts the schema-currency test checks meshhub's
//! own schema against. Never copied into the repository.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The newest `istio.io/api` release meshhub speaks (the module proxy's
/// newest); `e2e/peers/istio-api.sh` defaults to the same.
pub const VERSION: &str = "v1.32.0";

/// Names the module directory (set by `.ci/run`); when set, the module is
/// required and a missing one fails the test.
pub const DIR_VAR: &str = "MESHHUB_ISTIO_API_DIR";

/// Where the module is.
#[derive(Debug)]
pub enum Module {
    /// The module's directory.
    Found(PathBuf),
    /// No Go toolchain to download it with, outside CI: the caller skips
    /// and prints why.
    NoGo,
}

/// The module directory: `MESHHUB_ISTIO_API_DIR` if set, else what
/// `e2e/peers/istio-api.sh` prints (it downloads the module into the Go
/// module cache when missing). Without Go it is [`Module::NoGo`], except
/// where skipping would hide the test: with `CI` set it panics.
pub fn module() -> Module {
    if let Some(dir) = std::env::var_os(DIR_VAR).filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        assert!(
            crds(&dir).is_file(),
            "{DIR_VAR}={} holds no kubernetes/customresourcedefinitions.gen.yaml",
            dir.display()
        );
        return Module::Found(dir);
    }
    let go = Command::new("go").arg("version").output();
    if !go.is_ok_and(|o| o.status.success()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but there is no Go toolchain to download istio.io/api@{VERSION} with \
             (install Go, or set {DIR_VAR})"
        );
        return Module::NoGo;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../e2e/peers/istio-api.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(VERSION)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("can't run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} {VERSION} failed ({}): it downloads istio.io/api from the Go module proxy",
        script.display(),
        out.status
    );
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        crds(&dir).is_file(),
        "istio.io/api@{VERSION} is not at {}",
        dir.display()
    );
    Module::Found(dir)
}

/// The module's CRDs of every Istio kind.
pub fn crds(dir: &Path) -> PathBuf {
    dir.join("kubernetes/customresourcedefinitions.gen.yaml")
}

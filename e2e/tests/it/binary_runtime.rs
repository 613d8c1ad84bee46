//! The real `meshhub` binary: copied to a temporary directory and started
//! with no flags but its ports from another working directory, it serves
//! the embedded example configuration; its log filter changes at runtime
//! through `meshhubctl log-level` and the change shows in its own log; its
//! logs carry no colour when stderr is not a terminal.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use meshhub_e2e::{bin_dir, turn};
use meshhub_testkit::eventually_blocking;
use meshhub_testkit::http::get_blocking;
use serde_json::Value;

/// A child killed and reaped when dropped, its stderr in a file.
struct Running {
    child: Child,
    stderr: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The fields of the first JSON log line with `message`.
    fn fields(&self, message: &str) -> Option<Value> {
        self.stderr()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["fields"]["message"] == message)
            .map(|v| v["fields"].clone())
    }
}

/// Copies the binary to `dir/bin` and starts it from `dir/work` (empty).
fn start_copy(dir: &Path, env: &[(&str, &str)]) -> Running {
    let bin = dir.join("bin");
    let work = dir.join("work");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let exe = bin.join("meshhub");
    // Copied by a `cp` process, not by this one: a file this (multi-threaded)
    // test process held open for writing could be inherited by a child
    // another test forks at that moment, and exec would fail with ETXTBSY.
    let copied = Command::new("cp")
        .arg(bin_dir().join("meshhub"))
        .arg(&exe)
        .status()
        .unwrap();
    assert!(copied.success(), "cp of the meshhub binary failed");
    let stderr = dir.join("meshhub.err");
    let child = Command::new(&exe)
        .args(["--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
        .current_dir(&work)
        .env_remove("MESHHUB_CONFIG")
        .env_remove("NO_COLOR")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    Running { child, stderr }
}

fn status(admin: SocketAddr) -> Value {
    let (code, body) = get_blocking(admin, "/status").unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn east_virtual_services(admin: SocketAddr) -> u64 {
    let s = status(admin);
    s["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "east")
        .and_then(|g| {
            g["collections"]["istio/networking/v1alpha3/virtualservices"]["resources"].as_u64()
        })
        .unwrap_or(0)
}

fn vs(name: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: bookinfo\nspec:\n  hosts: [{name}]\n  http:\n  - route:\n    - destination:\n        host: {name}\n"
    )
}

fn meshhubctl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin_dir().join("meshhubctl"))
        .args(args)
        .env_remove("MESHHUB_ADMIN_TOKEN")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_copied_binary_serves_its_embedded_default_and_takes_log_levels_at_runtime() {
    let _turn = turn(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let hub = start_copy(
        dir.path(),
        &[("MESHHUB_LOG_FORMAT", "json"), ("MESHHUB_LOG", "info")],
    );
    let started = eventually_blocking("meshhub started", || hub.fields("meshhub started"));
    let admin: SocketAddr = started["admin.addr"].as_str().unwrap().parse().unwrap();
    let embedded = hub
        .stderr()
        .lines()
        .find(|l| l.contains("serving the example configuration embedded in this binary"))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .expect("the log says which default runs");
    let config = PathBuf::from(embedded["fields"]["config"].as_str().unwrap());
    assert!(
        !config.starts_with(env!("CARGO_MANIFEST_DIR")),
        "{}",
        config.display()
    );
    assert!(!config.starts_with(dir.path()), "{}", config.display());

    eventually_blocking("ready", || {
        get_blocking(admin, "/readyz").filter(|(c, _)| *c == 200)
    });
    let served = east_virtual_services(admin);
    assert!(served > 0, "{}", status(admin));
    assert_eq!(
        status(admin)["config"]["file"],
        config.display().to_string()
    );

    // A change below the embedded directory: no debug line at `info`.
    let objects = config.parent().unwrap().join("bookinfo");
    std::fs::write(objects.join("probe-one.yaml"), vs("probe-one")).unwrap();
    eventually_blocking("probe-one served", || {
        (east_virtual_services(admin) == served + 1).then_some(())
    });
    assert!(!hub.stderr().contains("probe-one.yaml"), "{}", hub.stderr());

    // Read and raise the file source's level through meshhubctl.
    let url = format!("http://{admin}");
    let (ok, out, err) = meshhubctl(&["log-level", "--admin", &url]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "info");
    let (ok, out, err) = meshhubctl(&["log-level", "--admin", &url, "meshhub::source=debug"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "info,meshhub::source=debug");
    let changed = hub
        .fields("log filter changed")
        .expect("the change is logged");
    assert_eq!(changed["log.filter"], "info,meshhub::source=debug");

    std::fs::write(objects.join("probe-two.yaml"), vs("probe-two")).unwrap();
    let line = eventually_blocking("a debug line of the file source", || {
        hub.stderr()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| {
                v["fields"]["message"] == "file changed"
                    && v["fields"]["file"]
                        .as_str()
                        .is_some_and(|f| f.contains("probe-two"))
            })
    });
    assert_eq!(line["level"], "DEBUG");

    // An invalid filter is refused with the reason.
    let (ok, _, err) = meshhubctl(&["log-level", "--admin", &url, "--replace", "meshhub=loud"]);
    assert!(!ok);
    assert!(
        err.contains("400") && err.contains("invalid log filter"),
        "{err}"
    );
}

#[test]
fn text_logs_have_no_colour_when_stderr_is_a_file() {
    let _turn = turn(module_path!());
    let dir = tempfile::tempdir().unwrap();
    let hub = start_copy(dir.path(), &[("MESHHUB_LOG_FORMAT", "text")]);
    eventually_blocking("meshhub started", || {
        hub.stderr().contains("meshhub started").then_some(())
    });
    let text = hub.stderr();
    assert!(!text.contains('\u{1b}'), "{text:?}");
}

//! Hostile and broken input in a watched file source, with the hub running
//! in-process: a YAML alias bomb, a 50 MB file, symlink loops, a file with a
//! non-UTF-8 name, a directory replaced by a file. The hub stays up, the
//! other files keep being served (and later edits still arrive), and the
//! bad files are reported on `/status` and in `meshhub_objects_rejected`.

use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use meshhub::app::Hub;
use meshhub_e2e::inproc::hub_of_text;
use meshhub_e2e::yaml::files_hub;
use meshhub_testkit::http;
use meshhub_testkit::mcp::Subscription;
use meshhub_testkit::objects::{self, VS};
use meshhub_testkit::wait::eventually_some;

async fn start(dir: &Path) -> Hub {
    hub_of_text(&dir.join("meshhub.yaml"), &files_hub("objects", "", "")).await
}

/// A virtual service routing to its own name.
fn vs(name: &str) -> String {
    objects::vs(name, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bombs_huge_files_loops_and_odd_names_leave_the_other_files_served() {
    let dir = tempfile::tempdir().unwrap();
    let objects = dir.path().join("objects");
    std::fs::create_dir_all(objects.join("sub")).unwrap();
    std::fs::write(objects.join("a.yaml"), vs("a")).unwrap();
    std::fs::write(objects.join("sub/c.yaml"), vs("c")).unwrap();
    let hub = start(dir.path()).await;
    let mut consumer = Subscription::connect(hub.grpc_addr(), VS, None)
        .await
        .unwrap();
    consumer.until_names(&["bookinfo/a", "bookinfo/c"]).await;

    // A billion-laughs document.
    let bomb =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/yaml/alias-bomb"))
            .unwrap();
    std::fs::write(objects.join("bomb.yaml"), bomb).unwrap();
    // 50 MB (sparse: the source must refuse it by its size, unread).
    std::fs::File::create(objects.join("big.yaml"))
        .unwrap()
        .set_len(50 * 1024 * 1024)
        .unwrap();
    // Symlink loops: to the directory itself, and to its parent.
    std::os::unix::fs::symlink(".", objects.join("self")).unwrap();
    std::fs::create_dir(objects.join("loop")).unwrap();
    std::os::unix::fs::symlink("..", objects.join("loop/up")).unwrap();
    // A non-UTF-8 file name holding a good object.
    let odd = std::ffi::OsStr::from_bytes(b"n-\xff\xfe.yaml");
    std::fs::write(objects.join(odd), vs("odd")).unwrap();
    // A directory replaced by a file.
    std::fs::remove_dir_all(objects.join("sub")).unwrap();
    std::fs::write(objects.join("sub"), "not a directory any more").unwrap();
    // And a later, ordinary edit.
    std::fs::write(objects.join("b.yaml"), vs("b")).unwrap();

    consumer
        .until_names(&["bookinfo/a", "bookinfo/b", "bookinfo/odd"])
        .await;

    // The bad files may be taken in a later round than the good ones (the
    // bomb is read to serde-saphyr's budget before it is refused): their
    // report is awaited, not assumed to come with the good files.
    let admin = hub.admin_addr();
    let rejected = eventually_some("the bad files on /status", async || {
        let status: serde_json::Value =
            serde_json::from_str(&http::get(admin, "/status").await.1).ok()?;
        let rejected = serde_json::to_string(&status["rejected"]).ok()?;
        (rejected.contains("big.yaml") && rejected.contains("bomb.yaml")).then_some(rejected)
    })
    .await;
    assert!(rejected.contains("exceed maxFileSize"), "{rejected}");
    let metrics = http::get(hub.admin_addr(), "/metrics").await.1;
    let value = metrics
        .lines()
        .find(|l| l.starts_with("meshhub_objects_rejected "))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok());
    assert!(value.is_some_and(|n| n >= 2.0), "{metrics}");
    hub.shutdown().await;
}

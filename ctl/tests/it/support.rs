//! What the modules share: the deadline, polling, and a hub started
//! in-process on loopback from a configuration file.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use clap::Parser as _;
use meshhub::app::Hub;
use meshhub::config::{Args, Config};

/// The virtual services collection.
pub const VS: &str = "istio/networking/v1alpha3/virtualservices";
/// How long any single wait may take.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Polls `check` until it holds or the deadline passes.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A hub on loopback ports with the configuration file `config`, ready.
pub async fn start_hub(config: &Path) -> Hub {
    let args = Args::parse_from([
        "meshhub",
        "--grpc-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--shutdown-grace",
        "5s",
        "--config",
        config.to_str().unwrap(),
    ]);
    let hub = Hub::start(Config::from_args(args).unwrap()).await.unwrap();
    tokio::time::timeout(DEADLINE, hub.ready())
        .await
        .expect("ready");
    hub
}

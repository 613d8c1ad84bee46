//! Plain HTTP GETs of the hub's admin port (`/status`, `/debug/object`),
//! with errors that name the address tried and the flag that changes it.

use std::time::Duration;

use http_body_util::BodyExt as _;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

/// `admin` as a base URL (`127.0.0.1:9902` → `http://127.0.0.1:9902`).
pub fn base(admin: &str) -> String {
    let base = admin.trim_end_matches('/');
    if base.contains("://") {
        base.to_owned()
    } else {
        format!("http://{base}")
    }
}

/// `GET <admin><path>`: the status code and the body as text.
pub async fn get(
    admin: &str,
    path: &str,
    timeout: Duration,
) -> Result<(http::StatusCode, String), String> {
    let base = base(admin);
    let uri: http::Uri = format!("{base}{path}")
        .parse()
        .map_err(|e| format!("--admin {admin:?}: {e}"))?;
    let client = Client::builder(TokioExecutor::new()).build_http::<String>();
    let unreachable = |e: &dyn std::error::Error| {
        let mut m = e.to_string();
        let mut cur = e.source();
        while let Some(c) = cur {
            m.push_str(": ");
            m.push_str(&c.to_string());
            cur = c.source();
        }
        format!(
            "cannot reach the hub's admin port at {base}: {m}; is the hub running? \
             Pass its admin address with --admin (or MESHHUB_ADMIN)"
        )
    };
    let fetch = async {
        let response = client.get(uri).await.map_err(|e| unreachable(&e))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| unreachable(&e))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    };
    tokio::time::timeout(timeout, fetch).await.map_err(|_| {
        format!(
            "no answer from {base}{path} within {timeout:?} (raise --timeout, or check --admin)"
        )
    })?
}

/// `GET <admin><path>`, which must answer 200.
pub async fn get_ok(admin: &str, path: &str, timeout: Duration) -> Result<String, String> {
    let (status, text) = get(admin, path, timeout).await?;
    if !status.is_success() {
        return Err(format!(
            "{}{path} answered {status}: {}",
            base(admin),
            text.trim()
        ));
    }
    Ok(text)
}

/// The parts of `/status` that name clusters.
#[derive(Debug, Deserialize)]
pub struct Clusters {
    /// Every group (`default` and each configured cluster).
    #[serde(default)]
    pub groups: Vec<Named>,
    /// Clusters with an agent, and its (ResourceSink) address.
    #[serde(default)]
    pub remotes: Vec<Remote>,
}

/// A group.
#[derive(Debug, Deserialize)]
pub struct Named {
    /// Its name.
    pub name: String,
}

/// A cluster with an agent.
#[derive(Debug, Deserialize)]
pub struct Remote {
    /// The cluster.
    pub cluster: String,
    /// The agent's ResourceSink address, as configured.
    pub address: String,
}

/// The groups and remote clusters the hub has.
pub async fn clusters(admin: &str, timeout: Duration) -> Result<Clusters, String> {
    let text = get_ok(admin, "/status", timeout).await?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{}/status: not a meshhub status document: {e}", base(admin)))
}

/// "unknown cluster" with the clusters the hub knows (asked at `admin`).
pub async fn unknown_cluster(
    cluster: &str,
    refusal: &str,
    admin: &str,
    timeout: Duration,
) -> String {
    match clusters(admin, timeout).await {
        Ok(c) => format!(
            "unknown cluster {cluster:?}; the hub knows: {}",
            c.groups
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Err(e) => {
            format!("unknown cluster {cluster:?} ({refusal}); listing the known ones failed: {e}")
        }
    }
}

/// The admin token given by `--token-file FILE` (first) or the token itself
/// (`--token`, `MESHHUB_ADMIN_TOKEN`), trimmed; `None` when neither is.
pub fn token(
    file: Option<&std::path::Path>,
    token: Option<&str>,
) -> Result<Option<String>, String> {
    match (file, token) {
        (Some(path), _) => std::fs::read_to_string(path)
            .map(|t| Some(t.trim().to_owned()))
            .map_err(|e| format!("--token-file {}: {e}", path.display())),
        (None, Some(t)) => Ok(Some(t.trim().to_owned())),
        (None, None) => Ok(None),
    }
}

//! The admin port of a hub (or a sink agent) over plain HTTP: one client
//! for every command that reads or changes something there, with errors
//! that name the address tried and the flag that changes it.

use std::time::Duration;

use http_body_util::BodyExt as _;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use meshhub_api::ErrorView;
use meshhub_api::status::StatusSummary;
use meshhub_proto::error_chain;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// `--admin` is not a URL.
    #[error("--admin {admin:?}: {source}")]
    Address {
        /// The flag's value.
        admin: String,
        /// Why it does not parse.
        source: http::Error,
    },
    /// No connection, or the connection broke.
    #[error(
        "cannot reach {port} at {base}: {cause}; is it running? \
         Pass its admin address with --admin (or MESHHUB_ADMIN)"
    )]
    Unreachable {
        /// Whose port ([`Admin::hub`], [`Admin::any`]).
        port: &'static str,
        /// The base URL.
        base: String,
        /// Every cause, in one line.
        cause: String,
    },
    /// No answer in time.
    #[error("no answer from {url} within {timeout:?} (raise --timeout, or check --admin)")]
    Timeout {
        /// What was asked.
        url: String,
        /// `--timeout`.
        timeout: Duration,
    },
}

/// An answer: its status and body.
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: http::StatusCode,
    /// The body, as text.
    pub text: String,
}

impl Answer {
    /// The body when the status is a success; otherwise the port's message
    /// (an [`ErrorView`], or the body) after `url`.
    pub fn ok(self, url: &str) -> Result<String, String> {
        if self.status.is_success() {
            return Ok(self.text);
        }
        Err(match serde_json::from_str::<ErrorView>(&self.text) {
            Ok(e) => e.error,
            Err(_) => format!("{url} answered {}: {}", self.status, self.text.trim()),
        })
    }
}

/// A client of one admin port.
#[derive(Clone, Debug)]
pub struct Admin {
    /// `--admin` as a base URL.
    base: String,
    /// `--admin` as given.
    given: String,
    /// Whose port, for messages.
    port: &'static str,
    /// `--timeout`: for each request, connection included.
    timeout: Duration,
    /// The bearer token, for state-changing requests.
    token: Option<String>,
}

impl Admin {
    /// The admin port of a hub at `admin` (`127.0.0.1:9902` or a URL).
    pub fn hub(admin: &str, timeout: Duration) -> Self {
        Self::new(admin, timeout, "the hub's admin port")
    }

    /// The admin port of a hub or a sink agent.
    pub fn any(admin: &str, timeout: Duration) -> Self {
        Self::new(admin, timeout, "the admin port")
    }

    fn new(admin: &str, timeout: Duration, port: &'static str) -> Self {
        let base = admin.trim_end_matches('/');
        Self {
            base: if base.contains("://") {
                base.to_owned()
            } else {
                format!("http://{base}")
            },
            given: admin.to_owned(),
            port,
            timeout,
            token: None,
        }
    }

    /// Sends `token` as `Authorization: Bearer` with every request.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// The URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Answer, AdminError> {
        self.send(http::Method::GET, path, &[], None::<&()>).await
    }

    /// `GET path`, which must answer 2xx with a `T`.
    pub async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, String> {
        let url = self.url(path);
        let text = self.get(path).await.map_err(|e| e.to_string())?.ok(&url)?;
        serde_json::from_str(&text).map_err(|e| format!("{url}: unexpected answer: {e}"))
    }

    /// The hub's `/status`.
    pub async fn status(&self) -> Result<StatusSummary, String> {
        let url = self.url("/status");
        let text = self.get("/status").await.map_err(|e| e.to_string())?;
        let text = text.ok(&url)?;
        serde_json::from_str(&text)
            .map_err(|e| format!("{url}: not a meshhub /status document: {e}"))
    }

    /// `method path` with `headers` and `body` as JSON.
    pub async fn send<B: Serialize>(
        &self,
        method: http::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&B>,
    ) -> Result<Answer, AdminError> {
        let url = self.url(path);
        let mut request = http::Request::builder().method(method).uri(&url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(t) = &self.token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let payload = match body {
            Some(b) => {
                request = request.header(http::header::CONTENT_TYPE, "application/json");
                serde_json::to_string(b).expect("request bodies serialize")
            }
            None => String::new(),
        };
        let request = request
            .body(payload)
            .map_err(|source| AdminError::Address {
                admin: self.given.clone(),
                source,
            })?;
        let unreachable = |e: &dyn std::error::Error| AdminError::Unreachable {
            port: self.port,
            base: self.base.clone(),
            cause: error_chain(e),
        };
        let client = Client::builder(TokioExecutor::new()).build_http::<String>();
        let call = async {
            let response = client.request(request).await.map_err(|e| unreachable(&e))?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| unreachable(&e))?
                .to_bytes();
            Ok(Answer {
                status,
                text: String::from_utf8_lossy(&body).into_owned(),
            })
        };
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| AdminError::Timeout {
                url,
                timeout: self.timeout,
            })?
    }
}

/// "unknown cluster" with the clusters the hub knows (asked at `admin`).
pub async fn unknown_cluster(cluster: &str, refusal: &str, admin: &Admin) -> String {
    match admin.status().await {
        Ok(s) => format!(
            "unknown cluster {cluster:?}; the hub knows: {}",
            group_names(&s)
        ),
        Err(e) => {
            format!("unknown cluster {cluster:?} ({refusal}); listing the known ones failed: {e}")
        }
    }
}

/// The hub's groups, comma-separated.
pub fn group_names(s: &StatusSummary) -> String {
    s.groups
        .iter()
        .map(|g| g.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
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

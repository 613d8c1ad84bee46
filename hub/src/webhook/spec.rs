//! The `webhook:` block: its serde form, defaults and checks.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use meshhub_mcp::settings::SettingError;
use meshhub_mcp::tls::reload::ServerTlsFiles;
use serde::Deserialize;

/// Default listen address of the admission webhook: every interface, since
/// the API server calls it from outside the pod.
pub const DEFAULT_WEBHOOK_ADDR: &str = "0.0.0.0:9443";
/// Default URL path of the admission webhook.
pub const DEFAULT_WEBHOOK_PATH: &str = "/validate";

/// The validating admission webhook (`webhook:`): HTTPS only, since the API
/// server calls webhooks over TLS alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookSpec {
    /// Listen address.
    pub addr: SocketAddr,
    /// The URL path AdmissionReviews are posted to.
    pub path: String,
    /// The serving certificate chain (PEM), re-read when it changes.
    pub cert: PathBuf,
    /// The serving private key (PEM), re-read when it changes.
    pub key: PathBuf,
}

impl WebhookSpec {
    /// The serving files (no client certificates: the API server does not
    /// present one).
    pub fn tls_files(&self) -> ServerTlsFiles {
        ServerTlsFiles {
            cert: self.cert.clone(),
            key: self.key.clone(),
            client_ca: None,
        }
    }
}

/// `webhook:` as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawWebhook {
    #[serde(default)]
    addr: Option<String>,
    tls: RawServerTls,
    #[serde(default)]
    path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawServerTls {
    cert: PathBuf,
    key: PathBuf,
}

impl RawWebhook {
    /// Checks the block; `base` is the configuration file's directory. The
    /// certificate and key are read now: a typo is a configuration error,
    /// not a webhook that fails every call.
    pub fn check(self, base: &Path) -> Result<WebhookSpec, SettingError> {
        let addr_text = self.addr.unwrap_or_else(|| DEFAULT_WEBHOOK_ADDR.to_owned());
        let addr: SocketAddr = addr_text.trim().parse().map_err(|e| {
            SettingError::new(
                "addr",
                format!("{addr_text:?}: {e} (expected ip:port, e.g. 0.0.0.0:9443)"),
            )
        })?;
        let path = self
            .path
            .map(|p| p.trim().to_owned())
            .unwrap_or_else(|| DEFAULT_WEBHOOK_PATH.to_owned());
        if !path.starts_with('/') || path.contains(char::is_whitespace) || path.contains('?') {
            return Err(SettingError::new(
                "path",
                format!("{path:?} must be a URL path starting with '/'"),
            ));
        }
        let resolve = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let spec = WebhookSpec {
            addr,
            path,
            cert: resolve(self.tls.cert),
            key: resolve(self.tls.key),
        };
        meshhub_mcp::tls::reload::check(&spec.tls_files())
            .map_err(|e| SettingError::new("tls", e.to_string()))?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests;

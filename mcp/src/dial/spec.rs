//! A peer to dial as configured: `address`, `tls`, `connectTimeout` and
//! `reconnect`, the same four keys wherever meshhub dials (the hub's
//! `clusters[].agent` and `sources[].mcp`, the sink agent's pull mode).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tonic::transport::Endpoint;

use super::{ClientTlsFiles, DialError, DialTarget};
use crate::reconnect::{RawReconnect, ReconnectPolicy};
use crate::settings::{SettingError, duration};

/// A checked peer to dial.
#[derive(Clone, Debug, PartialEq)]
pub struct DialSpec {
    /// `http://host:port` (h2c), or `https://host:port` with `tls`.
    pub address: String,
    /// TLS to the peer (required with `https://`); the files are read again
    /// at every connection attempt.
    pub tls: Option<ClientTlsFiles>,
    /// How long a connection attempt may take.
    pub connect_timeout: Duration,
    /// Backoff between attempts (full jitter; reset after a healthy stream).
    pub reconnect: ReconnectPolicy,
}

impl DialSpec {
    /// The endpoint to dial: meshhub's transport settings (windows,
    /// keepalives: a silent partition is noticed within interval +
    /// timeout, not at the next send) and the connect timeout. The TLS
    /// files are checked now and read again at every connection attempt,
    /// so rotated client certificates are used by the next one.
    pub fn target(&self) -> Result<DialTarget, DialError> {
        let endpoint =
            Endpoint::from_shared(self.address.clone()).map_err(|source| DialError::Address {
                address: self.address.clone(),
                source,
            })?;
        let endpoint = crate::transport::tune(endpoint).connect_timeout(self.connect_timeout);
        DialTarget::new(endpoint, self.tls.clone())
    }
}

/// What differs between the places that dial: the default connect timeout
/// and which port an address without one should name.
#[derive(Clone, Copy, Debug)]
pub struct DialDefaults {
    /// `connectTimeout` when not set.
    pub connect_timeout: Duration,
    /// The port meant, for the error when it is missing (`the agent's sink
    /// port, 9911 by default`).
    pub port: &'static str,
}

/// The dial keys as written. Blocks with more keys (`sources[].mcp`)
/// declare the same four fields and build this from them: serde's
/// `flatten` would lose `deny_unknown_fields` and the error lines.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawDialSpec {
    /// `address`.
    pub address: String,
    /// `tls`.
    #[serde(default)]
    pub tls: Option<RawClientTls>,
    /// `connectTimeout`.
    #[serde(default, deserialize_with = "duration")]
    pub connect_timeout: Option<Duration>,
    /// `reconnect`.
    #[serde(default)]
    pub reconnect: RawReconnect,
}

/// A `tls:` block of a connection meshhub makes, as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawClientTls {
    /// `ca`: roots that verify the peer.
    pub ca: PathBuf,
    /// `cert`: our client certificate (mutual TLS), with `key`.
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// `key`, with `cert`.
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// `serverName`: the name to verify (default: the address's host).
    #[serde(default)]
    pub server_name: Option<String>,
}

impl RawDialSpec {
    /// Checks the block (relative paths are resolved against `base`, the
    /// configuration file's directory) and fills in the defaults. The TLS
    /// files are read now: a typo is a configuration error, not a dialer
    /// that fails forever.
    pub fn check(self, base: &Path, defaults: DialDefaults) -> Result<DialSpec, SettingError> {
        let (address, tls) = client_address(&self.address, self.tls, base, defaults.port)?;
        let connect_timeout = self.connect_timeout.unwrap_or(defaults.connect_timeout);
        if connect_timeout.is_zero() {
            return Err(SettingError::new("connectTimeout", "must be positive"));
        }
        let reconnect = self.reconnect.check().map_err(|e| e.within("reconnect"))?;
        Ok(DialSpec {
            address,
            tls,
            connect_timeout,
            reconnect,
        })
    }
}

/// Checks the address and TLS block (`http://host:port`, or
/// `https://host:port` with `tls`).
fn client_address(
    address: &str,
    tls: Option<RawClientTls>,
    base: &Path,
    port: &str,
) -> Result<(String, Option<ClientTlsFiles>), SettingError> {
    let address = address.trim().to_owned();
    let uri: http::Uri = address
        .parse()
        .map_err(|e| SettingError::new("address", format!("{address:?}: {e}")))?;
    let tls = tls.map(|t| ClientTlsFiles {
        ca: base.join(t.ca),
        cert: t.cert.map(|c| base.join(c)),
        key: t.key.map(|k| base.join(k)),
        server_name: t.server_name,
    });
    match (uri.scheme_str(), &tls) {
        (Some("http"), None) | (Some("https"), Some(_)) => {}
        (Some("https"), None) => {
            return Err(SettingError::new(
                "tls",
                format!(
                    "{address:?} is https://: give tls.ca (and tls.cert/tls.key for mutual TLS)"
                ),
            ));
        }
        (Some("http"), Some(_)) => {
            return Err(SettingError::new(
                "address",
                format!("{address:?}: a tls block needs an https:// address"),
            ));
        }
        _ => {
            return Err(SettingError::new(
                "address",
                format!("{address:?}: must be http://host:port or https://host:port"),
            ));
        }
    }
    if let Some(t) = &tls {
        if t.cert.is_some() != t.key.is_some() {
            return Err(SettingError::new("tls", "cert and key go together"));
        }
        t.client_config()
            .map_err(|e| SettingError::new("tls", e.to_string()))?;
    }
    if uri.port_u16().is_none() {
        return Err(SettingError::new(
            "address",
            format!("{address:?}: needs a port ({port})"),
        ));
    }
    Ok((address, tls))
}

#[cfg(test)]
mod tests;

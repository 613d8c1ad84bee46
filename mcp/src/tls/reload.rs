//! A server TLS configuration re-read when its files change.
//!
//! cert-manager, Istio and the kubelet (Secret volumes) replace certificate
//! files while a server runs. [`ReloadingServerTls`] holds the current
//! `rustls::ServerConfig` behind an [`ArcSwap`]: every new handshake takes
//! the current one, established connections keep the one they shook hands
//! with, so a rotation drops no stream. A new set of files that does not
//! load (half written, key not matching the certificate, not PEM) is
//! reported — log, [`METRIC_RELOADS`]`{result="error"}`, and
//! [`TlsStatus::last_error`] — and the current configuration kept.
//!
//! Every TLS port of meshhub uses it (the gRPC ports with HTTP/2 only, the
//! hub's admission webhook with HTTP/2 and HTTP/1.1: the ALPN protocols
//! are a parameter), so its metrics are one family with a `port` label.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use notify::{RecursiveMode, Watcher as _};
use rustls::RootCertStore;
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use x509_parser::prelude::{FromDer as _, X509Certificate};

/// Counter: certificate reloads, by `port` and `result` (`replaced`, `error`).
pub const METRIC_RELOADS: &str = "meshhub_tls_certificate_reloads_total";
/// Gauge: the served certificate's `notAfter`, Unix seconds, by `port`.
pub const METRIC_EXPIRY: &str = "meshhub_tls_certificate_expiry_timestamp_seconds";

/// How long file changes are gathered before the files are re-read (a
/// rotation writes the certificate and the key one after the other).
const SETTLE: Duration = Duration::from_millis(200);
/// How often the files are checked even without a file event (a watch can
/// miss changes, e.g. on some network file systems).
const POLL: Duration = Duration::from_secs(60);

/// The ALPN protocols of a gRPC port: HTTP/2 only.
pub const ALPN_H2: &[&[u8]] = &[b"h2"];
/// The ALPN protocols of an HTTPS port that also speaks HTTP/1.1 (the
/// admission webhook: API servers use either).
pub const ALPN_H2_HTTP1: &[&[u8]] = &[b"h2", b"http/1.1"];

/// The PEM files of a TLS server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// Our certificate chain.
    pub cert: PathBuf,
    /// Our private key.
    pub key: PathBuf,
    /// Roots that verify client certificates; with it, every client must
    /// present a certificate they verify (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

/// Why TLS files don't make a server configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsLoadError {
    /// A file can't be read.
    #[error("can't read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file holds no PEM block of the expected kind.
    #[error("{}: no PEM {what} found", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
        /// What was expected.
        what: &'static str,
    },
    /// rustls refuses the material (key not matching the certificate, bad
    /// CA certificate, unsupported key type).
    #[error("{}: {reason}", path.display())]
    Unusable {
        /// The file the material came from.
        path: PathBuf,
        /// What rustls says.
        reason: String,
    },
}

/// What a server's TLS is serving, for `/status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsStatus {
    /// The certificate file.
    pub cert: String,
    /// Whether client certificates are required (mutual TLS).
    pub mutual: bool,
    /// The served certificate's `notAfter` (RFC 2822), when it parses.
    pub not_after: Option<String>,
    /// How many times new files were loaded since start.
    pub reloads: u64,
    /// Why the newest files were refused, while the previous ones are
    /// served; `None` when the files on disk are the ones served.
    pub last_error: Option<String>,
}

/// The bytes of the files, to see whether they changed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pem {
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Option<Vec<u8>>,
}

/// A server TLS configuration that follows its files.
#[derive(Debug)]
pub struct ReloadingServerTls {
    port: &'static str,
    files: ServerTlsFiles,
    alpn: &'static [&'static [u8]],
    config: ArcSwap<ServerConfig>,
    loaded: Mutex<Pem>,
    status: watch::Sender<TlsStatus>,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsLoadError> {
    std::fs::read(path).map_err(|source| TlsLoadError::Read {
        path: path.to_owned(),
        source,
    })
}

fn read_all(files: &ServerTlsFiles) -> Result<Pem, TlsLoadError> {
    Ok(Pem {
        cert: read(&files.cert)?,
        key: read(&files.key)?,
        ca: files.client_ca.as_deref().map(read).transpose()?,
    })
}

fn certificates(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsLoadError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(TlsLoadError::Empty {
            path: path.to_owned(),
            what: "certificate",
        });
    }
    Ok(certs)
}

/// The `notAfter` of a certificate: RFC 2822 text and Unix seconds.
fn not_after(cert: &CertificateDer<'_>) -> Option<(String, i64)> {
    let (_, parsed) = X509Certificate::from_der(cert.as_ref()).ok()?;
    let t = parsed.validity().not_after;
    Some((t.to_rfc2822().ok()?, t.timestamp()))
}

/// Builds the server configuration (ring provider), offering `alpn`.
fn build(
    pem: &Pem,
    files: &ServerTlsFiles,
    alpn: &[&[u8]],
) -> Result<(ServerConfig, Option<(String, i64)>), TlsLoadError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(&pem.cert, &files.cert)?;
    let expiry = not_after(&chain[0]);
    let key = PrivateKeyDer::from_pem_slice(&pem.key).map_err(|_| TlsLoadError::Empty {
        path: files.key.clone(),
        what: "private key",
    })?;
    let unusable = |path: &Path, e: &dyn std::fmt::Display| TlsLoadError::Unusable {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| unusable(&files.cert, &e))?;
    let builder = match (&pem.ca, &files.client_ca) {
        (Some(ca), Some(ca_path)) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca, ca_path)? {
                roots.add(cert).map_err(|e| unusable(ca_path, &e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| unusable(ca_path, &e))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| unusable(&files.key, &e))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok((config, expiry))
}

/// Reads the files and checks that they make a server configuration
/// (what configuration parsing calls, so that a bad path is a
/// configuration error naming the setting).
pub fn check(files: &ServerTlsFiles) -> Result<(), TlsLoadError> {
    build(&read_all(files)?, files, ALPN_H2).map(|_| ())
}

/// What a reload did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// The files hold what is served already.
    Unchanged,
    /// New files are served.
    Replaced,
}

impl ReloadingServerTls {
    /// Loads the files of a gRPC port (HTTP/2 only); fails when they don't
    /// make a server configuration. `port` names the server in metrics and
    /// logs (`grpc`, `sink`).
    pub fn load(port: &'static str, files: ServerTlsFiles) -> Result<Arc<Self>, TlsLoadError> {
        Self::load_with_alpn(port, files, ALPN_H2)
    }

    /// [`ReloadingServerTls::load`] for a server offering the ALPN
    /// protocols `alpn` (e.g. [`ALPN_H2_HTTP1`]).
    pub fn load_with_alpn(
        port: &'static str,
        files: ServerTlsFiles,
        alpn: &'static [&'static [u8]],
    ) -> Result<Arc<Self>, TlsLoadError> {
        let pem = read_all(&files)?;
        let (config, expiry) = build(&pem, &files, alpn)?;
        let status = TlsStatus {
            cert: files.cert.display().to_string(),
            mutual: files.client_ca.is_some(),
            not_after: expiry.as_ref().map(|e| e.0.clone()),
            reloads: 0,
            last_error: None,
        };
        if let Some((_, secs)) = expiry {
            metrics::gauge!(METRIC_EXPIRY, "port" => port).set(secs as f64);
        }
        Ok(Arc::new(Self {
            port,
            files,
            alpn,
            config: ArcSwap::from_pointee(config),
            loaded: Mutex::new(pem),
            status: watch::channel(status).0,
        }))
    }

    /// The files.
    pub fn files(&self) -> &ServerTlsFiles {
        &self.files
    }

    /// The configuration for the next handshake.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.config.load_full()
    }

    /// What is served, following reloads.
    pub fn status(&self) -> watch::Receiver<TlsStatus> {
        self.status.subscribe()
    }

    /// Reads the files again and serves them if they changed and load. On
    /// an error the current configuration stays (the caller reports it;
    /// [`ReloadingServerTls::watch`] does).
    pub fn reload(&self) -> Result<Reloaded, TlsLoadError> {
        let pem = read_all(&self.files)?;
        // A poisoned lock only means a panic elsewhere; the value is whole.
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if *loaded == pem {
            return Ok(Reloaded::Unchanged);
        }
        let (config, expiry) = build(&pem, &self.files, self.alpn)?;
        self.config.store(Arc::new(config));
        *loaded = pem;
        drop(loaded);
        if let Some((_, secs)) = &expiry {
            metrics::gauge!(METRIC_EXPIRY, "port" => self.port).set(*secs as f64);
        }
        self.status.send_modify(|s| {
            s.reloads += 1;
            s.not_after = expiry.map(|e| e.0);
            s.last_error = None;
        });
        Ok(Reloaded::Replaced)
    }

    /// Re-reads the files when they change (a watch on their directories:
    /// Secret volumes swap a symlink rather than write the file), every
    /// minute as a safety net, and on every message of `nudge` (SIGHUP),
    /// until `shutdown`. Each refusal is reported once per distinct error.
    ///
    /// The watch is set up before this returns, so no change made after
    /// the call is missed.
    pub fn watch(
        self: Arc<Self>,
        mut nudge: mpsc::Receiver<()>,
        shutdown: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (tx, mut changes) = mpsc::unbounded_channel();
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            let _ = tx.send(res.is_ok());
        });
        let mut dirs: Vec<&Path> = [
            Some(&self.files.cert),
            Some(&self.files.key),
            self.files.client_ca.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(|p| {
            p.parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
        })
        .collect();
        dirs.sort();
        dirs.dedup();
        let watcher = match watcher {
            Ok(mut w) => {
                for dir in dirs {
                    if let Err(e) = w.watch(dir, RecursiveMode::NonRecursive) {
                        warn!(port = self.port, dir = %dir.display(), error = %e, "can't watch the TLS directory; checking every minute");
                    }
                }
                Some(w)
            }
            Err(e) => {
                warn!(port = self.port, error = %e, "can't watch the TLS files; checking every minute");
                None
            }
        };
        async move {
            let _watcher = watcher;
            let mut poll = tokio::time::interval(POLL);
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            poll.tick().await;
            let mut due: Option<tokio::time::Instant> = None;
            let mut nudge_open = true;
            loop {
                let settle = async {
                    match due {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    Some(_) = changes.recv() => {
                        due.get_or_insert(tokio::time::Instant::now() + SETTLE);
                        continue;
                    }
                    () = settle => {}
                    _ = poll.tick() => {}
                    r = nudge.recv(), if nudge_open => if r.is_none() {
                        nudge_open = false;
                        continue;
                    },
                }
                due = None;
                self.reload_and_report();
            }
        }
    }

    /// One reload, logged and counted; a refusal is recorded in the status
    /// (reported once per distinct error).
    pub fn reload_and_report(&self) {
        match self.reload() {
            Ok(Reloaded::Unchanged) => {
                // The files are back to what is served.
                self.status
                    .send_if_modified(|s| s.last_error.take().is_some());
            }
            Ok(Reloaded::Replaced) => {
                metrics::counter!(METRIC_RELOADS, "port" => self.port, "result" => "replaced")
                    .increment(1);
                info!(port = self.port, cert = %self.files.cert.display(), "TLS certificate reloaded");
            }
            Err(e) => {
                let message = meshhub_proto::error_chain(&e);
                let new = self.status.send_if_modified(|s| {
                    if s.last_error.as_deref() == Some(&message) {
                        return false;
                    }
                    s.last_error = Some(message.clone());
                    true
                });
                if new {
                    metrics::counter!(METRIC_RELOADS, "port" => self.port, "result" => "error")
                        .increment(1);
                    warn!(port = self.port, error = %message, "new TLS certificate refused; serving the current one");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> ServerTlsFiles {
        let files = ServerTlsFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            client_ca: None,
        };
        meshhub_testkit::pki::Leaf::self_signed(&["meshhub.example"])
            .write(&files.cert, &files.key);
        files
    }

    #[test]
    fn the_alpn_protocols_are_the_callers_and_survive_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        let files = files(dir.path());
        let grpc = ReloadingServerTls::load("grpc", files.clone()).unwrap();
        assert_eq!(grpc.current().alpn_protocols, [b"h2".to_vec()]);
        let https = ReloadingServerTls::load_with_alpn("webhook", files, ALPN_H2_HTTP1).unwrap();
        let both = [b"h2".to_vec(), b"http/1.1".to_vec()];
        assert_eq!(https.current().alpn_protocols, both);
        // New files: the new configuration offers the same protocols.
        let first = https.current();
        let _ = self::files(dir.path());
        assert_eq!(https.reload().unwrap(), Reloaded::Replaced);
        assert!(!Arc::ptr_eq(&first, &https.current()));
        assert_eq!(https.current().alpn_protocols, both);
    }
}

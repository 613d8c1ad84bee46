//! The webhook's serving certificate, re-read when its files change.
//!
//! cert-manager (or the kubelet updating a Secret volume) replaces the files
//! while the hub runs; the API server then expects the new certificate
//! within minutes. [`ReloadingCert`] is a rustls certificate resolver whose
//! current certificate is swapped in place: established connections keep
//! theirs, new handshakes get the new one. A new pair that does not load
//! (half written, key not matching the certificate, not PEM) is reported
//! and the current one kept.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Why a certificate and key can't be served.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file can't be read.
    #[error("can't read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    #[error("{}: no PEM certificate found", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no usable PEM private key.
    #[error("{}: no PEM private key found", path.display())]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// The key does not fit the certificate, or its type is unsupported.
    #[error("{} and {} don't make a serving identity: {reason}", cert.display(), key.display())]
    Unusable {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls says.
        reason: String,
    },
}

/// The PEM texts a certificate was loaded from (to see whether they changed).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pem {
    cert: Vec<u8>,
    key: Vec<u8>,
}

fn read(path: &Path) -> Result<Vec<u8>, CertError> {
    std::fs::read(path).map_err(|source| CertError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Parses and checks a certificate chain and its key (the ring provider's
/// signing keys; the key must match the leaf certificate).
fn parse(pem: &Pem, cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, CertError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem.cert)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(CertError::NoCertificate {
            path: cert.to_owned(),
        });
    }
    let der = PrivateKeyDer::from_pem_slice(&pem.key).map_err(|_| CertError::NoKey {
        path: key.to_owned(),
    })?;
    let provider = CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    CertifiedKey::from_der(chain, der, &provider)
        .map(Arc::new)
        .map_err(|e| CertError::Unusable {
            cert: cert.to_owned(),
            key: key.to_owned(),
            reason: e.to_string(),
        })
}

/// Loads a certificate chain and key from PEM files, checking that they
/// make a serving identity.
pub fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, CertError> {
    let pem = Pem {
        cert: read(cert)?,
        key: read(key)?,
    };
    parse(&pem, cert, key)
}

/// What a reload did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// The files hold what is served already.
    Unchanged,
    /// A new certificate is served.
    Replaced,
}

/// A rustls resolver serving the certificate last loaded from two files.
#[derive(Debug)]
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<(Pem, Arc<CertifiedKey>)>,
}

impl ReloadingCert {
    /// Loads the files; fails when they don't make a serving identity.
    pub fn new(cert: &Path, key: &Path) -> Result<Self, CertError> {
        let pem = Pem {
            cert: read(cert)?,
            key: read(key)?,
        };
        let certified = parse(&pem, cert, key)?;
        Ok(Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: RwLock::new((pem, certified)),
        })
    }

    /// The certificate and key files.
    pub fn files(&self) -> (&Path, &Path) {
        (&self.cert, &self.key)
    }

    /// Reads the files again and serves them if they changed and load. On
    /// an error the current certificate stays.
    pub fn reload(&self) -> Result<Reloaded, CertError> {
        let pem = Pem {
            cert: read(&self.cert)?,
            key: read(&self.key)?,
        };
        if self.current.read().is_ok_and(|c| c.0 == pem) {
            return Ok(Reloaded::Unchanged);
        }
        let certified = parse(&pem, &self.cert, &self.key)?;
        // A poisoned lock only means a reader panicked; the value is whole.
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        *current = (pem, certified);
        Ok(Reloaded::Replaced)
    }

    /// The certificate served now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

//! TLS for every gRPC role: server and client configurations from PEM
//! files, and the identities of a verified peer certificate.
//!
//! Remote clusters reach the hub (and the hub reaches their agents) across
//! networks meshhub does not control, so both directions support mutual
//! TLS. A consumer's verified identity (a SPIFFE URI such as
//! `spiffe://cluster.local/ns/istio-system/sa/istiod`, or a DNS name) is
//! authoritative where its `SinkNode` is not, and reaches the
//! [`crate::group::GroupIndex`].

use std::path::{Path, PathBuf};

pub mod reload;

use rustls_pki_types::CertificateDer;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Why TLS material could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no PEM block of the expected kind.
    #[error("{path}: no {what} found (expected PEM)")]
    Empty {
        /// The file.
        path: PathBuf,
        /// What was expected.
        what: &'static str,
    },
}

/// PEM files of one side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// Our certificate chain.
    pub cert: Option<PathBuf>,
    /// Our private key.
    pub key: Option<PathBuf>,
    /// Roots that verify the peer.
    pub ca: Option<PathBuf>,
}

fn read(path: &Path, what: &'static str, marker: &str) -> Result<Vec<u8>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    if !String::from_utf8_lossy(&bytes).contains(marker) {
        return Err(TlsError::Empty {
            path: path.to_owned(),
            what,
        });
    }
    Ok(bytes)
}

fn identity(cert: &Path, key: &Path) -> Result<Identity, TlsError> {
    Ok(Identity::from_pem(
        read(cert, "certificate", "BEGIN CERTIFICATE")?,
        read(key, "private key", "PRIVATE KEY")?,
    ))
}

/// A server configuration: our certificate and key; with `ca`, client
/// certificates are verified against it, and required unless
/// `client_auth_optional`.
pub fn server_config(
    cert: &Path,
    key: &Path,
    ca: Option<&Path>,
    client_auth_optional: bool,
) -> Result<ServerTlsConfig, TlsError> {
    let mut config = ServerTlsConfig::new().identity(identity(cert, key)?);
    if let Some(ca) = ca {
        config = config
            .client_ca_root(Certificate::from_pem(read(
                ca,
                "CA certificate",
                "BEGIN CERTIFICATE",
            )?))
            .client_auth_optional(client_auth_optional);
    }
    Ok(config)
}

/// A client configuration: roots that verify the server (`ca`), an optional
/// client certificate for mutual TLS, and the name to verify (defaults to
/// the host of the URL dialed).
pub fn client_config(
    ca: &Path,
    client: Option<(&Path, &Path)>,
    domain: Option<&str>,
) -> Result<ClientTlsConfig, TlsError> {
    let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(
        ca,
        "CA certificate",
        "BEGIN CERTIFICATE",
    )?));
    if let Some((cert, key)) = client {
        config = config.identity(identity(cert, key)?);
    }
    if let Some(domain) = domain {
        config = config.domain_name(domain);
    }
    Ok(config)
}

/// The identities of a verified peer: the URI and DNS subject alternative
/// names of its leaf certificate (the first of the chain), URIs first.
/// Unparsable certificates yield none.
pub fn identities(chain: &[CertificateDer<'_>]) -> Vec<String> {
    let Some(leaf) = chain.first() else {
        return Vec::new();
    };
    let Ok((_, cert)) = X509Certificate::from_der(leaf.as_ref()) else {
        return Vec::new();
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    let mut uris = Vec::new();
    let mut dns = Vec::new();
    for name in &san.value.general_names {
        match name {
            GeneralName::URI(u) => uris.push((*u).to_owned()),
            GeneralName::DNSName(d) => dns.push((*d).to_owned()),
            _ => {}
        }
    }
    uris.extend(dns);
    uris
}

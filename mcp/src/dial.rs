//! Where a dialer connects: an endpoint, and the client TLS files read
//! again at every connection attempt.
//!
//! Client certificates rotate (cert-manager renews before expiry; Istio's
//! workload certificates live 24 hours). A dialer that read its files once
//! would present an expired certificate on its first reconnect after the
//! rotation and fail every handshake until restarted. Reading them per
//! attempt costs a few small file reads per connection; an established
//! connection keeps the certificate it was opened with, which is what TLS
//! checks (at the handshake only).
//!
//! What a configuration file says about a peer to dial (address, TLS
//! files, connect timeout, reconnect backoff) is one [`DialSpec`], with its
//! serde form and checks in [`spec`]: the hub's agents and upstream MCP
//! sources and the sink agent's pull mode all dial through it.

use std::path::PathBuf;
use std::sync::Arc;

pub mod shared;
pub mod spec;

pub use shared::{Connected, Connections};
pub use spec::{DialDefaults, DialSpec, RawClientTls, RawDialSpec};

use tonic::transport::{ClientTlsConfig, Endpoint, Uri};

use crate::tls::TlsError;

/// Why a connection attempt could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The address is not a URI tonic accepts (configuration checks it
    /// first; kept for specs built by hand).
    #[error("address {address:?}")]
    Address {
        /// The address.
        address: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
    /// The TLS files could not be read.
    #[error("client TLS: {0}")]
    Tls(#[from] TlsError),
    /// tonic refused the TLS settings for this endpoint.
    #[error("client TLS for {uri}: {source}")]
    Endpoint {
        /// The endpoint.
        uri: Uri,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
}

/// PEM files of a client's TLS: roots that verify the server, an optional
/// client certificate for mutual TLS, and the name to verify.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClientTlsFiles {
    /// PEM roots that verify the server's certificate.
    pub ca: PathBuf,
    /// Our client certificate chain (mutual TLS), with `key`.
    pub cert: Option<PathBuf>,
    /// Our client private key, with `cert`.
    pub key: Option<PathBuf>,
    /// The name to verify in the server's certificate (default: the host of
    /// the address dialed).
    pub server_name: Option<String>,
}

impl ClientTlsFiles {
    /// The tonic client configuration (reads the files now).
    pub fn client_config(&self) -> Result<ClientTlsConfig, TlsError> {
        let client = self.cert.as_deref().zip(self.key.as_deref());
        crate::tls::client_config(&self.ca, client, self.server_name.as_deref())
    }
}

/// Why [`DialTarget::connect`] gave no channel.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The endpoint could not be prepared (its TLS files).
    #[error(transparent)]
    Prepare(#[from] DialError),
    /// No connection.
    #[error("connect")]
    Connect(#[source] tonic::transport::Error),
}

/// An endpoint to dial, plaintext or with client TLS files.
#[derive(Clone, Debug)]
pub struct DialTarget {
    endpoint: Endpoint,
    tls: Option<ClientTlsFiles>,
    /// The connection shared with the other dialers of the same peer
    /// ([`Connections::share`]); none: a connection per attempt.
    shared: Option<Arc<shared::Slot>>,
}

impl DialTarget {
    /// A plaintext (h2c) endpoint.
    pub fn plaintext(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            tls: None,
            shared: None,
        }
    }

    /// `endpoint` with client TLS from `tls` (none: plaintext). Reads the
    /// files once now, so that a wrong path is a configuration error at
    /// start rather than a retried connection error.
    pub fn new(endpoint: Endpoint, tls: Option<ClientTlsFiles>) -> Result<Self, DialError> {
        let target = Self {
            endpoint,
            tls,
            shared: None,
        };
        target.endpoint()?;
        Ok(target)
    }

    /// The address dialed.
    pub fn uri(&self) -> &Uri {
        self.endpoint.uri()
    }

    /// Whether the connection uses TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The endpoint for one connection attempt, with the TLS files as they
    /// are now.
    pub fn endpoint(&self) -> Result<Endpoint, DialError> {
        let Some(tls) = &self.tls else {
            return Ok(self.endpoint.clone());
        };
        let config = tls.client_config()?;
        self.endpoint
            .clone()
            .tls_config(config)
            .map_err(|source| DialError::Endpoint {
                uri: self.endpoint.uri().clone(),
                source,
            })
    }

    /// A channel for one attempt, with meshhub's transport settings: the
    /// connection shared with the peer's other dialers when it is held and
    /// was opened with the TLS files as they are now, else a new one
    /// (offered to the others).
    pub async fn connect(&self) -> Result<Connected, ConnectError> {
        // The material first: files rotated between this read and the
        // endpoint's make a channel tagged older than it is, which the
        // next attempt replaces — never one reused with files it lacks.
        let shared = self.shared.as_ref().and_then(|slot| {
            // Unreadable now (replaced mid-rotation): not shared.
            let material = shared::material(self.tls.as_ref()).ok()?;
            Some((slot, material))
        });
        if let Some(held) = shared.and_then(|(slot, material)| slot.get(material)) {
            return Ok(held);
        }
        let endpoint = crate::transport::tune(self.endpoint()?);
        let channel = endpoint.connect().await.map_err(ConnectError::Connect)?;
        Ok(match shared {
            Some((slot, material)) => slot.offer(channel, material),
            None => Connected {
                channel: Arc::new(channel),
                id: 0,
            },
        })
    }

    /// The dialer's stream on `connected` ended or could not be opened:
    /// its next attempt opens a new connection (the peer's other dialers
    /// keep theirs until their own stream ends).
    pub fn forget(&self, connected: &Connected) {
        if let Some(slot) = &self.shared {
            slot.forget(connected.id);
        }
    }

    /// Whether this target shares its connection.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }
}

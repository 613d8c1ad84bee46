//! Where an API server is ([`Connection`]) and the client that talks to it.
//!
//! Every feature names its API server the same way (a kubeconfig file and
//! a context, each optional), so one type holds it and one function turns
//! it into a client. [`Clients`] keeps one client per distinct connection:
//! features that talk to the same API server share its connection pool
//! instead of each opening its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};

/// Where an API server is: a kubeconfig file and context. Without a file,
/// `KUBECONFIG`, `~/.kube/config` or the in-cluster service account, in
/// that order; without a context, the kubeconfig's current context.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Connection {
    /// The kubeconfig file.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context.
    pub context: Option<String>,
}

/// Why a configured connection is refused (a configuration error naming
/// [`ConnectionInvalid::field`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionInvalid {
    /// The kubeconfig is not a file.
    #[error("{} is not a file", .0.display())]
    NotAFile(PathBuf),
    /// The context is empty.
    #[error("must not be empty")]
    EmptyContext,
}

impl ConnectionInvalid {
    /// The configuration field at fault (`kubeconfig`, `context`).
    pub fn field(&self) -> &'static str {
        match self {
            Self::NotAFile(_) => "kubeconfig",
            Self::EmptyContext => "context",
        }
    }
}

/// Why a client can't be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig can't be read, or its context can't be used.
    #[error("the kubeconfig can't be used")]
    Kubeconfig(#[from] KubeconfigError),
    /// Without a kubeconfig: neither `KUBECONFIG`, `~/.kube/config` nor
    /// the in-cluster service account can be used.
    #[error("no kubeconfig or in-cluster configuration can be used")]
    Infer(#[from] InferConfigError),
    /// The configuration does not make a client (its TLS settings).
    #[error("the client can't be built")]
    Build(#[source] kube::Error),
}

impl Connection {
    /// The connection as configured: a relative kubeconfig path is taken
    /// relative to `base` (the configuration file's directory). The file
    /// must exist (a typo is a configuration error, not a client that
    /// fails later) and a context must not be empty.
    pub fn from_config(
        kubeconfig: Option<PathBuf>,
        context: Option<String>,
        base: &Path,
    ) -> Result<Self, ConnectionInvalid> {
        let kubeconfig = kubeconfig.map(|k| if k.is_absolute() { k } else { base.join(k) });
        if let Some(k) = &kubeconfig
            && !k.is_file()
        {
            return Err(ConnectionInvalid::NotAFile(k.clone()));
        }
        if context.as_deref().is_some_and(|c| c.trim().is_empty()) {
            return Err(ConnectionInvalid::EmptyContext);
        }
        Ok(Self {
            kubeconfig,
            context,
        })
    }

    /// The client configuration of this connection.
    pub async fn config(&self) -> Result<kube::Config, ClientError> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        Ok(match &self.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?
            }
            // A context names one of the default kubeconfig's contexts;
            // in-cluster has none.
            None if self.context.is_some() => kube::Config::from_kubeconfig(&options).await?,
            None => kube::Config::infer().await?,
        })
    }

    /// A client of this connection (needs a tokio runtime: the client
    /// runs a task).
    pub async fn client(&self) -> Result<kube::Client, ClientError> {
        kube::Client::try_from(self.config().await?).map_err(ClientError::Build)
    }
}

/// One client per distinct [`Connection`], built when first asked for.
#[derive(Default)]
pub struct Clients {
    built: BTreeMap<Connection, kube::Client>,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.built.keys()).finish()
    }
}

impl Clients {
    /// The client of `connection`: the one built before for an equal
    /// connection, else a new one.
    pub async fn get(&mut self, connection: &Connection) -> Result<kube::Client, ClientError> {
        if let Some(client) = self.built.get(connection) {
            return Ok(client.clone());
        }
        let client = connection.client().await?;
        self.built.insert(connection.clone(), client.clone());
        Ok(client)
    }

    /// How many clients were built.
    pub fn len(&self) -> usize {
        self.built.len()
    }

    /// Whether none was built.
    pub fn is_empty(&self) -> bool {
        self.built.is_empty()
    }
}

#[cfg(test)]
mod tests;

//! Pins shared by every hub replica: with `leaderElection`, pins live in
//! the ConfigMap [`CONFIGMAP`] in the Lease's namespace (one data key per
//! cluster, its value the JSON [`PinRecord`]). `POST /pins` on any replica
//! writes it; every replica watches it and serves what it says, resolving
//! the version id in its own history (the ids are content digests, equal on
//! every replica).

use std::collections::BTreeMap;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{History, PinRecord};

/// The ConfigMap holding the pins.
pub const CONFIGMAP: &str = "meshhub-pins";

/// Why the shared pins can't be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    /// The API server refused or failed.
    #[error("ConfigMap {CONFIGMAP}")]
    Api(#[from] kube::Error),
    /// A record can't be encoded.
    #[error("pin record")]
    Json(#[from] serde_json::Error),
}

/// The ConfigMap's client.
#[derive(Clone, Debug)]
pub struct SharedPins {
    cm: crate::configmap::Shared,
}

impl SharedPins {
    /// The pins in `namespace` (the leader election's), over `client`
    /// (the app's client of the leader election's connection).
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            cm: crate::configmap::Shared::new(client, namespace, CONFIGMAP),
        }
    }

    /// `namespace/name` of the ConfigMap.
    pub fn location(&self) -> String {
        self.cm.location()
    }

    /// Sets (or, with `None`, removes) `cluster`'s pin.
    pub async fn write(&self, cluster: &str, pin: Option<&PinRecord>) -> Result<(), SharedError> {
        let value = pin.map(serde_json::to_string).transpose()?;
        let data = [(cluster.to_owned(), value)].into();
        self.cm.write(data).await?;
        Ok(())
    }

    /// Follows the ConfigMap until `shutdown` and makes `history` serve
    /// what it says. A pinned version this replica's history lacks is read
    /// from the archive first ([`super::archive`]); while one is still
    /// missing, it is looked for again every [`MISSING_RETRY`].
    pub async fn follow(self, history: History, shutdown: CancellationToken) {
        let mut changes = self.cm.watch();
        let mut pins: Option<BTreeMap<String, PinRecord>> = None;
        let mut missing = false;
        loop {
            let data = if missing {
                tokio::select! {
                    d = self.cm.next_data(&mut changes, &shutdown) => match d {
                        Some(d) => Some(d),
                        None => break,
                    },
                    () = tokio::time::sleep(MISSING_RETRY) => None,
                }
            } else {
                match self.cm.next_data(&mut changes, &shutdown).await {
                    Some(d) => Some(d),
                    None => break,
                }
            };
            if let Some(desired) = data {
                let mut read = BTreeMap::new();
                for (cluster, text) in desired {
                    match serde_json::from_str::<PinRecord>(&text) {
                        Ok(p) => {
                            read.insert(cluster, p);
                        }
                        Err(e) => {
                            warn!(cluster = %cluster, error = %e, "unreadable pin in the shared ConfigMap; ignored")
                        }
                    }
                }
                pins = Some(read);
            }
            let Some(desired) = pins.clone() else {
                continue;
            };
            // Applied at once (an unpin never waits on the archive); pins
            // of versions this replica lacks are then read from the
            // archive and applied again.
            self.reconcile(&history, desired.clone()).await;
            let unresolved = history.unresolved_pins().len();
            missing = false;
            if unresolved > 0 {
                let wanted = desired
                    .iter()
                    .map(|(c, p)| (c.clone(), p.version.clone()))
                    .collect();
                let still = history.fetch_missing(wanted).await;
                missing = !still.is_empty();
                if still.len() < unresolved {
                    self.reconcile(&history, desired).await;
                }
            }
        }
    }

    async fn reconcile(&self, history: &History, desired: BTreeMap<String, PinRecord>) {
        let h = history.clone();
        match tokio::task::spawn_blocking(move || h.reconcile(desired)).await {
            Ok(changed) if changed > 0 => {
                info!(changed, configmap = %self.location(), "shared pins applied");
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "applying the shared pins failed"),
        }
    }
}

/// How often a replica looks again for pinned versions it lacks.
pub const MISSING_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

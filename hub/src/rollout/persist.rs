//! The rollout's state on disk (`rollout.json` beside the history
//! database): the [`Decisions`] — the rollout and what each dialed cluster
//! is served — so a restarted hub keeps serving and holding what it did
//! and continues where it was (with `leaderElection` the replicas share
//! them through [`super::shared`] instead). The controller publishes its state on a
//! watch channel; one task writes the newest (atomically: a temporary file
//! renamed over the old), so the pipeline never waits for the disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::shared::Decisions;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// The file's name in the history directory.
pub const FILE: &str = "rollout.json";

/// Counter: failed writes of the rollout's state.
pub const METRIC_WRITE_ERRORS: &str = "meshhub_rollout_state_write_errors_total";

/// Why the saved state can't be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file can't be read.
    #[error("can't read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a rollout's state (a newer hub's, or damaged).
    #[error("{path} is not a rollout state this hub can read")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: super::shared::ParseError,
    },
}

/// The state file of a history directory.
#[derive(Clone, Debug)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    /// The state file in `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            path: dir.join(FILE),
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a state was saved (blocking).
    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    /// The saved decisions (`None`: none saved; blocking).
    pub fn load(&self) -> Result<Option<Decisions>, LoadError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(LoadError::Read {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        Decisions::parse(&text)
            .map(Some)
            .map_err(|source| LoadError::Parse {
                path: self.path.clone(),
                source,
            })
    }

    /// Writes every new state from `states` until `shutdown` (then the
    /// last one once more, so nothing decided is lost).
    pub async fn run(
        self,
        mut states: watch::Receiver<Option<Arc<Decisions>>>,
        shutdown: CancellationToken,
    ) {
        metrics::counter!(METRIC_WRITE_ERRORS).increment(0);
        loop {
            let stop = tokio::select! {
                changed = states.changed() => changed.is_err(),
                () = shutdown.cancelled() => true,
            };
            let state = states.borrow_and_update().clone();
            if let Some(state) = state {
                let file = self.clone();
                let written = tokio::task::spawn_blocking(move || file.write(&state)).await;
                match written {
                    Ok(Ok(())) => debug!(path = %self.path.display(), "rollout state saved"),
                    Ok(Err(e)) => {
                        metrics::counter!(METRIC_WRITE_ERRORS).increment(1);
                        warn!(path = %self.path.display(), error = %e, "can't save the rollout's state; a restart would lose it");
                    }
                    Err(e) => std::panic::resume_unwind(e.into_panic()),
                }
            }
            if stop {
                break;
            }
        }
    }

    fn write(&self, state: &Decisions) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?;
        let tmp = self.path.with_extension("json.tmp");
        {
            use std::io::Write as _;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&text)?;
            // On disk before it replaces the old state.
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)
    }
}

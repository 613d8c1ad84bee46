//! Configuration reloads: the configuration file is watched (and re-read on
//! SIGHUP or [`crate::app::Hub::reload`]); a new text is parsed and checked
//! like at start. A bad one is reported (log, `/status` `config`) and the
//! running configuration is kept. A good one replaces the **clusters**: the
//! grouping rules (the pipeline places objects again and withdraws removed
//! groups) and the agents (only the dialers of clusters whose agent changed
//! are restarted). Sources, debounce, `unknownFields` and `leaderElection` are read at start
//! only; a change to them is reported as needing a restart.
//!
//! The reloader is the single writer of both `watch` channels.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use meshhub_mcp::ledger::At;
use notify::{RecursiveMode, Watcher as _};
use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::clusters::AgentSpec;
use crate::clusters::Agents;
use crate::config::Config;
use crate::groups::{ClusterSpec, GroupRules};
use crate::rollout::ClusterLabels;
use meshhub_rollout::Policy;

/// How long file events must be quiet before the file is read: editors and
/// ConfigMap updates produce bursts.
const SETTLE: Duration = Duration::from_millis(50);

/// The reload state, for `/status`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReloadStatus {
    /// The configuration file.
    pub file: PathBuf,
    /// Reloads applied (including those that changed nothing).
    pub reloads: u64,
    /// When the running configuration was last applied.
    pub applied_at: Option<At>,
    /// The last refused configuration: why, and when. Cleared by the next
    /// good one.
    pub last_error: Option<String>,
    /// When it was refused.
    pub last_error_at: Option<At>,
    /// Settings changed in the file that only a restart applies.
    pub pending_restart: Vec<String>,
}

/// What a reload request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// SIGHUP or an explicit request: read and apply even if unchanged.
    Forced,
    /// A file event: apply only if the text changed.
    FileEvent,
}

/// The owner of the running clusters configuration.
pub struct Reloader {
    current: Config,
    last_text: Option<String>,
    rules: watch::Sender<GroupRules>,
    agents: watch::Sender<Agents>,
    labels: watch::Sender<ClusterLabels>,
    policy: watch::Sender<Option<Policy>>,
    status: watch::Sender<Arc<ReloadStatus>>,
}

/// What the reloader writes: the watches the features follow.
#[derive(Debug)]
pub struct Outputs {
    /// The grouping rules.
    pub rules: watch::Sender<GroupRules>,
    /// The dialed clusters.
    pub agents: watch::Sender<Agents>,
    /// The clusters' labels.
    pub labels: watch::Sender<ClusterLabels>,
    /// The rollout policy (`None`: no `rollout:`).
    pub policy: watch::Sender<Option<Policy>>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("file", &self.current.config_file)
            .finish_non_exhaustive()
    }
}

impl Reloader {
    /// A reloader of `current` (the configuration running), writing
    /// `outputs`. Returns the status reader too.
    pub fn new(current: Config, outputs: Outputs) -> (Self, watch::Receiver<Arc<ReloadStatus>>) {
        let (status, rx) = watch::channel(Arc::new(ReloadStatus {
            file: current.config_file.clone(),
            applied_at: Some(At(SystemTime::now())),
            ..ReloadStatus::default()
        }));
        let last_text = std::fs::read_to_string(&current.config_file).ok();
        let Outputs {
            rules,
            agents,
            labels,
            policy,
        } = outputs;
        (
            Self {
                current,
                last_text,
                rules,
                agents,
                labels,
                policy,
                status,
            },
            rx,
        )
    }

    /// Watches the file and serves `requests` until `shutdown`.
    pub async fn run(mut self, mut requests: mpsc::Receiver<Trigger>, shutdown: CancellationToken) {
        let (events_tx, mut events) = mpsc::channel::<()>(1);
        // Kept alive for the task's lifetime; dropping it stops the watch.
        let _watcher = match watch_file(&self.current.config_file, events_tx) {
            Ok(w) => Some(w),
            Err(e) => {
                warn!(file = %self.current.config_file.display(), error = %e, "can't watch the configuration file; reload with SIGHUP");
                None
            }
        };
        loop {
            let trigger = tokio::select! {
                () = shutdown.cancelled() => return,
                r = requests.recv() => match r {
                    Some(t) => t,
                    None => {
                        shutdown.cancelled().await;
                        return;
                    }
                },
                Some(()) = events.recv() => {
                    // Let the burst settle.
                    loop {
                        tokio::select! {
                            () = shutdown.cancelled() => return,
                            () = tokio::time::sleep(SETTLE) => break,
                            Some(()) = events.recv() => {}
                        }
                    }
                    Trigger::FileEvent
                }
            };
            self.reload(trigger).await;
        }
    }

    /// Reads the file and applies it.
    pub async fn reload(&mut self, trigger: Trigger) {
        let path = self.current.config_file.clone();
        let text = match tokio::fs::read_to_string(&path).await {
            Ok(t) => t,
            Err(e) => {
                if trigger == Trigger::FileEvent && e.kind() == std::io::ErrorKind::NotFound {
                    // Mid-rename, or deleted: wait for the next event.
                    return;
                }
                self.refuse(format!("config file {}: can't read: {e}", path.display()));
                return;
            }
        };
        if trigger == Trigger::FileEvent && self.last_text.as_deref() == Some(text.as_str()) {
            return;
        }
        self.last_text = Some(text.clone());
        match self.current.reparse(&text) {
            Ok(new) => self.apply(new),
            Err(e) => self.refuse(e.to_string()),
        }
    }

    fn refuse(&self, message: String) {
        error!(error = %message, "new configuration refused; the running one is kept");
        self.status.send_modify(|s| {
            let s = Arc::make_mut(s);
            s.last_error = Some(message);
            s.last_error_at = Some(At(SystemTime::now()));
        });
    }

    fn apply(&mut self, new: Config) {
        let mut pending = Vec::new();
        if new.sources != self.current.sources {
            pending.push("sources".to_owned());
        }
        if new.debounce != self.current.debounce {
            pending.push("debounce".to_owned());
        }
        if new.unknown_fields != self.current.unknown_fields {
            pending.push("unknownFields".to_owned());
        }
        if new.leader_election != self.current.leader_election {
            pending.push("leaderElection".to_owned());
        }
        if new.webhook != self.current.webhook {
            pending.push("webhook".to_owned());
        }
        if new.history != self.current.history {
            pending.push("history".to_owned());
        }
        if new.audit != self.current.audit {
            pending.push("audit".to_owned());
        }
        if new.validation != self.current.validation {
            pending.push("validation".to_owned());
        }
        // The policy follows reloads; turning the rollout on or off, or
        // another Prometheus, needs a restart (the gates' task).
        match (&self.current.rollout, &new.rollout) {
            (Some(old), Some(now))
                if old.prometheus == now.prometheus && old.policy != now.policy =>
            {
                info!("rollout policy changed: it applies to the next rollout");
                self.policy.send_replace(Some(now.policy.clone()));
            }
            (Some(old), Some(now)) if old.prometheus == now.prometheus => {}
            (old, now) if old.is_some() != now.is_some() => pending.push("rollout".to_owned()),
            (old, now) if old != now => pending.push("rollout.prometheus".to_owned()),
            _ => {}
        }
        if !pending.is_empty() {
            warn!(settings = ?pending, "these settings are read at start only; restart to apply them");
        }
        let names: BTreeSet<&str> = self
            .current
            .clusters
            .iter()
            .chain(&new.clusters)
            .map(|c| c.name.as_str())
            .collect();
        for name in names {
            fn find<'a>(
                c: &'a Config,
                name: &str,
            ) -> (Option<&'a ClusterSpec>, Option<&'a AgentSpec>) {
                (
                    c.clusters.iter().find(|s| s.name == name),
                    c.agents.iter().find(|a| a.cluster == name),
                )
            }
            match (find(&self.current, name), find(&new, name)) {
                ((None, _), (Some(_), _)) => info!(cluster = %name, "cluster added"),
                ((Some(_), _), (None, _)) => info!(cluster = %name, "cluster removed"),
                ((old_c, old_a), (new_c, new_a)) => {
                    if old_c != new_c {
                        info!(cluster = %name, "cluster selector changed");
                    }
                    if old_a != new_a {
                        info!(cluster = %name, "cluster agent changed");
                    }
                }
            }
        }
        // Agents first: a removed cluster's dialer stops before its group
        // is withdrawn (a new cluster's dialer waits for its first snapshot).
        if new.agents != self.current.agents {
            self.agents.send_replace(Arc::new(new.agents.clone()));
        }
        if new.cluster_labels != self.current.cluster_labels {
            self.labels
                .send_replace(Arc::new(new.cluster_labels.clone()));
        }
        if new.clusters != self.current.clusters {
            self.rules
                .send_replace(GroupRules::new(&new.clusters).with_access(new.access.clone()));
        }
        self.current.clusters = new.clusters;
        self.current.agents = new.agents;
        self.current.cluster_labels = new.cluster_labels;
        if let (Some(old), Some(now)) = (&self.current.rollout, &new.rollout)
            && old.prometheus == now.prometheus
        {
            self.current.rollout = new.rollout;
        }
        info!(file = %self.current.config_file.display(), "configuration reloaded");
        self.status.send_modify(|s| {
            let s = Arc::make_mut(s);
            s.reloads += 1;
            s.applied_at = Some(At(SystemTime::now()));
            s.last_error = None;
            s.last_error_at = None;
            s.pending_restart = pending;
        });
    }
}

/// Watches the directory of `file` (editors replace files by renaming, and
/// a mounted ConfigMap swaps its `..data` symlink), signalling events that
/// concern the file.
fn watch_file(file: &Path, tx: mpsc::Sender<()>) -> notify::Result<notify::RecommendedWatcher> {
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_owned();
    let name = file.file_name().map(ToOwned::to_owned);
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let relevant = match res {
            Ok(ev) => ev.paths.iter().any(|p| {
                let n = p.file_name();
                n == name.as_deref() || n.is_some_and(|n| n.to_string_lossy().starts_with(".."))
            }),
            // Lost events: check the file.
            Err(_) => true,
        };
        if relevant {
            // Full means a check is already due; one is enough.
            let _ = tx.try_send(());
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

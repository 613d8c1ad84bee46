//! The `leaderElection:` block: its serde form, defaults and checks.

use std::path::{Path, PathBuf};
use std::time::Duration;

use meshhub_kube::Connection;
use meshhub_mcp::settings::{SettingError, duration};
use meshhub_validate::names::{is_dns1123_label, is_dns1123_subdomain};
use serde::Deserialize;

/// Default `leaderElection.leaseName`.
pub const DEFAULT_LEASE_NAME: &str = "meshhub-dial-out";
/// Default `leaderElection.namespace` when `POD_NAMESPACE` is not set.
pub const DEFAULT_LEASE_NAMESPACE: &str = "meshhub";
/// Default `leaderElection.leaseDuration`.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default `leaderElection.renewDeadline`.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Default `leaderElection.retryPeriod`.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// The most shards `leaderElection.shards` may name (each is one Lease
/// written every `retryPeriod` by its holder).
pub const MAX_SHARDS: u32 = 1024;
/// The longest `leaderElection.leaseName` with shards: the name is also the
/// value of a label (at most 63 characters) on every lease of the group.
pub const MAX_SHARDED_LEASE_NAME: usize = 40;

/// Leader election among hub replicas for the dial-out role
/// (`leaderElection`, when `enabled`): one `coordination.k8s.io/v1` Lease;
/// only its holder dials the sink agents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionSpec {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub lease_name: String,
    /// This replica's identity (the Lease's `holderIdentity`, and the
    /// `meshhub-replica` metadata sent to the agents).
    pub identity: String,
    /// How long a lease not renewed stays the holder's (whole seconds).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// How often the lease is renewed, or tried for.
    pub retry_period: Duration,
    /// The API server holding the Lease (and the shared pins).
    pub connection: Connection,
    /// Sharded dial-out (`shards`): the clusters are split into this many
    /// shards, one Lease each, shared out among the live replicas; `None`:
    /// one leader dials every cluster.
    pub shards: Option<u32>,
}

/// `leaderElection:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawLeaderElection {
    #[serde(default)]
    enabled: bool,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    lease_name: Option<String>,
    #[serde(default)]
    identity: Option<String>,
    #[serde(default, deserialize_with = "duration")]
    lease_duration: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    renew_deadline: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    retry_period: Option<Duration>,
    #[serde(default)]
    kubeconfig: Option<PathBuf>,
    #[serde(default)]
    context: Option<String>,
    #[serde(default)]
    shards: Option<u32>,
}

impl RawLeaderElection {
    /// Checks the block, filling in the defaults; `None` when not
    /// `enabled`. `base` is the configuration file's directory.
    pub fn check(self, base: &Path) -> Result<Option<LeaderElectionSpec>, SettingError> {
        if !self.enabled {
            return Ok(None);
        }
        let namespace = self.namespace.unwrap_or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| DEFAULT_LEASE_NAMESPACE.to_owned())
        });
        if !is_dns1123_label(&namespace) {
            return Err(SettingError::new(
                "namespace",
                format!("{namespace:?} is not a valid namespace name"),
            ));
        }
        let lease_name = self
            .lease_name
            .unwrap_or_else(|| DEFAULT_LEASE_NAME.to_owned());
        if !is_dns1123_subdomain(&lease_name) {
            return Err(SettingError::new(
                "leaseName",
                format!(
                    "{lease_name:?} is not a valid object name (lower-case letters, digits, '-' and '.')"
                ),
            ));
        }
        let identity = self.identity.unwrap_or_else(default_identity);
        // It travels as gRPC metadata: visible ASCII only.
        if identity.is_empty()
            || identity.len() > 253
            || !identity.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(SettingError::new(
                "identity",
                format!("{identity:?} must be 1 to 253 visible ASCII characters (no spaces)"),
            ));
        }
        let (lease_duration, renew_deadline, retry_period) = timing(
            self.lease_duration.unwrap_or(DEFAULT_LEASE_DURATION),
            self.renew_deadline.unwrap_or(DEFAULT_RENEW_DEADLINE),
            self.retry_period.unwrap_or(DEFAULT_RETRY_PERIOD),
        )?;
        let shards = match self.shards {
            None | Some(0) => None,
            Some(n) if n > MAX_SHARDS => {
                return Err(SettingError::new(
                    "shards",
                    format!("{n} is more than {MAX_SHARDS} (0: one leader dials every cluster)"),
                ));
            }
            Some(_) if lease_name.len() > MAX_SHARDED_LEASE_NAME => {
                return Err(SettingError::new(
                    "leaseName",
                    format!(
                        "{lease_name:?} is longer than {MAX_SHARDED_LEASE_NAME} characters, the most with shards (it labels every lease of the group)"
                    ),
                ));
            }
            Some(n) => Some(n),
        };
        let connection =
            crate::source::kube::spec::connection(self.kubeconfig, self.context, base)?;
        Ok(Some(LeaderElectionSpec {
            namespace,
            lease_name,
            identity,
            lease_duration,
            renew_deadline,
            retry_period,
            connection,
            shards,
        }))
    }
}

/// Checks that the lease outlives the renew deadline and the deadline the
/// retry period (the leader stops before anyone else may start).
fn timing(
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
) -> Result<(Duration, Duration, Duration), SettingError> {
    let show = |d: Duration| humantime::format_duration(d).to_string();
    // The Lease stores whole seconds.
    if lease_duration < Duration::from_secs(1) || lease_duration.subsec_nanos() != 0 {
        return Err(SettingError::new(
            "leaseDuration",
            format!(
                "{} must be a whole number of seconds, at least 1s",
                show(lease_duration)
            ),
        ));
    }
    if renew_deadline >= lease_duration {
        return Err(SettingError::new(
            "renewDeadline",
            format!(
                "{} must be shorter than leaderElection.leaseDuration {}",
                show(renew_deadline),
                show(lease_duration)
            ),
        ));
    }
    if retry_period.is_zero() {
        return Err(SettingError::new("retryPeriod", "must be positive"));
    }
    if retry_period >= renew_deadline {
        return Err(SettingError::new(
            "retryPeriod",
            format!(
                "{} must be shorter than leaderElection.renewDeadline {}",
                show(retry_period),
                show(renew_deadline)
            ),
        ));
    }
    Ok((lease_duration, renew_deadline, retry_period))
}

/// This replica's default identity: `POD_NAME`, else the host name and the
/// process id (two replicas on one host differ).
fn default_identity() -> String {
    if let Some(pod) = std::env::var("POD_NAME")
        .ok()
        .filter(|p| !p.trim().is_empty())
    {
        return pod.trim().to_owned();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "meshhub".to_owned());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests;

//! The `debounce:` block: its serde form, defaults and checks.

use std::time::Duration;

use meshhub_mcp::settings::{SettingError, duration};
use serde::Deserialize;

/// Debounce settings: a change is published once no further change arrived
/// for `quiet`, and at the latest `max_wait` after the first unpublished
/// change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Debounce {
    /// Quiet period.
    pub quiet: Duration,
    /// Maximum wait.
    pub max_wait: Duration,
}

impl Default for Debounce {
    fn default() -> Self {
        Self {
            quiet: Duration::from_millis(100),
            max_wait: Duration::from_secs(1),
        }
    }
}

/// `debounce:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawDebounce {
    #[serde(default, deserialize_with = "duration")]
    quiet: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    max_wait: Option<Duration>,
}

impl RawDebounce {
    /// Checks the block, filling in the defaults.
    pub fn check(&self) -> Result<Debounce, SettingError> {
        let defaults = Debounce::default();
        let debounce = Debounce {
            quiet: self.quiet.unwrap_or(defaults.quiet),
            max_wait: self.max_wait.unwrap_or(defaults.max_wait),
        };
        if debounce.max_wait.is_zero() {
            return Err(SettingError::new("maxWait", "must be positive"));
        }
        if debounce.quiet > debounce.max_wait {
            return Err(SettingError::new(
                "quiet",
                format!(
                    "{} is longer than debounce.maxWait {}",
                    humantime::format_duration(debounce.quiet),
                    humantime::format_duration(debounce.max_wait)
                ),
            ));
        }
        Ok(debounce)
    }
}

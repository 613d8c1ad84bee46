//! The `statusWriteBack` block of a Kubernetes source: its serde form,
//! defaults and checks (the writer is `crate::writeback`).

use std::num::NonZeroU32;

use meshhub_mcp::settings::SettingError;
use serde::Deserialize;

/// Default sustained rate of status writes, per second (istiod's own
/// Kubernetes client allows 80).
pub const DEFAULT_QPS: u32 = 50;
/// Default burst of status writes above the sustained rate.
pub const DEFAULT_BURST: u32 = 100;

/// Status written back to the source's objects (`statusWriteBack`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteBackSpec {
    /// Sustained writes per second.
    pub qps: NonZeroU32,
    /// Writes allowed at once above the sustained rate.
    pub burst: NonZeroU32,
}

impl Default for WriteBackSpec {
    fn default() -> Self {
        Self {
            qps: NonZeroU32::new(DEFAULT_QPS).expect("non-zero"),
            burst: NonZeroU32::new(DEFAULT_BURST).expect("non-zero"),
        }
    }
}

/// `statusWriteBack` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawWriteBack {
    #[serde(default)]
    enabled: bool,
    #[serde(default)]
    qps: Option<u32>,
    #[serde(default)]
    burst: Option<u32>,
}

impl RawWriteBack {
    /// Checks the block: `None` when write-back is off. Field names are
    /// relative to the block.
    pub fn check(self) -> Result<Option<WriteBackSpec>, SettingError> {
        let qps = self.qps.unwrap_or(DEFAULT_QPS);
        let qps = NonZeroU32::new(qps)
            .ok_or_else(|| SettingError::new("qps", "must be at least 1 (writes per second)"))?;
        let burst = self.burst.unwrap_or(DEFAULT_BURST.max(qps.get()));
        let burst = NonZeroU32::new(burst)
            .ok_or_else(|| SettingError::new("burst", "must be at least 1"))?;
        if !self.enabled {
            return Ok(None);
        }
        Ok(Some(WriteBackSpec { qps, burst }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Option<WriteBackSpec>, SettingError> {
        serde_saphyr::from_str::<RawWriteBack>(yaml)
            .unwrap()
            .check()
    }

    #[test]
    fn off_unless_enabled_with_sane_defaults() {
        assert_eq!(parse("{}").unwrap(), None);
        assert_eq!(parse("qps: 5").unwrap(), None);
        let on = parse("enabled: true").unwrap().unwrap();
        assert_eq!(on, WriteBackSpec::default());
        assert_eq!((on.qps.get(), on.burst.get()), (50, 100));
        let custom = parse("{enabled: true, qps: 200}").unwrap().unwrap();
        assert_eq!((custom.qps.get(), custom.burst.get()), (200, 200));
    }

    #[test]
    fn zero_rates_are_refused_naming_the_key() {
        assert_eq!(parse("{enabled: true, qps: 0}").unwrap_err().field, "qps");
        assert_eq!(
            parse("{enabled: true, burst: 0}").unwrap_err().field,
            "burst"
        );
        assert!(serde_saphyr::from_str::<RawWriteBack>("{enabled: true, rate: 3}").is_err());
    }
}

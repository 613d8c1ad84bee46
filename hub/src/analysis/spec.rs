//! The `analysis:` block: whether each cluster's group is analysed after
//! every change, and which codes hold a version back from its cluster.

use std::collections::BTreeSet;

use meshhub_analyze::find_code;
use meshhub_mcp::settings::SettingError;
use serde::Deserialize;

/// What analysis does (`analysis:`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnalysisSpec {
    /// Analyse every group after each change (default on).
    pub enabled: bool,
    /// A group version carrying a message of one of these codes is not
    /// served: its cluster keeps its last good version (default: none).
    pub hold_back: BTreeSet<&'static str>,
}

impl Default for AnalysisSpec {
    fn default() -> Self {
        Self {
            enabled: true,
            hold_back: BTreeSet::new(),
        }
    }
}

/// `analysis:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawAnalysis {
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    hold_back: Vec<String>,
}

impl RawAnalysis {
    /// Checks the block: every code held back is one analysis raises, and
    /// holding back needs analysis on.
    pub fn check(&self) -> Result<AnalysisSpec, SettingError> {
        let enabled = self.enabled.unwrap_or(true);
        let mut hold_back = BTreeSet::new();
        for (i, code) in self.hold_back.iter().enumerate() {
            let Some(known) = find_code(code.trim()) else {
                return Err(SettingError::new(
                    format!("holdBack[{i}]"),
                    format!(
                        "{code:?} is no analysis code (known: {})",
                        meshhub_analyze::CODES
                            .iter()
                            .map(|c| c.code)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            };
            hold_back.insert(known.code);
        }
        if !enabled && !hold_back.is_empty() {
            return Err(SettingError::new(
                "holdBack",
                "needs analysis (analysis.enabled: false turns it off)",
            ));
        }
        Ok(AnalysisSpec { enabled, hold_back })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(yaml: &str) -> Result<AnalysisSpec, SettingError> {
        serde_saphyr::from_str::<RawAnalysis>(yaml).unwrap().check()
    }

    #[test]
    fn defaults_analyse_and_hold_nothing_back() {
        assert_eq!(check("{}").unwrap(), AnalysisSpec::default());
        let spec = check("holdBack: [IST0101, IST0145]").unwrap();
        assert!(spec.enabled);
        assert_eq!(spec.hold_back, ["IST0101", "IST0145"].into());
    }

    #[test]
    fn unknown_codes_and_holding_back_without_analysis_are_refused() {
        let e = check("holdBack: [IST0101, IST9999]").unwrap_err();
        assert_eq!(e.field, "holdBack[1]");
        assert!(e.message.contains("IST9999"), "{e}");
        let e = check("enabled: false\nholdBack: [IST0101]").unwrap_err();
        assert_eq!(e.field, "holdBack");
        assert!(serde_saphyr::from_str::<RawAnalysis>("hold: []").is_err());
    }
}

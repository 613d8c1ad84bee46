//! Analysis results as the admin port shows them (`/status`'s `analysis`)
//! and `meshhubctl analyze` prints them: per cluster, the messages about
//! the version its group last built, and the version held back, if any.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A message's severity (Istio's levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Level {
    /// Worth knowing.
    Info,
    /// Probably not what was meant.
    Warning,
    /// Will not work as written.
    Error,
}

impl Level {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Info => "Info",
            Self::Warning => "Warning",
            Self::Error => "Error",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// One analysis message (the fields `istioctl analyze -o json` has, plus
/// the field path).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisMessage {
    /// `IST0101`.
    pub code: String,
    /// `ReferencedResourceNotFound`.
    pub name: String,
    /// Its severity.
    pub level: Level,
    /// The object: `Kind namespace/name`.
    pub origin: String,
    /// The field (`spec.gateways[0]`); empty for the whole object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// What was found (shared with the analysis that found it: the hub
    /// holds one copy of a message's text however many clusters show it).
    pub message: Arc<str>,
}

/// Copies only what the view shows (the object's kind, namespace and
/// name as one `origin`): the analysed message stays shared by every
/// cluster whose content says it.
impl From<&meshhub_analyze::Message> for AnalysisMessage {
    fn from(m: &meshhub_analyze::Message) -> Self {
        use meshhub_analyze::Severity;
        Self {
            code: m.code.code.to_owned(),
            name: m.code.name.to_owned(),
            level: match m.code.severity {
                Severity::Error => Level::Error,
                Severity::Warning => Level::Warning,
                Severity::Info => Level::Info,
            },
            origin: m.object(),
            path: m.path.clone(),
            message: m.text.clone(),
        }
    }
}

impl fmt::Display for AnalysisMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}] {}", self.level, self.code, self.origin)?;
        if !self.path.is_empty() {
            write!(f, " {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// One cluster's analysis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAnalysis {
    /// The group (cluster).
    pub cluster: String,
    /// The version analysed (the history id of the group's latest build).
    pub version: String,
    /// Every message about it (shared: a message about an object every
    /// cluster receives is one allocation however many clusters carry it).
    #[serde(default)]
    pub messages: Vec<Arc<AnalysisMessage>>,
    /// The version held back, when the latest build carries a message of
    /// a code the hub holds back (`analysis.holdBack`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_back: Option<HeldBack>,
}

impl ClusterAnalysis {
    /// How many messages of `level`.
    pub fn count(&self, level: Level) -> usize {
        self.messages.iter().filter(|m| m.level == level).count()
    }
}

/// A version kept from its cluster, and what the cluster keeps instead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldBack {
    /// The version held back (history id).
    pub version: String,
    /// Since when the group's latest build is held back (RFC 3339).
    pub since: String,
    /// The codes that hold it back.
    pub codes: Vec<String>,
    /// The version the cluster is served instead (its last good one);
    /// `None` when it never had one (nothing is served).
    pub serving: Option<String>,
}

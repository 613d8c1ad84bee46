//! The history routes: `GET /history?cluster=C` ([`HistoryView`]),
//! `GET /history/diff?cluster=C&from=A&to=B` ([`DiffView`]), `GET /pins`
//! ([`PinView`]s), `POST /pins` ([`PinRequest`] → [`PinRecord`]) and
//! `POST /pins/unpin` ([`UnpinRequest`] → the removed [`PinRecord`]).
//! [`PinRecord`] and [`ChangeOrigin`] are also what the hub stores.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Header naming the caller of a state-changing request (set by the
/// admin authorization layer, or by a trusted proxy).
pub const USER_HEADER: &str = "x-meshhub-user";

/// One source change behind a version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeOrigin {
    /// The source.
    pub source: String,
    /// The unit (file path, `group/Kind/ns/name`, `collection/name`).
    pub unit: String,
    /// The objects it now defines (`Kind namespace/name`).
    #[serde(default)]
    pub objects: Vec<String>,
    /// The unit is gone (a deleted file or object).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
    /// Entries of the unit that could not be read.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unreadable: usize,
    /// Kubernetes resourceVersion of the (single) object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Who changed it, when the source knows (field manager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_by: Option<String>,
}

impl fmt::Display for ChangeOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.source, self.unit)?;
        if self.removed {
            f.write_str(" (removed)")?;
        }
        if self.unreadable > 0 {
            write!(f, " ({} unreadable)", self.unreadable)?;
        }
        if let Some(rv) = &self.resource_version {
            write!(f, " rv={rv}")?;
        }
        if let Some(by) = &self.changed_by {
            write!(f, " by {by}")?;
        }
        Ok(())
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One row of `GET /history`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionRow {
    /// Sequence number.
    pub seq: u64,
    /// Id.
    pub id: String,
    /// When.
    pub time: String,
    /// Source changes.
    #[serde(default)]
    pub origins: Vec<ChangeOrigin>,
    /// Source changes not listed.
    #[serde(default)]
    pub more_origins: usize,
    /// Resources.
    pub resources: usize,
    /// Resources per non-empty collection.
    #[serde(default)]
    pub counts: BTreeMap<String, usize>,
    /// Why the version was held back from its cluster (the analysis
    /// messages of the codes held back); empty when it was served.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_back: Vec<String>,
}

/// `GET /history`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryView {
    /// The group.
    pub cluster: String,
    /// Its versions, oldest first.
    pub versions: Vec<VersionRow>,
    /// Its pin, if pinned.
    pub pinned: Option<PinView>,
}

/// A pin as stored, and as `POST /pins` and `POST /pins/unpin` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PinRecord {
    /// The group (cluster).
    pub cluster: String,
    /// The version id served.
    pub version: String,
    /// Its sequence number.
    pub seq: u64,
    /// Since when (RFC 3339).
    pub since: String,
    /// Since when, in ms since the epoch (part of the served versions).
    pub since_unix_ms: u64,
    /// Who pinned it.
    pub by: String,
}

/// A pin as `/status` and `/pins` show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PinView {
    /// The pin.
    #[serde(flatten)]
    pub record: PinRecord,
    /// The newest version the sources produced since (its id).
    pub latest: Option<String>,
    /// How many versions the sources produced after the pinned one.
    #[serde(default)]
    pub behind: usize,
}

/// A shared pin (another replica's) that names a version this replica has
/// not recorded, as `/status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnresolvedPin {
    /// The pin as shared.
    #[serde(flatten)]
    pub record: PinRecord,
    /// Why it can't be served here.
    pub reason: String,
    /// What this replica serves the group instead.
    pub serving: String,
}

/// Body of `POST /pins`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PinRequest {
    /// The cluster.
    pub cluster: String,
    /// The version: id, unique id prefix, or `#N`.
    pub version: String,
}

/// Body of `POST /pins/unpin`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UnpinRequest {
    /// The cluster.
    pub cluster: String,
}

/// How an object differs between two versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// Only in the newer version.
    Added,
    /// Only in the older version.
    Removed,
    /// In both, with different content.
    Changed,
}

impl ChangeKind {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Removed => "removed",
            Self::Changed => "changed",
        }
    }
}

impl fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, not `write_str`: tables align it with `{:<8}`.
        f.pad(self.as_str())
    }
}

/// One object that differs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectChange {
    /// Its collection.
    pub collection: String,
    /// `namespace/name`.
    pub name: String,
    /// How.
    pub change: ChangeKind,
    /// For a changed object: a unified diff of its YAML (`from` → `to`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// `GET /history/diff`: the differences between two versions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffView {
    /// The group.
    pub cluster: String,
    /// The older side's id and sequence number.
    pub from: (String, u64),
    /// The newer side's id and sequence number.
    pub to: (String, u64),
    /// Every object that differs, by collection and name.
    pub changes: Vec<ObjectChange>,
}

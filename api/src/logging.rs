//! `/debug/logging` of the hub and the sink agent (the runtime's admin
//! route): `GET` answers [`LogLevels`]; `PUT` takes a [`LogChange`] and
//! answers the new [`LogLevels`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The answer: the filter in force.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLevels {
    /// The `MESHHUB_LOG`-syntax filter in force.
    pub filter: String,
}

/// A change: exactly one of the two.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogChange {
    /// The whole new filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// Levels of single modules (targets), on top of the filter in force.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub modules: BTreeMap<String, String>,
}

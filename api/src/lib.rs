//! The hub's API as data: the JSON documents its admin port answers and
//! accepts (`/status`, `/debug/object`, `/history`, `/pins`,
//! `/debug/logging`), the names of kinds they accept, and what a consumer
//! announces to be served a cluster's group. The hub builds these types and
//! meshhubctl reads them, so both sides agree by construction; enum-like
//! fields are enums whose serde names are the spellings on the wire.

pub mod analysis;
pub mod history;
pub mod kinds;
pub mod logging;
pub mod node;
pub mod object;
pub mod placement;
pub mod rollout;
pub mod status;
pub mod upward;

use serde::{Deserialize, Serialize};

/// An error answer of the admin port (`{"error": "..."}`): a message saying
/// what to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorView {
    /// The message.
    pub error: String,
}

#[cfg(test)]
mod tests;

//! One cluster's export as the hub merges it, with when the hub first saw
//! it (the conflict order): the data the judge and the generator share.

use std::time::SystemTime;

use meshhub_proto::upward::ServiceExport;

/// When the hub first saw an export (in this process): `seq` orders, `at`
/// is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FirstSeen {
    /// The hub's sequence of first sightings (lower: earlier).
    pub seq: u64,
    /// Its time.
    pub at: SystemTime,
}

impl Default for FirstSeen {
    fn default() -> Self {
        Self {
            seq: 0,
            at: SystemTime::UNIX_EPOCH,
        }
    }
}

/// One cluster's export as the generator merges it.
#[derive(Clone, Debug, PartialEq)]
pub struct Contribution {
    /// The export as received.
    pub export: ServiceExport,
    /// When the hub first saw it: the conflict order.
    pub first_seen: FirstSeen,
}

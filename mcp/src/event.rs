//! What happened on a source stream: the source machine's output for the
//! ledger, logs and metrics (its own module so that the ledger, which
//! records events, and the source, which keeps a ledger, do not import
//! each other).

/// Something that happened on the stream, for the ledger, logs and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The sink subscribed (or re-subscribed) a collection.
    Subscribed {
        /// Collection name.
        collection: String,
        /// Whether responses will be incremental once the sink's state is known.
        incremental: bool,
        /// Number of resources the sink said it holds.
        initial_resources: usize,
    },
    /// A response was produced.
    Sent {
        /// Collection name.
        collection: String,
        /// `system_version_info`.
        version: String,
        /// The response nonce.
        nonce: String,
        /// Resources carried.
        resources: usize,
        /// Names removed (incremental).
        removed: usize,
        /// Whether it was a delta.
        incremental: bool,
        /// Encoded size in bytes.
        bytes: usize,
    },
    /// The sink ACKed a response.
    Acked {
        /// Collection name.
        collection: String,
        /// The ACKed version.
        version: String,
        /// The nonce ACKed.
        nonce: String,
    },
    /// The sink NACKed a response; the version is parked.
    Nacked {
        /// Collection name.
        collection: String,
        /// The rejected version.
        version: String,
        /// The nonce NACKed.
        nonce: String,
        /// `error_detail.code`.
        code: i32,
        /// `error_detail.message`.
        message: String,
    },
    /// An ACK or NACK for a nonce that is not pending: ignored.
    Stale {
        /// Collection name.
        collection: String,
        /// The nonce it carried.
        nonce: String,
        /// Whether it was a NACK.
        nack: bool,
    },
    /// A response would exceed the peer's limit and was not sent.
    TooLarge {
        /// Collection name.
        collection: String,
        /// The version that could not be sent.
        version: String,
        /// Its encoded size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
}

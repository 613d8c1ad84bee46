//! What a consumer announces to be served a cluster's group, and how the
//! hub refuses a cluster it does not know. meshhubctl subscribes as a
//! cluster's consumer (`get`, `diff`) and tells that refusal from other
//! stream errors (by the refusal's reason) to list the clusters there are.

use meshhub_mcp::group::GroupError;

/// Name of the group of consumers that name no cluster.
pub const DEFAULT_GROUP: &str = "default";

/// `SinkNode` annotation naming the consumer's cluster.
pub const CLUSTER_ANNOTATION: &str = "meshhub.io/cluster";

/// The reason (`google.rpc.ErrorInfo`, domain
/// [`meshhub_mcp::group::ERROR_DOMAIN`]) of the hub's refusal of a consumer
/// whose [`CLUSTER_ANNOTATION`] names a cluster it does not know.
pub const UNKNOWN_CLUSTER: &str = "UNKNOWN_CLUSTER";

/// The hub's refusal of node `node_id`, whose [`CLUSTER_ANNOTATION`] names
/// `cluster`, which is not configured: the message says so, the reason is
/// [`UNKNOWN_CLUSTER`].
pub fn unknown_cluster_refusal(node_id: &str, cluster: &str) -> GroupError {
    GroupError::new(format!(
        "node {node_id:?}: annotation {CLUSTER_ANNOTATION}={cluster:?} names no configured cluster"
    ))
    .with_reason(UNKNOWN_CLUSTER)
}

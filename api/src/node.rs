//! What a consumer announces to be served a cluster's group, and how the
//! hub refuses a cluster it does not know. meshhubctl subscribes as a
//! cluster's consumer (`get`, `diff`) and tells that refusal from other
//! stream errors to list the clusters there are.

/// Name of the group of consumers that name no cluster.
pub const DEFAULT_GROUP: &str = "default";

/// `SinkNode` annotation naming the consumer's cluster.
pub const CLUSTER_ANNOTATION: &str = "meshhub.io/cluster";

/// The part of the refusal that says the cluster is unknown.
const NO_SUCH_CLUSTER: &str = "names no configured cluster";

/// The hub's refusal of node `node_id`, whose [`CLUSTER_ANNOTATION`] names
/// `cluster`, which is not configured.
pub fn unknown_cluster_refusal(node_id: &str, cluster: &str) -> String {
    format!("node {node_id:?}: annotation {CLUSTER_ANNOTATION}={cluster:?} {NO_SUCH_CLUSTER}")
}

/// Whether a stream's error `message` carries
/// [`unknown_cluster_refusal`] (the gRPC status message is all a consumer
/// gets of it).
pub fn is_unknown_cluster_refusal(message: &str) -> bool {
    message.contains(CLUSTER_ANNOTATION) && message.contains(NO_SUCH_CLUSTER)
}

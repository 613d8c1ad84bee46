//! The hub's integration tests, one binary (one link of the hub and its
//! dependencies instead of one per file): one module per subject. The hub
//! and the agent they start in-process come from `meshhub_e2e::inproc`,
//! waits and builders from `meshhub_testkit`, the rest from `support`.

mod analysis;
mod files;
mod grpc_tls;
mod hostile_config;
mod hostile_files;
mod introspection;
mod kube_source;
mod mcp_source;
mod remote_clusters;
mod rollout;
mod support;
mod upward;

//! The process-level end-to-end tests, one binary (linked once instead of
//! once per file): one module per subject. Each test takes its module's
//! turn of the machine first (`meshhub_e2e::turn`), so that tests of
//! different modules still never run side by side, as when each module was
//! its own binary; see e2e/src/turn.rs for why.

mod binary_runtime;
mod chaos_soak;
mod chart_monitoring;
mod console;
mod gateway_api;
mod gateway_api_parity;
mod gateway_api_status;
mod grpcurl;
mod helm_charts;
mod image;
mod istio15;
mod istio_skew;
mod istiod;
mod kind;
mod kube_harness;
mod kube_multicluster;
mod leader_election;
mod monitoring_metrics;
mod multicluster;
mod reconnect_churn;
mod rollout_clusters;
mod rollout_gates;
mod rollout_replicas;
mod sharded_dial_out;
mod shared_pins;
mod status_writeback;
mod status_writeback_shards;
mod upward;
mod validation_parity;
mod wasm_plugins;
mod webhook;

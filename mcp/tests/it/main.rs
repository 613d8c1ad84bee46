//! meshhub-mcp's integration tests, one binary (one link of the engine and
//! its dependencies instead of one per file): one module per subject, and
//! `support` for what they share.

mod delta_ads;
mod flow_control;
mod grpc;
mod hostile_streams;
mod support;
mod tls;
mod tls_reload;

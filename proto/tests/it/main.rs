//! meshhub-proto's integration tests, one binary (one link of the crate and
//! its dependencies instead of one per file): one module per subject.

mod hostile_input;
mod istio_api;
mod schemas;
mod transcode_fixtures;
mod wire_format;

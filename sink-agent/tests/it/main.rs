//! meshhub-sink-agent's integration tests, one binary (one link of the
//! agent and its dependencies instead of one per file): one module per
//! subject, and `support` for what they share.

mod agent;
mod cli;
mod faults;
mod gateway_api;
mod hostile_input;
mod support;

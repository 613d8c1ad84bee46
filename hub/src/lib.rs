//! meshhub hub: gathers mesh configuration from its sources, validates and
//! encodes it once, groups it per cluster and serves it over MCP.
//!
//! The data path: [`source`] (files, ...) → [`pipeline`] (the single writer
//! of the [`store`] and of the snapshot cache: debounce, per-group snapshots
//! by the rules of [`groups`]) → the engine's gRPC services, wired by
//! [`app`]. [`clusters`] dials the sink agents of remote clusters;
//! [`leader`] elects the one replica that dials; [`reload`] follows the configuration file. [`admin`] serves `/status` on top of the runtime crate's health, readiness, metrics and `/debug/*` routes (`meshhub_runtime`);
//! [`config`] parses and checks flags and the YAML file at the edge.
//! [`webhook`] is the validating admission webhook (Galley's webhook role),
//! checking with the same code as the sources. [`history`] keeps every
//! group's published versions and serves pins (rollbacks); [`audit`]
//! writes the audit log.

pub mod admin;
pub mod admin_routes;
pub mod analysis;
pub mod app;
pub mod audit;
pub mod clusters;
pub mod config;
pub mod configmap;
pub mod console;
pub mod groups;
pub mod history;
pub mod leader;
pub mod pipeline;
pub mod reload;
pub mod rollout;
pub mod source;
pub mod store;
pub mod upward;
pub mod validation;
pub mod watch_backoff;
pub mod webhook;
pub mod writeback;

//! meshhubctl run as a process against real hubs, sink agents and MCP
//! servers on loopback (in-process): one test binary, a module per area.

mod analysis;
mod history;
mod offline;
mod ops;
mod rollout;
mod status;
mod support;
mod tls;
mod wait;
mod watch;

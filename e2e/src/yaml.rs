//! The hub's configuration as the tests write it: a file source, clusters
//! whose agents it dials, and a short debounce so that changes show
//! quickly.

use std::fmt::Display;

/// A hub's configuration: file source `files` reading `objects` (a path,
/// relative to the configuration file or absolute), the `clusters` entries
/// (YAML lines from [`cluster`], "" for none), a debounce of 20 ms quiet
/// and 200 ms at most, then `extra` top-level lines.
pub fn files_hub(objects: impl Display, clusters: &str, extra: &str) -> String {
    format!(
        "sources:\n  - name: files\n    file: {{path: {objects}}}\nclusters:\n{clusters}debounce:\n  quiet: 20ms\n  maxWait: 200ms\n{extra}"
    )
}

/// A `clusters:` entry `name`, its `selector` lines first (e.g.
/// `    namespaces: [bookinfo]\n`), whose agent the hub dials at `agent`
/// (`http://…`, or `https://…` with a `tls:` block in `agent_extra`,
/// indented by six spaces), reconnecting quickly (100 ms to 1 s) so that
/// restarts converge fast.
pub fn cluster(name: &str, selector: &str, agent: impl Display, agent_extra: &str) -> String {
    format!(
        "  - name: {name}\n{selector}    agent:\n      address: {agent}\n      connectTimeout: 1s\n      reconnect: {{initial: 100ms, max: 1s}}\n{agent_extra}"
    )
}

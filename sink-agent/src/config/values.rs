//! The text forms of the agent's typed settings: one parser per type,
//! used by clap for a flag (or its environment variable), so a flag
//! arrives typed, and by the merge for the same key in the YAML file.
//!
//! Each returns a message without the setting's name: clap prefixes the
//! flag (`invalid value 'soon' for '--shutdown-grace <DURATION>': …`), the
//! merge prefixes the file key (`shutdownGrace: …`).

use std::net::SocketAddr;
use std::time::Duration;

/// How the agent gets its configuration, as written (`--mode`, `mode:`).
/// The checked form, with its addresses and TLS, is [`super::Mode`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeName {
    /// Serve `ResourceSink`; the hub dials in and pushes.
    #[default]
    Push,
    /// Dial the hub's `ResourceSource` and subscribe as a sink.
    Pull,
}

/// `push` or `pull`, exactly (as the flag's value enum spells them).
pub fn mode(s: &str) -> Result<ModeName, String> {
    match s {
        "push" => Ok(ModeName::Push),
        "pull" => Ok(ModeName::Pull),
        other => Err(format!("{other:?} is neither \"push\" nor \"pull\"")),
    }
}

/// `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`, any case).
pub fn boolean(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(format!("{s:?} is not a boolean (true/false)")),
    }
}

/// `host:port` with a literal IP.
pub fn socket_addr(s: &str) -> Result<SocketAddr, String> {
    s.trim()
        .parse()
        .map_err(|e| format!("{s:?} is not a socket address (host:port): {e}"))
}

/// A duration as humantime writes it (`10s`, `5m`, `1h 30m`).
pub fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

/// A size in bytes: `4194304`, `64MiB`, `512KiB`, `1GiB`, `10MB` (decimal
/// units too).
pub fn size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 64MiB or 4194304)"))?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        u => {
            return Err(format!(
                "{s:?}: unknown unit {u:?} (B, KiB, MiB, GiB, KB, MB, GB)"
            ));
        }
    };
    n.checked_mul(mult)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("{s:?} is too large"))
}

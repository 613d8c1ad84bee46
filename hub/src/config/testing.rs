//! What the configuration tests of every feature share: parse a file text
//! the way the hub does, in a directory with an `objects/` tree.

use super::{Args, Config, ConfigError};
use clap::Parser as _;

/// The smallest valid `sources:`.
pub(crate) const SOURCES: &str = "sources:\n  - file: {path: objects}\n";

/// The default flags.
pub(crate) fn args() -> Args {
    Args::parse_from(["meshhub"])
}

/// `text` as the file `meshhub.yaml` of a fresh directory holding `objects/`.
pub(crate) fn parse(text: &str) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("objects")).unwrap();
    let path = dir.path().join("meshhub.yaml");
    Config::from_yaml(&args(), &path, text)
}

/// The error `text` makes, as printed.
pub(crate) fn err(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

//! The `sources[].file` block: its serde form, defaults and checks.

use std::path::{Path, PathBuf};

use meshhub_mcp::settings::SettingError;
use serde::Deserialize;

/// Default `sources[].file.maxFileSize`: 16 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 16 << 20;

/// Default `sources[].file.maxObjectSize`: 1.5 MiB, etcd's default request
/// limit (`--max-request-bytes`), so a larger object could not be stored
/// by a cluster's API server anyway.
pub const DEFAULT_MAX_OBJECT_BYTES: u64 = 3 << 19;

/// A watched directory tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSourceSpec {
    /// The source's name (`file:<path>` unless configured).
    pub name: String,
    /// The directory (absolute, or relative to the working directory).
    pub root: PathBuf,
    /// Files never read as objects (the configuration file itself, when it
    /// lies inside the tree).
    pub exclude: Vec<PathBuf>,
    /// Larger files are reported as errors and not read (`maxFileSize`).
    pub max_file_bytes: u64,
    /// Larger documents (YAML documents, JSON values) are reported as errors
    /// and not parsed (`maxObjectSize`).
    pub max_object_bytes: u64,
}

/// `sources[].file` as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawFileSource {
    path: PathBuf,
    #[serde(default)]
    max_file_size: Option<u64>,
    #[serde(default)]
    max_object_size: Option<u64>,
}

impl RawFileSource {
    /// Checks the block: the directory exists (relative to `base`, the
    /// configuration file's directory); `config_file` is never read as
    /// objects. `name` is the configured name, if any.
    pub fn check(
        self,
        name: Option<String>,
        base: &Path,
        config_file: &Path,
    ) -> Result<FileSourceSpec, SettingError> {
        let root = if self.path.is_absolute() {
            self.path.clone()
        } else {
            base.join(&self.path)
        };
        if !root.is_dir() {
            return Err(SettingError::new(
                "path",
                format!("{} is not a directory", root.display()),
            ));
        }
        let positive = |field: &str, value: Option<u64>, default: u64| match value {
            None => Ok(default),
            Some(0) => Err(SettingError::new(field, "must be positive")),
            Some(n) => Ok(n),
        };
        Ok(FileSourceSpec {
            name: name.unwrap_or_else(|| format!("file:{}", self.path.display())),
            root,
            exclude: vec![config_file.to_owned()],
            max_file_bytes: positive("maxFileSize", self.max_file_size, DEFAULT_MAX_FILE_BYTES)?,
            max_object_bytes: positive(
                "maxObjectSize",
                self.max_object_size,
                DEFAULT_MAX_OBJECT_BYTES,
            )?,
        })
    }
}

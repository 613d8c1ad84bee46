//! The YAML configuration file of both binaries: read and parsed with the
//! same options, with errors that name the file and, when the parser knows
//! it, the line. Each binary's own settings and their checks stay with
//! the features that use them.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// Why the file itself is unusable (before any setting is looked at).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file can't be read.
    #[error("config file {path}: can't read")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The YAML does not parse or does not fit the schema.
    #[error("config file {path}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// Line of the error, when known.
        line: Option<u64>,
        /// What is wrong (naming the field).
        message: String,
    },
}

/// The file's text.
pub fn read(path: &Path) -> Result<String, FileError> {
    std::fs::read_to_string(path).map_err(|source| FileError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Parses the file's text into its raw form (an empty file is the
/// defaults); the message is the parser's first line, without a snippet.
pub fn parse<T: DeserializeOwned + Default>(path: &Path, text: &str) -> Result<T, FileError> {
    let options = serde_saphyr::options! { with_snippet: false };
    let raw: Option<T> =
        serde_saphyr::from_str_with_options(text, options).map_err(|e| FileError::Syntax {
            path: path.to_owned(),
            line: e.location().map(|l| l.line()),
            message: e.to_string().lines().next().unwrap_or_default().to_owned(),
        })?;
    Ok(raw.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Raw {
        name: Option<String>,
    }

    #[test]
    fn an_empty_file_is_the_defaults() {
        let raw: Raw = parse(Path::new("c.yaml"), "").unwrap();
        assert_eq!(raw.name, None);
    }

    #[test]
    fn a_syntax_error_names_the_file_and_line() {
        let e = parse::<Raw>(Path::new("c.yaml"), "name: a\nnope: 1\n").unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("config file c.yaml:2: "), "{text}");
        assert!(text.contains("nope"), "{text}");
    }

    #[test]
    fn an_unreadable_file_names_it() {
        let e = read(Path::new("/nonexistent/meshhub.yaml")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "config file /nonexistent/meshhub.yaml: can't read"
        );
    }
}

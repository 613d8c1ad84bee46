//! Output formats shared by `status`, `get`, `describe` and `diff`: a
//! table for people, YAML or JSON for scripts.

use clap::ValueEnum;
use serde::Serialize;

/// `-o table|yaml|json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns (or, for `describe`, sections).
    Table,
    /// YAML.
    Yaml,
    /// Pretty-printed JSON.
    Json,
}

/// `value` as YAML or pretty JSON (`None` for [`Format::Table`]).
pub fn structured<T: Serialize>(value: &T, format: Format) -> Option<Result<String, String>> {
    match format {
        Format::Table => None,
        Format::Json => Some(
            serde_json::to_string_pretty(value)
                .map(|s| s + "\n")
                .map_err(|e| e.to_string()),
        ),
        Format::Yaml => Some(serde_saphyr::to_string(value).map_err(|e| e.to_string())),
    }
}

/// Left-aligned columns separated by two spaces; the last column is not
/// padded.
pub fn render(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Versions are digests; tables show a prefix (`-o json` has them whole).
pub fn short(v: &str) -> String {
    if v.is_empty() {
        "-".to_owned()
    } else {
        v.chars().take(12).collect()
    }
}

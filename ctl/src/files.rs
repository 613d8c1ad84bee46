//! Reading configuration from files for the offline commands (`validate`,
//! `analyze`): YAML or JSON, files or directories (every `.yaml`, `.yml`
//! and `.json` below, in name order), `-` for standard input; every
//! document of a file, a `List`'s items one by one.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use meshhub_proto::object::Object;
use serde_json::Value;

/// One document read.
#[derive(Debug)]
pub struct Document {
    /// The file (`-` for standard input).
    pub file: String,
    /// Its place in the file: the document's number from 1 (as the hub's
    /// file source numbers them; `0`: the file as a whole), and the item's
    /// index in a `List` (`2`, `2.items[0]`).
    pub index: String,
    /// The object, or why the document is not one.
    pub parsed: Result<Object, String>,
}

/// Every document of `paths` but those of the file `skip` (a hub
/// configuration beside its objects, which the hub's file source skips
/// too); a path that can't be read is an error.
pub fn read(paths: &[PathBuf], skip: Option<&Path>) -> Result<Vec<Document>, String> {
    let skip = skip.and_then(|s| s.canonicalize().ok());
    let mut out = Vec::new();
    for p in paths {
        if p.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| format!("standard input: {e}"))?;
            documents("-", &text, false, &mut out);
            continue;
        }
        let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let files = if meta.is_dir() {
            let mut files = Vec::new();
            walk(p, &mut files)?;
            files.sort();
            files
        } else {
            vec![p.clone()]
        };
        for f in files {
            if skip.is_some() && f.canonicalize().ok() == skip {
                continue;
            }
            let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
            let json = f.extension().is_some_and(|e| e == "json");
            documents(&f.display().to_string(), &text, json, &mut out);
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if hidden {
            continue;
        }
        if path.is_dir() {
            walk(&path, out)?;
        } else if path
            .extension()
            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        {
            out.push(path);
        }
    }
    Ok(())
}

/// The documents of one file's `text`.
fn documents(file: &str, text: &str, json: bool, out: &mut Vec<Document>) {
    let docs: Result<Vec<Value>, String> = if json {
        serde_json::from_str::<Value>(text)
            .map(|v| vec![v])
            .map_err(|e| e.to_string())
    } else {
        serde_saphyr::from_multiple::<Value>(text).map_err(|e| e.to_string())
    };
    let docs = match docs {
        Ok(d) => d,
        Err(e) => {
            out.push(Document {
                file: file.to_owned(),
                index: "0".to_owned(),
                parsed: Err(format!("not YAML/JSON: {e}")),
            });
            return;
        }
    };
    for (i, doc) in docs.into_iter().enumerate() {
        let n = i + 1;
        if doc.is_null() {
            continue;
        }
        let items = (doc.get("kind").and_then(Value::as_str) == Some("List"))
            .then(|| doc.get("items").and_then(Value::as_array).cloned())
            .flatten();
        match items {
            Some(items) => {
                for (j, item) in items.into_iter().enumerate() {
                    out.push(object(file, format!("{n}.items[{j}]"), item));
                }
            }
            None => out.push(object(file, n.to_string(), doc)),
        }
    }
}

fn object(file: &str, index: String, doc: Value) -> Document {
    let parsed =
        serde_json::from_value::<Object>(doc).map_err(|e| format!("not a Kubernetes object: {e}"));
    Document {
        file: file.to_owned(),
        index,
        parsed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_lists_and_broken_files() {
        let mut out = Vec::new();
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}\n- 3\n";
        documents("f.yaml", text, false, &mut out);
        let got: Vec<(String, bool)> = out
            .iter()
            .map(|d| (format!("{}#{}", d.file, d.index), d.parsed.is_ok()))
            .collect();
        assert_eq!(
            got,
            [
                ("f.yaml#1".to_owned(), true),
                ("f.yaml#2.items[0]".to_owned(), true),
                ("f.yaml#2.items[1]".to_owned(), false),
            ]
        );
        let mut out = Vec::new();
        documents("g.json", "{\"kind\": ", true, &mut out);
        assert!(
            out[0]
                .parsed
                .as_ref()
                .unwrap_err()
                .starts_with("not YAML/JSON")
        );
    }
}

//! YAML/JSON text ↔ [`Object`]s.
//!
//! A text holds any number of objects: YAML documents separated by `---`,
//! a JSON object, array or stream of objects, and in either a Kubernetes
//! `List` (`kind: List` or `*List` with `items`). Each object is parsed on
//! its own, so that one bad document is reported with its number and line
//! and doesn't stop the others.

use serde::de::IgnoredAny;
use serde_json::{Map, Value};

use crate::object::{Object, ObjectMeta};

/// Why one document of a text could not be read as an object.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("document {document} ({}): {message}", match .line {
    Some(line) => format!("line {line}"),
    None => format!("from line {}", .start_line),
})]
pub struct ParseError {
    /// Which document, counting from 1 in the order of the text (YAML
    /// documents, including empty ones; JSON values; items of a `List`
    /// are numbered as their document).
    pub document: usize,
    /// Line (from 1) where the document starts.
    pub start_line: usize,
    /// Line (from 1) of the error, when the parser knows it.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

/// Why an object could not be rendered as text.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// JSON rendering failed.
    #[error("can't render the object as JSON")]
    Json(#[from] serde_json::Error),
    /// YAML rendering failed.
    #[error("can't render the object as YAML")]
    Yaml(#[from] serde_saphyr::ser::Error),
}

/// Parses a multi-document YAML text into objects, one result per object.
/// Empty documents (and documents holding only comments or `null`) are
/// skipped, but still counted in document numbers.
pub fn parse_yaml(text: &str) -> Vec<Result<Object, ParseError>> {
    parse_yaml_limited(text, usize::MAX)
}

/// [`parse_yaml`], but a document whose text is longer than
/// `max_document_bytes` is reported as an error and not parsed (the other
/// documents are). A `List` document counts as one document.
pub fn parse_yaml_limited(
    text: &str,
    max_document_bytes: usize,
) -> Vec<Result<Object, ParseError>> {
    let mut out = Vec::new();
    for (i, doc) in split_documents(text).iter().enumerate() {
        let document = i + 1;
        if doc.text.len() > max_document_bytes {
            out.push(Err(too_large(
                document,
                doc.start_line,
                doc.text.len(),
                max_document_bytes,
            )));
            continue;
        }
        // The fast path reads what manifests hold; serde-saphyr reads (and
        // reports on) everything else.
        let parsed = match super::yaml_tree::read(&doc.text) {
            Some(value) => Ok(Some(value)),
            None => {
                let options = serde_saphyr::options! { with_snippet: false };
                serde_saphyr::from_str_with_options::<Option<Value>>(&doc.text, options)
            }
        };
        match parsed {
            Ok(None) | Ok(Some(Value::Null)) => {}
            Ok(Some(value)) => push_objects(&mut out, value, document, doc.start_line),
            Err(e) => {
                // Lines are relative to the document's text, which starts on
                // the document's own first line.
                let line = e
                    .location()
                    .map(|l| doc.start_line + usize::try_from(l.line()).unwrap_or(1) - 1);
                out.push(Err(ParseError {
                    document,
                    start_line: doc.start_line,
                    line,
                    message: first_line(&e.to_string()),
                }));
            }
        }
    }
    out
}

/// Parses a JSON text (one value, an array of objects, or a stream of values)
/// into objects, one result per object. A syntax error ends the text.
pub fn parse_json(text: &str) -> Vec<Result<Object, ParseError>> {
    parse_json_limited(text, usize::MAX)
}

/// [`parse_json`], but a value (a top-level value, or an element of a
/// top-level array) whose text is longer than `max_document_bytes` is
/// reported as an error and not parsed (the others are). A `List` counts as
/// one value.
pub fn parse_json_limited(
    text: &str,
    max_document_bytes: usize,
) -> Vec<Result<Object, ParseError>> {
    let mut out = Vec::new();
    // First only the extent of each value is found (nothing is built), so
    // that an oversized one is never turned into a tree.
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<IgnoredAny>();
    let mut document = 0;
    loop {
        let start = stream.byte_offset();
        let Some(next) = stream.next() else { break };
        let start = start + leading_whitespace(text.get(start..).unwrap_or_default());
        let start_line = line_of(text, start);
        let raw = text.get(start..stream.byte_offset()).unwrap_or_default();
        // `None`: over the limit, not parsed.
        let next = next.and_then(|IgnoredAny| {
            if raw.len() > max_document_bytes {
                Ok(None)
            } else {
                serde_json::from_str::<Value>(raw).map(Some)
            }
        });
        match next {
            // An oversized array: its elements are checked one by one.
            Ok(None) if raw.starts_with('[') => {
                for element in array_elements(raw) {
                    document += 1;
                    let line = line_of(text, start + element.offset);
                    if element.text.len() > max_document_bytes {
                        out.push(Err(too_large(
                            document,
                            line,
                            element.text.len(),
                            max_document_bytes,
                        )));
                        continue;
                    }
                    match serde_json::from_str::<Value>(element.text) {
                        Ok(value) => push_objects(&mut out, value, document, line),
                        Err(e) => out.push(Err(ParseError {
                            document,
                            start_line: line,
                            line: Some(line + e.line().saturating_sub(1)),
                            message: e.to_string(),
                        })),
                    }
                }
            }
            Ok(None) => {
                document += 1;
                out.push(Err(too_large(
                    document,
                    start_line,
                    raw.len(),
                    max_document_bytes,
                )));
            }
            Ok(Some(Value::Array(items))) => {
                for item in items {
                    document += 1;
                    push_objects(&mut out, item, document, start_line);
                }
            }
            Ok(Some(value)) => {
                document += 1;
                push_objects(&mut out, value, document, start_line);
            }
            Err(e) => {
                out.push(Err(ParseError {
                    document: document + 1,
                    start_line,
                    line: Some(e.line()),
                    message: e.to_string(),
                }));
                break;
            }
        }
    }
    out
}

/// One element of a JSON array: its text and its byte offset in the array.
struct Element<'a> {
    offset: usize,
    text: &'a str,
}

/// The elements of `raw`, the text of a valid JSON array.
fn array_elements(raw: &str) -> Vec<Element<'_>> {
    let mut out = Vec::new();
    let mut at = 1; // after `[`
    loop {
        at += leading_whitespace(&raw[at..]);
        match raw.as_bytes().get(at) {
            Some(b']') | None => break,
            Some(b',') => {
                at += 1;
                continue;
            }
            Some(_) => {}
        }
        let mut one = serde_json::Deserializer::from_str(&raw[at..]).into_iter::<IgnoredAny>();
        if !matches!(one.next(), Some(Ok(IgnoredAny))) {
            break;
        }
        let end = at + one.byte_offset();
        out.push(Element {
            offset: at,
            text: &raw[at..end],
        });
        at = end;
    }
    out
}

/// The error for a document over the size limit.
fn too_large(document: usize, start_line: usize, len: usize, max: usize) -> ParseError {
    ParseError {
        document,
        start_line,
        line: None,
        message: format!("{len} bytes exceed maxObjectSize ({max} bytes); not parsed"),
    }
}

/// `obj` as pretty-printed JSON.
pub fn to_json(obj: &Object) -> Result<String, RenderError> {
    Ok(serde_json::to_string_pretty(obj)?)
}

/// `obj` as a YAML document (without a `---` marker).
pub fn to_yaml(obj: &Object) -> Result<String, RenderError> {
    Ok(serde_saphyr::to_string(obj)?)
}

/// Turns one parsed value into objects: a `List` gives its items.
fn push_objects(
    out: &mut Vec<Result<Object, ParseError>>,
    value: Value,
    document: usize,
    start_line: usize,
) {
    let error = |message: String| ParseError {
        document,
        start_line,
        line: None,
        message,
    };
    let is_list = value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && value.get("items").is_some_and(Value::is_array);
    if is_list {
        if let Some(Value::Array(items)) = value.get("items") {
            for (i, item) in items.iter().enumerate() {
                out.push(
                    to_object(item.clone())
                        .map_err(|m| error(format!("items[{i}]{}", prefixed(&m)))),
                );
            }
        }
        return;
    }
    out.push(to_object(value).map_err(|m| error(m.trim_start_matches(": ").to_owned())));
}

/// `: message`, or `.path: message` when the message starts with a path.
fn prefixed(m: &str) -> String {
    if m.starts_with(": ") {
        m.to_owned()
    } else {
        format!(".{m}")
    }
}

/// A JSON value as an object; on error `path: reason` (or `: reason` at the
/// root).
///
/// The mapping is taken apart by hand rather than through `Object`'s
/// `Deserialize`: its flattened `content` would make serde buffer the
/// whole tree once more before building it (a third of the time of reading
/// a large corpus went there).
fn to_object(value: Value) -> Result<Object, String> {
    let Value::Object(mut map) = value else {
        return Err(": expected a mapping (a Kubernetes object)".to_owned());
    };
    let api_version = take_string(&mut map, "apiVersion")?;
    let kind = take_string(&mut map, "kind")?;
    let metadata = match map.remove("metadata") {
        None => ObjectMeta::default(),
        Some(meta) => serde_path_to_error::deserialize::<_, ObjectMeta>(meta).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            if path == "." {
                format!("metadata: {inner}")
            } else {
                format!("metadata.{path}: {inner}")
            }
        })?,
    };
    Ok(Object {
        api_version,
        kind,
        metadata,
        content: map,
    })
}

/// Removes the string field `key` of an object's mapping.
fn take_string(map: &mut Map<String, Value>, key: &str) -> Result<String, String> {
    match map.remove(key) {
        Some(v) => serde_json::from_value(v).map_err(|e| format!("{key}: {e}")),
        None => Err(format!(": missing field `{key}`")),
    }
}

/// One YAML document of a text.
#[derive(Debug, PartialEq)]
pub(super) struct Document {
    /// Line (from 1) of the document's first line in the whole text.
    start_line: usize,
    /// The document's text, markers blanked so that columns stay right.
    pub(super) text: String,
}

/// Splits YAML text into documents at `---` (document start) and `...`
/// (document end) markers. YAML forbids these markers at the start of a line
/// inside any scalar, so a line-based split is exact. Text before the first
/// `---` is a document only if it has content besides comments.
pub(super) fn split_documents(text: &str) -> Vec<Document> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut docs = Vec::new();
    let mut current = Document {
        start_line: 1,
        text: String::new(),
    };
    let mut explicit = false;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let n = i + 1;
        if is_marker(line, "---") {
            if explicit || has_content(&current.text) {
                docs.push(current);
            }
            explicit = true;
            // Keep what follows the marker (`--- !tag`, `--- {a: 1}`).
            current = Document {
                start_line: n,
                text: format!("   {}", &line[3..]),
            };
        } else if is_marker(line, "...") {
            if explicit || has_content(&current.text) {
                docs.push(current);
            }
            explicit = false;
            current = Document {
                start_line: n + 1,
                text: String::new(),
            };
        } else {
            current.text.push_str(line);
        }
    }
    if explicit || has_content(&current.text) {
        docs.push(current);
    }
    docs
}

/// Whether `line` is the marker `m` (followed by nothing or whitespace). A
/// line holding a lone CR is several lines to YAML (a text of classic Mac
/// line ends is one line here): it is no marker, and the parser reads it
/// whole (else what follows the CR would be dropped with the marker).
fn is_marker(line: &str, m: &str) -> bool {
    let body = line.strip_suffix('\n').unwrap_or(line);
    let body = body.strip_suffix('\r').unwrap_or(body);
    !body.contains('\r')
        && line
            .strip_prefix(m)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// Whether YAML text has anything besides blank lines and comments. A lone
/// CR breaks a line too (YAML's rule): a text of lone-CR lines whose first
/// is a comment has content after it.
fn has_content(text: &str) -> bool {
    text.split(['\n', '\r']).any(|l| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#')
    })
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_owned()
}

fn leading_whitespace(s: &str) -> usize {
    s.len() - s.trim_start().len()
}

/// Line (from 1) of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_split_at_markers_with_their_lines() {
        let text = "# header\n---\na: 1\n---\n\n---   # c\nb: 2\n...\nc: 3\n";
        let docs = split_documents(text);
        let starts: Vec<usize> = docs.iter().map(|d| d.start_line).collect();
        assert_eq!(starts, [2, 4, 6, 9]);
        assert_eq!(docs[0].text, "   \na: 1\n");
        assert!(!has_content(&docs[1].text));
        assert_eq!(docs[2].text, "      # c\nb: 2\n");
        assert_eq!(docs[3].text, "c: 3\n");
    }

    #[test]
    fn a_bare_text_is_one_document() {
        let docs = split_documents("a: 1\n");
        assert_eq!(
            docs,
            [Document {
                start_line: 1,
                text: "a: 1\n".to_owned()
            }]
        );
        assert!(split_documents("# only a comment\n").is_empty());
        assert!(is_marker("---\n", "---"));
        assert!(!is_marker("----\n", "---"));
        assert!(!is_marker(" ---\n", "---"));
    }

    #[test]
    fn objects_are_taken_apart_with_the_path_of_what_is_wrong() {
        let o = to_object(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"x": "y"}},
            "data": {"k": "v"}
        }))
        .expect("an object");
        assert_eq!(
            (o.api_version.as_str(), o.kind.as_str()),
            ("v1", "ConfigMap")
        );
        assert_eq!(o.metadata.labels["x"], "y");
        assert_eq!(o.content.keys().collect::<Vec<_>>(), ["data"]);
        let err = |v| to_object(v).expect_err("invalid");
        assert_eq!(
            err(serde_json::json!({"kind": "ConfigMap"})),
            ": missing field `apiVersion`"
        );
        assert_eq!(
            err(serde_json::json!({"apiVersion": 1, "kind": "ConfigMap"})),
            "apiVersion: invalid type: integer `1`, expected a string"
        );
        assert_eq!(
            err(serde_json::json!({"apiVersion": "v1", "kind": "C", "metadata": {"name": 7}})),
            "metadata.name: invalid type: integer `7`, expected a string"
        );
        assert!(
            err(serde_json::json!({"apiVersion": "v1", "kind": "C", "metadata": 3}))
                .starts_with("metadata: invalid type: integer `3`")
        );
        assert_eq!(
            err(serde_json::json!([1])),
            ": expected a mapping (a Kubernetes object)"
        );
    }
}

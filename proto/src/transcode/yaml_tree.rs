//! One YAML document read straight into a [`serde_json::Value`] from a
//! parser's events: the fast path of [`super::parse`].
//!
//! serde-saphyr reads YAML with `granit-parser` and then routes every event
//! through serde's data model, which costs more than the parse itself (its
//! deserializer layer is ~55 % of the YAML time; docs/performance.md, round
//! 2 part 4). This module builds the tree from the events of
//! `saphyr-parser`, the YAML 1.2 parser `granit-parser` was forked from
//! (same scanner and grammar, ~1.5× faster on manifests: granit's events
//! carry spans and comments it moves around), for what manifests hold:
//! mappings, sequences and untagged scalars, typed exactly as serde-saphyr
//! types them into a `Value` with the options `parse.rs` uses (YAML 1.1
//! booleans, YAML 1.2 integers and floats, no legacy octal).
//!
//! Everything else makes [`read`] answer `None`, and the caller reads the
//! document with serde-saphyr, which then decides and reports: a syntax
//! error, anchors and aliases, tags, merge keys (`<<`), null or container
//! keys, duplicate keys (plain integer keys compared by value, as
//! serde-saphyr compares them), serde_json's private key tokens, a
//! directive (`%YAML`, `%TAG`), a tab or another control character, a
//! non-finite float, documents over 512 KiB, documents near serde-saphyr's
//! depth and node budgets, and the shapes the two parsers read differently
//! (at [`left_to_serde_saphyr`] and `Builder::event`: each found by a
//! test or a review, so a shape no test has tried may still differ). Its
//! tests hold it equal to serde-saphyr on every fixture, on generated
//! scalars and documents, and on random texts of YAML's indicators,
//! quotes, escapes, line breaks and control characters; the one intended
//! difference, long runs of comments, is at [`read`].

use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde_json::{Map, Number, Value};

/// Containers nested deeper than this go to serde-saphyr (its budget allows
/// 64 and reports a breach).
const MAX_DEPTH: usize = 48;
/// Nodes (scalars and containers) above this go to serde-saphyr (its budget
/// allows 250,000; a flow sequence of one-letter items reaches that in
/// 500 KB).
const MAX_NODES: usize = 200_000;
/// Documents longer than this go to serde-saphyr. Its budgets also count
/// comments (1,000,000 events, 64 MiB of comment text), which this path
/// does not see; a parser event takes at least a byte of text, so below
/// this size neither those nor its 64 MiB of scalar text can be reached.
/// Manifests are a few KiB.
const MAX_TEXT_BYTES: usize = 512 << 10;

/// YAML's indicators, none of which may start a plain scalar.
const INDICATORS: [char; 16] = [
    '|', '>', '@', '`', '%', '!', '&', '*', '#', ',', '[', ']', '{', '}', '\'', '"',
];

/// How far (in characters) a key inside a flow collection may start before
/// its value: granit-parser refuses an implicit key whose `:` is more than
/// 1,024 characters after its start (serde-saphyr's
/// `simple_key_max_lookahead`); saphyr-parser enforces that limit in block
/// collections only. Under it, with a margin for the `:` and spaces.
const FLOW_KEY_REACH: usize = 1000;

/// Whether the text holds what this path leaves to serde-saphyr before
/// parsing: a directive line (`%YAML`, `%TAG`; the events do not show
/// them), a control character (granit-parser refuses the characters YAML
/// does not print — C0 but line breaks, DEL, C1, U+FFFE, U+FFFF —,
/// saphyr-parser reads them; and a tab, where YAML allows one and where it
/// does not is where parsers differ most), a line break of YAML 1.1 only
/// (NEL, LS, PS; YAML 1.2 reads them as text), a byte order mark (at the
/// start it is no content; elsewhere the two parsers disagree), or a last
/// line of spaces with no line break after it (`saphyr-parser` keeps it as
/// an empty line of a block scalar before it, `granit-parser` clips it).
fn left_to_serde_saphyr(text: &str) -> bool {
    text.len() > MAX_TEXT_BYTES
        || text.starts_with('%')
        || text.contains("\n%")
        || text.contains("\r%")
        || text
            .bytes()
            .any(|b| (b < 0x20 && b != b'\n' && b != b'\r') || b == 0x7f)
        || (!text.ends_with('\n') && text.ends_with([' ', '\r']))
        || (!text.is_ascii()
            && text.chars().any(|c| {
                matches!(
                    c,
                    '\u{80}'
                        ..='\u{9f}'
                            | '\u{2028}'
                            | '\u{2029}'
                            | '\u{feff}'
                            | '\u{fffe}'
                            | '\u{ffff}'
                )
            }))
}

/// The document's value (`Value::Null` for an empty document), or `None`
/// when serde-saphyr must read it (see the module's documentation).
///
/// Comments are not events of `saphyr-parser`, so a run of more than 32
/// comment lines where the parser looks ahead (such as between `key:` and
/// its nested block) is read here; serde-saphyr refuses it with "too many
/// buffered comments", a limit of its own that kubectl and Go's YAML do
/// not have.
pub(super) fn read(text: &str) -> Option<Value> {
    if left_to_serde_saphyr(text) {
        return None;
    }
    let mut builder = Builder {
        text,
        ..Builder::default()
    };
    for item in Parser::new_from_str(text) {
        let (event, span) = item.ok()?;
        builder.event(event, span)?;
    }
    builder.finish()
}

/// A container being filled.
enum Frame {
    Seq(Vec<Value>),
    Map(MapFrame),
}

#[derive(Default)]
struct MapFrame {
    map: Map<String, Value>,
    /// The key whose value comes next.
    key: Option<String>,
    /// The values of the plain integer keys so far: serde-saphyr compares
    /// those by value (`0xB` and `11` are the same key to it, and a
    /// duplicate), though it hands them over as written.
    integer_keys: Vec<(bool, u128)>,
}

/// Where an open container is in the text.
#[derive(Clone, Copy)]
enum Place {
    /// A block collection and the column its start event gives: its first
    /// key's, or its first `-`'s — for a sequence not indented under its
    /// key, the column of its first item's content, past granit's block
    /// indentation, so the continuation check is stricter there, never
    /// laxer. (An implicit one-pair mapping inside a flow sequence, `[a:
    /// b]`, is one too; a flow collection over several lines is left
    /// anyway.)
    Block(usize),
    /// A flow collection (`[`, `{`) and the line it starts on.
    Flow(usize),
}

#[derive(Default)]
struct Builder<'t> {
    text: &'t str,
    stack: Vec<Frame>,
    /// Where each open container is, as `stack`.
    places: Vec<Place>,
    /// Where (in characters) the last key read inside a flow collection
    /// starts, until its value's event ([`FLOW_KEY_REACH`]).
    flow_key: Option<usize>,
    root: Option<Value>,
    documents: usize,
    nodes: usize,
}

impl Builder<'_> {
    /// Takes one event and where it is in the text (a flow collection's
    /// start and end events span its bracket, a block collection's none);
    /// `None` hands the document to serde-saphyr.
    ///
    /// Four shapes are left to serde-saphyr although `saphyr-parser`
    /// reads them, because `granit-parser` (serde-saphyr's parser, and the
    /// reference) refuses them: a quoted scalar over several lines whose
    /// continuation line is not indented past its block (checked here as
    /// granit checks it), a flow collection over several lines (granit
    /// refuses an implicit key whose `:` is on a later line), a key inside
    /// a flow collection more than [`FLOW_KEY_REACH`] characters before its
    /// value, and a plain scalar starting with an indicator (`[>]`: granit
    /// refuses it, as YAML does).
    fn event(&mut self, event: Event<'_>, span: Span) -> Option<()> {
        if let Some(key) = self.flow_key.take()
            && span.start.index().saturating_sub(key) > FLOW_KEY_REACH
        {
            return None;
        }
        match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    return None;
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                if anchor != 0 || tag.is_some() {
                    return None;
                }
                if style == ScalarStyle::Plain && text.starts_with(INDICATORS) {
                    return None;
                }
                let quote = match style {
                    ScalarStyle::SingleQuoted => Some('\''),
                    ScalarStyle::DoubleQuoted => Some('"'),
                    _ => None,
                };
                if let Some(quote) = quote
                    && span.start.line() != span.end.line()
                {
                    self.check_continuations(span, quote)?;
                }
                self.node()?;
                if let Some(Frame::Map(frame @ MapFrame { key: None, .. })) = self.stack.last_mut()
                {
                    // A duplicate is found when its value is attached.
                    let name = key_text(text.as_ref(), style)?;
                    if style == ScalarStyle::Plain
                        && let Some(value) = integer(trim(&name))
                    {
                        if frame.integer_keys.contains(&value) {
                            return None;
                        }
                        frame.integer_keys.push(value);
                    }
                    frame.key = Some(name);
                    if self.places.iter().any(|p| matches!(p, Place::Flow(_))) {
                        self.flow_key = Some(span.start.index());
                    }
                } else {
                    let value = scalar_value(text.into_owned(), style)?;
                    self.attach(value)?;
                }
            }
            Event::SequenceStart(anchor, tag) => {
                self.open(anchor, tag.is_some(), Frame::Seq(Vec::new()), span)?;
            }
            Event::MappingStart(anchor, tag) => {
                self.open(anchor, tag.is_some(), Frame::Map(MapFrame::default()), span)?;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some(Place::Flow(line)) = self.places.pop()
                    && line != span.end.line()
                {
                    return None;
                }
                let value = match self.stack.pop()? {
                    Frame::Seq(items) => Value::Array(items),
                    Frame::Map(MapFrame { map, key: None, .. }) => Value::Object(map),
                    Frame::Map(_) => return None,
                };
                self.attach(value)?;
            }
            _ => return None,
        }
        Some(())
    }

    fn node(&mut self) -> Option<()> {
        self.nodes += 1;
        (self.nodes <= MAX_NODES).then_some(())
    }

    fn open(&mut self, anchor: usize, tagged: bool, frame: Frame, span: Span) -> Option<()> {
        if anchor != 0 || tagged || self.stack.len() >= MAX_DEPTH {
            return None;
        }
        // A container as a key (`? [a]: b`) is not a string key.
        if matches!(
            self.stack.last(),
            Some(Frame::Map(MapFrame { key: None, .. }))
        ) {
            return None;
        }
        self.node()?;
        self.stack.push(frame);
        self.places.push(if span.is_empty() {
            Place::Block(span.start.col())
        } else {
            Place::Flow(span.start.line())
        });
        Some(())
    }

    /// A quoted scalar over several lines: as `granit-parser` requires,
    /// each continuation line is indented more than the enclosing block
    /// collection (YAML 1.2.2's s-flow-line-prefix), unless it starts with
    /// the closing quote; `None` otherwise. (A line after an escaped line
    /// break, which granit does not check, is held to the same rule: such
    /// a document goes to serde-saphyr, which decides.) Spans count
    /// characters, so a text that is not ASCII goes to serde-saphyr too.
    fn check_continuations(&self, span: Span, quote: char) -> Option<()> {
        if !self.text.is_ascii() {
            return None;
        }
        let block = self.places.iter().rev().find_map(|place| match place {
            Place::Block(col) => Some(*col),
            // Inside a flow collection over one line: no line breaks.
            Place::Flow(_) => None,
        });
        let source = self.text.get(span.start.index()..span.end.index())?;
        for line in source.split(['\n', '\r']).skip(1) {
            let content = line.trim_start_matches(' ');
            let col = line.len() - content.len();
            if content.is_empty() || content.starts_with(quote) {
                continue;
            }
            if block.is_some_and(|block| col <= block) {
                return None;
            }
        }
        Some(())
    }

    /// Puts a finished value where it belongs.
    fn attach(&mut self, value: Value) -> Option<()> {
        match self.stack.last_mut() {
            None if self.root.is_none() => self.root = Some(value),
            None => return None,
            Some(Frame::Seq(items)) => items.push(value),
            Some(Frame::Map(frame)) => {
                if frame.map.insert(frame.key.take()?, value).is_some() {
                    return None; // a duplicate key
                }
            }
        }
        Some(())
    }

    fn finish(self) -> Option<Value> {
        if !self.stack.is_empty() {
            return None;
        }
        Some(self.root.unwrap_or(Value::Null))
    }
}

/// A mapping key as a string: as written (serde-saphyr does not type keys
/// read into a `Value`: `8080:` is the key "8080"), except a plain null key,
/// which it rejects, the merge key, and serde_json's private tokens (a
/// first key `$serde_json::private::RawValue` makes serde_json's `Value`
/// read the value as raw JSON when its `raw_value` feature is on, as it is
/// in the binaries).
fn key_text(text: &str, style: ScalarStyle) -> Option<String> {
    if style == ScalarStyle::Plain && (is_null(text) || text == "<<") {
        return None;
    }
    if text.starts_with("$serde_json::private::") {
        return None;
    }
    Some(text.to_owned())
}

/// A plain scalar's integer value, up to 128 bits: (negative, magnitude),
/// `-0` being 0 (as serde-saphyr types values and fingerprints keys).
fn integer(t: &str) -> Option<(bool, u128)> {
    match t.strip_prefix('-') {
        Some(digits) => magnitude(digits).map(|m| (m != 0, m)),
        None => magnitude(t.strip_prefix('+').unwrap_or(t)).map(|m| (false, m)),
    }
}

fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

/// A scalar in a value position; `None` for a non-finite float, which
/// serde-saphyr rejects with its own message.
fn scalar_value(text: String, style: ScalarStyle) -> Option<Value> {
    if style != ScalarStyle::Plain {
        return Some(Value::String(text));
    }
    Some(match plain_scalar(&text)? {
        Plain::Null => Value::Null,
        Plain::Bool(b) => Value::Bool(b),
        Plain::Unsigned(n) => Value::from(n),
        Plain::Signed(n) => Value::from(n),
        Plain::Float(f) => Value::Number(Number::from_f64(f)?),
        Plain::Text => Value::String(text),
    })
}

/// What an untagged plain scalar is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Plain {
    Null,
    Bool(bool),
    Unsigned(u64),
    Signed(i64),
    /// Always finite.
    Float(f64),
    Text,
}

/// Types an untagged plain scalar in serde-saphyr's order for an untyped
/// value: null, YAML 1.1 boolean, integer (signed when it starts with `-`),
/// YAML 1.2 float, text. `None` for a non-finite float.
fn plain_scalar(text: &str) -> Option<Plain> {
    if is_null(text) {
        return Some(Plain::Null);
    }
    let t = trim(text);
    if let Some(b) = yaml11_bool(t) {
        return Some(Plain::Bool(b));
    }
    // Out of 64-bit range, an integer is read as a float, as serde-saphyr
    // reads it.
    let int = integer(t).and_then(|(negative, magnitude)| {
        if negative {
            0i64.checked_sub_unsigned(u64::try_from(magnitude).ok()?)
                .map(Plain::Signed)
        } else {
            u64::try_from(magnitude).ok().map(Plain::Unsigned)
        }
    });
    if int.is_some() {
        return int;
    }
    match float(t) {
        Some(f) if f.is_finite() => Some(Plain::Float(f)),
        Some(_) => None,
        None => Some(Plain::Text),
    }
}

/// The padding serde-saphyr trims before typing a scalar.
fn trim(s: &str) -> &str {
    s.trim_matches([' ', '\t', '\r', '\n'])
}

fn yaml11_bool(t: &str) -> Option<bool> {
    const TRUE: [&str; 4] = ["true", "yes", "y", "on"];
    const FALSE: [&str; 4] = ["false", "no", "n", "off"];
    if TRUE.iter().any(|w| t.eq_ignore_ascii_case(w)) {
        Some(true)
    } else if FALSE.iter().any(|w| t.eq_ignore_ascii_case(w)) {
        Some(false)
    } else {
        None
    }
}

/// The magnitude of an integer without its sign: `0x`, `0o` and `0b`
/// prefixes, single underscores between digits, no leading zero on a
/// decimal (`0127` is text, as YAML 1.2 without legacy octal reads it).
fn magnitude(digits: &str) -> Option<u128> {
    let (radix, digits) = if let Some(d) = strip_radix(digits, 'x') {
        (16, d)
    } else if let Some(d) = strip_radix(digits, 'o') {
        (8, d)
    } else if let Some(d) = strip_radix(digits, 'b') {
        (2, d)
    } else {
        if digits.starts_with('0') && digits != "0" {
            return None;
        }
        (10, digits)
    };
    let bytes = digits.as_bytes();
    let mut value: u128 = 0;
    let mut seen = false;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'_' {
            let between =
                i > 0 && bytes[i - 1] != b'_' && bytes.get(i + 1).is_some_and(|&n| n != b'_');
            if !between {
                return None;
            }
            continue;
        }
        let digit = char::from(b).to_digit(radix)?;
        value = value
            .checked_mul(u128::from(radix))?
            .checked_add(u128::from(digit))?;
        seen = true;
    }
    seen.then_some(value)
}

fn strip_radix(digits: &str, letter: char) -> Option<&str> {
    let rest = digits.strip_prefix('0')?;
    rest.strip_prefix(letter)
        .or_else(|| rest.strip_prefix(letter.to_ascii_uppercase()))
}

/// A YAML 1.2 float: `.inf`/`.nan` spellings with an optional sign, a
/// finite decimal, or a numeral (a digit after the optional sign) too large
/// for `f64`, read as infinite. `None`: not a float.
fn float(t: &str) -> Option<f64> {
    let (negative, unsigned) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    match unsigned {
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        ".inf" | ".Inf" | ".INF" if negative => return Some(f64::NEG_INFINITY),
        ".inf" | ".Inf" | ".INF" => return Some(f64::INFINITY),
        _ => {}
    }
    match t.parse::<f64>() {
        Ok(f) if f.is_finite() => Some(f),
        Ok(f) if f.is_infinite() && unsigned.as_bytes().first().is_some_and(u8::is_ascii_digit) => {
            Some(f)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;

//! A spec's JSON written straight to its canonical protobuf bytes.
//!
//! The general way (`spec_to_message`, then `encode_canonical`) reads the
//! JSON into a `DynamicMessage` and encodes that: at ingest it was a fifth
//! of the hub's CPU (100,000 objects: ~1 CPU-s), mostly descriptor lookups
//! and the dynamic message's own allocations. This module writes the same
//! bytes in one walk of the JSON, over a table of each message's fields
//! built once per thread.
//!
//! It takes only what it is sure of: valid JSON in its plainest spelling
//! (a field by its JSON or proto name, a number where a number belongs, an
//! enum by name or number, a `Duration` string, a wrapper's value). On
//! anything else — an unknown field, a quoted integer, a `Struct`, a null
//! where the general way decides, a value out of range, two fields of one
//! oneof — it answers `None` and the caller takes the general way, which
//! accepts, relaxes or explains exactly as before. So the bytes of every
//! object it encodes are the general way's (a test compares both over
//! every fixture and generated object) and nothing is accepted that was
//! refused.

use std::cell::RefCell;
use std::collections::HashMap;

use prost::Message as _;
use prost::encoding::{WireType, encode_key, encode_varint};
use prost_reflect::{FieldDescriptor, Kind as PKind, MessageDescriptor};
use serde_json::{Map, Number, Value};

/// `desc`'s canonical encoding of `spec`, or `None` when the general way
/// must decide.
pub(super) fn encode(desc: &MessageDescriptor, spec: &Value) -> Option<Vec<u8>> {
    // A well-known type has its own JSON (a `Struct` is any object).
    if desc.full_name().starts_with("google.protobuf.") {
        return None;
    }
    let obj = spec.as_object()?;
    TABLES.with(|tables| {
        let mut tables = tables.borrow_mut();
        let root = tables.index(desc);
        let mut out = Vec::new();
        message(&tables, root, obj, &mut out)?;
        Some(out)
    })
}

thread_local! {
    static TABLES: RefCell<Tables> = RefCell::new(Tables::default());
}

/// Every message met so far, with the messages its fields name.
#[derive(Default)]
struct Tables {
    /// The pool the tables describe.
    pool: Option<prost_reflect::DescriptorPool>,
    by_name: HashMap<String, usize>,
    all: Vec<Table>,
}

/// One message's fields, by JSON and by proto name.
struct Table {
    desc: MessageDescriptor,
    by_name: HashMap<Box<str>, usize>,
    fields: Vec<Field>,
}

struct Field {
    number: u32,
    shape: Shape,
    /// Written even at its default (a oneof member, a proto3 `optional`).
    presence: bool,
    /// Its oneof's index in the message.
    oneof: Option<u32>,
}

enum Shape {
    Single(Ty),
    List { ty: Ty, packed: bool },
    Map(Entry),
}

/// A map field's entry message (a key is always a scalar).
struct Entry {
    key: Scalar,
    key_presence: bool,
    value: Ty,
    value_presence: bool,
}

impl Shape {
    /// The type of a single value, a list's element or a map's value.
    fn element(&self) -> &Ty {
        match self {
            Shape::Single(ty) | Shape::List { ty, .. } | Shape::Map(Entry { value: ty, .. }) => ty,
        }
    }
}

#[derive(Clone)]
enum Ty {
    Scalar(Scalar),
    /// An enum: its values by name.
    Enum(prost_reflect::EnumDescriptor),
    /// A message: its table's index.
    Message(usize),
    Duration,
    /// A wrapper (`google.protobuf.Int32Value`, …) of this scalar.
    Wrapper(Scalar),
    /// Anything else: the general way decides.
    Other,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scalar {
    Bool,
    Int32,
    Sint32,
    Sfixed32,
    Int64,
    Sint64,
    Sfixed64,
    Uint32,
    Fixed32,
    Uint64,
    Fixed64,
    Float,
    Double,
    String,
    /// Base64 has spellings the general way sorts out.
    Bytes,
}

impl Tables {
    /// `desc`'s table, built with every message it reaches.
    fn index(&mut self, desc: &MessageDescriptor) -> usize {
        // Names are unique within a pool; another pool starts afresh (there
        // is one in the hub, so this is for tests).
        if self.pool.as_ref() != Some(desc.parent_pool()) {
            *self = Tables {
                pool: Some(desc.parent_pool().clone()),
                ..Tables::default()
            };
        }
        if let Some(&i) = self.by_name.get(desc.full_name()) {
            return i;
        }
        let root = self.reserve(desc);
        let mut todo = vec![root];
        while let Some(i) = todo.pop() {
            let desc = self.all[i].desc.clone();
            let mut by_name = HashMap::new();
            let mut fields = Vec::new();
            for f in desc.fields() {
                let shape = if f.is_map() {
                    // A map's kind is its entry message with a scalar key;
                    // were it not, the general way decides.
                    self.entry(&f, &mut todo)
                        .map_or(Shape::Single(Ty::Other), Shape::Map)
                } else if f.is_list() {
                    Shape::List {
                        ty: self.ty(&f, &mut todo),
                        packed: f.is_packed(),
                    }
                } else {
                    Shape::Single(self.ty(&f, &mut todo))
                };
                fields.push(Field {
                    number: f.number(),
                    shape,
                    presence: f.supports_presence(),
                    oneof: f.containing_oneof().and_then(|o| {
                        let at = desc.oneofs().position(|other| other.name() == o.name())?;
                        u32::try_from(at).ok()
                    }),
                });
            }
            // The general way looks a key up as a JSON name first, then as
            // a proto name: one field's proto name may be another's JSON
            // name, and the JSON name wins.
            for (at, f) in desc.fields().enumerate() {
                by_name.insert(f.name().into(), at);
            }
            for (at, f) in desc.fields().enumerate() {
                by_name.insert(f.json_name().into(), at);
            }
            self.all[i].by_name = by_name;
            self.all[i].fields = fields;
        }
        root
    }

    /// The entry of map field `f`.
    fn entry(&mut self, f: &FieldDescriptor, todo: &mut Vec<usize>) -> Option<Entry> {
        let PKind::Message(entry) = f.kind() else {
            return None;
        };
        let (k, v) = (entry.map_entry_key_field(), entry.map_entry_value_field());
        let Ty::Scalar(key) = self.ty(&k, todo) else {
            return None;
        };
        Some(Entry {
            key,
            key_presence: k.supports_presence(),
            value: self.ty(&v, todo),
            value_presence: v.supports_presence(),
        })
    }

    /// A slot for `desc` (its fields filled by [`Tables::index`]).
    fn reserve(&mut self, desc: &MessageDescriptor) -> usize {
        let i = self.all.len();
        self.all.push(Table {
            desc: desc.clone(),
            by_name: HashMap::new(),
            fields: Vec::new(),
        });
        self.by_name.insert(desc.full_name().to_owned(), i);
        i
    }

    fn ty(&mut self, f: &FieldDescriptor, todo: &mut Vec<usize>) -> Ty {
        match f.kind() {
            PKind::Bool => Ty::Scalar(Scalar::Bool),
            PKind::Int32 => Ty::Scalar(Scalar::Int32),
            PKind::Sint32 => Ty::Scalar(Scalar::Sint32),
            PKind::Sfixed32 => Ty::Scalar(Scalar::Sfixed32),
            PKind::Int64 => Ty::Scalar(Scalar::Int64),
            PKind::Sint64 => Ty::Scalar(Scalar::Sint64),
            PKind::Sfixed64 => Ty::Scalar(Scalar::Sfixed64),
            PKind::Uint32 => Ty::Scalar(Scalar::Uint32),
            PKind::Fixed32 => Ty::Scalar(Scalar::Fixed32),
            PKind::Uint64 => Ty::Scalar(Scalar::Uint64),
            PKind::Fixed64 => Ty::Scalar(Scalar::Fixed64),
            PKind::Float => Ty::Scalar(Scalar::Float),
            PKind::Double => Ty::Scalar(Scalar::Double),
            PKind::String => Ty::Scalar(Scalar::String),
            PKind::Bytes => Ty::Scalar(Scalar::Bytes),
            PKind::Enum(e) if e.full_name() == "google.protobuf.NullValue" => Ty::Other,
            PKind::Enum(e) => Ty::Enum(e),
            PKind::Message(m) => match m.full_name() {
                "google.protobuf.Duration" => Ty::Duration,
                "google.protobuf.DoubleValue" => Ty::Wrapper(Scalar::Double),
                "google.protobuf.FloatValue" => Ty::Wrapper(Scalar::Float),
                "google.protobuf.Int64Value" => Ty::Wrapper(Scalar::Int64),
                "google.protobuf.UInt64Value" => Ty::Wrapper(Scalar::Uint64),
                "google.protobuf.Int32Value" => Ty::Wrapper(Scalar::Int32),
                "google.protobuf.UInt32Value" => Ty::Wrapper(Scalar::Uint32),
                "google.protobuf.BoolValue" => Ty::Wrapper(Scalar::Bool),
                "google.protobuf.StringValue" => Ty::Wrapper(Scalar::String),
                name if name.starts_with("google.protobuf.") => Ty::Other,
                _ if f.is_group() => Ty::Other,
                name => match self.by_name.get(name) {
                    Some(&i) => Ty::Message(i),
                    None => {
                        let i = self.reserve(&m);
                        todo.push(i);
                        Ty::Message(i)
                    }
                },
            },
        }
    }
}

/// Writes the fields of `obj` as message `t`, in field-number order.
fn message(tables: &Tables, t: usize, obj: &Map<String, Value>, out: &mut Vec<u8>) -> Option<()> {
    let table = &tables.all[t];
    let mut present: Vec<(&Field, &Value)> = Vec::with_capacity(obj.len());
    for (name, value) in obj {
        let field = &table.fields[*table.by_name.get(name.as_str())?];
        if value.is_null() {
            // Null is "not set", except where the general way reads it as
            // a `NullValue` (never in a `Ty` this module takes).
            if matches!(field.shape.element(), Ty::Other) {
                return None;
            }
            continue;
        }
        present.push((field, value));
    }
    present.sort_unstable_by_key(|(f, _)| f.number);
    for pair in present.windows(2) {
        let (a, b) = (pair[0].0, pair[1].0);
        // The same field by both its names, or two members of one oneof.
        if a.number == b.number {
            return None;
        }
    }
    let mut oneofs: Vec<u32> = present.iter().filter_map(|(f, _)| f.oneof).collect();
    oneofs.sort_unstable();
    if oneofs.windows(2).any(|w| w[0] == w[1]) {
        return None;
    }
    for (field, value) in present {
        match &field.shape {
            Shape::Single(ty) => single(tables, field.number, ty, field.presence, value, out)?,
            Shape::List { ty, packed } => list(tables, field.number, ty, *packed, value, out)?,
            Shape::Map(entry) => map(tables, field.number, entry, value, out)?,
        }
    }
    Some(())
}

/// One value of a singular field (written unless at its default without
/// presence).
fn single(
    tables: &Tables,
    number: u32,
    ty: &Ty,
    presence: bool,
    v: &Value,
    out: &mut Vec<u8>,
) -> Option<()> {
    match ty {
        Ty::Scalar(s) => {
            let s = read_scalar(*s, v)?;
            if presence || !s.is_default() {
                s.write(number, out);
            }
        }
        Ty::Enum(e) => {
            let n = read_enum(e, v)?;
            if presence || n != 0 {
                encode_key(number, WireType::Varint, out);
                encode_varint(i64::from(n) as u64, out);
            }
        }
        _ => {
            let mut body = Vec::new();
            body_of(tables, ty, v, &mut body)?;
            nested(number, &body, out);
        }
    }
    Some(())
}

/// The body of a message-typed value.
fn body_of(tables: &Tables, ty: &Ty, v: &Value, body: &mut Vec<u8>) -> Option<()> {
    match ty {
        Ty::Message(t) => message(tables, *t, v.as_object()?, body),
        Ty::Duration => {
            let d: prost_types::Duration = v.as_str()?.parse().ok()?;
            if d.seconds.unsigned_abs() > MAX_DURATION_SECONDS
                || d.nanos.unsigned_abs() > MAX_DURATION_NANOS
            {
                return None;
            }
            d.encode_raw(body);
            Some(())
        }
        Ty::Wrapper(s) => {
            let s = read_scalar(*s, v)?;
            if !s.is_default() {
                s.write(1, body);
            }
            Some(())
        }
        Ty::Scalar(_) | Ty::Enum(_) | Ty::Other => None,
    }
}

/// The general way's bounds of a `Duration` (the protobuf JSON ones).
const MAX_DURATION_SECONDS: u64 = 315_576_000_000;
const MAX_DURATION_NANOS: u32 = 999_999_999;

fn list(
    tables: &Tables,
    number: u32,
    ty: &Ty,
    packed: bool,
    v: &Value,
    out: &mut Vec<u8>,
) -> Option<()> {
    let items = v.as_array()?;
    if items.is_empty() {
        return Some(());
    }
    if packed {
        let mut body = Vec::new();
        for item in items {
            match ty {
                Ty::Scalar(s) => read_scalar(*s, item)?.write_packed(&mut body),
                Ty::Enum(e) => encode_varint(i64::from(read_enum(e, item)?) as u64, &mut body),
                _ => return None,
            }
        }
        nested(number, &body, out);
        return Some(());
    }
    for item in items {
        // Every element is written, defaults included.
        single(tables, number, ty, true, item, out)?;
    }
    Some(())
}

/// Writes a map's entries sorted by key (the canonical order).
fn map(tables: &Tables, number: u32, e: &Entry, v: &Value, out: &mut Vec<u8>) -> Option<()> {
    let obj = v.as_object()?;
    let mut entries = Vec::with_capacity(obj.len());
    for (k, item) in obj {
        if item.is_null() {
            return None;
        }
        entries.push((read_key(e.key, k)?, item));
    }
    entries.sort_unstable_by(|a, b| key_order(&a.0, &b.0));
    if entries.windows(2).any(|w| w[0].0 == w[1].0) {
        return None; // `1` and `01`: one key twice
    }
    let mut body = Vec::new();
    for (k, item) in entries {
        body.clear();
        if e.key_presence || !k.is_default() {
            k.write(1, &mut body);
        }
        single(tables, 2, &e.value, e.value_presence, item, &mut body)?;
        nested(number, &body, out);
    }
    Some(())
}

/// The order of map keys of one type (integers by value, strings by
/// bytes, `false` before `true`), as the general way sorts them.
fn key_order(a: &Read<'_>, b: &Read<'_>) -> std::cmp::Ordering {
    use std::cmp::Ordering::Equal;
    match (a, b) {
        (Read::Bool(a), Read::Bool(b)) => a.cmp(b),
        (Read::I32(_, a), Read::I32(_, b)) => a.cmp(b),
        (Read::I64(_, a), Read::I64(_, b)) => a.cmp(b),
        (Read::U32(_, a), Read::U32(_, b)) => a.cmp(b),
        (Read::U64(_, a), Read::U64(_, b)) => a.cmp(b),
        (Read::Str(a), Read::Str(b)) => a.cmp(b),
        _ => Equal,
    }
}

/// Writes `body` as the length-delimited field `number`.
fn nested(number: u32, body: &[u8], out: &mut Vec<u8>) {
    encode_key(number, WireType::LengthDelimited, out);
    encode_varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

fn read_enum(e: &prost_reflect::EnumDescriptor, v: &Value) -> Option<i32> {
    match v {
        Value::String(name) => e.get_value_by_name(name).map(|value| value.number()),
        Value::Number(n) => i32::try_from(integer(n)?).ok(),
        _ => None,
    }
}

/// A scalar read as the general way reads its plainest JSON spelling.
#[derive(Clone, PartialEq)]
enum Read<'a> {
    Bool(bool),
    I32(Scalar, i32),
    I64(Scalar, i64),
    U32(Scalar, u32),
    U64(Scalar, u64),
    F32(f32),
    F64(f64),
    Str(&'a str),
}

fn read_scalar(s: Scalar, v: &Value) -> Option<Read<'_>> {
    Some(match (s, v) {
        (Scalar::Bool, Value::Bool(b)) => Read::Bool(*b),
        (Scalar::String, Value::String(t)) => Read::Str(t),
        (Scalar::Int32 | Scalar::Sint32 | Scalar::Sfixed32, Value::Number(n)) => {
            Read::I32(s, i32::try_from(integer(n)?).ok()?)
        }
        (Scalar::Int64 | Scalar::Sint64 | Scalar::Sfixed64, Value::Number(n)) => {
            Read::I64(s, i64::try_from(integer(n)?).ok()?)
        }
        (Scalar::Uint32 | Scalar::Fixed32, Value::Number(n)) => {
            Read::U32(s, u32::try_from(integer(n)?).ok()?)
        }
        (Scalar::Uint64 | Scalar::Fixed64, Value::Number(n)) => {
            Read::U64(s, u64::try_from(integer(n)?).ok()?)
        }
        (Scalar::Double, Value::Number(n)) => Read::F64(float(n)?),
        (Scalar::Float, Value::Number(n)) => Read::F32(float32(n)?),
        _ => return None,
    })
}

/// A JSON integer (a float spelling goes the general way).
fn integer(n: &Number) -> Option<i128> {
    if let Some(u) = n.as_u64() {
        Some(i128::from(u))
    } else {
        n.as_i64().map(i128::from)
    }
}

/// A JSON number as the general way's float visitor reads it: an integer
/// cast once (through `f64` it could round twice), a decimal in range.
#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
fn float32(n: &Number) -> Option<f32> {
    if let Some(u) = n.as_u64() {
        Some(u as f32)
    } else if let Some(i) = n.as_i64() {
        Some(i as f32)
    } else {
        let f = n.as_f64()?;
        (f64::from(f32::MIN)..=f64::from(f32::MAX))
            .contains(&f)
            .then_some(f as f32)
    }
}

/// A JSON number as the general way's double visitor reads it.
#[allow(clippy::cast_precision_loss)]
fn float(n: &Number) -> Option<f64> {
    if let Some(u) = n.as_u64() {
        Some(u as f64)
    } else if let Some(i) = n.as_i64() {
        Some(i as f64)
    } else {
        n.as_f64()
    }
}

/// A map key: JSON keys are strings; integer and bool keys are spelled as
/// Rust's `FromStr` reads them (the general way's parse).
fn read_key(s: Scalar, k: &str) -> Option<Read<'_>> {
    Some(match s {
        Scalar::String => Read::Str(k),
        Scalar::Bool => Read::Bool(k.parse().ok()?),
        Scalar::Int32 | Scalar::Sint32 | Scalar::Sfixed32 => Read::I32(s, k.parse().ok()?),
        Scalar::Int64 | Scalar::Sint64 | Scalar::Sfixed64 => Read::I64(s, k.parse().ok()?),
        Scalar::Uint32 | Scalar::Fixed32 => Read::U32(s, k.parse().ok()?),
        Scalar::Uint64 | Scalar::Fixed64 => Read::U64(s, k.parse().ok()?),
        Scalar::Float | Scalar::Double | Scalar::Bytes => return None,
    })
}

impl Read<'_> {
    fn is_default(&self) -> bool {
        match self {
            Read::Bool(b) => !b,
            Read::I32(_, n) => *n == 0,
            Read::I64(_, n) => *n == 0,
            Read::U32(_, n) => *n == 0,
            Read::U64(_, n) => *n == 0,
            Read::F32(f) => *f == 0.0,
            Read::F64(f) => *f == 0.0,
            Read::Str(t) => t.is_empty(),
        }
    }

    /// Writes the value as field `number`.
    fn write(&self, number: u32, out: &mut Vec<u8>) {
        use prost::encoding as e;
        match *self {
            Read::Bool(b) => e::bool::encode(number, &b, out),
            Read::I32(Scalar::Sint32, n) => e::sint32::encode(number, &n, out),
            Read::I32(Scalar::Sfixed32, n) => e::sfixed32::encode(number, &n, out),
            Read::I32(_, n) => e::int32::encode(number, &n, out),
            Read::I64(Scalar::Sint64, n) => e::sint64::encode(number, &n, out),
            Read::I64(Scalar::Sfixed64, n) => e::sfixed64::encode(number, &n, out),
            Read::I64(_, n) => e::int64::encode(number, &n, out),
            Read::U32(Scalar::Fixed32, n) => e::fixed32::encode(number, &n, out),
            Read::U32(_, n) => e::uint32::encode(number, &n, out),
            Read::U64(Scalar::Fixed64, n) => e::fixed64::encode(number, &n, out),
            Read::U64(_, n) => e::uint64::encode(number, &n, out),
            Read::F32(f) => e::float::encode(number, &f, out),
            Read::F64(f) => e::double::encode(number, &f, out),
            Read::Str(t) => {
                encode_key(number, WireType::LengthDelimited, out);
                encode_varint(t.len() as u64, out);
                out.extend_from_slice(t.as_bytes());
            }
        }
    }

    /// Writes the value without its key (an element of a packed list).
    fn write_packed(&self, out: &mut Vec<u8>) {
        match *self {
            Read::Bool(b) => encode_varint(u64::from(b), out),
            Read::I32(Scalar::Sint32, n) => {
                encode_varint(u64::from(((n << 1) ^ (n >> 31)) as u32), out)
            }
            Read::I32(Scalar::Sfixed32, n) => out.extend_from_slice(&n.to_le_bytes()),
            Read::I32(_, n) => encode_varint(i64::from(n) as u64, out),
            Read::I64(Scalar::Sint64, n) => encode_varint(((n << 1) ^ (n >> 63)) as u64, out),
            Read::I64(Scalar::Sfixed64, n) => out.extend_from_slice(&n.to_le_bytes()),
            Read::I64(_, n) => encode_varint(n as u64, out),
            Read::U32(Scalar::Fixed32, n) => out.extend_from_slice(&n.to_le_bytes()),
            Read::U32(_, n) => encode_varint(u64::from(n), out),
            Read::U64(Scalar::Fixed64, n) => out.extend_from_slice(&n.to_le_bytes()),
            Read::U64(_, n) => encode_varint(n, out),
            Read::F32(f) => out.extend_from_slice(&f.to_le_bytes()),
            Read::F64(f) => out.extend_from_slice(&f.to_le_bytes()),
            // Strings are never packed.
            Read::Str(_) => {}
        }
    }
}

#[cfg(test)]
mod tests;

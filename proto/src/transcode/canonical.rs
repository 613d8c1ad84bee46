//! A dynamic message's deterministic encoding (the general way's last
//! step; `direct` writes the same bytes without a dynamic message).

use prost::Message as _;
use prost::encoding::{WireType, encode_key, encode_varint};
use prost_reflect::{DynamicMessage, ReflectMessage as _, Value as PValue};

/// Encodes `msg` deterministically: fields in number order (as prost-reflect
/// does), map entries sorted by key (prost-reflect keeps maps in a `HashMap`
/// and would write them in random order).
///
/// A message with no map anywhere below it is written by prost-reflect in
/// one go (the same bytes, without a message per field); only the messages
/// on the way to a map are taken apart here.
pub(super) fn encode_canonical(msg: &DynamicMessage, out: &mut Vec<u8>) {
    if !holds_map(msg) {
        msg.encode_raw(out);
        return;
    }
    let desc = msg.descriptor();
    for (field, value) in msg.fields() {
        let number = field.number();
        match value {
            PValue::Map(entries) => {
                let Some(entry_desc) = field.kind().as_message().cloned() else {
                    continue; // a map field's kind is always its entry message
                };
                let key_field = entry_desc.map_entry_key_field();
                let value_field = entry_desc.map_entry_value_field();
                let mut sorted: Vec<_> = entries.iter().collect();
                sorted.sort_by(|a, b| a.0.cmp(b.0));
                for (k, v) in sorted {
                    let mut entry = DynamicMessage::new(entry_desc.clone());
                    entry.set_field(&key_field, PValue::from(k.clone()));
                    entry.set_field(&value_field, v.clone());
                    encode_nested(number, &entry, out);
                }
            }
            PValue::Message(m) => encode_nested(number, m, out),
            PValue::List(items) if items.iter().all(|i| matches!(i, PValue::Message(_))) => {
                for item in items {
                    if let PValue::Message(m) = item {
                        encode_nested(number, m, out);
                    }
                }
            }
            // Scalars and lists of scalars (packed or not) have one encoding:
            // prost-reflect's, through a message holding only this field.
            scalar => {
                let mut single = DynamicMessage::new(desc.clone());
                single.set_field(&field, scalar.clone());
                single.encode_raw(out);
            }
        }
    }
}

/// Whether `msg` or a message below it has a map field with entries.
pub(super) fn holds_map(msg: &DynamicMessage) -> bool {
    msg.fields().any(|(_, value)| match value {
        PValue::Map(entries) => !entries.is_empty(),
        PValue::Message(m) => holds_map(m),
        PValue::List(items) => items.iter().any(|i| match i {
            PValue::Message(m) => holds_map(m),
            _ => false,
        }),
        _ => false,
    })
}

/// Writes `m` as the length-delimited field `number`.
fn encode_nested(number: u32, m: &DynamicMessage, out: &mut Vec<u8>) {
    let mut body = Vec::new();
    encode_canonical(m, &mut body);
    encode_key(number, WireType::LengthDelimited, out);
    encode_varint(body.len() as u64, out);
    out.extend_from_slice(&body);
}

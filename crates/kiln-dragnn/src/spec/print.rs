//! Deterministic printers of spec messages, for `to_text` and `to_json`: the protobuf text
//! format in the layout of C++'s `TextFormat` (one field a line, two-space indents, a repeated
//! message as repeated `name { ... }` blocks, a map as `name { key: ... value: ... }` entries)
//! and pretty JSON with the proto field names. Fields come in field-number order and map
//! entries in key order, so equal messages print equal text (prost-reflect's own printers
//! write maps in hash order and repeated messages in list syntax).
//!
//! Depends on `prost-reflect`'s `DynamicMessage` and `serde_json` (JSON string escaping).

use std::fmt::Write as _;

use prost_reflect::{DynamicMessage, FieldDescriptor, MapKey, Value};

/// The message's set fields, in field-number order.
fn fields(message: &DynamicMessage) -> Vec<(FieldDescriptor, &Value)> {
    let mut fields: Vec<_> = message.fields().collect();
    fields.sort_by_key(|(field, _)| field.number());
    fields
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

/// A float as the shortest text that reads back to the same value; `inf`, `-inf` and `nan`
/// for the non-finite ones.
fn float_text(value: f64, shortest: String) -> String {
    if value.is_nan() {
        "nan".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "inf" } else { "-inf" }.to_owned()
    } else {
        shortest
    }
}

/// The text format of the message (its fields, one a line).
pub(super) fn text(message: &DynamicMessage) -> String {
    let mut out = String::new();
    text_fields(message, 0, &mut out);
    out
}

fn text_fields(message: &DynamicMessage, depth: usize, out: &mut String) {
    for (field, value) in fields(message) {
        match value {
            Value::List(items) => {
                for item in items {
                    text_field(field.name(), item, depth, out);
                }
            }
            Value::Map(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (key, value) in entries {
                    indent(out, depth);
                    out.push_str(field.name());
                    out.push_str(" {\n");
                    indent(out, depth + 1);
                    out.push_str("key: ");
                    text_map_key(key, out);
                    out.push('\n');
                    text_field("value", value, depth + 1, out);
                    indent(out, depth);
                    out.push_str("}\n");
                }
            }
            value => text_field(field.name(), value, depth, out),
        }
    }
}

fn text_field(name: &str, value: &Value, depth: usize, out: &mut String) {
    indent(out, depth);
    out.push_str(name);
    if let Value::Message(message) = value {
        out.push_str(" {\n");
        text_fields(message, depth + 1, out);
        indent(out, depth);
        out.push_str("}\n");
    } else {
        out.push_str(": ");
        text_scalar(value, out);
        out.push('\n');
    }
}

fn text_map_key(key: &MapKey, out: &mut String) {
    match key {
        MapKey::Bool(v) => out.push_str(if *v { "true" } else { "false" }),
        MapKey::I32(v) => out.push_str(&v.to_string()),
        MapKey::I64(v) => out.push_str(&v.to_string()),
        MapKey::U32(v) => out.push_str(&v.to_string()),
        MapKey::U64(v) => out.push_str(&v.to_string()),
        MapKey::String(s) => text_string(s.as_bytes(), out),
    }
}

fn text_scalar(value: &Value, out: &mut String) {
    match value {
        Value::Bool(v) => out.push_str(if *v { "true" } else { "false" }),
        Value::I32(v) => out.push_str(&v.to_string()),
        Value::I64(v) => out.push_str(&v.to_string()),
        Value::U32(v) => out.push_str(&v.to_string()),
        Value::U64(v) => out.push_str(&v.to_string()),
        Value::EnumNumber(v) => out.push_str(&v.to_string()),
        Value::F32(v) => out.push_str(&float_text(f64::from(*v), format!("{v:?}"))),
        Value::F64(v) => out.push_str(&float_text(*v, format!("{v:?}"))),
        Value::String(s) => text_string(s.as_bytes(), out),
        Value::Bytes(b) => text_string(b, out),
        // Lists, maps and messages are written by `text_fields`/`text_field`.
        Value::List(_) | Value::Map(_) | Value::Message(_) => {}
    }
}

/// A double-quoted string with C escapes; UTF-8 text other than control characters is kept
/// as it is.
fn text_string(bytes: &[u8], out: &mut String) {
    out.push('"');
    let text = String::from_utf8_lossy(bytes);
    let utf8 = std::str::from_utf8(bytes).is_ok();
    if utf8 {
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                    let _ = write!(out, "\\{:03o}", c as u32);
                }
                c => out.push(c),
            }
        }
    } else {
        for &b in bytes {
            match b {
                b'"' => out.push_str("\\\""),
                b'\\' => out.push_str("\\\\"),
                0x20..=0x7e => out.push(char::from(b)),
                _ => {
                    let _ = write!(out, "\\{b:03o}");
                }
            }
        }
    }
    out.push('"');
}

/// Pretty JSON of the message with the proto field names.
pub(super) fn json(message: &DynamicMessage) -> String {
    let mut out = String::new();
    json_message(message, 0, &mut out);
    out.push('\n');
    out
}

fn json_message(message: &DynamicMessage, depth: usize, out: &mut String) {
    let fields = fields(message);
    if fields.is_empty() {
        out.push_str("{}");
        return;
    }
    out.push_str("{\n");
    for (i, (field, value)) in fields.iter().enumerate() {
        indent(out, depth + 1);
        json_string(field.name(), out);
        out.push_str(": ");
        json_value(value, depth + 1, out);
        if i + 1 < fields.len() {
            out.push(',');
        }
        out.push('\n');
    }
    indent(out, depth);
    out.push('}');
}

fn json_value(value: &Value, depth: usize, out: &mut String) {
    match value {
        Value::Message(message) => json_message(message, depth, out),
        Value::List(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                indent(out, depth + 1);
                json_value(item, depth + 1, out);
                if i + 1 < items.len() {
                    out.push(',');
                }
                out.push('\n');
            }
            indent(out, depth);
            out.push(']');
        }
        Value::Map(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push_str("{\n");
            for (i, (key, value)) in entries.iter().enumerate() {
                indent(out, depth + 1);
                let key = match key {
                    MapKey::Bool(v) => v.to_string(),
                    MapKey::I32(v) => v.to_string(),
                    MapKey::I64(v) => v.to_string(),
                    MapKey::U32(v) => v.to_string(),
                    MapKey::U64(v) => v.to_string(),
                    MapKey::String(s) => s.clone(),
                };
                json_string(&key, out);
                out.push_str(": ");
                json_value(value, depth + 1, out);
                if i + 1 < entries.len() {
                    out.push(',');
                }
                out.push('\n');
            }
            indent(out, depth);
            out.push('}');
        }
        Value::Bool(v) => out.push_str(if *v { "true" } else { "false" }),
        Value::I32(v) => out.push_str(&v.to_string()),
        Value::U32(v) => out.push_str(&v.to_string()),
        Value::EnumNumber(v) => out.push_str(&v.to_string()),
        // The proto3 JSON mapping writes 64-bit integers as strings.
        Value::I64(v) => json_string(&v.to_string(), out),
        Value::U64(v) => json_string(&v.to_string(), out),
        Value::F32(v) => json_float(f64::from(*v), format!("{v:?}"), out),
        Value::F64(v) => json_float(*v, format!("{v:?}"), out),
        Value::String(s) => json_string(s, out),
        Value::Bytes(b) => json_string(&base64(b), out),
    }
}

fn json_float(value: f64, shortest: String, out: &mut String) {
    if value.is_nan() {
        out.push_str("\"NaN\"");
    } else if value.is_infinite() {
        out.push_str(if value > 0.0 {
            "\"Infinity\""
        } else {
            "\"-Infinity\""
        });
    } else {
        out.push_str(&shortest);
    }
}

fn json_string(s: &str, out: &mut String) {
    out.push_str(&serde_json::Value::from(s).to_string());
}

/// Standard base64 with padding, as the proto3 JSON mapping writes `bytes`.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_pads() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foob"), "Zm9vYg==");
    }

    #[test]
    fn strings_are_escaped() {
        let mut out = String::new();
        text_string("a\"b\\c\nd\u{1}é".as_bytes(), &mut out);
        assert_eq!(out, "\"a\\\"b\\\\c\\nd\\001é\"");
        assert_eq!(float_text(f64::NAN, String::new()), "nan");
        assert_eq!(float_text(f64::NEG_INFINITY, String::new()), "-inf");
    }
}

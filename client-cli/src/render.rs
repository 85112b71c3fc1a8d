//! Output: the protobuf JSON mapping for `--json`, and small helpers for the
//! human tables.

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use stepd_proto::FILE_DESCRIPTOR_SET;

fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        DescriptorPool::decode(FILE_DESCRIPTOR_SET)
            .expect("the descriptor set compiled into stepctl is valid")
    })
}

/// A message in the protobuf JSON mapping (lowerCamelCase names, enums by
/// name, 64-bit integers as strings), on one line.
pub fn json<M: prost::Message + prost::Name>(message: &M) -> String {
    let Some(descriptor) = pool().get_message_by_name(&M::full_name()) else {
        return format!("{{\"error\":\"unknown message {}\"}}", M::full_name());
    };
    let bytes = message.encode_to_vec();
    let dynamic = match DynamicMessage::decode(descriptor, bytes.as_slice()) {
        Ok(d) => d,
        Err(err) => return format!("{{\"error\":{:?}}}", err.to_string()),
    };
    let mut out = serde_json::Serializer::new(Vec::new());
    let options = SerializeOptions::new().stringify_64_bit_integers(true);
    match dynamic.serialize_with_options(&mut out, &options) {
        Ok(()) => String::from_utf8(out.into_inner()).unwrap_or_default(),
        Err(err) => format!("{{\"error\":{:?}}}", err.to_string()),
    }
}

/// Prints a message as JSON.
pub fn print_json<M: prost::Message + prost::Name>(message: &M) {
    println!("{}", json(message));
}

/// Renders rows as a left-aligned table with a header.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        s.trim_end().to_owned()
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push('\n');
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// A protobuf duration as "1h2m3s".
pub fn duration(d: Option<&prost_types::Duration>) -> String {
    let Some(d) = d else {
        return "-".into();
    };
    let secs = u64::try_from(d.seconds).unwrap_or(0);
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

/// A protobuf timestamp as RFC 3339, seconds precision.
pub fn timestamp(t: Option<&prost_types::Timestamp>) -> String {
    let Some(t) = t else {
        return "-".into();
    };
    let secs = u64::try_from(t.seconds).unwrap_or(0);
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()
}

/// An enum value's name without its type prefix, lower-cased: "BREAKPOINT_ACTION_LOG" → "log".
pub fn enum_name(full: &str, prefix: &str) -> String {
    full.strip_prefix(prefix)
        .unwrap_or(full)
        .to_ascii_lowercase()
}

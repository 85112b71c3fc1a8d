//! Output: the protobuf JSON mapping for `--json`, and small helpers for the
//! human tables. The modules below turn the API's messages into text; the
//! commands use them, and they never use a command.

pub mod breakpoints;
pub mod events;
pub mod pauses;
pub mod sessions;

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

/// The widest a table cell is shown, in characters; longer ones are cut with
/// an ellipsis (`--json` prints them whole).
pub const MAX_CELL: usize = 200;

/// `cell`, cut to at most [`MAX_CELL`] characters.
fn cut(cell: &str) -> std::borrow::Cow<'_, str> {
    match cell.char_indices().nth(MAX_CELL) {
        None => cell.into(),
        Some(_) => {
            let end = cell
                .char_indices()
                .nth(MAX_CELL - 1)
                .map_or(cell.len(), |(i, _)| i);
            format!("{}…", &cell[..end]).into()
        }
    }
}

/// Renders rows as a left-aligned table with a header.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<std::borrow::Cow<'_, str>>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| cut(cell)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    // Padding by hand: a format width above 65,535 panics.
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            s.push_str(cell);
            if i + 1 < cells.len() {
                let width = widths.get(i).copied().unwrap_or(0);
                let pad = width.saturating_sub(cell.chars().count()) + 2;
                s.extend(std::iter::repeat_n(' ', pad));
            }
        }
        s.trim_end().to_owned()
    };
    let mut out = line(header.to_vec());
    for row in &rows {
        out.push('\n');
        out.push_str(&line(row.iter().map(AsRef::as_ref).collect()));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_cut_long_cells_without_panicking() {
        let rows = vec![
            vec!["1".to_owned(), "x".repeat(70_000), "end".to_owned()],
            vec!["22".to_owned(), "short".to_owned(), "é".to_owned()],
        ];
        let out = table(&["ID", "NAME", "LAST"], &rows);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            format!("ID  NAME{}LAST", " ".repeat(MAX_CELL - 4 + 2))
        );
        assert!(lines[1].contains(&format!("{}…  end", "x".repeat(MAX_CELL - 1))));
        assert_eq!(lines[1].chars().count(), lines[0].chars().count() - 4 + 3);
        assert!(lines[2].starts_with("22  short"));
        assert_eq!(cut("ab"), "ab");
        assert_eq!(cut(&"é".repeat(MAX_CELL)).chars().count(), MAX_CELL);
        assert_eq!(cut(&"é".repeat(MAX_CELL + 1)).chars().count(), MAX_CELL);
    }
}

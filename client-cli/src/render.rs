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
    cut_to(cell, MAX_CELL)
}

/// `cell`, cut to at most `max` characters (the last one an ellipsis).
fn cut_to(cell: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match cell.char_indices().nth(max) {
        None => cell.into(),
        Some(_) => {
            let end = cell
                .char_indices()
                .nth(max.saturating_sub(1))
                .map_or(cell.len(), |(i, _)| i);
            format!("{}…", &cell[..end]).into()
        }
    }
}

/// The width of the terminal stdout is, when it is one: `COLUMNS` when set,
/// else what the terminal says.
pub fn terminal_width() -> Option<usize> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return None;
    }
    if let Some(columns) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
    {
        return Some(columns);
    }
    let mut size = std::mem::MaybeUninit::<libc::winsize>::zeroed();
    // SAFETY: TIOCGWINSZ fills the winsize it is given when it returns 0.
    let ok = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, size.as_mut_ptr()) } == 0;
    // SAFETY: zeroed, and filled by the successful call.
    let size = unsafe { size.assume_init() };
    (ok && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// Narrowest a column gets when a table is fitted to the terminal.
const MIN_COLUMN: usize = 4;

/// Narrows the widest columns until the table's lines fit in `width`
/// (a column keeps at least [`MIN_COLUMN`] characters).
fn fit(widths: &mut [usize], width: usize) {
    let total = |w: &[usize]| w.iter().sum::<usize>() + 2 * w.len().saturating_sub(1);
    while total(widths) > width {
        let Some((widest, _)) = widths
            .iter()
            .enumerate()
            .filter(|&(_, &w)| w > MIN_COLUMN)
            .max_by_key(|&(i, &w)| (w, usize::MAX - i))
        else {
            return;
        };
        widths[widest] -= 1;
    }
}

/// Renders rows as a left-aligned table with a header, fitted to the
/// terminal's width when stdout is a terminal.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    table_within(header, rows, terminal_width())
}

/// [`table`] at most `width` characters wide (when given): the widest
/// columns are cut with `…`.
pub fn table_within(header: &[&str], rows: &[Vec<String>], width: Option<usize>) -> String {
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
    if let Some(width) = width {
        fit(&mut widths, width);
    }
    let header: Vec<std::borrow::Cow<'_, str>> = header
        .iter()
        .enumerate()
        .map(|(i, h)| cut_to(h, widths.get(i).copied().unwrap_or(MAX_CELL)))
        .collect();
    let rows: Vec<Vec<std::borrow::Cow<'_, str>>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .enumerate()
                .map(|(i, c)| {
                    cut_to(c, widths.get(i).copied().unwrap_or(MAX_CELL))
                        .into_owned()
                        .into()
                })
                .collect()
        })
        .collect();
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
    let mut out = line(header.iter().map(AsRef::as_ref).collect());
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

    #[test]
    fn tables_fit_a_narrow_terminal_by_cutting_the_widest_columns() {
        let rows = vec![
            vec![
                "01a252ef-3447-7202-8131-dd15a6a33bde".to_owned(),
                "loop".to_owned(),
                "running".to_owned(),
            ],
            vec![
                "01a252ef-aaaa".to_owned(),
                "a-long-session-name-here".to_owned(),
                "ended".to_owned(),
            ],
        ];
        let out = table_within(&["ID", "NAME", "STATE"], &rows, Some(40));
        for line in out.lines() {
            assert!(line.chars().count() <= 40, "{line:?}\n{out}");
        }
        assert!(out.contains('…'), "{out}");
        assert!(out.lines().nth(1).unwrap().ends_with("running"), "{out}");
        // Wide enough: unchanged.
        assert_eq!(
            table_within(&["ID", "NAME", "STATE"], &rows, Some(200)),
            table_within(&["ID", "NAME", "STATE"], &rows, None)
        );
    }
}

//! Turning the adapter's view of a stop into stepd's: normalised reasons,
//! locations with a code excerpt, locals cut for display.

use serde_json::Value;
use stepd_proto::v1::{CodeExcerpt, Local, Location, PauseReason};

pub use crate::session::pause::display::display;

/// Most locals shown in a pause.
pub const MAX_LOCALS: usize = 64;
/// Lines of source shown on each side of the current line.
const EXCERPT_CONTEXT: u32 = 3;
/// Source files larger than this are not read for excerpts.
const MAX_SOURCE_BYTES: u64 = 8 << 20;

/// The adapter's reason, normalised. `entry_expected` covers adapters that
/// report a stop-on-entry with another reason (lldb says "exception").
pub fn reason(raw: &str, entry_expected: bool) -> PauseReason {
    if entry_expected {
        return PauseReason::Entry;
    }
    match raw {
        "breakpoint" | "function breakpoint" | "instruction breakpoint" => PauseReason::Breakpoint,
        "step" => PauseReason::Step,
        "exception" => PauseReason::Exception,
        "pause" => PauseReason::PauseRequest,
        "entry" => PauseReason::Entry,
        "goto" => PauseReason::Goto,
        "data breakpoint" => PauseReason::DataBreakpoint,
        _ => PauseReason::Unspecified,
    }
}

/// Locals from a DAP `variables` body.
pub fn locals(variables: &Value) -> Vec<Local> {
    variables["variables"]
        .as_array()
        .map(|vars| {
            vars.iter()
                .filter(|v| {
                    // debugpy groups specials and function variables under these names.
                    !matches!(
                        v["name"].as_str(),
                        Some("special variables" | "function variables" | "class variables")
                    )
                })
                .take(MAX_LOCALS)
                .map(|v| Local {
                    name: v["name"].as_str().unwrap_or_default().to_owned(),
                    value: Some(display(
                        v["value"].as_str().unwrap_or_default(),
                        v["type"].as_str().unwrap_or_default(),
                    )),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A Location from a DAP stack frame, with an excerpt when the file is readable.
pub fn location(frame: &Value) -> Location {
    let path = frame["source"]["path"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let line = u32::try_from(frame["line"].as_u64().unwrap_or(0)).unwrap_or(0);
    let column = u32::try_from(frame["column"].as_u64().unwrap_or(0)).unwrap_or(0);
    let excerpt = excerpt(&path, line);
    Location {
        path,
        line,
        column,
        function: frame["name"].as_str().unwrap_or_default().to_owned(),
        module: frame["moduleId"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| frame["moduleId"].as_i64().map(|m| m.to_string()))
            .unwrap_or_default(),
        excerpt,
    }
}

/// The frames of a DAP `stackTrace` answer, with handles of `epoch`.
pub fn frames(stack: &Value, epoch: u64) -> Vec<stepd_proto::v1::Frame> {
    stack["stackFrames"]
        .as_array()
        .map(|frames| {
            frames
                .iter()
                .map(|f| stepd_proto::v1::Frame {
                    id: super::handles::make(epoch, f["id"].as_i64().unwrap_or(0)),
                    name: f["name"].as_str().unwrap_or_default().to_owned(),
                    location: Some(location(f)),
                    presentation_hint: f["presentationHint"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Lines around `line` of the file at `path`.
pub fn excerpt(path: &str, line: u32) -> Option<CodeExcerpt> {
    if path.is_empty() || line == 0 {
        return None;
    }
    let first = line.saturating_sub(EXCERPT_CONTEXT).max(1);
    let lines = super::sources::lines(
        path,
        first,
        line - first + 1 + EXCERPT_CONTEXT,
        MAX_SOURCE_BYTES,
    )?;
    if lines.is_empty() {
        return None;
    }
    Some(CodeExcerpt {
        first_line: first,
        lines,
        current_line: line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_normalised() {
        assert_eq!(reason("breakpoint", false), PauseReason::Breakpoint);
        assert_eq!(reason("exception", true), PauseReason::Entry);
        assert_eq!(reason("whatever", false), PauseReason::Unspecified);
    }
}

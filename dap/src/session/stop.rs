//! Turning the adapter's view of a stop into stepd's: normalised reasons,
//! locations with a code excerpt, locals cut for display.

use serde_json::Value;
use stepd_proto::v1::{CodeExcerpt, Local, Location, PauseReason};

use crate::kind::AdapterKind;
use crate::messages::{StackFrame, StackTraceResponse, VariablesResponse};

pub use stepd_core::session::pause::display::display;

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

/// Locals from a DAP `variables` answer.
pub fn locals(variables: &VariablesResponse) -> Vec<Local> {
    variables
        .variables
        .iter()
        .filter(|v| {
            // debugpy groups specials and function variables under these names.
            !matches!(
                v.name.as_str(),
                "special variables" | "function variables" | "class variables"
            )
        })
        .take(MAX_LOCALS)
        .map(|v| Local {
            name: v.name.clone(),
            value: Some(display(
                &v.value,
                v.type_name.as_deref().unwrap_or_default(),
            )),
        })
        .collect()
}

/// A Location from a DAP stack frame of an adapter of `kind`, its function
/// named as the language's users write it (`names`), with an excerpt when
/// the file is readable.
pub fn location(kind: AdapterKind, frame: &StackFrame) -> Location {
    let path = frame
        .source
        .as_ref()
        .and_then(|s| s.path.clone())
        .unwrap_or_default();
    let line = u32::try_from(frame.line).unwrap_or(0);
    let column = u32::try_from(frame.column).unwrap_or(0);
    let excerpt = excerpt(&path, line);
    let (function, package) = crate::names::readable(kind, &frame.name);
    Location {
        path,
        line,
        column,
        function,
        module: match (&frame.module_id, package) {
            (Some(Value::String(m)), _) => m.clone(),
            (Some(Value::Number(m)), _) => m.to_string(),
            (_, Some(package)) => package,
            _ => String::new(),
        },
        excerpt,
    }
}

/// The frames of a DAP `stackTrace` answer, with handles of `epoch`.
pub fn frames(
    kind: AdapterKind,
    stack: &StackTraceResponse,
    epoch: u64,
) -> Vec<stepd_proto::v1::Frame> {
    stack
        .stack_frames
        .iter()
        .map(|f| stepd_proto::v1::Frame {
            id: super::handles::make(epoch, f.id),
            name: crate::names::readable(kind, &f.name).0,
            location: Some(location(kind, f)),
            presentation_hint: f.presentation_hint.clone().unwrap_or_default(),
        })
        .collect()
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

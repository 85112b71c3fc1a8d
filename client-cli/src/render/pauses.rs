//! Pauses and stops for people: why a session stopped, where (with the code
//! around it), its locals and value, and the commands a pause takes.

use stepd_proto::v1::{
    CommandKind, DisplayValue, Location, Pause, PauseReason, RenderItem, Rendering, SessionState,
    StableState, render_item::Item,
};

use super::sessions::{dash, end_text, session_state_name};
use crate::{colour, render};

/// A normalised pause reason in words: "pause request".
pub fn reason_text(reason: i32) -> String {
    PauseReason::try_from(reason)
        .map(|r| render::enum_name(r.as_str_name(), "PAUSE_REASON_").replace('_', " "))
        .unwrap_or_else(|_| reason.to_string())
}

/// A StableState for people: the output the program printed meanwhile
/// (first, as it came before the stop), then state, reason, thread, location
/// with the code around it, locals.
pub fn stable_text(state: &StableState) -> String {
    let mut out = Vec::new();
    let name = session_state_name(state.state);
    let elapsed = format!("{} ms", state.elapsed_ms);
    if !state.output.is_empty() {
        out.push("output:".into());
        let text: String = state.output.iter().map(|c| c.text.as_str()).collect();
        for line in text.lines() {
            out.push(format!("  {line}"));
        }
    }
    if !state.waited {
        out.push(format!("{name} (accepted; not waiting)"));
    } else if state.timed_out {
        out.push(format!("timed out after {elapsed}: the session is {name}"));
    }
    if state.state == SessionState::Ended as i32 {
        out.push(format!(
            "ended: {}",
            end_text(state.end_reason, state.exit_code, &state.signal)
        ));
    } else if state.state == SessionState::Stopped as i32 {
        let mut line = format!(
            "stopped: {} on thread {}",
            reason_text(state.stop_reason),
            state.thread_id
        );
        if !state.hit_breakpoint_ids.is_empty() {
            line.push_str(&format!(" at {}", state.hit_breakpoint_ids.join(", ")));
        }
        if state.waited && !state.timed_out && state.elapsed_ms > 0 {
            line.push_str(&format!(" ({elapsed})"));
        }
        out.push(line);
        let location = state
            .pause
            .as_ref()
            .and_then(|p| p.location.as_ref())
            .or_else(|| state.top_frame.as_ref().and_then(|f| f.location.as_ref()));
        if let Some(location) = location {
            out.extend(location_lines(location));
        }
        if let Some(pause) = &state.pause {
            out.extend(pause_details(pause));
        }
    } else if state.waited && !state.timed_out {
        out.push(name);
    }
    out.join("\n")
}

/// "at path:line in function", then the excerpt with the current line marked.
pub fn location_lines(location: &Location) -> Vec<String> {
    let mut out = vec![format!("at {}", colour::location(&where_text(location)))];
    if let Some(excerpt) = &location.excerpt {
        let last = excerpt.first_line as usize + excerpt.lines.len().saturating_sub(1);
        let width = last.to_string().len();
        for (i, text) in excerpt.lines.iter().enumerate() {
            let n = excerpt.first_line as usize + i;
            let marker = if n == excerpt.current_line as usize {
                "->"
            } else {
                "  "
            };
            let line = format!("{marker} {n:>width$} | {text}")
                .trim_end()
                .to_owned();
            out.push(if n == excerpt.current_line as usize {
                colour::current(&line)
            } else {
                line
            });
        }
    }
    out
}

/// "path:line in function".
pub fn where_text(location: &Location) -> String {
    let place = match (location.path.as_str(), location.line) {
        ("", 0) => "-".to_owned(),
        ("", line) => format!("line {line}"),
        (path, 0) => path.to_owned(),
        (path, line) => format!("{path}:{line}"),
    };
    match (place.as_str(), location.function.as_str()) {
        (_, "") => place,
        ("-", function) => format!("{function} (no source)"),
        (_, function) => format!("{place} in {function}"),
    }
}

/// "inspect PATH:" and the inspector's rendering, indented.
pub fn inspect_lines(rendering: &Rendering) -> Vec<String> {
    let mut out = vec![format!("inspect {}:", dash(&rendering.path))];
    out.extend(
        rendering_lines(rendering)
            .into_iter()
            .map(|l| format!("  {l}")),
    );
    out
}

/// Locals, debug value, caught message, inspector rendering, key and commands of a pause.
pub fn pause_details(pause: &Pause) -> Vec<String> {
    let mut out = Vec::new();
    if !pause.caught_msg.is_empty() {
        out.push(colour::error(&format!("exception: {}", pause.caught_msg)));
    }
    if let Some(value) = &pause.debug_value {
        out.push(format!("value: {}", colour::value(&display(value))));
    }
    if !pause.locals.is_empty() {
        out.push("locals:".into());
        for local in &pause.locals {
            let value = local.value.as_ref().map(display).unwrap_or_default();
            out.push(format!("  {} = {}", local.name, colour::value(&value)));
        }
    }
    if let Some(rendering) = &pause.inspect {
        out.extend(inspect_lines(rendering));
    }
    for note in &pause.notes {
        out.push(format!("note: {note}"));
    }
    if !pause.prompt.is_empty() {
        out.push(format!("prompt: {}", pause.prompt));
    }
    out.push(format!(
        "pause {} (commands: {})",
        pause.key,
        commands_text(&pause.input_type)
    ));
    out
}

/// A display value, marked when truncated.
pub fn display(value: &DisplayValue) -> String {
    if value.truncated {
        format!("{} (truncated)", value.text)
    } else {
        value.text.clone()
    }
}

/// An inspector rendering as text lines; values show their index as `[#n]`.
fn rendering_lines(rendering: &Rendering) -> Vec<String> {
    let mut lines = vec![String::new()];
    for RenderItem { item } in &rendering.items {
        match item {
            Some(Item::Text(t)) => lines.last_mut().map(|l| l.push_str(t)).unwrap_or(()),
            Some(Item::Newline(_)) => lines.push(String::new()),
            Some(Item::Value(v)) => lines
                .last_mut()
                .map(|l| l.push_str(&format!("{} [#{}]", v.repr, v.idx)))
                .unwrap_or(()),
            None => {}
        }
    }
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    lines
}

/// A command kind as stepctl's `input` spells it: "continue-scope".
pub fn command_word(kind: i32) -> String {
    CommandKind::try_from(kind)
        .map(|c| render::enum_name(c.as_str_name(), "COMMAND_KIND_").replace('_', "-"))
        .unwrap_or_else(|_| kind.to_string())
}

/// Command kinds as `input` words, comma-separated ("-" for none).
pub fn commands_text(kinds: &[i32]) -> String {
    if kinds.is_empty() {
        return "-".into();
    }
    kinds
        .iter()
        .map(|k| command_word(*k))
        .collect::<Vec<_>>()
        .join(",")
}

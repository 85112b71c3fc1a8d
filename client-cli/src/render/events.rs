//! Events for people: one renderer for `stepctl watch` and `stepctl debug`.
//! Every event kind has its text; `--json` prints the events as they are.

use stepd_proto::v1::{
    BreakpointChange, CommandKind, EndReason, EvalError, Event, Gap, Notification,
    NotificationLevel, Pause, PauseResolved, SessionEnded, Stack, StreamError, Trace,
    event::Payload,
};

use super::{
    breakpoints::describe_location,
    pauses::{command_word, display, location_lines, pause_details, reason_text, where_text},
    sessions::{end_text, session_line},
};
use crate::{
    colour,
    render::{self, enum_name},
};

/// A new pause in full: what stopped, where, the code, locals, value.
pub fn pause_text(pause: &Pause) -> Vec<String> {
    let mut header = match &pause.point {
        Some(point) => format!("holding at {} {}", point.kind, point.name),
        None => format!(
            "stopped: {} on thread {}",
            reason_text(pause.reason),
            pause.thread_id
        ),
    };
    if !pause.breakpoint_ids.is_empty() {
        header.push_str(&format!(" at {}", pause.breakpoint_ids.join(", ")));
    }
    let mut lines = vec![header];
    if let Some(location) = &pause.location {
        lines.extend(location_lines(location));
    }
    lines.extend(pause_details(pause));
    lines
}

/// One TRACE step: where it landed, its value, the locals that changed.
pub fn trace_line(trace: &Trace) -> String {
    let place = match (&trace.point, &trace.location) {
        (Some(point), _) => format!("{} {}", point.kind, point.name),
        (None, location) => location.as_ref().map(where_text).unwrap_or_default(),
    };
    let mut line = format!("trace {}: {}", trace.step, colour::location(&place));
    if let Some(value) = &trace.value {
        line.push_str(&format!(" = {}", colour::value(&display(value))));
    }
    let changed: Vec<String> = trace
        .changed_locals
        .iter()
        .map(|l| {
            format!(
                "{}={}",
                l.name,
                l.value.as_ref().map(display).unwrap_or_default()
            )
        })
        .collect();
    if !changed.is_empty() {
        line.push_str(&format!("  [{}]", changed.join(", ")));
    }
    line
}

/// A STACKTRACE answer, frames numbered from the top; `selected` is marked.
pub fn stack_lines(stack: &Stack, selected: Option<usize>) -> Vec<String> {
    let mut lines = vec![format!("stack of pause {}:", stack.key)];
    for (i, frame) in stack.frames.iter().enumerate() {
        lines.push(frame_line(i, frame, selected == Some(i)));
    }
    if !stack.causes.is_empty() {
        lines.push("causes:".into());
        for cause in &stack.causes {
            let at = cause
                .location
                .as_ref()
                .map(|l| format!(" at {}", colour::location(&where_text(l))))
                .unwrap_or_default();
            lines.push(format!(
                "  {}: {}{at}",
                colour::error(&cause.r#type),
                cause.message
            ));
        }
    }
    lines
}

/// "  #1 file:line in function", "> #1 …" when it is the selected frame.
pub fn frame_line(index: usize, frame: &stepd_proto::v1::Frame, selected: bool) -> String {
    let place = match &frame.location {
        Some(location) if !location.path.is_empty() || location.line > 0 => {
            let mut location = location.clone();
            if location.function.is_empty() {
                location.function = frame.name.clone();
            }
            where_text(&location)
        }
        _ => format!("{} (no source)", frame.name),
    };
    let mark = if selected { ">" } else { " " };
    format!("{mark} #{index} {}", colour::location(&place))
}

/// A failed EVAL or INJECT; the pause stays.
pub fn eval_error_lines(error: &EvalError) -> Vec<String> {
    let mut lines = vec![format!(
        "{} (pause {} stays)",
        colour::error(&format!("error: {}", user_error(&error.message))),
        error.key
    )];
    for cause in &error.causes {
        lines.push(format!("  {}: {}", cause.r#type, cause.message));
    }
    lines
}

/// "warning: …".
pub fn notification_line(note: &Notification) -> String {
    let level = match NotificationLevel::try_from(note.level) {
        Ok(NotificationLevel::Warning) => "warning",
        Ok(NotificationLevel::Error) => return colour::error(&format!("error: {}", note.message)),
        _ => "notice",
    };
    format!("{level}: {}", note.message)
}

/// Whether a frame of a Python traceback is the debugger's own (debugpy and
/// pydevd), not the user's.
fn debugger_frame(file_line: &str) -> bool {
    ["pydevd", "/debugpy/", "\\debugpy\\"]
        .iter()
        .any(|p| file_line.contains(p))
}

/// An evaluation's error as the user needs it: a Python traceback through
/// the debugger's own files (debugpy evaluates in pydevd) loses those
/// frames, and a SyntaxError in the typed code keeps only the code, the
/// caret and the error; anything else is unchanged.
pub fn user_error(message: &str) -> String {
    let clean = strip_debugger_frames(message);
    if clean.trim().is_empty() || clean.trim_start().starts_with('(') {
        return format!(
            "the evaluation failed in the debugger; its message was cut before the error{}",
            clean
                .trim_start()
                .strip_prefix('(')
                .map(|r| format!(" ({r}"))
                .unwrap_or_default()
        );
    }
    clean
}

/// Whether `message` is a debugger traceback cut (by a size limit) before
/// the error it ends with: nothing of it is the user's.
pub fn traceback_cut(message: &str) -> bool {
    message.contains("Traceback (most recent call last):") && {
        let clean = strip_debugger_frames(message);
        clean.trim().is_empty() || clean.trim_start().starts_with('(')
    }
}

/// [`user_error`] before its fallback.
fn strip_debugger_frames(message: &str) -> String {
    let message = message.trim_end();
    let Some(start) = message.find("Traceback (most recent call last):") else {
        return message.to_owned();
    };
    let (before, traceback) = message.split_at(start);
    let mut kept: Vec<String> = Vec::new();
    let mut skipping = false;
    let mut user_frames = false;
    for line in traceback.lines().skip(1) {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if indent == 2 && trimmed.starts_with("File \"") {
            skipping = debugger_frame(trimmed);
            // Code typed at the prompt compiles as "<string>": that frame
            // line says nothing, its code and caret say where.
            let typed = trimmed.starts_with("File \"<string>\"");
            if !skipping && !typed {
                user_frames = true;
                kept.push(line.to_owned());
            }
        } else if indent > 0 && trimmed.starts_with('(') && trimmed.ends_with(')') {
            // The reason stepd appends (" (ADAPTER_ERROR)") ends the error's line.
            match kept.last_mut() {
                Some(last) => {
                    last.push(' ');
                    last.push_str(trimmed);
                }
                None => kept.push(trimmed.to_owned()),
            }
        } else if indent > 0 {
            // Code and carets ("^^^^") go with their frame.
            if !skipping {
                kept.push(line.to_owned());
            }
        } else {
            skipping = false;
            kept.push(line.to_owned());
        }
    }
    let mut lines: Vec<String> = Vec::new();
    if !before.trim().is_empty() {
        lines.push(before.trim_end().to_owned());
    }
    if user_frames {
        lines.push("Traceback (most recent call last):".to_owned());
        lines.extend(kept);
    } else {
        // No frame of the user's: the error alone, as pdb shows it.
        lines.extend(kept.into_iter().filter(|l| !l.starts_with(' ')));
    }
    lines.join("\n")
}

/// Lines an adapter prints about itself when it starts (dlv's "Type 'dlv
/// help' for list of commands.", its "API server listening at:"), not the
/// program's output.
pub fn adapter_banner(chunk: &stepd_proto::v1::OutputChunk) -> bool {
    chunk.category == "console"
        && !chunk.text.trim().is_empty()
        && chunk.text.lines().all(|line| {
            let line = line.trim();
            line.is_empty()
                || line == "Type 'dlv help' for list of commands."
                || line.starts_with("API server listening at:")
                || line.starts_with("DAP server listening at:")
        })
}

/// A request on the stream failed.
pub fn stream_error_line(error: &StreamError) -> String {
    let reason = error
        .reason()
        .as_str_name()
        .trim_start_matches("ERROR_REASON_");
    let about = if error.key.is_empty() {
        String::new()
    } else {
        format!(" (pause {})", error.key)
    };
    format!(
        "{}{about}",
        colour::error(&format!("error {reason}: {}", user_error(&error.message)))
    )
}

/// Events were lost.
pub fn gap_line(gap: &Gap) -> String {
    format!(
        "events {}..{} were lost ({}); a snapshot follows",
        gap.from_seq, gap.to_seq, gap.reason
    )
}

/// "pause p-3 answered by alice (notebook): next", or dropped. The client's
/// own name, when it gave one, tells apart two clients of one identity.
pub fn resolved_line(resolved: &PauseResolved) -> String {
    if resolved.command == CommandKind::Unspecified as i32 {
        format!("pause {} dropped ({})", resolved.key, resolved.by)
    } else {
        let client = if resolved.client_name.is_empty() {
            String::new()
        } else {
            format!(" ({})", resolved.client_name)
        };
        format!(
            "pause {} answered by {}{client}: {}",
            resolved.key,
            resolved.by,
            command_word(resolved.command)
        )
    }
}

/// "session s-1 ended: exited, exit code 0".
pub fn ended_line(session_id: &str, end: &SessionEnded) -> String {
    let mut text = format!(
        "session {session_id} ended: {}",
        end_text(end.reason, end.exit_code, &end.signal)
    );
    if !end.detail.is_empty() && end.reason != EndReason::Exited as i32 {
        text.push_str(&format!(" ({})", end.detail));
    }
    text
}

/// A protobuf `Value` as compact JSON.
pub fn value_json(value: &prost_types::Value) -> String {
    to_json(value).to_string()
}

fn to_json(value: &prost_types::Value) -> serde_json::Value {
    use prost_types::value::Kind;
    match &value.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        // Whole numbers read as integers, as the program most likely wrote them.
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() < 9e15 => {
            serde_json::Value::from(*n as i64)
        }
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null),
        Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
        Some(Kind::StructValue(s)) => serde_json::Value::Object(
            s.fields
                .iter()
                .map(|(k, v)| (k.clone(), to_json(v)))
                .collect(),
        ),
        Some(Kind::ListValue(l)) => {
            serde_json::Value::Array(l.values.iter().map(to_json).collect())
        }
    }
}

/// An event as lines for `stepctl watch`: a first line that says what
/// happened, then details indented.
pub fn describe(event: &Event) -> Vec<String> {
    let Some(payload) = &event.payload else {
        return vec!["(empty event)".into()];
    };
    match payload {
        Payload::Snapshot(s) => vec![format!(
            "snapshot at seq {}: {} sessions, {} pauses, {} breakpoints{}",
            s.seq,
            s.sessions.len(),
            s.pauses.len(),
            s.breakpoints.len(),
            if s.more || s.part > 0 {
                format!(
                    " (part {}{})",
                    s.part + 1,
                    if s.more { ", more follow" } else { ", last" }
                )
            } else {
                String::new()
            }
        )],
        Payload::SessionStarted(s) => {
            let session = s.session.clone().unwrap_or_default();
            let mut line = session_line("started", &session);
            if !session.program.is_empty() {
                line.push_str(&format!(" ({})", session.program));
            }
            vec![line]
        }
        Payload::SessionUpdated(s) => {
            vec![session_line(
                "updated",
                &s.session.clone().unwrap_or_default(),
            )]
        }
        Payload::SessionEnded(end) => vec![ended_line(&event.session_id, end)],
        Payload::Stopped(s) => match &s.pause {
            Some(pause) if pause.revision > 0 => {
                let mut lines = vec![format!(
                    "pause {} re-sent (revision {})",
                    pause.key, pause.revision
                )];
                if let Some(value) = &pause.debug_value {
                    lines.push(format!("= {}", colour::value(&display(value))));
                }
                lines
            }
            Some(pause) => pause_text(pause),
            None => vec!["stopped".into()],
        },
        Payload::Continued(c) => vec![if c.thread_id == 0 {
            "continued (all threads)".into()
        } else {
            format!("continued thread {}", c.thread_id)
        }],
        Payload::Output(o) => {
            let chunk = o.chunk.clone().unwrap_or_default();
            let text = chunk.text.strip_suffix('\n').unwrap_or(&chunk.text);
            let mut lines = text.split('\n');
            let first = lines.next().unwrap_or_default();
            let mut out = vec![format!("{}: {first}", chunk.category)];
            out.extend(lines.map(str::to_owned));
            out
        }
        Payload::BreakpointUpdated(u) => {
            let change = BreakpointChange::try_from(u.change)
                .map(|c| enum_name(c.as_str_name(), "BREAKPOINT_CHANGE_"))
                .unwrap_or_default();
            let bp = u.breakpoint.clone().unwrap_or_default();
            let mut line = format!(
                "breakpoint {change} {} at {}",
                bp.id,
                colour::location(&describe_location(&bp))
            );
            match (&u.status, u.change == BreakpointChange::Hit as i32) {
                (Some(status), _) if u.change == BreakpointChange::Status as i32 => {
                    line.push_str(&if status.verified && status.actual_line == 0 {
                        ": placed".to_owned()
                    } else if status.verified {
                        format!(": placed on line {}", status.actual_line)
                    } else {
                        format!(": not placed ({})", status.message)
                    });
                }
                (_, true) => line.push_str(&format!(" ({} hits)", bp.hit_count)),
                _ => {}
            }
            vec![line]
        }
        Payload::ThreadChanged(t) => {
            let thread = t.thread.clone().unwrap_or_default();
            vec![
                format!("thread {} {} {}", thread.id, t.reason, thread.name)
                    .trim_end()
                    .to_owned(),
            ]
        }
        Payload::PauseResolved(r) => vec![resolved_line(r)],
        Payload::Trace(t) => vec![trace_line(t)],
        Payload::Enlighten(e) => {
            let place = e
                .location
                .as_ref()
                .map(where_text)
                .unwrap_or_else(|| format!("@{:?}", e.coor));
            vec![format!(
                "value at {}: {}",
                colour::location(&place),
                colour::value(&e.value.as_ref().map(display).unwrap_or_default())
            )]
        }
        Payload::Observed(o) => {
            let value = o.value.as_ref().map(value_json).unwrap_or_default();
            let scope = if o.scope_path.is_empty() {
                String::new()
            } else {
                format!(" in {}", o.scope_path.join("/"))
            };
            vec![format!(
                "observed {} {}{scope}: {}",
                o.kind,
                o.name,
                colour::value(&value)
            )]
        }
        Payload::Notification(n) => vec![notification_line(n)],
        Payload::Stack(s) => stack_lines(s, None),
        Payload::EvalError(e) => eval_error_lines(e),
        Payload::Tap(t) => vec![format!(
            "tap {} {}: {}",
            t.inspector_id,
            t.path,
            colour::value(&t.value.as_ref().map(display).unwrap_or_default())
        )],
        Payload::Gap(g) => vec![gap_line(g)],
        Payload::Heartbeat(h) => vec![format!("heartbeat (last seq {})", h.last_seq)],
        Payload::Reconnect(r) => vec![format!("reconnect: {}", r.reason)],
        Payload::Error(e) => vec![stream_error_line(e)],
        Payload::BreakpointSnapshot(s) => {
            let mut lines = vec![format!(
                "snapshot of {} on thread {}{}",
                s.breakpoint_id,
                s.thread_id,
                if s.truncated { " (truncated)" } else { "" }
            )];
            for (i, frame) in s.frames.iter().enumerate() {
                lines.push(format!("  #{i} {}", colour::location(&where_text(frame))));
            }
            for local in &s.locals {
                lines.push(format!(
                    "  {} = {}",
                    local.name,
                    local.value.as_ref().map(display).unwrap_or_default()
                ));
            }
            lines
        }
    }
}

/// An event for `stepctl watch`: time, seq, session, then what happened.
pub fn watch_text(event: &Event) -> String {
    text(event, true)
}

/// One event of a session's history: as `watch` shows it, without the
/// session id that every line would repeat.
pub fn history_text(event: &Event) -> String {
    text(event, false)
}

fn text(event: &Event, with_session: bool) -> String {
    let time = render::timestamp(event.time.as_ref());
    let session = if event.session_id.is_empty() || !with_session {
        String::new()
    } else {
        format!(" [{}]", event.session_id)
    };
    let lines = describe(event);
    let head = if event.seq == 0 {
        format!("{time}{session}")
    } else {
        format!("{time} #{}{session}", event.seq)
    };
    let mut out = format!("{head} {}", lines.first().cloned().unwrap_or_default());
    for line in lines.iter().skip(1) {
        out.push('\n');
        out.push_str("    ");
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn debugger_frames_leave_python_tracebacks() {
        let syntax = "Traceback (most recent call last):\n  File \"/v/debugpy/_vendored/pydevd/_pydevd_bundle/pydevd_comm.py\", line 1258, in internal_evaluate_expression_json\n    exec_result = pydevd_vars.evaluate_expression(py_db, frame, expression, is_exec=True)\n                  ^^^^^^^^^^^^\n  File \"/v/debugpy/_vendored/pydevd/_pydevd_bundle/pydevd_vars.py\", line 449, in _compile_as_exec\n    return compile(expression_to_evaluate, \"<string>\", \"exec\", _ASYNC_COMPILE_FLAGS)\n  File \"<string>\", line 1\n    1+\n      ^\nSyntaxError: invalid syntax\n (ADAPTER_ERROR)";
        assert_eq!(
            super::user_error(syntax),
            "SyntaxError: invalid syntax (ADAPTER_ERROR)"
        );
        let raised = "Traceback (most recent call last):\n  File \"/v/debugpy/_vendored/pydevd/_pydevd_bundle/pydevd_vars.py\", line 1, in evaluate_expression\n    eval(x)\n  File \"/src/app.py\", line 3, in f\n    return 1 / 0\nZeroDivisionError: division by zero";
        assert_eq!(
            super::user_error(raised),
            "Traceback (most recent call last):\n  File \"/src/app.py\", line 3, in f\n    return 1 / 0\nZeroDivisionError: division by zero"
        );
        assert_eq!(
            super::user_error("name 'x' is not defined"),
            "name 'x' is not defined"
        );
    }

    use super::*;
    use stepd_proto::v1::{
        Breakpoint, BreakpointSnapshot, BreakpointUpdated, Continued, DisplayValue, EvalError,
        HeartbeatEvent, Location, Observed, Output, OutputChunk, PointInfo, Reconnect, Session,
        SessionStarted, SessionUpdated, Snapshot, Stopped, Tap, Thread, ThreadChanged,
    };

    fn event(payload: Payload) -> Event {
        Event {
            seq: 7,
            session_id: "s-1".into(),
            time: None,
            payload: Some(payload),
        }
    }

    #[test]
    fn every_event_kind_reads_as_text() {
        let location = Location {
            path: "/src/app.py".into(),
            line: 12,
            function: "work".into(),
            ..Default::default()
        };
        let value = DisplayValue {
            text: "42".into(),
            ..Default::default()
        };
        let payloads = vec![
            (Payload::Snapshot(Snapshot::default()), "snapshot at seq 0"),
            (
                Payload::SessionStarted(Box::new(SessionStarted {
                    session: Some(Session {
                        id: "s-1".into(),
                        adapter: "debugpy".into(),
                        ..Default::default()
                    }),
                })),
                "session s-1 started under debugpy",
            ),
            (
                Payload::SessionUpdated(Box::new(SessionUpdated {
                    session: Some(Session {
                        id: "s-1".into(),
                        pid: 9,
                        ..Default::default()
                    }),
                })),
                "session s-1 updated",
            ),
            (
                Payload::SessionEnded(SessionEnded {
                    exit_code: Some(3),
                    reason: EndReason::Exited as i32,
                    ..Default::default()
                }),
                "session s-1 ended: exited, exit code 3",
            ),
            (
                Payload::Stopped(Box::new(Stopped {
                    pause: Some(Pause {
                        key: "p-1".into(),
                        reason: stepd_proto::v1::PauseReason::Breakpoint as i32,
                        thread_id: 1,
                        location: Some(location.clone()),
                        ..Default::default()
                    }),
                    ..Default::default()
                })),
                "stopped: breakpoint on thread 1",
            ),
            (
                Payload::Stopped(Box::new(Stopped {
                    pause: Some(Pause {
                        key: "p-2".into(),
                        point: Some(PointInfo {
                            kind: "tool_call".into(),
                            name: "Bash".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                })),
                "holding at tool_call Bash",
            ),
            (
                Payload::Continued(Continued { thread_id: 0 }),
                "continued (all threads)",
            ),
            (
                Payload::Output(Output {
                    chunk: Some(OutputChunk {
                        category: "stdout".into(),
                        text: "hello\n".into(),
                        ..Default::default()
                    }),
                }),
                "stdout: hello",
            ),
            (
                Payload::BreakpointUpdated(Box::new(BreakpointUpdated {
                    change: BreakpointChange::Added as i32,
                    breakpoint: Some(Breakpoint {
                        id: "bp-1".into(),
                        ..Default::default()
                    }),
                    status: None,
                })),
                "breakpoint added bp-1",
            ),
            (
                Payload::ThreadChanged(ThreadChanged {
                    thread: Some(Thread {
                        id: 4,
                        name: "worker".into(),
                        ..Default::default()
                    }),
                    reason: "started".into(),
                }),
                "thread 4 started worker",
            ),
            (
                Payload::PauseResolved(PauseResolved {
                    key: "p-1".into(),
                    command: CommandKind::Continue as i32,
                    by: "alice".into(),
                    thread_id: 1,
                    decision: None,
                    client_name: String::new(),
                }),
                "pause p-1 answered by alice: continue",
            ),
            (
                Payload::PauseResolved(PauseResolved {
                    key: "p-1".into(),
                    command: CommandKind::Next as i32,
                    by: "alice".into(),
                    thread_id: 1,
                    decision: None,
                    client_name: "notebook".into(),
                }),
                "pause p-1 answered by alice (notebook): next",
            ),
            (
                Payload::Trace(Box::new(Trace {
                    step: 2,
                    location: Some(location.clone()),
                    ..Default::default()
                })),
                "trace 2: /src/app.py:12 in work",
            ),
            (
                Payload::Enlighten(stepd_proto::v1::Enlighten {
                    value: Some(value.clone()),
                    location: Some(location.clone()),
                    ..Default::default()
                }),
                "value at /src/app.py:12 in work: 42",
            ),
            (
                Payload::Observed(Observed {
                    kind: "skill_loaded".into(),
                    name: "search".into(),
                    value: Some(prost_types::Value {
                        kind: Some(prost_types::value::Kind::NumberValue(1.0)),
                    }),
                    ..Default::default()
                }),
                "observed skill_loaded search: 1",
            ),
            (
                Payload::Notification(Notification {
                    level: NotificationLevel::Warning as i32,
                    message: "slow".into(),
                }),
                "warning: slow",
            ),
            (
                Payload::Stack(Stack {
                    key: "p-1".into(),
                    ..Default::default()
                }),
                "stack of pause p-1:",
            ),
            (
                Payload::EvalError(EvalError {
                    key: "p-1".into(),
                    message: "NameError".into(),
                    ..Default::default()
                }),
                "error: NameError (pause p-1 stays)",
            ),
            (
                Payload::Tap(Tap {
                    inspector_id: "i-1".into(),
                    path: "x".into(),
                    value: Some(value.clone()),
                }),
                "tap i-1 x: 42",
            ),
            (
                Payload::Gap(Gap {
                    from_seq: 3,
                    to_seq: 5,
                    reason: "subscriber too slow".into(),
                }),
                "events 3..5 were lost (subscriber too slow); a snapshot follows",
            ),
            (
                Payload::Heartbeat(HeartbeatEvent { last_seq: 9 }),
                "heartbeat (last seq 9)",
            ),
            (
                Payload::Reconnect(Reconnect {
                    reason: "the daemon is shutting down".into(),
                }),
                "reconnect: the daemon is shutting down",
            ),
            (
                Payload::Error(StreamError {
                    message: "no such pause".into(),
                    ..Default::default()
                }),
                "no such pause",
            ),
            (
                Payload::BreakpointSnapshot(BreakpointSnapshot {
                    breakpoint_id: "bp-2".into(),
                    thread_id: 1,
                    frames: vec![location.clone()],
                    ..Default::default()
                }),
                "snapshot of bp-2 on thread 1",
            ),
        ];
        for (payload, expected) in payloads {
            let text = watch_text(&event(payload));
            assert!(text.contains(expected), "{expected:?} in {text:?}");
            assert!(!text.contains("{\""), "as JSON: {text}");
        }
    }
}

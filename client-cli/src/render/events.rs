//! Events for people: one renderer for `stepctl watch` and `stepctl debug`.
//! Every event kind has its text; `--json` prints the events as they are.

use stepd_proto::v1::{
    BreakpointChange, CommandKind, EndReason, EvalError, Event, Gap, Notification,
    NotificationLevel, Pause, PauseResolved, SessionEnded, Stack, StreamError, Trace,
    event::Payload,
};

use crate::{
    cmd::{
        breakpoints::describe_location,
        sessions::{
            command_word, display, end_text, location_lines, pause_details, reason_text,
            session_line, where_text,
        },
    },
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
        colour::error(&format!("error: {}", error.message.trim_end())),
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
        colour::error(&format!("error {reason}: {}", error.message))
    )
}

/// Events were lost.
pub fn gap_line(gap: &Gap) -> String {
    format!(
        "events {}..{} were lost ({}); a snapshot follows",
        gap.from_seq, gap.to_seq, gap.reason
    )
}

/// "pause p-3 answered by alice: next", or dropped.
pub fn resolved_line(resolved: &PauseResolved) -> String {
    if resolved.command == CommandKind::Unspecified as i32 {
        format!("pause {} dropped ({})", resolved.key, resolved.by)
    } else {
        format!(
            "pause {} answered by {}: {}",
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
                    line.push_str(&if status.verified {
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
    let time = render::timestamp(event.time.as_ref());
    let session = if event.session_id.is_empty() {
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

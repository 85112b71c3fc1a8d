//! Sessions for people: the line a launch or attach prints, states, ends,
//! labels, placed breakpoints, and the small cell helpers the tables share.

use std::collections::{BTreeMap, HashMap};

use stepd_proto::v1::{BreakpointPlacement, EndReason, Session, SessionState};

use crate::render;

/// "session ID launched under debugpy (pid N): stopped".
pub fn session_line(verb: &str, session: &Session) -> String {
    let pid = if session.pid > 0 {
        format!(", pid {}", session.pid)
    } else {
        String::new()
    };
    format!(
        "session {} {verb} under {}{pid}: {}",
        session.id,
        dash(&session.adapter),
        state_text(session)
    )
}

/// The breakpoints as placed: requested line vs actual line.
pub fn placements(placed: &[BreakpointPlacement]) -> String {
    let rows: Vec<Vec<String>> = placed
        .iter()
        .map(|p| {
            let status = p.status.clone().unwrap_or_default();
            vec![
                p.breakpoint_id.clone(),
                line_or_dash(p.requested_line),
                line_or_dash(status.actual_line),
                yes_no(status.verified).into(),
                dash(&status.message),
            ]
        })
        .collect();
    render::table(
        &["BREAKPOINT", "REQUESTED", "ACTUAL", "VERIFIED", "MESSAGE"],
        &rows,
    )
}

/// Labels as `k=v,…` sorted by key, `-` for none.
pub fn labels_text(labels: &HashMap<String, String>) -> String {
    let sorted: BTreeMap<_, _> = labels.iter().collect();
    if sorted.is_empty() {
        return "-".into();
    }
    sorted
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A session's state; for ended ones, why and the exit code.
pub fn state_text(session: &Session) -> String {
    let state = session_state_name(session.state);
    if session.state == SessionState::Ended as i32 {
        format!(
            "{state} ({})",
            end_text(session.end_reason, session.exit_code, &session.signal)
        )
    } else {
        state
    }
}

/// A session state's name: "stopped".
pub fn session_state_name(state: i32) -> String {
    SessionState::try_from(state)
        .map(|s| render::enum_name(s.as_str_name(), "SESSION_STATE_"))
        .unwrap_or_else(|_| state.to_string())
}

/// "exited, exit code 3", or "signaled, SIGSEGV".
pub fn end_text(reason: i32, exit_code: Option<i32>, signal: &str) -> String {
    let reason = EndReason::try_from(reason)
        .map(|r| render::enum_name(r.as_str_name(), "END_REASON_").replace('_', " "))
        .unwrap_or_else(|_| reason.to_string());
    match exit_code {
        _ if !signal.is_empty() => format!("{reason}, {signal}"),
        Some(code) => format!("{reason}, exit code {code}"),
        None => reason,
    }
}

/// `value` or "-" when empty.
pub fn dash(value: &str) -> String {
    if value.is_empty() {
        "-".into()
    } else {
        value.to_owned()
    }
}

fn line_or_dash(line: u32) -> String {
    if line == 0 {
        "-".into()
    } else {
        line.to_string()
    }
}

/// "yes" / "no".
pub fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_name_their_exit_code_or_signal() {
        assert_eq!(
            end_text(EndReason::Exited as i32, Some(3), ""),
            "exited, exit code 3"
        );
        assert_eq!(
            end_text(EndReason::Signaled as i32, None, "SIGSEGV"),
            "signaled, SIGSEGV"
        );
        assert_eq!(end_text(EndReason::Detached as i32, None, ""), "detached");
    }
}

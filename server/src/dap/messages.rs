//! The DAP bodies a session reads, typed. A body an adapter gets wrong (a
//! missing field that the protocol requires, a string where a number goes)
//! fails to parse and is reported as the adapter's fault, instead of being
//! read as an empty value.

use serde::{Deserialize, de::DeserializeOwned};
use serde_json::Value;

/// Parses the body of `what` (an event or a response), or says what is wrong.
pub fn parse<T: DeserializeOwned>(what: &str, body: Value) -> Result<T, String> {
    serde_json::from_value(body).map_err(|e| format!("the adapter sent a malformed {what}: {e}"))
}

/// `stopped`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoppedEvent {
    /// Why it stopped ("breakpoint", "step", "exception", …).
    pub reason: String,
    /// The thread that stopped, when the adapter names one.
    #[serde(default)]
    pub thread_id: Option<i64>,
    /// Whether every thread stopped.
    #[serde(default)]
    pub all_threads_stopped: bool,
    /// The adapter's ids of the breakpoints hit.
    #[serde(default)]
    pub hit_breakpoint_ids: Vec<i64>,
    /// Details, e.g. an exception's text.
    #[serde(default)]
    pub text: Option<String>,
    /// A description of the reason.
    #[serde(default)]
    pub description: Option<String>,
}

/// `output`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputEvent {
    /// "console", "stdout", "stderr", "telemetry", …
    #[serde(default = "console")]
    pub category: String,
    /// The text.
    pub output: String,
}

fn console() -> String {
    "console".to_owned()
}

/// `process`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessEvent {
    /// The debuggee's name (required by the protocol, unused by stepd, so
    /// not held against an adapter that leaves it out).
    #[serde(default)]
    pub name: String,
    /// Its pid, when the adapter knows it.
    #[serde(default)]
    pub system_process_id: Option<i64>,
}

/// `exited`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExitedEvent {
    /// The debuggee's exit code.
    pub exit_code: i64,
}

/// `thread`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadEvent {
    /// "started" or "exited".
    pub reason: String,
    /// The thread.
    pub thread_id: i64,
}

/// `continued`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContinuedEvent {
    /// The thread that continued.
    pub thread_id: i64,
    /// Whether every thread did (the protocol's default).
    #[serde(default = "yes")]
    pub all_threads_continued: bool,
}

fn yes() -> bool {
    true
}

/// `breakpoint`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakpointEvent {
    /// "changed", "new" or "removed".
    pub reason: String,
    /// The breakpoint as the adapter now has it.
    pub breakpoint: Breakpoint,
}

/// A breakpoint as the adapter placed it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Breakpoint {
    /// The adapter's id.
    #[serde(default)]
    pub id: Option<i64>,
    /// Whether it could be set.
    pub verified: bool,
    /// The line it is on.
    #[serde(default)]
    pub line: Option<u32>,
    /// Why it is not verified, or a note.
    #[serde(default)]
    pub message: Option<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn well_formed_bodies_parse_with_the_protocols_defaults() {
        let out: OutputEvent = parse("output event", json!({"output": "hi\n"})).unwrap();
        assert_eq!(out.category, "console");
        let cont: ContinuedEvent = parse("continued event", json!({"threadId": 3})).unwrap();
        assert!(cont.all_threads_continued);
        let stop: StoppedEvent =
            parse("stopped event", json!({"reason": "step", "threadId": 1})).unwrap();
        assert_eq!(stop.thread_id, Some(1));
        assert!(stop.hit_breakpoint_ids.is_empty());
    }

    #[test]
    fn a_malformed_body_says_what_is_wrong() {
        let err = parse::<ExitedEvent>("exited event", json!({"exitCode": "zero"})).unwrap_err();
        assert!(err.contains("malformed exited event"), "{err}");
        let err = parse::<OutputEvent>("output event", json!({})).unwrap_err();
        assert!(err.contains("output"), "{err}");
    }
}

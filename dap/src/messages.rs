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
    /// Why it stopped ("breakpoint", "step", "exception", …). Required by
    /// the protocol, but lldb leaves it out of the stop that ends an
    /// interrupt that timed out; that stop is still a stop.
    #[serde(default)]
    pub reason: Option<String>,
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

/// What stepd reads of the `initialize` response beyond its boolean
/// capabilities (those are looked up by name).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    /// The exception filters the adapter offers.
    #[serde(default)]
    pub exception_breakpoint_filters: Vec<ExceptionFilterInfo>,
}

/// An exception filter an adapter offers.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExceptionFilterInfo {
    /// Its id, as `setExceptionBreakpoints` takes it.
    pub filter: String,
    /// Its name for people.
    pub label: String,
    /// Whether it is on unless turned off.
    #[serde(default)]
    pub default: bool,
    /// Whether it takes a condition.
    #[serde(default)]
    pub supports_condition: bool,
}

/// The `setBreakpoints` / `setFunctionBreakpoints` /
/// `setExceptionBreakpoints` response: one breakpoint per one asked for.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakpointsResponse {
    /// In the order of the request (absent from older adapters' answers to
    /// `setExceptionBreakpoints`).
    #[serde(default)]
    pub breakpoints: Vec<Breakpoint>,
}

/// The `threads` response.
#[derive(Debug, Clone, Deserialize)]
pub struct ThreadsResponse {
    /// Every thread.
    pub threads: Vec<ThreadInfo>,
}

/// A thread in a `threads` response.
#[derive(Debug, Clone, Deserialize)]
pub struct ThreadInfo {
    /// Its id.
    pub id: i64,
    /// Its name.
    #[serde(default)]
    pub name: String,
}

/// The `stackTrace` response.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StackTraceResponse {
    /// The frames asked for, innermost first.
    pub stack_frames: Vec<StackFrame>,
    /// How many frames the thread has, when the adapter knows.
    #[serde(default)]
    pub total_frames: Option<u64>,
}

/// A stack frame.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StackFrame {
    /// The adapter's id, valid while the thread stays stopped.
    pub id: i64,
    /// The function's name.
    pub name: String,
    /// Where its code is, if anywhere.
    #[serde(default)]
    pub source: Option<Source>,
    /// Line (1-based; 0 when there is no source).
    pub line: i64,
    /// Column (1-based).
    #[serde(default)]
    pub column: i64,
    /// The module, as a number or a string.
    #[serde(default)]
    pub module_id: Option<Value>,
    /// "normal", "label" or "subtle".
    #[serde(default)]
    pub presentation_hint: Option<String>,
}

/// A source file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// Its path on the adapter's machine.
    #[serde(default)]
    pub path: Option<String>,
    /// Its short name.
    #[serde(default)]
    pub name: Option<String>,
    /// A reference to fetch its text with `source` (0 = read `path`).
    #[serde(default)]
    pub source_reference: Option<i64>,
}

/// The `scopes` response.
#[derive(Debug, Clone, Deserialize)]
pub struct ScopesResponse {
    /// The frame's scopes.
    pub scopes: Vec<ScopeInfo>,
}

/// A scope of a frame.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScopeInfo {
    /// "Locals", "Globals", …
    pub name: String,
    /// Its variables (0 = none).
    pub variables_reference: i64,
    /// How many named children.
    #[serde(default)]
    pub named_variables: Option<u64>,
    /// How many indexed children.
    #[serde(default)]
    pub indexed_variables: Option<u64>,
    /// Whether reading it is costly.
    #[serde(default)]
    pub expensive: bool,
}

/// The `variables` response.
#[derive(Debug, Clone, Deserialize)]
pub struct VariablesResponse {
    /// The children asked for.
    pub variables: Vec<VariableInfo>,
}

/// A variable.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VariableInfo {
    /// Its name.
    pub name: String,
    /// Its value, as the adapter shows it.
    pub value: String,
    /// Its type, when the adapter says.
    #[serde(default, rename = "type")]
    pub type_name: Option<String>,
    /// Its children (0 = none).
    #[serde(default)]
    pub variables_reference: i64,
    /// How many named children.
    #[serde(default)]
    pub named_variables: Option<u64>,
    /// How many indexed children.
    #[serde(default)]
    pub indexed_variables: Option<u64>,
    /// An expression that evaluates to it.
    #[serde(default)]
    pub evaluate_name: Option<String>,
}

/// The answer to `evaluate` (its `result`) and to `setVariable` (its
/// `value`): one value with its type and children.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValueResponse {
    /// The value.
    #[serde(alias = "result")]
    pub value: String,
    /// Its type, when the adapter says.
    #[serde(default, rename = "type")]
    pub type_name: Option<String>,
    /// Its children (0 = none).
    #[serde(default)]
    pub variables_reference: i64,
    /// How many named children.
    #[serde(default)]
    pub named_variables: Option<u64>,
    /// How many indexed children.
    #[serde(default)]
    pub indexed_variables: Option<u64>,
}

/// The `evaluate` response.
pub type EvaluateResponse = ValueResponse;

/// The `setVariable` response.
pub type SetVariableResponse = ValueResponse;

impl ValueResponse {
    /// The value as the variable `name` (the expression, or the variable
    /// set).
    pub fn into_variable(self, name: &str) -> VariableInfo {
        VariableInfo {
            name: name.to_owned(),
            value: self.value,
            type_name: self.type_name,
            variables_reference: self.variables_reference,
            named_variables: self.named_variables,
            indexed_variables: self.indexed_variables,
            evaluate_name: None,
        }
    }
}

/// The `dataBreakpointInfo` response: what a data breakpoint on a value
/// would watch, if anything.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataBreakpointInfoResponse {
    /// The value's id for `setDataBreakpoints`; none when it cannot be watched.
    #[serde(default)]
    pub data_id: Option<String>,
    /// What it is, or why it cannot be watched.
    #[serde(default)]
    pub description: Option<String>,
}

/// The `gotoTargets` response: where a line can be jumped to.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct GotoTargetsResponse {
    /// The targets, best first.
    #[serde(default)]
    pub targets: Vec<GotoTarget>,
}

/// One `goto` target.
#[derive(Debug, Clone, Deserialize)]
pub struct GotoTarget {
    /// Its id, for `goto`.
    pub id: i64,
}

/// The `exceptionInfo` response.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExceptionInfoResponse {
    /// The exception's id (its type, for most languages).
    pub exception_id: String,
    /// When the adapter breaks on it: "never", "always", "unhandled" or
    /// "userUnhandled".
    #[serde(default)]
    pub break_mode: Option<String>,
    /// Its text.
    #[serde(default)]
    pub description: Option<String>,
    /// More, when the adapter has it.
    #[serde(default)]
    pub details: Option<ExceptionDetails>,
}

/// An exception's details.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExceptionDetails {
    /// Its message.
    #[serde(default)]
    pub message: Option<String>,
    /// Its type's short name.
    #[serde(default)]
    pub type_name: Option<String>,
    /// Its type's full name.
    #[serde(default)]
    pub full_type_name: Option<String>,
    /// The exceptions that caused it, innermost last.
    #[serde(default)]
    pub inner_exception: Vec<ExceptionDetails>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn evaluate_and_set_variable_answers_are_one_value() {
        let evaluated: EvaluateResponse = parse(
            "evaluate response",
            json!({"result": "3", "type": "int", "variablesReference": 0}),
        )
        .unwrap();
        let set: SetVariableResponse = parse(
            "setVariable response",
            json!({"value": "4", "variablesReference": 7}),
        )
        .unwrap();
        assert_eq!(evaluated.into_variable("x").value, "3");
        let set = set.into_variable("y");
        assert_eq!((set.value.as_str(), set.variables_reference), ("4", 7));
        assert!(parse::<EvaluateResponse>("evaluate response", json!({"type": "int"})).is_err());
    }

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

//! The adapter capabilities stepd acts on, by name: a misspelt capability
//! would be a feature silently off (an absent capability reads as false), so
//! each is an enum variant and its name is written once, here.

/// A boolean capability of an adapter's `initialize` response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// `configurationDone` ends the configuration.
    ConfigurationDoneRequest,
    /// Breakpoints take a condition.
    ConditionalBreakpoints,
    /// Breakpoints take a log message.
    LogPoints,
    /// `setFunctionBreakpoints`.
    FunctionBreakpoints,
    /// `setVariable`.
    SetVariable,
    /// `setExpression`.
    SetExpression,
    /// `terminate` (a gentler end than `disconnect`).
    TerminateRequest,
    /// `exceptionInfo`.
    ExceptionInfoRequest,
    /// `evaluate` in the `hover` context.
    EvaluateForHovers,
    /// `evaluate` in the `clipboard` context.
    ClipboardContext,
    /// `gotoTargets` and `goto`: JUMP.
    GotoTargetsRequest,
    /// `dataBreakpointInfo` and `setDataBreakpoints`: watched values.
    DataBreakpoints,
}

impl Capability {
    /// Its name in the `initialize` response.
    pub fn name(self) -> &'static str {
        match self {
            Self::ConfigurationDoneRequest => "supportsConfigurationDoneRequest",
            Self::ConditionalBreakpoints => "supportsConditionalBreakpoints",
            Self::LogPoints => "supportsLogPoints",
            Self::FunctionBreakpoints => "supportsFunctionBreakpoints",
            Self::SetVariable => "supportsSetVariable",
            Self::SetExpression => "supportsSetExpression",
            Self::TerminateRequest => "supportsTerminateRequest",
            Self::ExceptionInfoRequest => "supportsExceptionInfoRequest",
            Self::EvaluateForHovers => "supportsEvaluateForHovers",
            Self::ClipboardContext => "supportsClipboardContext",
            Self::GotoTargetsRequest => "supportsGotoTargetsRequest",
            Self::DataBreakpoints => "supportsDataBreakpoints",
        }
    }

    /// Whether `capabilities` (an `initialize` response) announces it:
    /// `true` only for a JSON `true`, as the protocol's optional booleans
    /// are false when absent.
    pub fn announced_in(self, capabilities: &serde_json::Value) -> bool {
        capabilities[self.name()].as_bool() == Some(true)
    }
}

/// What stepd, as the client, tells the adapter it supports in
/// `initialize`: it pages variables and reads their types, starts child
/// sessions itself, and runs no terminal, progress, invalidation or memory
/// views.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeArguments {
    /// `stepd`.
    #[serde(rename = "clientID")]
    pub client_id: &'static str,
    /// `stepd`.
    pub client_name: &'static str,
    /// The adapter's name in the registry.
    #[serde(rename = "adapterID")]
    pub adapter_id: String,
    /// `en`.
    pub locale: &'static str,
    /// Lines count from 1, as the API's do.
    pub lines_start_at1: bool,
    /// Columns count from 1, as the API's do.
    pub columns_start_at1: bool,
    /// Paths are paths, not URIs.
    pub path_format: &'static str,
    /// Variables carry their type.
    pub supports_variable_type: bool,
    /// Variables are read a page at a time.
    pub supports_variable_paging: bool,
    /// No `runInTerminal`: stepd has no terminal to offer.
    pub supports_run_in_terminal_request: bool,
    /// `startDebugging` starts a child session.
    pub supports_start_debugging_request: bool,
    /// No progress events.
    pub supports_progress_reporting: bool,
    /// No `invalidated` events.
    pub supports_invalidated_event: bool,
    /// No memory references.
    pub supports_memory_references: bool,
}

impl InitializeArguments {
    /// What stepd sends to the adapter named `adapter_id`.
    pub fn stepd(adapter_id: String) -> Self {
        Self {
            client_id: "stepd",
            client_name: "stepd",
            adapter_id,
            locale: "en",
            lines_start_at1: true,
            columns_start_at1: true,
            path_format: "path",
            supports_variable_type: true,
            supports_variable_paging: true,
            supports_run_in_terminal_request: false,
            supports_start_debugging_request: true,
            supports_progress_reporting: false,
            supports_invalidated_event: false,
            supports_memory_references: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn initialize_arguments_are_the_protocols_names() {
        let sent = serde_json::to_value(InitializeArguments::stepd("debugpy".into())).unwrap();
        assert_eq!(
            sent,
            json!({
                "clientID": "stepd",
                "clientName": "stepd",
                "adapterID": "debugpy",
                "locale": "en",
                "linesStartAt1": true,
                "columnsStartAt1": true,
                "pathFormat": "path",
                "supportsVariableType": true,
                "supportsVariablePaging": true,
                "supportsRunInTerminalRequest": false,
                "supportsStartDebuggingRequest": true,
                "supportsProgressReporting": false,
                "supportsInvalidatedEvent": false,
                "supportsMemoryReferences": false,
            })
        );
    }

    #[test]
    fn only_a_json_true_announces_a_capability() {
        let announced = json!({"supportsLogPoints": true, "supportsSetVariable": "yes"});
        assert!(Capability::LogPoints.announced_in(&announced));
        assert!(!Capability::SetVariable.announced_in(&announced));
        assert!(!Capability::TerminateRequest.announced_in(&announced));
    }
}

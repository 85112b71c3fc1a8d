//! Starting a DAP session: the configuration sequence every adapter goes
//! through, in the order that works for all of them.

use std::time::Duration;

use serde_json::{Value, json};
use stepd_proto::v1::{
    EndReason, ErrorReason, SessionStarted, SessionState, StableState, event::Payload,
};
use tokio::time::sleep_until;

use super::Actor;
use crate::capability::Capability;
use crate::session::LaunchOutcome;
use crate::{
    adapters::{self, AdapterKind, LaunchSpec},
    client::{DapError, Incoming, body_of},
};
use crate::{capability::InitializeArguments, messages};
use stepd_core::error::{ApiError, ApiResult};

/// How long the configuration sequence may take.
const CONFIGURE_DEADLINE: Duration = Duration::from_secs(60);

impl Actor {
    pub(super) async fn configure(&mut self) -> ApiResult<LaunchOutcome> {
        let init = serde_json::to_value(InitializeArguments::stepd(self.adapter.name().into()))
            .map_err(|err| ApiError::internal(format!("encoding initialize: {err}")))?;
        let capabilities = self
            .client
            .request("initialize", init)
            .await
            .map_err(start_error)?;
        let _ = self.shared.capabilities.set(capabilities.clone());
        self.session.capabilities = capabilities.as_object().map(stepd_core::json::to_struct);
        let typed = match messages::parse("initialize response", capabilities.clone()) {
            Ok(typed) => typed,
            Err(problem) => {
                self.adapter_fault(&problem);
                messages::Capabilities::default()
            }
        };
        self.session.exception_filters = exception_filters(&typed);

        let (command, arguments) = self.start_arguments();
        let mut started = self.client.send(command, arguments);
        // Adapters differ in order: debugpy sends `initialized` before it
        // answers `launch` (and answers only after configurationDone); lldb
        // answers first. Wait for `initialized` without waiting for the answer.
        let deadline = tokio::time::Instant::now() + CONFIGURE_DEADLINE;
        let mut early = Vec::new();
        let mut start_answer = None;
        loop {
            tokio::select! {
                message = self.incoming.recv() => match message {
                    Some(Incoming::Event { event, .. }) if event == "initialized" => break,
                    Some(Incoming::Closed(reason)) => return Err(closed_while_starting(reason)),
                    Some(other) => early.push(other),
                    None => return Err(start_error(self.client.gone())),
                },
                answer = &mut started, if start_answer.is_none() => {
                    let answer = answer.map_err(|_| start_error(self.client.gone()))?;
                    body_of(answer.clone()).map_err(|e| launch_refused(&e))?;
                    start_answer = Some(answer);
                }
                () = sleep_until(deadline) => {
                    return Err(ApiError::new(ErrorReason::ProtocolError, "the adapter never sent `initialized`"));
                }
            }
        }
        // Output that arrived early is not lost.
        for message in early.drain(..) {
            self.on_incoming(message).await;
        }
        let placements = self.apply_breakpoints().await;
        if self.shared.supports(Capability::ConfigurationDoneRequest) {
            self.client
                .request("configurationDone", json!({}))
                .await
                .map_err(start_error)?;
        }
        if start_answer.is_none() {
            let answer = tokio::time::timeout_at(deadline, started)
                .await
                .map_err(|_| {
                    ApiError::new(
                        ErrorReason::ProtocolError,
                        "the adapter never answered launch",
                    )
                })?
                .map_err(|_| start_error(self.client.gone()))?;
            body_of(answer).map_err(|e| launch_refused(&e))?;
        }
        // The debuggee's pid usually arrives (a `process` event) around the
        // launch answer; take it from what is queued so session_started has it.
        let mut queued = Vec::new();
        while let Ok(message) = self.incoming.try_recv() {
            if let Incoming::Event { event, body } = &message
                && event == "process"
                && let Ok(process) = messages::parse("process event", body.clone())
            {
                // A malformed one is reported when it is handled in turn.
                self.on_process(&process);
            }
            queued.push(message);
        }
        self.session.state = self.life.started().into();
        self.publish(Payload::SessionStarted(Box::new(SessionStarted {
            session: Some(self.session.clone()),
        })));
        for placement in &placements {
            self.publish_status(placement);
        }
        let mut entry = None;
        for message in queued {
            match message {
                Incoming::Event { event, body }
                    if event == "stopped" && self.request.stop_on_entry && entry.is_none() =>
                {
                    entry = self.on_stopped(&body).await;
                }
                other => self.on_incoming(other).await,
            }
        }
        if self.request.stop_on_entry && entry.is_none() {
            entry = Some(self.wait_for_entry(deadline).await?);
        }
        let mut session = self.session.clone();
        if entry.is_some() {
            session.state = SessionState::Stopped.into();
        }
        Ok(LaunchOutcome {
            session,
            placements,
            entry,
        })
    }

    pub(super) fn start_arguments(&self) -> (&'static str, Value) {
        let r = &self.request;
        // A launched program continues the session's trace (W3C Trace
        // Context), unless its caller gave it a TRACEPARENT of its own.
        let traced_env;
        let env = match self.span.traceparent() {
            Some(parent) if !r.env.contains_key("TRACEPARENT") => {
                let mut env = r.env.clone();
                env.insert("TRACEPARENT".into(), parent);
                traced_env = env;
                &traced_env
            }
            _ => &r.env,
        };
        let spec = LaunchSpec {
            program: &r.program,
            args: &r.args,
            cwd: &r.cwd,
            env,
            stop_on_entry: r.stop_on_entry,
            just_my_code: r.just_my_code,
            extra: r.adapter_options.as_ref(),
        };
        if let Some(configuration) = &r.configuration {
            let command = if r.attach { "attach" } else { "launch" };
            return (command, configuration.clone());
        }
        if !r.attach {
            return ("launch", adapters::launch_arguments(&self.adapter, &spec));
        }
        let mut args = json!({});
        if r.pid > 0 {
            args["pid"] = json!(r.pid);
            args["processId"] = json!(r.pid);
        }
        if let Some((host, port)) = r
            .connect
            .rsplit_once(':')
            .filter(|_| r.dap_server.is_empty())
        {
            args["connect"] = json!({"host": host, "port": port.parse::<u16>().unwrap_or(0)});
        }
        match self.adapter.kind {
            AdapterKind::Dlv => args["mode"] = json!("local"),
            AdapterKind::Debugpy => {
                args["type"] = json!("python");
                args["request"] = json!("attach");
            }
            _ => {}
        }
        adapters::apply_just_my_code(self.adapter.kind, r.just_my_code, &mut args);
        if let Some(extra) = &r.adapter_options
            && let (Some(obj), Value::Object(extra)) =
                (args.as_object_mut(), stepd_core::json::from_struct(extra))
        {
            obj.extend(extra);
        }
        ("attach", args)
    }

    pub(super) async fn wait_for_entry(
        &mut self,
        deadline: tokio::time::Instant,
    ) -> ApiResult<StableState> {
        loop {
            let message = tokio::time::timeout_at(deadline, self.incoming.recv())
                .await
                .map_err(|_| ApiError::new(ErrorReason::ProtocolError, "no stop on entry"))?;
            match message {
                Some(Incoming::Event { event, body }) if event == "stopped" => {
                    if let Some(state) = self.on_stopped(&body).await {
                        return Ok(state);
                    }
                }
                Some(Incoming::Closed(reason)) => {
                    let err = closed_while_starting(reason);
                    let end = if err.reason() == ErrorReason::ProtocolError {
                        EndReason::ProtocolError
                    } else {
                        EndReason::AdapterDied
                    };
                    self.end(end, err.to_string()).await;
                    return Err(err);
                }
                Some(other) => {
                    self.on_incoming(other).await;
                    if self.life.is_ended() {
                        return Err(ApiError::new(
                            ErrorReason::SessionEnded,
                            "the program ended before it stopped on entry",
                        ));
                    }
                }
                None => return Err(start_error(self.client.gone())),
            }
        }
    }
}

pub(super) fn exception_filters(
    capabilities: &messages::Capabilities,
) -> Vec<stepd_proto::v1::ExceptionFilter> {
    capabilities
        .exception_breakpoint_filters
        .iter()
        .map(|f| stepd_proto::v1::ExceptionFilter {
            id: f.filter.clone(),
            label: f.label.clone(),
            default: f.default,
            supports_condition: f.supports_condition,
        })
        .collect()
}

/// A request of the start sequence that failed. A fault in what the adapter
/// sent (framing, JSON) is a `PROTOCOL_ERROR` naming the fault, as it is
/// once the session runs; only an adapter that ended is `ADAPTER_DIED`.
pub(super) fn start_error(err: DapError) -> ApiError {
    match err {
        DapError::Closed => {
            ApiError::new(ErrorReason::AdapterDied, "the adapter ended while starting")
        }
        DapError::Protocol(fault) => ApiError::new(
            ErrorReason::ProtocolError,
            format!("the adapter broke the protocol while starting: {fault}"),
        ),
        other => ApiError::new(ErrorReason::ProtocolError, other.to_string()),
    }
}

/// The adapter's output ended during the start sequence; `Some` says which
/// fault made stepd stop reading it.
fn closed_while_starting(fault: Option<String>) -> ApiError {
    start_error(fault.map_or(DapError::Closed, DapError::Protocol))
}

pub(super) fn launch_refused(err: &DapError) -> ApiError {
    ApiError::new(
        ErrorReason::LaunchFailed,
        format!("the adapter refused to start the program: {err}"),
    )
}

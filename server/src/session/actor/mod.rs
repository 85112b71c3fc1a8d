//! The actor of one DAP session. It alone owns the session's state: the
//! adapter process, the execution queue (one Continue/Step/Pause in flight,
//! the rest in order), pending pauses and how the session ends. Everything
//! that changes that state arrives as a message, so no lock is held across an
//! await.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use stepd_proto::v1::{
    BreakpointAction, BreakpointChange, BreakpointPlacement, BreakpointStatus, BreakpointUpdated,
    CommandKind, Continued, DisconnectMode, EndReason, ErrorReason, Pause, PauseReason, Session,
    SessionEnded, SessionKind, SessionStarted, SessionState, StableState, StepKind, Stopped,
    Thread, ThreadChanged, breakpoint_spec::Location, event::Payload,
};
use tokio::{
    process::Child,
    sync::{mpsc, oneshot},
    time::sleep_until,
};

mod commands;

use commands::{Awaiting, HERE_BREAKPOINT, Mode, Steering};

use super::{
    Command, Context, ExecOp, LaunchOutcome, LaunchRequest, Shared, WaitMode, handles, log_message,
    stop,
};
use crate::{
    breakpoints::HitCondition,
    dap::{
        adapters::{self, Adapter, LaunchSpec},
        client::{DapClient, DapError, Incoming, body_of},
    },
    error::{ApiError, ApiResult},
    pause::Answer,
    time::now_timestamp,
};

/// How long the configuration sequence may take.
const CONFIGURE_DEADLINE: Duration = Duration::from_secs(60);
/// Frames a snapshot breakpoint captures at most.
const SNAPSHOT_FRAMES: u32 = 20;
/// How long a Disconnect waits for the adapter before killing it.
const DISCONNECT_DEADLINE: Duration = Duration::from_secs(5);

/// An execution request waiting for the session to be stable.
struct Inflight {
    reply: oneshot::Sender<ApiResult<StableState>>,
    deadline: Option<tokio::time::Instant>,
    started: Instant,
    output_from: u64,
}

/// What the actor remembers about a pending pause.
struct PauseCtx {
    pause: Pause,
    frame_id: Option<i64>,
    /// Stack depth at the pause (for OUT with force and CONTINUE_SCOPE).
    depth: u32,
    /// Set while the pause asks for an expression.
    awaiting: Option<Awaiting>,
    /// The commands offered before an EXPRESSION prompt replaced them.
    offered: Vec<i32>,
}

/// The actor.
pub struct Actor {
    ctx: Context,
    shared: Arc<Shared>,
    client: Arc<DapClient>,
    adapter: Adapter,
    request: LaunchRequest,
    /// The adapter process; none for a child session on a shared adapter.
    child: Option<Child>,
    incoming: mpsc::UnboundedReceiver<Incoming>,
    commands: mpsc::UnboundedReceiver<Command>,
    answers: mpsc::UnboundedReceiver<Answer>,
    answers_tx: mpsc::UnboundedSender<Answer>,
    session: Session,
    queue: VecDeque<(ExecOp, WaitMode, oneshot::Sender<ApiResult<StableState>>)>,
    inflight: Option<Inflight>,
    pauses: HashMap<String, PauseCtx>,
    /// Adapter breakpoint id → stepd breakpoint id.
    dap_breakpoints: HashMap<i64, String>,
    /// (path, placed line) → stepd breakpoint ids, for adapters whose stops
    /// do not name the breakpoint (lldb-vscode 14 sends no hitBreakpointIds).
    placed_lines: HashMap<(String, u32), Vec<String>>,
    /// Files, and whether function and exception breakpoints, were sent to the
    /// adapter, so a later change can clear what no longer applies.
    applied_files: std::collections::HashSet<String>,
    applied_functions: bool,
    applied_exceptions: bool,
    debuggee_pid: Option<u32>,
    exit_code: Option<i32>,
    /// The next stop is the entry stop asked for (lldb reports it as "exception").
    expect_entry: bool,
    /// A Pause request is out; lldb reports the resulting stop as an
    /// "exception" (SIGSTOP), which is normalised to PAUSE_REQUEST.
    expect_pause: bool,
    /// A stepping mode left by the last command (forced out, here, trace).
    mode: Mode,
    /// CONTINUE_ALL: no breakpoint applies until the next Pause request.
    breakpoints_off: bool,
    /// HERE's temporary breakpoint (path, line).
    temp_breakpoint: Option<(String, u32)>,
    /// A QUIT was answered: the end that follows is END_REASON_QUIT.
    quitting: bool,
    ended: bool,
}

impl Actor {
    /// A new actor for a started adapter.
    pub fn new(
        ctx: Context,
        shared: Arc<Shared>,
        adapter: Adapter,
        request: LaunchRequest,
        child: Option<Child>,
        incoming: mpsc::UnboundedReceiver<Incoming>,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> Self {
        let (answers_tx, answers) = mpsc::unbounded_channel();
        let client = shared
            .client
            .get()
            .cloned()
            .expect("the client is set before the actor starts");
        let session = Session {
            id: shared.id.clone(),
            kind: SessionKind::Dap.into(),
            state: SessionState::Starting.into(),
            name: if request.name.is_empty() {
                std::path::Path::new(&request.program)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| adapter.name.clone())
            } else {
                request.name.clone()
            },
            adapter: adapter.name.clone(),
            labels: request.labels.clone(),
            program: request.program.clone(),
            adapter_pid: child
                .as_ref()
                .and_then(Child::id)
                .map(i64::from)
                .unwrap_or(0),
            parent_session_id: request.parent_session_id.clone(),
            started_at: Some(now_timestamp()),
            original_id: request.request_id.clone(),
            ..Default::default()
        };
        Self {
            expect_entry: request.stop_on_entry,
            expect_pause: false,
            mode: Mode::Normal,
            breakpoints_off: false,
            temp_breakpoint: None,
            quitting: false,
            ctx,
            shared,
            client,
            adapter,
            request,
            child,
            incoming,
            commands,
            answers,
            answers_tx,
            session,
            queue: VecDeque::new(),
            inflight: None,
            pauses: HashMap::new(),
            dap_breakpoints: HashMap::new(),
            placed_lines: HashMap::new(),
            applied_files: std::collections::HashSet::new(),
            applied_functions: false,
            applied_exceptions: false,
            debuggee_pid: None,
            exit_code: None,
            ended: false,
        }
    }

    fn bump_epoch(&self) {
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
    }

    fn kill_adapter(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.start_kill();
        }
    }

    fn publish(&self, payload: Payload) {
        self.ctx.bus.publish(&self.shared.id, payload);
    }

    /// Configures the session, answers `ready`, then serves until it ends.
    pub async fn run(mut self, ready: oneshot::Sender<ApiResult<LaunchOutcome>>) {
        let outcome = self.configure().await;
        let failed = outcome.is_err();
        if let Err(err) = &outcome {
            tracing::info!(session = %self.shared.id, %err, "session failed to start");
        }
        let _ = ready.send(outcome);
        if failed {
            self.shared.ended.store(true, Ordering::Release);
            self.kill_adapter();
            return;
        }
        while !self.ended {
            let deadline = self.inflight.as_ref().and_then(|i| i.deadline);
            tokio::select! {
                Some(message) = self.incoming.recv() => self.on_incoming(message).await,
                Some(command) = self.commands.recv() => self.on_command(command).await,
                Some(answer) = self.answers.recv() => self.on_answer(answer).await,
                () = sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)), if deadline.is_some() => {
                    self.finish_inflight(true);
                    self.start_next().await;
                }
                status = wait_for(&mut self.child) => {
                    // The adapter exited; its output may still hold events, so
                    // drain them before deciding how the session ended.
                    while let Ok(message) = self.incoming.try_recv() {
                        self.on_incoming(message).await;
                    }
                    if !self.ended {
                        let detail = match status {
                            Ok(s) => format!("the adapter exited ({s})"),
                            Err(e) => format!("waiting for the adapter: {e}"),
                        };
                        self.end(EndReason::AdapterDied, detail).await;
                    }
                }
            }
        }
    }

    // ----- configuration -------------------------------------------------

    async fn configure(&mut self) -> ApiResult<LaunchOutcome> {
        let init = json!({
            "clientID": "stepd",
            "clientName": "stepd",
            "adapterID": self.adapter.name,
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
        });
        let capabilities = self
            .client
            .request("initialize", init)
            .await
            .map_err(start_error)?;
        let _ = self.shared.capabilities.set(capabilities.clone());
        self.session.capabilities = capabilities.as_object().map(adapters::json_to_struct);
        self.session.exception_filters = exception_filters(&capabilities);

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
                    Some(Incoming::Closed(reason)) => {
                        return Err(ApiError::new(
                            ErrorReason::AdapterDied,
                            format!("the adapter ended during configuration{}", reason.map(|r| format!(": {r}")).unwrap_or_default()),
                        ));
                    }
                    Some(other) => early.push(other),
                    None => return Err(ApiError::new(ErrorReason::AdapterDied, "the adapter is gone")),
                },
                answer = &mut started, if start_answer.is_none() => {
                    let answer = answer.map_err(|_| ApiError::new(ErrorReason::AdapterDied, "the adapter is gone"))?;
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
        if self.shared.supports("supportsConfigurationDoneRequest") {
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
                .map_err(|_| {
                    ApiError::new(ErrorReason::AdapterDied, "the adapter ended during launch")
                })?;
            body_of(answer).map_err(|e| launch_refused(&e))?;
        }
        // The debuggee's pid usually arrives (a `process` event) around the
        // launch answer; take it from what is queued so session_started has it.
        let mut queued = Vec::new();
        while let Ok(message) = self.incoming.try_recv() {
            if let Incoming::Event { event, body } = &message
                && event == "process"
                && let Some(pid) = body["systemProcessId"].as_i64()
            {
                self.session.pid = pid;
                self.debuggee_pid = u32::try_from(pid).ok();
            }
            queued.push(message);
        }
        self.session.state = SessionState::Running.into();
        self.publish(Payload::SessionStarted(SessionStarted {
            session: Some(self.session.clone()),
        }));
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

    fn start_arguments(&self) -> (&'static str, Value) {
        let r = &self.request;
        let spec = LaunchSpec {
            program: &r.program,
            args: &r.args,
            cwd: &r.cwd,
            env: &r.env,
            stop_on_entry: r.stop_on_entry,
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
        match self.adapter.name.as_str() {
            "dlv" => args["mode"] = json!("local"),
            "debugpy" => {
                args["type"] = json!("python");
                args["request"] = json!("attach");
                args["justMyCode"] = json!(true);
            }
            _ => {}
        }
        if let Some(extra) = &r.adapter_options
            && let (Some(obj), Value::Object(extra)) =
                (args.as_object_mut(), adapters::struct_to_json(extra))
        {
            obj.extend(extra);
        }
        ("attach", args)
    }

    async fn wait_for_entry(&mut self, deadline: tokio::time::Instant) -> ApiResult<StableState> {
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
                    let detail = reason.unwrap_or_else(|| "the adapter closed".into());
                    self.end(EndReason::AdapterDied, detail.clone()).await;
                    return Err(ApiError::new(ErrorReason::AdapterDied, detail));
                }
                Some(other) => {
                    self.on_incoming(other).await;
                    if self.ended {
                        return Err(ApiError::new(
                            ErrorReason::SessionEnded,
                            "the program ended before it stopped on entry",
                        ));
                    }
                }
                None => {
                    return Err(ApiError::new(
                        ErrorReason::AdapterDied,
                        "the adapter is gone",
                    ));
                }
            }
        }
    }

    // ----- breakpoints ---------------------------------------------------

    async fn apply_breakpoints(&mut self) -> Vec<BreakpointPlacement> {
        let breakpoints = match self.ctx.breakpoints.list(&self.request.labels).await {
            Ok(b) => b,
            Err(err) => {
                tracing::warn!(%err, "could not read breakpoints for a new session");
                return Vec::new();
            }
        };
        let mut live: Vec<_> = breakpoints
            .into_iter()
            .filter(|b| !b.spent && b.spec.as_ref().is_some_and(|s| s.enabled != Some(false)))
            .filter(|_| !self.breakpoints_off)
            .collect();
        if let Some((path, line)) = &self.temp_breakpoint {
            live.push(stepd_proto::v1::Breakpoint {
                id: HERE_BREAKPOINT.into(),
                spec: Some(stepd_proto::v1::BreakpointSpec {
                    location: Some(Location::Source(stepd_proto::v1::SourceLocation {
                        path: path.clone(),
                        line: *line,
                        column: 0,
                    })),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        let mut placements = Vec::new();
        let log_points = self.shared.supports("supportsLogPoints");
        let conditions = self.shared.supports("supportsConditionalBreakpoints");

        let mut by_file: HashMap<String, Vec<&stepd_proto::v1::Breakpoint>> = HashMap::new();
        let mut functions = Vec::new();
        let mut filters: Vec<(String, &stepd_proto::v1::Breakpoint)> = Vec::new();
        for bp in &live {
            match bp.spec.as_ref().and_then(|s| s.location.as_ref()) {
                Some(Location::Source(src)) => {
                    by_file.entry(src.path.clone()).or_default().push(bp)
                }
                Some(Location::Function(_)) => functions.push(bp),
                Some(Location::Exception(e)) => {
                    filters.extend(e.filter_ids.iter().map(|f| (f.clone(), bp)));
                }
                _ => {}
            }
        }
        self.dap_breakpoints.clear();
        self.placed_lines.clear();
        let gone: Vec<String> = self
            .applied_files
            .iter()
            .filter(|f| !by_file.contains_key(*f))
            .cloned()
            .collect();
        for path in gone {
            let _ = self
                .client
                .request(
                    "setBreakpoints",
                    json!({"source": {"path": path}, "breakpoints": []}),
                )
                .await;
        }
        self.applied_files = by_file.keys().cloned().collect();
        if functions.is_empty() && self.applied_functions {
            let _ = self
                .client
                .request("setFunctionBreakpoints", json!({"breakpoints": []}))
                .await;
        }
        self.applied_functions = !functions.is_empty();
        if filters.is_empty() && self.applied_exceptions {
            let _ = self
                .client
                .request("setExceptionBreakpoints", json!({"filters": []}))
                .await;
        }
        self.applied_exceptions = !filters.is_empty();
        for (path, bps) in by_file {
            let requested: Vec<Value> = bps
                .iter()
                .map(|bp| {
                    let spec = bp.spec.clone().unwrap_or_default();
                    let mut entry = json!({});
                    if let Some(Location::Source(src)) = &spec.location {
                        entry["line"] = json!(src.line);
                        if src.column > 0 {
                            entry["column"] = json!(src.column);
                        }
                    }
                    if conditions && !spec.condition.is_empty() {
                        entry["condition"] = json!(spec.condition);
                    }
                    if log_points && spec.action == stepd_proto::v1::BreakpointAction::Log as i32 {
                        entry["logMessage"] = json!(spec.log_message);
                    }
                    entry
                })
                .collect();
            let result = self
                .client
                .request(
                    "setBreakpoints",
                    json!({"source": {"path": path}, "breakpoints": requested}),
                )
                .await;
            for (i, bp) in bps.iter().enumerate() {
                let requested_line = match bp.spec.as_ref().and_then(|s| s.location.as_ref()) {
                    Some(Location::Source(src)) => src.line,
                    _ => 0,
                };
                let placed = result
                    .as_ref()
                    .ok()
                    .and_then(|b| b["breakpoints"].get(i).cloned());
                placements.push(self.placement(bp, requested_line, placed, result.as_ref().err()));
            }
        }
        if !functions.is_empty() {
            let result = if self.shared.supports("supportsFunctionBreakpoints") {
                let requested: Vec<Value> = functions
                    .iter()
                    .map(|bp| {
                        let spec = bp.spec.clone().unwrap_or_default();
                        let name = match spec.location {
                            Some(Location::Function(f)) => f.name,
                            _ => String::new(),
                        };
                        let mut entry = json!({"name": name});
                        if conditions && !spec.condition.is_empty() {
                            entry["condition"] = json!(spec.condition);
                        }
                        entry
                    })
                    .collect();
                self.client
                    .request("setFunctionBreakpoints", json!({"breakpoints": requested}))
                    .await
            } else {
                Err(DapError::Failed(format!(
                    "{} does not support function breakpoints",
                    self.adapter.name
                )))
            };
            for (i, bp) in functions.iter().enumerate() {
                let placed = result
                    .as_ref()
                    .ok()
                    .and_then(|b| b["breakpoints"].get(i).cloned());
                placements.push(self.placement(bp, 0, placed, result.as_ref().err()));
            }
        }
        if !filters.is_empty() {
            let offered: Vec<String> = self
                .session
                .exception_filters
                .iter()
                .map(|f| f.id.clone())
                .collect();
            let (known, unknown): (Vec<_>, Vec<_>) =
                filters.iter().partition(|(f, _)| offered.contains(f));
            let ids: Vec<&String> = known.iter().map(|(f, _)| f).collect();
            let result = self
                .client
                .request("setExceptionBreakpoints", json!({"filters": ids}))
                .await;
            let mut seen = std::collections::HashSet::new();
            for (filter, bp) in known.iter().chain(unknown.iter()) {
                if !seen.insert(bp.id.clone()) {
                    continue;
                }
                let error = if unknown.iter().any(|(f, b)| f == filter && b.id == bp.id) {
                    Some(DapError::Failed(format!(
                        "{} offers no exception filter {filter:?} (it offers: {})",
                        self.adapter.name,
                        offered.join(", ")
                    )))
                } else {
                    result.as_ref().err().cloned()
                };
                placements.push(self.placement(
                    bp,
                    0,
                    Some(json!({"verified": error.is_none()})),
                    error.as_ref(),
                ));
            }
        }
        placements
    }

    fn placement(
        &mut self,
        bp: &stepd_proto::v1::Breakpoint,
        requested_line: u32,
        placed: Option<Value>,
        error: Option<&DapError>,
    ) -> BreakpointPlacement {
        let placed = placed.unwrap_or(Value::Null);
        if let Some(id) = placed["id"].as_i64() {
            self.dap_breakpoints.insert(id, bp.id.clone());
        }
        if let Some(Location::Source(src)) = bp.spec.as_ref().and_then(|s| s.location.as_ref()) {
            let line = placed["line"]
                .as_u64()
                .and_then(|l| u32::try_from(l).ok())
                .unwrap_or(src.line);
            self.placed_lines
                .entry((src.path.clone(), line))
                .or_default()
                .push(bp.id.clone());
        }
        let message = match error {
            Some(err) => err.to_string(),
            None => placed["message"].as_str().unwrap_or_default().to_owned(),
        };
        BreakpointPlacement {
            breakpoint_id: bp.id.clone(),
            requested_line,
            status: Some(BreakpointStatus {
                session_id: self.shared.id.clone(),
                verified: error.is_none() && placed["verified"].as_bool().unwrap_or(false),
                actual_line: u32::try_from(placed["line"].as_u64().unwrap_or(0)).unwrap_or(0),
                message,
            }),
        }
    }

    fn publish_status(&self, placement: &BreakpointPlacement) {
        if placement.breakpoint_id == HERE_BREAKPOINT {
            return;
        }
        let breakpoint = self
            .ctx
            .bus
            .with_view(|v| v.breakpoint(&placement.breakpoint_id))
            .unwrap_or_else(|| stepd_proto::v1::Breakpoint {
                id: placement.breakpoint_id.clone(),
                ..Default::default()
            });
        self.publish(Payload::BreakpointUpdated(BreakpointUpdated {
            change: BreakpointChange::Status.into(),
            breakpoint: Some(breakpoint),
            status: placement.status.clone(),
        }));
    }

    // ----- adapter messages ----------------------------------------------

    async fn on_incoming(&mut self, message: Incoming) {
        match message {
            Incoming::Event { event, body } => self.on_event(&event, body).await,
            Incoming::Request {
                seq,
                command,
                arguments,
            } => self.on_reverse_request(seq, &command, arguments),
            Incoming::Closed(None) => {
                if !self.ended {
                    let reason = if self.exit_code.is_some() {
                        EndReason::Exited
                    } else {
                        EndReason::AdapterDied
                    };
                    self.end(reason, "the adapter closed its connection".into())
                        .await;
                }
            }
            Incoming::Closed(Some(error)) => {
                if !self.ended {
                    self.end(EndReason::ProtocolError, error).await;
                }
            }
        }
    }

    /// Requests from the adapter. `startDebugging` (debugpy's child processes)
    /// becomes a child session; `runInTerminal` is refused: stepd captures
    /// output itself and has no terminal to offer.
    fn on_reverse_request(&mut self, seq: i64, command: &str, arguments: Value) {
        tracing::debug!(session = %self.shared.id, command, %arguments, "reverse request");
        if command != "startDebugging" {
            self.client.respond(
                seq,
                command,
                Err(format!(
                    "stepd does not handle the reverse request {command:?}"
                )),
            );
            return;
        }
        let configuration = arguments["configuration"].clone();
        let host = configuration["connect"]["host"]
            .as_str()
            .unwrap_or("127.0.0.1");
        let port = configuration["connect"]["port"].as_u64().unwrap_or(0);
        let Some(children) = self.ctx.children.clone().filter(|_| port > 0) else {
            self.client.respond(
                seq,
                command,
                Err("stepd can only follow child sessions it can connect to".into()),
            );
            return;
        };
        let request = LaunchRequest {
            attach: arguments["request"].as_str() != Some("launch"),
            adapter: self.adapter.name.clone(),
            labels: self.request.labels.clone(),
            name: configuration["name"].as_str().unwrap_or("child").to_owned(),
            program: configuration["program"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            parent_session_id: self.shared.id.clone(),
            dap_server: format!("{host}:{port}"),
            configuration: Some(configuration),
            ..Default::default()
        };
        let result = children
            .send(request)
            .map(|()| json!({}))
            .map_err(|_| "the daemon is shutting down".to_owned());
        self.client.respond(seq, command, result);
    }

    async fn on_event(&mut self, event: &str, body: Value) {
        match event {
            "output" => {
                let category = body["category"].as_str().unwrap_or("console");
                if category == "telemetry" {
                    return;
                }
                let text = body["output"].as_str().unwrap_or_default();
                let chunk = self
                    .shared
                    .output
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(category, text);
                self.publish(Payload::Output(stepd_proto::v1::Output {
                    chunk: Some(chunk),
                }));
            }
            "stopped" => {
                // A stop that only served a log point or a snapshot is silent.
                if let Some(state) = self.on_stopped(&body).await {
                    self.complete_inflight(state);
                    self.start_next().await;
                }
            }
            "continued" => {
                let thread = body["threadId"].as_i64().unwrap_or(0);
                let all = body["allThreadsContinued"].as_bool().unwrap_or(true);
                self.resumed(
                    if all { 0 } else { thread },
                    CommandKind::Unspecified,
                    "adapter",
                );
            }
            "process" => {
                self.debuggee_pid = body["systemProcessId"]
                    .as_u64()
                    .and_then(|p| u32::try_from(p).ok());
                if let Some(pid) = self.debuggee_pid {
                    self.session.pid = i64::from(pid);
                }
            }
            "exited" => {
                self.exit_code = body["exitCode"]
                    .as_i64()
                    .and_then(|c| i32::try_from(c).ok());
            }
            "terminated" => {
                let reason = if self.quitting {
                    EndReason::Quit
                } else if self.exit_code.is_some() {
                    EndReason::Exited
                } else {
                    EndReason::Terminated
                };
                self.end(reason, "the program ended".into()).await;
            }
            "thread" => {
                let id = body["threadId"].as_i64().unwrap_or(0);
                let reason = body["reason"].as_str().unwrap_or_default().to_owned();
                self.publish(Payload::ThreadChanged(ThreadChanged {
                    thread: Some(Thread {
                        id,
                        ..Default::default()
                    }),
                    reason,
                }));
            }
            "breakpoint" => {
                let placed = &body["breakpoint"];
                if let Some(bp_id) = placed["id"]
                    .as_i64()
                    .and_then(|id| self.dap_breakpoints.get(&id))
                {
                    let status = BreakpointStatus {
                        session_id: self.shared.id.clone(),
                        verified: placed["verified"].as_bool().unwrap_or(false),
                        actual_line: u32::try_from(placed["line"].as_u64().unwrap_or(0))
                            .unwrap_or(0),
                        message: placed["message"].as_str().unwrap_or_default().to_owned(),
                    };
                    self.publish_status(&BreakpointPlacement {
                        breakpoint_id: bp_id.clone(),
                        requested_line: 0,
                        status: Some(status),
                    });
                }
            }
            _ => {}
        }
    }

    /// Records a stop: a new epoch, the pause with its location and locals,
    /// the `stopped` event. Returns the stable state it makes.
    async fn on_stopped(&mut self, body: &Value) -> Option<StableState> {
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
        let raw_reason = body["reason"].as_str().unwrap_or_default().to_owned();
        let mut reason = stop::reason(&raw_reason, std::mem::take(&mut self.expect_entry));
        if std::mem::take(&mut self.expect_pause)
            && matches!(
                reason,
                PauseReason::Exception | PauseReason::Unspecified | PauseReason::Step
            )
        {
            reason = PauseReason::PauseRequest;
        }
        let mut thread_id = body["threadId"].as_i64().unwrap_or(0);
        if thread_id == 0
            && let Ok(threads) = self.client.request("threads", json!({})).await
        {
            thread_id = threads["threads"][0]["id"].as_i64().unwrap_or(0);
        }
        let stack = self
            .client
            .request(
                "stackTrace",
                json!({"threadId": thread_id, "startFrame": 0, "levels": 1}),
            )
            .await
            .unwrap_or(Value::Null);
        let top = stack["stackFrames"][0].clone();
        let frame_id = top["id"].as_i64();
        let location = (!top.is_null()).then(|| stop::location(&top));
        let depth = stack["totalFrames"]
            .as_u64()
            .and_then(|d| u32::try_from(d).ok())
            .unwrap_or(1);
        match self
            .steer(reason, thread_id, depth, location.as_ref(), frame_id)
            .await
        {
            Steering::Resumed => return None,
            Steering::Pause(Some(steered)) => reason = steered,
            Steering::Pause(None) | Steering::Normal => {}
        }
        let mut breakpoint_ids: Vec<String> = body["hitBreakpointIds"]
            .as_array()
            .map(|ids| {
                ids.iter()
                    .filter_map(|id| {
                        id.as_i64()
                            .and_then(|id| self.dap_breakpoints.get(&id).cloned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        if breakpoint_ids.is_empty()
            && reason == PauseReason::Breakpoint
            && let Some(at) = &location
            && let Some(ids) = self.placed_lines.get(&(at.path.clone(), at.line))
        {
            breakpoint_ids.clone_from(ids);
        }
        if reason == PauseReason::Breakpoint
            && !breakpoint_ids.is_empty()
            && matches!(self.mode, Mode::Normal)
            && !self.act_on_hit(&breakpoint_ids, thread_id, frame_id).await
        {
            // Nothing to pause for: go on without a word (no stopped/continued).
            if let Err(err) = self
                .client
                .request(
                    "continue",
                    json!({"threadId": thread_id, "singleThread": false}),
                )
                .await
            {
                tracing::warn!(session = %self.shared.id, %err, "could not resume after a silent stop");
            }
            self.shared.epoch.fetch_add(1, Ordering::AcqRel);
            return None;
        }
        let mut locals = Vec::new();
        let mut locals_available = false;
        if let Some(frame) = frame_id
            && let Ok(scopes) = self
                .client
                .request("scopes", json!({"frameId": frame}))
                .await
            && let Some(scope) = scopes["scopes"]
                .as_array()
                .and_then(|s| s.iter().find(|s| s["expensive"].as_bool() != Some(true)))
            && let Some(reference) = scope["variablesReference"].as_i64()
            && let Ok(vars) = self
                .client
                .request("variables", json!({"variablesReference": reference}))
                .await
        {
            locals = stop::locals(&vars);
            locals_available = true;
        }
        let caught_msg = if reason == PauseReason::Exception {
            self.exception_message(thread_id, body).await
        } else {
            String::new()
        };
        let input_type = self.input_type(frame_id.is_some(), locals_available);
        let mut notes = Vec::new();
        if self.breakpoints_off {
            if reason == PauseReason::PauseRequest {
                notes.push(
                    "CONTINUE_ALL ended with this Pause request: breakpoints apply again"
                        .to_owned(),
                );
                self.breakpoints_off = false;
                let placements = self.apply_breakpoints().await;
                for placement in &placements {
                    self.publish_status(placement);
                }
            } else {
                notes.push("CONTINUE_ALL is in force: breakpoints are off for this session until the next Pause request".to_owned());
            }
        }
        let key = format!("p-{}", uuid::Uuid::now_v7().simple());
        let pause = Pause {
            key: key.clone(),
            session_id: self.shared.id.clone(),
            thread_id,
            reason: reason.into(),
            raw_reason: raw_reason.clone(),
            input_type,
            notes,
            debug_value: (!caught_msg.is_empty()).then(|| stop::display(&caught_msg, "exception")),
            coor: location
                .as_ref()
                .map(|l| vec![depth as i32, l.line as i32])
                .unwrap_or_default(),
            location: location.clone(),
            locals,
            locals_available,
            original_id: self.request.request_id.clone(),
            caught_msg,
            breakpoint_ids: breakpoint_ids.clone(),
            created_at: Some(now_timestamp()),
            ..Default::default()
        };
        // A thread that stops again replaces its earlier pause.
        let stale: Vec<String> = self
            .pauses
            .iter()
            .filter(|(_, p)| p.pause.thread_id == thread_id)
            .map(|(k, _)| k.clone())
            .collect();
        for old in stale {
            self.pauses.remove(&old);
            self.ctx
                .pauses
                .resolve(&old, CommandKind::Unspecified, "stopped again");
        }
        self.ctx
            .pauses
            .register(pause.clone(), self.answers_tx.clone());
        self.pauses.insert(
            key.clone(),
            PauseCtx {
                pause: pause.clone(),
                frame_id,
                depth,
                awaiting: None,
                offered: Vec::new(),
            },
        );
        self.shared
            .stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(thread_id, key);
        *self
            .shared
            .latest_frame
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = frame_id.map(|f| (thread_id, f));
        self.session.state = SessionState::Stopped.into();
        self.publish(Payload::Stopped(Stopped {
            pause: Some(pause.clone()),
            all_threads_stopped: body["allThreadsStopped"].as_bool().unwrap_or(false),
        }));
        Some(StableState {
            state: SessionState::Stopped.into(),
            waited: true,
            timed_out: false,
            stop_reason: reason.into(),
            thread_id,
            top_frame: frame_id.map(|id| stepd_proto::v1::Frame {
                id: handles::make(self.shared.epoch(), id),
                name: top["name"].as_str().unwrap_or_default().to_owned(),
                location,
                presentation_hint: top["presentationHint"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            }),
            hit_breakpoint_ids: breakpoint_ids,
            pause: Some(pause),
            ..Default::default()
        })
    }

    /// Counts a hit on each matched breakpoint and runs their actions.
    /// Returns whether the program should pause: some matched STOP
    /// breakpoint's hit condition holds. LOG and SNAPSHOT breakpoints are
    /// carried out here (emulated where the adapter lacks log points).
    async fn act_on_hit(&mut self, ids: &[String], thread_id: i64, frame_id: Option<i64>) -> bool {
        let mut pause = false;
        for id in ids {
            let Ok(bp) = self.ctx.breakpoints.hit(id).await else {
                // Removed meanwhile: the adapter still had it; do not pause for it.
                continue;
            };
            let spec = bp.spec.clone().unwrap_or_default();
            let hits = bp.hit_count;
            let passes = spec.hit_condition.trim().is_empty()
                || HitCondition::parse(&spec.hit_condition).is_ok_and(|c| c.passes(hits));
            let within_max = spec.max_hits == 0 || hits <= u64::from(spec.max_hits);
            if !passes || !within_max {
                continue;
            }
            match BreakpointAction::try_from(spec.action).unwrap_or(BreakpointAction::Stop) {
                BreakpointAction::Log => self.emulate_log(&spec.log_message, frame_id).await,
                BreakpointAction::Snapshot => self.snapshot(id, thread_id, frame_id).await,
                BreakpointAction::Stop | BreakpointAction::Unspecified => pause = true,
            }
        }
        pause
    }

    /// A log point the adapter did not handle: interpolate `{expr}` in the
    /// frame and emit the line as output.
    async fn emulate_log(&mut self, message: &str, frame_id: Option<i64>) {
        let mut text = String::new();
        for part in log_message::parse(message) {
            match part {
                log_message::Part::Text(t) => text.push_str(&t),
                log_message::Part::Expr(expr) => {
                    let mut args =
                        json!({"expression": expr, "context": self.shared.default_eval_context()});
                    if let Some(frame) = frame_id {
                        args["frameId"] = json!(frame);
                    }
                    match self.client.request("evaluate", args).await {
                        Ok(body) => text.push_str(body["result"].as_str().unwrap_or_default()),
                        Err(err) => text.push_str(&format!("<{expr}: {err}>")),
                    }
                }
            }
        }
        text.push('\n');
        let chunk = self
            .shared
            .output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push("console", &text);
        self.publish(Payload::Output(stepd_proto::v1::Output {
            chunk: Some(chunk),
        }));
    }

    /// A snapshot breakpoint: capture the stack and the top frame's locals.
    async fn snapshot(&mut self, id: &str, thread_id: i64, frame_id: Option<i64>) {
        let stack = self
            .client
            .request(
                "stackTrace",
                json!({"threadId": thread_id, "startFrame": 0, "levels": SNAPSHOT_FRAMES}),
            )
            .await
            .unwrap_or(Value::Null);
        let frames: Vec<_> = stack["stackFrames"]
            .as_array()
            .map(|f| f.iter().map(stop::location).collect())
            .unwrap_or_default();
        let total = stack["totalFrames"].as_u64().unwrap_or(frames.len() as u64);
        let mut locals = Vec::new();
        if let Some(frame) = frame_id
            && let Ok(scopes) = self
                .client
                .request("scopes", json!({"frameId": frame}))
                .await
            && let Some(reference) = scopes["scopes"][0]["variablesReference"].as_i64()
            && let Ok(vars) = self
                .client
                .request("variables", json!({"variablesReference": reference}))
                .await
        {
            locals = stop::locals(&vars);
        }
        let truncated = total > frames.len() as u64 || locals.len() >= stop::MAX_LOCALS;
        self.publish(Payload::BreakpointSnapshot(
            stepd_proto::v1::BreakpointSnapshot {
                breakpoint_id: id.to_owned(),
                thread_id,
                frames,
                locals,
                truncated,
                extra: None,
            },
        ));
    }

    async fn exception_message(&self, thread_id: i64, body: &Value) -> String {
        if self.shared.supports("supportsExceptionInfoRequest")
            && let Ok(info) = self
                .client
                .request("exceptionInfo", json!({"threadId": thread_id}))
                .await
        {
            let id = info["exceptionId"].as_str().unwrap_or_default();
            let description = info["description"].as_str().unwrap_or_default();
            if !description.is_empty() {
                return if id.is_empty() || description.starts_with(id) {
                    description.to_owned()
                } else {
                    format!("{id}: {description}")
                };
            }
        }
        body["text"]
            .as_str()
            .or_else(|| body["description"].as_str())
            .unwrap_or_default()
            .to_owned()
    }

    /// The program moves on: pauses of `thread` (0 = all) resolve, handles expire.
    fn resumed(&mut self, thread: i64, command: CommandKind, by: &str) {
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
        let keys: Vec<String> = self
            .pauses
            .iter()
            .filter(|(_, p)| thread == 0 || p.pause.thread_id == thread)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &keys {
            self.pauses.remove(key);
            self.ctx.pauses.resolve(key, command, by);
        }
        {
            let mut stopped = self
                .shared
                .stopped
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if thread == 0 {
                stopped.clear();
            } else {
                stopped.remove(&thread);
            }
            let mut latest = self
                .shared
                .latest_frame
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if latest.is_some_and(|(t, _)| thread == 0 || t == thread) {
                *latest = None;
            }
        }
        if self.pauses.is_empty() {
            self.session.state = SessionState::Running.into();
        }
        self.publish(Payload::Continued(Continued { thread_id: thread }));
    }

    // ----- execution -------------------------------------------------------

    async fn on_command(&mut self, command: Command) {
        match command {
            Command::Exec { op, wait, reply } => {
                if self.inflight.is_some() {
                    self.queue.push_back((op, wait, reply));
                } else {
                    self.start_exec(op, wait, reply).await;
                }
            }
            Command::Reapply => {
                let placements = self.apply_breakpoints().await;
                for placement in &placements {
                    self.publish_status(placement);
                }
            }
            Command::Disconnect { mode, reply } => {
                let terminate = match mode {
                    DisconnectMode::Terminate => true,
                    DisconnectMode::Detach => false,
                    DisconnectMode::Unspecified => !self.request.attach,
                };
                let request = self.client.send(
                    "disconnect",
                    json!({"terminateDebuggee": terminate, "restart": false}),
                );
                let _ = tokio::time::timeout(DISCONNECT_DEADLINE, request).await;
                let reason = if terminate {
                    EndReason::Terminated
                } else {
                    EndReason::Detached
                };
                self.end(reason, "a client disconnected the session".into())
                    .await;
                let _ = reply.send(Ok(()));
            }
        }
    }

    fn thread_for(&self, thread: i64) -> i64 {
        if thread != 0 {
            return thread;
        }
        self.pauses
            .values()
            .max_by_key(|p| p.pause.created_at.map(|t| (t.seconds, t.nanos)))
            .map(|p| p.pause.thread_id)
            .unwrap_or(0)
    }

    async fn start_exec(
        &mut self,
        op: ExecOp,
        wait: WaitMode,
        reply: oneshot::Sender<ApiResult<StableState>>,
    ) {
        let started = Instant::now();
        let output_from = self.output_end();
        let result = self.send_exec(op, CommandKind::Unspecified, "api").await;
        match result {
            Err(err) => {
                let _ = reply.send(Err(err));
            }
            Ok(Some(already)) => {
                let _ = reply.send(Ok(already));
            }
            Ok(None) => match wait {
                WaitMode::NoWait => {
                    let _ = reply.send(Ok(StableState {
                        state: self.session.state,
                        waited: false,
                        elapsed_ms: started.elapsed().as_millis() as u64,
                        ..Default::default()
                    }));
                }
                WaitMode::UntilStable(timeout) => {
                    self.inflight = Some(Inflight {
                        reply,
                        deadline: timeout.map(|t| tokio::time::Instant::from_std(started + t)),
                        started,
                        output_from,
                    });
                }
            },
        }
    }

    /// Sends the DAP request of an execution op. `Some(state)` when there is
    /// nothing to wait for (e.g. Pause on a stopped session).
    async fn send_exec(
        &mut self,
        op: ExecOp,
        command: CommandKind,
        by: &str,
    ) -> ApiResult<Option<StableState>> {
        if self.ended {
            return Err(ApiError::new(
                ErrorReason::SessionEnded,
                "the session has ended",
            ));
        }
        match op {
            ExecOp::Continue(thread) => {
                // Some adapters (debugpy) never answer a continue while running.
                if self.pauses.is_empty() {
                    return Err(ApiError::new(
                        ErrorReason::NotStopped,
                        "the program is running; nothing to continue",
                    ));
                }
                let target = self.thread_for(thread);
                let all = thread == 0;
                let result = self
                    .client
                    .request(
                        "continue",
                        json!({"threadId": target, "singleThread": !all}),
                    )
                    .await;
                result.map_err(|e| dap_error(&e))?;
                let resumed = if all { 0 } else { target };
                self.resumed(resumed, command, by);
                Ok(None)
            }
            ExecOp::Step(thread, kind) => {
                let target = self.thread_for(thread);
                if !self.pauses.values().any(|p| p.pause.thread_id == target) {
                    return Err(ApiError::new(
                        ErrorReason::NotStopped,
                        format!("thread {target} is not stopped"),
                    )
                    .with("thread_id", target.to_string()));
                }
                let request = match kind {
                    StepKind::In => "stepIn",
                    StepKind::Out => "stepOut",
                    StepKind::Over | StepKind::Unspecified => "next",
                };
                self.client
                    .request(request, json!({"threadId": target}))
                    .await
                    .map_err(|e| dap_error(&e))?;
                self.resumed(target, command, by);
                Ok(None)
            }
            ExecOp::Pause(thread) => {
                // CONTINUE_ALL ends with the stop this request makes (see
                // on_stopped), so the breakpoints cannot beat it.
                self.mode = Mode::Normal;
                if !self.pauses.is_empty() {
                    return Ok(Some(self.current_state()));
                }
                let target = if thread != 0 {
                    thread
                } else {
                    let threads = self
                        .client
                        .request("threads", json!({}))
                        .await
                        .map_err(|e| dap_error(&e))?;
                    threads["threads"][0]["id"].as_i64().unwrap_or(0)
                };
                self.client
                    .request("pause", json!({"threadId": target}))
                    .await
                    .map_err(|e| dap_error(&e))?;
                self.expect_pause = true;
                Ok(None)
            }
        }
    }

    fn current_state(&self) -> StableState {
        let latest = self
            .pauses
            .values()
            .max_by_key(|p| p.pause.created_at.map(|t| (t.seconds, t.nanos)));
        StableState {
            state: self.session.state,
            waited: true,
            stop_reason: latest.map(|p| p.pause.reason).unwrap_or_default(),
            thread_id: latest.map(|p| p.pause.thread_id).unwrap_or_default(),
            pause: latest.map(|p| p.pause.clone()),
            hit_breakpoint_ids: latest
                .map(|p| p.pause.breakpoint_ids.clone())
                .unwrap_or_default(),
            ..Default::default()
        }
    }

    fn output_end(&self) -> u64 {
        self.shared
            .output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .end()
    }

    fn output_since(&self, offset: u64) -> Vec<stepd_proto::v1::OutputChunk> {
        self.shared
            .output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .read(offset, 64 * 1024, &[])
            .chunks
    }

    /// Answers the in-flight request with `state`.
    fn complete_inflight(&mut self, mut state: StableState) {
        if let Some(inflight) = self.inflight.take() {
            state.output = self.output_since(inflight.output_from);
            state.elapsed_ms = inflight.started.elapsed().as_millis() as u64;
            let _ = inflight.reply.send(Ok(state));
        }
    }

    /// Answers the in-flight request with the current state (timeout or end).
    fn finish_inflight(&mut self, timed_out: bool) {
        let mut state = self.current_state();
        state.timed_out = timed_out;
        if self.ended {
            state.state = SessionState::Ended.into();
            state.end_reason = self.session.end_reason;
            state.exit_code = self.exit_code;
        }
        self.complete_inflight(state);
    }

    async fn start_next(&mut self) {
        while self.inflight.is_none() {
            let Some((op, wait, reply)) = self.queue.pop_front() else {
                return;
            };
            self.start_exec(op, wait, reply).await;
        }
    }

    // ----- the end -------------------------------------------------------------

    async fn end(&mut self, reason: EndReason, detail: String) {
        if self.ended {
            return;
        }
        self.ended = true;
        self.shared.ended.store(true, Ordering::Release);
        if reason == EndReason::AdapterDied || reason == EndReason::ProtocolError {
            // Never leave a debuggee running without its debugger.
            if let Some(pid) = self.debuggee_pid.filter(|_| !self.request.attach) {
                kill(pid);
            }
        }
        self.kill_adapter();
        for key in self.pauses.keys() {
            self.ctx
                .pauses
                .resolve(key, CommandKind::Unspecified, "session-ended");
        }
        self.pauses.clear();
        self.session.state = SessionState::Ended.into();
        self.session.end_reason = reason.into();
        self.session.exit_code = self.exit_code;
        let died = reason == EndReason::AdapterDied;
        if let Some(inflight) = self.inflight.take() {
            let _ = inflight.reply.send(if died {
                Err(ApiError::new(ErrorReason::AdapterDied, detail.clone()))
            } else {
                Ok(StableState {
                    state: SessionState::Ended.into(),
                    waited: true,
                    end_reason: reason.into(),
                    exit_code: self.exit_code,
                    output: self.output_since(inflight.output_from),
                    elapsed_ms: inflight.started.elapsed().as_millis() as u64,
                    ..Default::default()
                })
            });
        }
        for (_, _, reply) in self.queue.drain(..) {
            let _ = reply.send(Err(ApiError::new(
                ErrorReason::SessionEnded,
                "the session ended",
            )));
        }
        tracing::info!(session = %self.shared.id, ?reason, %detail, "session ended");
        self.publish(Payload::SessionEnded(SessionEnded {
            reason: reason.into(),
            detail,
            exit_code: self.exit_code,
        }));
    }
}

/// Waits for the adapter process; never resolves when there is none.
async fn wait_for(child: &mut Option<Child>) -> std::io::Result<std::process::ExitStatus> {
    match child {
        Some(child) => child.wait().await,
        None => std::future::pending().await,
    }
}

fn kill(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: kill(2) has no memory effects; a stale pid only fails.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

fn exception_filters(capabilities: &Value) -> Vec<stepd_proto::v1::ExceptionFilter> {
    capabilities["exceptionBreakpointFilters"]
        .as_array()
        .map(|filters| {
            filters
                .iter()
                .map(|f| stepd_proto::v1::ExceptionFilter {
                    id: f["filter"].as_str().unwrap_or_default().to_owned(),
                    label: f["label"].as_str().unwrap_or_default().to_owned(),
                    default: f["default"].as_bool().unwrap_or(false),
                    supports_condition: f["supportsCondition"].as_bool().unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn start_error(err: DapError) -> ApiError {
    match err {
        DapError::Closed => {
            ApiError::new(ErrorReason::AdapterDied, "the adapter ended while starting")
        }
        other => ApiError::new(ErrorReason::ProtocolError, other.to_string()),
    }
}

fn launch_refused(err: &DapError) -> ApiError {
    ApiError::new(
        ErrorReason::LaunchFailed,
        format!("the adapter refused to start the program: {err}"),
    )
}

/// A failed DAP request as an API error.
pub fn dap_error(err: &DapError) -> ApiError {
    match err {
        DapError::Closed => ApiError::new(ErrorReason::AdapterDied, err.to_string()),
        DapError::Timeout(..) => ApiError::new(ErrorReason::ProtocolError, err.to_string()),
        DapError::Failed(message) => ApiError::new(ErrorReason::AdapterError, message.clone()),
    }
}

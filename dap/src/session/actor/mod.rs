//! The actor of one DAP session. It alone owns the session's state: the
//! adapter process, the execution queue (one Continue/Step/Pause in flight,
//! the rest in order), pending pauses and how the session ends. Everything
//! that changes that state arrives as a message, so no lock is held across an
//! await. `start` has the configuration sequence, `breakpoints` what the
//! adapter is told and what a hit does, `commands` the answers to pauses.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use stepd_proto::v1::{
    BreakpointPlacement, BreakpointStatus, CommandKind, Continued, DisconnectMode, EndReason,
    ErrorReason, Pause, PauseReason, Session, SessionEnded, SessionKind, SessionState,
    SessionUpdated, StableState, StepKind, Thread, ThreadChanged, event::Payload,
};
use tokio::{
    process::Child,
    sync::{mpsc, oneshot},
    time::sleep_until,
};

mod breakpoints;
mod commands;
mod exception;
mod interrupt;
mod judge;
mod locals;
mod placed;
mod start;

use commands::{Mode, Steering, StopHere};

pub(crate) use super::dap_error;
use super::{LaunchOutcome, LaunchRequest, Shared, handles, stop};
use crate::{
    adapters::Adapter,
    client::{DapClient, DapError, Incoming},
    messages, process,
};
use stepd_core::{
    error::{ApiError, ApiResult},
    session::pause::{
        Answer, answer,
        book::{self, PauseBook},
    },
    session::{Command, Context, ExecOp, MAILBOX, Mailbox, WaitMode},
    time::now_timestamp,
};

/// How long a Disconnect waits for the adapter before killing it.
const DISCONNECT_DEADLINE: Duration = Duration::from_secs(5);

/// An execution request waiting for the session to be stable.
struct Inflight {
    reply: oneshot::Sender<ApiResult<StableState>>,
    deadline: Option<tokio::time::Instant>,
    started: Instant,
    output_from: u64,
}

/// What the actor keeps beside each pending pause.
pub struct PauseCtx {
    frame_id: Option<i64>,
    /// Stack depth at the pause (for OUT with force and CONTINUE_SCOPE).
    depth: u32,
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
    incoming: mpsc::Receiver<Incoming>,
    commands: Mailbox,
    /// Where this session asks for the child sessions its adapter starts.
    children: mpsc::UnboundedSender<LaunchRequest>,
    answers: mpsc::Receiver<Answer>,
    session: Session,
    queue: VecDeque<(ExecOp, WaitMode, oneshot::Sender<ApiResult<StableState>>)>,
    inflight: Option<Inflight>,
    /// The stopped threads' pauses.
    book: PauseBook<PauseCtx>,
    /// What the adapter placed of stepd's breakpoints.
    placed: placed::Placed,
    /// What the adapter does itself for each stepd breakpoint (its
    /// condition, its log message); the rest is stepd's at a hit.
    delegated: HashMap<String, breakpoints::Delegated>,
    /// Breakpoints whose condition stepd failed to evaluate (announced once).
    condition_errors: std::collections::HashSet<String>,
    /// The NEXT / IN / OUT sent last: the stop after it is its end.
    step: Option<commands::StepInFlight>,
    /// Stack depth of each thread at its last pause, when the adapter told.
    depths: HashMap<i64, u32>,
    /// Files, and whether function and exception breakpoints, were sent to the
    /// adapter, so a later change can clear what no longer applies.
    applied_files: std::collections::HashSet<String>,
    applied_functions: bool,
    applied_exceptions: bool,
    debuggee_pid: Option<u32>,
    /// The debuggee watched for an end its adapter would not report
    /// (`AdapterKind::misses_debuggee_death_while_stopped`).
    debuggee_watch: Option<process::ExitWatch>,
    exit_code: Option<i32>,
    /// The next stop is the entry stop asked for (lldb reports it as "exception").
    expect_entry: bool,
    /// A Pause request is out; lldb reports the resulting stop as an
    /// "exception" (SIGSTOP), which is normalised to PAUSE_REQUEST.
    expect_pause: bool,
    /// Hits stepd continued itself, which a Pause request takes the next of.
    hot: interrupt::HotHits,
    /// A stepping mode left by the last command (forced out, here, trace).
    mode: Mode,
    /// CONTINUE_ALL: no breakpoint applies until the next Pause request.
    breakpoints_off: bool,
    /// HERE's temporary breakpoint (path, line).
    temp_breakpoint: Option<(String, u32)>,
    /// A QUIT was answered: the end that follows is END_REASON_QUIT.
    quitting: bool,
    /// The adapter's id of the last exception stop's exception.
    exception_id: String,
    /// The signal the last exception stop was ("SIGSEGV"), if it was one.
    crash_signal: Option<String>,
    /// The signal that ended the debuggee.
    end_signal: Option<String>,
    ended: bool,
    /// The handles the last stop's locals came from, and the requests sent
    /// ahead for them at this stop (`locals`).
    last_top: Option<locals::TopHandles>,
    guess: Option<locals::Guess>,
    /// The session's span, from Launch or Attach to the end.
    span: stepd_core::trace::Span,
}

/// A started adapter: its process, if stepd started one, and what it sends.
pub struct Connection {
    /// The adapter process; none for a child session on a shared adapter.
    pub child: Option<Child>,
    /// Events and reverse requests from the adapter.
    pub incoming: mpsc::Receiver<Incoming>,
}

impl Actor {
    /// A new actor for a started adapter.
    pub fn new(
        ctx: Context,
        shared: Arc<Shared>,
        adapter: Adapter,
        request: LaunchRequest,
        connection: Connection,
        commands: Mailbox,
        children: mpsc::UnboundedSender<LaunchRequest>,
    ) -> Self {
        let Connection { child, incoming } = connection;
        let (mut book, answers) = PauseBook::new(
            shared.id.clone(),
            ctx.pauses.clone(),
            ctx.bus.clone(),
            ctx.redactor.clone(),
        );
        let client = shared
            .client
            .get()
            .cloned()
            .expect("the client is set before the actor starts");
        // A child of the Launch or Attach call, whose span is current here
        // (a child session started for an adapter is a root).
        let span = stepd_core::trace::Span::start(
            "session",
            &stepd_core::trace::Span::current_rpc(),
            || {
                use opentelemetry::KeyValue;
                vec![
                    KeyValue::new("stepd.session.id", shared.id.clone()),
                    KeyValue::new(
                        "stepd.session.kind",
                        stepd_proto::short_name(SessionKind::Dap.as_str_name()),
                    ),
                    KeyValue::new("stepd.adapter", adapter.name().to_owned()),
                    KeyValue::new("stepd.session.attach", request.attach),
                    KeyValue::new("stepd.program", request.program.clone()),
                    KeyValue::new("stepd.session.parent_id", request.parent_session_id.clone()),
                    KeyValue::new("stepd.session.started_by", request.started_by.clone()),
                ]
            },
        );
        book.set_trace_parent(&span);
        client.set_session_span(&span);
        let (trace_id, span_id) = span.ids();
        let session = Session {
            id: shared.id.clone(),
            trace_id,
            span_id,
            kind: SessionKind::Dap.into(),
            state: SessionState::Starting.into(),
            name: if request.name.is_empty() {
                std::path::Path::new(&request.program)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| adapter.name().to_owned())
            } else {
                request.name.clone()
            },
            adapter: adapter.name().to_owned(),
            // Kept masked, as every copy that leaves the daemon must be;
            // breakpoints match the request's own labels.
            labels: ctx.redactor.labels_of(&request.labels),
            program: request.program.clone(),
            adapter_pid: child
                .as_ref()
                .and_then(Child::id)
                .map(i64::from)
                .unwrap_or(0),
            parent_session_id: request.parent_session_id.clone(),
            // Attached by pid, the debuggee is known before any adapter says so.
            pid: if request.attach {
                request.pid.max(0)
            } else {
                0
            },
            started_at: Some(now_timestamp()),
            original_id: request.request_id.clone(),
            started_by: request.started_by.clone(),
            replica_id: ctx.bus.instance_id().to_owned(),
            ..Default::default()
        };
        Self {
            expect_entry: request.stop_on_entry,
            expect_pause: false,
            hot: interrupt::HotHits::default(),
            mode: Mode::Normal,
            breakpoints_off: false,
            temp_breakpoint: None,
            quitting: false,
            exception_id: String::new(),
            crash_signal: None,
            end_signal: None,
            last_top: None,
            guess: None,
            span,
            ctx,
            shared,
            client,
            adapter,
            request,
            child,
            incoming,
            commands,
            children,
            answers,
            session,
            queue: VecDeque::new(),
            inflight: None,
            book,
            placed: placed::Placed::default(),
            delegated: HashMap::new(),
            condition_errors: std::collections::HashSet::new(),
            step: None,
            depths: HashMap::new(),
            applied_files: std::collections::HashSet::new(),
            applied_functions: false,
            applied_exceptions: false,
            debuggee_pid: None,
            debuggee_watch: None,
            exit_code: None,
            ended: false,
        }
    }

    /// The `variables` answer for the top frame's first inexpensive scope at
    /// this stop (see `locals` for the requests sent ahead).
    async fn top_locals(
        &mut self,
        thread_id: i64,
        frame_id: Option<i64>,
    ) -> Option<messages::VariablesResponse> {
        let guess = self.guess.take();
        let fetched = locals::fetch(&self.client, thread_id, frame_id?, guess).await;
        let (variables, handles) = self.reported(fetched)??;
        self.last_top = Some(handles);
        Some(variables)
    }

    /// An answer the session can do without: a malformed one is reported as
    /// the adapter's fault, a refusal or a timeout just leaves it out.
    pub(super) fn reported<T>(&self, answer: Result<T, DapError>) -> Option<T> {
        match answer {
            Ok(body) => Some(body),
            Err(DapError::Malformed(problem)) => {
                self.adapter_fault(&problem);
                None
            }
            Err(_) => None,
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

    /// Kills the adapter with everything it started, the debuggee first:
    /// for a session that failed to start or whose Launch was abandoned, and
    /// one whose adapter died or broke the protocol. Never for an attached
    /// program, which stepd did not start.
    fn kill_everything(&mut self) {
        if self.request.attach {
            self.kill_adapter();
            return;
        }
        if let Some(pid) = self.debuggee_pid {
            process::kill(pid);
        }
        if let Some(pid) = self.child.as_ref().and_then(Child::id) {
            process::kill_tree(pid);
        }
        self.kill_adapter();
    }

    /// The debuggee's pid, from the adapter; watched where its adapter may
    /// not report its end.
    fn learn_debuggee(&mut self, pid: u32) {
        self.debuggee_pid = Some(pid);
        if self.adapter.kind.misses_debuggee_death_while_stopped()
            && self.debuggee_watch.as_ref().map(process::ExitWatch::pid) != Some(pid)
        {
            self.debuggee_watch = Some(process::ExitWatch::new(pid));
        }
    }

    /// The watched debuggee ended while the session was stopped, and its
    /// adapter said nothing (dlv waits for the debuggee only while it runs
    /// it, so it would hold the zombie and the session "stopped" forever).
    /// How it ended is read from the zombie, then the session ends, which
    /// kills the adapter. dlv cannot be asked to let go of the zombie (a
    /// `disconnect` is refused: "process must be stopped in order to kill
    /// it"), so it goes with dlv: re-parented to init, which reaps it.
    async fn on_debuggee_gone(&mut self) {
        let Some(pid) = self.debuggee_watch.take().map(|w| w.pid()) else {
            return;
        };
        match process::zombie_status(pid) {
            Some(process::Ended::Signaled(number)) => {
                self.end_signal = Some(
                    exception::signal_name(number)
                        .map_or_else(|| format!("signal {number}"), str::to_owned),
                );
                self.exit_code = None;
            }
            Some(process::Ended::Exited(code)) => self.exit_code = Some(code),
            None => {}
        }
        tracing::info!(session = %self.shared.id, pid, "the debuggee ended while stopped");
        let reason = self.exit_reason().unwrap_or(EndReason::Terminated);
        self.end(
            reason,
            format!("the program (pid {pid}) ended while stopped; the adapter did not report it"),
        )
        .await;
    }

    fn publish(&self, mut payload: Payload) {
        self.ctx.redactor.payload(&mut payload);
        self.ctx.bus.publish(&self.shared.id, payload);
    }

    /// Configures the session, answers `ready`, then serves until it ends.
    /// A Launch whose caller goes away (the call cancelled, its deadline
    /// passed) is abandoned: the adapter and the debuggee are killed then,
    /// not left running where no client can see them.
    pub async fn run(mut self, mut ready: oneshot::Sender<ApiResult<LaunchOutcome>>) {
        let outcome = tokio::select! {
            outcome = self.configure() => Some(outcome),
            () = ready.closed() => None,
        };
        let Some(outcome) = outcome else {
            tracing::info!(session = %self.shared.id, "the Launch call went away; its adapter is killed");
            self.shared.ended.store(true, Ordering::Release);
            self.kill_everything();
            return;
        };
        let failed = outcome.is_err();
        if let Err(err) = &outcome {
            tracing::info!(session = %self.shared.id, %err, "session failed to start");
        }
        if failed {
            let _ = ready.send(outcome);
            self.shared.ended.store(true, Ordering::Release);
            self.kill_everything();
            return;
        }
        if ready.send(outcome).is_err() {
            // Configured just as its caller went away: never registered, so
            // no client could reach it.
            self.kill_everything();
            self.end(
                EndReason::Terminated,
                "the Launch call went away before it was answered".into(),
            )
            .await;
            return;
        }
        while !self.ended {
            let deadline = self.inflight.as_ref().and_then(|i| i.deadline);
            tokio::select! {
                Some(message) = self.incoming.recv() => self.on_incoming(message).await,
                Some(command) = self.commands.recv() => self.on_command(command).await,
                Some(answer) = self.answers.recv() => answer::answer(&mut self, answer).await,
                () = sleep_until(deadline.unwrap_or_else(tokio::time::Instant::now)), if deadline.is_some() => {
                    self.finish_inflight(true);
                    self.start_next().await;
                }
                () = sleep_until(self.hot.deadline().unwrap_or_else(tokio::time::Instant::now)), if self.hot.deadline().is_some() => {
                    self.pause_waited_too_long().await;
                }
                () = process::watch_ended(self.debuggee_watch.as_ref()), if !self.book.is_empty() => {
                    self.on_debuggee_gone().await;
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

    // ----- adapter messages ----------------------------------------------

    async fn on_incoming(&mut self, message: Incoming) {
        match message {
            Incoming::Event { event, body } => self.on_event(&event, body).await,
            Incoming::Request {
                seq,
                command,
                arguments,
            } => self.on_reverse_request(seq, &command, arguments),
            Incoming::OutputDropped(count) => {
                // Never silent: the output shows where it lost lines.
                let note = format!(
                    "[stepd: {count} output events of the adapter were dropped; the session fell \
                     behind]\n"
                );
                let chunk = self
                    .shared
                    .output
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push("stepd", &note);
                self.publish(Payload::Output(stepd_proto::v1::Output {
                    chunk: Some(chunk),
                }));
            }
            Incoming::Closed(None) => {
                if !self.ended {
                    let reason = self.exit_reason().unwrap_or(EndReason::AdapterDied);
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
        tracing::debug!(
            session = %self.shared.id,
            command,
            arguments = %crate::client::loggable(&json!({"arguments": arguments}))["arguments"],
            "reverse request"
        );
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
        let Some(children) = Some(self.children.clone()).filter(|_| port > 0) else {
            self.client.respond(
                seq,
                command,
                Err("stepd can only follow child sessions it can connect to".into()),
            );
            return;
        };
        let request = LaunchRequest {
            attach: arguments["request"].as_str() != Some("launch"),
            adapter: self.adapter.name().to_owned(),
            labels: self.request.labels.clone(),
            name: configuration["name"].as_str().unwrap_or("child").to_owned(),
            program: configuration["program"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            parent_session_id: self.shared.id.clone(),
            started_by: self.request.started_by.clone(),
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
                let Some(out) = self.body::<messages::OutputEvent>("output event", body) else {
                    return;
                };
                if out.category == "telemetry" {
                    return;
                }
                let chunk = self
                    .shared
                    .output
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(&out.category, &out.output);
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
                let Some(c) = self.body::<messages::ContinuedEvent>("continued event", body) else {
                    return;
                };
                let thread = if c.all_threads_continued {
                    0
                } else {
                    c.thread_id
                };
                self.resumed(thread, CommandKind::Unspecified, "adapter");
            }
            "process" => {
                if let Some(process) = self.body::<messages::ProcessEvent>("process event", body) {
                    self.on_process(&process);
                }
            }
            "exited" => {
                let Some(exited) = self.body::<messages::ExitedEvent>("exited event", body) else {
                    return;
                };
                self.exit_code = i32::try_from(exited.exit_code).ok();
                self.end_signal = self.signal_of_exit();
                if self.end_signal.is_some() {
                    // The number lldb gives is the signal's, not an exit code.
                    self.exit_code = None;
                }
            }
            "terminated" => {
                let reason = if self.quitting {
                    EndReason::Quit
                } else {
                    self.exit_reason().unwrap_or(EndReason::Terminated)
                };
                self.end(reason, "the program ended".into()).await;
            }
            "thread" => {
                let Some(thread) = self.body::<messages::ThreadEvent>("thread event", body) else {
                    return;
                };
                self.publish(Payload::ThreadChanged(ThreadChanged {
                    thread: Some(Thread {
                        id: thread.thread_id,
                        ..Default::default()
                    }),
                    reason: thread.reason,
                }));
            }
            "breakpoint" => {
                let Some(changed) =
                    self.body::<messages::BreakpointEvent>("breakpoint event", body)
                else {
                    return;
                };
                let placed = changed.breakpoint;
                let ids = placed
                    .id
                    .map(|id| self.placed.of(id).to_vec())
                    .unwrap_or_default();
                for bp_id in ids {
                    let status = BreakpointStatus {
                        session_id: self.shared.id.clone(),
                        verified: placed.verified,
                        actual_line: placed.line.unwrap_or(0),
                        message: placed.message.clone().unwrap_or_default(),
                        breakpoint_id: bp_id.clone(),
                    };
                    self.publish_status(&BreakpointPlacement {
                        breakpoint_id: bp_id,
                        requested_line: 0,
                        status: Some(status),
                    });
                }
            }
            _ => {}
        }
    }

    /// A typed event body, or None after telling every client that the
    /// adapter sent it malformed (it is not read as empty values).
    fn body<T: serde::de::DeserializeOwned>(&self, what: &str, body: Value) -> Option<T> {
        match messages::parse(what, body) {
            Ok(parsed) => Some(parsed),
            Err(problem) => {
                self.adapter_fault(&problem);
                None
            }
        }
    }

    /// Tells clients the adapter broke the protocol in a way stepd survives.
    pub(super) fn adapter_fault(&self, problem: &str) {
        tracing::warn!(session = %self.shared.id, problem, "adapter fault");
        self.publish(Payload::Notification(stepd_proto::v1::Notification {
            level: stepd_proto::v1::NotificationLevel::Warning.into(),
            message: format!("{}: {problem}", self.adapter.name()),
        }));
    }

    /// The adapter's `process` event names the debuggee. debugpy sends it
    /// only after session_started, so a pid learnt then is published as a
    /// session_updated; the same pid again publishes nothing.
    pub(super) fn on_process(&mut self, process: &messages::ProcessEvent) {
        let Some(pid) = process
            .system_process_id
            .and_then(|p| u32::try_from(p).ok())
        else {
            return;
        };
        self.learn_debuggee(pid);
        if self.session.pid == i64::from(pid) {
            return;
        }
        self.session.pid = i64::from(pid);
        if self.session.state != SessionState::Starting as i32 {
            self.publish(Payload::SessionUpdated(Box::new(SessionUpdated {
                session: Some(self.session.clone()),
            })));
        }
    }

    /// How the debuggee ended, once the adapter said: by a signal or exited.
    fn exit_reason(&self) -> Option<EndReason> {
        if self.end_signal.is_some() {
            Some(EndReason::Signaled)
        } else {
            self.exit_code.map(|_| EndReason::Exited)
        }
    }

    /// The signal an exit was. lldb reports a debuggee killed by a signal as
    /// exited with the signal's number as its code, right after the
    /// exception stop that showed the signal; a plain exit code is no signal.
    fn signal_of_exit(&self) -> Option<String> {
        let signal = self.crash_signal.as_ref()?;
        (exception::signal_number(signal) == self.exit_code).then(|| signal.clone())
    }

    /// Records a stop: a new epoch, the pause with its location and locals,
    /// the `stopped` event. Returns the stable state it makes, or None when
    /// the stop was not shown (a breakpoint that does not stop, a step going
    /// on through one, a mode's silent step).
    async fn on_stopped(&mut self, body: &Value) -> Option<StableState> {
        // The program did stop, whatever the adapter got wrong in saying so:
        // the stop is shown, and the fault said.
        let event = match messages::parse::<messages::StoppedEvent>("stopped event", body.clone()) {
            Ok(event) => event,
            Err(problem) => {
                self.adapter_fault(&problem);
                messages::StoppedEvent::default()
            }
        };
        let raw_reason = event.reason.clone().unwrap_or_else(|| {
            self.adapter_fault("the adapter sent a stopped event without a reason");
            String::new()
        });
        // debugpy answers a Pause request that reached it while it was
        // already stopped with a second stop: nothing new happened.
        if raw_reason == "pause"
            && event
                .thread_id
                .is_some_and(|t| self.book.entries().any(|e| e.pause.thread_id == t))
        {
            return None;
        }
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
        let mut reason = stop::reason(&raw_reason, std::mem::take(&mut self.expect_entry));
        let mut thread_id = event.thread_id.unwrap_or(0);
        if thread_id == 0 {
            let threads = self.client.call("threads", json!({})).await;
            if let Some(first) = self
                .reported::<messages::ThreadsResponse>(threads)
                .and_then(|t| t.threads.first().map(|t| t.id))
            {
                thread_id = first;
            }
        }
        let stack = self.client.send(
            "stackTrace",
            json!({"threadId": thread_id, "startFrame": 0, "levels": 1}),
        );
        let last = self.last_top.take();
        self.guess = if self.adapter.kind.quiet_on_stale_handles() {
            locals::Guess::send(&self.client, last, thread_id)
        } else {
            None
        };
        let stack = self.client.answer_as("stackTrace", stack).await;
        let stack: Option<messages::StackTraceResponse> = self.reported(stack);
        let top = stack.as_ref().and_then(|s| s.stack_frames.first());
        let frame_id = top.map(|f| f.id);
        let location = top.map(stop::location);
        let top_name = top.map(|f| f.name.clone()).unwrap_or_default();
        let top_hint = top
            .and_then(|f| f.presentation_hint.clone())
            .unwrap_or_default();
        let known_depth = stack
            .as_ref()
            .and_then(|s| s.total_frames)
            .and_then(|d| u32::try_from(d).ok());
        let depth = known_depth.unwrap_or(1);
        // A step that lands on a breakpoint's line executes it: lldb reports
        // that as a breakpoint stop, debugpy as the step's end; both count.
        // Not when back on the starting line after stepd stepped out of a
        // frame for a NEXT: that line's breakpoints were met already.
        let landed = reason == PauseReason::Step && self.step.is_some_and(|s| !s.returning);
        let breakpoint_ids = self.placed.named_by(
            &event.hit_breakpoint_ids,
            location.as_ref().map(|at| (at.path.as_str(), at.line)),
            reason == PauseReason::Breakpoint || landed,
        );
        // The breakpoints' verdicts come first: LOG and SNAPSHOT are carried
        // out whatever the stop turns out to be, and one that stops ends any
        // step, trace or run-to in flight. Modes that skip breakpoints (OUT
        // with force, HERE with force) neither count nor carry them out.
        let stops = if (reason == PauseReason::Breakpoint || landed)
            && !breakpoint_ids.is_empty()
            && self.mode.honours_breakpoints()
        {
            // After a step the adapter may report a breakpoint whose line the
            // step ended on without evaluating its condition: stepd does.
            let by_adapter = self.step.is_none();
            self.act_on_hit(&breakpoint_ids, thread_id, frame_id, by_adapter)
                .await
        } else {
            Vec::new()
        };
        let step = self.step.take();
        let judged = judge::judge(judge::StopFacts {
            reason,
            named: breakpoint_ids,
            stops,
            // A hit that raced its breakpoints' removal (an expiry, a
            // change) applies nowhere.
            only_retired_named: self.placed.only_retired(&event.hit_breakpoint_ids),
            expect_pause: self.expect_pause,
        });
        let mut breakpoint_ids = match judged {
            judge::Judged::Breakpoint(stops) => {
                self.expect_pause = false;
                self.end_mode().await;
                reason = PauseReason::Breakpoint;
                stops
            }
            judge::Judged::AnswersPause => {
                self.expect_pause = false;
                self.end_mode().await;
                reason = PauseReason::PauseRequest;
                Vec::new()
            }
            judge::Judged::Steer {
                reason: shown,
                breakpoints,
                silent,
            } => {
                let here = StopHere {
                    reason: shown,
                    thread_id,
                    depth: known_depth,
                    silent,
                };
                match self.steer(&here, step, location.as_ref(), frame_id).await {
                    Steering::Resumed => return None,
                    Steering::Pause(Some(steered)) => {
                        reason = steered;
                        if steered == PauseReason::Breakpoint {
                            breakpoints
                        } else {
                            Vec::new()
                        }
                    }
                    Steering::Normal if silent => {
                        // Nothing to pause for: go on without a word.
                        self.resume_silently("continue", thread_id).await;
                        return None;
                    }
                    Steering::Pause(None) | Steering::Normal => breakpoints,
                }
            }
        };
        // Whatever the pause shown now, it answers a Pause request that is out.
        self.expect_pause = false;
        self.hot.stopped();
        if let Some(d) = known_depth {
            self.depths.insert(thread_id, d);
        }
        let top_locals = self.top_locals(thread_id, frame_id).await;
        let locals_available = top_locals.is_some();
        let locals = top_locals.map(|v| stop::locals(&v)).unwrap_or_default();
        let caught_msg = if reason == PauseReason::Exception {
            self.exception_message(thread_id, &event).await
        } else {
            String::new()
        };
        if reason == PauseReason::Exception && breakpoint_ids.is_empty() {
            breakpoint_ids = self.exception_breakpoint_ids().await;
        }
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
        let key = book::new_key();
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
        self.book.resolve_where(
            |e| e.pause.thread_id == thread_id,
            CommandKind::Unspecified,
            "stopped again",
        );
        self.shared
            .stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(thread_id, key.clone());
        *self
            .shared
            .latest_frame
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = frame_id.map(|f| (thread_id, f));
        self.session.state = SessionState::Stopped.into();
        self.book.open(
            pause,
            PauseCtx { frame_id, depth },
            event.all_threads_stopped,
        );
        // The reply carries the book's copy: masked, with its trace ids.
        let pause = self.book.kept(&key);
        Some(StableState {
            state: SessionState::Stopped.into(),
            waited: true,
            timed_out: false,
            stop_reason: reason.into(),
            thread_id,
            top_frame: frame_id.map(|id| stepd_proto::v1::Frame {
                id: handles::make(self.shared.epoch(), id),
                name: top_name,
                location: pause.as_ref().and_then(|p| p.location.clone()),
                presentation_hint: top_hint,
            }),
            hit_breakpoint_ids: breakpoint_ids,
            pause,
            ..Default::default()
        })
    }

    /// The program moves on: pauses of `thread` (0 = all) resolve, handles expire.
    fn resumed(&mut self, thread: i64, command: CommandKind, by: &str) {
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
        let resolved =
            self.book
                .resolve_where(|e| thread == 0 || e.pause.thread_id == thread, command, by);
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
        if self.book.is_empty() {
            self.session.state = SessionState::Running.into();
        }
        // One `continued` per resume: the adapter's own event after stepd's
        // request, and resumes after stops never shown, move no pause.
        if !resolved.is_empty() {
            self.publish(Payload::Continued(Continued { thread_id: thread }));
        }
    }

    // ----- execution -------------------------------------------------------

    async fn on_command(&mut self, command: Command) {
        match command {
            Command::Exec { op, wait, reply } => {
                if self.inflight.is_some() && self.queue.len() >= MAILBOX {
                    let _ = reply.send(Err(ApiError::new(
                        ErrorReason::LimitExceeded,
                        format!("{MAILBOX} execution requests are already waiting in this session"),
                    )
                    .with("limit", "session_queue")));
                } else if self.inflight.is_some() {
                    self.queue.push_back((op, wait, reply));
                } else {
                    self.start_exec(op, wait, reply).await;
                }
            }
            // A DAP session's program does not reconnect.
            Command::TakenOver { .. } => {}
            Command::Shutdown { reply } => {
                self.disconnect(DisconnectMode::Unspecified, reply).await
            }
            Command::Reapply => {
                let placements = self.apply_breakpoints().await;
                for placement in &placements {
                    self.publish_status(placement);
                }
            }
            Command::Disconnect { mode, reply } => self.disconnect(mode, reply).await,
        }
    }

    /// Ends the session at a client's Disconnect (or the daemon's shutdown,
    /// as one without a mode): a launched program is terminated, an
    /// attached one let go, unless the mode says otherwise.
    async fn disconnect(&mut self, mode: DisconnectMode, reply: oneshot::Sender<ApiResult<()>>) {
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

    fn thread_for(&self, thread: i64) -> i64 {
        if thread != 0 {
            return thread;
        }
        self.book.latest().map_or(0, |e| e.pause.thread_id)
    }

    async fn start_exec(
        &mut self,
        op: ExecOp,
        wait: WaitMode,
        reply: oneshot::Sender<ApiResult<StableState>>,
    ) {
        let started = Instant::now();
        let output_from = self.output_end();
        let command = op.command_kind();
        let result = self.send_exec(op, command, "api").await;
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
                if self.book.is_empty() {
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
                // A continue ends any step the adapter still had.
                self.step = None;
                let resumed = if all { 0 } else { target };
                self.resumed(resumed, command, by);
                Ok(None)
            }
            ExecOp::Step(thread, kind) => {
                let target = self.thread_for(thread);
                if !self.book.entries().any(|e| e.pause.thread_id == target) {
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
                self.step = Some(commands::StepInFlight {
                    kind,
                    thread: target,
                    depth: self.depths.get(&target).copied(),
                    returning: false,
                });
                self.resumed(target, command, by);
                Ok(None)
            }
            ExecOp::Pause(thread) => {
                // CONTINUE_ALL ends with the stop this request makes (see
                // on_stopped), so the breakpoints cannot beat it.
                self.mode = Mode::Normal;
                if !self.book.is_empty() {
                    return Ok(Some(self.current_state()));
                }
                self.request_pause(thread).await?;
                Ok(None)
            }
        }
    }

    fn current_state(&self) -> StableState {
        let latest = self.book.latest().map(|e| &e.pause);
        StableState {
            state: self.session.state,
            waited: true,
            stop_reason: latest.map(|p| p.reason).unwrap_or_default(),
            thread_id: latest.map(|p| p.thread_id).unwrap_or_default(),
            pause: latest.cloned(),
            hit_breakpoint_ids: latest.map(|p| p.breakpoint_ids.clone()).unwrap_or_default(),
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
            state.signal.clone_from(&self.session.signal);
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
            self.kill_everything();
        }
        self.kill_adapter();
        self.book
            .resolve_where(|_| true, CommandKind::Unspecified, "session-ended");
        self.session.state = SessionState::Ended.into();
        self.session.end_reason = reason.into();
        self.session.exit_code = self.exit_code;
        self.session.signal = self.end_signal.clone().unwrap_or_default();
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
                    signal: self.session.signal.clone(),
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
        self.span.end(|| {
            use opentelemetry::KeyValue;
            let mut attributes = vec![
                KeyValue::new(
                    "stepd.session.end_reason",
                    stepd_proto::short_name(reason.as_str_name()),
                ),
                KeyValue::new("stepd.session.end_detail", detail.clone()),
            ];
            if let Some(code) = self.exit_code {
                attributes.push(KeyValue::new("process.exit.code", i64::from(code)));
            }
            attributes
        });
        self.publish(Payload::SessionEnded(SessionEnded {
            reason: reason.into(),
            detail,
            exit_code: self.exit_code,
            signal: self.session.signal.clone(),
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

//! The actor of one DAP session. It alone owns the session's state: the
//! adapter process, the execution queue (one Continue/Step/Pause in flight,
//! the rest in order), pending pauses and how the session ends. Everything
//! that changes that state arrives as a message, so no lock is held across an
//! await. `start` has the configuration sequence, `adapter_events` what the
//! adapter sends of itself, `stopped` what a stop becomes, `execution` the
//! execution requests, `ending` how the session ends, `breakpoints` what the
//! adapter is told and what a hit does, `commands` the answers to pauses.

use std::{
    collections::HashMap,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use stepd_proto::v1::{EndReason, Session, SessionKind, SessionState, StableState, event::Payload};
use tokio::{
    process::Child,
    sync::{mpsc, oneshot},
    time::sleep_until,
};

mod adapter_events;
mod breakpoints;
mod commands;
mod ending;
mod exception;
mod exec_queue;
mod execution;
mod interrupt;
mod judge;
mod lifecycle;
mod locals;
mod placed;
mod start;
mod steering;
mod stopped;

use steering::Mode;

pub(crate) use super::dap_error;
use super::{LaunchOutcome, LaunchRequest, Shared};
use crate::{
    adapters::Adapter,
    client::{DapClient, DapError, Incoming},
    messages, process,
};
use stepd_core::{
    error::ApiResult,
    session::pause::{Answer, answer, book::PauseBook},
    session::{Context, MAILBOX, Mailbox},
    time::now_timestamp,
};

/// How long a Disconnect waits for the adapter before killing it.
const DISCONNECT_DEADLINE: Duration = Duration::from_secs(5);

/// How an execution request is answered.
type Reply = oneshot::Sender<ApiResult<StableState>>;

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
    /// Clients' execution requests, and the step and Pause request out at
    /// the adapter; a Pause request's stop may come as lldb's "exception"
    /// (SIGSTOP), which is normalised to PAUSE_REQUEST.
    exec: exec_queue::ExecQueue<Reply>,
    /// The stopped threads' pauses.
    book: PauseBook<PauseCtx>,
    /// What the adapter placed of stepd's breakpoints.
    placed: placed::Placed,
    /// What the adapter does itself for each stepd breakpoint (its
    /// condition, its log message); the rest is stepd's at a hit.
    delegated: HashMap<String, breakpoints::Delegated>,
    /// Breakpoints whose condition stepd failed to evaluate (announced once).
    condition_errors: std::collections::HashSet<String>,
    /// Stack depth of each thread at its last pause, when the adapter told.
    depths: HashMap<i64, u32>,
    /// Files, and whether function and exception breakpoints, were sent to the
    /// adapter, so a later change can clear what no longer applies.
    applied_files: std::collections::HashSet<String>,
    applied_functions: bool,
    applied_exceptions: bool,
    /// The exception breakpoints placed, with the filters of each the
    /// adapter offers: an exception stop is judged by their verdicts.
    exception_breakpoints: Vec<(String, Vec<String>)>,
    /// Data breakpoints were sent to the adapter (to clear them when none
    /// applies any more).
    applied_data: bool,
    /// Data breakpoints wait for a stop to be placed in (`place_data`).
    data_pending: bool,
    debuggee_pid: Option<u32>,
    /// The debuggee watched for an end its adapter would not report
    /// (`AdapterKind::misses_debuggee_death_while_stopped`).
    debuggee_watch: Option<process::ExitWatch>,
    /// Hits stepd continued itself, which a Pause request takes the next of.
    hot: interrupt::HotHits,
    /// A stepping mode left by the last command (forced out, here, trace).
    mode: Mode,
    /// CONTINUE_ALL: no breakpoint applies until the next Pause request.
    breakpoints_off: bool,
    /// HERE's temporary breakpoint (path, line).
    temp_breakpoint: Option<(String, u32)>,
    /// The adapter's id of the last exception stop's exception.
    exception_id: String,
    /// Starting, running or stopped, ended, and how the debuggee ended.
    life: lifecycle::Lifecycle,
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
        let span = session_span(&shared.id, &adapter, &request);
        book.set_trace_parent(&span);
        client.set_session_span(&span);
        let mut session = session_record(&ctx, &shared.id, &adapter, &request);
        (session.trace_id, session.span_id) = span.ids();
        session.adapter_pid = child
            .as_ref()
            .and_then(Child::id)
            .map(i64::from)
            .unwrap_or(0);
        Self {
            life: lifecycle::Lifecycle::new(request.stop_on_entry),
            hot: interrupt::HotHits::default(),
            mode: Mode::Normal,
            breakpoints_off: false,
            temp_breakpoint: None,
            exception_id: String::new(),
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
            exec: exec_queue::ExecQueue::new(MAILBOX),
            book,
            placed: placed::Placed::default(),
            delegated: HashMap::new(),
            condition_errors: std::collections::HashSet::new(),
            depths: HashMap::new(),
            applied_files: std::collections::HashSet::new(),
            applied_functions: false,
            applied_exceptions: false,
            exception_breakpoints: Vec::new(),
            applied_data: false,
            data_pending: false,
            debuggee_pid: None,
            debuggee_watch: None,
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
        while !self.life.is_ended() {
            let deadline = self.exec.deadline();
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
                    if !self.life.is_ended() {
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
}

/// The session's span: a child of the Launch or Attach call, whose span is
/// current when the actor is made (a child session started for an adapter
/// is a root).
fn session_span(id: &str, adapter: &Adapter, request: &LaunchRequest) -> stepd_core::trace::Span {
    stepd_core::trace::Span::start("session", &stepd_core::trace::Span::current_rpc(), || {
        use opentelemetry::KeyValue;
        vec![
            KeyValue::new("stepd.session.id", id.to_owned()),
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
    })
}

/// The session as clients see it when it starts (its span's ids and the
/// adapter's pid are the actor's to add).
fn session_record(ctx: &Context, id: &str, adapter: &Adapter, request: &LaunchRequest) -> Session {
    Session {
        id: id.to_owned(),
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
    }
}

/// Waits for the adapter process; never resolves when there is none.
async fn wait_for(child: &mut Option<Child>) -> std::io::Result<std::process::ExitStatus> {
    match child {
        Some(child) => child.wait().await,
        None => std::future::pending().await,
    }
}

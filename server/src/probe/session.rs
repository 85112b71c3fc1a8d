//! One probe session: the actor behind a `ProbeService.Connect` stream. It owns
//! the probe's arming, its held points (each a pause), evaluations in flight
//! and how the session ends. The probe decides locally which points hold; the
//! actor only tells it how (`Armed`) and answers the holds (`Resume`).

use std::{
    collections::HashMap,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use stepd_proto::v1::{
    Armed, ArmedMatcher, CommandKind, ConnectRequest, ConnectResponse, Continued, DisconnectMode,
    EndReason, Enlighten, ErrorReason, Eval, EvalError, Hello, Hit, Notification,
    NotificationLevel, Observed, Pause, PauseReason, ProbeMode, Resume, ResumeDecision,
    SendDebugInputResponse, Session, SessionEnded, SessionKind, SessionStarted, SessionState,
    StableState, Stack, Stopped, Trace, breakpoint_spec::Location, connect_request::Message as In,
    connect_response::Message as Out, debug_command::Command as Cmd, event::Payload,
    inject_command::Replacement,
};
use tokio::{
    sync::{mpsc, oneshot},
    time::{Instant, sleep_until},
};
use tokio_stream::{Stream, StreamExt};
use tonic::Status;

use super::{condition, value};
use crate::inspector::PauseTarget;
use crate::{
    breakpoints::{Action, Known, Verdict, verdict},
    error::{ApiError, ApiResult},
    pause::Answer,
    session::log_message,
    session::{Command, Context, ExecOp, Shared, WaitMode, stop},
    time::{now_timestamp, now_us, us_from_timestamp},
};

/// How long an EVAL may wait for the probe.
const EVAL_DEADLINE: Duration = Duration::from_secs(30);

/// How the probe should treat its points, as the server sees it.
#[derive(Debug, Clone, PartialEq)]
enum Mode {
    Breakpoints,
    Step,
    Out { depth: u32, force: bool },
    Quiet { depth: u32 },
    Here { coor: Vec<i32>, force: bool },
    Trace,
}

/// A point held by the probe.
struct Held {
    hit: Hit,
    pause: Pause,
    deadline: Instant,
    /// Set while the pause asks for an expression.
    awaiting_expression: bool,
    /// The commands offered before an EXPRESSION prompt replaced them.
    offered: Vec<i32>,
}

/// An EVAL sent to the probe, waiting for its result.
struct PendingEval {
    key: String,
    reply: oneshot::Sender<ApiResult<SendDebugInputResponse>>,
    deadline: Instant,
}

/// A Pause request waiting for the next hold.
struct Waiter {
    reply: oneshot::Sender<ApiResult<StableState>>,
    deadline: Option<Instant>,
    started: std::time::Instant,
}

type Outbox = mpsc::Sender<Result<ConnectResponse, Status>>;

/// The actor of one probe session.
pub struct ProbeSession {
    ctx: Context,
    shared: Arc<Shared>,
    hello: Hello,
    session: Session,
    out: Outbox,
    commands: mpsc::UnboundedReceiver<Command>,
    answers: mpsc::UnboundedReceiver<Answer>,
    answers_tx: mpsc::UnboundedSender<Answer>,
    mode: Mode,
    held: HashMap<String, Held>,
    evals: HashMap<String, PendingEval>,
    waiters: Vec<Waiter>,
    hold_limit: Duration,
    dropped_reports: u64,
    ended: bool,
    /// The probe breakpoints that apply to this probe as last listed, and
    /// when the first of them expires (µs since the epoch). Listed again after
    /// a breakpoint change or that expiry, not at every hold: the project may
    /// hold thousands of breakpoints.
    matchers: Option<(Vec<ArmedMatcher>, Option<i64>)>,
}

fn send_now(out: &Outbox, message: Out) -> bool {
    // A probe that stopped reading is a probe that is gone; never block on it.
    out.try_send(Ok(ConnectResponse {
        message: Some(message),
    }))
    .is_ok()
}

impl ProbeSession {
    /// A session for a probe that said Hello.
    pub fn new(
        ctx: Context,
        shared: Arc<Shared>,
        hello: Hello,
        previous_session_id: String,
        out: Outbox,
        commands: mpsc::UnboundedReceiver<Command>,
        hold_limit: Duration,
    ) -> Self {
        let (answers_tx, answers) = mpsc::unbounded_channel();
        let session = Session {
            id: shared.id.clone(),
            kind: SessionKind::Probe.into(),
            state: SessionState::Running.into(),
            name: hello.name.clone(),
            adapter: if hello.language.is_empty() {
                "probe".into()
            } else {
                hello.language.clone()
            },
            labels: hello.labels.clone(),
            program: hello.name.clone(),
            pid: hello.pid,
            started_at: Some(now_timestamp()),
            previous_session_id,
            ..Default::default()
        };
        Self {
            ctx,
            shared,
            hello,
            session,
            out,
            commands,
            answers,
            answers_tx,
            mode: Mode::Breakpoints,
            held: HashMap::new(),
            evals: HashMap::new(),
            waiters: Vec::new(),
            hold_limit,
            dropped_reports: 0,
            ended: false,
            matchers: None,
        }
    }

    fn publish(&self, payload: Payload) {
        self.ctx.bus.publish(&self.shared.id, payload);
    }

    /// Welcomes the probe, then serves its stream until it or the session ends.
    pub async fn run<S>(mut self, mut inbound: S)
    where
        S: Stream<Item = Result<ConnectRequest, Status>> + Unpin,
    {
        self.publish(Payload::SessionStarted(SessionStarted {
            session: Some(self.session.clone()),
        }));
        let armed = self.armed().await;
        send_now(
            &self.out,
            Out::Welcome(stepd_proto::v1::Welcome {
                session_id: self.shared.id.clone(),
                armed: Some(armed),
                hold_limit: prost_types::Duration::try_from(self.hold_limit).ok(),
            }),
        );
        while !self.ended {
            let deadline = self.next_deadline();
            tokio::select! {
                message = inbound.next() => match message {
                    Some(Ok(request)) => self.on_probe(request).await,
                    Some(Err(status)) => {
                        self.end(EndReason::ProbeDisconnected, format!("the probe's stream failed: {}", status.message())).await;
                    }
                    None => self.end(EndReason::ProbeDisconnected, "the probe disconnected".into()).await,
                },
                Some(command) = self.commands.recv() => self.on_command(command).await,
                Some(answer) = self.answers.recv() => self.on_answer(answer).await,
                () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => self.on_deadline().await,
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let holds = self.held.values().map(|h| h.deadline);
        let evals = self.evals.values().map(|e| e.deadline);
        let waits = self.waiters.iter().filter_map(|w| w.deadline);
        holds.chain(evals).chain(waits).min()
    }

    // ----- arming ---------------------------------------------------------

    /// The probe's arming: the mode, and the probe breakpoints that apply to it.
    async fn armed(&mut self) -> Armed {
        let now = now_us();
        let listed = self
            .matchers
            .as_ref()
            .is_some_and(|(_, until)| until.is_none_or(|t| now < t));
        if !listed {
            self.matchers = Some(self.list_matchers().await);
        }
        let matchers = self
            .matchers
            .as_ref()
            .map(|(m, _)| m.clone())
            .unwrap_or_default();
        let (mode, depth, target_coor, honour) = match &self.mode {
            Mode::Breakpoints => (ProbeMode::Breakpoints, 0, Vec::new(), true),
            Mode::Step => (ProbeMode::Step, 0, Vec::new(), true),
            Mode::Out { depth, force } => (ProbeMode::Depth, *depth, Vec::new(), !force),
            Mode::Quiet { depth } => (ProbeMode::None, *depth, Vec::new(), false),
            Mode::Here { coor, force } => (ProbeMode::Breakpoints, 0, coor.clone(), !force),
            Mode::Trace => (ProbeMode::Trace, 0, Vec::new(), true),
        };
        Armed {
            mode: mode.into(),
            matchers,
            depth,
            target_coor,
            honour_breakpoints: honour,
        }
    }

    /// The probe breakpoints that apply to this probe, and the earliest
    /// expiry among them.
    async fn list_matchers(&self) -> (Vec<ArmedMatcher>, Option<i64>) {
        let breakpoints = self.ctx.breakpoints.applying_to(&self.hello.labels).await;
        let mut until: Option<i64> = None;
        let matchers = breakpoints
            .into_iter()
            .filter(|b| !b.spent)
            .filter_map(|b| {
                let spec = b.spec?;
                if spec.enabled == Some(false) {
                    return None;
                }
                let Some(Location::Probe(p)) = spec.location else {
                    return None;
                };
                if let Some(expiry) = spec.expires_at.as_ref().map(us_from_timestamp) {
                    until = Some(until.map_or(expiry, |u| u.min(expiry)));
                }
                Some(ArmedMatcher {
                    breakpoint_id: b.id,
                    point_kind: p.point_kind,
                    name_glob: p.name_glob,
                    condition: spec.condition,
                })
            })
            .collect();
        (matchers, until)
    }

    async fn push_armed(&mut self) {
        let armed = self.armed().await;
        send_now(&self.out, Out::Armed(armed));
    }

    // ----- from the probe ---------------------------------------------------

    async fn on_probe(&mut self, request: ConnectRequest) {
        match request.message {
            Some(In::Hit(hit)) => self.on_hit(hit).await,
            Some(In::EvalResult(result)) => self.on_eval_result(result),
            Some(In::Reports(reports)) => self.on_reports(reports),
            Some(In::Hello(_)) => {
                self.notify(
                    NotificationLevel::Warning,
                    "the probe said Hello twice; ignored",
                );
            }
            None => {}
        }
    }

    fn notify(&self, level: NotificationLevel, message: &str) {
        self.publish(Payload::Notification(Notification {
            level: level.into(),
            message: message.to_owned(),
        }));
    }

    fn resume(
        &self,
        hit_id: &str,
        decision: ResumeDecision,
        value: Option<prost_types::Value>,
        armed: Option<Armed>,
    ) {
        send_now(
            &self.out,
            Out::Resume(Resume {
                hit_id: hit_id.to_owned(),
                decision: decision.into(),
                value,
                armed,
            }),
        );
    }

    async fn on_hit(&mut self, hit: Hit) {
        let point = hit.point.clone().unwrap_or_default();
        // Whether the mode alone makes this point hold: the step's end, the
        // HERE target, a point outside the scope being left.
        let depth = u32::try_from(point.scope_path.len()).unwrap_or(u32::MAX);
        let mode_holds = match &self.mode {
            Mode::Step => true,
            Mode::Breakpoints | Mode::Trace | Mode::Quiet { .. } => false,
            Mode::Here { coor, .. } => hit.coor == *coor,
            Mode::Out { depth: from, .. } => depth < *from,
        };
        if hit.breakpoint_ids.is_empty() {
            let limit = self.hold_limit;
            return self.hold(hit, point, limit);
        }
        // The probe evaluated each matcher's condition before naming it.
        let labels: HashMap<String, String> = self.hello.labels.clone();
        let known = Known {
            labels: &labels,
            condition_holds: true,
            adapter_logs: false,
        };
        let mut stop = false;
        let mut limits = Vec::new();
        for id in &hit.breakpoint_ids {
            let now = now_us();
            let decided = self
                .ctx
                .breakpoints
                .hit_with(id, |bp| verdict::verdict(bp, now, &known))
                .await;
            match decided {
                Verdict::Act(Action::Stop { hold_limit }) => {
                    stop = true;
                    limits.extend(hold_limit);
                }
                Verdict::Act(Action::Log { message }) => self.log(&message, &hit, &point),
                Verdict::Act(Action::Snapshot) => self.snapshot(id, &hit),
                _ => {}
            }
        }
        if stop {
            let limit = limits.into_iter().min().unwrap_or(self.hold_limit);
            return self.hold(hit, point, limit);
        }
        if mode_holds {
            let limit = self.hold_limit;
            return self.hold(hit, point, limit);
        }
        self.resume(&hit.hit_id, ResumeDecision::Continue, None, None);
    }

    /// A LOG breakpoint at a point: `{expr}` parts are read with the
    /// condition language over the point (`{value.cmd}`, `{name}`), and the
    /// line becomes the session's output.
    fn log(&self, message: &str, hit: &Hit, point: &stepd_proto::v1::PointInfo) {
        let value = point
            .payload
            .as_ref()
            .map(crate::dap::adapters::value_to_json)
            .unwrap_or(serde_json::Value::Null);
        let labels = self
            .hello
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let at = condition::Point {
            kind: &point.kind,
            name: &point.name,
            value: &value,
            labels: &labels,
        };
        let mut text = String::new();
        for part in log_message::parse(message) {
            match part {
                log_message::Part::Text(t) => text.push_str(&t),
                log_message::Part::Expr(expr) => match condition::parse(&expr) {
                    Ok(e) => match e.value(&at) {
                        serde_json::Value::String(s) => text.push_str(&s),
                        other => text.push_str(&other.to_string()),
                    },
                    Err(err) => text.push_str(&format!("<{expr}: {err}>")),
                },
            }
        }
        let _ = hit;
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

    /// A SNAPSHOT breakpoint at a point: the stack and locals the probe
    /// reported, as an event; the program does not wait.
    fn snapshot(&self, id: &str, hit: &Hit) {
        self.publish(Payload::BreakpointSnapshot(
            stepd_proto::v1::BreakpointSnapshot {
                breakpoint_id: id.to_owned(),
                thread_id: 0,
                frames: if hit.stack.is_empty() {
                    hit.location.iter().cloned().collect()
                } else {
                    hit.stack.clone()
                },
                locals: hit.locals.clone(),
                truncated: false,
                extra: None,
            },
        ));
    }

    fn hold(&mut self, hit: Hit, point: stepd_proto::v1::PointInfo, limit: Duration) {
        let key = format!("p-{}", uuid::Uuid::now_v7().simple());
        let exception = !hit.exception_message.is_empty();
        let debug_value = point
            .payload
            .as_ref()
            .map(|v| stop::display(&value::print(v), &point.type_hint));
        let mut input_type = self.input_type(&point);
        if !hit.locals.is_empty() {
            input_type.push(CommandKind::Locals as i32);
        }
        let pause = Pause {
            key: key.clone(),
            session_id: self.shared.id.clone(),
            thread_id: 0,
            reason: if exception {
                PauseReason::Exception
            } else {
                PauseReason::Hold
            }
            .into(),
            raw_reason: point.kind.clone(),
            input_type,
            debug_value,
            location: hit.location.clone(),
            coor: hit.coor.clone(),
            locals_available: !hit.locals.is_empty(),
            locals: hit.locals.clone(),
            original_id: hit.hit_id.clone(),
            caught_msg: hit.exception_message.clone(),
            point: Some(point),
            breakpoint_ids: hit.breakpoint_ids.clone(),
            created_at: Some(now_timestamp()),
            ..Default::default()
        };
        self.ctx
            .pauses
            .register(pause.clone(), self.answers_tx.clone());
        self.held.insert(
            key,
            Held {
                hit,
                pause: pause.clone(),
                deadline: Instant::now() + limit,
                awaiting_expression: false,
                offered: Vec::new(),
            },
        );
        self.session.state = SessionState::Stopped.into();
        self.publish(Payload::Stopped(Stopped {
            pause: Some(pause.clone()),
            all_threads_stopped: false,
        }));
        for waiter in self.waiters.drain(..) {
            let _ = waiter.reply.send(Ok(StableState {
                state: SessionState::Stopped.into(),
                waited: true,
                stop_reason: pause.reason,
                pause: Some(pause.clone()),
                hit_breakpoint_ids: pause.breakpoint_ids.clone(),
                elapsed_ms: waiter.started.elapsed().as_millis() as u64,
                ..Default::default()
            }));
        }
    }

    /// The commands that work at a hold of this probe.
    fn input_type(&self, point: &stepd_proto::v1::PointInfo) -> Vec<i32> {
        let caps = self.hello.capabilities.unwrap_or_default();
        let mut kinds = vec![
            CommandKind::Next,
            CommandKind::In,
            CommandKind::Out,
            CommandKind::Here,
            CommandKind::Continue,
            CommandKind::ContinueScope,
            CommandKind::ContinueAll,
            CommandKind::Trace,
            CommandKind::Stacktrace,
            CommandKind::Quit,
        ];
        if caps.eval {
            kinds.push(CommandKind::Eval);
        }
        if caps.edit && point.editable {
            kinds.push(CommandKind::Inject);
        }
        if caps.skip {
            kinds.push(CommandKind::Skip);
        }
        if point.payload.is_some() {
            kinds.push(CommandKind::Inspect);
        }
        kinds.into_iter().map(i32::from).collect()
    }

    fn on_eval_result(&mut self, result: stepd_proto::v1::EvalResult) {
        let Some(pending) = self.evals.remove(&result.eval_id) else {
            return;
        };
        let Some(held) = self.held.get_mut(&pending.key) else {
            let _ = pending.reply.send(Err(ApiError::new(
                ErrorReason::PauseNotFound,
                "the hold ended while evaluating",
            )));
            return;
        };
        if result.error.is_empty() {
            held.pause.debug_value = Some(stop::display(&result.value, ""));
        } else {
            self.ctx.bus.publish(
                &self.shared.id,
                Payload::EvalError(EvalError {
                    key: pending.key.clone(),
                    message: result.error.clone(),
                    causes: Vec::new(),
                }),
            );
        }
        held.pause.revision += 1;
        let pause = held.pause.clone();
        self.resend(pause.clone());
        let _ = pending.reply.send(Ok(SendDebugInputResponse {
            command: CommandKind::Eval.into(),
            pause: Some(pause),
        }));
    }

    fn on_reports(&mut self, reports: stepd_proto::v1::Reports) {
        for o in reports.observed {
            self.publish(Payload::Observed(Observed {
                kind: o.kind,
                name: o.name,
                value: o.value,
                scope_path: o.scope_path,
                coor: o.coor,
                observed_at: o.time,
            }));
        }
        for e in reports.enlighten {
            self.publish(Payload::Enlighten(Enlighten {
                coor: e.coor,
                value: Some(stop::display(&e.value, "")),
                erase_previous: e.erase_previous,
                location: None,
            }));
        }
        for (n, t) in reports.trace.into_iter().enumerate() {
            let point = t.point.unwrap_or_default();
            self.publish(Payload::Trace(Trace {
                key: String::new(),
                step: u32::try_from(n + 1).unwrap_or(u32::MAX),
                location: None,
                value: point
                    .payload
                    .as_ref()
                    .map(|v| stop::display(&value::print(v), &point.type_hint)),
                changed_locals: Vec::new(),
                coor: t.coor,
            }));
        }
        if reports.dropped > 0 {
            // Loss is never silent: clients learn how many reports the probe dropped.
            self.dropped_reports += reports.dropped;
            self.publish(Payload::Gap(stepd_proto::v1::Gap {
                from_seq: 0,
                to_seq: 0,
                reason: format!(
                    "the probe dropped {} reports ({} in all) because its buffer was full",
                    reports.dropped, self.dropped_reports
                ),
            }));
        }
    }

    // ----- clients ------------------------------------------------------------

    async fn on_command(&mut self, command: Command) {
        match command {
            Command::Exec { op, wait, reply } => match op {
                ExecOp::Pause(_) => {
                    self.mode = Mode::Step;
                    self.push_armed().await;
                    if let Some(held) = self.latest() {
                        let pause = held.pause.clone();
                        let _ = reply.send(Ok(StableState {
                            state: SessionState::Stopped.into(),
                            waited: true,
                            stop_reason: pause.reason,
                            pause: Some(pause),
                            ..Default::default()
                        }));
                        return;
                    }
                    match wait {
                        WaitMode::NoWait => {
                            let _ = reply.send(Ok(StableState {
                                state: self.session.state,
                                ..Default::default()
                            }));
                        }
                        WaitMode::UntilStable(timeout) => self.waiters.push(Waiter {
                            reply,
                            deadline: timeout.map(|t| Instant::now() + t),
                            started: std::time::Instant::now(),
                        }),
                    }
                }
                ExecOp::Continue(_) | ExecOp::Step(..) => {
                    let Some(key) = self.latest().map(|h| h.pause.key.clone()) else {
                        let _ = reply.send(Err(ApiError::new(
                            ErrorReason::NotStopped,
                            "no point is held",
                        )));
                        return;
                    };
                    let (mode, kind) = match op {
                        ExecOp::Step(..) => (Mode::Step, CommandKind::Next),
                        _ => (Mode::Breakpoints, CommandKind::Continue),
                    };
                    self.mode = mode;
                    self.release(&key, ResumeDecision::Continue, None, kind, "api")
                        .await;
                    let _ = reply.send(Ok(StableState {
                        state: self.session.state,
                        ..Default::default()
                    }));
                }
            },
            Command::Reapply => {
                self.matchers = None;
                self.push_armed().await;
            }
            Command::Superseded { by } => {
                self.end(
                    EndReason::ProbeDisconnected,
                    format!("the probe reconnected as session {by}"),
                )
                .await;
            }
            Command::Disconnect { mode, reply } => {
                // Disconnect stops held points (QUIT); a detach, and the
                // daemon's own shutdown, lets the program go on.
                let (decision, command, reason) = if mode == DisconnectMode::Detach {
                    (
                        ResumeDecision::Continue,
                        CommandKind::Continue,
                        EndReason::Detached,
                    )
                } else {
                    (
                        ResumeDecision::Stop,
                        CommandKind::Quit,
                        EndReason::Terminated,
                    )
                };
                let keys: Vec<String> = self.held.keys().cloned().collect();
                for key in keys {
                    self.release(&key, decision, None, command, "disconnect")
                        .await;
                }
                self.end(reason, "a client disconnected the session".into())
                    .await;
                let _ = reply.send(Ok(()));
            }
        }
    }

    fn latest(&self) -> Option<&Held> {
        self.held
            .values()
            .max_by_key(|h| h.pause.created_at.map(|t| (t.seconds, t.nanos)))
    }

    /// Ends a hold: the probe goes on as decided, under the current mode.
    async fn release(
        &mut self,
        key: &str,
        decision: ResumeDecision,
        value: Option<prost_types::Value>,
        command: CommandKind,
        by: &str,
    ) {
        let Some(held) = self.held.remove(key) else {
            return;
        };
        let armed = self.armed().await;
        self.resume(&held.hit.hit_id, decision, value, Some(armed));
        self.ctx.pauses.resolve(key, command, by);
        if self.held.is_empty() {
            self.session.state = SessionState::Running.into();
            self.publish(Payload::Continued(Continued { thread_id: 0 }));
        }
    }

    fn resend(&self, pause: Pause) {
        self.ctx.pauses.update(pause.clone());
        self.publish(Payload::Stopped(Stopped {
            pause: Some(pause),
            all_threads_stopped: false,
        }));
    }

    async fn on_answer(&mut self, answer: Answer) {
        let Answer {
            input,
            kind,
            by,
            reply,
        } = answer;
        let key = input.key.clone();
        let Some(held) = self.held.get(&key) else {
            let _ = reply.send(Err(ApiError::new(
                ErrorReason::PauseNotFound,
                format!("pause {key:?} is no longer held"),
            )));
            return;
        };
        let depth =
            u32::try_from(held.hit.point.as_ref().map_or(0, |p| p.scope_path.len())).unwrap_or(0);
        let point = held.hit.point.clone().unwrap_or_default();
        let hit_id = held.hit.hit_id.clone();
        let result: ApiResult<SendDebugInputResponse> = match input.command.and_then(|c| c.command)
        {
            Some(Cmd::Next(_) | Cmd::StepIn(_)) => {
                self.mode = Mode::Step;
                self.go_on(&key, ResumeDecision::Continue, kind, &by).await
            }
            Some(Cmd::StepOut(out)) => {
                self.mode = Mode::Out {
                    depth,
                    force: out.force,
                };
                self.go_on(&key, ResumeDecision::Continue, kind, &by).await
            }
            Some(Cmd::Here(here)) => {
                if here.coor.is_empty() {
                    Err(ApiError::invalid_field(
                        "command.here.coor",
                        "probe sessions run to a coordinate",
                    ))
                } else {
                    self.mode = Mode::Here {
                        coor: here.coor,
                        force: here.force,
                    };
                    self.go_on(&key, ResumeDecision::Continue, kind, &by).await
                }
            }
            Some(Cmd::Resume(_)) => {
                self.mode = Mode::Breakpoints;
                self.go_on(&key, ResumeDecision::Continue, kind, &by).await
            }
            Some(Cmd::ContinueScope(_)) => {
                self.mode = Mode::Quiet {
                    depth: depth.max(1),
                };
                self.go_on(&key, ResumeDecision::Continue, kind, &by).await
            }
            Some(Cmd::ContinueAll(_)) => {
                self.mode = Mode::Quiet { depth: 1 };
                self.notify(
                    NotificationLevel::Warning,
                    "CONTINUE_ALL: no holds until the top-level scope ends",
                );
                self.go_on(&key, ResumeDecision::Continue, kind, &by).await
            }
            Some(Cmd::Trace(_)) => {
                self.mode = Mode::Trace;
                self.go_on(&key, ResumeDecision::Continue, kind, &by).await
            }
            Some(Cmd::Skip(_)) => self.go_on(&key, ResumeDecision::Skip, kind, &by).await,
            Some(Cmd::Quit(_)) => self.go_on(&key, ResumeDecision::Stop, kind, &by).await,
            Some(Cmd::Inject(inject)) => {
                let new_value = match inject.replacement {
                    Some(Replacement::Value(v)) => Ok(v),
                    Some(Replacement::Code(code)) => {
                        serde_json::from_str::<serde_json::Value>(&code)
                            .map(|j| crate::dap::adapters::json_to_value(&j))
                            .map_err(|e| {
                                ApiError::new(
                                    ErrorReason::InvalidValue,
                                    format!("INJECT code for a probe must be JSON: {e}"),
                                )
                            })
                    }
                    None => Err(ApiError::invalid_field("command.inject", "give a value")),
                };
                match new_value.and_then(|v| value::check(&v, &point).map(|()| v)) {
                    Ok(v) => {
                        self.mode = Mode::Breakpoints;
                        self.release(&key, ResumeDecision::Replace, Some(v), kind, &by)
                            .await;
                        Ok(SendDebugInputResponse {
                            command: kind.into(),
                            pause: None,
                        })
                    }
                    Err(err) => {
                        // The pause stays: the claim is given back.
                        self.ctx.pauses.release(&key);
                        Err(err)
                    }
                }
            }
            Some(Cmd::Eval(eval)) if eval.code.trim().is_empty() => {
                Ok(self.ask_expression(&key, kind))
            }
            Some(Cmd::Eval(eval)) => {
                self.send_eval(&key, &hit_id, &eval.code, reply);
                return;
            }
            Some(Cmd::Expression(expression)) => {
                if self.held.get(&key).is_some_and(|h| h.awaiting_expression) {
                    self.restore_prompt(&key);
                    self.send_eval(&key, &hit_id, &expression.code, reply);
                    return;
                }
                Err(ApiError::new(
                    ErrorReason::InvalidCommand,
                    "this pause is not waiting for an expression",
                ))
            }
            Some(Cmd::Inspect(_)) => Ok(self.inspect_held(&key, kind, PauseTarget::Value).await),
            Some(Cmd::Locals(_)) => Ok(self.inspect_held(&key, kind, PauseTarget::Locals).await),
            Some(Cmd::Stacktrace(_)) => {
                let frames = self.held.get(&key).map(|h| {
                    h.hit
                        .stack
                        .iter()
                        .enumerate()
                        .map(|(i, l)| stepd_proto::v1::Frame {
                            id: format!("probe.{i}"),
                            name: l.function.clone(),
                            location: Some(l.clone()),
                            presentation_hint: String::new(),
                        })
                        .collect()
                });
                self.publish(Payload::Stack(Stack {
                    key: key.clone(),
                    frames: frames.unwrap_or_default(),
                    causes: Vec::new(),
                }));
                let pause = self.held.get_mut(&key).map(|h| {
                    h.pause.revision += 1;
                    h.pause.clone()
                });
                if let Some(p) = &pause {
                    self.resend(p.clone());
                }
                Ok(SendDebugInputResponse {
                    command: kind.into(),
                    pause,
                })
            }
            _ => Err(ApiError::new(
                ErrorReason::InvalidCommand,
                format!("{} is not available at this hold", kind.as_str_name()),
            )),
        };
        let _ = reply.send(result);
    }

    /// INSPECT and LOCALS: an inspector on the held value; the pause is
    /// re-sent with the rendering in `inspect`.
    async fn inspect_held(
        &mut self,
        key: &str,
        kind: CommandKind,
        target: PauseTarget,
    ) -> SendDebugInputResponse {
        let Some(pause) = self.held.get(key).map(|h| h.pause.clone()) else {
            return SendDebugInputResponse {
                command: kind.into(),
                pause: None,
            };
        };
        match self.ctx.inspect_pause(&pause, target).await {
            Ok(rendering) => {
                if let Some(h) = self.held.get_mut(key) {
                    h.pause.inspect = Some(rendering);
                }
            }
            Err(err) => self.publish(Payload::EvalError(EvalError {
                key: key.to_owned(),
                message: err.to_string(),
                causes: Vec::new(),
            })),
        }
        let pause = self.held.get_mut(key).map(|h| {
            h.pause.revision += 1;
            h.pause.clone()
        });
        if let Some(p) = &pause {
            self.resend(p.clone());
        }
        SendDebugInputResponse {
            command: kind.into(),
            pause,
        }
    }

    /// Ends a hold with `decision` and answers the command that did it.
    async fn go_on(
        &mut self,
        key: &str,
        decision: ResumeDecision,
        kind: CommandKind,
        by: &str,
    ) -> ApiResult<SendDebugInputResponse> {
        self.release(key, decision, None, kind, by).await;
        Ok(SendDebugInputResponse {
            command: kind.into(),
            pause: None,
        })
    }

    fn ask_expression(&mut self, key: &str, kind: CommandKind) -> SendDebugInputResponse {
        let pause = self.held.get_mut(key).map(|h| {
            h.awaiting_expression = true;
            h.offered = std::mem::replace(
                &mut h.pause.input_type,
                vec![CommandKind::Expression as i32],
            );
            h.pause.prompt = "Expression to evaluate at the held point".into();
            h.pause.revision += 1;
            h.pause.clone()
        });
        if let Some(p) = &pause {
            self.resend(p.clone());
        }
        SendDebugInputResponse {
            command: kind.into(),
            pause,
        }
    }

    fn restore_prompt(&mut self, key: &str) {
        if let Some(h) = self.held.get_mut(key) {
            h.awaiting_expression = false;
            h.pause.input_type = std::mem::take(&mut h.offered);
            h.pause.prompt.clear();
        }
    }

    fn send_eval(
        &mut self,
        key: &str,
        hit_id: &str,
        code: &str,
        reply: oneshot::Sender<ApiResult<SendDebugInputResponse>>,
    ) {
        let eval_id = uuid::Uuid::now_v7().simple().to_string();
        let sent = send_now(
            &self.out,
            Out::Eval(Eval {
                hit_id: hit_id.to_owned(),
                eval_id: eval_id.clone(),
                code: code.to_owned(),
            }),
        );
        if !sent {
            let _ = reply.send(Err(ApiError::new(
                ErrorReason::SessionEnded,
                "the probe is not reading",
            )));
            return;
        }
        self.evals.insert(
            eval_id,
            PendingEval {
                key: key.to_owned(),
                reply,
                deadline: Instant::now() + EVAL_DEADLINE,
            },
        );
    }

    async fn on_deadline(&mut self) {
        let now = Instant::now();
        let expired: Vec<String> = self
            .held
            .iter()
            .filter(|(_, h)| h.deadline <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            self.notify(
                NotificationLevel::Warning,
                &format!("hold {key} reached its limit and continues"),
            );
            self.release(
                &key,
                ResumeDecision::Continue,
                None,
                CommandKind::Continue,
                "hold-limit",
            )
            .await;
        }
        let late: Vec<String> = self
            .evals
            .iter()
            .filter(|(_, e)| e.deadline <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for id in late {
            if let Some(e) = self.evals.remove(&id) {
                let _ = e.reply.send(Err(ApiError::new(
                    ErrorReason::ProtocolError,
                    "the probe did not answer the evaluation in time",
                )));
            }
        }
        let (expired, waiting): (Vec<_>, Vec<_>) = self
            .waiters
            .drain(..)
            .partition(|w| w.deadline.is_some_and(|d| d <= now));
        self.waiters = waiting;
        for w in expired {
            let _ = w.reply.send(Ok(StableState {
                state: self.session.state,
                waited: true,
                timed_out: true,
                elapsed_ms: w.started.elapsed().as_millis() as u64,
                ..Default::default()
            }));
        }
    }

    async fn end(&mut self, reason: EndReason, detail: String) {
        if self.ended {
            return;
        }
        self.ended = true;
        self.shared.ended.store(true, Ordering::Release);
        let by = if reason == EndReason::ProbeDisconnected {
            "disconnect"
        } else {
            "session-ended"
        };
        for key in self.held.keys() {
            self.ctx.pauses.resolve(key, CommandKind::Unspecified, by);
        }
        self.held.clear();
        for (_, e) in self.evals.drain() {
            let _ = e.reply.send(Err(ApiError::new(
                ErrorReason::SessionEnded,
                "the probe went away",
            )));
        }
        for w in self.waiters.drain(..) {
            let _ = w.reply.send(Ok(StableState {
                state: SessionState::Ended.into(),
                waited: true,
                end_reason: reason.into(),
                ..Default::default()
            }));
        }
        self.publish(Payload::SessionEnded(SessionEnded {
            reason: reason.into(),
            detail,
            exit_code: None,
        }));
    }
}

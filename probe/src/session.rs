//! One probe session: the actor behind a `ProbeService.Connect` stream. It owns
//! the probe's arming, its held points (each a pause), evaluations in flight
//! and how the session ends. The probe decides locally which points hold; the
//! actor only tells it how (`Armed`) and answers the holds (`Resume`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use opentelemetry::KeyValue;
use stepd_proto::v1::{
    Armed, ArmedMatcher, BaggageEntry, Cause, CommandKind, ConnectRequest, Continued,
    DisconnectMode, EndReason, Enlighten, ErrorReason, Eval, Frame, HeartbeatEvent, Hello, Hit,
    HitRefused, Notification, NotificationLevel, Observed, Pause, PauseReason, Reconnect,
    Rendering, Resume, ResumeDecision, SendDebugInputResponse, Session, SessionEnded, SessionKind,
    SessionStarted, SessionState, StableState, Trace, breakpoint_spec::Location,
    connect_request::Message as In, connect_response::Message as Out, event::Payload,
    inject_command::Replacement,
};
use tokio::{
    sync::{mpsc, oneshot},
    time::{Instant, sleep_until},
};
use tokio_stream::{Stream, StreamExt};
use tonic::Status;

use super::mode::{AtPoint, Mode, ModeState, Tracing};
use super::outbox::{self, Outbox, Permit};
use super::request_scope;
use super::value;
use stepd_core::breakpoints::condition;
use stepd_core::{
    breakpoints::log_message,
    breakpoints::{Action, Known, Verdict, verdict},
    error::{ApiError, ApiResult},
    session::{
        Command, Context, ExecOp, Mailbox, PauseTarget, WaitMode,
        output::OutputBuffer,
        pause::{
            Answer,
            answer::{self, Go, PauseOwner, Reply},
            book::{self, PauseBook},
            display::display,
        },
    },
    time::{now_timestamp, now_us, us_from_timestamp},
};

/// Trace records a TRACE reports when the command names no limit.
const DEFAULT_TRACE_STEPS: u32 = 1000;
/// How long an EVAL may wait for the probe.
const EVAL_DEADLINE: Duration = Duration::from_secs(30);

/// What the session keeps beside each held point's pause.
pub struct Held {
    hit: Hit,
    deadline: Instant,
    /// The request the hold is known to be in (`request_scope.rs`); a mode
    /// chosen at it is about that request only. Empty = not known.
    scope: Vec<BaggageEntry>,
}

/// An EVAL sent to the probe, waiting for its result.
struct PendingEval {
    key: String,
    /// The expression, which decides whether its value is masked.
    code: String,
    /// Who asked, recorded with the result.
    by: String,
    reply: oneshot::Sender<ApiResult<SendDebugInputResponse>>,
    deadline: Instant,
}

/// A Pause request waiting for the next hold.
struct Waiter {
    reply: oneshot::Sender<ApiResult<StableState>>,
    deadline: Option<Instant>,
    started: std::time::Instant,
}

/// The actor of one probe session.
pub struct ProbeSession {
    ctx: Context,
    /// The session id.
    id: String,
    hello: Hello,
    session: Session,
    /// What goes to the probe: control messages are never dropped.
    out: Outbox,
    commands: Mailbox,
    answers: mpsc::Receiver<Answer>,
    /// The mode and the request it is about.
    mode: ModeState,
    /// The held points, each a pause.
    book: PauseBook<Held>,
    /// The held points by hit id, and their limits.
    holds: super::holds::Holds,
    evals: HashMap<String, PendingEval>,
    waiters: Vec<Waiter>,
    hold_limit: Duration,
    /// How many holds may be pending at once.
    max_pauses: usize,
    dropped_reports: u64,
    /// A QUIT was answered: the disconnect that follows is its end.
    quitting: bool,
    ended: bool,
    /// The session's output: what LOG breakpoints wrote.
    output: Arc<Mutex<OutputBuffer>>,
    /// The probe breakpoints that apply to this probe as last listed, and
    /// when the first of them expires (µs since the epoch). Listed again after
    /// a breakpoint change or that expiry, not at every hold: the project may
    /// hold thousands of breakpoints.
    matchers: Option<(Vec<ArmedMatcher>, Option<i64>)>,
    /// The session's span, from Hello to the end.
    span: stepd_core::trace::Span,
    /// Quiet time after which the probe gets a heartbeat.
    heartbeat: Duration,
    /// Since when the daemon has stopped reading the probe, and whether
    /// clients were told.
    unread: Option<(Instant, bool)>,
}

/// How long the daemon stops reading a probe before clients are told: a
/// burst the probe is still reading through is not news.
const UNREAD_NOTICE_AFTER: Duration = Duration::from_millis(500);

/// How long a reconnected probe's new session waits for its old one to end
/// before it welcomes the probe (and so before the probe re-reports holds).
const OLD_SESSION_WAIT: Duration = Duration::from_secs(5);
/// Bounds on the heartbeat interval a probe may ask for.
const HEARTBEAT_MIN: Duration = Duration::from_secs(1);
const HEARTBEAT_MAX: Duration = Duration::from_secs(3600);

impl ProbeSession {
    /// Sends a control message to the probe without waiting; it is never
    /// dropped (`outbox.rs`).
    fn send(&mut self, message: Out) {
        self.out.send(message);
    }

    /// Room for a message the probe must get before anything changes (the
    /// Resume of a client's answer, an evaluation), or `PROBE_NOT_READING`.
    fn reserve(&mut self) -> ApiResult<Permit> {
        self.out.reserve_now().ok_or_else(|| {
            ApiError::new(
                ErrorReason::ProbeNotReading,
                format!(
                    "the probe has not read what was sent to it for {} ms, so the answer \
                     could not reach it; nothing changed and the pause stays pending: \
                     answer again once it reads",
                    self.out.stalled_for().as_millis()
                ),
            )
        })
    }

    /// How long a probe may leave what it was sent unread while something
    /// waits for it: two heartbeat intervals, as a quiet probe is given.
    fn stall_grace(&self) -> Duration {
        self.heartbeat * 2
    }

    /// When the next heartbeat is due: the interval after the last message.
    fn heartbeat_at(&self) -> Instant {
        let quiet = now_us().saturating_sub(self.out.last_sent_us());
        let quiet = Duration::from_micros(u64::try_from(quiet).unwrap_or(0));
        Instant::now() + self.heartbeat.saturating_sub(quiet)
    }

    /// Records who connected the probe (`Session.started_by`), before it
    /// runs.
    pub fn set_started_by(&mut self, who: &str) {
        who.clone_into(&mut self.session.started_by);
        self.book.set_owner(who);
        self.span
            .set(|| vec![KeyValue::new("stepd.session.started_by", who.to_owned())]);
    }

    /// A session for a probe that said Hello.
    /// `port` is what the registry knows of it: its id and its output.
    pub(super) fn new(
        ctx: Context,
        settings: super::ProbeSettings,
        port: &super::ProbePort,
        hello: Hello,
        previous_session_id: String,
        out: outbox::Sender,
        commands: Mailbox,
    ) -> Self {
        let (id, output) = (port.id.clone(), port.output.clone());
        let hold_limit = settings.hold_limit;
        let heartbeat = hello
            .heartbeat_interval
            .and_then(|d| Duration::try_from(d).ok())
            .map_or(settings.heartbeat_interval, |d| {
                d.clamp(HEARTBEAT_MIN, HEARTBEAT_MAX)
            });
        let (mut book, answers) = PauseBook::new(
            id.clone(),
            ctx.pauses.clone(),
            ctx.bus.clone(),
            ctx.redactor.clone(),
        );
        // A child of the program's span at connect time when the Hello
        // names one, else of the Connect call, whose span is current here.
        let remote = stepd_core::trace::Remote {
            traceparent: &hello.traceparent,
            tracestate: &hello.tracestate,
        };
        let span = stepd_core::trace::Span::start_under(
            "session",
            remote,
            &stepd_core::trace::Span::current_rpc(),
            || {
                vec![
                    KeyValue::new("stepd.session.id", id.clone()),
                    KeyValue::new(
                        "stepd.session.kind",
                        stepd_proto::short_name(SessionKind::Probe.as_str_name()),
                    ),
                    KeyValue::new("stepd.probe.name", hello.name.clone()),
                    KeyValue::new("stepd.probe.language", hello.language.clone()),
                    KeyValue::new("process.pid", hello.pid),
                ]
            },
        );
        book.set_trace_parent(&span);
        let (trace_id, span_id) = span.ids();
        let session = Session {
            id: id.clone(),
            trace_id,
            span_id,
            kind: SessionKind::Probe.into(),
            state: SessionState::Running.into(),
            name: hello.name.clone(),
            adapter: if hello.language.is_empty() {
                "probe".into()
            } else {
                hello.language.clone()
            },
            // Kept masked, as every copy that leaves the daemon must be;
            // breakpoints match the Hello's own labels.
            labels: ctx.redactor.labels_of(&hello.labels),
            program: hello.name.clone(),
            pid: hello.pid,
            started_at: Some(now_timestamp()),
            previous_session_id,
            replica_id: ctx.bus.instance_id().to_owned(),
            ..Default::default()
        };
        Self {
            ctx,
            id,
            hello,
            session,
            out: Outbox::new(out),
            commands,
            answers,
            mode: ModeState::default(),
            book,
            holds: Default::default(),
            evals: HashMap::new(),
            waiters: Vec::new(),
            hold_limit,
            max_pauses: settings.max_pauses,
            dropped_reports: 0,
            quitting: false,
            ended: false,
            output,
            matchers: None,
            span,
            heartbeat,
            unread: None,
        }
    }

    fn publish(&self, mut payload: Payload) {
        self.ctx.redactor.payload(&mut payload);
        self.ctx.bus.publish(&self.id, payload);
    }

    /// Publishes a batch under one lock of the bus (a probe's reports).
    fn publish_all(&self, payloads: impl IntoIterator<Item = Payload>) {
        // Redacted before the lock is taken, so the lock covers numbering only.
        let redactor = &self.ctx.redactor;
        let payloads: Vec<Payload> = payloads
            .into_iter()
            .map(|mut payload| {
                redactor.payload(&mut payload);
                payload
            })
            .collect();
        self.ctx.bus.publish_all(&self.id, payloads);
    }

    /// Welcomes the probe, then serves its stream until it or the session
    /// ends. `old_ended` hears when the session this probe had before ends.
    pub async fn run<S>(mut self, mut inbound: S, old_ended: Option<oneshot::Receiver<()>>)
    where
        S: Stream<Item = Result<ConnectRequest, Status>> + Unpin,
    {
        if let Some(ended) = old_ended {
            // The probe re-reports its holds right after Welcome: the old
            // session's pauses for them must be gone first.
            let _ = tokio::time::timeout(OLD_SESSION_WAIT, ended).await;
        }
        self.publish(Payload::SessionStarted(Box::new(SessionStarted {
            session: Some(self.session.clone()),
        })));
        let armed = self.armed().await;
        self.send(Out::Welcome(stepd_proto::v1::Welcome {
            session_id: self.id.clone(),
            armed: Some(armed),
            hold_limit: prost_types::Duration::try_from(self.hold_limit).ok(),
            heartbeat_interval: prost_types::Duration::try_from(self.heartbeat).ok(),
        }));
        // One timer for the session, moved on only when it fires: a busy
        // stream pays nothing for its heartbeats.
        let heartbeat = tokio::time::sleep(self.heartbeat);
        tokio::pin!(heartbeat);
        while !self.ended {
            self.note_reading();
            let deadline = self.next_deadline();
            tokio::select! {
                // A probe that leaves its answers unread is not read either.
                message = inbound.next(), if self.out.backlog_len() < outbox::BACKLOG_READ_LIMIT => match message {
                    Some(Ok(request)) => self.on_probe(request).await,
                    Some(Err(status)) => {
                        let detail = format!("the probe's stream failed: {}", status.message());
                        self.end(self.gone_reason(), detail).await;
                    }
                    None => self.end(self.gone_reason(), "the probe disconnected".into()).await,
                },
                Some(command) = self.commands.recv() => self.on_command(command).await,
                Some(answer) = self.answers.recv() => answer::answer(&mut self, answer).await,
                Some(permit) = self.out.room(), if self.out.waiting_for_room() => self.out.on_room(permit),
                () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => self.on_deadline().await,
                () = &mut heartbeat => {
                    if self.heartbeat_at() <= Instant::now() {
                        self.out.heartbeat(Out::Heartbeat(HeartbeatEvent { last_seq: self.ctx.bus.last_seq() }));
                    }
                    heartbeat.as_mut().reset(self.heartbeat_at());
                }
            }
        }
    }

    /// Tells clients once when the daemon has stopped reading a probe that
    /// leaves its answers unread for `UNREAD_NOTICE_AFTER`, so a watcher
    /// learns why its reports stopped and its answers are refused.
    fn note_reading(&mut self) {
        let stopped = self.out.backlog_len() >= outbox::BACKLOG_READ_LIMIT;
        self.unread = match (stopped, self.unread) {
            (false, _) => None,
            (true, None) => Some((Instant::now(), false)),
            (true, Some((since, false))) if since.elapsed() >= UNREAD_NOTICE_AFTER => {
                self.notify(
                    NotificationLevel::Warning,
                    "the probe is not reading its stream: the daemon stops reading it, and \
                     answers to its holds are refused with PROBE_NOT_READING until it reads again",
                );
                Some((since, true))
            }
            (true, unread) => unread,
        };
    }

    /// Why the session ends when the probe's stream does: a program told
    /// to QUIT is expected to go.
    fn gone_reason(&self) -> EndReason {
        if self.quitting {
            EndReason::Quit
        } else {
            EndReason::ProbeDisconnected
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let holds = self.holds.next_deadline();
        let evals = self.evals.values().map(|e| e.deadline);
        let waits = self.waiters.iter().filter_map(|w| w.deadline);
        let stall = self.out.stall_deadline(self.stall_grace());
        let unread_notice = match self.unread {
            Some((since, false)) => Some(since + UNREAD_NOTICE_AFTER),
            _ => None,
        };
        holds
            .into_iter()
            .chain(evals)
            .chain(waits)
            .chain(stall)
            .chain(unread_notice)
            .min()
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
        self.mode.armed(matchers)
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
                    baggage: p.baggage,
                })
            })
            .collect();
        (matchers, until)
    }

    /// Changes the mode, about the request `scope` (see [`ModeState::set`]).
    fn set_mode(&mut self, mode: Mode, scope: Vec<BaggageEntry>) {
        self.mode.set(mode, scope);
    }

    /// The request scope of a held point, for a mode chosen at it.
    fn scope_of(&self, key: &str) -> Vec<BaggageEntry> {
        self.book
            .get(key)
            .map(|e| e.data.scope.clone())
            .unwrap_or_default()
    }

    async fn push_armed(&mut self) {
        let armed = self.armed().await;
        self.send(Out::Armed(armed));
    }

    // ----- from the probe ---------------------------------------------------

    async fn on_probe(&mut self, request: ConnectRequest) {
        match request.message {
            Some(In::Hit(hit)) => self.on_hit(hit).await,
            Some(In::EvalResult(result)) => self.on_eval_result(result),
            Some(In::Reports(reports)) => self.on_reports(reports).await,
            Some(In::Withdraw(withdraw)) => self.withdraw(&withdraw.hit_id),
            // Keeps proxies from cutting a quiet stream; nothing to answer.
            Some(In::Heartbeat(_)) => {}
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

    /// Answers a hit: through room reserved for it when a client's answer
    /// must reach the probe before the pause resolves, else as any control
    /// message.
    fn resume(
        &mut self,
        hit_id: &str,
        decision: ResumeDecision,
        value: Option<prost_types::Value>,
        armed: Option<Armed>,
        permit: Option<Permit>,
    ) {
        let resume = Out::Resume(Resume {
            hit_id: hit_id.to_owned(),
            decision: decision.into(),
            value,
            armed,
        });
        match permit {
            Some(permit) => self.out.send_reserved(permit, resume),
            None => self.send(resume),
        }
    }

    /// Answers a Hit that does not hold with why; the stream goes on.
    fn refuse(&mut self, hit_id: &str, error: &ApiError) {
        tracing::debug!(session = %self.id, hit_id, %error, "hit refused");
        self.send(Out::Refused(HitRefused {
            hit_id: hit_id.to_owned(),
            error: Some(error.to_stream_error("")),
        }));
    }

    async fn on_hit(&mut self, hit: Hit) {
        // Refused before anything counts it: the earlier hold with this id
        // and every breakpoint's hit count stay as they were.
        if let Err(error) = stepd_core::limits::hit(&hit) {
            return self.refuse(&hit.hit_id, &error);
        }
        if self.holds.key_of(&hit.hit_id).is_some() {
            let error = ApiError::invalid_field(
                "hit.hit_id",
                format!(
                    "hit {} is already held; a Hit needs an id no pending hold has",
                    stepd_core::error::quote(&hit.hit_id)
                ),
            );
            return self.refuse(&hit.hit_id, &error);
        }
        if let Some(since) = hit.held_since {
            return self.rehold(hit, since);
        }
        let point = hit.point.clone().unwrap_or_default();
        let depth = u32::try_from(point.scope_path.len()).unwrap_or(u32::MAX);
        let AtPoint {
            scope: mode_scope,
            holds: mode_holds,
        } = self.mode.at(hit.outside_request_scope, &hit.coor, depth);
        if hit.breakpoint_ids.is_empty() {
            let limit = self.hold_limit;
            return self.hold(hit, point, limit, None, mode_scope);
        }
        // The probe evaluated each matcher's condition before naming it.
        let labels: HashMap<String, String> = self.hello.labels.clone();
        let known = Known {
            labels: &labels,
            condition_holds: true,
            adapter_logs: false,
        };
        let mut stops = Vec::new();
        let mut limits = Vec::new();
        for id in &hit.breakpoint_ids {
            let now = now_us();
            let mut scope = None;
            let decided = self
                .ctx
                .breakpoints
                .hit_with(id, |bp| {
                    scope = bp.and_then(request_scope::of_breakpoint);
                    verdict::verdict(bp, now, &known)
                })
                .await;
            match decided {
                Verdict::Act(Action::Stop { hold_limit }) => {
                    stops.push(scope);
                    limits.extend(hold_limit);
                }
                Verdict::Act(Action::Log { message }) => self.log(&message, &hit, &point),
                Verdict::Act(Action::Snapshot) => self.snapshot(id, &hit),
                _ => {}
            }
        }
        if !stops.is_empty() {
            let limit = limits.into_iter().min().unwrap_or(self.hold_limit);
            // In the request a mode is about, the hold stays that request's.
            let scope = if mode_scope.is_empty() {
                request_scope::of_stops(&stops)
            } else {
                mode_scope
            };
            return self.hold(hit, point, limit, None, scope);
        }
        if mode_holds {
            let limit = self.hold_limit;
            return self.hold(hit, point, limit, None, mode_scope);
        }
        self.resume(&hit.hit_id, ResumeDecision::Continue, None, None, None);
    }

    /// A hold the program kept across a lost stream, re-reported after
    /// Welcome: not a new breakpoint hit (it was counted when it began, and
    /// a breakpoint spent by it still holds it), and its limit, the same as
    /// a fresh hold's, runs from when the program began to wait.
    fn rehold(&mut self, hit: Hit, since: prost_types::Timestamp) {
        let breakpoints: Vec<_> = hit
            .breakpoint_ids
            .iter()
            .filter_map(|id| self.ctx.bus.with_view(|v| v.breakpoint(id)))
            .collect();
        let limit = breakpoints
            .iter()
            .filter_map(|bp| bp.spec.as_ref()?.hold_limit)
            .filter_map(|d| Duration::try_from(d).ok())
            .min()
            .unwrap_or(self.hold_limit);
        // The mode it was held under belonged to the old session: the
        // request it is in is known only from its breakpoints.
        let stops: Vec<_> = breakpoints
            .iter()
            .map(request_scope::of_breakpoint)
            .collect();
        let scope = request_scope::of_stops(&stops);
        let waited = now_us().saturating_sub(us_from_timestamp(&since));
        let waited = Duration::from_micros(u64::try_from(waited).unwrap_or(0));
        let Some(left) = limit.checked_sub(waited).filter(|d| !d.is_zero()) else {
            self.notify(
                NotificationLevel::Warning,
                &format!(
                    "hold {} was re-reported past its limit and continues",
                    stepd_core::error::quote(&hit.hit_id)
                ),
            );
            return self.resume(&hit.hit_id, ResumeDecision::Continue, None, None, None);
        };
        let point = hit.point.clone().unwrap_or_default();
        self.hold(hit, point, left, Some(since), scope);
    }

    /// A LOG breakpoint at a point: `{expr}` parts are read with the
    /// condition language over the point (`{value.cmd}`, `{name}`), and the
    /// line becomes the session's output.
    fn log(&self, message: &str, hit: &Hit, point: &stepd_proto::v1::PointInfo) {
        // The line leaves the daemon: it reads the point as clients see it.
        let mut shown = point.payload.clone();
        if let Some(payload) = &mut shown {
            self.ctx.redactor.value(payload);
        }
        let value = shown
            .as_ref()
            .map(stepd_core::json::from_value)
            .unwrap_or(serde_json::Value::Null);
        let labels = self
            .ctx
            .redactor
            .labels_of(&self.hello.labels)
            .into_iter()
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

    /// Opens the pause of a hold lasting at most `limit`; `since` is when a
    /// re-reported hold began, `scope` the request it is known to be in.
    fn hold(
        &mut self,
        hit: Hit,
        point: stepd_proto::v1::PointInfo,
        limit: Duration,
        since: Option<prost_types::Timestamp>,
        scope: Vec<BaggageEntry>,
    ) {
        let key = book::new_key();
        let exception = !hit.exception_message.is_empty();
        let debug_value = point
            .payload
            .as_ref()
            .map(|v| display(&value::print(v), &point.type_hint));
        let mut input_type = self.input_type(&point, hit.evaluable);
        if !hit.locals.is_empty() {
            input_type.push(CommandKind::Locals as i32);
        }
        let pause = Pause {
            key: key.clone(),
            session_id: self.id.clone(),
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
            notes: since
                .iter()
                .map(|_| "re-reported by the probe after it reconnected".to_owned())
                .collect(),
            created_at: Some(since.unwrap_or_else(now_timestamp)),
            ..Default::default()
        };
        let deadline = Instant::now() + limit;
        let hit_id = hit.hit_id.clone();
        // Copied only with export on: nothing on the hold's path otherwise.
        let (traceparent, tracestate) = if stepd_core::trace::enabled() {
            (hit.traceparent.clone(), hit.tracestate.clone())
        } else {
            Default::default()
        };
        let remote = stepd_core::trace::Remote {
            traceparent: &traceparent,
            tracestate: &tracestate,
        };
        let max = self.max_pauses;
        if let Err(error) = self.book.try_open(
            pause,
            Held {
                hit,
                deadline,
                scope,
            },
            max,
            remote,
        ) {
            return self.refuse(&hit_id, &error);
        }
        // Waiters get the book's copy: masked, with its trace ids (copied
        // only when someone waits: a hold's path pays nothing otherwise).
        let kept = (!self.waiters.is_empty())
            .then(|| self.book.kept(&key))
            .flatten();
        self.holds.hold(hit_id, key, deadline);
        self.session.state = SessionState::Stopped.into();
        let Some(pause) = kept else {
            return;
        };
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
    fn input_type(&self, point: &stepd_proto::v1::PointInfo, evaluable: bool) -> Vec<i32> {
        let caps = self.hello.capabilities.unwrap_or_default();
        let mut kinds = answer::common_commands();
        kinds.push(CommandKind::Quit);
        // A hold may bring its own evaluator when the probe declares none.
        if caps.eval || evaluable {
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
        if self.book.get(&pending.key).is_none() {
            let _ = pending.reply.send(Err(self.book.gone(&pending.key)));
            return;
        }
        let evaluated = if let Err(error) = stepd_core::limits::eval_result(&result) {
            Err(error)
        } else if result.error.is_empty() {
            Ok(display(&result.value, ""))
        } else {
            Err(ApiError::new(ErrorReason::AdapterError, result.error))
        };
        let _ = pending.reply.send(self.book.evaluated(
            &pending.key,
            &pending.code,
            &pending.by,
            evaluated,
        ));
    }

    async fn on_reports(&mut self, mut reports: stepd_proto::v1::Reports) {
        self.drop_oversized(&mut reports);
        let observed = reports.observed.into_iter().map(|o| {
            Payload::Observed(Observed {
                kind: o.kind,
                name: o.name,
                value: o.value,
                scope_path: o.scope_path,
                coor: o.coor,
                observed_at: o.time,
            })
        });
        let enlighten = reports.enlighten.into_iter().map(|e| {
            Payload::Enlighten(Enlighten {
                coor: e.coor,
                value: Some(display(&e.value, "")),
                erase_previous: e.erase_previous,
                location: None,
            })
        });
        self.publish_all(observed.chain(enlighten));
        self.on_trace(reports.trace).await;
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

    /// Takes the reports over a size limit out of `reports`, and says so in
    /// one warning naming the first: a report never holds, so there is no
    /// one to refuse it to, and the rest of the batch goes on.
    fn drop_oversized(&self, reports: &mut stepd_proto::v1::Reports) {
        let mut dropped = 0usize;
        let mut first = None;
        let mut keep = |checked: ApiResult<()>| match checked {
            Ok(()) => true,
            Err(error) => {
                dropped += 1;
                first.get_or_insert(error);
                false
            }
        };
        let mut index = 0;
        reports.observed.retain(|o| {
            index += 1;
            keep(stepd_core::limits::observed(o, index - 1))
        });
        index = 0;
        reports.enlighten.retain(|e| {
            index += 1;
            keep(stepd_core::limits::enlighten(e, index - 1))
        });
        index = 0;
        reports.trace.retain(|t| {
            index += 1;
            keep(stepd_core::limits::trace(t, index - 1))
        });
        if let Some(error) = first {
            self.notify(
                NotificationLevel::Warning,
                &format!(
                    "the daemon dropped {dropped} of the probe's reports over a size limit; the first: {}",
                    error.message()
                ),
            );
        }
    }

    /// Trace records of a TRACE run, numbered across batches. At the step
    /// limit the probe is put in step mode, so it holds at its next point;
    /// records the probe sent before it heard that are not shown as steps.
    async fn on_trace(&mut self, records: Vec<stepd_proto::v1::TraceReport>) {
        let mut spent = 0usize;
        for record in records {
            let Mode::Trace(tracing) = &mut self.mode.now else {
                spent += 1;
                continue;
            };
            tracing.step += 1;
            let (key, step, last) = (
                tracing.key.clone(),
                tracing.step,
                tracing.step >= tracing.limit,
            );
            let point = record.point.unwrap_or_default();
            self.publish(Payload::Trace(Box::new(Trace {
                key,
                step,
                location: record.location,
                value: point
                    .payload
                    .as_ref()
                    .map(|v| display(&value::print(v), &point.type_hint)),
                changed_locals: Vec::new(),
                coor: record.coor,
                point: Some(point),
            })));
            if last {
                self.mode.now = Mode::Step;
                self.push_armed().await;
            }
        }
        if spent > 0 {
            // Never silent: the program passed these before it heard to hold.
            self.notify(
                NotificationLevel::Info,
                &format!(
                    "the probe passed {spent} more points before its TRACE step limit reached it"
                ),
            );
        }
    }

    // ----- clients ------------------------------------------------------------

    async fn on_command(&mut self, command: Command) {
        match command {
            Command::Exec { op, wait, reply } => match op {
                ExecOp::Pause(_) => {
                    // A Pause request is about the whole process.
                    self.set_mode(Mode::Step, Vec::new());
                    self.push_armed().await;
                    if let Some(pause) = self.latest().cloned() {
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
                    let Some(key) = self.latest().map(|p| p.key.clone()) else {
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
                    let permit = match self.reserve() {
                        Ok(permit) => permit,
                        Err(error) => {
                            let _ = reply.send(Err(error.with("key", key.as_str())));
                            return;
                        }
                    };
                    let scope = self.scope_of(&key);
                    self.set_mode(mode, scope);
                    self.release(
                        &key,
                        ResumeDecision::Continue,
                        None,
                        kind,
                        "api",
                        Some(permit),
                    )
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
            Command::TakenOver { by, ended } => {
                self.end(
                    EndReason::ProbeDisconnected,
                    format!("the probe reconnected as session {by}"),
                )
                .await;
                let _ = ended.send(());
            }
            Command::Shutdown { reply } => {
                // No Resume: the program keeps waiting at its holds and
                // re-reports them to the daemon it reconnects to.
                self.send(Out::Reconnect(Reconnect {
                    reason: "the daemon is shutting down".into(),
                }));
                self.end(
                    EndReason::DaemonShutdown,
                    "the daemon shut down; the probe reconnects".into(),
                )
                .await;
                let _ = reply.send(Ok(()));
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
                let keys: Vec<String> = self.book.entries().map(|e| e.pause.key.clone()).collect();
                for key in keys {
                    self.release(&key, decision, None, command, "disconnect", None)
                        .await;
                }
                self.end(reason, "a client disconnected the session".into())
                    .await;
                let _ = reply.send(Ok(()));
            }
        }
    }

    fn latest(&self) -> Option<&Pause> {
        self.book.latest().map(|e| &e.pause)
    }

    /// Ends a hold: the probe goes on as decided, under the current mode.
    /// A client's answer brings the room reserved for its Resume.
    async fn release(
        &mut self,
        key: &str,
        decision: ResumeDecision,
        value: Option<prost_types::Value>,
        command: CommandKind,
        by: &str,
        permit: Option<Permit>,
    ) {
        let Some(hit_id) = self.book.get(key).map(|e| e.data.hit.hit_id.clone()) else {
            return;
        };
        // The probe hears first: it is the one waiting. The pause's span
        // ends as the answer goes, so it never outlasts the program's own
        // span around the hold.
        let armed = self.armed().await;
        let answered = SystemTime::now();
        self.resume(&hit_id, decision, value, Some(armed), permit);
        if let Some(entry) = self.book.resolve_at(key, command, by, answered) {
            self.forget(&entry);
        }
        self.after_release();
    }

    /// The probe gave up a hold (its context ended, its task was cancelled):
    /// the pause resolves like a release, but nobody is waiting for a Resume.
    fn withdraw(&mut self, hit_id: &str) {
        let Some(key) = self.holds.key_of(hit_id).map(str::to_owned) else {
            // Usually a hold that was answered while the probe gave up on it.
            tracing::debug!(hit_id, "withdraw for a hit that is not held; ignored");
            return;
        };
        if let Some(entry) = self
            .book
            .resolve(&key, CommandKind::Unspecified, "withdrawn")
        {
            self.forget(&entry);
        }
        // An evaluation in flight at this hold can no longer be answered.
        let evals: Vec<String> = self
            .evals
            .iter()
            .filter(|(_, e)| e.key == key)
            .map(|(id, _)| id.clone())
            .collect();
        for id in evals {
            if let Some(e) = self.evals.remove(&id) {
                let _ = e.reply.send(Err(self.book.gone(&key)));
            }
        }
        self.after_release();
    }

    /// A hold that ended leaves the indexes beside the book.
    fn forget(&mut self, entry: &book::Entry<Held>) {
        self.holds.forget(
            &entry.data.hit.hit_id,
            &entry.pause.key,
            entry.data.deadline,
        );
    }

    /// Once the last hold ended, the session runs again.
    fn after_release(&mut self) {
        if self.book.is_empty() {
            self.session.state = SessionState::Running.into();
            self.publish(Payload::Continued(Continued { thread_id: 0 }));
        }
    }

    /// The value an INJECT puts in place of the held one, checked against
    /// the point's schema or type hint.
    fn injected(
        &self,
        key: &str,
        replacement: Option<Replacement>,
    ) -> ApiResult<prost_types::Value> {
        let new_value = match replacement {
            Some(Replacement::Value(v)) => v,
            Some(Replacement::Code(code)) => serde_json::from_str::<serde_json::Value>(&code)
                .map(|j| stepd_core::json::to_value(&j))
                .map_err(|e| {
                    ApiError::new(
                        ErrorReason::InvalidValue,
                        format!("INJECT code for a probe must be JSON: {e}"),
                    )
                })?,
            None => return Err(ApiError::invalid_field("command.inject", "give a value")),
        };
        let point = self
            .book
            .get(key)
            .and_then(|e| e.data.hit.point.clone())
            .unwrap_or_default();
        value::check(&new_value, &point)?;
        Ok(new_value)
    }

    /// The mode a command that moves on leaves, and how the hold ends.
    fn next_mode(&self, key: &str, go: &Go) -> ApiResult<(Mode, ResumeDecision)> {
        let depth = self.book.get(key).map_or(0, |e| {
            let path = e.data.hit.point.as_ref().map_or(0, |p| p.scope_path.len());
            u32::try_from(path).unwrap_or(u32::MAX)
        });
        let go_on = ResumeDecision::Continue;
        Ok(match go {
            Go::Next | Go::In => (Mode::Step, go_on),
            Go::Out { force } => (
                Mode::Out {
                    depth,
                    force: *force,
                },
                go_on,
            ),
            Go::Here(here) => {
                if here.coor.is_empty() {
                    return Err(ApiError::invalid_field(
                        "command.here.coor",
                        "probe sessions run to a coordinate",
                    ));
                }
                (
                    Mode::Here {
                        coor: here.coor.clone(),
                        force: here.force,
                    },
                    go_on,
                )
            }
            Go::Continue | Go::Inject(_) => (Mode::Breakpoints, go_on),
            Go::ContinueScope => (
                Mode::Quiet {
                    depth: depth.max(1),
                },
                go_on,
            ),
            Go::ContinueAll => (Mode::Quiet { depth: 1 }, go_on),
            Go::Trace { max_steps } => (
                Mode::Trace(Tracing {
                    key: key.to_owned(),
                    step: 0,
                    limit: if *max_steps == 0 {
                        DEFAULT_TRACE_STEPS
                    } else {
                        *max_steps
                    },
                }),
                go_on,
            ),
            Go::Skip => (self.mode.now.clone(), ResumeDecision::Skip),
            Go::Quit => (self.mode.now.clone(), ResumeDecision::Stop),
        })
    }

    async fn on_deadline(&mut self) {
        let now = Instant::now();
        if self
            .out
            .stall_deadline(self.stall_grace())
            .is_some_and(|d| d <= now)
        {
            let detail = format!(
                "the probe read nothing of its stream for {} s while the daemon had \
                 messages for it; its holds were given up and are re-reported when it reconnects",
                self.out.stalled_for().as_secs()
            );
            return self.end(EndReason::ProbeUnresponsive, detail).await;
        }
        for key in self.holds.expired(now) {
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
                None,
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
        let by = match reason {
            EndReason::ProbeDisconnected => "disconnect",
            EndReason::DaemonShutdown => "daemon-shutdown",
            EndReason::ProbeUnresponsive => "probe-unresponsive",
            _ => "session-ended",
        };
        self.book
            .resolve_where(|_| true, CommandKind::Unspecified, by);
        self.holds.clear();
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
        self.span.end(|| {
            vec![
                KeyValue::new(
                    "stepd.session.end_reason",
                    stepd_proto::short_name(reason.as_str_name()),
                ),
                KeyValue::new("stepd.session.end_detail", detail.clone()),
            ]
        });
        self.publish(Payload::SessionEnded(SessionEnded {
            reason: reason.into(),
            detail,
            exit_code: None,
            signal: String::new(),
        }));
    }
}

impl PauseOwner for ProbeSession {
    type Data = Held;
    const PROMPT: &'static str = "Expression to evaluate at the held point";

    fn book(&mut self) -> &mut PauseBook<Held> {
        &mut self.book
    }

    async fn go(&mut self, key: &str, go: Go, command: CommandKind, by: &str) -> ApiResult<()> {
        // Everything that can refuse the command is decided before anything changes.
        let (mode, mut decision) = self.next_mode(key, &go)?;
        let value = match &go {
            Go::Inject(replacement) => Some(self.injected(key, replacement.clone())?),
            _ => None,
        };
        if value.is_some() {
            decision = ResumeDecision::Replace;
        }
        // The Resume must reach the probe's stream, or nothing changes.
        let permit = self.reserve()?;
        // SKIP and QUIT leave the mode, and the request it is about, as they were.
        let scope = match go {
            Go::Skip | Go::Quit => self.mode.scope.clone(),
            _ => self.scope_of(key),
        };
        match go {
            Go::Quit => self.quitting = true,
            Go::ContinueAll if scope.is_empty() => self.notify(
                NotificationLevel::Warning,
                "CONTINUE_ALL: no holds until the top-level scope ends",
            ),
            Go::ContinueAll => self.notify(
                NotificationLevel::Warning,
                &format!(
                    "CONTINUE_ALL: no holds in the request carrying baggage {} until its \
                     top-level scope ends; other requests hold at their breakpoints",
                    request_scope::display(&scope)
                ),
            ),
            _ => {}
        }
        self.set_mode(mode, scope);
        self.release(key, decision, value, command, by, Some(permit))
            .await;
        Ok(())
    }

    async fn eval(&mut self, key: &str, code: String, by: &str, reply: Reply) {
        let Some(hit_id) = self.book.get(key).map(|e| e.data.hit.hit_id.clone()) else {
            let _ = reply.send(Err(self.book.gone(key)));
            return;
        };
        let eval_id = uuid::Uuid::now_v7().simple().to_string();
        let permit = match self.reserve() {
            Ok(permit) => permit,
            Err(error) => {
                let _ = reply.send(Err(error.with("key", key)));
                return;
            }
        };
        self.out.send_reserved(
            permit,
            Out::Eval(Eval {
                hit_id,
                eval_id: eval_id.clone(),
                code: code.clone(),
            }),
        );
        self.evals.insert(
            eval_id,
            PendingEval {
                key: key.to_owned(),
                code,
                by: by.to_owned(),
                reply,
                deadline: Instant::now() + EVAL_DEADLINE,
            },
        );
    }

    async fn render(&mut self, key: &str, target: PauseTarget) -> ApiResult<Rendering> {
        let pause = self
            .book
            .get(key)
            .map(|e| e.pause.clone())
            .ok_or_else(|| self.book.gone(key))?;
        let root = super::inspect::pause_node(&pause, &target)?;
        self.ctx.inspectors.open(pause.session_id, root, None).await
    }

    async fn stack(&mut self, key: &str) -> (Vec<Frame>, Vec<Cause>) {
        let frames = self.book.get(key).map(|e| {
            e.data
                .hit
                .stack
                .iter()
                .enumerate()
                .map(|(i, l)| Frame {
                    id: format!("probe.{i}"),
                    name: l.function.clone(),
                    location: Some(l.clone()),
                    presentation_hint: String::new(),
                })
                .collect()
        });
        (frames.unwrap_or_default(), Vec::new())
    }
}

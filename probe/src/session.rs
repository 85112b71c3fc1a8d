//! One probe session: the actor behind a `ProbeService.Connect` stream. It owns
//! the probe's arming, its held points (each a pause), evaluations in flight
//! and how the session ends. The probe decides locally which points hold; the
//! actor only tells it how (`Armed`) and answers the holds (`Resume`).
//!
//! The actor observes, asks its parts and acts: `transport` (the stream's
//! outbound side, heartbeats, a probe that stops reading), `arming` (the
//! breakpoints the probe is sent), `mode`, `hits` (what a point becomes),
//! `holds` (held points and their limits), `evals` and `waiters` (who waits
//! for the probe). What the probe sends is served in `from_probe`, what
//! clients ask in `clients`.

mod clients;
mod from_probe;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use opentelemetry::KeyValue;
use stepd_proto::v1::{
    Armed, BaggageEntry, ConnectRequest, EndReason, Hello, Hit, HitRefused, Notification,
    NotificationLevel, Resume, ResumeDecision, Session, SessionEnded, SessionKind, SessionStarted,
    SessionState, connect_response::Message as Out, event::Payload,
};
use tokio::{
    sync::{mpsc, oneshot},
    time::{Instant, sleep_until},
};
use tokio_stream::{Stream, StreamExt};
use tonic::Status;

use super::arming::Arming;
use super::evals::Evals;
use super::holds::Holds;
use super::mode::{Mode, ModeState};
use super::outbox::{self, Permit};
use super::transport::{self, Transport};
use super::waiters::Waiters;
use stepd_core::{
    error::ApiError,
    session::{
        Context, Mailbox,
        output::OutputBuffer,
        pause::{
            Answer,
            answer::{self},
            book::PauseBook,
        },
    },
    time::{now_timestamp, now_us},
};

/// What the session keeps beside each held point's pause.
pub struct Held {
    hit: Hit,
    deadline: Instant,
    /// The request the hold is known to be in (`request_scope.rs`); a mode
    /// chosen at it is about that request only. Empty = not known.
    scope: Vec<BaggageEntry>,
}

/// The actor of one probe session.
pub struct ProbeSession {
    ctx: Context,
    /// The session id.
    id: String,
    hello: Hello,
    session: Session,
    /// The probe's stream, outbound: control messages are never dropped.
    transport: Transport,
    commands: Mailbox,
    answers: mpsc::Receiver<Answer>,
    /// The mode and the request it is about.
    mode: ModeState,
    /// The probe breakpoints the probe is armed with.
    arming: Arming,
    /// The held points, each a pause.
    book: PauseBook<Held>,
    /// The held points by hit id, and their limits.
    holds: Holds,
    /// Evaluations sent to the probe, and who waits for each.
    evals: Evals,
    /// Pause requests waiting for the next hold.
    waiters: Waiters,
    hold_limit: Duration,
    /// How many holds may be pending at once.
    max_pauses: usize,
    dropped_reports: u64,
    /// A QUIT was answered: the disconnect that follows is its end.
    quitting: bool,
    ended: bool,
    /// The session's output: what LOG breakpoints wrote.
    output: Arc<Mutex<OutputBuffer>>,
    /// The session's span, from Hello to the end.
    span: stepd_core::trace::Span,
}

/// How long a reconnected probe's new session waits for its old one to end
/// before it welcomes the probe (and so before the probe re-reports holds).
const OLD_SESSION_WAIT: Duration = Duration::from_secs(5);

impl ProbeSession {
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
        let heartbeat = transport::heartbeat_interval(&hello, settings.heartbeat_interval);
        let (mut book, answers) = PauseBook::new(
            id.clone(),
            ctx.pauses.clone(),
            ctx.bus.clone(),
            ctx.redactor.clone(),
        );
        let span = session_span(&id, &hello);
        book.set_trace_parent(&span);
        let session = session_of(&ctx, &id, &hello, &span, previous_session_id);
        Self {
            ctx,
            id,
            hello,
            session,
            transport: Transport::new(out, heartbeat),
            commands,
            answers,
            mode: ModeState::default(),
            arming: Arming::default(),
            book,
            holds: Holds::default(),
            evals: Evals::default(),
            waiters: Waiters::default(),
            hold_limit: settings.hold_limit,
            max_pauses: settings.max_pauses,
            dropped_reports: 0,
            quitting: false,
            ended: false,
            output,
            span,
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

    fn notify(&self, level: NotificationLevel, message: &str) {
        self.publish(Payload::Notification(Notification {
            level: level.into(),
            message: message.to_owned(),
        }));
    }

    /// Welcomes the probe, then serves its stream until it or the session
    /// ends. `old_ended` hears when the session this probe had before ends.
    pub async fn run<S>(mut self, mut inbound: S, old_ended: Option<oneshot::Receiver<()>>)
    where
        S: Stream<Item = Result<ConnectRequest, Status>> + Unpin,
    {
        self.welcome(old_ended).await;
        // One timer for the session, moved on only when it fires: a busy
        // stream pays nothing for its heartbeats.
        let heartbeat = tokio::time::sleep(self.transport.heartbeat());
        tokio::pin!(heartbeat);
        while !self.ended {
            self.note_reading();
            let deadline = self.next_deadline();
            tokio::select! {
                // A probe that leaves its answers unread is not read either.
                message = inbound.next(), if self.transport.reading() => self.on_stream(message).await,
                Some(command) = self.commands.recv() => self.on_command(command).await,
                Some(answer) = self.answers.recv() => answer::answer(&mut self, answer).await,
                Some(permit) = self.transport.room(), if self.transport.waiting_for_room() => self.transport.on_room(permit),
                () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => self.on_deadline().await,
                () = &mut heartbeat => {
                    let next = self.transport.on_heartbeat_timer(self.ctx.bus.last_seq());
                    heartbeat.as_mut().reset(next);
                }
            }
        }
    }

    /// Announces the session and sends the probe its Welcome, once the
    /// session it had before (`old_ended`) has ended.
    async fn welcome(&mut self, old_ended: Option<oneshot::Receiver<()>>) {
        if let Some(ended) = old_ended {
            // The probe re-reports its holds right after Welcome: the old
            // session's pauses for them must be gone first.
            let _ = tokio::time::timeout(OLD_SESSION_WAIT, ended).await;
        }
        self.publish(Payload::SessionStarted(Box::new(SessionStarted {
            session: Some(self.session.clone()),
        })));
        let armed = self.armed().await;
        self.transport.send(Out::Welcome(stepd_proto::v1::Welcome {
            session_id: self.id.clone(),
            armed: Some(armed),
            hold_limit: prost_types::Duration::try_from(self.hold_limit).ok(),
            heartbeat_interval: prost_types::Duration::try_from(self.transport.heartbeat()).ok(),
        }));
    }

    /// Tells clients once when the daemon has stopped reading a probe that
    /// leaves its answers unread, so a watcher learns why its reports
    /// stopped and its answers are refused.
    fn note_reading(&mut self) {
        if self.transport.note_reading() {
            self.notify(
                NotificationLevel::Warning,
                "the probe is not reading its stream: the daemon stops reading it, and \
                 answers to its holds are refused with PROBE_NOT_READING until it reads again",
            );
        }
    }

    /// What the probe's stream brought: a message, or its end.
    async fn on_stream(&mut self, message: Option<Result<ConnectRequest, Status>>) {
        match message {
            Some(Ok(request)) => self.on_probe(request).await,
            Some(Err(status)) => {
                let detail = format!("the probe's stream failed: {}", status.message());
                self.end(self.gone_reason(), detail).await;
            }
            None => {
                self.end(self.gone_reason(), "the probe disconnected".into())
                    .await
            }
        }
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
        [
            self.holds.next_deadline(),
            self.evals.next_deadline(),
            self.waiters.next_deadline(),
            self.transport.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    // ----- arming ---------------------------------------------------------

    /// The probe's arming: the mode, and the probe breakpoints that apply to
    /// it, listed again when `arming` says they may have changed.
    async fn armed(&mut self) -> Armed {
        if self.arming.stale(now_us()) {
            let breakpoints = self.ctx.breakpoints.applying_to(&self.hello.labels).await;
            self.arming.listed(breakpoints);
        }
        self.arming.armed(&self.mode)
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
        self.transport.send(Out::Armed(armed));
    }

    // ----- to the probe -----------------------------------------------------

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
        self.transport.send_through(permit, resume);
    }

    /// Answers a Hit that does not hold with why; the stream goes on.
    fn refuse(&mut self, hit_id: &str, error: &ApiError) {
        tracing::debug!(session = %self.id, hit_id, %error, "hit refused");
        self.transport.send(Out::Refused(HitRefused {
            hit_id: hit_id.to_owned(),
            error: Some(error.to_stream_error("")),
        }));
    }

    // ----- time and the end -------------------------------------------------

    async fn on_deadline(&mut self) {
        let now = Instant::now();
        if let Some(detail) = self.transport.gone(now) {
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
                stepd_proto::v1::CommandKind::Continue,
                "hold-limit",
                None,
            )
            .await;
        }
        self.evals.expire(now);
        self.waiters.expire(now, self.session.state);
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
            .resolve_where(|_| true, stepd_proto::v1::CommandKind::Unspecified, by);
        self.holds.clear();
        self.evals.end();
        self.waiters.end(reason);
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

/// The session's span: a child of the program's span at connect time when
/// the Hello names one, else of the Connect call, whose span is current here.
fn session_span(id: &str, hello: &Hello) -> stepd_core::trace::Span {
    let remote = stepd_core::trace::Remote {
        traceparent: &hello.traceparent,
        tracestate: &hello.tracestate,
    };
    stepd_core::trace::Span::start_under(
        "session",
        remote,
        &stepd_core::trace::Span::current_rpc(),
        || {
            vec![
                KeyValue::new("stepd.session.id", id.to_owned()),
                KeyValue::new(
                    "stepd.session.kind",
                    stepd_proto::short_name(SessionKind::Probe.as_str_name()),
                ),
                KeyValue::new("stepd.probe.name", hello.name.clone()),
                KeyValue::new("stepd.probe.language", hello.language.clone()),
                KeyValue::new("process.pid", hello.pid),
            ]
        },
    )
}

/// The session as clients see it, for a probe that said `hello`.
fn session_of(
    ctx: &Context,
    id: &str,
    hello: &Hello,
    span: &stepd_core::trace::Span,
    previous_session_id: String,
) -> Session {
    let (trace_id, span_id) = span.ids();
    Session {
        id: id.to_owned(),
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
    }
}

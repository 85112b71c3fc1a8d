//! One session's pending pauses: the pause book both kinds of session keep.
//!
//! The book owns what a pause is while it waits: its record (key, revision,
//! `input_type`, prompt), the kind's own data beside it, its entry in the
//! daemon's [`PauseRegistry`], and every event that tells clients it changed
//! (`stopped` again with a higher revision, `eval_error`, `stack`) or ended
//! (`pause_resolved`). A session's actor changes its pauses only through it,
//! so DAP and probe pauses cannot drift apart.

use std::{collections::HashMap, sync::Arc, time::SystemTime};

use opentelemetry::KeyValue;

use stepd_proto::v1::{
    Cause, CommandKind, DebugCommand, DisplayValue, ErrorReason, EvalError, Evaluation, Frame,
    Pause, Rendering, SendDebugInputResponse, Stack, Stopped, event::Payload,
};
use tokio::sync::mpsc;

use super::{ANSWER_QUEUE, Answer, Decided, PauseRegistry, span};
use crate::{
    error::{ApiError, ApiResult},
    events::EventBus,
    redact::{Redactor, last_name, masked},
    trace,
};

/// The target of pause logs, as documented (`RUST_LOG=…,stepd::session::pause=debug`):
/// the daemon's documented log targets stay put whichever crate logs them.
const LOG_TARGET: &str = "stepd::session::pause";

/// What a pause waits for after EVAL or INSPECT_PROMPT came without code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Awaiting {
    /// The expression is evaluated and shown as `debug_value`.
    Eval,
    /// The expression is evaluated and opened in an inspector.
    Inspect,
}

/// An EXPRESSION prompt in place of a pause's commands.
#[derive(Debug)]
struct Prompt {
    awaiting: Awaiting,
    /// The commands the prompt replaced, given back with the expression.
    offered: Vec<i32>,
}

/// One pending pause and what its session keeps beside it.
#[derive(Debug)]
pub struct Entry<T> {
    /// The pause as clients see it.
    pub pause: Pause,
    /// The kind's own data (a DAP frame, a probe's hit).
    pub data: T,
    prompt: Option<Prompt>,
    /// The pause's span, open while it is held.
    span: trace::Span,
    /// When it was opened: the hold's duration is measured from here.
    opened: std::time::Instant,
    /// The answer being carried out (masked) and the client giving it:
    /// `pause_resolved` records both when this pause resolves by it.
    decision: Option<Decided>,
}

/// The pending pauses of one session.
pub struct PauseBook<T> {
    session_id: String,
    registry: Arc<PauseRegistry>,
    bus: Arc<EventBus>,
    /// Masks secrets before a pause is kept or sent.
    redactor: Arc<Redactor>,
    answers: mpsc::Sender<Answer>,
    entries: HashMap<String, Entry<T>>,
    /// The session's span, parent of every pause's.
    trace_parent: trace::Span,
    /// Who started the session: the holds [`Self::try_open`] opens count
    /// toward this identity's cap.
    owner: String,
}

/// A fresh pause key, unique for the daemon's lifetime.
pub fn new_key() -> String {
    format!("p-{}", uuid::Uuid::now_v7().simple())
}

fn created(p: &Pause) -> Option<(i64, i32)> {
    p.created_at.map(|t| (t.seconds, t.nanos))
}

impl<T> PauseBook<T> {
    /// An empty book for session `session_id`, and the queue its answers
    /// arrive on (bounded: a client that floods it is refused).
    pub fn new(
        session_id: String,
        registry: Arc<PauseRegistry>,
        bus: Arc<EventBus>,
        redactor: Arc<Redactor>,
    ) -> (Self, mpsc::Receiver<Answer>) {
        let (answers, inbox) = mpsc::channel(ANSWER_QUEUE);
        let book = Self {
            session_id,
            registry,
            bus,
            redactor,
            answers,
            entries: HashMap::new(),
            trace_parent: trace::Span::none(),
            owner: String::new(),
        };
        (book, inbox)
    }

    /// Who started the session, whose share of pending pauses its holds take.
    pub fn set_owner(&mut self, who: &str) {
        who.clone_into(&mut self.owner);
    }

    /// The session's span: every pause's span is its child.
    pub fn set_trace_parent(&mut self, parent: &trace::Span) {
        self.trace_parent = parent.clone();
    }

    fn publish(&self, payload: Payload) {
        self.bus.publish(&self.session_id, payload);
    }

    /// Opens a pause: registered for answers and sent to every subscriber.
    pub fn open(&mut self, pause: Pause, data: T, all_threads_stopped: bool) {
        let mut pause = self.masked(pause);
        let span = self.traced(&mut pause, trace::Remote::default());
        self.registry.register(pause.clone(), self.answers.clone());
        self.opened(pause, data, span, all_threads_stopped);
    }

    /// Starts the pause's span (export on), a child of the span `remote`
    /// names (a probe's program) or else of the session's, and writes its
    /// ids into the pause.
    fn traced(&self, pause: &mut Pause, remote: trace::Remote<'_>) -> trace::Span {
        if !trace::enabled() {
            return trace::Span::none();
        }
        let span = trace::Span::start_under(span::name(pause), remote, &self.trace_parent, || {
            span::attributes(pause)
        });
        (pause.trace_id, pause.span_id) = span.ids();
        span
    }

    /// A new pause as it may be kept: masked before the registry, the
    /// event ring or any subscriber holds a copy.
    fn masked(&self, mut pause: Pause) -> Pause {
        self.redactor.pause(&mut pause);
        // Said by the pause itself, so a client on any replica knows where
        // it is decided.
        self.bus.instance_id().clone_into(&mut pause.replica_id);
        pause
    }

    /// A registered pause: sent to every subscriber and kept.
    fn opened(&mut self, pause: Pause, data: T, span: trace::Span, all_threads_stopped: bool) {
        let opened = std::time::Instant::now();
        tracing::debug!(target: LOG_TARGET, pause = %pause.key, reason = pause.reason().as_str_name(), "pause opened");
        self.publish(Payload::Stopped(Box::new(Stopped {
            pause: Some(pause.clone()),
            all_threads_stopped,
        })));
        self.entries.insert(
            pause.key.clone(),
            Entry {
                pause,
                data,
                prompt: None,
                span,
                opened,
                decision: None,
            },
        );
    }

    /// Opens a pause unless this book already holds `max` pauses
    /// (`LIMIT_EXCEEDED`, `limit: max_probe_pauses`), the daemon is at its
    /// own cap (`limit: max_pauses`) or the session's owner at its share
    /// (`limit: max_pauses_per_identity`); refused, nothing changes and no
    /// event is sent.
    /// The pause's span is a child of the one `remote` names, when it
    /// names one (the program's span at a probe's point).
    pub fn try_open(
        &mut self,
        pause: Pause,
        data: T,
        max: usize,
        remote: trace::Remote<'_>,
    ) -> ApiResult<()> {
        if self.entries.len() >= max {
            return Err(ApiError::new(
                ErrorReason::LimitExceeded,
                format!(
                    "{max} holds of this probe are pending, the configured maximum; \
                     answer some first"
                ),
            )
            .with("limit", "max_probe_pauses")
            .with("max", max.to_string()));
        }
        let mut pause = self.masked(pause);
        let mut span = self.traced(&mut pause, remote);
        if let Err(err) =
            self.registry
                .try_register(pause.clone(), self.answers.clone(), &self.owner)
        {
            span.fail(err.to_string());
            span.end(|| vec![KeyValue::new("stepd.pause.refused", true)]);
            return Err(err);
        }
        self.opened(pause, data, span, false);
        Ok(())
    }

    /// The pending pause `key` as the book keeps it, masked and with its
    /// trace ids: the copy a reply (a Step's or Continue's stable state)
    /// carries, never the one the session built.
    pub fn kept(&self, key: &str) -> Option<Pause> {
        self.entries.get(key).map(|e| e.pause.clone())
    }

    /// How many pauses are pending.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// A pending pause.
    pub fn get(&self, key: &str) -> Option<&Entry<T>> {
        self.entries.get(key)
    }

    /// The kind's data of a pending pause.
    pub fn data_mut(&mut self, key: &str) -> Option<&mut T> {
        self.entries.get_mut(key).map(|e| &mut e.data)
    }

    /// Every pending pause, in no order.
    pub fn entries(&self) -> impl Iterator<Item = &Entry<T>> {
        self.entries.values()
    }

    /// Whether no pause is pending.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The most recent pause, the one a command without a thread means.
    pub fn latest(&self) -> Option<&Entry<T>> {
        self.entries.values().max_by_key(|e| created(&e.pause))
    }

    /// The error for a key this book does not hold, saying why.
    pub fn gone(&self, key: &str) -> ApiError {
        self.registry.gone(key)
    }

    /// Notes the answer a session is about to carry out at `key`, and the
    /// client's own name for itself (None: it was refused), so that the
    /// pause resolves with both on record.
    pub fn deciding(&mut self, key: &str, decision: Option<(DebugCommand, String)>) {
        if let Some(entry) = self.entries.get_mut(key) {
            entry.decision = decision.map(|(mut command, client)| {
                self.redactor.command(&mut command);
                Decided { command, client }
            });
        }
    }

    /// Resolves one pause: `pause_resolved` names the command and who gave it.
    pub fn resolve(&mut self, key: &str, command: CommandKind, by: &str) -> Option<Entry<T>> {
        self.resolve_at(key, command, by, SystemTime::now())
    }

    /// Resolves one pause whose answer went out at `answered`, before the
    /// book heard of it: its span ends then, not after the program it held
    /// has already gone on.
    pub fn resolve_at(
        &mut self,
        key: &str,
        command: CommandKind,
        by: &str,
        answered: SystemTime,
    ) -> Option<Entry<T>> {
        let mut entry = self.entries.remove(key)?;
        // Only the answer that moved the pause is its decision: a pause
        // dropped meanwhile (its session ended) records none.
        let decision = entry
            .decision
            .take()
            .filter(|_| command != CommandKind::Unspecified);
        self.registry.resolve(key, command, by, decision);
        let held = entry.opened.elapsed();
        tracing::debug!(
            target: LOG_TARGET,
            pause = key,
            command = command.as_str_name(),
            by,
            ?held,
            "pause resolved"
        );
        crate::metrics::hold_ended(held, entry.pause.reason().as_str_name(), command);
        if matches!(command, CommandKind::Inject | CommandKind::Skip) {
            entry
                .span
                .event(stepd_proto::short_name(command.as_str_name()), Vec::new);
        }
        entry.span.end_at(answered, || {
            vec![
                KeyValue::new(
                    "stepd.pause.command",
                    stepd_proto::short_name(command.as_str_name()),
                ),
                KeyValue::new("stepd.pause.resolved_by", by.to_owned()),
            ]
        });
        Some(entry)
    }

    /// Resolves every pause that `which` selects, oldest first.
    pub fn resolve_where(
        &mut self,
        which: impl Fn(&Entry<T>) -> bool,
        command: CommandKind,
        by: &str,
    ) -> Vec<Entry<T>> {
        let mut keys: Vec<(Option<(i64, i32)>, String)> = self
            .entries
            .iter()
            .filter(|(_, e)| which(e))
            .map(|(k, e)| (created(&e.pause), k.clone()))
            .collect();
        keys.sort();
        keys.into_iter()
            .filter_map(|(_, key)| self.resolve(&key, command, by))
            .collect()
    }

    /// Changes a pause and sends it again with a higher revision: the
    /// re-prompt after EVAL, INSPECT, STACKTRACE or an error.
    pub fn revise(&mut self, key: &str, change: impl FnOnce(&mut Pause)) -> Option<Pause> {
        let entry = self.entries.get_mut(key)?;
        change(&mut entry.pause);
        self.redactor.pause(&mut entry.pause);
        entry.pause.revision += 1;
        let pause = entry.pause.clone();
        self.registry.update(pause.clone());
        self.publish(Payload::Stopped(Box::new(Stopped {
            pause: Some(pause.clone()),
            all_threads_stopped: false,
        })));
        Some(pause)
    }

    /// Turns a pause into an EXPRESSION prompt; its commands come back with
    /// the expression ([`Self::take_prompt`]).
    pub fn ask_expression(&mut self, key: &str, awaiting: Awaiting, prompt: &str) -> Option<Pause> {
        let entry = self.entries.get_mut(key)?;
        let offered = std::mem::replace(
            &mut entry.pause.input_type,
            vec![CommandKind::Expression as i32],
        );
        entry.prompt = Some(Prompt { awaiting, offered });
        self.revise(key, |p| p.prompt = prompt.to_owned())
    }

    /// Ends an EXPRESSION prompt: the pause offers its commands again, and
    /// the caller learns what the expression is for.
    pub fn take_prompt(&mut self, key: &str) -> Option<Awaiting> {
        let entry = self.entries.get_mut(key)?;
        let prompt = entry.prompt.take()?;
        entry.pause.input_type = prompt.offered;
        entry.pause.prompt.clear();
        self.registry.update(entry.pause.clone());
        Some(prompt.awaiting)
    }

    /// A failed EVAL, INJECT or INSPECT: an `eval_error` event, the pause
    /// re-prompted as it was, and the error the call fails with.
    pub fn failed(&mut self, key: &str, error: ApiError) -> ApiError {
        self.failed_with(key, error, |_| {})
    }

    /// [`Self::failed`], the re-prompted pause changed by `change` first.
    fn failed_with(
        &mut self,
        key: &str,
        error: ApiError,
        change: impl FnOnce(&mut Pause),
    ) -> ApiError {
        self.publish(Payload::EvalError(EvalError {
            key: key.to_owned(),
            message: error.to_string(),
            causes: Vec::new(),
        }));
        self.revise(key, change);
        error.with("key", key)
    }

    /// The result of an EVAL `by` someone: shown as the pause's
    /// `debug_value`, or a failure (see [`Self::failed`]); either way the
    /// re-sent pause's `evaluation` says what was asked and what came back.
    pub fn evaluated(
        &mut self,
        key: &str,
        expression: &str,
        by: &str,
        result: ApiResult<DisplayValue>,
    ) -> ApiResult<SendDebugInputResponse> {
        let mut evaluation = Evaluation {
            code: self.redactor.text(expression).into_owned(),
            by: by.to_owned(),
            ..Default::default()
        };
        if trace::enabled()
            && let Some(entry) = self.entries.get(key)
        {
            entry.span.event("EVAL", || {
                vec![KeyValue::new("stepd.eval.succeeded", result.is_ok())]
            });
        }
        match result {
            Ok(value) => Ok(response(CommandKind::Eval, {
                let value = if self.redactor.name(last_name(expression)) {
                    masked()
                } else {
                    value
                };
                evaluation.result = Some(value.clone());
                self.revise(key, |p| {
                    p.debug_value = Some(value);
                    p.evaluation = Some(evaluation);
                })
            })),
            Err(error) => {
                evaluation.error = error.to_string();
                Err(self.failed_with(key, error, |p| p.evaluation = Some(evaluation)))
            }
        }
    }

    /// The rendering of INSPECT, INSPECT_PROMPT or LOCALS, shown in the
    /// pause's `inspect`.
    pub fn inspected(
        &mut self,
        key: &str,
        command: CommandKind,
        result: ApiResult<Rendering>,
    ) -> ApiResult<SendDebugInputResponse> {
        match result {
            Ok(rendering) => Ok(response(
                command,
                self.revise(key, |p| p.inspect = Some(rendering)),
            )),
            Err(error) => Err(self.failed(key, error)),
        }
    }

    /// STACKTRACE: a `stack` event, then the pause again.
    pub fn stacked(
        &mut self,
        key: &str,
        frames: Vec<Frame>,
        causes: Vec<Cause>,
    ) -> SendDebugInputResponse {
        self.publish(Payload::Stack(Stack {
            key: key.to_owned(),
            frames,
            causes,
        }));
        response(CommandKind::Stacktrace, self.revise(key, |_| {}))
    }
}

/// The answer to a command after which the pause stays (`pause` as re-sent),
/// or that resolved it (`None`).
pub fn response(command: CommandKind, pause: Option<Pause>) -> SendDebugInputResponse {
    SendDebugInputResponse {
        command: command.into(),
        pause,
    }
}

//! Pending pauses and their answers, shared by DAP and probe sessions.
//!
//! The session that owns a pause registers it with a channel; debug inputs
//! from any client (SendDebugInput or a Subscribe stream) go through
//! [`PauseRegistry::answer`], which enforces the rules every client relies on:
//! an unknown key is PAUSE_NOT_FOUND, a command outside `input_type` is
//! INVALID_COMMAND, and the first answer that moves the program wins — later
//! ones get ALREADY_ANSWERED.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex},
};

use stepd_proto::v1::{
    CommandKind, DebugInput, ErrorReason, Pause, PauseResolved, SendDebugInputResponse,
    debug_command::Command, event::Payload,
};
use tokio::sync::{mpsc, oneshot};

use crate::{
    error::{ApiError, ApiResult},
    events::EventBus,
};

/// Keys of answered pauses remembered to tell ALREADY_ANSWERED from PAUSE_NOT_FOUND.
const ANSWERED_REMEMBERED: usize = 4096;

/// A debug input on its way to the session that owns the pause.
#[derive(Debug)]
pub struct Answer {
    /// The input as sent.
    pub input: DebugInput,
    /// Its command kind.
    pub kind: CommandKind,
    /// Who answered.
    pub by: String,
    /// The owner's reply to the client.
    pub reply: oneshot::Sender<ApiResult<SendDebugInputResponse>>,
}

#[derive(Debug)]
struct Pending {
    pause: Pause,
    owner: mpsc::UnboundedSender<Answer>,
    /// Set once a command that moves the program was accepted.
    claimed: bool,
}

#[derive(Debug, Default)]
struct Inner {
    pending: HashMap<String, Pending>,
    answered: HashSet<String>,
    answered_order: VecDeque<String>,
}

/// Every pending pause of the daemon.
#[derive(Debug)]
pub struct PauseRegistry {
    inner: Mutex<Inner>,
    bus: Arc<EventBus>,
}

/// The kind of a command message.
pub fn kind_of(command: &Command) -> CommandKind {
    use CommandKind as K;
    match command {
        Command::Next(_) => K::Next,
        Command::StepIn(_) => K::In,
        Command::StepOut(_) => K::Out,
        Command::Here(_) => K::Here,
        Command::Resume(_) => K::Continue,
        Command::ContinueScope(_) => K::ContinueScope,
        Command::ContinueAll(_) => K::ContinueAll,
        Command::Trace(_) => K::Trace,
        Command::Eval(_) => K::Eval,
        Command::Inject(_) => K::Inject,
        Command::Skip(_) => K::Skip,
        Command::Inspect(_) => K::Inspect,
        Command::InspectPrompt(_) => K::InspectPrompt,
        Command::Locals(_) => K::Locals,
        Command::Stacktrace(_) => K::Stacktrace,
        Command::Quit(_) => K::Quit,
        Command::Expression(_) => K::Expression,
    }
}

/// Whether a command lets the program move on (and so resolves the pause).
fn moves_program(kind: CommandKind) -> bool {
    use CommandKind as K;
    !matches!(
        kind,
        K::Eval | K::Inspect | K::InspectPrompt | K::Locals | K::Stacktrace | K::Expression
    )
}

impl PauseRegistry {
    /// An empty registry publishing `pause_resolved` on `bus`.
    pub fn new(bus: Arc<EventBus>) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            bus,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a pause owned by the sender's session.
    pub fn register(&self, pause: Pause, owner: mpsc::UnboundedSender<Answer>) {
        let key = pause.key.clone();
        self.lock().pending.insert(
            key,
            Pending {
                pause,
                owner,
                claimed: false,
            },
        );
    }

    /// Pending pauses, oldest first, optionally of one session.
    pub fn list(&self, session_id: Option<&str>) -> Vec<Pause> {
        let mut pauses: Vec<Pause> = self
            .lock()
            .pending
            .values()
            .filter(|p| session_id.is_none_or(|s| p.pause.session_id == s))
            .map(|p| p.pause.clone())
            .collect();
        pauses.sort_by(|a, b| {
            let t = |p: &Pause| p.created_at.map(|t| (t.seconds, t.nanos));
            t(a).cmp(&t(b)).then_with(|| a.key.cmp(&b.key))
        });
        pauses
    }

    /// Routes a debug input to the pause's owner and returns the owner's answer.
    pub async fn answer(&self, input: DebugInput, by: String) -> ApiResult<SendDebugInputResponse> {
        let command = input
            .command
            .as_ref()
            .and_then(|c| c.command.as_ref())
            .ok_or_else(|| ApiError::invalid_field("command", "a command is required"))?;
        let kind = kind_of(command);
        let (reply, answer) = oneshot::channel();
        {
            let mut inner = self.lock();
            let Some(pending) = inner.pending.get_mut(&input.key) else {
                let reason = if inner.answered.contains(&input.key) {
                    ErrorReason::AlreadyAnswered
                } else {
                    ErrorReason::PauseNotFound
                };
                let what = match reason {
                    ErrorReason::AlreadyAnswered => "was already answered",
                    _ => "is not a pending pause",
                };
                return Err(
                    ApiError::new(reason, format!("pause {:?} {what}", input.key))
                        .with("key", input.key.clone()),
                );
            };
            if pending.claimed {
                return Err(ApiError::new(
                    ErrorReason::AlreadyAnswered,
                    format!("pause {:?} was already answered", input.key),
                )
                .with("key", input.key.clone()));
            }
            if !pending.pause.input_type.contains(&(kind as i32)) {
                return Err(ApiError::new(
                    ErrorReason::InvalidCommand,
                    format!(
                        "{} is not valid at pause {:?}; input_type lists the valid commands",
                        kind.as_str_name(),
                        input.key
                    ),
                )
                .with("key", input.key.clone())
                .with("command", kind.as_str_name()));
            }
            if moves_program(kind) {
                pending.claimed = true;
            }
            let key = input.key.clone();
            let sent = pending.owner.send(Answer {
                input,
                kind,
                by,
                reply,
            });
            if sent.is_err() {
                // The owner is gone; its session is ending and will resolve the pause.
                inner.pending.remove(&key);
                return Err(ApiError::new(
                    ErrorReason::PauseNotFound,
                    format!("pause {key:?} ended with its session"),
                )
                .with("key", key));
            }
        }
        answer.await.map_err(|_| {
            ApiError::new(
                ErrorReason::SessionEnded,
                "the session ended while answering",
            )
        })?
    }

    /// Gives a claimed pause back (e.g. an INJECT whose value was refused): it
    /// stays pending and can be answered again.
    pub fn release(&self, key: &str) {
        if let Some(p) = self.lock().pending.get_mut(key) {
            p.claimed = false;
        }
    }

    /// Replaces a pending pause's record (after EVAL, INSPECT, …).
    pub fn update(&self, pause: Pause) {
        if let Some(p) = self.lock().pending.get_mut(&pause.key) {
            p.pause = pause;
        }
    }

    /// Removes a pause and tells every subscriber who resolved it and how.
    pub fn resolve(&self, key: &str, command: CommandKind, by: &str) {
        let removed = {
            let mut inner = self.lock();
            let removed = inner.pending.remove(key);
            if removed.is_some() {
                inner.answered.insert(key.to_owned());
                inner.answered_order.push_back(key.to_owned());
                if inner.answered_order.len() > ANSWERED_REMEMBERED
                    && let Some(old) = inner.answered_order.pop_front()
                {
                    inner.answered.remove(&old);
                }
            }
            removed
        };
        if let Some(p) = removed {
            self.bus.publish(
                &p.pause.session_id,
                Payload::PauseResolved(PauseResolved {
                    key: key.to_owned(),
                    command: command.into(),
                    by: by.to_owned(),
                    thread_id: p.pause.thread_id,
                }),
            );
        }
    }

    /// Number of pending pauses.
    pub fn len(&self) -> usize {
        self.lock().pending.len()
    }

    /// Whether no pause is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use stepd_proto::v1::{DebugCommand, EvalCommand, NextCommand, debug_command::Command};

    use super::*;

    fn input(key: &str, command: Command) -> DebugInput {
        DebugInput {
            key: key.into(),
            command: Some(DebugCommand {
                command: Some(command),
            }),
            client_name: String::new(),
        }
    }

    fn setup() -> (Arc<PauseRegistry>, mpsc::UnboundedReceiver<Answer>) {
        let bus = Arc::new(EventBus::new("i".into(), 1, 8, 8));
        let registry = Arc::new(PauseRegistry::new(bus));
        let (tx, rx) = mpsc::unbounded_channel();
        registry.register(
            Pause {
                key: "k1".into(),
                session_id: "s".into(),
                input_type: vec![CommandKind::Next as i32, CommandKind::Eval as i32],
                ..Default::default()
            },
            tx,
        );
        (registry, rx)
    }

    #[tokio::test]
    async fn unknown_key_and_invalid_command_are_typed_errors() {
        let (registry, _rx) = setup();
        let err = registry
            .answer(input("nope", Command::Next(NextCommand {})), "t".into())
            .await
            .unwrap_err();
        assert_eq!(err.reason(), ErrorReason::PauseNotFound);
        let err = registry
            .answer(input("k1", Command::Skip(Default::default())), "t".into())
            .await
            .unwrap_err();
        assert_eq!(err.reason(), ErrorReason::InvalidCommand);
    }

    #[tokio::test]
    async fn first_answer_wins() {
        let (registry, mut rx) = setup();
        let owner = tokio::spawn({
            let registry = registry.clone();
            async move {
                let answer = rx.recv().await.unwrap();
                registry.resolve(&answer.input.key, answer.kind, &answer.by);
                answer
                    .reply
                    .send(Ok(SendDebugInputResponse {
                        command: answer.kind.into(),
                        pause: None,
                    }))
                    .unwrap();
            }
        });
        let first = registry
            .answer(input("k1", Command::Next(NextCommand {})), "a".into())
            .await;
        assert!(first.is_ok());
        owner.await.unwrap();
        let second = registry
            .answer(
                input("k1", Command::Eval(EvalCommand { code: "x".into() })),
                "b".into(),
            )
            .await
            .unwrap_err();
        assert_eq!(second.reason(), ErrorReason::AlreadyAnswered);
        assert!(registry.is_empty());
    }
}

//! Pending pauses and their answers, shared by DAP and probe sessions.
//!
//! Each session keeps its own pauses in a [`book::PauseBook`], which
//! registers them here; debug inputs from any client (SendDebugInput or a
//! Subscribe stream) go through [`PauseRegistry::answer`], which checks the
//! key and `input_type` and hands the input to the owning session's actor.
//! The actor takes answers one at a time, so the first answer that moves the
//! program resolves the pause before a second is even looked at: nothing is
//! claimed here, so a refused answer cannot leave a pause half-answered.

pub mod answer;
pub mod book;
pub mod display;
mod span;

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
};

use stepd_proto::v1::{
    CommandKind, DebugCommand, DebugInput, ErrorReason, Pause, PauseResolved,
    SendDebugInputResponse, debug_command::Command, event::Payload,
};
use tokio::sync::{mpsc, oneshot};

use crate::{
    error::{ApiError, ApiResult},
    events::EventBus,
};

/// Ends of pauses remembered to say why a key is no longer pending.
const ENDS_REMEMBERED: usize = 4096;

/// Answers queued for one session before further ones are refused.
pub const ANSWER_QUEUE: usize = 64;

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

/// How a pause stopped being pending.
#[derive(Debug, Clone)]
struct Ending {
    command: CommandKind,
    by: String,
    /// The answering client's own name, beside `by` (its identity).
    client: String,
}

/// The answer that moved a pause: the command whole (masked) and the
/// answering client's own name for itself.
#[derive(Debug, Clone, Default)]
pub struct Decided {
    /// The command, masked as `--redact` says.
    pub command: DebugCommand,
    /// `DebugInput.client_name`, or its stream's or connection's.
    pub client: String,
}

#[derive(Debug)]
struct Pending {
    pause: Pause,
    owner: mpsc::Sender<Answer>,
    /// The identity whose share this pause takes (refusable holds only).
    counted_for: Option<String>,
}

#[derive(Debug, Default)]
struct Inner {
    pending: HashMap<String, Pending>,
    /// Pending refusable holds by the identity that started their session.
    by_identity: HashMap<String, usize>,
    ended: HashMap<String, Ending>,
    ended_order: VecDeque<String>,
}

/// Every pending pause of the daemon.
#[derive(Debug)]
pub struct PauseRegistry {
    inner: Mutex<Inner>,
    bus: Arc<EventBus>,
    /// Most pauses [`Self::try_register`] lets be pending.
    max_pending: usize,
    /// Most of them in the sessions of one identity.
    max_per_identity: usize,
}

/// The kind of a command message.
pub fn kind_of(command: &Command) -> CommandKind {
    use CommandKind as K;
    match command {
        Command::Next(_) => K::Next,
        Command::StepIn(_) => K::In,
        Command::StepOut(_) => K::Out,
        Command::Here(_) => K::Here,
        Command::Resume(_) | Command::Continue(_) => K::Continue,
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
        Command::Jump(_) => K::Jump,
    }
}

impl PauseRegistry {
    /// An empty registry publishing `pause_resolved` on `bus`.
    pub fn new(bus: Arc<EventBus>) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            bus,
            max_pending: usize::MAX,
            max_per_identity: usize::MAX,
        }
    }

    /// The registry with caps on pending pauses, in the daemon and per
    /// identity, that [`Self::try_register`] enforces.
    pub fn with_max_pending(mut self, max: usize, per_identity: usize) -> Self {
        self.max_pending = max;
        self.max_per_identity = per_identity;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a pause owned by the sender's session.
    pub fn register(&self, pause: Pause, owner: mpsc::Sender<Answer>) {
        let key = pause.key.clone();
        self.lock().pending.insert(
            key,
            Pending {
                pause,
                owner,
                counted_for: None,
            },
        );
    }

    /// Registers a pause unless the daemon's cap on pending pauses is
    /// reached (`LIMIT_EXCEEDED`, `limit: max_pauses`) or identity `who`'s
    /// share is (`limit: max_pauses_per_identity`); checked under the same
    /// lock that registers it, so concurrent sessions cannot overshoot.
    pub fn try_register(
        &self,
        pause: Pause,
        owner: mpsc::Sender<Answer>,
        who: &str,
    ) -> ApiResult<()> {
        let mut inner = self.lock();
        if inner.pending.len() >= self.max_pending {
            return Err(ApiError::new(
                ErrorReason::LimitExceeded,
                format!(
                    "{} pauses are pending in the daemon, the configured maximum; \
                     answer some first",
                    self.max_pending
                ),
            )
            .with("limit", "max_pauses")
            .with("max", self.max_pending.to_string()));
        }
        let held = inner.by_identity.get(who).copied().unwrap_or(0);
        if held >= self.max_per_identity {
            return Err(ApiError::new(
                ErrorReason::LimitExceeded,
                format!(
                    "{} holds are pending in the sessions of {}, the most one identity may have; \
                     answer some first",
                    self.max_per_identity,
                    crate::error::clip(who)
                ),
            )
            .with("limit", "max_pauses_per_identity")
            .with("max", self.max_per_identity.to_string())
            .with("identity", crate::error::clip(who)));
        }
        *inner.by_identity.entry(who.to_owned()).or_insert(0) += 1;
        inner.pending.insert(
            pause.key.clone(),
            Pending {
                pause,
                owner,
                counted_for: Some(who.to_owned()),
            },
        );
        Ok(())
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

    /// A pending pause by key.
    pub fn get(&self, key: &str) -> Option<Pause> {
        self.lock().pending.get(key).map(|p| p.pause.clone())
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
            let inner = self.lock();
            let Some(pending) = inner.pending.get(&input.key) else {
                return Err(gone(&inner, &input.key));
            };
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
            let key = input.key.clone();
            let sent = pending.owner.try_send(Answer {
                input,
                kind,
                by,
                reply,
            });
            match sent {
                Ok(()) => self.bus.counters().command(kind),
                Err(mpsc::error::TrySendError::Full(_)) => {
                    return Err(ApiError::new(
                        ErrorReason::LimitExceeded,
                        format!(
                            "{ANSWER_QUEUE} answers are already queued for this session; \
                             wait for them"
                        ),
                    )
                    .with("key", key)
                    .with("limit", "answer_queue"));
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    // The owner is gone; its session is ending and resolves the pause.
                    return Err(ApiError::new(
                        ErrorReason::SessionEnded,
                        format!("pause {key:?} ended with its session"),
                    )
                    .with("key", key));
                }
            }
        }
        answer.await.map_err(|_| {
            ApiError::new(
                ErrorReason::SessionEnded,
                "the session ended while answering",
            )
        })?
    }

    /// The error for a key that is not pending: why it is not.
    pub fn gone(&self, key: &str) -> ApiError {
        gone(&self.lock(), key)
    }

    /// Replaces a pending pause's record (after EVAL, INSPECT, …).
    pub fn update(&self, pause: Pause) {
        if let Some(p) = self.lock().pending.get_mut(&pause.key) {
            p.pause = pause;
        }
    }

    /// Removes a pause and tells every subscriber who resolved it and how.
    /// `CommandKind::Unspecified` means nobody answered it (its session
    /// ended, its program withdrew it, its thread stopped again).
    /// `decision` is the answer whole, masked, when one moved it.
    pub fn resolve(&self, key: &str, command: CommandKind, by: &str, decision: Option<Decided>) {
        let (decision, client) = match decision {
            Some(Decided { command, client }) => (Some(command), client),
            None => (None, String::new()),
        };
        let removed = {
            let mut inner = self.lock();
            let removed = inner.pending.remove(key);
            if let Some(who) = removed.as_ref().and_then(|p| p.counted_for.as_deref())
                && let Some(n) = inner.by_identity.get_mut(who)
            {
                *n -= 1;
                if *n == 0 {
                    inner.by_identity.remove(who);
                }
            }
            if removed.is_some() {
                inner.ended.insert(
                    key.to_owned(),
                    Ending {
                        command,
                        by: by.to_owned(),
                        client: client.clone(),
                    },
                );
                inner.ended_order.push_back(key.to_owned());
                if inner.ended_order.len() > ENDS_REMEMBERED
                    && let Some(old) = inner.ended_order.pop_front()
                {
                    inner.ended.remove(&old);
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
                    decision,
                    client_name: client,
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

/// Why `key` is not pending: answered (ALREADY_ANSWERED), ended with its
/// session (SESSION_ENDED), dropped otherwise or never known (PAUSE_NOT_FOUND).
fn gone(inner: &Inner, key: &str) -> ApiError {
    let error = match inner.ended.get(key) {
        Some(Ending {
            command,
            by,
            client,
        }) if *command != CommandKind::Unspecified => ApiError::new(
            ErrorReason::AlreadyAnswered,
            format!(
                "pause {} was already answered ({} by {by}{})",
                crate::error::quote(key),
                command.as_str_name(),
                if client.is_empty() {
                    String::new()
                } else {
                    format!(", client {}", crate::error::quote(client))
                }
            ),
        )
        .with("by", by.as_str())
        .with("client_name", client.as_str()),
        Some(Ending { by, .. }) if by == "disconnect" || by == "session-ended" => ApiError::new(
            ErrorReason::SessionEnded,
            format!(
                "pause {} ended with its session ({by}); nobody answered it",
                crate::error::quote(key)
            ),
        ),
        Some(Ending { by, .. }) => ApiError::new(
            ErrorReason::PauseNotFound,
            format!(
                "pause {} is no longer pending ({by}); nobody answered it",
                crate::error::quote(key)
            ),
        ),
        None => ApiError::new(
            ErrorReason::PauseNotFound,
            format!("pause {} is not a pending pause", crate::error::quote(key)),
        ),
    };
    error.with("key", crate::error::clip(key))
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

    fn setup() -> (Arc<PauseRegistry>, mpsc::Receiver<Answer>) {
        let bus = Arc::new(EventBus::new("i".into(), 1, 8, 8));
        let registry = Arc::new(PauseRegistry::new(bus));
        let (tx, rx) = mpsc::channel(8);
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
                registry.resolve(&answer.input.key, answer.kind, &answer.by, None);
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

    #[test]
    fn a_pause_nobody_answered_is_not_already_answered() {
        for (by, reason) in [
            ("disconnect", ErrorReason::SessionEnded),
            ("session-ended", ErrorReason::SessionEnded),
            ("withdrawn", ErrorReason::PauseNotFound),
            ("stopped again", ErrorReason::PauseNotFound),
        ] {
            let (registry, _rx) = setup();
            registry.resolve("k1", CommandKind::Unspecified, by, None);
            assert_eq!(registry.gone("k1").reason(), reason, "{by}");
        }
        let (registry, _rx) = setup();
        registry.resolve("k1", CommandKind::Continue, "hold-limit", None);
        assert_eq!(registry.gone("k1").reason(), ErrorReason::AlreadyAnswered);
    }

    #[tokio::test]
    async fn a_full_answer_queue_is_refused() {
        let bus = Arc::new(EventBus::new("i".into(), 1, 8, 8));
        let registry = PauseRegistry::new(bus);
        let (tx, _rx) = mpsc::channel(1);
        registry.register(
            Pause {
                key: "k".into(),
                input_type: vec![CommandKind::Next as i32],
                ..Default::default()
            },
            tx,
        );
        // The first answer waits in the queue for an owner that never reads.
        let waiting = registry.answer(input("k", Command::Next(NextCommand {})), "a".into());
        tokio::pin!(waiting);
        assert!(futures_poll_once(waiting.as_mut()).await);
        let err = registry
            .answer(input("k", Command::Next(NextCommand {})), "b".into())
            .await
            .unwrap_err();
        assert_eq!(err.reason(), ErrorReason::LimitExceeded);
    }

    /// Polls a future once; true while it is still pending.
    async fn futures_poll_once<F: std::future::Future + Unpin>(mut f: F) -> bool {
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::pin::Pin::new(&mut f).poll(cx).is_pending())
        })
        .await
    }
}

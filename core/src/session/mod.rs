//! Sessions, whatever their kind: the registry of live sessions, the
//! commands their actors take, the pause book both kinds keep (`pause`) and
//! where an inspector's value comes from (`values`). DAP sessions
//! (`crate::dap_session`) and probe sessions (`crate::probe`) are built
//! beside this core: each runs one actor task and implements
//! [`SessionPort`]; nothing here knows either kind.

pub mod output;
pub mod pause;
mod port;
/// A session entered in the registry before its actor runs, so the events
/// its start publishes (`session_started`, a stop on entry, a first
/// breakpoint) name a session a client can already reach. It holds the
/// session's slot from the start, so a start past a cap is refused before
/// anything is spawned; the slot then lives in the actor's mailbox and is
/// freed when the actor ends. Dropped before [`Registration::keep`] (a
/// start that failed, or whose caller left), the session is taken out
/// again.
pub struct Registration {
    sessions: Arc<Sessions>,
    slot: Option<Slot>,
    id: Option<String>,
}

impl Registration {
    /// A slot for a session started by identity `who`, or `LIMIT_EXCEEDED`
    /// when the daemon or `who` runs as many sessions as allowed.
    pub fn new(sessions: Arc<Sessions>, who: &str) -> ApiResult<Self> {
        let slot = sessions.slots.take(who)?;
        Ok(Self {
            sessions,
            slot: Some(slot),
            id: None,
        })
    }

    /// Registers the session about to run, served by `port`; its actor's
    /// side of the mailbox, which carries the slot.
    pub fn register(&mut self, port: Arc<dyn SessionPort>) -> Mailbox {
        let (handle, mut mailbox) = mailbox(port);
        mailbox._slot = self.slot.take();
        self.id = Some(handle.id().to_owned());
        self.sessions.insert(handle);
        mailbox
    }

    /// The session started: it stays.
    pub fn keep(mut self) {
        self.id = None;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.sessions.remove(&id);
        }
    }
}

pub mod values;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU8, Ordering},
    },
    time::Duration,
};

use stepd_proto::v1::{
    CommandKind, DisconnectMode, ErrorReason, SessionKind, StableState, StepKind,
};
use tokio::sync::{mpsc, oneshot};

pub use port::{Fut, PauseTarget, SessionPort};

use crate::{
    breakpoints::Breakpoints,
    error::{ApiError, ApiResult},
    events::EventBus,
    inspector::Inspectors,
    session::pause::PauseRegistry,
    slots::{Slot, Slots},
};

/// What every session needs from the daemon.
#[derive(Clone)]
pub struct Context {
    /// Events.
    pub bus: Arc<EventBus>,
    /// Pending pauses.
    pub pauses: Arc<PauseRegistry>,
    /// Breakpoints to apply.
    pub breakpoints: Arc<Breakpoints>,
    /// The daemon's inspectors, for INSPECT, INSPECT_PROMPT and LOCALS.
    pub inspectors: Arc<Inspectors>,
    /// Masks secrets before anything leaves the daemon.
    pub redactor: Arc<crate::redact::Redactor>,
}

/// Execution requests, serialised by the actor.
#[derive(Debug, Clone, Copy)]
pub enum ExecOp {
    /// Resume (thread 0 = all).
    Continue(i64),
    /// Step one thread (0 = the thread of the latest pause).
    Step(i64, StepKind),
    /// Interrupt (thread 0 = all).
    Pause(i64),
}

impl ExecOp {
    /// The command an execution request is, as pause resolutions and the
    /// metrics name it (a Pause request is none).
    pub fn command_kind(&self) -> CommandKind {
        match self {
            Self::Continue(_) => CommandKind::Continue,
            Self::Step(_, StepKind::In) => CommandKind::In,
            Self::Step(_, StepKind::Out) => CommandKind::Out,
            Self::Step(..) => CommandKind::Next,
            Self::Pause(_) => CommandKind::Unspecified,
        }
    }
}

/// When an execution request answers.
#[derive(Debug, Clone, Copy)]
pub enum WaitMode {
    /// As soon as the adapter accepted it.
    NoWait,
    /// When the session is stable again, or after the timeout (None = never).
    UntilStable(Option<Duration>),
}

/// A message to a session actor.
#[derive(Debug)]
pub enum Command {
    /// Continue, Step or Pause.
    Exec {
        /// What to do.
        op: ExecOp,
        /// When to answer.
        wait: WaitMode,
        /// The answer.
        reply: oneshot::Sender<ApiResult<StableState>>,
    },
    /// The project's breakpoints changed: apply them again (see [`Mailbox`]).
    Reapply,
    /// The session's program connected again, as session `by`, here or on
    /// another replica: end as if its connection had ended. `ended` is told
    /// once it has, so the new session re-reports what it holds only after
    /// the old pauses are gone. A kind whose programs do not reconnect
    /// ignores it.
    TakenOver {
        /// The new session's id.
        by: String,
        /// Told once this session has ended.
        ended: oneshot::Sender<()>,
    },
    /// The daemon shuts down: end the session as its kind ends then. A DAP
    /// session ends as for a `Disconnect` without a mode; a probe is told
    /// to reconnect and its holds end without a Resume, so its program
    /// keeps waiting and re-reports them to the next daemon.
    Shutdown {
        /// Done.
        reply: oneshot::Sender<ApiResult<()>>,
    },
    /// End the session.
    Disconnect {
        /// Terminate or detach.
        mode: DisconnectMode,
        /// Done.
        reply: oneshot::Sender<ApiResult<()>>,
    },
}

/// Commands queued for one actor before further ones are refused.
pub const MAILBOX: usize = 64;

/// An actor's side of its mailbox. Breakpoint changes arrive apart from
/// the bounded command queue, as one coalesced `Reapply`, so a full queue
/// never loses one: a flag carries the change, and a `Reapply` message on
/// the queue only wakes the actor. At most one such wake-up waits in the
/// queue, so changes never crowd out the commands it is bounded for.
pub struct Mailbox {
    commands: mpsc::Receiver<Command>,
    reapply: Arc<AtomicU8>,
    /// The session's slot under the session caps, freed with the actor.
    _slot: Option<Slot>,
}

/// In `reapply`: a breakpoint change the actor has not taken yet.
const CHANGED: u8 = 1;
/// In `reapply`: a `Reapply` wake-up is in the queue, so a further change
/// needs none of its own.
const WAKE_QUEUED: u8 = 2;

impl Mailbox {
    /// The next command; `None` once every handle is gone. A flag rather
    /// than a `Notify` (decision 46): the actor asks once per message.
    pub async fn recv(&mut self) -> Option<Command> {
        loop {
            if self.reapply.load(Ordering::Acquire) & CHANGED != 0
                && self.reapply.fetch_and(!CHANGED, Ordering::AcqRel) & CHANGED != 0
            {
                return Some(Command::Reapply);
            }
            match self.commands.recv().await? {
                // A wake-up: the change it was sent for is in the flag,
                // checked again above (or already taken).
                Command::Reapply => {
                    self.reapply.fetch_and(!WAKE_QUEUED, Ordering::AcqRel);
                }
                command => return Some(command),
            }
        }
    }
}

/// A new mailbox: the actor's side, and the handle's.
pub fn mailbox(port: Arc<dyn SessionPort>) -> (SessionHandle, Mailbox) {
    let (commands, inbox) = mpsc::channel(MAILBOX);
    let reapply = Arc::new(AtomicU8::new(0));
    let handle = SessionHandle {
        port,
        commands,
        reapply: reapply.clone(),
    };
    let mailbox = Mailbox {
        commands: inbox,
        reapply,
        _slot: None,
    };
    (handle, mailbox)
}

/// A live session, as the API sees it: its actor's mailbox and its port.
#[derive(Clone)]
pub struct SessionHandle {
    /// The inspection paths.
    pub port: Arc<dyn SessionPort>,
    commands: mpsc::Sender<Command>,
    reapply: Arc<AtomicU8>,
}

impl SessionHandle {
    /// The session id.
    pub fn id(&self) -> &str {
        self.port.id()
    }

    /// Sends the actor a message: SESSION_ENDED once it is gone,
    /// LIMIT_EXCEEDED while its queue is full.
    pub fn send(&self, command: Command) -> ApiResult<()> {
        self.commands.try_send(command).map_err(|err| match err {
            mpsc::error::TrySendError::Full(_) => ApiError::new(
                ErrorReason::LimitExceeded,
                format!(
                    "{MAILBOX} requests are already queued for session {}",
                    self.id()
                ),
            )
            .with("session_id", self.id())
            .with("limit", "session_queue"),
            mpsc::error::TrySendError::Closed(_) => ApiError::new(
                ErrorReason::SessionEnded,
                format!("session {} has ended", self.id()),
            )
            .with("session_id", self.id()),
        })
    }

    /// Tells the actor the project's breakpoints changed.
    pub fn reapply(&self) {
        let before = self
            .reapply
            .fetch_or(CHANGED | WAKE_QUEUED, Ordering::AcqRel);
        if before & WAKE_QUEUED != 0 {
            // The wake-up in the queue is still to come: it finds the flag.
            return;
        }
        if let Err(mpsc::error::TrySendError::Full(_)) = self.commands.try_send(Command::Reapply) {
            // A full queue means a busy actor: it sees the flag before it
            // next waits, so no wake-up is needed, and none is queued.
            self.reapply.fetch_and(!WAKE_QUEUED, Ordering::AcqRel);
        }
    }

    /// Runs an execution request (queued behind any in flight).
    pub async fn exec(&self, op: ExecOp, wait: WaitMode) -> ApiResult<StableState> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Exec { op, wait, reply })?;
        answer
            .await
            .map_err(|_| ApiError::new(ErrorReason::SessionEnded, "the session ended"))?
    }

    /// Ends the session.
    pub async fn disconnect(&self, mode: DisconnectMode) -> ApiResult<()> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Disconnect { mode, reply })?;
        answer
            .await
            .map_err(|_| ApiError::new(ErrorReason::SessionEnded, "the session ended"))?
    }

    /// Ends the session for the daemon's shutdown (see [`Command::Shutdown`]).
    pub async fn shutdown(&self) -> ApiResult<()> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Shutdown { reply })?;
        answer
            .await
            .map_err(|_| ApiError::new(ErrorReason::SessionEnded, "the session ended"))?
    }
}

/// The tracing span a session's actor runs in, so every line it logs
/// carries the session's id and kind (a root: the RPC that started the
/// session ends long before it does). At error level, so that whatever
/// `RUST_LOG` lets through still has it.
pub fn log_span(id: &str, kind: SessionKind) -> tracing::Span {
    tracing::error_span!(
        parent: None,
        "session",
        session = %id,
        kind = stepd_proto::short_name(kind.as_str_name()),
    )
}

/// Every session of the daemon.
pub struct Sessions {
    handles: Mutex<HashMap<String, SessionHandle>>,
    /// Running sessions, per daemon and per identity.
    slots: Arc<Slots>,
}

impl Sessions {
    /// An empty registry with no caps.
    pub fn new() -> Arc<Self> {
        Self::with_slots(Slots::unlimited("sessions"))
    }

    /// An empty registry whose sessions take `slots`.
    pub fn with_slots(slots: Arc<Slots>) -> Arc<Self> {
        Arc::new(Self {
            handles: Mutex::default(),
            slots,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, SessionHandle>> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a started session.
    pub fn insert(&self, handle: SessionHandle) {
        self.lock().insert(handle.id().to_owned(), handle);
    }

    /// Takes a session out of the registry.
    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// A session by id, or SESSION_NOT_FOUND.
    pub fn get(&self, id: &str) -> ApiResult<SessionHandle> {
        self.lock().get(id).cloned().ok_or_else(|| {
            ApiError::new(
                ErrorReason::SessionNotFound,
                format!("no session {}", crate::error::quote(id)),
            )
            .with("session_id", crate::error::clip(id))
        })
    }

    /// Follows the daemon's events for what the registry must do about
    /// them: every breakpoint list change (and a breakpoint spent by its
    /// hits) is applied again to every live session, and an ended session
    /// is forgotten once the event view forgets it, so `GetSession` and
    /// `ReadOutput` agree about which sessions exist.
    pub fn follow(self: &Arc<Self>, bus: Arc<EventBus>) {
        use stepd_proto::v1::{BreakpointChange, EventChannel, Watch, event::Payload};
        let filter = crate::events::Filter::from_watch(&Watch {
            channels: vec![
                EventChannel::Breakpoints as i32,
                EventChannel::Lifecycle as i32,
            ],
            ..Default::default()
        });
        let (_, mut live) = bus.subscribe(&filter, None, "");
        let sessions = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let (reapply, prune) = match live.recv().await {
                    Ok(event) => match &event.payload {
                        Some(Payload::BreakpointUpdated(u)) if event.session_id.is_empty() => {
                            let reapply = match BreakpointChange::try_from(u.change) {
                                Ok(BreakpointChange::Hit) => {
                                    u.breakpoint.as_ref().is_some_and(|b| b.spent)
                                }
                                Ok(BreakpointChange::Status) => false,
                                _ => true,
                            };
                            (reapply, false)
                        }
                        Some(Payload::SessionEnded(_)) => (false, true),
                        Some(Payload::SessionStarted(started)) => {
                            if let Some(sessions) = sessions.upgrade() {
                                sessions.taken_over(&event.session_id, started);
                            }
                            (false, false)
                        }
                        _ => (false, false),
                    },
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => (true, true),
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                let Some(sessions) = sessions.upgrade() else {
                    return;
                };
                if reapply {
                    for handle in sessions.all() {
                        handle.reapply();
                    }
                }
                if prune {
                    sessions.prune(&bus);
                }
            }
        });
    }

    /// A session that started on another replica in place of one of this
    /// daemon's (its probe reconnected there): the old one ends now, as it
    /// would for a reconnection here, not when its program's reconnect
    /// deadline runs out. A session started here told its predecessor
    /// itself.
    fn taken_over(&self, id: &str, started: &stepd_proto::v1::SessionStarted) {
        let Some(previous) = started
            .session
            .as_ref()
            .map(|s| s.previous_session_id.as_str())
            .filter(|p| !p.is_empty())
        else {
            return;
        };
        // Looked up without building the not-found error `get` gives a
        // client: on the path of every relayed session start.
        let old = {
            let sessions = self.lock();
            if sessions.contains_key(id) {
                return;
            }
            sessions.get(previous).cloned()
        };
        if let Some(old) = old {
            let (ended, _) = oneshot::channel();
            let _ = old.send(Command::TakenOver {
                by: id.to_owned(),
                ended,
            });
        }
    }

    /// Drops the sessions whose actor is gone and that the event view no
    /// longer shows.
    fn prune(&self, bus: &EventBus) {
        self.lock().retain(|id, handle| {
            !handle.commands.is_closed() || bus.with_view(|v| v.session(id).is_some())
        });
    }

    /// Every session still registered.
    pub fn all(&self) -> Vec<SessionHandle> {
        self.lock().values().cloned().collect()
    }

    /// Ends every live session (daemon shutdown), all at once, waiting at
    /// most `within`: one adapter slow to disconnect holds up no other.
    pub async fn shutdown(&self, within: Duration) {
        let mut ending = tokio::task::JoinSet::new();
        for handle in self.all() {
            ending.spawn(async move { handle.shutdown().await });
        }
        let _ = tokio::time::timeout(within, ending.join_all()).await;
    }
}

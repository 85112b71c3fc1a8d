//! Sessions: the registry of live and recent sessions, and one actor task per
//! DAP session owning its state (see `actor`). Inspection requests do not go
//! through the actor: they talk to the adapter directly with handles checked
//! against the current stop (see `inspect`), so they run in parallel with
//! execution.

mod actor;
mod handles;
mod inspect;
mod launch;
pub(crate) mod log_message;
mod output;
mod sources;
pub(crate) mod stop;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use serde_json::Value;
use stepd_proto::v1::{DisconnectMode, ErrorReason, StableState, StepKind};
use tokio::sync::{mpsc, oneshot};

pub use launch::{LaunchOutcome, Request as LaunchRequest};

use crate::{
    breakpoints::Breakpoints,
    dap::client::DapClient,
    error::{ApiError, ApiResult},
    events::EventBus,
    pause::PauseRegistry,
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
    /// Largest DAP frame accepted from an adapter.
    pub max_frame_bytes: usize,
    /// How long an adapter may take to answer one request.
    pub request_timeout: Duration,
    /// Where a session asks for a child session (an adapter's
    /// `startDebugging`); set by `Sessions::new`.
    pub children: Option<mpsc::UnboundedSender<LaunchRequest>>,
    /// How long a probe hold lasts unless its breakpoint says otherwise.
    pub hold_limit: Duration,
    /// The registry itself, for INSPECT at a pause (set by `Sessions::new`).
    pub sessions: std::sync::Weak<Sessions>,
    /// The daemon's inspectors, for INSPECT, INSPECT_PROMPT and LOCALS.
    pub inspectors: Arc<OnceLock<Arc<crate::inspector::Inspectors>>>,
}

impl Context {
    /// Opens an inspector on a pending pause; its rendering goes into
    /// `Pause.inspect`.
    pub async fn inspect_pause(
        &self,
        pause: &stepd_proto::v1::Pause,
        target: crate::inspector::PauseTarget,
    ) -> ApiResult<stepd_proto::v1::Rendering> {
        let (Some(inspectors), Some(sessions)) = (self.inspectors.get(), self.sessions.upgrade())
        else {
            return Err(ApiError::new(
                ErrorReason::ShuttingDown,
                "the inspector is not available",
            ));
        };
        crate::inspector::inspect_pause(inspectors, &sessions, pause, target, None).await
    }
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
    /// The project's breakpoints changed: apply them again.
    Reapply,
    /// Probe sessions: the probe reconnected as session `by`; end this one
    /// as its stream had ended.
    Superseded {
        /// The new session's id.
        by: String,
    },
    /// End the session.
    Disconnect {
        /// Terminate or detach.
        mode: DisconnectMode,
        /// Done.
        reply: oneshot::Sender<ApiResult<()>>,
    },
}

/// State shared between the actor and the inspection paths.
pub struct Shared {
    /// The session id.
    pub id: String,
    /// The adapter connection, once started.
    pub client: OnceLock<Arc<DapClient>>,
    /// The adapter's capabilities as announced.
    pub capabilities: OnceLock<Value>,
    /// Adapter name.
    pub adapter: String,
    /// Increases whenever the program stops or moves; handles carry it.
    pub epoch: AtomicU64,
    /// Stopped threads and their pause keys.
    pub stopped: Mutex<HashMap<i64, String>>,
    /// (thread, adapter frame id) of the top frame of the latest stop, the
    /// default frame of evaluations.
    pub latest_frame: Mutex<Option<(i64, i64)>>,
    /// Captured output.
    pub output: Mutex<output::OutputBuffer>,
    /// Set once the session ended.
    pub ended: AtomicBool,
}

impl Shared {
    /// State for a new session; the adapter connection is set once started.
    pub fn new(id: String, adapter: &str) -> Self {
        Self {
            id,
            client: OnceLock::new(),
            capabilities: OnceLock::new(),
            adapter: adapter.to_owned(),
            epoch: AtomicU64::new(1),
            stopped: Mutex::new(HashMap::new()),
            latest_frame: Mutex::new(None),
            output: Mutex::new(output::OutputBuffer::default()),
            ended: AtomicBool::new(false),
        }
    }

    /// The connection, or SESSION_ENDED / NOT_STOPPED-style errors.
    pub fn client(&self) -> ApiResult<Arc<DapClient>> {
        if self.ended.load(Ordering::Acquire) {
            return Err(ApiError::new(
                ErrorReason::SessionEnded,
                format!("session {} has ended", self.id),
            )
            .with("session_id", self.id.clone()));
        }
        self.client.get().cloned().ok_or_else(|| {
            ApiError::new(
                ErrorReason::UnsupportedByAdapter,
                "this session has no debug adapter: probe sessions have no threads, stacks or \
                 variables (use EVAL at a hold)",
            )
            .with("session_id", self.id.clone())
        })
    }

    /// Whether the adapter announced a capability.
    pub fn supports(&self, capability: &str) -> bool {
        self.capabilities
            .get()
            .is_some_and(|c| c[capability].as_bool() == Some(true))
    }

    /// Refuses a request whose capability the adapter did not announce.
    pub fn require(&self, capability: &str, what: &str) -> ApiResult<()> {
        if self.supports(capability) {
            Ok(())
        } else {
            Err(ApiError::new(
                ErrorReason::UnsupportedByAdapter,
                format!("{} does not support {what} (no {capability})", self.adapter),
            )
            .with("adapter", self.adapter.clone())
            .with("capability", capability))
        }
    }

    /// The current stop epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
}

/// A live or ended session, as the API sees it.
#[derive(Clone)]
pub struct SessionHandle {
    /// Shared state.
    pub shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
}

impl SessionHandle {
    fn send(&self, command: Command) -> ApiResult<()> {
        self.commands.send(command).map_err(|_| {
            ApiError::new(
                ErrorReason::SessionEnded,
                format!("session {} has ended", self.shared.id),
            )
            .with("session_id", self.shared.id.clone())
        })
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
}

/// Every session of the daemon.
pub struct Sessions {
    ctx: Context,
    handles: Mutex<HashMap<String, SessionHandle>>,
}

impl Sessions {
    /// An empty registry.
    /// A registry; child sessions that adapters ask for are started by a task
    /// of its own, so an actor never waits on another session's start.
    pub fn new(mut ctx: Context) -> Arc<Self> {
        let (children, mut child_requests) = mpsc::unbounded_channel::<LaunchRequest>();
        ctx.children = Some(children);
        let sessions = Arc::new_cyclic(|weak| {
            ctx.sessions = weak.clone();
            Self {
                ctx,
                handles: Mutex::new(HashMap::new()),
            }
        });
        let weak = Arc::downgrade(&sessions);
        tokio::spawn(async move {
            while let Some(request) = child_requests.recv().await {
                let Some(sessions) = weak.upgrade() else {
                    return;
                };
                tokio::spawn(async move {
                    let parent = request.parent_session_id.clone();
                    if let Err(err) = sessions.start(request).await {
                        tracing::warn!(%parent, %err, "could not start a child session");
                    }
                });
            }
        });
        sessions
    }

    /// Lets pauses open inspectors (INSPECT, INSPECT_PROMPT, LOCALS).
    pub fn inspect_with(&self, inspectors: Arc<crate::inspector::Inspectors>) -> bool {
        self.ctx.inspectors.set(inspectors).is_ok()
    }

    /// A session by id, or SESSION_NOT_FOUND.
    pub fn get(&self, id: &str) -> ApiResult<SessionHandle> {
        self.handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| {
                ApiError::new(ErrorReason::SessionNotFound, format!("no session {id:?}"))
                    .with("session_id", id)
            })
    }

    /// Launches or attaches a DAP session; answers once configuration is done.
    pub async fn start(&self, request: LaunchRequest) -> ApiResult<LaunchOutcome> {
        let (handle, outcome) = launch::start(self.ctx.clone(), request).await?;
        self.handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(handle.shared.id.clone(), handle);
        Ok(outcome)
    }

    /// Starts the session of a probe that said Hello; its actor serves the
    /// rest of the probe's stream and writes to `out`.
    pub fn start_probe<S>(
        &self,
        hello: stepd_proto::v1::Hello,
        out: mpsc::Sender<Result<stepd_proto::v1::ConnectResponse, tonic::Status>>,
        inbound: S,
    ) where
        S: tokio_stream::Stream<Item = Result<stepd_proto::v1::ConnectRequest, tonic::Status>>
            + Unpin
            + Send
            + 'static,
    {
        let id = uuid::Uuid::now_v7().to_string();
        let language = if hello.language.is_empty() {
            "probe"
        } else {
            &hello.language
        };
        let shared = Arc::new(Shared::new(id.clone(), language));
        let previous = self.previous_probe_session(&hello.resume_session_id, &id);
        let (commands, command_rx) = mpsc::unbounded_channel();
        self.handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                id,
                SessionHandle {
                    shared: shared.clone(),
                    commands,
                },
            );
        let actor = crate::probe::session::ProbeSession::new(
            self.ctx.clone(),
            shared,
            hello,
            previous,
            out,
            command_rx,
            self.ctx.hold_limit,
        );
        tokio::spawn(actor.run(inbound));
    }

    /// The probe session a reconnecting probe had (`resume_session_id`), if
    /// the daemon knows it; one still open is told it was superseded by `id`.
    fn previous_probe_session(&self, resume: &str, id: &str) -> String {
        let known = !resume.is_empty()
            && self
                .ctx
                .bus
                .with_view(|v| v.session(resume))
                .is_some_and(|s| s.kind == stepd_proto::v1::SessionKind::Probe as i32);
        if !known {
            return String::new();
        }
        if let Some(old) = self
            .handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(resume)
        {
            let _ = old.commands.send(Command::Superseded { by: id.to_owned() });
        }
        resume.to_owned()
    }

    /// Keeps live sessions' breakpoints in step with the project's: every
    /// breakpoint list change (and a breakpoint spent by its hits) is applied
    /// again to every live session.
    pub fn follow_breakpoints(self: &Arc<Self>) {
        use stepd_proto::v1::{BreakpointChange, EventChannel, Watch, event::Payload};
        let filter = crate::events::Filter::from_watch(&Watch {
            channels: vec![EventChannel::Breakpoints as i32],
            ..Default::default()
        });
        let (_, mut live) = self.ctx.bus.subscribe(&filter, None, "");
        let sessions = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let reapply = match live.recv().await {
                    Ok(event) => match &event.payload {
                        Some(Payload::BreakpointUpdated(u)) if event.session_id.is_empty() => {
                            match BreakpointChange::try_from(u.change) {
                                Ok(BreakpointChange::Hit) => {
                                    u.breakpoint.as_ref().is_some_and(|b| b.spent)
                                }
                                Ok(BreakpointChange::Status) => false,
                                _ => true,
                            }
                        }
                        _ => false,
                    },
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                let Some(sessions) = sessions.upgrade() else {
                    return;
                };
                if reapply {
                    for handle in sessions.all() {
                        let _ = handle.commands.send(Command::Reapply);
                    }
                }
            }
        });
    }

    /// Every session still registered.
    fn all(&self) -> Vec<SessionHandle> {
        self.handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Ends every live session (daemon shutdown), waiting at most `within`.
    pub async fn shutdown(&self, within: Duration) {
        let handles = self.all();
        let all = async {
            for handle in &handles {
                // A probe's program is not stepd's to stop: it goes on.
                let mode = if handle.shared.client.get().is_some() {
                    DisconnectMode::Unspecified
                } else {
                    DisconnectMode::Detach
                };
                let _ = handle.disconnect(mode).await;
            }
        };
        let _ = tokio::time::timeout(within, all).await;
    }
}

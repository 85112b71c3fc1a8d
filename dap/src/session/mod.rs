//! DAP sessions: a real program under a real debug adapter. One actor per
//! session (`actor`) owns its state; `launch` starts the adapter and the
//! actor; `inspect` and `values` are the inspection paths, which talk to the
//! adapter directly with handles checked against the current stop, so they
//! run in parallel with execution. [`Launcher`] starts sessions, including
//! the child sessions adapters ask for.

mod actor;
mod handles;
mod inspect;
pub mod launch;
mod port;
mod sources;
pub(crate) mod stop;
pub(crate) mod values;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use serde_json::Value;
use stepd_proto::v1::ErrorReason;
use tokio::sync::mpsc;

pub use launch::{LaunchOutcome, Request as LaunchRequest};
pub use port::DapPort;

use crate::capability::Capability;
use crate::{
    client::{DapClient, DapError},
    kind::AdapterKind,
};
use stepd_core::{
    error::{ApiError, ApiResult},
    session::{Context, Registration, Sessions, output::OutputBuffer},
};

/// What DAP sessions are started with beside the core's [`Context`].
#[derive(Debug, Clone, Copy)]
pub struct DapSettings {
    /// Largest DAP frame accepted from an adapter.
    pub max_frame_bytes: usize,
    /// How long an adapter may take to answer one request.
    pub request_timeout: Duration,
}

/// Starts DAP sessions into the registry. Child sessions that adapters ask
/// for (`startDebugging`) are started by a task of its own, so an actor never
/// waits on another session's start.
#[derive(Clone)]
pub struct Launcher {
    ctx: Context,
    settings: DapSettings,
    sessions: Arc<Sessions>,
    children: mpsc::UnboundedSender<LaunchRequest>,
}

impl Launcher {
    /// A launcher registering its sessions in `sessions`.
    pub fn new(ctx: Context, settings: DapSettings, sessions: Arc<Sessions>) -> Self {
        let (children, mut requests) = mpsc::unbounded_channel::<LaunchRequest>();
        let launcher = Self {
            ctx,
            settings,
            sessions,
            children,
        };
        let spawner = launcher.clone();
        tokio::spawn(async move {
            while let Some(request) = requests.recv().await {
                let launcher = spawner.clone();
                tokio::spawn(async move {
                    let parent = request.parent_session_id.clone();
                    if let Err(err) = launcher.start(request).await {
                        tracing::warn!(%parent, %err, "could not start a child session");
                    }
                });
            }
        });
        launcher
    }

    /// Launches or attaches a DAP session; answers once configuration is done.
    pub async fn start(&self, request: LaunchRequest) -> ApiResult<LaunchOutcome> {
        let mut registration = Registration::new(self.sessions.clone(), &request.started_by)?;
        let outcome = launch::start(
            self.ctx.clone(),
            self.settings,
            self.children.clone(),
            request,
            &mut registration,
        )
        .await?;
        registration.keep();
        Ok(outcome)
    }
}

/// State shared between the actor and the inspection paths.
pub struct Shared {
    /// The session id.
    pub id: String,
    /// The adapter connection, once started.
    pub client: OnceLock<Arc<DapClient>>,
    /// The adapter's capabilities as announced.
    pub capabilities: OnceLock<Value>,
    /// The adapter's kind, which carries its quirks.
    pub kind: AdapterKind,
    /// Increases whenever the program stops or moves; handles carry it.
    pub epoch: AtomicU64,
    /// Stopped threads and their pause keys.
    pub stopped: Mutex<HashMap<i64, String>>,
    /// The epoch of the last stop that stopped every thread (the adapter's
    /// `allThreadsStopped`, as dlv's goroutines): until the program moves
    /// (the epoch changes), threads without a pause are stopped too and can
    /// be inspected. 0: none.
    pub all_stopped_at: AtomicU64,
    /// (thread, adapter frame id) of the top frame of the latest stop, the
    /// default frame of evaluations.
    pub latest_frame: Mutex<Option<(i64, i64)>>,
    /// Captured output.
    pub output: Mutex<OutputBuffer>,
    /// Set once the session ended.
    pub ended: AtomicBool,
    /// Held from re-selecting a frame's scopes to reading its variables, so
    /// two frames' requests cannot interleave where the adapter's scope
    /// references follow the last frame asked for.
    pub scope_selection: tokio::sync::Mutex<()>,
    /// Masks secrets in what inspection answers.
    pub redactor: Arc<stepd_core::redact::Redactor>,
}

impl Shared {
    /// Whether `thread` is stopped: it has a pause, or the last stop stopped
    /// every thread and the program has not moved since.
    pub fn is_stopped(&self, thread: i64) -> bool {
        let epoch = self.epoch.load(std::sync::atomic::Ordering::Acquire);
        self.all_stopped_at
            .load(std::sync::atomic::Ordering::Acquire)
            == epoch
            || self
                .stopped
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(&thread)
    }

    /// State for a new session; the adapter connection is set once started.
    pub fn new(id: String, kind: AdapterKind, redactor: Arc<stepd_core::redact::Redactor>) -> Self {
        Self {
            id,
            redactor,
            client: OnceLock::new(),
            capabilities: OnceLock::new(),
            kind,
            epoch: AtomicU64::new(1),
            stopped: Mutex::new(HashMap::new()),
            all_stopped_at: AtomicU64::new(0),
            latest_frame: Mutex::new(None),
            output: Mutex::new(OutputBuffer::default()),
            ended: AtomicBool::new(false),
            scope_selection: tokio::sync::Mutex::new(()),
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
                "this session's adapter connection is not set up yet",
            )
            .with("session_id", self.id.clone())
        })
    }

    /// Whether the adapter announced a capability.
    pub fn supports(&self, capability: Capability) -> bool {
        self.capabilities
            .get()
            .is_some_and(|c| capability.announced_in(c))
    }

    /// Refuses a request whose capability the adapter did not announce.
    pub fn require(&self, capability: Capability, what: &str) -> ApiResult<()> {
        if self.supports(capability) {
            Ok(())
        } else {
            let name = capability.name();
            Err(ApiError::new(
                ErrorReason::UnsupportedByAdapter,
                format!("{} does not support {what} (no {name})", self.kind),
            )
            .with("adapter", self.kind.name())
            .with("capability", name))
        }
    }

    /// The current stop epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
}

/// A failed DAP request as an API error.
pub(crate) fn dap_error(err: &DapError) -> ApiError {
    match err {
        DapError::Closed => ApiError::new(ErrorReason::AdapterDied, err.to_string()),
        DapError::Timeout(..) | DapError::Protocol(_) => {
            ApiError::new(ErrorReason::ProtocolError, err.to_string())
        }
        DapError::Failed(message) => ApiError::new(ErrorReason::AdapterError, message.clone()),
        DapError::Malformed(problem) => ApiError::new(ErrorReason::ProtocolError, problem.clone()),
    }
}

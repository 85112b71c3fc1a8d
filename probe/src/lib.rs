//! Probe sessions: instrumented programs that hold at their own pause points.
//! `session` is the actor behind one `ProbeService.Connect` stream; probes
//! decide locally which points hold, from the arming the actor sends them.
//! The actor decides with parts that do no I/O and acts: `arming` (the
//! breakpoints a probe is sent), `mode`, `hits` (what a point becomes),
//! `holds` (held points and their limits), `evals` and `waiters` (who waits
//! for the probe), `reports`, and `transport` (its stream's outbound side,
//! heartbeats and a probe that stops reading). `value` checks injected
//! values; `inspect` is what the inspector opens at a hold; `outbox` is
//! what goes to the probe, where control messages are never dropped;
//! `request_scope` is the request a hold, and a stepping mode chosen at it,
//! is about.

mod arming;
mod evals;
mod hits;
mod holds;
mod inspect;
mod mode;
mod outbox;
mod reports;
mod request_scope;
pub mod session;
mod transport;
pub mod value;
mod waiters;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use stepd_proto::v1::{
    CommandKind, ConnectRequest, ConnectResponse, Hello, Pause, PauseResolved, ReadOutputResponse,
    SessionKind, event::Payload,
};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;

use stepd_core::{
    error::ApiResult,
    inspector::value::Node,
    session::{
        Context, Fut, PauseTarget, Registration, SessionPort, Sessions,
        output::{self, OutputBuffer},
    },
};

/// A probe session's inspection paths: its holds carry their values, and
/// it has no threads, stacks or variables of its own.
struct ProbePort {
    id: String,
    /// What LOG breakpoints at its points wrote.
    output: Arc<Mutex<OutputBuffer>>,
}

impl SessionPort for ProbePort {
    fn id(&self) -> &str {
        &self.id
    }

    fn kind(&self) -> SessionKind {
        SessionKind::Probe
    }

    fn read_output(&self, after: u64, max_bytes: u32, categories: &[String]) -> ReadOutputResponse {
        output::read_response(&self.output, after, max_bytes, categories)
    }

    fn pause_node<'a>(
        &'a self,
        pause: &'a Pause,
        target: &'a PauseTarget,
    ) -> Fut<'a, Arc<dyn Node>> {
        Box::pin(async move { inspect::pause_node(pause, target) })
    }
}

/// What probe sessions are started with beside the core's [`Context`].
#[derive(Debug, Clone, Copy)]
pub struct ProbeSettings {
    /// How long a hold lasts unless its breakpoint says otherwise.
    pub hold_limit: Duration,
    /// How many holds one probe may have pending.
    pub max_pauses: usize,
    /// Quiet time after which a probe stream gets a heartbeat, unless the
    /// probe's Hello asks for another.
    pub heartbeat_interval: Duration,
}

/// Starts the session of a probe that said Hello, connected by identity
/// `started_by`; its actor serves the rest of the probe's stream and writes
/// to `out`. Returns the session's id, or `LIMIT_EXCEEDED` past a session
/// cap.
pub fn start<S>(
    ctx: Context,
    settings: ProbeSettings,
    sessions: &Arc<Sessions>,
    hello: Hello,
    started_by: &str,
    out: mpsc::Sender<Result<ConnectResponse, tonic::Status>>,
    inbound: S,
) -> ApiResult<String>
where
    S: Stream<Item = Result<ConnectRequest, tonic::Status>> + Unpin + Send + 'static,
{
    let mut registration = Registration::new(sessions.clone(), started_by)?;
    let id = uuid::Uuid::now_v7().to_string();
    let (previous, old_ended) = previous_session(&ctx, sessions, &hello.resume_session_id, &id);
    let port = Arc::new(ProbePort {
        id: id.clone(),
        output: Arc::new(Mutex::new(OutputBuffer::default())),
    });
    let mailbox = registration.register(port.clone());
    registration.keep();
    let mut actor = session::ProbeSession::new(ctx, settings, &port, hello, previous, out, mailbox);
    actor.set_started_by(started_by);
    let span = stepd_core::session::log_span(&id, SessionKind::Probe);
    tokio::spawn(tracing::Instrument::instrument(
        actor.run(inbound, old_ended),
        span,
    ));
    Ok(id)
}

/// The probe session a reconnecting probe had (`resume_session_id`), if the
/// daemon knows it; one still open is told it was superseded by `id`, and
/// the receiver hears once it has ended.
fn previous_session(
    ctx: &Context,
    sessions: &Sessions,
    resume: &str,
    id: &str,
) -> (String, Option<oneshot::Receiver<()>>) {
    let known = !resume.is_empty()
        && ctx
            .bus
            .with_view(|v| v.session(resume))
            .is_some_and(|s| s.kind == SessionKind::Probe as i32);
    if !known {
        return (String::new(), None);
    }
    let mut old_ended = None;
    let Ok(old) = sessions.get(resume) else {
        // Another replica's: the holds it shows are re-reported here.
        supersede(&ctx.bus, resume);
        return (resume.to_owned(), None);
    };
    {
        let (ended, heard) = oneshot::channel();
        if old
            .send(stepd_core::session::Command::TakenOver {
                by: id.to_owned(),
                ended,
            })
            .is_ok()
        {
            old_ended = Some(heard);
        }
    }
    (resume.to_owned(), old_ended)
}

/// Resolves here the pauses `session` shows, which another replica runs:
/// its probe reconnected and re-reports them in its new session, so one
/// held request stays one pending pause.
pub fn supersede(bus: &stepd_core::events::EventBus, session: &str) {
    for pause in bus.with_view(|v| v.pauses(Some(session))) {
        bus.publish_theirs(
            session,
            Payload::PauseResolved(PauseResolved {
                key: pause.key,
                command: CommandKind::Unspecified.into(),
                by: "probe-reconnected".into(),
                thread_id: pause.thread_id,
                decision: None,
                client_name: String::new(),
            }),
        );
    }
}

//! What clients ask of a probe session: Pause, Continue and Step requests,
//! breakpoint changes, its end, and the answers at its holds
//! (`PauseOwner`). Everything that can refuse a request is decided before
//! anything changes.

use std::time::SystemTime;

use stepd_proto::v1::{
    Cause, CommandKind, DisconnectMode, EndReason, ErrorReason, Eval, Frame, NotificationLevel,
    Pause, Reconnect, Rendering, ResumeDecision, SessionState, StableState,
    connect_response::Message as Out, inject_command::Replacement,
};
use tokio::{sync::oneshot, time::Instant};

use super::{Held, ProbeSession};
use crate::mode::Mode;
use crate::outbox::Permit;
use crate::{request_scope, value};
use stepd_core::{
    error::{ApiError, ApiResult},
    session::{
        Command, ExecOp, PauseTarget, WaitMode,
        pause::{
            answer::{Go, PauseOwner, Reply},
            book::{self, PauseBook},
        },
    },
};

type StateReply = oneshot::Sender<ApiResult<StableState>>;

impl ProbeSession {
    pub(super) async fn on_command(&mut self, command: Command) {
        match command {
            Command::Exec { op, wait, reply } => match op {
                ExecOp::Pause(_) => self.pause(wait, reply).await,
                ExecOp::Continue(_) => self.move_on(false, reply).await,
                ExecOp::Step(..) => self.move_on(true, reply).await,
            },
            Command::Reapply => {
                self.arming.changed();
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
                self.transport.send(Out::Reconnect(Reconnect {
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
                self.disconnect(mode).await;
                let _ = reply.send(Ok(()));
            }
        }
    }

    /// A Pause request, about the whole process: the probe holds at its
    /// next point; the request is answered with the latest hold, or waits
    /// for the next one.
    async fn pause(&mut self, wait: WaitMode, reply: StateReply) {
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
            WaitMode::UntilStable(timeout) => self.waiters.wait(reply, timeout, Instant::now()),
        }
    }

    /// A Continue (or, with `step`, a Step) request: the latest hold goes
    /// on, once its Resume can reach the probe.
    async fn move_on(&mut self, step: bool, reply: StateReply) {
        let Some(key) = self.latest().map(|p| p.key.clone()) else {
            let _ = reply.send(Err(ApiError::new(
                ErrorReason::NotStopped,
                "no point is held",
            )));
            return;
        };
        let (mode, kind) = if step {
            (Mode::Step, CommandKind::Next)
        } else {
            (Mode::Breakpoints, CommandKind::Continue)
        };
        let permit = match self.transport.reserve() {
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

    /// Disconnect stops held points (QUIT); a detach, and the daemon's own
    /// shutdown, lets the program go on.
    async fn disconnect(&mut self, mode: DisconnectMode) {
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
    }

    fn latest(&self) -> Option<&Pause> {
        self.book.latest().map(|e| &e.pause)
    }

    /// Ends a hold: the probe goes on as decided, under the current mode.
    /// A client's answer brings the room reserved for its Resume.
    pub(super) async fn release(
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

    /// A hold that ended leaves the indexes beside the book.
    pub(super) fn forget(&mut self, entry: &book::Entry<Held>) {
        self.holds.forget(
            &entry.data.hit.hit_id,
            &entry.pause.key,
            entry.data.deadline,
        );
    }

    /// Once the last hold ended, the session runs again.
    pub(super) fn after_release(&mut self) {
        if self.book.is_empty() {
            self.session.state = SessionState::Running.into();
            self.publish(stepd_proto::v1::event::Payload::Continued(
                stepd_proto::v1::Continued { thread_id: 0 },
            ));
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

    /// How many scopes deep the point of pause `key` is held.
    fn depth_of(&self, key: &str) -> u32 {
        self.book.get(key).map_or(0, |e| {
            let path = e.data.hit.point.as_ref().map_or(0, |p| p.scope_path.len());
            u32::try_from(path).unwrap_or(u32::MAX)
        })
    }

    /// Tells clients what CONTINUE_ALL does, in the request `scope` it is
    /// about (empty: the whole process).
    fn warn_continue_all(&self, scope: &[stepd_proto::v1::BaggageEntry]) {
        let message = if scope.is_empty() {
            "CONTINUE_ALL: no holds until the top-level scope ends".to_owned()
        } else {
            format!(
                "CONTINUE_ALL: no holds in the request carrying baggage {} until its \
                 top-level scope ends; other requests hold at their breakpoints",
                request_scope::display(scope)
            )
        };
        self.notify(NotificationLevel::Warning, &message);
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
        let (mode, mut decision) = self.mode.after(key, self.depth_of(key), &go)?;
        let value = match &go {
            Go::Inject(replacement) => Some(self.injected(key, replacement.clone())?),
            _ => None,
        };
        if value.is_some() {
            decision = ResumeDecision::Replace;
        }
        // The Resume must reach the probe's stream, or nothing changes.
        let permit = self.transport.reserve()?;
        // SKIP and QUIT leave the mode, and the request it is about, as they were.
        let scope = match go {
            Go::Skip | Go::Quit => self.mode.scope.clone(),
            _ => self.scope_of(key),
        };
        match go {
            Go::Quit => self.quitting = true,
            Go::ContinueAll => self.warn_continue_all(&scope),
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
        let permit = match self.transport.reserve() {
            Ok(permit) => permit,
            Err(error) => {
                let _ = reply.send(Err(error.with("key", key)));
                return;
            }
        };
        self.transport.send_reserved(
            permit,
            Out::Eval(Eval {
                hit_id,
                eval_id: eval_id.clone(),
                code: code.clone(),
            }),
        );
        self.evals
            .sent(eval_id, key, code, by, reply, Instant::now());
    }

    async fn render(&mut self, key: &str, target: PauseTarget) -> ApiResult<Rendering> {
        let pause = self
            .book
            .get(key)
            .map(|e| e.pause.clone())
            .ok_or_else(|| self.book.gone(key))?;
        let root = crate::inspect::pause_node(&pause, &target)?;
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

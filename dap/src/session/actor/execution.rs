//! Execution requests (Continue, Step, Pause) and the commands of the
//! actor's mailbox.

use std::time::Instant;

use super::{
    Actor, Reply, dap_error,
    exec_queue::{Arrival, Plan, Program, Request, Waited, plan},
    steering::{Mode, StepInFlight},
};
use serde_json::json;
use stepd_core::{
    error::{ApiError, ApiResult},
    session::{Command, ExecOp, MAILBOX, WaitMode},
};
use stepd_proto::v1::{
    CommandKind, DisconnectMode, ErrorReason, SessionState, StableState, StepKind,
};

impl Actor {
    pub(super) async fn on_command(&mut self, command: Command) {
        match command {
            Command::Exec { op, wait, reply } => {
                match self.exec.arrive(Request { op, wait, reply }) {
                    Arrival::Start(request) => self.start_exec(request).await,
                    Arrival::Queued => {}
                    Arrival::Full(request) => {
                        let _ = request.reply.send(Err(ApiError::new(
                            ErrorReason::LimitExceeded,
                            format!(
                                "{MAILBOX} execution requests are already waiting in this session"
                            ),
                        )
                        .with("limit", "session_queue")));
                    }
                }
            }
            // A DAP session's program does not reconnect.
            Command::TakenOver { .. } => {}
            Command::Shutdown { reply } => {
                self.disconnect(DisconnectMode::Unspecified, reply).await
            }
            Command::Reapply => {
                let placements = self.apply_breakpoints().await;
                for placement in &placements {
                    self.publish_status(placement);
                }
            }
            Command::Disconnect { mode, reply } => self.disconnect(mode, reply).await,
        }
    }

    /// Where the program is, for the execution queue's plan.
    fn program(&self) -> Program {
        Program {
            ended: self.life.is_ended(),
            stopped: self.book.entries().map(|e| e.pause.thread_id).collect(),
            latest: self.book.latest().map(|e| e.pause.thread_id),
        }
    }

    pub(super) async fn start_exec(&mut self, request: Request<Reply>) {
        let Request { op, wait, reply } = request;
        let started = Instant::now();
        let output_from = self.output_end();
        let command = op.command_kind();
        let result = self.send_exec(op, command, "api").await;
        match result {
            Err(err) => {
                let _ = reply.send(Err(err));
            }
            Ok(Some(already)) => {
                let _ = reply.send(Ok(already));
            }
            Ok(None) => match wait {
                WaitMode::NoWait => {
                    let _ = reply.send(Ok(StableState {
                        state: self.session.state,
                        waited: false,
                        elapsed_ms: started.elapsed().as_millis() as u64,
                        ..Default::default()
                    }));
                }
                WaitMode::UntilStable(timeout) => {
                    self.exec.wait_for_stable(Waited {
                        reply,
                        deadline: timeout.map(|t| tokio::time::Instant::from_std(started + t)),
                        started,
                        output_from,
                    });
                }
            },
        }
    }

    /// Sends the DAP request of an execution op. `Some(state)` when there is
    /// nothing to wait for (e.g. Pause on a stopped session).
    pub(super) async fn send_exec(
        &mut self,
        op: ExecOp,
        command: CommandKind,
        by: &str,
    ) -> ApiResult<Option<StableState>> {
        match plan(op, &self.program()) {
            Plan::Refuse(refusal) => Err(refusal.error()),
            Plan::Continue { target, all } => {
                let result = self
                    .client
                    .request(
                        "continue",
                        json!({"threadId": target, "singleThread": !all}),
                    )
                    .await;
                result.map_err(|e| dap_error(&e))?;
                self.exec.continued();
                let resumed = if all { 0 } else { target };
                self.resumed(resumed, command, by);
                Ok(None)
            }
            Plan::Step { target, kind } => {
                let request = match kind {
                    StepKind::In => "stepIn",
                    StepKind::Out => "stepOut",
                    StepKind::Over | StepKind::Unspecified => "next",
                };
                self.client
                    .request(request, json!({"threadId": target}))
                    .await
                    .map_err(|e| dap_error(&e))?;
                self.exec.stepping(StepInFlight {
                    kind,
                    thread: target,
                    depth: self.depths.get(&target).copied(),
                    returning: false,
                });
                self.resumed(target, command, by);
                Ok(None)
            }
            // CONTINUE_ALL ends with the stop a Pause request makes (see
            // on_stopped), so the breakpoints cannot beat it.
            Plan::AlreadyStopped => {
                self.mode = Mode::Normal;
                Ok(Some(self.current_state()))
            }
            Plan::Interrupt(thread) => {
                self.mode = Mode::Normal;
                self.request_pause(thread).await?;
                Ok(None)
            }
        }
    }

    pub(super) fn current_state(&self) -> StableState {
        let latest = self.book.latest().map(|e| &e.pause);
        StableState {
            state: self.session.state,
            waited: true,
            stop_reason: latest.map(|p| p.reason).unwrap_or_default(),
            thread_id: latest.map(|p| p.thread_id).unwrap_or_default(),
            pause: latest.cloned(),
            hit_breakpoint_ids: latest.map(|p| p.breakpoint_ids.clone()).unwrap_or_default(),
            ..Default::default()
        }
    }

    pub(super) fn output_end(&self) -> u64 {
        self.shared
            .output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .end()
    }

    pub(super) fn output_since(&self, offset: u64) -> Vec<stepd_proto::v1::OutputChunk> {
        self.shared
            .output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .read(offset, 64 * 1024, &[])
            .chunks
    }

    /// Answers the in-flight request with `state`.
    pub(super) fn complete_inflight(&mut self, mut state: StableState) {
        if let Some(inflight) = self.exec.take_waited() {
            state.output = self.output_since(inflight.output_from);
            state.elapsed_ms = inflight.started.elapsed().as_millis() as u64;
            let _ = inflight.reply.send(Ok(state));
        }
    }

    /// Answers the in-flight request with the current state (timeout or end).
    pub(super) fn finish_inflight(&mut self, timed_out: bool) {
        let mut state = self.current_state();
        state.timed_out = timed_out;
        if self.life.is_ended() {
            state.state = SessionState::Ended.into();
            state.end_reason = self.session.end_reason;
            state.exit_code = self.life.exit_code();
            state.signal.clone_from(&self.session.signal);
        }
        self.complete_inflight(state);
    }

    pub(super) async fn start_next(&mut self) {
        while let Some(request) = self.exec.next() {
            self.start_exec(request).await;
        }
    }
}

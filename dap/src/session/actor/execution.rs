//! Execution requests (Continue, Step, Pause) and the commands of the
//! actor's mailbox.

use std::time::Instant;

use serde_json::json;
use stepd_proto::v1::{
    CommandKind, DisconnectMode, ErrorReason, SessionState, StableState, StepKind,
};
use tokio::sync::oneshot;

use super::{
    Actor, Inflight, dap_error,
    steering::{self, Mode},
};
use stepd_core::{
    error::{ApiError, ApiResult},
    session::{Command, ExecOp, MAILBOX, WaitMode},
};

impl Actor {
    pub(super) async fn on_command(&mut self, command: Command) {
        match command {
            Command::Exec { op, wait, reply } => {
                if self.inflight.is_some() && self.queue.len() >= MAILBOX {
                    let _ = reply.send(Err(ApiError::new(
                        ErrorReason::LimitExceeded,
                        format!("{MAILBOX} execution requests are already waiting in this session"),
                    )
                    .with("limit", "session_queue")));
                } else if self.inflight.is_some() {
                    self.queue.push_back((op, wait, reply));
                } else {
                    self.start_exec(op, wait, reply).await;
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

    pub(super) fn thread_for(&self, thread: i64) -> i64 {
        if thread != 0 {
            return thread;
        }
        self.book.latest().map_or(0, |e| e.pause.thread_id)
    }

    pub(super) async fn start_exec(
        &mut self,
        op: ExecOp,
        wait: WaitMode,
        reply: oneshot::Sender<ApiResult<StableState>>,
    ) {
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
                    self.inflight = Some(Inflight {
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
        if self.ended {
            return Err(ApiError::new(
                ErrorReason::SessionEnded,
                "the session has ended",
            ));
        }
        match op {
            ExecOp::Continue(thread) => {
                // Some adapters (debugpy) never answer a continue while running.
                if self.book.is_empty() {
                    return Err(ApiError::new(
                        ErrorReason::NotStopped,
                        "the program is running; nothing to continue",
                    ));
                }
                let target = self.thread_for(thread);
                let all = thread == 0;
                let result = self
                    .client
                    .request(
                        "continue",
                        json!({"threadId": target, "singleThread": !all}),
                    )
                    .await;
                result.map_err(|e| dap_error(&e))?;
                // A continue ends any step the adapter still had.
                self.step = None;
                let resumed = if all { 0 } else { target };
                self.resumed(resumed, command, by);
                Ok(None)
            }
            ExecOp::Step(thread, kind) => {
                let target = self.thread_for(thread);
                if !self.book.entries().any(|e| e.pause.thread_id == target) {
                    return Err(ApiError::new(
                        ErrorReason::NotStopped,
                        format!("thread {target} is not stopped"),
                    )
                    .with("thread_id", target.to_string()));
                }
                let request = match kind {
                    StepKind::In => "stepIn",
                    StepKind::Out => "stepOut",
                    StepKind::Over | StepKind::Unspecified => "next",
                };
                self.client
                    .request(request, json!({"threadId": target}))
                    .await
                    .map_err(|e| dap_error(&e))?;
                self.step = Some(steering::StepInFlight {
                    kind,
                    thread: target,
                    depth: self.depths.get(&target).copied(),
                    returning: false,
                });
                self.resumed(target, command, by);
                Ok(None)
            }
            ExecOp::Pause(thread) => {
                // CONTINUE_ALL ends with the stop this request makes (see
                // on_stopped), so the breakpoints cannot beat it.
                self.mode = Mode::Normal;
                if !self.book.is_empty() {
                    return Ok(Some(self.current_state()));
                }
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
        if let Some(inflight) = self.inflight.take() {
            state.output = self.output_since(inflight.output_from);
            state.elapsed_ms = inflight.started.elapsed().as_millis() as u64;
            let _ = inflight.reply.send(Ok(state));
        }
    }

    /// Answers the in-flight request with the current state (timeout or end).
    pub(super) fn finish_inflight(&mut self, timed_out: bool) {
        let mut state = self.current_state();
        state.timed_out = timed_out;
        if self.ended {
            state.state = SessionState::Ended.into();
            state.end_reason = self.session.end_reason;
            state.exit_code = self.exit_code;
            state.signal.clone_from(&self.session.signal);
        }
        self.complete_inflight(state);
    }

    pub(super) async fn start_next(&mut self) {
        while self.inflight.is_none() {
            let Some((op, wait, reply)) = self.queue.pop_front() else {
                return;
            };
            self.start_exec(op, wait, reply).await;
        }
    }
}

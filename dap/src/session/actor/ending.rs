//! How a DAP session ends: the debuggee's end as the adapter (or its
//! zombie) tells it, a client's Disconnect, and the end itself, which
//! kills what must not outlive the session and answers what waits.

use std::sync::atomic::Ordering;

use serde_json::json;
use stepd_proto::v1::{
    CommandKind, DisconnectMode, EndReason, ErrorReason, SessionEnded, SessionState, StableState,
    event::Payload,
};
use tokio::{process::Child, sync::oneshot};

use super::{Actor, DISCONNECT_DEADLINE, exception};
use crate::process;
use stepd_core::error::{ApiError, ApiResult};

impl Actor {
    pub(super) fn kill_adapter(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.start_kill();
        }
    }

    /// Kills the adapter with everything it started, the debuggee first:
    /// for a session that failed to start or whose Launch was abandoned, and
    /// one whose adapter died or broke the protocol. Never for an attached
    /// program, which stepd did not start.
    pub(super) fn kill_everything(&mut self) {
        if self.request.attach {
            self.kill_adapter();
            return;
        }
        if let Some(pid) = self.debuggee_pid {
            process::kill(pid);
        }
        if let Some(pid) = self.child.as_ref().and_then(Child::id) {
            process::kill_tree(pid);
        }
        self.kill_adapter();
    }

    /// The debuggee's pid, from the adapter; watched where its adapter may
    /// not report its end.
    pub(super) fn learn_debuggee(&mut self, pid: u32) {
        self.debuggee_pid = Some(pid);
        if self.adapter.kind.misses_debuggee_death_while_stopped()
            && self.debuggee_watch.as_ref().map(process::ExitWatch::pid) != Some(pid)
        {
            self.debuggee_watch = Some(process::ExitWatch::new(pid));
        }
    }

    /// The watched debuggee ended while the session was stopped, and its
    /// adapter said nothing (dlv waits for the debuggee only while it runs
    /// it, so it would hold the zombie and the session "stopped" forever).
    /// How it ended is read from the zombie, then the session ends, which
    /// kills the adapter. dlv cannot be asked to let go of the zombie (a
    /// `disconnect` is refused: "process must be stopped in order to kill
    /// it"), so it goes with dlv: re-parented to init, which reaps it.
    pub(super) async fn on_debuggee_gone(&mut self) {
        let Some(pid) = self.debuggee_watch.take().map(|w| w.pid()) else {
            return;
        };
        match process::zombie_status(pid) {
            Some(process::Ended::Signaled(number)) => {
                self.end_signal = Some(
                    exception::signal_name(number)
                        .map_or_else(|| format!("signal {number}"), str::to_owned),
                );
                self.exit_code = None;
            }
            Some(process::Ended::Exited(code)) => self.exit_code = Some(code),
            None => {}
        }
        tracing::info!(session = %self.shared.id, pid, "the debuggee ended while stopped");
        let reason = self.exit_reason().unwrap_or(EndReason::Terminated);
        self.end(
            reason,
            format!("the program (pid {pid}) ended while stopped; the adapter did not report it"),
        )
        .await;
    }

    /// How the debuggee ended, once the adapter said: by a signal or exited.
    pub(super) fn exit_reason(&self) -> Option<EndReason> {
        if self.end_signal.is_some() {
            Some(EndReason::Signaled)
        } else {
            self.exit_code.map(|_| EndReason::Exited)
        }
    }

    /// The signal an exit was. lldb reports a debuggee killed by a signal as
    /// exited with the signal's number as its code, right after the
    /// exception stop that showed the signal; a plain exit code is no signal.
    pub(super) fn signal_of_exit(&self) -> Option<String> {
        let signal = self.crash_signal.as_ref()?;
        (exception::signal_number(signal) == self.exit_code).then(|| signal.clone())
    }

    /// Ends the session at a client's Disconnect (or the daemon's shutdown,
    /// as one without a mode): a launched program is terminated, an
    /// attached one let go, unless the mode says otherwise.
    pub(super) async fn disconnect(
        &mut self,
        mode: DisconnectMode,
        reply: oneshot::Sender<ApiResult<()>>,
    ) {
        let terminate = match mode {
            DisconnectMode::Terminate => true,
            DisconnectMode::Detach => false,
            DisconnectMode::Unspecified => !self.request.attach,
        };
        let request = self.client.send(
            "disconnect",
            json!({"terminateDebuggee": terminate, "restart": false}),
        );
        let _ = tokio::time::timeout(DISCONNECT_DEADLINE, request).await;
        let reason = if terminate {
            EndReason::Terminated
        } else {
            EndReason::Detached
        };
        self.end(reason, "a client disconnected the session".into())
            .await;
        let _ = reply.send(Ok(()));
    }

    pub(super) async fn end(&mut self, reason: EndReason, detail: String) {
        if self.ended {
            return;
        }
        self.ended = true;
        self.shared.ended.store(true, Ordering::Release);
        if reason == EndReason::AdapterDied || reason == EndReason::ProtocolError {
            // Never leave a debuggee running without its debugger.
            self.kill_everything();
        }
        self.kill_adapter();
        self.book
            .resolve_where(|_| true, CommandKind::Unspecified, "session-ended");
        self.session.state = SessionState::Ended.into();
        self.session.end_reason = reason.into();
        self.session.exit_code = self.exit_code;
        self.session.signal = self.end_signal.clone().unwrap_or_default();
        let died = reason == EndReason::AdapterDied;
        if let Some(inflight) = self.exec.take_waited() {
            let _ = inflight.reply.send(if died {
                Err(ApiError::new(ErrorReason::AdapterDied, detail.clone()))
            } else {
                Ok(StableState {
                    state: SessionState::Ended.into(),
                    waited: true,
                    end_reason: reason.into(),
                    exit_code: self.exit_code,
                    signal: self.session.signal.clone(),
                    output: self.output_since(inflight.output_from),
                    elapsed_ms: inflight.started.elapsed().as_millis() as u64,
                    ..Default::default()
                })
            });
        }
        for request in self.exec.drain() {
            let _ = request.reply.send(Err(ApiError::new(
                ErrorReason::SessionEnded,
                "the session ended",
            )));
        }
        tracing::info!(session = %self.shared.id, ?reason, %detail, "session ended");
        self.span.end(|| {
            use opentelemetry::KeyValue;
            let mut attributes = vec![
                KeyValue::new(
                    "stepd.session.end_reason",
                    stepd_proto::short_name(reason.as_str_name()),
                ),
                KeyValue::new("stepd.session.end_detail", detail.clone()),
            ];
            if let Some(code) = self.exit_code {
                attributes.push(KeyValue::new("process.exit.code", i64::from(code)));
            }
            attributes
        });
        self.publish(Payload::SessionEnded(SessionEnded {
            reason: reason.into(),
            detail,
            exit_code: self.exit_code,
            signal: self.session.signal.clone(),
        }));
    }
}

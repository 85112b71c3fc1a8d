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

use super::{Actor, DISCONNECT_DEADLINE, lifecycle};
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
        self.life.ended_while_stopped(process::zombie_status(pid));
        tracing::info!(session = %self.shared.id, pid, "the debuggee ended while stopped");
        let reason = self.life.at_debuggee_gone();
        self.end(
            reason,
            format!("the program (pid {pid}) ended while stopped; the adapter did not report it"),
        )
        .await;
    }

    /// Ends the session at a client's Disconnect (or the daemon's shutdown,
    /// as one without a mode): a launched program is terminated, an
    /// attached one let go, unless the mode says otherwise.
    pub(super) async fn disconnect(
        &mut self,
        mode: DisconnectMode,
        reply: oneshot::Sender<ApiResult<()>>,
    ) {
        let (terminate, reason) = lifecycle::disconnect(mode, self.request.attach);
        let request = self.client.send(
            "disconnect",
            json!({"terminateDebuggee": terminate, "restart": false}),
        );
        let _ = tokio::time::timeout(DISCONNECT_DEADLINE, request).await;
        self.end(reason, "a client disconnected the session".into())
            .await;
        let _ = reply.send(Ok(()));
    }

    pub(super) async fn end(&mut self, reason: EndReason, detail: String) {
        let Some(ending) = self.life.end(reason) else {
            return;
        };
        self.shared.ended.store(true, Ordering::Release);
        if ending.kill_everything {
            // Never leave a debuggee running without its debugger.
            self.kill_everything();
        }
        self.kill_adapter();
        self.book
            .resolve_where(|_| true, CommandKind::Unspecified, "session-ended");
        self.session.state = self.life.state().into();
        self.session.end_reason = reason.into();
        self.session.exit_code = ending.exit_code;
        self.session.signal = ending.signal;
        let died = reason == EndReason::AdapterDied;
        if let Some(inflight) = self.exec.take_waited() {
            let _ = inflight.reply.send(if died {
                Err(ApiError::new(ErrorReason::AdapterDied, detail.clone()))
            } else {
                Ok(StableState {
                    state: SessionState::Ended.into(),
                    waited: true,
                    end_reason: reason.into(),
                    exit_code: self.session.exit_code,
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
            if let Some(code) = self.session.exit_code {
                attributes.push(KeyValue::new("process.exit.code", i64::from(code)));
            }
            attributes
        });
        self.publish(Payload::SessionEnded(SessionEnded {
            reason: reason.into(),
            detail,
            exit_code: self.session.exit_code,
            signal: self.session.signal.clone(),
        }));
    }
}

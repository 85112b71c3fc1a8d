//! What the adapter sends of itself: events, reverse requests, the end of
//! its output.

use serde_json::{Value, json};
use stepd_proto::v1::{
    BreakpointPlacement, BreakpointStatus, CommandKind, EndReason, SessionState, SessionUpdated,
    Thread, ThreadChanged, event::Payload,
};

use super::Actor;
use crate::{client::Incoming, messages, session::LaunchRequest};

impl Actor {
    pub(super) async fn on_incoming(&mut self, message: Incoming) {
        match message {
            Incoming::Event { event, body } => self.on_event(&event, body).await,
            Incoming::Request {
                seq,
                command,
                arguments,
            } => self.on_reverse_request(seq, &command, arguments),
            Incoming::OutputDropped(count) => {
                // Never silent: the output shows where it lost lines.
                let note = format!(
                    "[stepd: {count} output events of the adapter were dropped; the session fell \
                     behind]\n"
                );
                let chunk = self
                    .shared
                    .output
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push("stepd", &note);
                self.publish(Payload::Output(stepd_proto::v1::Output {
                    chunk: Some(chunk),
                }));
            }
            Incoming::Closed(None) => {
                if !self.life.is_ended() {
                    let reason = self.life.at_adapter_closed();
                    self.end(reason, "the adapter closed its connection".into())
                        .await;
                }
            }
            Incoming::Closed(Some(error)) => {
                if !self.life.is_ended() {
                    self.end(EndReason::ProtocolError, error).await;
                }
            }
        }
    }

    /// Requests from the adapter. `startDebugging` (debugpy's child processes)
    /// becomes a child session; `runInTerminal` is refused: stepd captures
    /// output itself and has no terminal to offer.
    pub(super) fn on_reverse_request(&mut self, seq: i64, command: &str, arguments: Value) {
        tracing::debug!(
            session = %self.shared.id,
            command,
            arguments = %crate::client::loggable(&json!({"arguments": arguments}))["arguments"],
            "reverse request"
        );
        if command != "startDebugging" {
            self.client.respond(
                seq,
                command,
                Err(format!(
                    "stepd does not handle the reverse request {command:?}"
                )),
            );
            return;
        }
        let configuration = arguments["configuration"].clone();
        let host = configuration["connect"]["host"]
            .as_str()
            .unwrap_or("127.0.0.1");
        let port = configuration["connect"]["port"].as_u64().unwrap_or(0);
        let Some(children) = Some(self.children.clone()).filter(|_| port > 0) else {
            self.client.respond(
                seq,
                command,
                Err("stepd can only follow child sessions it can connect to".into()),
            );
            return;
        };
        let request = LaunchRequest {
            attach: arguments["request"].as_str() != Some("launch"),
            adapter: self.adapter.name().to_owned(),
            labels: self.request.labels.clone(),
            name: configuration["name"].as_str().unwrap_or("child").to_owned(),
            program: configuration["program"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            parent_session_id: self.shared.id.clone(),
            started_by: self.request.started_by.clone(),
            dap_server: format!("{host}:{port}"),
            configuration: Some(configuration),
            ..Default::default()
        };
        let result = children
            .send(request)
            .map(|()| json!({}))
            .map_err(|_| "the daemon is shutting down".to_owned());
        self.client.respond(seq, command, result);
    }

    pub(super) async fn on_event(&mut self, event: &str, body: Value) {
        match event {
            "output" => {
                let Some(out) = self.body::<messages::OutputEvent>("output event", body) else {
                    return;
                };
                if out.category == "telemetry" {
                    return;
                }
                let chunk = self
                    .shared
                    .output
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(&out.category, &out.output);
                self.publish(Payload::Output(stepd_proto::v1::Output {
                    chunk: Some(chunk),
                }));
            }
            "stopped" => {
                // A stop that only served a log point or a snapshot is silent.
                if let Some(state) = self.on_stopped(&body).await {
                    self.complete_inflight(state);
                    self.start_next().await;
                }
            }
            "continued" => {
                let Some(c) = self.body::<messages::ContinuedEvent>("continued event", body) else {
                    return;
                };
                let thread = if c.all_threads_continued {
                    0
                } else {
                    c.thread_id
                };
                self.resumed(thread, CommandKind::Unspecified, "adapter");
            }
            "process" => {
                if let Some(process) = self.body::<messages::ProcessEvent>("process event", body) {
                    self.on_process(&process);
                }
            }
            "exited" => {
                let Some(exited) = self.body::<messages::ExitedEvent>("exited event", body) else {
                    return;
                };
                self.life.exited(exited.exit_code);
            }
            "terminated" => {
                let reason = self.life.at_terminated();
                self.end(reason, "the program ended".into()).await;
            }
            "thread" => {
                let Some(thread) = self.body::<messages::ThreadEvent>("thread event", body) else {
                    return;
                };
                self.publish(Payload::ThreadChanged(ThreadChanged {
                    thread: Some(Thread {
                        id: thread.thread_id,
                        ..Default::default()
                    }),
                    reason: thread.reason,
                }));
            }
            "breakpoint" => {
                let Some(changed) =
                    self.body::<messages::BreakpointEvent>("breakpoint event", body)
                else {
                    return;
                };
                let placed = changed.breakpoint;
                let ids = placed
                    .id
                    .map(|id| self.placed.of(id).to_vec())
                    .unwrap_or_default();
                for bp_id in ids {
                    let status = BreakpointStatus {
                        session_id: self.shared.id.clone(),
                        verified: placed.verified,
                        actual_line: placed.line.unwrap_or(0),
                        message: placed.message.clone().unwrap_or_default(),
                        breakpoint_id: bp_id.clone(),
                    };
                    self.publish_status(&BreakpointPlacement {
                        breakpoint_id: bp_id,
                        requested_line: 0,
                        status: Some(status),
                    });
                }
            }
            _ => {}
        }
    }

    /// A typed event body, or None after telling every client that the
    /// adapter sent it malformed (it is not read as empty values).
    pub(super) fn body<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        body: Value,
    ) -> Option<T> {
        match messages::parse(what, body) {
            Ok(parsed) => Some(parsed),
            Err(problem) => {
                self.adapter_fault(&problem);
                None
            }
        }
    }

    /// Tells clients the adapter broke the protocol in a way stepd survives.
    pub(super) fn adapter_fault(&self, problem: &str) {
        tracing::warn!(session = %self.shared.id, problem, "adapter fault");
        self.publish(Payload::Notification(stepd_proto::v1::Notification {
            level: stepd_proto::v1::NotificationLevel::Warning.into(),
            message: format!("{}: {problem}", self.adapter.name()),
        }));
    }

    /// The adapter's `process` event names the debuggee. debugpy sends it
    /// only after session_started, so a pid learnt then is published as a
    /// session_updated; the same pid again publishes nothing.
    pub(super) fn on_process(&mut self, process: &messages::ProcessEvent) {
        let Some(pid) = process
            .system_process_id
            .and_then(|p| u32::try_from(p).ok())
        else {
            return;
        };
        self.learn_debuggee(pid);
        if self.session.pid == i64::from(pid) {
            return;
        }
        self.session.pid = i64::from(pid);
        if self.session.state != SessionState::Starting as i32 {
            self.publish(Payload::SessionUpdated(Box::new(SessionUpdated {
                session: Some(self.session.clone()),
            })));
        }
    }
}

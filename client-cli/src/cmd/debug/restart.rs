//! Commands about the whole run in `stepctl debug`: `restart`, `jump`
//! (where the adapter can), and `watch`, which stepd cannot carry out yet
//! and says why.

use stepd_proto::v1::{
    CommandKind, DisconnectMode, DisconnectRequest, GetSessionRequest, JumpCommand,
    debug_command::Command, session_service_client::SessionServiceClient,
};

use super::{Debugger, Flow};
use crate::{
    connect::client,
    render::sessions::{placements, session_line},
};

impl Debugger {
    /// `restart`: terminate the program and launch it again as this loop
    /// did; the label the launch carries keeps this session's breakpoints.
    pub(super) async fn restart(&mut self) -> Flow {
        let Some(request) = self.launched.clone() else {
            self.error(
                "restart: this session was not launched by this stepctl debug, so its program \
                 and arguments are not known here (stepctl debug --launch PROGRAM can restart)",
            );
            return Flow::Go;
        };
        let mut sessions = client!(SessionServiceClient, self.channel.clone());
        if let Err(status) = sessions
            .disconnect(DisconnectRequest {
                session_id: self.session_id.clone(),
                mode: DisconnectMode::Terminate.into(),
            })
            .await
        {
            self.error(&format!("restart: {}", status.message()));
            return Flow::Go;
        }
        let old = std::mem::take(&mut self.session_id);
        let launched = match sessions.launch(request).await {
            Ok(r) => r.into_inner(),
            Err(status) => {
                return Flow::End(format!(
                    "restart: session {old} ended, but the launch failed: {}",
                    status.message()
                ));
            }
        };
        let session = launched.session.unwrap_or_default();
        // The old session's events still on their way are no longer ours.
        self.session_id = session.id.clone();
        self.pending.clear();
        self.current = None;
        self.expression_for = None;
        self.waiting = None;
        self.deferred = None;
        self.evals.clear();
        self.answered.clear();
        self.view.forget_stops();
        self.refresh_names();
        let mut lines = vec![session_line("relaunched", &session)];
        if !launched.breakpoints.is_empty() {
            lines.push(placements(&launched.breakpoints));
        }
        self.say(lines);
        let watched = self
            .stream
            .watch(
                vec![session.id],
                self.stream.cursor,
                self.instance_id.clone(),
            )
            .await;
        match watched {
            Ok(()) => Flow::Go,
            Err(_) => Flow::End("the event stream is closed".into()),
        }
    }

    /// The adapter's name and whether it announces `capability`.
    async fn adapter_announces(&mut self, capability: &str) -> Result<(String, bool), String> {
        let session = client!(SessionServiceClient, self.channel.clone())
            .get_session(GetSessionRequest {
                session_id: self.session_id.clone(),
            })
            .await
            .map_err(|s| s.message().to_owned())?
            .into_inner()
            .session
            .unwrap_or_default();
        let announced = session
            .capabilities
            .as_ref()
            .and_then(|c| c.fields.get(capability))
            .is_some_and(|v| matches!(v.kind, Some(prost_types::value::Kind::BoolValue(true))));
        Ok((session.adapter, announced))
    }

    /// Says why a command needs what stepd does not have yet, and whether
    /// the adapter could do it.
    async fn unavailable(&mut self, command: &str, what: &str, capability: &str, instead: &str) {
        let adapter = match self.adapter_announces(capability).await {
            Ok((adapter, true)) => format!("{adapter} could ({capability})"),
            Ok((adapter, false)) => format!("{adapter} could not either (no {capability})"),
            Err(message) => format!("the adapter is unknown: {message}"),
        };
        self.error(&format!(
            "{command}: stepd has no {what} yet; {adapter}. {instead}"
        ));
    }

    /// `jump LINE`: JUMP (DAP goto) where the pause offers it; else why not.
    pub(super) async fn jump(&mut self, line: &str) -> Flow {
        let Ok(number) = line.trim().parse::<u32>() else {
            self.error(&format!("jump takes a line number, not {line:?}"));
            return Flow::Go;
        };
        let Some(pause) = self.current_pause() else {
            self.error("no pause pending: the program is running (pause pauses it)");
            return Flow::Go;
        };
        if pause.input_type.contains(&(CommandKind::Jump as i32)) {
            return self
                .send(Command::Jump(JumpCommand {
                    path: String::new(),
                    line: number,
                }))
                .await;
        }
        let adapter = match self.adapter_announces("supportsGotoTargetsRequest").await {
            Ok((adapter, _)) => adapter,
            Err(message) => format!("the adapter ({message})"),
        };
        self.error(&format!(
            "jump: {adapter} cannot jump (it has no DAP goto); until {number} runs to that \
             line instead."
        ));
        Flow::Go
    }

    /// `watch EXPR`: a data breakpoint, which stepd does not offer.
    pub(super) async fn watch(&mut self, expression: &str) {
        self.unavailable(
            "watch",
            "data breakpoints",
            "supportsDataBreakpoints",
            &format!(
                "display {expression} shows it at every stop; b LINE if COND stops on a condition."
            ),
        )
        .await;
    }
}

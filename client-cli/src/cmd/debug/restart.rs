//! Commands about the whole run in `stepctl debug`: `restart`, `jump`
//! (where the adapter can) and `watch` (a data breakpoint).

use stepd_proto::v1::{
    AddBreakpointRequest, BreakpointSpec, CommandKind, DataAccess, DataLocation, DisconnectMode,
    DisconnectRequest, GetSessionRequest, JumpCommand,
    breakpoint_service_client::BreakpointServiceClient, breakpoint_spec::Location,
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

    /// `watch EXPR`: a data breakpoint on the value, for this session; the
    /// adapter's word when it cannot watch it (debugpy has no data
    /// breakpoints).
    pub(super) async fn watch(&mut self, expression: &str) {
        let spec = BreakpointSpec {
            location: Some(Location::Data(DataLocation {
                expression: expression.to_owned(),
                access: DataAccess::Write.into(),
            })),
            label_selector: self.scope.selector(),
            ..Default::default()
        };
        let added = client!(BreakpointServiceClient, self.channel.clone())
            .add_breakpoint(AddBreakpointRequest { spec: Some(spec) })
            .await;
        let bp = match added {
            Ok(r) => r.into_inner().breakpoint.unwrap_or_default(),
            Err(status) => return self.error(&format!("error: {}", status.message())),
        };
        self.print(format!(
            "watchpoint {} on {expression} ({}); its placement follows",
            bp.id,
            self.scope.whose(false)
        ));
        self.scope.own.insert(bp.id.clone());
        self.added.insert(bp.id);
    }
}

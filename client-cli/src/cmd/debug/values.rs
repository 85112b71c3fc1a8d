//! Values in `stepctl debug` that leave the program stopped: `!STMT`,
//! `NAME = EXPR`, `pp`, `whatis`, `args` and `retval`.

use stepd_proto::v1::{
    DisplayValue, EvaluateContext, FrameExpression, InspectRequest, InspectSource, InspectorConfig,
    LaunchRequest, ListScopesRequest, ListVariablesRequest, Local, PrintValueRequest,
    SetVariableRequest, inspect_source, inspector_service_client::InspectorServiceClient,
    session_service_client::SessionServiceClient,
};

use super::{Debugger, source};
use crate::{colour, connect::client};

/// How debugpy names a function's return value among the locals, after a
/// step out of it.
const RETURN_PREFIX: &str = "(return) ";

/// Asks debugpy, when it is the adapter, to show what a function returned
/// among the locals of the next stop (its `showReturnValue`), for `retval`.
pub fn show_return_values(request: &mut LaunchRequest) {
    let debugpy = request.adapter == "debugpy"
        || (request.adapter.is_empty()
            && request.adapter_command.is_empty()
            && request.program.ends_with(".py"));
    if debugpy {
        request
            .adapter_options
            .get_or_insert_with(Default::default)
            .fields
            .entry("showReturnValue".to_owned())
            .or_insert(prost_types::Value {
                kind: Some(prost_types::value::Kind::BoolValue(true)),
            });
    }
}

impl Debugger {
    /// The selected frame of a DAP pause, or a message saying why there is none.
    async fn dap_frame(&mut self) -> Result<(usize, stepd_proto::v1::Frame), String> {
        if self.current_pause().is_some_and(|p| p.point.is_some()) {
            return Err("a probe pause has no frames (e and inj answer it)".into());
        }
        self.selected_frame()
            .await?
            .ok_or_else(|| "no pause pending: the program is running (pause pauses it)".into())
    }

    /// `!STMT`: run in the adapter's REPL context; the pause stays.
    pub(super) async fn statement(&mut self, code: &str) {
        if let Err(message) = self.dap_frame().await {
            return self.error(&message);
        }
        match self.evaluate_in(code, EvaluateContext::Repl).await {
            Ok(result) => {
                if !result.value.is_empty() && result.value != "None" {
                    self.print(colour::value(&result.value));
                }
                self.refresh_locals().await;
            }
            Err(message) => self.error(&format!("error: {message}")),
        }
    }

    /// `NAME = EXPR`: set the variable where the selected frame sees it; a
    /// name it does not have yet is assigned as a statement.
    pub(super) async fn assign(&mut self, name: &str, value: &str) {
        let frame = match self.dap_frame().await {
            Ok((_, frame)) => frame,
            Err(message) => return self.error(&message),
        };
        let mut sessions = client!(SessionServiceClient, self.channel.clone());
        let scopes = match sessions
            .list_scopes(ListScopesRequest {
                session_id: self.session_id.clone(),
                frame_id: frame.id.clone(),
            })
            .await
        {
            Ok(r) => r.into_inner().scopes,
            Err(status) => return self.error(&format!("error: {}", status.message())),
        };
        for scope in scopes.iter().filter(|s| !s.expensive) {
            let Ok(variables) = sessions
                .list_variables(ListVariablesRequest {
                    session_id: self.session_id.clone(),
                    variables_ref: scope.variables_ref.clone(),
                    ..Default::default()
                })
                .await
            else {
                continue;
            };
            if !variables
                .into_inner()
                .variables
                .iter()
                .any(|v| v.name == name)
            {
                continue;
            }
            let set = sessions
                .set_variable(SetVariableRequest {
                    session_id: self.session_id.clone(),
                    variables_ref: scope.variables_ref.clone(),
                    name: name.to_owned(),
                    value: value.to_owned(),
                })
                .await;
            return match set {
                Ok(r) => {
                    let variable = r.into_inner().variable.unwrap_or_default();
                    self.print(format!("{name} = {}", colour::value(&variable.value)));
                    self.refresh_locals().await;
                }
                Err(status) => self.error(&format!("error: {}", status.message())),
            };
        }
        self.statement(&format!("{name} = {value}")).await;
    }

    /// After a change, the pause's locals (shown by `info locals`) as they are now.
    async fn refresh_locals(&mut self) {
        let Ok((0, frame)) = self.dap_frame().await else {
            return;
        };
        let Ok(variables) = self.frame_locals(&frame).await else {
            return;
        };
        let Some(key) = self.current.clone() else {
            return;
        };
        if let Some(pause) = self.pending.iter_mut().find(|p| p.key == key) {
            pause.locals = variables
                .into_iter()
                .map(|v| Local {
                    name: v.name,
                    value: Some(DisplayValue {
                        text: v.value,
                        truncated: false,
                        r#type: v.r#type,
                    }),
                })
                .collect();
        }
        self.refresh_names();
    }

    /// `pp EXPR`: the inspector's pretty printing, whole.
    pub(super) async fn pretty_print(&mut self, expression: &str) {
        let frame_id = match self.dap_frame().await {
            Ok((_, frame)) => frame.id,
            Err(message) => return self.error(&message),
        };
        let mut inspector = client!(InspectorServiceClient, self.channel.clone());
        let opened = inspector
            .inspect(InspectRequest {
                session_id: self.session_id.clone(),
                source: Some(InspectSource {
                    source: Some(inspect_source::Source::Expression(FrameExpression {
                        session_id: self.session_id.clone(),
                        frame_id,
                        code: expression.to_owned(),
                    })),
                }),
                config: Some(InspectorConfig {
                    pretty_print: Some(true),
                    ..Default::default()
                }),
            })
            .await;
        let id = match opened {
            Ok(r) => r.into_inner().rendering.unwrap_or_default().inspector_id,
            Err(status) => return self.error(&format!("error: {}", status.message())),
        };
        let mut text = String::new();
        let printed = async {
            let mut stream = inspector
                .print_value(PrintValueRequest {
                    inspector_id: id.clone(),
                    chunk_size: 0,
                })
                .await?
                .into_inner();
            while let Some(chunk) = stream.message().await? {
                text.push_str(&chunk.chunk);
            }
            Ok::<(), tonic::Status>(())
        }
        .await;
        inspector
            .clear(stepd_proto::v1::ClearRequest { inspector_id: id })
            .await
            .ok();
        match printed {
            Ok(()) => self.print(colour::value(text.trim_end())),
            Err(status) => self.error(&format!("error: {}", status.message())),
        }
    }

    /// `whatis EXPR`.
    pub(super) async fn what_is(&mut self, expression: &str) {
        if let Err(message) = self.dap_frame().await {
            return self.error(&message);
        }
        match self
            .evaluate_in(expression, EvaluateContext::Unspecified)
            .await
        {
            Ok(result) if result.r#type.is_empty() => {
                self.error(&format!("the adapter gives no type for {expression}"))
            }
            Ok(result) => self.print(format!("type = {}", result.r#type)),
            Err(message) => self.error(&format!("error: {message}")),
        }
    }

    /// `args`: the parameters of the selected frame's function, by its
    /// signature in the source, with their values.
    pub(super) async fn args(&mut self) {
        let (_, frame) = match self.dap_frame().await {
            Ok(frame) => frame,
            Err(message) => return self.error(&message),
        };
        let locals = match self.frame_locals(&frame).await {
            Ok(locals) => locals,
            Err(message) => return self.error(&format!("error: {message}")),
        };
        let location = frame.location.clone().unwrap_or_default();
        let Some(names) = source::parameters(&location.path, location.line, &frame.name) else {
            let mut lines = vec![format!(
                "the arguments of {} cannot be read from its source; its locals:",
                frame.name
            )];
            lines.extend(
                locals
                    .iter()
                    .map(|v| format!("{} = {}", v.name, colour::value(&v.value))),
            );
            return self.say(lines);
        };
        if names.is_empty() {
            return self.print(format!("{} takes no arguments", frame.name));
        }
        let lines = names
            .iter()
            .map(|name| match locals.iter().find(|v| &v.name == name) {
                Some(v) => format!("{name} = {}", colour::value(&v.value)),
                None => format!("{name} = (not among the frame's variables)"),
            })
            .collect();
        self.say(lines);
    }

    /// `retval`: debugpy's `(return) NAME` local of the stop after a step out.
    pub(super) async fn retval(&mut self) {
        let Some(pause) = self.current_pause().cloned() else {
            return self.error("no pause pending: the program is running (pause pauses it)");
        };
        if pause.point.is_some() {
            return self.error("a probe pause has no return value (its value shows as =)");
        }
        let found: Vec<String> = pause
            .locals
            .iter()
            .filter_map(|l| {
                let function = l.name.strip_prefix(RETURN_PREFIX)?;
                let value = l
                    .value
                    .as_ref()
                    .map(crate::render::pauses::display)
                    .unwrap_or_default();
                Some(format!("{function} returned {}", colour::value(&value)))
            })
            .collect();
        if found.is_empty() {
            self.error(
                "no return value here: debugpy reports one right after finish (a step out); \
                 other adapters do not report return values",
            );
        } else {
            self.say(found);
        }
    }
}

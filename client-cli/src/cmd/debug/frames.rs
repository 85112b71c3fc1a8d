//! Frames in `stepctl debug`: the selected frame (`up`, `down`, `frame N`),
//! and what follows it: `p`, `info locals`, `display`, `bt`'s marker.

use stepd_proto::v1::{
    EvaluateContext, EvaluateRequest, Frame, GetStackTraceRequest, ListScopesRequest,
    ListVariablesRequest, StacktraceCommand, Variable, debug_command::Command,
    session_service_client::SessionServiceClient,
};

use super::{Debugger, Flow, source};
use crate::{
    colour,
    connect::client,
    render::{events, pauses},
};

/// What the loop shows from: the selected frame and the stack of one pause,
/// the displays, where `list` goes on.
#[derive(Default)]
pub struct View {
    /// The pause the selection, stack and `list` place belong to.
    key: Option<String>,
    frame: usize,
    stack: Vec<Frame>,
    /// Display expressions by number (from 1); removed ones stay `None`.
    displays: Vec<Option<String>>,
    /// A new stop whose displays are yet to be shown.
    pub display_due: Option<String>,
    /// `list` again: the file and the first line to show next.
    pub list_next: Option<(String, u32)>,
}

impl View {
    /// The selected frame's index at pause `current` (0 at a new pause).
    pub fn selected(&self, current: Option<&str>) -> usize {
        if current.is_some() && self.key.as_deref() == current {
            self.frame
        } else {
            0
        }
    }

    fn follow(&mut self, key: &str) {
        if self.key.as_deref() != Some(key) {
            self.key = Some(key.to_owned());
            self.frame = 0;
            self.stack.clear();
            self.list_next = None;
        }
    }

    /// Forgets the stops of an ended session; the displays stay.
    pub fn forget_stops(&mut self) {
        self.key = None;
        self.frame = 0;
        self.stack.clear();
        self.display_due = None;
        self.list_next = None;
    }

    /// Keeps the frames a STACKTRACE answer brought.
    pub fn keep_stack(&mut self, key: &str, frames: Vec<Frame>) {
        self.follow(key);
        self.stack = frames;
    }
}

impl Debugger {
    /// The stack of the current pause, fetched once per pause.
    pub(super) async fn stack(&mut self) -> Result<Vec<Frame>, String> {
        let pause = self
            .current_pause()
            .cloned()
            .ok_or("no pause pending: the program is running (pause pauses it)")?;
        if pause.point.is_some() {
            return Err("a probe pause has no frames".into());
        }
        self.view.follow(&pause.key);
        if self.view.stack.is_empty() {
            self.view.stack = client!(SessionServiceClient, self.channel.clone())
                .get_stack_trace(GetStackTraceRequest {
                    session_id: self.session_id.clone(),
                    thread_id: pause.thread_id,
                    start_frame: 0,
                    levels: 0,
                })
                .await
                .map_err(|s| s.message().to_owned())?
                .into_inner()
                .frames;
        }
        Ok(self.view.stack.clone())
    }

    /// The selected frame; `None` while the program runs (evaluation is then global).
    pub(super) async fn selected_frame(&mut self) -> Result<Option<(usize, Frame)>, String> {
        if self.current_pause().is_none() {
            return Ok(None);
        }
        let stack = self.stack().await?;
        let index = self.view.selected(self.current.as_deref());
        let frame = stack
            .get(index)
            .cloned()
            .ok_or("the stopped thread has no frames")?;
        Ok(Some((index, frame)))
    }

    /// EXPR's value in the selected frame.
    async fn evaluate(&mut self, expression: &str) -> Result<String, String> {
        let result = self
            .evaluate_in(expression, EvaluateContext::Unspecified)
            .await?;
        Ok(result.value)
    }

    /// EXPR evaluated in the selected frame, in a DAP evaluation context.
    pub(super) async fn evaluate_in(
        &mut self,
        expression: &str,
        context: EvaluateContext,
    ) -> Result<Variable, String> {
        let frame_id = self
            .selected_frame()
            .await?
            .map(|(_, f)| f.id)
            .unwrap_or_default();
        Ok(client!(SessionServiceClient, self.channel.clone())
            .evaluate(EvaluateRequest {
                session_id: self.session_id.clone(),
                expression: expression.to_owned(),
                frame_id,
                context: context.into(),
            })
            .await
            .map_err(|s| s.message().trim_end().to_owned())?
            .into_inner()
            .result
            .unwrap_or_default())
    }

    /// `p EXPR`: in the selected frame; at a probe pause, through its EVAL.
    pub(super) async fn print_expression(&mut self, expression: &str) -> Flow {
        if self.current_pause().is_some_and(|p| p.point.is_some()) {
            return self
                .send(Command::Eval(stepd_proto::v1::EvalCommand {
                    code: expression.to_owned(),
                }))
                .await;
        }
        match self.evaluate(expression).await {
            Ok(value) => self.print(format!("= {}", colour::value(&value))),
            // The RPC's message is cut to a size limit, which a debugger's
            // own traceback can fill before the error: in the pause's frame,
            // its EVAL reports the whole error (shown without those frames).
            Err(message)
                if crate::render::events::traceback_cut(&message)
                    && self.view.selected(self.current.as_deref()) == 0
                    && self.current_pause().is_some() =>
            {
                return self
                    .send(Command::Eval(stepd_proto::v1::EvalCommand {
                        code: expression.to_owned(),
                    }))
                    .await;
            }
            Err(message) => self.error(&format!(
                "error: {}",
                crate::render::events::user_error(&message)
            )),
        }
        Flow::Go
    }

    /// `bt`: the STACKTRACE answer comes as an event, rendered with the
    /// selected frame marked.
    pub(super) async fn backtrace(&mut self) -> Flow {
        self.send(Command::Stacktrace(StacktraceCommand {})).await
    }

    /// `up N` / `down N`.
    pub(super) async fn move_frame(&mut self, by: isize) {
        let stack = match self.stack().await {
            Ok(stack) => stack,
            Err(message) => return self.error(&message),
        };
        let now = self.view.selected(self.current.as_deref()) as isize;
        let to = now + by;
        if to < 0 {
            return self.error("already at the innermost frame (#0)");
        }
        if to as usize >= stack.len() {
            return self.error(&format!(
                "already at the outermost frame (#{})",
                stack.len().saturating_sub(1)
            ));
        }
        self.view.frame = to as usize;
        self.show_frame().await;
    }

    /// `frame N`, or `frame` alone: the selected one.
    pub(super) async fn select_frame(&mut self, index: Option<usize>) {
        let stack = match self.stack().await {
            Ok(stack) => stack,
            Err(message) => return self.error(&message),
        };
        if let Some(index) = index {
            if index >= stack.len() {
                return self.error(&format!(
                    "no frame #{index}; the stack has {} (bt lists them)",
                    stack.len()
                ));
            }
            self.view.frame = index;
        }
        self.show_frame().await;
    }

    /// The selected frame and its line; Tab then completes its locals.
    async fn show_frame(&mut self) {
        let Ok(Some((index, frame))) = self.selected_frame().await else {
            return;
        };
        let mut lines = vec![events::frame_line(index, &frame, true)];
        if let Some(location) = &frame.location
            && let Some(text) = source::line_text(&location.path, location.line)
        {
            lines.push(format!("-> {} | {text}", location.line));
        }
        self.view.list_next = None;
        self.say(lines);
        if let Ok(locals) = self.frame_locals(&frame).await
            && let Ok(mut names) = self.names.lock()
        {
            *names = locals.into_iter().map(|v| v.name).collect();
        }
    }

    /// The first scope's variables of a frame (its locals).
    pub(super) async fn frame_locals(&self, frame: &Frame) -> Result<Vec<Variable>, String> {
        let mut client = client!(SessionServiceClient, self.channel.clone());
        let scopes = client
            .list_scopes(ListScopesRequest {
                session_id: self.session_id.clone(),
                frame_id: frame.id.clone(),
            })
            .await
            .map_err(|s| s.message().to_owned())?
            .into_inner()
            .scopes;
        let Some(scope) = scopes.iter().find(|s| !s.expensive).or(scopes.first()) else {
            return Ok(Vec::new());
        };
        Ok(client
            .list_variables(ListVariablesRequest {
                session_id: self.session_id.clone(),
                variables_ref: scope.variables_ref.clone(),
                ..Default::default()
            })
            .await
            .map_err(|s| s.message().to_owned())?
            .into_inner()
            .variables)
    }

    /// `info locals`: the selected frame's.
    pub(super) async fn info_locals(&mut self) {
        let Some(pause) = self.current_pause().cloned() else {
            return self.error("no pause pending: the program is running (pause pauses it)");
        };
        let at_top = self.view.selected(self.current.as_deref()) == 0;
        let locals: Vec<(String, String)> =
            if at_top && (pause.locals_available || pause.point.is_some()) {
                pause
                    .locals
                    .iter()
                    .map(|l| {
                        let value = l.value.as_ref().map(pauses::display);
                        (l.name.clone(), value.unwrap_or_default())
                    })
                    .collect()
            } else {
                let frame = match self.selected_frame().await {
                    Ok(Some((_, frame))) => frame,
                    Ok(None) => return,
                    Err(message) => return self.error(&message),
                };
                match self.frame_locals(&frame).await {
                    Ok(vars) => vars.into_iter().map(|v| (v.name, v.value)).collect(),
                    Err(message) => return self.error(&format!("error: {message}")),
                }
            };
        if locals.is_empty() {
            return self.print("no locals".into());
        }
        let lines = locals
            .into_iter()
            .map(|(name, value)| format!("{name} = {}", colour::value(&value)))
            .collect();
        self.say(lines);
    }

    /// `display EXPR`: shown now and at every stop; `display` alone shows them.
    pub(super) async fn display(&mut self, expression: Option<String>) {
        match expression {
            None => self.show_displays().await,
            Some(expression) => {
                self.view.displays.push(Some(expression.clone()));
                let n = self.view.displays.len();
                if self.current_pause().is_some() {
                    let line = self.display_line(n, &expression).await;
                    self.print(line);
                } else {
                    self.print(format!("{n}: {expression} (shown at the next stop)"));
                }
            }
        }
    }

    async fn display_line(&mut self, n: usize, expression: &str) -> String {
        match self.evaluate(expression).await {
            Ok(value) => format!("{n}: {expression} = {}", colour::value(&value)),
            Err(message) => format!("{n}: {expression}: {}", colour::error(&message)),
        }
    }

    /// Every display, evaluated in the selected frame.
    pub(super) async fn show_displays(&mut self) {
        let displays: Vec<(usize, String)> = self
            .view
            .displays
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.clone().map(|d| (i + 1, d)))
            .collect();
        if self.current_pause().is_some_and(|p| p.point.is_some()) {
            return;
        }
        let mut lines = Vec::new();
        for (n, expression) in displays {
            lines.push(self.display_line(n, &expression).await);
        }
        self.say(lines);
    }

    /// `undisplay N`, or all.
    pub(super) fn undisplay(&mut self, n: Option<usize>) {
        match n {
            None => self.view.displays.clear(),
            Some(n) => match self.view.displays.get_mut(n.wrapping_sub(1)) {
                Some(slot @ Some(_)) => *slot = None,
                _ => self.error(&format!("no display {n} (info display lists them)")),
            },
        }
    }

    /// `info display`.
    pub(super) fn info_display(&mut self) {
        let lines: Vec<String> = self
            .view
            .displays
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.as_ref().map(|d| format!("{}: {d}", i + 1)))
            .collect();
        if lines.is_empty() {
            self.print("no displays".into());
        } else {
            self.say(lines);
        }
    }
}

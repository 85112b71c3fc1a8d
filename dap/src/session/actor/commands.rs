//! Debug input at DAP pauses: every command of the pause protocol. The
//! stepping modes some of them leave behind are `steering`'s.

use std::collections::HashMap;

use serde_json::json;
use stepd_proto::v1::{
    Cause, CommandKind, ErrorReason, Frame, Notification, NotificationLevel, PauseReason,
    Rendering, StepKind, event::Payload, inject_command::Replacement,
};

use super::{
    Actor, PauseCtx, dap_error,
    steering::{HERE_BREAKPOINT, Mode, Tracing, Until},
};
use crate::capability::Capability;
use crate::{
    messages::{
        EvaluateResponse, ExceptionInfoResponse, GotoTargetsResponse, ScopesResponse,
        StackTraceResponse,
    },
    session::{stop, values},
};
use stepd_core::{
    error::{ApiError, ApiResult},
    session::{
        ExecOp, PauseTarget,
        pause::{
            answer::{self, Go, PauseOwner, Reply},
            book::PauseBook,
        },
    },
};

/// Steps a TRACE takes when the command names no limit.
const DEFAULT_TRACE_STEPS: u32 = 1000;
/// Frames a STACKTRACE shows at most.
const STACKTRACE_FRAMES: u32 = 64;

impl Actor {
    /// The commands that work at a DAP pause.
    pub(super) fn input_type(&self, has_frame: bool, locals_available: bool) -> Vec<i32> {
        let mut kinds = answer::common_commands();
        if has_frame {
            kinds.push(CommandKind::Eval);
            kinds.push(CommandKind::Inspect);
            kinds.push(CommandKind::InspectPrompt);
        }
        if locals_available {
            kinds.push(CommandKind::Locals);
        }
        let can_set = self.shared.supports(Capability::SetExpression)
            || self.shared.supports(Capability::SetVariable);
        if has_frame && locals_available && can_set {
            kinds.push(CommandKind::Inject);
        }
        if has_frame && self.shared.supports(Capability::GotoTargetsRequest) {
            kinds.push(CommandKind::Jump);
        }
        // Only a program stepd started can be aborted by it.
        if !self.request.attach {
            kinds.push(CommandKind::Quit);
        }
        kinds.into_iter().map(i32::from).collect()
    }

    async fn step(
        &mut self,
        thread: i64,
        kind: StepKind,
        command: CommandKind,
        by: &str,
    ) -> ApiResult<()> {
        self.send_exec(ExecOp::Step(thread, kind), command, by)
            .await
            .map(|_| ())
    }

    async fn go_on(&mut self, command: CommandKind, by: &str) -> ApiResult<()> {
        self.send_exec(ExecOp::Continue(0), command, by)
            .await
            .map(|_| ())
    }

    /// OUT with force and CONTINUE_SCOPE.
    async fn leave_frame(
        &mut self,
        thread: i64,
        depth: u32,
        then_continue: bool,
        command: CommandKind,
        by: &str,
    ) -> ApiResult<()> {
        self.mode = Mode::Out {
            depth,
            then_continue,
        };
        self.step(thread, StepKind::Out, command, by).await
    }

    /// CONTINUE_ALL: every breakpoint of this session off until the next
    /// Pause request.
    async fn continue_all(&mut self, command: CommandKind, by: &str) -> ApiResult<()> {
        self.breakpoints_off = true;
        let _ = self.apply_breakpoints().await;
        if let Err(err) = self.go_on(command, by).await {
            // Refused: the session's breakpoints are as they were.
            self.breakpoints_off = false;
            let _ = self.apply_breakpoints().await;
            return Err(err);
        }
        self.publish(Payload::Notification(Notification {
            level: NotificationLevel::Warning.into(),
            message: "CONTINUE_ALL: breakpoints are off for this session until the next Pause \
                      request"
                .into(),
        }));
        Ok(())
    }

    /// HERE: a temporary breakpoint at the target, then continue.
    async fn run_to(
        &mut self,
        path: String,
        line: u32,
        force: bool,
        command: CommandKind,
        by: &str,
    ) -> ApiResult<()> {
        if path.is_empty() || line == 0 {
            return Err(ApiError::invalid_field(
                "command.here",
                "give a line (and a path, unless it is the paused file)",
            ));
        }
        self.temp_breakpoint = Some((path.clone(), line));
        let placements = self.apply_breakpoints().await;
        let placed = placements
            .iter()
            .find(|p| p.breakpoint_id == HERE_BREAKPOINT)
            .and_then(|p| p.status.as_ref())
            .is_some_and(|s| s.verified);
        if !placed {
            self.temp_breakpoint = None;
            let _ = self.apply_breakpoints().await;
            return Err(ApiError::new(
                ErrorReason::AdapterError,
                format!("the adapter cannot stop at {path}:{line}"),
            ));
        }
        self.mode = Mode::Here { path, line, force };
        let moved = self.go_on(command, by).await;
        if moved.is_err() {
            self.temp_breakpoint = None;
            let _ = self.apply_breakpoints().await;
        }
        moved
    }

    /// HERE `within_frame` (pdb's `until LINE`): step over in the paused
    /// frame until a line at or after `line`, or until the frame returns.
    #[allow(clippy::too_many_arguments)]
    async fn until(
        &mut self,
        thread: i64,
        depth: u32,
        (paused, path): (String, String),
        line: u32,
        force: bool,
        command: CommandKind,
        by: &str,
    ) -> ApiResult<()> {
        if line == 0 {
            return Err(ApiError::invalid_field("command.here.line", "give a line"));
        }
        if path != paused {
            return Err(ApiError::invalid_field(
                "command.here.path",
                format!(
                    "within_frame runs to a line of the paused file {}, not {}",
                    stepd_core::error::quote(&paused),
                    stepd_core::error::quote(&path)
                ),
            ));
        }
        self.mode = Mode::Until(Until {
            thread,
            path,
            line,
            depth: (depth > 0).then_some(depth),
            force,
        });
        self.step(thread, StepKind::Over, command, by).await
    }

    /// JUMP (DAP `goto`): the adapter moves the thread to the line's target
    /// and stops it there again (reason `goto`), which is the next pause.
    async fn jump(&mut self, thread: i64, path: &str, line: u32) -> ApiResult<()> {
        if line == 0 {
            return Err(ApiError::invalid_field("command.jump.line", "give a line"));
        }
        let targets: GotoTargetsResponse = self
            .client
            .call(
                "gotoTargets",
                json!({"source": {"path": path}, "line": line}),
            )
            .await
            .map_err(|e| dap_error(&e))?;
        let Some(target) = targets.targets.first() else {
            return Err(ApiError::invalid_field(
                "command.jump.line",
                format!("{} cannot jump to {path}:{line}", self.adapter.name()),
            ));
        };
        self.client
            .request("goto", json!({"threadId": thread, "targetId": target.id}))
            .await
            .map_err(|e| dap_error(&e))?;
        self.hot.continued(thread);
        self.bump_epoch();
        Ok(())
    }

    /// INJECT: `NAME = EXPRESSION` in the paused frame, then continue. A
    /// refused assignment is an `eval_error` and the pause stays.
    async fn inject(
        &mut self,
        frame_id: Option<i64>,
        code: &str,
        command: CommandKind,
        by: &str,
    ) -> ApiResult<()> {
        let Some((name, value)) = split_assignment(code) else {
            return Err(ApiError::invalid_field(
                "command.inject.code",
                format!(
                    "{} is not an assignment NAME = EXPRESSION",
                    stepd_core::error::quote(code)
                ),
            ));
        };
        let result = if self.shared.supports(Capability::SetExpression) {
            let mut args = json!({"expression": name, "value": value});
            if let Some(frame) = frame_id {
                args["frameId"] = json!(frame);
            }
            self.client.request("setExpression", args).await
        } else {
            match self.locals_reference(frame_id).await {
                Some(reference) => {
                    self.client
                        .request(
                            "setVariable",
                            json!({"variablesReference": reference, "name": name, "value": value}),
                        )
                        .await
                }
                None => Err(crate::client::DapError::Failed(
                    "no locals to assign to".into(),
                )),
            }
        };
        result.map_err(|e| dap_error(&e))?;
        self.go_on(command, by).await
    }

    /// QUIT: the program is terminated; its end is END_REASON_QUIT.
    async fn quit(&mut self) -> ApiResult<()> {
        let terminate = if self.shared.supports(Capability::TerminateRequest) {
            self.client.request("terminate", json!({})).await
        } else {
            self.client
                .request("disconnect", json!({"terminateDebuggee": true}))
                .await
        };
        terminate.map_err(|e| dap_error(&e))?;
        self.life.quit_asked();
        Ok(())
    }

    async fn locals_reference(&self, frame_id: Option<i64>) -> Option<i64> {
        let scopes = self
            .client
            .call::<ScopesResponse>("scopes", json!({"frameId": frame_id?}))
            .await;
        super::locals::locals_scope(&self.reported(scopes)?)
    }

    /// The frames of `thread` (and the exception's causes at an exception
    /// pause) for STACKTRACE.
    async fn stacktrace(&mut self, key: &str, thread: i64) -> (Vec<Frame>, Vec<Cause>) {
        let epoch = self.shared.epoch();
        let stack = self
            .client
            .call::<StackTraceResponse>(
                "stackTrace",
                json!({"threadId": thread, "startFrame": 0, "levels": STACKTRACE_FRAMES}),
            )
            .await;
        let frames = self
            .reported(stack)
            .map(|stack| stop::frames(self.adapter.kind, &stack, epoch))
            .unwrap_or_default();
        let is_exception = self
            .book
            .get(key)
            .is_some_and(|e| e.pause.reason == PauseReason::Exception as i32);
        let causes = if is_exception && self.shared.supports(Capability::ExceptionInfoRequest) {
            let info = self
                .client
                .call::<ExceptionInfoResponse>("exceptionInfo", json!({"threadId": thread}))
                .await;
            self.reported(info).map(|i| causes(&i)).unwrap_or_default()
        } else {
            Vec::new()
        };
        (frames, causes)
    }
}

impl PauseOwner for Actor {
    type Data = PauseCtx;
    const PROMPT: &'static str = "Expression to evaluate in the paused frame";

    fn book(&mut self) -> &mut PauseBook<PauseCtx> {
        &mut self.book
    }

    async fn go(&mut self, key: &str, go: Go, command: CommandKind, by: &str) -> ApiResult<()> {
        let Some(entry) = self.book.get(key) else {
            return Err(self.book.gone(key));
        };
        let thread = entry.pause.thread_id;
        let PauseCtx { frame_id, depth } = entry.data;
        let paused = entry
            .pause
            .location
            .as_ref()
            .map(|l| l.path.clone())
            .unwrap_or_default();
        // A refused command leaves the stepping mode as it was.
        let mode = self.mode.clone();
        let moved = match go {
            Go::Next => self.step(thread, StepKind::Over, command, by).await,
            Go::In => self.step(thread, StepKind::In, command, by).await,
            Go::Out { force: true } => self.leave_frame(thread, depth, false, command, by).await,
            Go::Out { force: false } => self.step(thread, StepKind::Out, command, by).await,
            Go::ContinueScope => self.leave_frame(thread, depth, true, command, by).await,
            Go::Continue => self.go_on(command, by).await,
            Go::ContinueAll => self.continue_all(command, by).await,
            Go::Here(here) => {
                let path = if here.path.is_empty() {
                    paused.clone()
                } else {
                    here.path
                };
                let line = match (here.line, here.coor.as_slice()) {
                    (0, [_, line]) => u32::try_from(*line).unwrap_or(0),
                    (line, _) => line,
                };
                if here.within_frame {
                    self.until(thread, depth, (paused, path), line, here.force, command, by)
                        .await
                } else {
                    self.run_to(path, line, here.force, command, by).await
                }
            }
            Go::Trace { max_steps } => {
                self.mode = Mode::Trace(Tracing {
                    key: key.to_owned(),
                    thread,
                    step: 0,
                    limit: if max_steps == 0 {
                        DEFAULT_TRACE_STEPS
                    } else {
                        max_steps
                    },
                    previous: HashMap::new(),
                });
                self.step(thread, StepKind::Over, command, by).await
            }
            Go::Inject(Some(Replacement::Code(code))) => {
                self.inject(frame_id, &code, command, by).await
            }
            Go::Inject(_) => Err(ApiError::invalid_field(
                "command.inject.code",
                "DAP sessions take an assignment: NAME = EXPRESSION",
            )),
            Go::Jump(jump) => {
                let path = if jump.path.is_empty() {
                    paused
                } else {
                    jump.path
                };
                self.jump(thread, &path, jump.line).await
            }
            Go::Quit => self.quit().await,
            Go::Skip => Err(ApiError::new(
                ErrorReason::InvalidCommand,
                "SKIP is for probe holds; a DAP pause cannot skip a call",
            )),
        };
        if moved.is_err() {
            self.mode = mode;
        }
        moved
    }

    async fn eval(&mut self, key: &str, code: String, by: &str, reply: Reply) {
        let frame_id = self.book.get(key).and_then(|e| e.data.frame_id);
        let mut args = json!({"expression": code, "context": self.shared.default_eval_context()});
        if let Some(frame) = frame_id {
            args["frameId"] = json!(frame);
        }
        let result = self
            .client
            .call::<EvaluateResponse>("evaluate", args)
            .await
            .map(|body| stop::display(&body.value, body.type_name.as_deref().unwrap_or_default()))
            .map_err(|e| dap_error(&e));
        let _ = reply.send(self.book.evaluated(key, &code, by, result));
    }

    async fn render(&mut self, key: &str, target: PauseTarget) -> ApiResult<Rendering> {
        let pause = self
            .book
            .get(key)
            .map(|e| e.pause.clone())
            .ok_or_else(|| self.book.gone(key))?;
        let root = values::pause_node(&self.shared, &pause, &target).await?;
        self.ctx.inspectors.open(pause.session_id, root, None).await
    }

    async fn stack(&mut self, key: &str) -> (Vec<Frame>, Vec<Cause>) {
        let thread = self.book.get(key).map_or(0, |e| e.pause.thread_id);
        self.stacktrace(key, thread).await
    }
}

/// The causes in an `exceptionInfo` answer, outermost first.
fn causes(info: &ExceptionInfoResponse) -> Vec<Cause> {
    let mut out = Vec::new();
    let mut details = info.details.as_ref();
    let mut first = true;
    while let Some(d) = details {
        let message = d
            .message
            .as_deref()
            .or_else(|| first.then_some(info.description.as_deref()).flatten())
            .unwrap_or_default();
        out.push(Cause {
            r#type: d
                .type_name
                .as_deref()
                .or(d.full_type_name.as_deref())
                .or_else(|| first.then_some(info.exception_id.as_str()))
                .unwrap_or_default()
                .to_owned(),
            message: message.to_owned(),
            location: None,
        });
        first = false;
        details = d.inner_exception.first();
    }
    if out.is_empty() {
        out.push(Cause {
            r#type: info.exception_id.clone(),
            message: info.description.clone().unwrap_or_default(),
            location: None,
        });
    }
    out
}

/// `NAME = EXPRESSION` (not `==`, `<=`, `>=`, `!=`).
fn split_assignment(code: &str) -> Option<(&str, &str)> {
    let bytes = code.as_bytes();
    let at = (0..bytes.len()).find(|&i| {
        bytes[i] == b'='
            && bytes.get(i + 1) != Some(&b'=')
            && (i == 0 || !matches!(bytes[i - 1], b'=' | b'<' | b'>' | b'!'))
    })?;
    let (name, value) = (code[..at].trim(), code[at + 1..].trim());
    (!name.is_empty() && !value.is_empty()).then_some((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_split_at_the_first_single_equals() {
        assert_eq!(split_assignment("x = 5"), Some(("x", "5")));
        assert_eq!(
            split_assignment("d['k'] = a == b"),
            Some(("d['k']", "a == b"))
        );
        assert_eq!(split_assignment("a == b"), None);
        assert_eq!(split_assignment("= 5"), None);
    }

    #[test]
    fn causes_follow_inner_exceptions() {
        let info = json!({
            "exceptionId": "ValueError",
            "description": "bad value 42",
            "details": {"typeName": "ValueError", "message": "bad value 42",
                        "innerException": [{"typeName": "KeyError", "message": "'k'"}]}
        });
        let c = causes(&serde_json::from_value(info).unwrap());
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].r#type, "ValueError");
        assert_eq!(c[1].message, "'k'");
    }
}

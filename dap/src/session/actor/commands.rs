//! Debug input at DAP pauses: every command of the pause protocol, and the
//! stepping modes some of them leave behind (forced step-out, run to here,
//! trace), which steer the following stops before any pause is shown.

use std::collections::HashMap;

use serde_json::json;
use stepd_proto::v1::{
    Cause, CommandKind, ErrorReason, Frame, Local, Location, Notification, NotificationLevel,
    PauseReason, Rendering, StepKind, Trace, event::Payload, inject_command::Replacement,
};

use super::{Actor, PauseCtx, dap_error};
use crate::capability::Capability;
use crate::{
    messages::{EvaluateResponse, ExceptionInfoResponse, ScopesResponse, StackTraceResponse},
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
/// Id of the temporary breakpoint HERE places.
pub(super) const HERE_BREAKPOINT: &str = "here";

/// A stepping mode that outlives the command that started it.
#[derive(Debug, Clone, Default)]
pub(super) enum Mode {
    /// Stops are shown as they come.
    #[default]
    Normal,
    /// OUT with `force`, or CONTINUE_SCOPE: keep stepping out, through any
    /// breakpoint, until the stack is shallower than `depth`; then pause
    /// (OUT) or go on (CONTINUE_SCOPE).
    Out {
        /// Stack depth of the frame being left.
        depth: u32,
        /// Continue once out instead of pausing.
        then_continue: bool,
    },
    /// HERE: run to a line, through breakpoints when `force`.
    Here {
        /// Target file.
        path: String,
        /// Target line.
        line: u32,
        /// Ignore breakpoints on the way.
        force: bool,
    },
    /// TRACE: step over and over, one `trace` event per step.
    Trace {
        /// The pause the trace started from.
        key: String,
        /// Steps taken.
        step: u32,
        /// Steps allowed.
        limit: u32,
        /// Locals at the previous step, to report what changed.
        previous: HashMap<String, String>,
    },
}

impl Mode {
    /// Whether breakpoints on the way count and act (OUT and HERE with
    /// `force`, and CONTINUE_SCOPE, go through them).
    pub(super) fn honours_breakpoints(&self) -> bool {
        match self {
            Mode::Normal | Mode::Trace { .. } => true,
            Mode::Out { .. } => false,
            Mode::Here { force, .. } => !force,
        }
    }
}

/// A NEXT, IN or OUT sent to the adapter and not ended yet. The stop after
/// it is its end, unless a breakpoint stepd does not stop at interrupted it
/// in a deeper frame: then stepd finishes the step (out of that frame, and
/// on to the next line for NEXT), as the adapter would have had it evaluated
/// the breakpoint itself.
#[derive(Debug, Clone, Copy)]
pub(super) struct StepInFlight {
    /// What kind of step.
    pub kind: StepKind,
    /// The stepping thread.
    pub thread: i64,
    /// Stack depth where the step started, when the adapter told.
    pub depth: Option<u32>,
    /// A NEXT is stepping out of a frame it was interrupted in.
    pub returning: bool,
}

/// What the actor knows about a stop when it steers it.
pub(super) struct StopHere {
    /// The normalised reason.
    pub reason: PauseReason,
    /// The stopped thread.
    pub thread_id: i64,
    /// Stack depth, when the adapter told.
    pub depth: Option<u32>,
    /// The stop names breakpoints, none of which stops.
    pub silent: bool,
}

/// How a step in flight goes on after a stop.
enum Continuation {
    /// The step ends here.
    End,
    /// Out of a frame the step did not mean to stop in.
    StepOut,
    /// Back in the starting frame mid-line: the NEXT finishes the line.
    Next,
    /// Not the step's thread: the adapter still runs the step.
    Continue,
}

fn continuation(step: &StepInFlight, here: &StopHere) -> Continuation {
    if here.thread_id != step.thread {
        return if here.silent {
            Continuation::Continue
        } else {
            Continuation::End
        };
    }
    if !matches!(here.reason, PauseReason::Step | PauseReason::Breakpoint) {
        return Continuation::End;
    }
    let (Some(from), Some(depth)) = (step.depth, here.depth) else {
        return Continuation::End;
    };
    // Only a breakpoint stepd did not stop at, or stepd's own step out of
    // one, takes the step further; an adapter's own step end stands.
    let interrupted = here.silent || step.returning;
    match step.kind {
        StepKind::In => Continuation::End,
        StepKind::Out if interrupted && depth >= from => Continuation::StepOut,
        StepKind::Out => Continuation::End,
        StepKind::Over | StepKind::Unspecified => {
            if interrupted && depth > from {
                Continuation::StepOut
            } else if step.returning && depth == from {
                Continuation::Next
            } else {
                Continuation::End
            }
        }
    }
}

/// What a stop becomes under the current mode.
pub(super) enum Steering {
    /// The program was resumed silently; no pause.
    Resumed,
    /// Show a pause, with this reason when set.
    Pause(Option<PauseReason>),
    /// No mode applies: normal breakpoint handling.
    Normal,
}

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
        // Only a program stepd started can be aborted by it.
        if !self.request.attach {
            kinds.push(CommandKind::Quit);
        }
        kinds.into_iter().map(i32::from).collect()
    }

    /// Leaves the current mode, as a stop that is shown does: HERE's
    /// temporary breakpoint goes.
    pub(super) async fn end_mode(&mut self) {
        if matches!(std::mem::take(&mut self.mode), Mode::Here { .. })
            || self.temp_breakpoint.is_some()
        {
            self.temp_breakpoint = None;
            let _ = self.apply_breakpoints().await;
        }
    }

    /// Finishes a step a silent breakpoint interrupted, when it must go on.
    /// Returns whether the program was resumed.
    async fn go_on_stepping(&mut self, step: StepInFlight, here: &StopHere) -> bool {
        let (request, returning) = match continuation(&step, here) {
            Continuation::End => return false,
            Continuation::StepOut => ("stepOut", true),
            Continuation::Next => ("next", false),
            Continuation::Continue => {
                self.resume_silently("continue", here.thread_id).await;
                self.step = Some(step);
                return true;
            }
        };
        self.resume_silently(request, step.thread).await;
        self.step = Some(StepInFlight { returning, ..step });
        true
    }

    /// Applies the current mode, and the step in flight, to a stop no
    /// breakpoint stops at and no Pause request claims.
    pub(super) async fn steer(
        &mut self,
        here: &StopHere,
        step: Option<StepInFlight>,
        location: Option<&Location>,
        frame_id: Option<i64>,
    ) -> Steering {
        let StopHere {
            reason,
            thread_id,
            depth,
            silent,
        } = *here;
        let depth_or_one = depth.unwrap_or(1);
        match self.mode.clone() {
            Mode::Normal => match step {
                Some(step) => {
                    if self.go_on_stepping(step, here).await {
                        return Steering::Resumed;
                    }
                    // The step ends here, whatever breakpoint is on the line.
                    if silent {
                        Steering::Pause(Some(PauseReason::Step))
                    } else {
                        Steering::Normal
                    }
                }
                None => Steering::Normal,
            },
            Mode::Out {
                depth: from,
                then_continue,
            } => {
                if depth_or_one >= from
                    && matches!(reason, PauseReason::Breakpoint | PauseReason::Step)
                {
                    // Still inside the frame (or deeper, at a breakpoint): out again.
                    self.resume_silently("stepOut", thread_id).await;
                    return Steering::Resumed;
                }
                self.mode = Mode::Normal;
                if then_continue && reason == PauseReason::Step {
                    self.resume_silently("continue", thread_id).await;
                    return Steering::Resumed;
                }
                Steering::Pause(None)
            }
            Mode::Here { path, line, force } => {
                let arrived = location.is_some_and(|l| l.line == line && l.path == path);
                if !arrived && reason == PauseReason::Breakpoint && (force || silent) {
                    self.resume_silently("continue", thread_id).await;
                    return Steering::Resumed;
                }
                self.end_mode().await;
                Steering::Pause(arrived.then_some(PauseReason::Goto))
            }
            Mode::Trace {
                key,
                step: taken,
                limit,
                previous,
            } => {
                if let Some(step) = step
                    && self.go_on_stepping(step, here).await
                {
                    return Steering::Resumed;
                }
                if !matches!(reason, PauseReason::Step | PauseReason::Breakpoint) || taken >= limit
                {
                    self.mode = Mode::Normal;
                    return Steering::Normal;
                }
                let locals = self
                    .top_locals(thread_id, frame_id)
                    .await
                    .map(|v| stop::locals(&v))
                    .unwrap_or_default();
                let current: HashMap<String, String> = locals
                    .iter()
                    .map(|l| {
                        let text = l.value.as_ref().map(|v| v.text.clone()).unwrap_or_default();
                        (l.name.clone(), text)
                    })
                    .collect();
                let changed: Vec<Local> = locals
                    .into_iter()
                    .filter(|l| {
                        let text = l.value.as_ref().map(|v| v.text.as_str());
                        previous.get(&l.name).map(String::as_str) != text
                    })
                    .collect();
                let taken = taken + 1;
                let last = taken >= limit;
                self.publish(Payload::Trace(Box::new(Trace {
                    key: key.clone(),
                    step: taken,
                    location: location.cloned(),
                    value: None,
                    changed_locals: changed,
                    coor: location
                        .map(|l| vec![depth_or_one as i32, l.line as i32])
                        .unwrap_or_default(),
                    point: None,
                })));
                if last {
                    // The step limit: pause here, where the last step landed.
                    self.mode = Mode::Normal;
                    return Steering::Pause(Some(PauseReason::Step));
                }
                self.mode = Mode::Trace {
                    key,
                    step: taken,
                    limit,
                    previous: current,
                };
                self.resume_silently("next", thread_id).await;
                self.step = Some(StepInFlight {
                    kind: StepKind::Over,
                    thread: thread_id,
                    depth,
                    returning: false,
                });
                Steering::Resumed
            }
        }
    }

    /// Resumes without showing anything: no pause ends, no event is sent.
    pub(super) async fn resume_silently(&mut self, request: &str, thread_id: i64) {
        let mut args = json!({"threadId": thread_id});
        if request == "continue" {
            args["singleThread"] = json!(false);
        }
        if let Err(err) = self.client.request(request, args).await {
            tracing::warn!(session = %self.shared.id, %err, request, "could not resume");
        }
        self.hot.continued(thread_id);
        self.bump_epoch();
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

    /// INJECT: `NAME = EXPRESSION` in the paused frame, then continue. A
    /// refused assignment is an `eval_error` and the pause stays.
    /// INJECT: `NAME = EXPRESSION` in the paused frame, then continue.
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
        self.quitting = true;
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
            .map(|stack| stop::frames(&stack, epoch))
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
        let here_from = entry.pause.location.clone();
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
                    here_from.map(|l| l.path).unwrap_or_default()
                } else {
                    here.path
                };
                let line = match (here.line, here.coor.as_slice()) {
                    (0, [_, line]) => u32::try_from(*line).unwrap_or(0),
                    (line, _) => line,
                };
                self.run_to(path, line, here.force, command, by).await
            }
            Go::Trace { max_steps } => {
                self.mode = Mode::Trace {
                    key: key.to_owned(),
                    step: 0,
                    limit: if max_steps == 0 {
                        DEFAULT_TRACE_STEPS
                    } else {
                        max_steps
                    },
                    previous: HashMap::new(),
                };
                self.step(thread, StepKind::Over, command, by).await
            }
            Go::Inject(Some(Replacement::Code(code))) => {
                self.inject(frame_id, &code, command, by).await
            }
            Go::Inject(_) => Err(ApiError::invalid_field(
                "command.inject.code",
                "DAP sessions take an assignment: NAME = EXPRESSION",
            )),
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
    fn a_step_goes_on_only_through_breakpoints_that_do_not_stop() {
        let step = |kind, returning| StepInFlight {
            kind,
            thread: 1,
            depth: Some(2),
            returning,
        };
        let at = |depth, silent, reason| StopHere {
            reason,
            thread_id: 1,
            depth: Some(depth),
            silent,
        };
        let (bp, st) = (PauseReason::Breakpoint, PauseReason::Step);
        let cases = [
            // NEXT interrupted inside a call: out, then on to the next line.
            (step(StepKind::Over, false), at(3, true, bp), "out"),
            (step(StepKind::Over, true), at(2, false, st), "next"),
            (step(StepKind::Over, true), at(4, true, bp), "out"),
            // NEXT that lands on a line with a breakpoint that does not stop.
            (step(StepKind::Over, false), at(2, true, bp), "end"),
            (step(StepKind::Over, false), at(2, false, st), "end"),
            // The adapter's own step end stands, whatever the depth.
            (step(StepKind::Over, false), at(3, false, st), "end"),
            (step(StepKind::In, false), at(3, true, bp), "end"),
            // OUT interrupted before it left the frame: out again.
            (step(StepKind::Out, false), at(2, true, bp), "out"),
            (step(StepKind::Out, false), at(1, true, bp), "end"),
            (step(StepKind::Out, true), at(1, false, st), "end"),
            // Not a step-like stop.
            (
                step(StepKind::Over, false),
                at(3, false, PauseReason::Exception),
                "end",
            ),
        ];
        for (i, (step, here, want)) in cases.iter().enumerate() {
            let got = match continuation(step, here) {
                Continuation::End => "end",
                Continuation::StepOut => "out",
                Continuation::Next => "next",
                Continuation::Continue => "continue",
            };
            assert_eq!(got, *want, "case {i}");
        }
        // Another thread's silent stop leaves the step to the adapter.
        let other = StopHere {
            thread_id: 2,
            ..at(5, true, bp)
        };
        assert!(matches!(
            continuation(&step(StepKind::Over, false), &other),
            Continuation::Continue
        ));
        // Without depths nothing is guessed: the step ends.
        let unknown = StopHere {
            depth: None,
            ..at(3, true, bp)
        };
        assert!(matches!(
            continuation(&step(StepKind::Over, false), &unknown),
            Continuation::End
        ));
    }

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

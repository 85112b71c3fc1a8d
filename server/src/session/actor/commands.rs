//! Debug input at DAP pauses: every command of the pause protocol, and the
//! stepping modes some of them leave behind (forced step-out, run to here,
//! trace), which steer the following stops before any pause is shown.

use std::collections::HashMap;

use serde_json::{Value, json};
use stepd_proto::v1::{
    Cause, CommandKind, ErrorReason, EvalError, Local, Location, Notification, NotificationLevel,
    Pause, PauseReason, SendDebugInputResponse, Stack, StepKind, Stopped, Trace,
    debug_command::Command as Cmd, event::Payload, inject_command::Replacement,
};

use super::{Actor, ExecOp, dap_error};
use crate::{
    error::{ApiError, ApiResult},
    inspector::PauseTarget,
    pause::Answer,
    session::stop,
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

/// A pause waiting for an expression (EVAL or INSPECT_PROMPT without code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Awaiting {
    /// The expression is evaluated and shown as debug_value.
    Eval,
    /// The expression is evaluated and opened in an inspector.
    Inspect,
}

/// What an answer did to its pause.
enum Outcome {
    /// The program moved on; the pause is resolved.
    Resolved,
    /// The pause stays (re-sent when it changed).
    Stays(Option<Box<Pause>>),
}

impl Actor {
    /// The commands that work at a DAP pause.
    pub(super) fn input_type(&self, has_frame: bool, locals_available: bool) -> Vec<i32> {
        let mut kinds = vec![
            CommandKind::Next,
            CommandKind::In,
            CommandKind::Out,
            CommandKind::Here,
            CommandKind::Continue,
            CommandKind::ContinueScope,
            CommandKind::ContinueAll,
            CommandKind::Trace,
            CommandKind::Stacktrace,
        ];
        if has_frame {
            kinds.push(CommandKind::Eval);
            kinds.push(CommandKind::Inspect);
            kinds.push(CommandKind::InspectPrompt);
        }
        if locals_available {
            kinds.push(CommandKind::Locals);
        }
        let can_set = self.shared.supports("supportsSetExpression")
            || self.shared.supports("supportsSetVariable");
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
                self.publish(Payload::Trace(Trace {
                    key: key.clone(),
                    step: taken,
                    location: location.cloned(),
                    value: None,
                    changed_locals: changed,
                    coor: location
                        .map(|l| vec![depth_or_one as i32, l.line as i32])
                        .unwrap_or_default(),
                }));
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
        self.bump_epoch();
    }

    /// A debug input for one of this session's pauses.
    pub(super) async fn on_answer(&mut self, answer: Answer) {
        let Answer {
            input,
            kind,
            by,
            reply,
        } = answer;
        let key = input.key.clone();
        let Some(ctx) = self.pauses.get(&key) else {
            let _ = reply.send(Err(ApiError::new(
                ErrorReason::PauseNotFound,
                format!("pause {key:?} is no longer pending"),
            )));
            return;
        };
        let thread = ctx.pause.thread_id;
        let frame_id = ctx.frame_id;
        let depth = ctx.depth;
        let here_from = ctx.pause.location.clone();
        let result = match input.command.and_then(|c| c.command) {
            Some(Cmd::Next(_)) => self.step(thread, StepKind::Over, kind, &by).await,
            Some(Cmd::StepIn(_)) => self.step(thread, StepKind::In, kind, &by).await,
            Some(Cmd::StepOut(out)) if out.force => {
                self.leave_frame(thread, depth, false, kind, &by).await
            }
            Some(Cmd::StepOut(_)) => self.step(thread, StepKind::Out, kind, &by).await,
            Some(Cmd::ContinueScope(_)) => self.leave_frame(thread, depth, true, kind, &by).await,
            Some(Cmd::Resume(_)) => self.go_on(kind, &by).await,
            Some(Cmd::ContinueAll(_)) => self.continue_all(kind, &by).await,
            Some(Cmd::Here(here)) => {
                let path = if here.path.is_empty() {
                    here_from.map(|l| l.path).unwrap_or_default()
                } else {
                    here.path
                };
                let line = match (here.line, here.coor.as_slice()) {
                    (0, [_, line]) => u32::try_from(*line).unwrap_or(0),
                    (line, _) => line,
                };
                self.run_to(path, line, here.force, kind, &by).await
            }
            Some(Cmd::Trace(trace)) => {
                let limit = if trace.max_steps == 0 {
                    DEFAULT_TRACE_STEPS
                } else {
                    trace.max_steps
                };
                self.mode = Mode::Trace {
                    key: key.clone(),
                    step: 0,
                    limit,
                    previous: HashMap::new(),
                };
                self.step(thread, StepKind::Over, kind, &by).await
            }
            Some(Cmd::Eval(eval)) if eval.code.trim().is_empty() => {
                Ok(self.ask_expression(&key, Awaiting::Eval))
            }
            Some(Cmd::Eval(eval)) => Ok(self.eval_at(&key, frame_id, &eval.code).await),
            Some(Cmd::Inspect(_)) => Ok(self.inspect_at(&key, PauseTarget::Value).await),
            Some(Cmd::Locals(_)) => Ok(self.inspect_at(&key, PauseTarget::Locals).await),
            Some(Cmd::InspectPrompt(prompt)) if prompt.code.trim().is_empty() => {
                Ok(self.ask_expression(&key, Awaiting::Inspect))
            }
            Some(Cmd::InspectPrompt(prompt)) => Ok(self
                .inspect_at(&key, PauseTarget::Expression(prompt.code))
                .await),
            Some(Cmd::Expression(expression)) => {
                let awaiting = self.pauses.get(&key).and_then(|p| p.awaiting);
                match awaiting {
                    Some(Awaiting::Eval) => {
                        self.restore_prompt(&key);
                        Ok(self.eval_at(&key, frame_id, &expression.code).await)
                    }
                    Some(Awaiting::Inspect) => {
                        self.restore_prompt(&key);
                        Ok(self
                            .inspect_at(&key, PauseTarget::Expression(expression.code))
                            .await)
                    }
                    None => Err(ApiError::new(
                        ErrorReason::InvalidCommand,
                        "this pause is not waiting for an expression",
                    )),
                }
            }
            Some(Cmd::Inject(inject)) => match inject.replacement {
                Some(Replacement::Code(code)) => {
                    self.inject(&key, thread, frame_id, &code, kind, &by).await
                }
                _ => Err(ApiError::invalid_field(
                    "command.inject.code",
                    "DAP sessions take an assignment: NAME = EXPRESSION",
                )),
            },
            Some(Cmd::Stacktrace(_)) => Ok(self.stacktrace(&key, thread).await),
            Some(Cmd::Quit(_)) => {
                self.quitting = true;
                self.pauses.remove(&key);
                self.ctx.pauses.resolve(&key, kind, &by);
                let terminate = if self.shared.supports("supportsTerminateRequest") {
                    self.client.request("terminate", json!({})).await
                } else {
                    self.client
                        .request("disconnect", json!({"terminateDebuggee": true}))
                        .await
                };
                terminate
                    .map(|_| Outcome::Resolved)
                    .map_err(|e| dap_error(&e))
            }
            _ => Err(ApiError::new(
                ErrorReason::InvalidCommand,
                format!("{} is not available at this pause", kind.as_str_name()),
            )),
        };
        let response = match result {
            Ok(Outcome::Resolved) => Ok(SendDebugInputResponse {
                command: kind.into(),
                pause: None,
            }),
            Ok(Outcome::Stays(pause)) => {
                // A command that moves the program claimed the pause; it stays.
                self.ctx.pauses.release(&key);
                Ok(SendDebugInputResponse {
                    command: kind.into(),
                    pause: pause.map(|p| *p),
                })
            }
            Err(err) => {
                self.ctx.pauses.release(&key);
                if !matches!(self.mode, Mode::Normal) {
                    self.mode = Mode::Normal;
                }
                Err(err)
            }
        };
        let _ = reply.send(response);
    }

    async fn step(
        &mut self,
        thread: i64,
        kind: StepKind,
        command: CommandKind,
        by: &str,
    ) -> ApiResult<Outcome> {
        self.send_exec(ExecOp::Step(thread, kind), command, by)
            .await
            .map(|_| Outcome::Resolved)
    }

    async fn go_on(&mut self, command: CommandKind, by: &str) -> ApiResult<Outcome> {
        self.send_exec(ExecOp::Continue(0), command, by)
            .await
            .map(|_| Outcome::Resolved)
    }

    /// OUT with force and CONTINUE_SCOPE.
    async fn leave_frame(
        &mut self,
        thread: i64,
        depth: u32,
        then_continue: bool,
        command: CommandKind,
        by: &str,
    ) -> ApiResult<Outcome> {
        self.mode = Mode::Out {
            depth,
            then_continue,
        };
        self.step(thread, StepKind::Out, command, by).await
    }

    /// CONTINUE_ALL: every breakpoint of this session off until the next
    /// Pause request.
    async fn continue_all(&mut self, command: CommandKind, by: &str) -> ApiResult<Outcome> {
        self.breakpoints_off = true;
        let _ = self.apply_breakpoints().await;
        self.publish(Payload::Notification(Notification {
            level: NotificationLevel::Warning.into(),
            message: "CONTINUE_ALL: breakpoints are off for this session until the next Pause \
                      request"
                .into(),
        }));
        self.go_on(command, by).await
    }

    /// HERE: a temporary breakpoint at the target, then continue.
    async fn run_to(
        &mut self,
        path: String,
        line: u32,
        force: bool,
        command: CommandKind,
        by: &str,
    ) -> ApiResult<Outcome> {
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
        self.go_on(command, by).await
    }

    /// Turns the pause into an EXPRESSION prompt.
    fn ask_expression(&mut self, key: &str, awaiting: Awaiting) -> Outcome {
        let Some(ctx) = self.pauses.get_mut(key) else {
            return Outcome::Stays(None);
        };
        ctx.awaiting = Some(awaiting);
        ctx.offered = std::mem::replace(
            &mut ctx.pause.input_type,
            vec![CommandKind::Expression as i32],
        );
        ctx.pause.prompt = "Expression to evaluate in the paused frame".into();
        ctx.pause.revision += 1;
        let pause = ctx.pause.clone();
        self.resend(pause.clone());
        Outcome::Stays(Some(Box::new(pause)))
    }

    /// Gives the pause its commands back after an EXPRESSION answer.
    fn restore_prompt(&mut self, key: &str) {
        if let Some(ctx) = self.pauses.get_mut(key) {
            ctx.awaiting = None;
            ctx.pause.input_type = std::mem::take(&mut ctx.offered);
            ctx.pause.prompt.clear();
        }
    }

    /// Re-sends a pause that stays, with a higher revision.
    fn reprompt(&mut self, key: &str) -> Outcome {
        let Some(ctx) = self.pauses.get_mut(key) else {
            return Outcome::Stays(None);
        };
        ctx.pause.revision += 1;
        let pause = ctx.pause.clone();
        self.resend(pause.clone());
        Outcome::Stays(Some(Box::new(pause)))
    }

    /// Publishes a changed pause (same key, higher revision).
    fn resend(&mut self, pause: Pause) {
        self.ctx.pauses.update(pause.clone());
        self.publish(Payload::Stopped(Stopped {
            pause: Some(pause),
            all_threads_stopped: false,
        }));
    }

    /// EVAL: the result becomes the pause's debug_value; an error is an
    /// `eval_error` event and the pause stays as it was.
    async fn eval_at(&mut self, key: &str, frame_id: Option<i64>, code: &str) -> Outcome {
        let mut args = json!({"expression": code, "context": self.shared.default_eval_context()});
        if let Some(frame) = frame_id {
            args["frameId"] = json!(frame);
        }
        let result = self.client.request("evaluate", args).await;
        let Some(ctx) = self.pauses.get_mut(key) else {
            return Outcome::Stays(None);
        };
        match result {
            Ok(body) => {
                ctx.pause.revision += 1;
                ctx.pause.debug_value = Some(stop::display(
                    body["result"].as_str().unwrap_or_default(),
                    body["type"].as_str().unwrap_or_default(),
                ));
                let pause = ctx.pause.clone();
                self.resend(pause.clone());
                Outcome::Stays(Some(Box::new(pause)))
            }
            Err(err) => {
                let pause = ctx.pause.clone();
                self.publish(Payload::EvalError(EvalError {
                    key: key.to_owned(),
                    message: err.to_string(),
                    causes: Vec::new(),
                }));
                // The pause is re-sent unchanged but for its revision: re-prompted.
                let mut again = pause;
                again.revision += 1;
                if let Some(ctx) = self.pauses.get_mut(key) {
                    ctx.pause.revision = again.revision;
                }
                self.resend(again.clone());
                Outcome::Stays(Some(Box::new(again)))
            }
        }
    }

    /// INSPECT, LOCALS, INSPECT_PROMPT: an inspector on the pause; the pause is
    /// re-sent with its rendering in `inspect` (an error is an `eval_error`).
    async fn inspect_at(&mut self, key: &str, target: PauseTarget) -> Outcome {
        let Some(pause) = self.pauses.get(key).map(|c| c.pause.clone()) else {
            return Outcome::Stays(None);
        };
        let rendering = self.ctx.inspect_pause(&pause, target).await;
        let Some(ctx) = self.pauses.get_mut(key) else {
            return Outcome::Stays(None);
        };
        match rendering {
            Ok(rendering) => ctx.pause.inspect = Some(rendering),
            Err(err) => {
                let message = err.to_string();
                self.publish(Payload::EvalError(EvalError {
                    key: key.to_owned(),
                    message,
                    causes: Vec::new(),
                }));
            }
        }
        self.reprompt(key)
    }

    /// INJECT: `NAME = EXPRESSION` in the paused frame, then continue. A
    /// refused assignment is an `eval_error` and the pause stays.
    async fn inject(
        &mut self,
        key: &str,
        thread: i64,
        frame_id: Option<i64>,
        code: &str,
        command: CommandKind,
        by: &str,
    ) -> ApiResult<Outcome> {
        let Some((name, value)) = split_assignment(code) else {
            return Err(ApiError::invalid_field(
                "command.inject.code",
                format!("{code:?} is not an assignment NAME = EXPRESSION"),
            ));
        };
        let result = if self.shared.supports("supportsSetExpression") {
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
                None => Err(crate::dap::client::DapError::Failed(
                    "no locals to assign to".into(),
                )),
            }
        };
        match result {
            Ok(_) => {
                let _ = thread;
                self.go_on(command, by).await
            }
            Err(err) => {
                self.publish(Payload::EvalError(EvalError {
                    key: key.to_owned(),
                    message: err.to_string(),
                    causes: Vec::new(),
                }));
                // Re-prompted, as after a failed EVAL.
                let pause = self.pauses.get_mut(key).map(|c| {
                    c.pause.revision += 1;
                    c.pause.clone()
                });
                if let Some(p) = &pause {
                    self.resend(p.clone());
                }
                Ok(Outcome::Stays(pause.map(Box::new)))
            }
        }
    }

    async fn locals_reference(&self, frame_id: Option<i64>) -> Option<i64> {
        let scopes = self
            .client
            .request("scopes", json!({"frameId": frame_id?}))
            .await
            .ok()?;
        super::locals::locals_scope(&scopes)
    }

    /// STACKTRACE: a `stack` event (frames, and the exception's causes at an
    /// exception pause), then the pause again.
    async fn stacktrace(&mut self, key: &str, thread: i64) -> Outcome {
        let epoch = self.shared.epoch();
        let stack = self
            .client
            .request(
                "stackTrace",
                json!({"threadId": thread, "startFrame": 0, "levels": STACKTRACE_FRAMES}),
            )
            .await
            .unwrap_or(Value::Null);
        let frames = stop::frames(&stack, epoch);
        let is_exception = self
            .pauses
            .get(key)
            .is_some_and(|c| c.pause.reason == PauseReason::Exception as i32);
        let causes = if is_exception && self.shared.supports("supportsExceptionInfoRequest") {
            self.client
                .request("exceptionInfo", json!({"threadId": thread}))
                .await
                .map(|info| causes(&info))
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        self.publish(Payload::Stack(Stack {
            key: key.to_owned(),
            frames,
            causes,
        }));
        self.reprompt(key)
    }
}

/// The causes in an `exceptionInfo` answer, outermost first.
fn causes(info: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let mut details = Some(&info["details"]);
    let mut first = true;
    while let Some(d) = details.filter(|d| d.is_object()) {
        let message = d["message"]
            .as_str()
            .or_else(|| first.then(|| info["description"].as_str()).flatten())
            .unwrap_or_default();
        out.push(Cause {
            r#type: d["typeName"]
                .as_str()
                .or_else(|| d["fullTypeName"].as_str())
                .or_else(|| first.then(|| info["exceptionId"].as_str()).flatten())
                .unwrap_or_default()
                .to_owned(),
            message: message.to_owned(),
            location: None,
        });
        first = false;
        details = d["innerException"]
            .as_array()
            .and_then(|inner| inner.first());
    }
    if out.is_empty() && info["exceptionId"].is_string() {
        out.push(Cause {
            r#type: info["exceptionId"].as_str().unwrap_or_default().to_owned(),
            message: info["description"].as_str().unwrap_or_default().to_owned(),
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
        let c = causes(&info);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].r#type, "ValueError");
        assert_eq!(c[1].message, "'k'");
    }
}

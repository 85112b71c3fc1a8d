//! The stepping modes some pause commands leave behind (forced step-out,
//! run to here, trace) and the step in flight, which steer the stops that
//! follow before any pause is shown.

use std::collections::HashMap;

use serde_json::json;
use stepd_proto::v1::{
    Local, Location, Notification, NotificationLevel, PauseReason, StepKind, Trace, event::Payload,
};

use super::Actor;
use crate::session::stop;

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
    /// HERE `within_frame` (pdb's `until LINE`): step over in the paused
    /// frame until a line at or after `line`, or until the frame returns.
    Until(Until),
    /// TRACE: step over and over, one `trace` event per step.
    Trace(Tracing),
}

/// An `until LINE` run: where it started and what ends it.
#[derive(Debug, Clone)]
pub(super) struct Until {
    /// The thread it steps.
    pub thread: i64,
    /// The paused frame's file.
    pub path: String,
    /// The first line that ends the run.
    pub line: u32,
    /// Stack depth of the paused frame, when the adapter told.
    pub depth: Option<u32>,
    /// Ignore breakpoints on the way.
    pub force: bool,
}

/// Where an `until` run stands after one step.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum UntilStep {
    /// In the frame at or past the line: arrived.
    Arrived,
    /// The frame returned (the stack is shallower than where it started).
    Returned,
    /// Still before the line in the frame: step again.
    Again,
}

impl Until {
    /// Judges a step's end at `depth` and `location` against the run.
    pub(super) fn judge(&self, depth: Option<u32>, location: Option<&Location>) -> UntilStep {
        if let (Some(from), Some(now)) = (self.depth, depth) {
            if now < from {
                return UntilStep::Returned;
            }
            if now > from {
                // Deeper than the frame (a step the adapter ended in a
                // callee): not the frame's line, step again.
                return UntilStep::Again;
            }
        }
        match location {
            Some(at) if at.path == self.path && at.line >= self.line => UntilStep::Arrived,
            // Another file at the same depth is another frame: the paused
            // one returned and the caller made a call.
            Some(at) if at.path != self.path => UntilStep::Returned,
            _ => UntilStep::Again,
        }
    }
}

/// A TRACE run.
#[derive(Debug, Clone)]
pub(super) struct Tracing {
    /// The pause the trace started from.
    pub key: String,
    /// The thread it steps.
    pub thread: i64,
    /// Steps taken.
    pub step: u32,
    /// Steps allowed.
    pub limit: u32,
    /// Locals at the previous step, to report what changed.
    pub previous: HashMap<String, String>,
}

impl Mode {
    /// Whether breakpoints on the way count and act (OUT and HERE with
    /// `force`, and CONTINUE_SCOPE, go through them).
    pub(super) fn honours_breakpoints(&self) -> bool {
        match self {
            Mode::Normal | Mode::Trace(_) => true,
            Mode::Out { .. } => false,
            Mode::Here { force, .. } | Mode::Until(Until { force, .. }) => !force,
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
    /// Leaves the current mode, as a stop that is shown does: HERE's
    /// temporary breakpoint goes.
    /// A TRACE or `until` run of one thread ends when another thread's stop
    /// is shown first (a breakpoint, a Pause request): its thread stays
    /// where the run left it, so the run's end is said rather than left
    /// for a client to wait on.
    pub(super) fn say_run_cut_short(&self, thread_id: i64) {
        let (what, on) = match &self.mode {
            Mode::Trace(t) => (
                format!(
                    "the trace from pause {} ended after {} steps",
                    t.key, t.step
                ),
                t.thread,
            ),
            Mode::Until(u) => (format!("until {} ended", u.line), u.thread),
            _ => return,
        };
        if on == thread_id {
            return;
        }
        self.publish(Payload::Notification(Notification {
            level: NotificationLevel::Warning.into(),
            message: format!(
                "{what}: thread {thread_id} stopped first, and thread {on} stays where the run \
                 left it"
            ),
        }));
    }

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
                self.exec.stepping(step);
                return true;
            }
        };
        self.resume_silently(request, step.thread).await;
        self.exec.stepping(StepInFlight { returning, ..step });
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
            Mode::Until(until) => self.steer_until(here, step, location, until).await,
            Mode::Trace(tracing) => {
                self.steer_trace(here, step, location, frame_id, tracing)
                    .await
            }
        }
    }

    /// `until LINE`: the next step over, or the pause that ends the run.
    async fn steer_until(
        &mut self,
        here: &StopHere,
        step: Option<StepInFlight>,
        location: Option<&Location>,
        until: Until,
    ) -> Steering {
        if let Some(step) = step
            && self.go_on_stepping(step, here).await
        {
            return Steering::Resumed;
        }
        if !matches!(here.reason, PauseReason::Step | PauseReason::Breakpoint) {
            self.mode = Mode::Normal;
            return Steering::Normal;
        }
        match until.judge(here.depth, location) {
            UntilStep::Arrived => {
                self.mode = Mode::Normal;
                Steering::Pause(Some(PauseReason::Goto))
            }
            UntilStep::Returned => {
                self.mode = Mode::Normal;
                self.publish(Payload::Notification(Notification {
                    level: NotificationLevel::Info.into(),
                    message: format!(
                        "until {}: the frame returned before reaching line {}",
                        until.line, until.line
                    ),
                }));
                Steering::Pause(Some(PauseReason::Step))
            }
            UntilStep::Again => {
                let depth = here.depth;
                self.mode = Mode::Until(until);
                self.resume_silently("next", here.thread_id).await;
                self.exec.stepping(StepInFlight {
                    kind: StepKind::Over,
                    thread: here.thread_id,
                    depth,
                    returning: false,
                });
                Steering::Resumed
            }
        }
    }

    /// TRACE: one `trace` event for the step that landed here, and the next
    /// step, until the limit or a stop that is no step's.
    async fn steer_trace(
        &mut self,
        here: &StopHere,
        step: Option<StepInFlight>,
        location: Option<&Location>,
        frame_id: Option<i64>,
        tracing: Tracing,
    ) -> Steering {
        let StopHere {
            reason,
            thread_id,
            depth,
            ..
        } = *here;
        let Tracing {
            key,
            step: taken,
            limit,
            previous,
            ..
        } = tracing;
        if let Some(step) = step
            && self.go_on_stepping(step, here).await
        {
            return Steering::Resumed;
        }
        if !matches!(reason, PauseReason::Step | PauseReason::Breakpoint) || taken >= limit {
            self.mode = Mode::Normal;
            return Steering::Normal;
        }
        let locals = self
            .top_locals(thread_id, frame_id)
            .await
            .map(|v| stop::locals(&v))
            .unwrap_or_default();
        let (current, changed) = changed_locals(locals, &previous);
        let taken = taken + 1;
        let last = taken >= limit;
        self.publish(Payload::Trace(Box::new(Trace {
            key: key.clone(),
            step: taken,
            location: location.cloned(),
            value: None,
            changed_locals: changed,
            coor: location
                .map(|l| vec![depth.unwrap_or(1) as i32, l.line as i32])
                .unwrap_or_default(),
            point: None,
        })));
        if last {
            // The step limit: pause here, where the last step landed.
            self.mode = Mode::Normal;
            return Steering::Pause(Some(PauseReason::Step));
        }
        self.mode = Mode::Trace(Tracing {
            key,
            thread: thread_id,
            step: taken,
            limit,
            previous: current,
        });
        self.resume_silently("next", thread_id).await;
        self.exec.stepping(StepInFlight {
            kind: StepKind::Over,
            thread: thread_id,
            depth,
            returning: false,
        });
        Steering::Resumed
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
}

/// The locals by name with their text, and those whose text is not the
/// previous step's.
fn changed_locals(
    locals: Vec<Local>,
    previous: &HashMap<String, String>,
) -> (HashMap<String, String>, Vec<Local>) {
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
    (current, changed)
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
    fn until_arrives_at_or_past_the_line_in_its_frame_and_ends_when_it_returns() {
        let until = Until {
            thread: 1,
            path: "/a.py".into(),
            line: 10,
            depth: Some(3),
            force: false,
        };
        let at = |path: &str, line| Location {
            path: path.into(),
            line,
            ..Default::default()
        };
        let judge = |depth, path, line| until.judge(depth, Some(&at(path, line)));
        assert_eq!(judge(Some(3), "/a.py", 9), UntilStep::Again);
        assert_eq!(judge(Some(3), "/a.py", 10), UntilStep::Arrived);
        // A line never reached: the first one after it counts.
        assert_eq!(judge(Some(3), "/a.py", 12), UntilStep::Arrived);
        assert_eq!(judge(Some(2), "/a.py", 4), UntilStep::Returned);
        assert_eq!(judge(Some(2), "/a.py", 40), UntilStep::Returned);
        // Deeper (a callee's line past `line`) is not the frame's.
        assert_eq!(judge(Some(4), "/a.py", 30), UntilStep::Again);
        assert_eq!(judge(Some(3), "/b.py", 30), UntilStep::Returned);
        // Without depths, the file and line decide.
        assert_eq!(judge(None, "/a.py", 11), UntilStep::Arrived);
        assert_eq!(until.judge(Some(3), None), UntilStep::Again);
    }
}

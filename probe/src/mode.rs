//! A probe session's mode — how the probe should treat its points — and
//! the request it is about: what the probe is armed with, whether the mode
//! makes a point hold, the mode a command at a hold leaves, and a TRACE
//! run's steps. No I/O: the session decides with it and acts.

use stepd_proto::v1::{Armed, ArmedMatcher, BaggageEntry, ProbeMode, ResumeDecision};

use stepd_core::{
    error::{ApiError, ApiResult},
    session::pause::answer::Go,
};

/// Trace records a TRACE reports when the command names no limit.
const DEFAULT_TRACE_STEPS: u32 = 1000;

/// How the probe should treat its points, as the server sees it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Mode {
    Breakpoints,
    Step,
    Out { depth: u32, force: bool },
    Quiet { depth: u32 },
    Here { coor: Vec<i32>, force: bool },
    Trace(Tracing),
}

/// A TRACE run: the pause it started from and the steps reported so far,
/// counted across report batches.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Tracing {
    /// The pause the run started from.
    pub key: String,
    /// Steps reported so far.
    pub step: u32,
    /// Steps it may report.
    pub limit: u32,
}

/// The mode and the request it is about.
#[derive(Debug, Clone)]
pub(super) struct ModeState {
    /// The mode in force.
    pub now: Mode,
    /// The request `now` is about (`Armed.request_scope`); empty = the
    /// whole process, and always empty in BREAKPOINTS mode.
    pub scope: Vec<BaggageEntry>,
}

/// One record of a TRACE run, counted.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TraceStep {
    /// The pause the run started from.
    pub key: String,
    /// The record's step number, from 1.
    pub step: u32,
    /// The run reached its limit: the mode is now STEP, so the probe holds
    /// at its next point once it is armed again.
    pub last: bool,
}

/// How the mode meets a point the probe reports.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct AtPoint {
    /// The request scope a hold there is about: the mode's, when the mode
    /// is about the point's request; else none.
    pub scope: Vec<BaggageEntry>,
    /// The mode alone makes the point hold: the step's end, the HERE
    /// target, a frame being left.
    pub holds: bool,
}

impl Default for ModeState {
    fn default() -> Self {
        Self {
            now: Mode::Breakpoints,
            scope: Vec::new(),
        }
    }
}

impl ModeState {
    /// Changes the mode, about the request `scope` (empty = the whole
    /// process); BREAKPOINTS is never about one request.
    pub fn set(&mut self, mode: Mode, scope: Vec<BaggageEntry>) {
        self.scope = if mode == Mode::Breakpoints {
            Vec::new()
        } else {
            scope
        };
        self.now = mode;
    }

    /// What the probe is armed with under this mode.
    pub fn armed(&self, matchers: Vec<ArmedMatcher>) -> Armed {
        let (mode, depth, target_coor, honour) = match &self.now {
            Mode::Breakpoints => (ProbeMode::Breakpoints, 0, Vec::new(), true),
            Mode::Step => (ProbeMode::Step, 0, Vec::new(), true),
            Mode::Out { depth, force } => (ProbeMode::Depth, *depth, Vec::new(), !force),
            Mode::Quiet { depth } => (ProbeMode::None, *depth, Vec::new(), false),
            Mode::Here { coor, force } => (ProbeMode::Breakpoints, 0, coor.clone(), !force),
            Mode::Trace(_) => (ProbeMode::Trace, 0, Vec::new(), true),
        };
        Armed {
            mode: mode.into(),
            matchers,
            depth,
            target_coor,
            honour_breakpoints: honour,
            request_scope: self.scope.clone(),
        }
    }

    /// How the mode meets a point at `coor`, `depth` scopes deep, that the
    /// probe reports as `outside_request_scope` or not.
    pub fn at(&self, outside_request_scope: bool, coor: &[i32], depth: u32) -> AtPoint {
        // A mode about one request says nothing of another request's point:
        // only its breakpoints can hold it.
        let applies = self.scope.is_empty() || !outside_request_scope;
        let holds = applies
            && match &self.now {
                Mode::Step => true,
                Mode::Breakpoints | Mode::Trace(_) | Mode::Quiet { .. } => false,
                Mode::Here { coor: target, .. } => coor == target.as_slice(),
                Mode::Out { depth: from, .. } => depth < *from,
            };
        AtPoint {
            scope: if applies {
                self.scope.clone()
            } else {
                Vec::new()
            },
            holds,
        }
    }
}

impl ModeState {
    /// Counts a trace record the probe reported: its step, when a TRACE run
    /// is in force; at the run's limit the mode becomes STEP, about the
    /// same request. None when no run is (the probe sent it before it heard
    /// the run ended).
    pub fn trace_step(&mut self) -> Option<TraceStep> {
        let Mode::Trace(tracing) = &mut self.now else {
            return None;
        };
        tracing.step += 1;
        let step = TraceStep {
            key: tracing.key.clone(),
            step: tracing.step,
            last: tracing.step >= tracing.limit,
        };
        if step.last {
            self.now = Mode::Step;
        }
        Some(step)
    }

    /// The mode `go` at pause `key`, held `depth` scopes deep, leaves, and
    /// how the hold ends; or why a probe cannot go so.
    pub fn after(&self, key: &str, depth: u32, go: &Go) -> ApiResult<(Mode, ResumeDecision)> {
        let go_on = ResumeDecision::Continue;
        Ok(match go {
            Go::Next | Go::In => (Mode::Step, go_on),
            Go::Out { force } => (
                Mode::Out {
                    depth,
                    force: *force,
                },
                go_on,
            ),
            Go::Here(here) => {
                if here.within_frame {
                    return Err(ApiError::invalid_field(
                        "command.here.within_frame",
                        "probe sessions run to a coordinate, not to a line of a frame",
                    ));
                }
                if here.coor.is_empty() {
                    return Err(ApiError::invalid_field(
                        "command.here.coor",
                        "probe sessions run to a coordinate",
                    ));
                }
                (
                    Mode::Here {
                        coor: here.coor.clone(),
                        force: here.force,
                    },
                    go_on,
                )
            }
            Go::Continue | Go::Inject(_) => (Mode::Breakpoints, go_on),
            Go::ContinueScope => (
                Mode::Quiet {
                    depth: depth.max(1),
                },
                go_on,
            ),
            Go::ContinueAll => (Mode::Quiet { depth: 1 }, go_on),
            Go::Trace { max_steps } => (
                Mode::Trace(Tracing {
                    key: key.to_owned(),
                    step: 0,
                    limit: if *max_steps == 0 {
                        DEFAULT_TRACE_STEPS
                    } else {
                        *max_steps
                    },
                }),
                go_on,
            ),
            Go::Skip => (self.now.clone(), ResumeDecision::Skip),
            // Never offered at a hold: a probe's program has no lines to jump to.
            Go::Jump(_) => {
                return Err(ApiError::new(
                    stepd_proto::v1::ErrorReason::InvalidCommand,
                    "JUMP is for DAP sessions; a probe hold has no line to jump to",
                ));
            }
            Go::Quit => (self.now.clone(), ResumeDecision::Stop),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ana() -> Vec<BaggageEntry> {
        vec![BaggageEntry {
            key: "debug-session".into(),
            value: "ana".into(),
        }]
    }

    #[test]
    fn breakpoints_are_never_about_one_request() {
        let mut mode = ModeState::default();
        mode.set(Mode::Step, ana());
        assert_eq!(mode.armed(vec![]).request_scope, ana());
        mode.set(Mode::Breakpoints, ana());
        assert!(mode.scope.is_empty());
        assert!(mode.armed(vec![]).request_scope.is_empty());
    }

    #[test]
    fn the_table() {
        let scoped = |now| ModeState { now, scope: ana() };
        let whole = |now| ModeState {
            now,
            scope: Vec::new(),
        };
        let here = Mode::Here {
            coor: vec![2, 7],
            force: false,
        };
        let out = Mode::Out {
            depth: 2,
            force: false,
        };
        // (mode, outside the request, coor, depth) → (the mode applies, it holds)
        let cases = [
            (whole(Mode::Step), false, vec![1], 1, true, true),
            (whole(Mode::Breakpoints), false, vec![1], 1, true, false),
            (
                whole(Mode::Quiet { depth: 3 }),
                false,
                vec![1],
                1,
                true,
                false,
            ),
            (whole(here.clone()), false, vec![2, 7], 2, true, true),
            (whole(here.clone()), false, vec![2, 8], 2, true, false),
            (whole(out.clone()), false, vec![1], 1, true, true),
            (whole(out.clone()), false, vec![1, 2], 2, true, false),
            (scoped(Mode::Step), false, vec![1], 1, true, true),
            (scoped(Mode::Step), true, vec![1], 1, false, false),
            (whole(Mode::Step), true, vec![1], 1, true, true),
        ];
        for (mode, outside, coor, depth, applies, holds) in cases {
            let at = mode.at(outside, &coor, depth);
            assert_eq!(at.holds, holds, "{mode:?} {outside} {coor:?}");
            assert_eq!(
                at.scope.is_empty(),
                !applies || mode.scope.is_empty(),
                "{mode:?} {outside}"
            );
        }
    }

    #[test]
    fn what_each_mode_arms() {
        let arm = |now| {
            ModeState {
                now,
                scope: Vec::new(),
            }
            .armed(vec![])
        };
        let out = arm(Mode::Out {
            depth: 3,
            force: true,
        });
        assert_eq!(
            (out.mode(), out.depth, out.honour_breakpoints),
            (ProbeMode::Depth, 3, false)
        );
        let here = arm(Mode::Here {
            coor: vec![4],
            force: false,
        });
        assert_eq!(
            (here.mode(), here.target_coor, here.honour_breakpoints),
            (ProbeMode::Breakpoints, vec![4], true)
        );
        assert_eq!(arm(Mode::Quiet { depth: 1 }).mode(), ProbeMode::None);
    }

    #[test]
    fn the_mode_each_command_leaves() {
        use stepd_proto::v1::HereCommand;
        let mode = ModeState {
            now: Mode::Quiet { depth: 4 },
            scope: Vec::new(),
        };
        let here = |coor: Vec<i32>| {
            Go::Here(HereCommand {
                coor,
                force: true,
                ..Default::default()
            })
        };
        let go_on = ResumeDecision::Continue;
        // (command, depth held at) → (mode, how the hold ends)
        let cases = [
            (Go::Next, 2, Mode::Step, go_on),
            (Go::In, 2, Mode::Step, go_on),
            (
                Go::Out { force: true },
                2,
                Mode::Out {
                    depth: 2,
                    force: true,
                },
                go_on,
            ),
            (
                here(vec![3, 1]),
                2,
                Mode::Here {
                    coor: vec![3, 1],
                    force: true,
                },
                go_on,
            ),
            (Go::Continue, 2, Mode::Breakpoints, go_on),
            (Go::Inject(None), 2, Mode::Breakpoints, go_on),
            (Go::ContinueScope, 2, Mode::Quiet { depth: 2 }, go_on),
            (Go::ContinueScope, 0, Mode::Quiet { depth: 1 }, go_on),
            (Go::ContinueAll, 5, Mode::Quiet { depth: 1 }, go_on),
            (
                Go::Trace { max_steps: 0 },
                1,
                Mode::Trace(Tracing {
                    key: "p1".into(),
                    step: 0,
                    limit: DEFAULT_TRACE_STEPS,
                }),
                go_on,
            ),
            (
                Go::Trace { max_steps: 7 },
                1,
                Mode::Trace(Tracing {
                    key: "p1".into(),
                    step: 0,
                    limit: 7,
                }),
                go_on,
            ),
            (Go::Skip, 1, Mode::Quiet { depth: 4 }, ResumeDecision::Skip),
            (Go::Quit, 1, Mode::Quiet { depth: 4 }, ResumeDecision::Stop),
        ];
        for (go, depth, want, decision) in cases {
            let got = mode.after("p1", depth, &go).expect("allowed");
            assert_eq!(got, (want, decision), "{go:?}");
        }
        let refused = mode
            .after("p1", 1, &here(vec![]))
            .expect_err("no coordinate");
        assert_eq!(
            refused.reason(),
            stepd_proto::v1::ErrorReason::InvalidArgument
        );
    }

    #[test]
    fn a_trace_run_counts_its_steps_and_ends_in_step_mode() {
        let mut mode = ModeState::default();
        assert_eq!(mode.trace_step(), None, "no run");
        mode.set(
            Mode::Trace(Tracing {
                key: "p1".into(),
                step: 0,
                limit: 2,
            }),
            ana(),
        );
        let step = |step, last| {
            Some(TraceStep {
                key: "p1".into(),
                step,
                last,
            })
        };
        assert_eq!(mode.trace_step(), step(1, false));
        assert_eq!(mode.trace_step(), step(2, true));
        assert_eq!(mode.now, Mode::Step);
        assert_eq!(mode.scope, ana(), "about the same request");
        assert_eq!(mode.trace_step(), None, "passed before the probe heard");
    }
}

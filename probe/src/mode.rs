//! A probe session's mode — how the probe should treat its points — and
//! the request it is about: what the probe is armed with, and whether the
//! mode makes a point hold. No I/O: the session decides with it and acts.

use stepd_proto::v1::{Armed, ArmedMatcher, BaggageEntry, ProbeMode};

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
}

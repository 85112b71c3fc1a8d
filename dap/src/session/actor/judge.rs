//! What a DAP stop is, once stepd knows which of its breakpoints the stop
//! names and which of those stop by their verdicts: decided here with no
//! I/O, so that the actor's `on_stopped` reads observe, decide, act, and
//! the rules can be tested without an adapter.

use stepd_proto::v1::PauseReason;

use super::steering::HERE_BREAKPOINT;

/// What the actor knows of a stop when it decides.
#[derive(Debug, Clone, Default)]
pub(super) struct StopFacts {
    /// Why the adapter stopped, as stepd reads its reason.
    pub reason: PauseReason,
    /// The stepd breakpoints the stop names (by the adapter's ids, or the
    /// line a step landed on).
    pub named: Vec<String>,
    /// The named breakpoints whose verdict stops (hit and condition met).
    pub stops: Vec<String>,
    /// The adapter named breakpoints, and only ones it no longer has for
    /// stepd: a hit that raced their removal (then `named` is empty).
    pub only_retired_named: bool,
    /// A Pause request is out.
    pub expect_pause: bool,
}

/// What the stop becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Judged {
    /// A breakpoint stops: any step, trace or run-to in flight ends, and
    /// the stop is shown as this breakpoint stop.
    Breakpoint(Vec<String>),
    /// It answers the Pause request that is out, whatever made it (lldb
    /// says "exception", a hot breakpoint may beat the request).
    AnswersPause,
    /// For the session's mode to steer (a step going on, a trace). With
    /// `silent`, nothing of its own is worth a pause: unless the mode
    /// shows it, the program goes on without a word.
    Steer {
        /// The reason it would be shown with.
        reason: PauseReason,
        /// The breakpoints it would name.
        breakpoints: Vec<String>,
        /// It names breakpoints none of which stop.
        silent: bool,
    },
}

/// The rules, in order: a breakpoint that stops wins; else the stop
/// answers a Pause request that is out; else the mode decides.
pub(super) fn judge(facts: StopFacts) -> Judged {
    let StopFacts {
        reason,
        mut named,
        stops,
        only_retired_named,
        expect_pause,
    } = facts;
    if !stops.is_empty() {
        return Judged::Breakpoint(stops);
    }
    if expect_pause
        && matches!(
            reason,
            PauseReason::Exception
                | PauseReason::Unspecified
                | PauseReason::Step
                | PauseReason::Breakpoint
                | PauseReason::PauseRequest
        )
    {
        return Judged::AnswersPause;
    }
    // An exception stop that names exception breakpoints is judged like a
    // breakpoint stop: when none of them stops (a condition not met), it
    // is silent.
    let breakpoint_stop = matches!(
        reason,
        PauseReason::Breakpoint | PauseReason::DataBreakpoint
    ) || (reason == PauseReason::Exception && !named.is_empty());
    // A breakpoint stop that names breakpoints, none of which stop (a
    // condition not met, a LOG point, one removed meanwhile); the run-to
    // target alone is not such a breakpoint.
    let silent = breakpoint_stop
        && ((only_retired_named && named.is_empty())
            || named.iter().any(|id| id != HERE_BREAKPOINT));
    if !breakpoint_stop {
        named.clear();
    }
    Judged::Steer {
        reason,
        breakpoints: named,
        silent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_table() {
        use PauseReason::*;
        let cases: &[(&str, StopFacts, Judged)] = &[
            (
                "a breakpoint that stops wins over a Pause request",
                StopFacts {
                    reason: Breakpoint,
                    named: ids(&["a", "b"]),
                    stops: ids(&["b"]),
                    expect_pause: true,
                    ..Default::default()
                },
                Judged::Breakpoint(ids(&["b"])),
            ),
            (
                "a step that lands on a stopping breakpoint is that breakpoint's stop",
                StopFacts {
                    reason: Step,
                    named: ids(&["a"]),
                    stops: ids(&["a"]),
                    ..Default::default()
                },
                Judged::Breakpoint(ids(&["a"])),
            ),
            (
                "any stop answers a Pause request that is out",
                StopFacts {
                    reason: Exception,
                    expect_pause: true,
                    ..Default::default()
                },
                Judged::AnswersPause,
            ),
            (
                "a breakpoint that does not stop still answers the request",
                StopFacts {
                    reason: Breakpoint,
                    named: ids(&["a"]),
                    expect_pause: true,
                    ..Default::default()
                },
                Judged::AnswersPause,
            ),
            (
                "an entry stop does not answer a Pause request",
                StopFacts {
                    reason: Entry,
                    expect_pause: true,
                    ..Default::default()
                },
                Judged::Steer {
                    reason: Entry,
                    breakpoints: vec![],
                    silent: false,
                },
            ),
            (
                "a breakpoint whose condition is not met is silent",
                StopFacts {
                    reason: Breakpoint,
                    named: ids(&["a"]),
                    ..Default::default()
                },
                Judged::Steer {
                    reason: Breakpoint,
                    breakpoints: ids(&["a"]),
                    silent: true,
                },
            ),
            (
                "an exception stop whose exception breakpoints do not stop is silent",
                StopFacts {
                    reason: Exception,
                    named: ids(&["x"]),
                    ..Default::default()
                },
                Judged::Steer {
                    reason: Exception,
                    breakpoints: ids(&["x"]),
                    silent: true,
                },
            ),
            (
                "an exception stop that names no breakpoint is shown as it is",
                StopFacts {
                    reason: Exception,
                    ..Default::default()
                },
                Judged::Steer {
                    reason: Exception,
                    breakpoints: vec![],
                    silent: false,
                },
            ),
            (
                "the run-to target alone is not silent: the mode shows it",
                StopFacts {
                    reason: Breakpoint,
                    named: ids(&[HERE_BREAKPOINT]),
                    ..Default::default()
                },
                Judged::Steer {
                    reason: Breakpoint,
                    breakpoints: ids(&[HERE_BREAKPOINT]),
                    silent: false,
                },
            ),
            (
                "a hit that raced its breakpoint's removal is silent",
                StopFacts {
                    reason: Breakpoint,
                    only_retired_named: true,
                    ..Default::default()
                },
                Judged::Steer {
                    reason: Breakpoint,
                    breakpoints: vec![],
                    silent: true,
                },
            ),
            (
                "a step that lands on a breakpoint that does not stop is the step's end, naming none",
                StopFacts {
                    reason: Step,
                    named: ids(&["a"]),
                    ..Default::default()
                },
                Judged::Steer {
                    reason: Step,
                    breakpoints: vec![],
                    silent: false,
                },
            ),
        ];
        for (what, facts, want) in cases {
            assert_eq!(&judge(facts.clone()), want, "{what}");
        }
    }
}

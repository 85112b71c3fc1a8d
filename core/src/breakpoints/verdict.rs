//! What one breakpoint hit does, decided in one place for DAP and probe
//! sessions alike: whether the breakpoint applies at all (enabled, expiry,
//! label selector), its condition, `max_hits`, its hit condition, and then
//! its action.

use std::{collections::HashMap, time::Duration};

use stepd_proto::v1::{Breakpoint, BreakpointAction};

use super::{HitCondition, LabelSelector};
use crate::time::us_from_timestamp;

/// What the caller knows about a hit beyond the breakpoint itself.
#[derive(Debug, Clone, Copy)]
pub struct Known<'a> {
    /// The labels of the session that hit it.
    pub labels: &'a HashMap<String, String>,
    /// Whether the breakpoint's condition holds: true when it has none, when
    /// whoever reported the hit already evaluated it (an adapter entry with
    /// that condition, a probe matcher), or when stepd evaluated it to true.
    pub condition_holds: bool,
    /// The adapter carries out this LOG breakpoint itself (DAP log points):
    /// a stop that names it has nothing left to do for it.
    pub adapter_logs: bool,
}

/// Why a breakpoint does not apply to a hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotApplicable {
    /// It no longer exists.
    Removed,
    /// It is disabled.
    Disabled,
    /// Its expiry passed.
    Expired,
    /// Its label selector does not match the session.
    Selector,
    /// The adapter carried it out (a log point it supports).
    CarriedOutByAdapter,
}

/// What a breakpoint that applies does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Pause (hold, for probes), at most `hold_limit` when set.
    Stop {
        /// The breakpoint's own hold limit (probes).
        hold_limit: Option<Duration>,
    },
    /// Emit the message, interpolated, and go on.
    Log {
        /// The message with `{expr}` parts.
        message: String,
    },
    /// Capture stack and locals, emit them, go on.
    Snapshot,
}

/// The decision for one breakpoint at one hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Does not apply; the hit is not counted.
    NotApplicable(NotApplicable),
    /// Its condition is false; not counted.
    ConditionFalse,
    /// Its `max_hits` were spent before this hit; not counted.
    MaxHitsSpent,
    /// Counted, but the hit condition does not pass.
    HitConditionNotMet,
    /// Counted; carry out the action.
    Act(Action),
}

impl Verdict {
    /// Whether the hit counts towards the breakpoint's hit count.
    pub fn counts(&self) -> bool {
        matches!(self, Verdict::HitConditionNotMet | Verdict::Act(_))
    }

    /// Whether the program must pause (hold) for this breakpoint.
    pub fn stops(&self) -> bool {
        matches!(self, Verdict::Act(Action::Stop { .. }))
    }
}

/// Decides what a hit of `breakpoint` does. `breakpoint.hit_count` includes
/// this hit; `None` is a breakpoint that no longer exists. `now_us` is the
/// time of the hit in µs since the epoch.
pub fn verdict(breakpoint: Option<&Breakpoint>, now_us: i64, known: &Known<'_>) -> Verdict {
    let Some(bp) = breakpoint else {
        return Verdict::NotApplicable(NotApplicable::Removed);
    };
    let spec = bp.spec.clone().unwrap_or_default();
    if spec.enabled == Some(false) {
        return Verdict::NotApplicable(NotApplicable::Disabled);
    }
    if spec
        .expires_at
        .as_ref()
        .is_some_and(|t| us_from_timestamp(t) <= now_us)
    {
        return Verdict::NotApplicable(NotApplicable::Expired);
    }
    if !applies_to(&spec.label_selector, known.labels) {
        return Verdict::NotApplicable(NotApplicable::Selector);
    }
    let action = BreakpointAction::try_from(spec.action).unwrap_or(BreakpointAction::Stop);
    if action == BreakpointAction::Log && known.adapter_logs {
        return Verdict::NotApplicable(NotApplicable::CarriedOutByAdapter);
    }
    if !spec.condition.trim().is_empty() && !known.condition_holds {
        return Verdict::ConditionFalse;
    }
    if spec.max_hits > 0 && bp.hit_count > u64::from(spec.max_hits) {
        return Verdict::MaxHitsSpent;
    }
    // A hit condition that does not parse was refused when it was set; should
    // one reach here anyway, it never passes rather than passing silently.
    if !spec.hit_condition.trim().is_empty()
        && !HitCondition::parse(&spec.hit_condition).is_ok_and(|c| c.passes(bp.hit_count))
    {
        return Verdict::HitConditionNotMet;
    }
    Verdict::Act(match action {
        BreakpointAction::Log => Action::Log {
            message: spec.log_message,
        },
        BreakpointAction::Snapshot => Action::Snapshot,
        BreakpointAction::Stop | BreakpointAction::Unspecified => Action::Stop {
            hold_limit: spec.hold_limit.and_then(|d| Duration::try_from(d).ok()),
        },
    })
}

/// Whether a label selector applies to a session with `labels`, as a
/// Kubernetes selector does: the empty selector matches every session, and a
/// session without labels is matched only by requirements it satisfies
/// (`!agent`, `agent notin (sub)`). A selector that does not parse matches
/// nothing.
pub fn applies_to(selector: &str, labels: &HashMap<String, String>) -> bool {
    LabelSelector::parse(selector).is_ok_and(|sel| sel.matches(labels))
}

#[cfg(test)]
mod tests {
    use prost_types::Timestamp;
    use stepd_proto::v1::BreakpointSpec;

    use super::*;

    const NOW: i64 = 1_000_000_000_000;

    struct Case {
        name: &'static str,
        spec: BreakpointSpec,
        hit_count: u64,
        labels: &'static [(&'static str, &'static str)],
        condition_holds: bool,
        adapter_logs: bool,
        want: Verdict,
    }

    fn case(name: &'static str, spec: BreakpointSpec, hit_count: u64, want: Verdict) -> Case {
        Case {
            name,
            spec,
            hit_count,
            labels: &[],
            condition_holds: true,
            adapter_logs: false,
            want,
        }
    }

    fn spec() -> BreakpointSpec {
        BreakpointSpec {
            enabled: Some(true),
            ..Default::default()
        }
    }

    fn stop() -> Verdict {
        Verdict::Act(Action::Stop { hold_limit: None })
    }

    #[test]
    fn decides_every_case() {
        let at = |us: i64| {
            Some(Timestamp {
                seconds: us / 1_000_000,
                nanos: 0,
            })
        };
        let cases = vec![
            case("plain", spec(), 1, stop()),
            case(
                "disabled",
                BreakpointSpec {
                    enabled: Some(false),
                    ..spec()
                },
                1,
                Verdict::NotApplicable(NotApplicable::Disabled),
            ),
            case(
                "expired",
                BreakpointSpec {
                    expires_at: at(NOW - 1_000_000),
                    ..spec()
                },
                1,
                Verdict::NotApplicable(NotApplicable::Expired),
            ),
            case(
                "not yet expired",
                BreakpointSpec {
                    expires_at: at(NOW + 60_000_000),
                    ..spec()
                },
                1,
                stop(),
            ),
            case(
                "selector against no labels",
                BreakpointSpec {
                    label_selector: "agent=sub".into(),
                    ..spec()
                },
                1,
                Verdict::NotApplicable(NotApplicable::Selector),
            ),
            case(
                "negated selector against no labels",
                BreakpointSpec {
                    label_selector: "!agent".into(),
                    ..spec()
                },
                1,
                stop(),
            ),
            Case {
                labels: &[("agent", "sub")],
                ..case(
                    "selector matching",
                    BreakpointSpec {
                        label_selector: "agent=sub".into(),
                        ..spec()
                    },
                    1,
                    stop(),
                )
            },
            Case {
                labels: &[("agent", "sub")],
                ..case(
                    "negated selector against the label",
                    BreakpointSpec {
                        label_selector: "!agent".into(),
                        ..spec()
                    },
                    1,
                    Verdict::NotApplicable(NotApplicable::Selector),
                )
            },
            Case {
                condition_holds: false,
                ..case(
                    "condition false",
                    BreakpointSpec {
                        condition: "i < 3".into(),
                        ..spec()
                    },
                    1,
                    Verdict::ConditionFalse,
                )
            },
            Case {
                condition_holds: false,
                ..case("no condition to be false", spec(), 1, stop())
            },
            case(
                "hit condition not met",
                BreakpointSpec {
                    hit_condition: "==3".into(),
                    ..spec()
                },
                2,
                Verdict::HitConditionNotMet,
            ),
            case(
                "hit condition met",
                BreakpointSpec {
                    hit_condition: "==3".into(),
                    ..spec()
                },
                3,
                stop(),
            ),
            case(
                "last of max_hits",
                BreakpointSpec {
                    max_hits: 2,
                    ..spec()
                },
                2,
                stop(),
            ),
            case(
                "max_hits spent",
                BreakpointSpec {
                    max_hits: 2,
                    ..spec()
                },
                3,
                Verdict::MaxHitsSpent,
            ),
            case(
                "log",
                BreakpointSpec {
                    action: BreakpointAction::Log as i32,
                    log_message: "i={i}".into(),
                    ..spec()
                },
                1,
                Verdict::Act(Action::Log {
                    message: "i={i}".into(),
                }),
            ),
            Case {
                adapter_logs: true,
                ..case(
                    "log the adapter does",
                    BreakpointSpec {
                        action: BreakpointAction::Log as i32,
                        log_message: "i={i}".into(),
                        ..spec()
                    },
                    1,
                    Verdict::NotApplicable(NotApplicable::CarriedOutByAdapter),
                )
            },
            Case {
                condition_holds: false,
                ..case(
                    "log with a false condition",
                    BreakpointSpec {
                        action: BreakpointAction::Log as i32,
                        log_message: "i={i}".into(),
                        condition: "i < 3".into(),
                        ..spec()
                    },
                    1,
                    Verdict::ConditionFalse,
                )
            },
            case(
                "snapshot",
                BreakpointSpec {
                    action: BreakpointAction::Snapshot as i32,
                    ..spec()
                },
                1,
                Verdict::Act(Action::Snapshot),
            ),
            case(
                "hold limit",
                BreakpointSpec {
                    hold_limit: Some(prost_types::Duration {
                        seconds: 2,
                        nanos: 0,
                    }),
                    ..spec()
                },
                1,
                Verdict::Act(Action::Stop {
                    hold_limit: Some(Duration::from_secs(2)),
                }),
            ),
        ];
        for c in cases {
            let labels: HashMap<String, String> = c
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let bp = Breakpoint {
                id: "bp-1".into(),
                spec: Some(c.spec),
                hit_count: c.hit_count,
                ..Default::default()
            };
            let known = Known {
                labels: &labels,
                condition_holds: c.condition_holds,
                adapter_logs: c.adapter_logs,
            };
            assert_eq!(verdict(Some(&bp), NOW, &known), c.want, "{}", c.name);
        }
        let none = HashMap::new();
        let known = Known {
            labels: &none,
            condition_holds: true,
            adapter_logs: false,
        };
        assert_eq!(
            verdict(None, NOW, &known),
            Verdict::NotApplicable(NotApplicable::Removed)
        );
    }

    #[test]
    fn only_applicable_hits_count() {
        assert!(stop().counts());
        assert!(Verdict::HitConditionNotMet.counts());
        assert!(!Verdict::ConditionFalse.counts());
        assert!(!Verdict::MaxHitsSpent.counts());
        assert!(!Verdict::NotApplicable(NotApplicable::Selector).counts());
    }

    #[test]
    fn selectors_read_like_kubernetes_ones() {
        let none = HashMap::new();
        let sub: HashMap<String, String> = [("agent".to_string(), "sub".to_string())].into();
        assert!(applies_to("", &none));
        assert!(applies_to("", &sub));
        assert!(!applies_to("agent=sub", &none));
        assert!(applies_to("agent=sub", &sub));
        assert!(applies_to("!agent", &none));
        assert!(!applies_to("!agent", &sub));
        assert!(applies_to("agent notin (sub)", &none));
        assert!(!applies_to("agent", &none));
    }
}

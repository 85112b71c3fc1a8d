//! What a point the probe reports (`Hit`) becomes: whether it holds, for how
//! long and about which request, the pause a hold opens, and the line a LOG
//! breakpoint at it writes. No I/O: the session counts the breakpoints'
//! hits, decides with this, and acts.

use std::time::Duration;

use stepd_proto::v1::{
    BaggageEntry, CommandKind, Hit, Pause, PauseReason, PointInfo, ProbeCapabilities,
};

use super::mode::AtPoint;
use super::{holds, request_scope, value};
use stepd_core::{
    breakpoints::{condition, log_message},
    session::pause::{answer, display::display},
    time::now_timestamp,
};

/// What the breakpoints the probe named at a point said to stop for.
#[derive(Debug, Default)]
pub(crate) struct Stops {
    /// The request scope each stopping breakpoint requires (None: any).
    scopes: Vec<Option<Vec<BaggageEntry>>>,
    /// The hold limits they set.
    limits: Vec<Duration>,
}

impl Stops {
    /// A breakpoint stops the point, requiring `scope`, with its own
    /// `hold_limit` if it sets one.
    pub fn stop(&mut self, scope: Option<Vec<BaggageEntry>>, hold_limit: Option<Duration>) {
        self.scopes.push(scope);
        self.limits.extend(hold_limit);
    }
}

/// What becomes of a point.
#[derive(Debug, PartialEq)]
pub(crate) enum AtHit {
    /// It holds for at most `limit`, in the request `scope` (empty: not
    /// known to be one request's).
    Hold {
        limit: Duration,
        scope: Vec<BaggageEntry>,
    },
    /// The program goes on.
    Continue,
}

/// What becomes of a point the mode meets as `at`: one the probe held on
/// its own (it `named` no breakpoint) holds; else it holds when one of the
/// named breakpoints `stops` it, or the mode alone holds it.
pub(crate) fn decide(at: AtPoint, named: bool, stops: &Stops, default: Duration) -> AtHit {
    if !named {
        return AtHit::Hold {
            limit: default,
            scope: at.scope,
        };
    }
    if !stops.scopes.is_empty() {
        // In the request a mode is about, the hold stays that request's.
        let scope = if at.scope.is_empty() {
            request_scope::of_stops(&stops.scopes)
        } else {
            at.scope
        };
        let limit = holds::limit(stops.limits.iter().copied(), default);
        return AtHit::Hold { limit, scope };
    }
    if at.holds {
        return AtHit::Hold {
            limit: default,
            scope: at.scope,
        };
    }
    AtHit::Continue
}

/// The commands that work at a hold of a probe with `caps`.
pub(crate) fn input_type(
    caps: ProbeCapabilities,
    point: &PointInfo,
    evaluable: bool,
    locals: bool,
) -> Vec<i32> {
    let mut kinds = answer::common_commands();
    kinds.push(CommandKind::Quit);
    // A hold may bring its own evaluator when the probe declares none.
    if caps.eval || evaluable {
        kinds.push(CommandKind::Eval);
    }
    if caps.edit && point.editable {
        kinds.push(CommandKind::Inject);
    }
    if caps.skip {
        kinds.push(CommandKind::Skip);
    }
    if point.payload.is_some() {
        kinds.push(CommandKind::Inspect);
    }
    if locals {
        kinds.push(CommandKind::Locals);
    }
    kinds.into_iter().map(i32::from).collect()
}

/// The pause a hold of `hit` at `point` opens as `key` in `session_id`,
/// with `input_type`; `since` is when a re-reported hold began.
pub(crate) fn pause_of(
    session_id: &str,
    key: String,
    hit: &Hit,
    point: PointInfo,
    input_type: Vec<i32>,
    since: Option<prost_types::Timestamp>,
) -> Pause {
    let reason = if hit.exception_message.is_empty() {
        PauseReason::Hold
    } else {
        PauseReason::Exception
    };
    let debug_value = point
        .payload
        .as_ref()
        .map(|v| display(&value::print(v), &point.type_hint));
    Pause {
        key,
        session_id: session_id.to_owned(),
        thread_id: 0,
        reason: reason.into(),
        raw_reason: point.kind.clone(),
        input_type,
        debug_value,
        location: hit.location.clone(),
        coor: hit.coor.clone(),
        locals_available: !hit.locals.is_empty(),
        locals: hit.locals.clone(),
        original_id: hit.hit_id.clone(),
        caught_msg: hit.exception_message.clone(),
        point: Some(point),
        breakpoint_ids: hit.breakpoint_ids.clone(),
        notes: since
            .iter()
            .map(|_| "re-reported by the probe after it reconnected".to_owned())
            .collect(),
        created_at: Some(since.unwrap_or_else(now_timestamp)),
        ..Default::default()
    }
}

/// The line a LOG breakpoint's `message` writes at `at`: `{expr}` parts
/// are read with the condition language over the point (`{value.cmd}`,
/// `{name}`).
pub(crate) fn log_line(message: &str, at: &condition::Point<'_>) -> String {
    let mut text = String::new();
    for part in log_message::parse(message) {
        match part {
            log_message::Part::Text(t) => text.push_str(&t),
            log_message::Part::Expr(expr) => match condition::parse(&expr) {
                Ok(e) => match e.value(at) {
                    serde_json::Value::String(s) => text.push_str(&s),
                    other => text.push_str(&other.to_string()),
                },
                Err(err) => text.push_str(&format!("<{expr}: {err}>")),
            },
        }
    }
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn ana() -> Vec<BaggageEntry> {
        vec![BaggageEntry {
            key: "debug-session".into(),
            value: "ana".into(),
        }]
    }

    #[test]
    fn the_table() {
        let s = Duration::from_secs;
        let default = s(60);
        let at = |scope: Vec<BaggageEntry>, holds| AtPoint { scope, holds };
        let stops = |list: Vec<(Option<Vec<BaggageEntry>>, Option<u64>)>| {
            let mut stops = Stops::default();
            for (scope, limit) in list {
                stops.stop(scope, limit.map(s));
            }
            stops
        };
        let hold = |secs, scope| AtHit::Hold {
            limit: s(secs),
            scope,
        };
        // (how the mode meets it, breakpoints named, what they stop for) → what becomes of it
        let cases = [
            (at(vec![], false), false, stops(vec![]), hold(60, vec![])),
            (at(ana(), true), false, stops(vec![]), hold(60, ana())),
            (at(vec![], false), true, stops(vec![]), AtHit::Continue),
            (at(vec![], true), true, stops(vec![]), hold(60, vec![])),
            (
                at(vec![], false),
                true,
                stops(vec![(None, Some(10)), (None, Some(20))]),
                hold(10, vec![]),
            ),
            (
                at(vec![], false),
                true,
                stops(vec![(Some(ana()), None)]),
                hold(60, ana()),
            ),
            (
                at(vec![], false),
                true,
                stops(vec![(Some(ana()), None), (None, None)]),
                hold(60, vec![]),
            ),
            (
                at(ana(), false),
                true,
                stops(vec![(None, Some(5))]),
                hold(5, ana()),
            ),
        ];
        for (i, (at, named, stops, want)) in cases.into_iter().enumerate() {
            assert_eq!(decide(at, named, &stops, default), want, "case {i}");
        }
    }

    #[test]
    fn what_works_at_a_hold() {
        let has = |kinds: &[i32], kind: CommandKind| kinds.contains(&(kind as i32));
        let plain = PointInfo::default();
        let rich = PointInfo {
            editable: true,
            payload: Some(prost_types::Value::default()),
            ..Default::default()
        };
        let all = ProbeCapabilities {
            eval: true,
            edit: true,
            skip: true,
        };
        let none = ProbeCapabilities::default();
        let kinds = input_type(none, &plain, false, false);
        assert!(has(&kinds, CommandKind::Quit) && has(&kinds, CommandKind::Next));
        for kind in [
            CommandKind::Eval,
            CommandKind::Inject,
            CommandKind::Skip,
            CommandKind::Inspect,
            CommandKind::Locals,
        ] {
            assert!(!has(&kinds, kind), "{kind:?}");
        }
        assert!(has(
            &input_type(none, &plain, true, false),
            CommandKind::Eval
        ));
        assert!(!has(
            &input_type(all, &plain, false, false),
            CommandKind::Inject
        ));
        let kinds = input_type(all, &rich, false, true);
        for kind in [
            CommandKind::Eval,
            CommandKind::Inject,
            CommandKind::Skip,
            CommandKind::Inspect,
            CommandKind::Locals,
        ] {
            assert!(has(&kinds, kind), "{kind:?}");
        }
    }

    #[test]
    fn a_pause_says_what_held_and_when() {
        let hit = Hit {
            hit_id: "h1".into(),
            exception_message: "boom".into(),
            breakpoint_ids: vec!["b1".into()],
            ..Default::default()
        };
        let point = PointInfo {
            kind: "call".into(),
            ..Default::default()
        };
        let since = prost_types::Timestamp {
            seconds: 7,
            nanos: 0,
        };
        let pause = pause_of("s1", "p1".into(), &hit, point, vec![], Some(since));
        assert_eq!(pause.reason(), PauseReason::Exception);
        assert_eq!(
            (pause.original_id.as_str(), pause.raw_reason.as_str()),
            ("h1", "call")
        );
        assert_eq!(pause.created_at, Some(since));
        assert_eq!(pause.notes.len(), 1, "re-reported");
        let fresh = pause_of(
            "s1",
            "p2".into(),
            &Hit::default(),
            PointInfo::default(),
            vec![],
            None,
        );
        assert_eq!(fresh.reason(), PauseReason::Hold);
        assert!(fresh.notes.is_empty());
    }

    #[test]
    fn a_log_line_reads_the_point() {
        let value = serde_json::json!({"cmd": "ls"});
        let labels = BTreeMap::new();
        let at = condition::Point {
            kind: "call",
            name: "run",
            value: &value,
            labels: &labels,
        };
        assert_eq!(log_line("{name}: {value.cmd} {1+}", &at).lines().count(), 1);
        assert!(log_line("{name}: {value.cmd}", &at).starts_with("run: ls"));
        assert!(log_line("{name}: {value.cmd}", &at).ends_with('\n'));
    }
}

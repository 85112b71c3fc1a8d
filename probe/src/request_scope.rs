//! The request a probe hold is in, when it is known to be one request's own,
//! and so the request a stepping mode chosen at that hold is about
//! (`Armed.request_scope`): the baggage entries that request carries. A hold
//! is a request's own when the breakpoints that stopped it are all scoped to
//! its baggage, or when a mode scoped to it held it.

use stepd_proto::v1::{BaggageEntry, Breakpoint, breakpoint_spec::Location};

/// The entries a probe breakpoint requires, or `None` when it applies to
/// every request (unscoped, or not a probe breakpoint).
pub(crate) fn of_breakpoint(breakpoint: &Breakpoint) -> Option<Vec<BaggageEntry>> {
    let spec = breakpoint.spec.as_ref()?;
    match &spec.location {
        Some(Location::Probe(p)) if !p.baggage.is_empty() => Some(p.baggage.clone()),
        _ => None,
    }
}

/// The request scope of a hold stopped by these breakpoints: every entry
/// they require (the request carries them all, since each matched it), or
/// none when one of them applies to every request, or there are none.
pub(crate) fn of_stops(stops: &[Option<Vec<BaggageEntry>>]) -> Vec<BaggageEntry> {
    let mut scope: Vec<BaggageEntry> = Vec::new();
    for stop in stops {
        let Some(entries) = stop else {
            return Vec::new();
        };
        for entry in entries {
            if !scope.iter().any(|e| e.key == entry.key) {
                scope.push(entry.clone());
            }
        }
    }
    scope
}

/// How a scope reads in messages: `k=v,k2=v2`, as a `baggage` header has it.
pub(crate) fn display(scope: &[BaggageEntry]) -> String {
    scope
        .iter()
        .map(|e| format!("{}={}", e.key, e.value))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, value: &str) -> BaggageEntry {
        BaggageEntry {
            key: key.into(),
            value: value.into(),
        }
    }

    #[test]
    fn a_hold_is_a_requests_own_only_when_every_stop_is_scoped() {
        let ana = Some(vec![entry("debug-session", "ana")]);
        let blue = Some(vec![entry("tenant", "blue"), entry("debug-session", "ana")]);
        assert_eq!(
            of_stops(&[ana.clone(), blue]),
            [entry("debug-session", "ana"), entry("tenant", "blue")]
        );
        assert!(of_stops(&[ana, None]).is_empty());
        assert!(of_stops(&[]).is_empty());
    }

    #[test]
    fn only_a_probe_breakpoint_with_baggage_is_scoped() {
        use stepd_proto::v1::{BreakpointSpec, ProbeMatch};
        let probe = |baggage: Vec<BaggageEntry>| Breakpoint {
            spec: Some(BreakpointSpec {
                location: Some(Location::Probe(ProbeMatch {
                    point_kind: "tool_call".into(),
                    name_glob: String::new(),
                    baggage,
                })),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            of_breakpoint(&probe(vec![entry("k", "v")])),
            Some(vec![entry("k", "v")])
        );
        assert_eq!(of_breakpoint(&probe(Vec::new())), None);
        assert_eq!(of_breakpoint(&Breakpoint::default()), None);
    }
}

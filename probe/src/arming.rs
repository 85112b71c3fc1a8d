//! Which probe breakpoints a probe is sent (`Armed.matchers`), and when they
//! are listed again: after a breakpoint change, or once the first of them
//! expires, not at every hold, since a project may hold thousands of
//! breakpoints. No I/O: the session lists the breakpoints when this says
//! to, and sends what it arms.

use stepd_proto::v1::{Armed, ArmedMatcher, Breakpoint, breakpoint_spec::Location};

use super::mode::ModeState;
use stepd_core::time::us_from_timestamp;

/// The probe breakpoints that apply to a probe as last listed.
#[derive(Debug, Default)]
pub(crate) struct Arming {
    /// The matchers, and when the first of them expires (µs since the
    /// epoch); None until listed, and again after a breakpoint change.
    listed: Option<(Vec<ArmedMatcher>, Option<i64>)>,
}

impl Arming {
    /// Whether the breakpoints are to be listed again at `now_us`: never
    /// listed, changed since, or one of them has expired.
    pub fn stale(&self, now_us: i64) -> bool {
        !self
            .listed
            .as_ref()
            .is_some_and(|(_, until)| until.is_none_or(|t| now_us < t))
    }

    /// The breakpoints that apply to the probe, as just listed.
    pub fn listed(&mut self, breakpoints: Vec<Breakpoint>) {
        self.listed = Some(matchers_of(breakpoints));
    }

    /// A breakpoint changed: the next arming lists them again.
    pub fn changed(&mut self) {
        self.listed = None;
    }

    /// What the probe is armed with under `mode`.
    pub fn armed(&self, mode: &ModeState) -> Armed {
        let matchers = self
            .listed
            .as_ref()
            .map(|(m, _)| m.clone())
            .unwrap_or_default();
        mode.armed(matchers)
    }
}

/// The matchers of the probe breakpoints among `breakpoints` that are in
/// force (not spent, not disabled), and the earliest expiry among them.
fn matchers_of(breakpoints: Vec<Breakpoint>) -> (Vec<ArmedMatcher>, Option<i64>) {
    let mut until: Option<i64> = None;
    let matchers = breakpoints
        .into_iter()
        .filter(|b| !b.spent)
        .filter_map(|b| {
            let spec = b.spec?;
            if spec.enabled == Some(false) {
                return None;
            }
            let Some(Location::Probe(p)) = spec.location else {
                return None;
            };
            if let Some(expiry) = spec.expires_at.as_ref().map(us_from_timestamp) {
                until = Some(until.map_or(expiry, |u| u.min(expiry)));
            }
            Some(ArmedMatcher {
                breakpoint_id: b.id,
                point_kind: p.point_kind,
                name_glob: p.name_glob,
                condition: spec.condition,
                baggage: p.baggage,
            })
        })
        .collect();
    (matchers, until)
}

#[cfg(test)]
mod tests {
    use stepd_proto::v1::{BreakpointSpec, ProbeMatch, SourceLocation};

    use super::*;

    fn probe(id: &str, expires_s: Option<i64>) -> Breakpoint {
        Breakpoint {
            id: id.into(),
            spec: Some(BreakpointSpec {
                location: Some(Location::Probe(ProbeMatch {
                    name_glob: format!("{id}*"),
                    ..Default::default()
                })),
                expires_at: expires_s.map(|seconds| prost_types::Timestamp { seconds, nanos: 0 }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_probe_breakpoints_in_force_are_sent() {
        let spent = Breakpoint {
            spent: true,
            ..probe("spent", None)
        };
        let mut disabled = probe("disabled", None);
        disabled.spec.as_mut().unwrap().enabled = Some(false);
        let mut source = probe("source", None);
        source.spec.as_mut().unwrap().location = Some(Location::Source(SourceLocation::default()));
        let no_spec = Breakpoint {
            id: "bare".into(),
            ..Default::default()
        };
        let (matchers, until) = matchers_of(vec![
            probe("a", None),
            spent,
            disabled,
            source,
            no_spec,
            probe("b", Some(30)),
            probe("c", Some(20)),
        ]);
        let ids: Vec<_> = matchers.iter().map(|m| m.breakpoint_id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(matchers[0].name_glob, "a*");
        assert_eq!(until, Some(20_000_000), "the earliest expiry, in µs");
    }

    #[test]
    fn listed_again_after_a_change_or_the_first_expiry() {
        let mut arming = Arming::default();
        // (step, now in s) → stale
        assert!(arming.stale(0), "never listed");
        arming.listed(vec![probe("a", Some(20)), probe("b", None)]);
        let cases = [(0, false), (19, false), (20, true), (21, true)];
        for (now_s, stale) in cases {
            assert_eq!(arming.stale(now_s * 1_000_000), stale, "at {now_s} s");
        }
        arming.listed(vec![probe("b", None)]);
        assert!(!arming.stale(i64::MAX), "nothing expires");
        arming.changed();
        assert!(arming.stale(0), "a breakpoint changed");
    }

    #[test]
    fn the_mode_is_armed_with_the_listed_matchers() {
        let mut arming = Arming::default();
        assert!(arming.armed(&ModeState::default()).matchers.is_empty());
        arming.listed(vec![probe("a", None)]);
        let armed = arming.armed(&ModeState::default());
        assert_eq!(armed.matchers.len(), 1);
        assert_eq!(armed.mode(), stepd_proto::v1::ProbeMode::Breakpoints);
    }
}

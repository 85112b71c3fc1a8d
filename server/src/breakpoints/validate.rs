//! Validation of breakpoint specs. Every problem becomes a `BadRequest` field
//! violation, so a client learns everything wrong with a request at once.

use stepd_proto::v1::{BreakpointAction, BreakpointSpec, breakpoint_spec::Location};
use tonic_types::FieldViolation;

use super::{glob::Glob, hit_condition::HitCondition, selector::LabelSelector};
use crate::time::us_from_timestamp;

/// What to check beyond the spec's shape.
pub struct Checks {
    /// Reject an `expires_at` that is not in the future (skipped when an update leaves it alone).
    pub expiry_after_us: Option<i64>,
}

/// Returns every violation of `spec`, with field paths under `prefix` (e.g. "spec").
pub fn violations(spec: &BreakpointSpec, prefix: &str, checks: &Checks) -> Vec<FieldViolation> {
    let mut out = Vec::new();
    let mut bad = |field: &str, description: String| {
        out.push(FieldViolation::new(
            format!("{prefix}.{field}"),
            description,
        ));
    };
    match &spec.location {
        None => bad(
            "location",
            "one of source, function, exception or probe is required".into(),
        ),
        Some(Location::Source(src)) => {
            if src.path.trim().is_empty() {
                bad("source.path", "must not be empty".into());
            }
            if src.line < 1 {
                bad(
                    "source.line",
                    "must be at least 1 (lines are 1-based)".into(),
                );
            }
        }
        Some(Location::Function(f)) => {
            if f.name.trim().is_empty() {
                bad("function.name", "must not be empty".into());
            }
        }
        Some(Location::Exception(e)) => {
            if e.filter_ids.is_empty() {
                bad(
                    "exception.filter_ids",
                    "name at least one of the adapter's exception filters (GetSession lists them)"
                        .into(),
                );
            }
            if e.filter_ids.iter().any(|f| f.trim().is_empty()) {
                bad(
                    "exception.filter_ids",
                    "filter ids must not be empty".into(),
                );
            }
        }
        Some(Location::Probe(p)) => {
            if let Err(err) = Glob::parse(&p.name_glob) {
                bad("probe.name_glob", format!("malformed glob: {err}"));
            }
            // Probe conditions are stepd's own language, so they are checked
            // now; DAP conditions belong to the debuggee's language.
            if !spec.condition.trim().is_empty()
                && let Err(err) = super::condition::parse(&spec.condition)
            {
                bad("condition", format!("malformed probe condition: {err}"));
            }
        }
    }
    let action = BreakpointAction::try_from(spec.action);
    match action {
        Err(_) => bad(
            "action",
            format!("unknown BreakpointAction value {}", spec.action),
        ),
        Ok(BreakpointAction::Log) if spec.log_message.trim().is_empty() => bad(
            "log_message",
            "required when action is BREAKPOINT_ACTION_LOG".into(),
        ),
        Ok(BreakpointAction::Log) => {}
        Ok(_) if !spec.log_message.is_empty() => bad(
            "log_message",
            "only allowed when action is BREAKPOINT_ACTION_LOG".into(),
        ),
        Ok(_) => {}
    }
    if !spec.hit_condition.trim().is_empty()
        && let Err(err) = HitCondition::parse(&spec.hit_condition)
    {
        bad("hit_condition", err);
    }
    if let Err(err) = LabelSelector::parse(&spec.label_selector) {
        bad("label_selector", format!("malformed label selector: {err}"));
    }
    if let Some(expiry) = &spec.expires_at {
        if !(0..1_000_000_000).contains(&expiry.nanos) {
            bad("expires_at", "nanos out of range".into());
        } else if let Some(now) = checks.expiry_after_us
            && us_from_timestamp(expiry) <= now
        {
            bad("expires_at", "must be in the future".into());
        }
    }
    if let Some(limit) = &spec.hold_limit {
        if !matches!(spec.location, Some(Location::Probe(_))) {
            bad("hold_limit", "applies to probe breakpoints only".into());
        } else if limit.seconds < 0 || limit.nanos < 0 || (limit.seconds == 0 && limit.nanos == 0) {
            bad("hold_limit", "must be positive".into());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use prost_types::Timestamp;
    use stepd_proto::v1::{SourceLocation, breakpoint_spec::Location};

    use super::*;

    fn source(path: &str, line: u32) -> BreakpointSpec {
        BreakpointSpec {
            location: Some(Location::Source(SourceLocation {
                path: path.into(),
                line,
                column: 0,
            })),
            ..Default::default()
        }
    }

    fn fields(spec: &BreakpointSpec) -> Vec<String> {
        let checks = Checks {
            expiry_after_us: Some(1_000_000),
        };
        violations(spec, "spec", &checks)
            .into_iter()
            .map(|v| v.field)
            .collect()
    }

    #[test]
    fn a_good_spec_passes() {
        assert!(fields(&source("/a.py", 3)).is_empty());
    }

    #[test]
    fn reports_every_problem_at_once() {
        let mut spec = source("", 0);
        spec.action = 42;
        spec.label_selector = "a in (".into();
        spec.expires_at = Some(Timestamp {
            seconds: 0,
            nanos: 0,
        });
        assert_eq!(
            fields(&spec),
            [
                "spec.source.path",
                "spec.source.line",
                "spec.action",
                "spec.label_selector",
                "spec.expires_at"
            ]
        );
    }
}

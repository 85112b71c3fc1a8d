//! Validation of breakpoint specs. Every problem becomes a `BadRequest` field
//! violation, so a client learns everything wrong with a request at once.

use crate::error::FieldViolation;
use stepd_proto::v1::{BreakpointAction, BreakpointSpec, DataAccess, breakpoint_spec::Location};

use super::{hit_condition::HitCondition, log_message, selector::LabelSelector};
use crate::error::ParseError;
use crate::glob::Glob;
use crate::time::us_from_timestamp;

/// A parser's refusal as a field violation's description: what the field is,
/// and whether it is malformed or over a limit.
fn refusal(what: &str, err: &ParseError) -> String {
    match err {
        ParseError::Malformed(text) => format!("malformed {what}: {text}"),
        over => format!("{what} over its limit: {over} (see docs/errors.md)"),
    }
}

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
            "one of source, function, exception, data or probe is required".into(),
        ),
        Some(Location::Source(src)) => {
            if src.path.trim().is_empty() {
                bad("source.path", "must not be empty".into());
            } else if src.path.contains('\0') {
                // An adapter's C side would cut the path there.
                bad("source.path", "must not contain a NUL byte".into());
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
        Some(Location::Data(d)) => {
            if d.expression.trim().is_empty() {
                bad("data.expression", "must not be empty".into());
            } else if d.expression.contains('\0') {
                bad("data.expression", "must not contain a NUL byte".into());
            }
            if DataAccess::try_from(d.access).is_err() {
                bad(
                    "data.access",
                    format!("unknown DataAccess value {}", d.access),
                );
            }
        }
        Some(Location::Probe(p)) => {
            if let Err(err) = Glob::parse(&p.name_glob) {
                bad("probe.name_glob", refusal("glob", &err));
            }
            for (field, problem) in super::baggage::problems(&p.baggage) {
                bad(&field, problem);
            }
            // Probe conditions are stepd's own language, so they are checked
            // now; DAP conditions belong to the debuggee's language.
            if !spec.condition.trim().is_empty()
                && let Err(err) = super::condition::parse(&spec.condition)
            {
                bad("condition", refusal("probe condition", &err));
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
        Ok(BreakpointAction::Log) => {
            if let Err(err) = log_message::check(&spec.log_message) {
                bad("log_message", refusal("log message", &err));
            }
        }
        Ok(_) if !spec.log_message.is_empty() => bad(
            "log_message",
            "only allowed when action is BREAKPOINT_ACTION_LOG".into(),
        ),
        Ok(_) => {}
    }
    if !spec.hit_condition.trim().is_empty()
        && let Err(err) = HitCondition::parse(&spec.hit_condition)
    {
        bad("hit_condition", refusal("hit condition", &err));
    }
    if let Err(err) = LabelSelector::parse(&spec.label_selector) {
        bad("label_selector", refusal("label selector", &err));
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
    use crate::breakpoints::log_message::{
        MAX_LOG_BRACE_DEPTH, MAX_LOG_EXPRESSIONS, MAX_LOG_MESSAGE_BYTES,
    };

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
    fn a_nul_in_a_source_path_is_refused() {
        assert_eq!(fields(&source("/a.py\0.txt", 3)), ["spec.source.path"]);
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

    fn probe(condition: &str) -> BreakpointSpec {
        BreakpointSpec {
            location: Some(Location::Probe(stepd_proto::v1::ProbeMatch {
                name_glob: "*".into(),
                ..Default::default()
            })),
            condition: condition.into(),
            ..Default::default()
        }
    }

    #[test]
    fn every_parser_refuses_what_is_over_its_limits() {
        let deep = format!("{}name{}", "(".repeat(2000), ")".repeat(2000));
        assert_eq!(fields(&probe(&deep)), ["spec.condition"]);
        assert_eq!(fields(&probe(&"!".repeat(10_000))), ["spec.condition"]);
        let mut spec = probe("");
        if let Some(Location::Probe(p)) = &mut spec.location {
            p.name_glob = "*".repeat(5000);
        }
        spec.hit_condition = format!("{}1", " ".repeat(500));
        spec.label_selector = "a,".repeat(3000);
        spec.action = BreakpointAction::Log as i32;
        spec.log_message = "{x}".repeat(40);
        assert_eq!(
            fields(&spec),
            [
                "spec.probe.name_glob",
                "spec.log_message",
                "spec.hit_condition",
                "spec.label_selector"
            ]
        );
    }

    #[test]
    fn log_messages_are_bounded() {
        assert_eq!(
            log_message::check(&"{x} ".repeat(MAX_LOG_EXPRESSIONS)),
            Ok(())
        );
        assert!(matches!(
            log_message::check(&"{x}".repeat(MAX_LOG_EXPRESSIONS + 1)),
            Err(ParseError::TooMany { .. })
        ));
        // Literal braces are not expressions, and an unclosed one is text.
        assert_eq!(log_message::check(&"{{}}".repeat(500)), Ok(()));
        assert_eq!(log_message::check("open {x"), Ok(()));
        let deep = format!("{{x{}", "{".repeat(MAX_LOG_BRACE_DEPTH));
        assert!(matches!(
            log_message::check(&deep),
            Err(ParseError::TooDeep { .. })
        ));
        assert!(matches!(
            log_message::check(&"x".repeat(MAX_LOG_MESSAGE_BYTES + 1)),
            Err(ParseError::TooLong { .. })
        ));
    }

    mod fuzz {
        use proptest::prelude::*;

        use super::*;

        /// Text that is sometimes huge or deeply nested.
        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<String>(),
                (
                    prop::sample::select(vec!["(", "!", "{", "{x ", "*", "a,", " "]),
                    0usize..6000
                )
                    .prop_map(|(s, n)| s.repeat(n)),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: 128,
                failure_persistence: None,
                ..ProptestConfig::default()
            })]

            /// Whatever the fields hold, validation answers with violations
            /// (each naming its field), never a panic or an overflow.
            #[test]
            fn any_spec_is_validated(
                condition in text(),
                glob in text(),
                hit in text(),
                selector in text(),
                message in text(),
            ) {
                let spec = BreakpointSpec {
                    location: Some(Location::Probe(stepd_proto::v1::ProbeMatch {
                        name_glob: glob,
                        ..Default::default()
                    })),
                    condition,
                    hit_condition: hit,
                    label_selector: selector,
                    action: BreakpointAction::Log as i32,
                    log_message: message,
                    ..Default::default()
                };
                for field in fields(&spec) {
                    prop_assert!(field.starts_with("spec."));
                }
            }
        }
    }
}

//! Breakpoints for people: where each applies, and the `break list` table.

use stepd_proto::v1::{Breakpoint, BreakpointAction, DataAccess, breakpoint_spec::Location};

use crate::render;

/// Where a breakpoint applies, in one short string.
pub fn describe_location(bp: &Breakpoint) -> String {
    match bp.spec.as_ref().and_then(|s| s.location.as_ref()) {
        Some(Location::Source(s)) if s.column > 0 => format!("{}:{}:{}", s.path, s.line, s.column),
        Some(Location::Source(s)) => format!("{}:{}", s.path, s.line),
        Some(Location::Function(f)) => format!("function {}", f.name),
        Some(Location::Exception(e)) => format!("exception {}", e.filter_ids.join(",")),
        Some(Location::Data(d)) => {
            let access = match DataAccess::try_from(d.access) {
                Ok(DataAccess::Read) => " (read)",
                Ok(DataAccess::ReadWrite) => " (read or write)",
                _ => "",
            };
            format!("watch {}{access}", d.expression)
        }
        Some(Location::Probe(p)) => {
            let mut text = format!(
                "probe {} {}",
                if p.point_kind.is_empty() {
                    "*"
                } else {
                    &p.point_kind
                },
                if p.name_glob.is_empty() {
                    "*"
                } else {
                    &p.name_glob
                }
            );
            for entry in &p.baggage {
                text.push_str(&format!(" baggage {}={}", entry.key, entry.value));
            }
            text
        }
        None => "-".into(),
    }
}

fn row(bp: &Breakpoint) -> Vec<String> {
    let spec = bp.spec.clone().unwrap_or_default();
    let action = BreakpointAction::try_from(spec.action)
        .map(|a| render::enum_name(a.as_str_name(), "BREAKPOINT_ACTION_"))
        .unwrap_or_default();
    let action = match action.as_str() {
        "unspecified" => "stop".to_owned(),
        "log" => format!("log {:?}", spec.log_message),
        _ => action,
    };
    let mut when = Vec::new();
    if !spec.condition.is_empty() {
        when.push(format!("if {}", spec.condition));
    }
    if !spec.hit_condition.is_empty() {
        when.push(format!("hits {}", spec.hit_condition));
    }
    if !spec.label_selector.is_empty() {
        when.push(format!("labels {}", spec.label_selector));
    }
    vec![
        bp.id.clone(),
        if spec.enabled.unwrap_or(true) {
            "yes"
        } else {
            "no"
        }
        .into(),
        describe_location(bp),
        action,
        if when.is_empty() {
            "-".into()
        } else {
            when.join("; ")
        },
        format!("{}{}", bp.hit_count, if bp.spent { " (spent)" } else { "" }),
    ]
}

/// Breakpoints as a table.
pub fn table_text(breakpoints: &[Breakpoint]) -> String {
    let rows: Vec<_> = breakpoints.iter().map(row).collect();
    render::table(&["ID", "ENABLED", "WHERE", "ACTION", "WHEN", "HITS"], &rows)
}

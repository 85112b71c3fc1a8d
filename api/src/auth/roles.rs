//! The role table: what each gRPC method needs, keyed by its path, and the
//! few rules that depend on a request's fields. `docs/security.md` shows the
//! same table; a test checks the two agree and that every method stepd
//! serves has an entry.

use std::{collections::HashMap, sync::LazyLock};

use stepd_proto::v1::{ErrorReason, InspectRequest, inspect_source::Source};

use super::Identity;
use stepd_core::error::ApiError;

pub use stepd_core::identity::{Need, Role};

use Need::{Admin, Controller, Open, Probe, Viewer};

/// Every method stepd serves and what it needs. A method missing here needs
/// admin (see [`need`]), so a method added later fails closed until it is
/// given a row.
pub const TABLE: &[(&str, Need)] = &[
    ("grpc.health.v1.Health/Check", Open),
    ("grpc.health.v1.Health/Watch", Open),
    (
        "grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        Viewer,
    ),
    (
        "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        Viewer,
    ),
    ("stepd.v1.DaemonService/Ping", Viewer),
    ("stepd.v1.DaemonService/GetStatus", Viewer),
    ("stepd.v1.DaemonService/GetVersion", Viewer),
    ("stepd.v1.DaemonService/Doctor", Viewer),
    ("stepd.v1.DaemonService/Shutdown", Admin),
    ("stepd.v1.SessionService/Launch", Admin),
    ("stepd.v1.SessionService/Attach", Admin),
    ("stepd.v1.SessionService/Disconnect", Controller),
    ("stepd.v1.SessionService/ListSessions", Viewer),
    ("stepd.v1.SessionService/GetSession", Viewer),
    ("stepd.v1.SessionService/Continue", Controller),
    ("stepd.v1.SessionService/Step", Controller),
    ("stepd.v1.SessionService/Pause", Controller),
    ("stepd.v1.SessionService/ListThreads", Viewer),
    ("stepd.v1.SessionService/GetStackTrace", Viewer),
    ("stepd.v1.SessionService/ListScopes", Viewer),
    ("stepd.v1.SessionService/ListVariables", Viewer),
    ("stepd.v1.SessionService/SetVariable", Controller),
    ("stepd.v1.SessionService/Evaluate", Controller),
    ("stepd.v1.SessionService/ReadOutput", Viewer),
    ("stepd.v1.SessionService/SendDebugInput", Controller),
    ("stepd.v1.SessionService/ListPauses", Viewer),
    ("stepd.v1.BreakpointService/ListBreakpoints", Viewer),
    ("stepd.v1.BreakpointService/AddBreakpoint", Controller),
    ("stepd.v1.BreakpointService/RemoveBreakpoint", Controller),
    ("stepd.v1.BreakpointService/UpdateBreakpoint", Controller),
    ("stepd.v1.EventService/Subscribe", Viewer),
    ("stepd.v1.HistoryService/GetSessionHistory", Viewer),
    ("stepd.v1.HistoryService/ListEndedSessions", Viewer),
    ("stepd.v1.InspectorService/Inspect", Viewer),
    ("stepd.v1.InspectorService/Push", Viewer),
    ("stepd.v1.InspectorService/Pop", Viewer),
    ("stepd.v1.InspectorService/NextSibling", Viewer),
    ("stepd.v1.InspectorService/PreviousSibling", Viewer),
    ("stepd.v1.InspectorService/NextPage", Viewer),
    ("stepd.v1.InspectorService/PreviousPage", Viewer),
    ("stepd.v1.InspectorService/Refresh", Viewer),
    ("stepd.v1.InspectorService/ToggleViewMode", Viewer),
    ("stepd.v1.InspectorService/TogglePrettyPrint", Viewer),
    ("stepd.v1.InspectorService/ShowAnalytics", Viewer),
    ("stepd.v1.InspectorService/PinValue", Controller),
    ("stepd.v1.InspectorService/PrintValue", Viewer),
    ("stepd.v1.InspectorService/TapValue", Viewer),
    ("stepd.v1.InspectorService/TapIndexed", Viewer),
    ("stepd.v1.InspectorService/Clear", Viewer),
    ("stepd.v1.ProbeService/Connect", Probe),
];

static BY_PATH: LazyLock<HashMap<&'static str, Need>> =
    LazyLock::new(|| TABLE.iter().copied().collect());

/// What the method at HTTP path `path` (`/package.Service/Method`) needs;
/// admin for a path not in the table.
pub fn need(path: &str) -> Need {
    path.strip_prefix('/')
        .and_then(|p| BY_PATH.get(p).copied())
        .unwrap_or(Admin)
}

// Field-level rules: a request whose fields ask for more than its method.

/// Answering a pause, also as a `DebugInput` on a `Subscribe` stream
/// (a viewer may watch but not answer).
pub fn answer_pause(who: &Identity) -> Result<(), ApiError> {
    require(who, Controller, "answering a pause")
}

/// `Launch` or `Attach` with an `adapter_command` runs a program of the
/// caller's choosing as the adapter: admin, whatever the method needs.
pub fn adapter_command(who: &Identity, adapter_command: &[String]) -> Result<(), ApiError> {
    if adapter_command.is_empty() {
        return Ok(());
    }
    require(who, Admin, "a custom adapter_command")
}

/// `Inspect` of an expression evaluates code in the debuggee: controller,
/// as `Evaluate`.
pub fn inspect(who: &Identity, request: &InspectRequest) -> Result<(), ApiError> {
    match request.source.as_ref().and_then(|s| s.source.as_ref()) {
        Some(Source::Expression(_)) => require(who, Controller, "inspecting an expression"),
        _ => Ok(()),
    }
}

/// Acting for another caller (`x-stepd-on-behalf-of`) or relaying only a
/// replica's own sessions (`x-stepd-relay`) is what peer replicas do:
/// admin, which may already run any code as the daemon's user.
pub fn peer_replica(who: &Identity, what: &str) -> Result<(), ApiError> {
    require(who, Admin, what)
}

fn require(who: &Identity, need: Need, what: &str) -> Result<(), ApiError> {
    if who.role.may(need) {
        return Ok(());
    }
    Err(denied(who, need, what))
}

/// The PERMISSION_DENIED error for `who` wanting `what`, which needs `need`.
pub fn denied(who: &Identity, need: Need, what: &str) -> ApiError {
    ApiError::new(
        ErrorReason::PermissionDenied,
        format!(
            "{what} needs role {need}; {who} has role {role} (see docs/security.md)",
            need = need.as_str(),
            who = who.name,
            role = who.role,
        ),
    )
    .with("needs", need.as_str())
    .with("role", who.role.as_str())
    .with("identity", stepd_core::error::clip(&who.name))
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    /// Every method of every service stepd serves, from the descriptors.
    fn served_methods() -> Vec<String> {
        let mut methods = Vec::new();
        for set in [
            stepd_proto::FILE_DESCRIPTOR_SET,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
        ] {
            let set = prost_types::FileDescriptorSet::decode(set).unwrap();
            for file in set.file {
                for service in &file.service {
                    for method in &service.method {
                        methods.push(format!(
                            "{}.{}/{}",
                            file.package(),
                            service.name(),
                            method.name()
                        ));
                    }
                }
            }
        }
        methods
    }

    #[test]
    fn every_served_method_has_an_explicit_entry() {
        let methods = served_methods();
        assert!(methods.len() > 40, "{methods:?}");
        let missing: Vec<_> = methods
            .iter()
            .filter(|m| !BY_PATH.contains_key(m.as_str()))
            .collect();
        assert!(missing.is_empty(), "methods without a role: {missing:?}");
        let stale: Vec<_> = TABLE
            .iter()
            .filter(|(m, _)| !methods.iter().any(|s| s == m))
            .collect();
        assert!(stale.is_empty(), "rows of no served method: {stale:?}");
        assert_eq!(BY_PATH.len(), TABLE.len(), "a method listed twice");
    }

    #[test]
    fn an_unknown_method_needs_admin() {
        assert_eq!(need("/stepd.v1.SessionService/SomethingNew"), Admin);
        assert_eq!(
            need("stepd.v1.DaemonService/Ping"),
            Admin,
            "no leading slash"
        );
        assert_eq!(need("/stepd.v1.DaemonService/Ping"), Viewer);
    }

    #[test]
    fn the_docs_show_the_same_table() {
        let docs = include_str!("../../../docs/security.md");
        let mut documented = HashMap::new();
        for line in docs.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if cells.len() >= 4
                && let Some(method) = cells[1].strip_prefix('`').and_then(|c| c.strip_suffix('`'))
                && method.contains('/')
            {
                documented.insert(method.to_owned(), cells[2].trim_matches('`').to_owned());
            }
        }
        for (method, need) in TABLE {
            assert_eq!(
                documented.get(*method).map(String::as_str),
                Some(need.as_str()),
                "docs/security.md on {method}"
            );
        }
        assert_eq!(documented.len(), TABLE.len(), "docs list other methods");
    }

    #[test]
    fn field_rules_ask_more_than_their_method() {
        use stepd_proto::v1::{FrameExpression, InspectSource};
        let who = |role| Identity {
            name: format!("token:{role}"),
            role,
            how: super::super::How::Token,
        };
        let (viewer, controller, admin) =
            (who(Role::Viewer), who(Role::Controller), who(Role::Admin));
        let custom = vec!["my-adapter".to_owned()];
        let err = adapter_command(&controller, &custom).unwrap_err();
        assert_eq!(err.reason(), ErrorReason::PermissionDenied);
        assert!(
            err.message().contains("adapter_command"),
            "{}",
            err.message()
        );
        assert!(adapter_command(&admin, &custom).is_ok());
        assert!(adapter_command(&controller, &[]).is_ok());
        let expression = InspectRequest {
            source: Some(InspectSource {
                source: Some(Source::Expression(FrameExpression::default())),
            }),
            ..Default::default()
        };
        assert!(inspect(&viewer, &expression).is_err());
        assert!(inspect(&controller, &expression).is_ok());
        assert!(inspect(&viewer, &InspectRequest::default()).is_ok());
        assert!(answer_pause(&viewer).is_err());
        assert!(answer_pause(&controller).is_ok());
        assert!(answer_pause(&who(Role::Probe)).is_err());
    }

    #[test]
    fn roles_nest_and_probe_stands_apart() {
        use Role as R;
        let may = |r: R| {
            [Open, Viewer, Controller, Admin, Probe]
                .into_iter()
                .filter(|n| r.may(*n))
                .collect::<Vec<_>>()
        };
        assert_eq!(may(R::Viewer), [Open, Viewer]);
        assert_eq!(may(R::Controller), [Open, Viewer, Controller]);
        assert_eq!(may(R::Admin), [Open, Viewer, Controller, Admin, Probe]);
        assert_eq!(may(R::Probe), [Open, Probe]);
    }
}

//! BreakpointService: CRUD, persistence across restarts, validation.

use prost_types::{FieldMask, Timestamp};
use stepd_e2e::{Daemon, reason, source_spec, violated_fields};
use stepd_proto::v1::{
    AddBreakpointRequest, BreakpointAction, BreakpointSpec, ExceptionFilters,
    ListBreakpointsRequest, ProbeMatch, RemoveBreakpointRequest, UpdateBreakpointRequest,
    breakpoint_service_client::BreakpointServiceClient, breakpoint_spec::Location,
};
use tonic::{Code, transport::Channel};

async fn add(client: &mut BreakpointServiceClient<Channel>, spec: BreakpointSpec) -> String {
    client
        .add_breakpoint(AddBreakpointRequest { spec: Some(spec) })
        .await
        .unwrap()
        .into_inner()
        .breakpoint
        .unwrap()
        .id
}

async fn ids(client: &mut BreakpointServiceClient<Channel>) -> Vec<String> {
    client
        .list_breakpoints(ListBreakpointsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .breakpoints
        .into_iter()
        .map(|b| b.id)
        .collect()
}

#[tokio::test]
async fn create_list_update_remove() {
    let daemon = Daemon::start(&[]).await;
    let mut client = BreakpointServiceClient::new(daemon.channel().await);
    let mut spec = source_spec("/src/app.py", 12);
    spec.condition = "x > 3".into();
    spec.label_selector = "env=dev".into();
    let a = add(&mut client, spec).await;
    let b = add(&mut client, source_spec("/src/app.py", 20)).await;
    assert_eq!(ids(&mut client).await, [a.clone(), b.clone()]);

    let listed = client
        .list_breakpoints(ListBreakpointsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .breakpoints;
    let first = listed[0].spec.clone().unwrap();
    assert_eq!(first.enabled, Some(true), "enabled unless said otherwise");
    assert_eq!(first.condition, "x > 3");

    // Label filtering in List.
    let for_prod = client
        .list_breakpoints(ListBreakpointsRequest {
            for_labels: [("env".to_string(), "prod".to_string())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .breakpoints;
    assert_eq!(for_prod.iter().map(|b| &b.id).collect::<Vec<_>>(), [&b]);

    // Disable through an update mask: only `enabled` changes.
    let updated = client
        .update_breakpoint(UpdateBreakpointRequest {
            id: a.clone(),
            spec: Some(BreakpointSpec {
                enabled: Some(false),
                condition: "ignored".into(),
                ..Default::default()
            }),
            update_mask: Some(FieldMask {
                paths: vec!["enabled".into()],
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .breakpoint
        .unwrap();
    let spec = updated.spec.unwrap();
    assert_eq!(spec.enabled, Some(false));
    assert_eq!(spec.condition, "x > 3", "fields outside the mask are kept");
    let (created, changed) = (updated.created_at.unwrap(), updated.updated_at.unwrap());
    assert!((changed.seconds, changed.nanos) > (created.seconds, created.nanos));

    let removed = client
        .remove_breakpoint(RemoveBreakpointRequest { id: a.clone() })
        .await
        .unwrap()
        .into_inner()
        .breakpoint
        .unwrap();
    assert_eq!(removed.id, a);
    assert_eq!(ids(&mut client).await, [b]);

    let err = client
        .remove_breakpoint(RemoveBreakpointRequest { id: a.clone() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(reason(&err), "BREAKPOINT_NOT_FOUND");
    daemon.stop().await;
}

#[tokio::test]
async fn breakpoints_survive_a_restart_with_the_same_ids() {
    let mut daemon = Daemon::start(&[]).await;
    let mut client = BreakpointServiceClient::new(daemon.channel().await);
    let a = add(&mut client, source_spec("/a.c", 3)).await;
    let b = add(&mut client, source_spec("/a.c", 4)).await;
    client
        .remove_breakpoint(RemoveBreakpointRequest { id: b.clone() })
        .await
        .unwrap();
    let dir = daemon.owned_dir.take();
    let data_dir = daemon.data_dir.clone();
    daemon.stop().await;

    let again = Daemon::start_in(&data_dir, &[]).await;
    let mut client = BreakpointServiceClient::new(again.channel().await);
    assert_eq!(ids(&mut client).await, std::slice::from_ref(&a));
    let c = add(&mut client, source_spec("/a.c", 5)).await;
    assert_ne!(c, b, "a removed id is never reused");
    assert_eq!(ids(&mut client).await, [a, c]);
    again.stop().await;
    drop(dir);
}

#[tokio::test]
async fn each_kind_of_invalid_input_is_rejected_with_its_field() {
    let daemon = Daemon::start(&[]).await;
    let mut client = BreakpointServiceClient::new(daemon.channel().await);
    let probe = |glob: &str| BreakpointSpec {
        location: Some(Location::Probe(ProbeMatch {
            point_kind: "tool_call".into(),
            name_glob: glob.into(),
            ..Default::default()
        })),
        ..Default::default()
    };
    let cases: Vec<(&str, BreakpointSpec, &str)> = vec![
        ("no location", BreakpointSpec::default(), "spec.location"),
        ("empty path", source_spec("", 3), "spec.source.path"),
        ("line 0", source_spec("/a.py", 0), "spec.source.line"),
        (
            "unknown action",
            BreakpointSpec {
                action: 99,
                ..source_spec("/a.py", 1)
            },
            "spec.action",
        ),
        ("malformed glob", probe("web_[abc"), "spec.probe.name_glob"),
        (
            "malformed selector",
            BreakpointSpec {
                label_selector: "agent in (main".into(),
                ..source_spec("/a.py", 1)
            },
            "spec.label_selector",
        ),
        (
            "expiry in the past",
            BreakpointSpec {
                expires_at: Some(Timestamp {
                    seconds: 1_000_000,
                    nanos: 0,
                }),
                ..source_spec("/a.py", 1)
            },
            "spec.expires_at",
        ),
        (
            "bad hit condition",
            BreakpointSpec {
                hit_condition: "sometimes".into(),
                ..source_spec("/a.py", 1)
            },
            "spec.hit_condition",
        ),
        (
            "log without a message",
            BreakpointSpec {
                action: BreakpointAction::Log as i32,
                ..source_spec("/a.py", 1)
            },
            "spec.log_message",
        ),
        (
            "no exception filter",
            BreakpointSpec {
                location: Some(Location::Exception(ExceptionFilters { filter_ids: vec![] })),
                ..Default::default()
            },
            "spec.exception.filter_ids",
        ),
    ];
    for (what, spec, field) in cases {
        let err = client
            .add_breakpoint(AddBreakpointRequest { spec: Some(spec) })
            .await
            .expect_err(what);
        assert_eq!(err.code(), Code::InvalidArgument, "{what}");
        assert_eq!(reason(&err), "INVALID_ARGUMENT", "{what}");
        assert_eq!(violated_fields(&err), [field], "{what}");
    }
    assert!(ids(&mut client).await.is_empty(), "nothing was stored");

    let id = add(&mut client, source_spec("/a.py", 1)).await;
    let err = client
        .update_breakpoint(UpdateBreakpointRequest {
            id: id.clone(),
            spec: Some(BreakpointSpec::default()),
            update_mask: Some(FieldMask {
                paths: vec!["no_such_field".into()],
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&err), ["update_mask"]);
    let err = client
        .update_breakpoint(UpdateBreakpointRequest {
            id,
            spec: Some(source_spec("/a.py", 0)),
            update_mask: Some(FieldMask {
                paths: vec!["source".into()],
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&err), ["spec.source.line"]);
    let err = client
        .remove_breakpoint(RemoveBreakpointRequest { id: "bp-x".into() })
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&err), ["id"]);
    daemon.stop().await;
}

#[tokio::test]
async fn oversized_messages_are_refused_with_limit_exceeded() {
    let daemon = Daemon::start(&["--max-message-bytes", "4096"]).await;
    let mut client = BreakpointServiceClient::new(daemon.channel().await);
    let mut spec = source_spec("/a.py", 1);
    spec.condition = "x".repeat(10_000);
    let err = client
        .add_breakpoint(AddBreakpointRequest { spec: Some(spec) })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert_eq!(reason(&err), "LIMIT_EXCEEDED");
    assert!(ids(&mut client).await.is_empty());
    daemon.stop().await;
}

/// The inputs that overflowed the recursive condition parser's stack and
/// aborted the daemon (4 KB of parentheses, 10 KB of `!`), and each other
/// parser's input over its limit, are refused with the field named, and the
/// daemon goes on serving: too deep is INVALID_ARGUMENT, too long is
/// LIMIT_EXCEEDED (checked before parsing).
#[tokio::test]
async fn pathological_parser_inputs_are_refused_and_the_daemon_lives() {
    let mut daemon = Daemon::start(&[]).await;
    let mut client = BreakpointServiceClient::new(daemon.channel().await);
    let probe = |condition: String| BreakpointSpec {
        location: Some(Location::Probe(ProbeMatch {
            point_kind: "tool_call".into(),
            name_glob: "*".into(),
            ..Default::default()
        })),
        condition,
        ..Default::default()
    };
    let parens = format!("{}name{}", "(".repeat(2000), ")".repeat(2000));
    assert_eq!(parens.len(), 4004);
    const DEEP: &str = "INVALID_ARGUMENT";
    const LONG: &str = "LIMIT_EXCEEDED";
    let cases: Vec<(&str, BreakpointSpec, &str, &str)> = vec![
        (
            "2,000 parentheses",
            probe(parens.clone()),
            "spec.condition",
            DEEP,
        ),
        (
            "10,000 '!'",
            probe(format!("{}name", "!".repeat(10_000))),
            "spec.condition",
            LONG,
        ),
        (
            "4,000 '!'",
            probe(format!("{}name", "!".repeat(4_000))),
            "spec.condition",
            DEEP,
        ),
        (
            "a 4 KB glob",
            BreakpointSpec {
                location: Some(Location::Probe(ProbeMatch {
                    point_kind: String::new(),
                    name_glob: "*".repeat(4096),
                    ..Default::default()
                })),
                ..Default::default()
            },
            "spec.probe.name_glob",
            LONG,
        ),
        (
            "a 4 KB hit condition",
            BreakpointSpec {
                hit_condition: format!("{}1", "(".repeat(4096)),
                ..source_spec("/a.py", 1)
            },
            "spec.hit_condition",
            LONG,
        ),
        (
            "a 10 KB label selector",
            BreakpointSpec {
                label_selector: "a,".repeat(5000),
                ..source_spec("/a.py", 1)
            },
            "spec.label_selector",
            LONG,
        ),
        (
            "a log message nesting 2,000 braces in one expression",
            BreakpointSpec {
                action: BreakpointAction::Log as i32,
                log_message: format!("{{x {}", "{ ".repeat(2000)),
                ..source_spec("/a.py", 1)
            },
            "spec.log_message",
            DEEP,
        ),
    ];
    for (what, spec, field, why) in cases {
        let err = client
            .add_breakpoint(AddBreakpointRequest { spec: Some(spec) })
            .await
            .expect_err(what);
        let code = if why == DEEP {
            Code::InvalidArgument
        } else {
            Code::ResourceExhausted
        };
        assert_eq!(err.code(), code, "{what}");
        assert_eq!(reason(&err), why, "{what}");
        assert_eq!(violated_fields(&err), [field], "{what}");
        assert!(err.message().len() < 1024, "{what}: {}", err.message());
    }
    // An update takes the same checks.
    let id = add(&mut client, probe("name == 'Bash'".into())).await;
    let err = client
        .update_breakpoint(UpdateBreakpointRequest {
            id,
            spec: Some(probe(parens)),
            update_mask: Some(FieldMask {
                paths: vec!["condition".into()],
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&err), ["spec.condition"]);

    assert_eq!(ids(&mut client).await.len(), 1, "the daemon still serves");
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "the daemon is still running"
    );
    daemon.stop().await;
}

/// A client-supplied id is quoted as a bounded prefix, in the message and in
/// the metadata: a 100 KB id once made the status too large for grpcio
/// clients, which then saw RESOURCE_EXHAUSTED instead of the reason.
#[tokio::test]
async fn long_ids_are_quoted_not_echoed() {
    use stepd_proto::v1::{
        DebugCommand, DebugInput, GetSessionRequest, NextCommand, SendDebugInputRequest,
        debug_command::Command, session_service_client::SessionServiceClient,
    };
    use tonic_types::StatusExt;

    let daemon = Daemon::start(&[]).await;
    let channel = daemon.channel().await;
    let mut sessions = SessionServiceClient::new(channel.clone());
    let mut breakpoints = BreakpointServiceClient::new(channel);
    let long = "x".repeat(100_000);
    let errors = [
        (
            "GetSession",
            sessions
                .get_session(GetSessionRequest {
                    session_id: long.clone(),
                })
                .await
                .unwrap_err(),
            "SESSION_NOT_FOUND",
        ),
        (
            "SendDebugInput",
            sessions
                .send_debug_input(SendDebugInputRequest {
                    input: Some(DebugInput {
                        key: long.clone(),
                        command: Some(DebugCommand {
                            command: Some(Command::Next(NextCommand {})),
                        }),
                        client_name: String::new(),
                    }),
                })
                .await
                .unwrap_err(),
            "PAUSE_NOT_FOUND",
        ),
        (
            "RemoveBreakpoint, not an id",
            breakpoints
                .remove_breakpoint(RemoveBreakpointRequest { id: long.clone() })
                .await
                .unwrap_err(),
            "INVALID_ARGUMENT",
        ),
        (
            "RemoveBreakpoint, no such breakpoint",
            breakpoints
                .remove_breakpoint(RemoveBreakpointRequest {
                    id: format!("bp-{}424242", "0".repeat(100_000)),
                })
                .await
                .unwrap_err(),
            "BREAKPOINT_NOT_FOUND",
        ),
    ];
    for (what, err, want) in errors {
        assert_eq!(reason(&err), want, "{what}");
        assert!(err.message().len() < 300, "{what}: {}", err.message());
        let info = err.get_details_error_info().expect("ErrorInfo");
        for (key, value) in &info.metadata {
            assert!(
                value.len() <= 100,
                "{what}: metadata {key} is {} bytes",
                value.len()
            );
        }
        if let Some(bad) = err.get_details_bad_request() {
            for v in bad.field_violations {
                assert!(v.description.len() < 300, "{what}: {}", v.description);
            }
        }
    }
    daemon.stop().await;
}

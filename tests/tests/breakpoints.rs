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

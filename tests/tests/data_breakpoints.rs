//! Data breakpoints (watched values) on the real adapters: dlv stops where
//! a watched variable is written; debugpy has none, so the breakpoint is
//! unbound there and says so.

use stepd_e2e::{dap, fixture, line_of, source_spec, watched};
use stepd_proto::v1::{
    AddBreakpointRequest, BreakpointSpec, BreakpointStatus, DataLocation, EndReason, LaunchRequest,
    PauseReason, RemoveBreakpointRequest, breakpoint_service_client::BreakpointServiceClient,
    breakpoint_spec::Location, debug_command::Command, event::Payload,
};

/// The placement status the session publishes for breakpoint `id`.
async fn status_of(sub: &mut stepd_e2e::Subscription, id: &str) -> BreakpointStatus {
    let event = sub
        .wait_for("the data breakpoint's placement", |e| {
            matches!(&e.payload, Some(Payload::BreakpointUpdated(u))
                if u.status.as_ref().is_some_and(|s| s.breakpoint_id == id))
        })
        .await;
    match event.payload {
        Some(Payload::BreakpointUpdated(u)) => u.status.unwrap(),
        _ => unreachable!(),
    }
}

fn watch(expression: &str) -> BreakpointSpec {
    BreakpointSpec {
        location: Some(Location::Data(DataLocation {
            expression: expression.into(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

#[tokio::test]
async fn dlv_stops_where_a_watched_variable_is_written() {
    let (daemon, mut sub) = watched().await;
    let source = fixture("go/hello/main.go");
    let call = dap::add_breakpoint(
        &daemon,
        source_spec(source.to_str().unwrap(), line_of(&source, "call")),
    )
    .await;
    let session = dap::launch_with(
        &daemon,
        LaunchRequest {
            adapter: "dlv".into(),
            program: fixture("build/go-hello").to_str().unwrap().into(),
            ..Default::default()
        },
    )
    .await
    .session
    .unwrap();
    let first = dap::next_pause(&mut sub, &session.id).await;
    let mut breakpoints = BreakpointServiceClient::new(daemon.channel().await);
    // Added at a stop: placed at once, in main's frame.
    let added = breakpoints
        .add_breakpoint(AddBreakpointRequest {
            spec: Some(watch("total")),
        })
        .await
        .unwrap()
        .into_inner();
    let bp = added.breakpoint.unwrap().id;
    let status = status_of(&mut sub, &bp).await;
    assert!(status.verified, "{status:?}");
    breakpoints
        .remove_breakpoint(RemoveBreakpointRequest { id: call })
        .await
        .unwrap();
    dap::answer(&daemon, &first.key, Command::Resume(Default::default()))
        .await
        .unwrap();
    // total = step(0, 0) writes total.
    let written = dap::next_pause(&mut sub, &session.id).await;
    assert_eq!(
        written.reason,
        PauseReason::DataBreakpoint as i32,
        "{written:?}"
    );
    assert_eq!(written.location.as_ref().unwrap().function, "main");
    dap::answer(&daemon, &written.key, Command::Resume(Default::default()))
        .await
        .unwrap();
    let again = dap::next_pause(&mut sub, &session.id).await;
    assert_eq!(again.reason, PauseReason::DataBreakpoint as i32);
    assert_eq!(dap::local(&again, "total"), "2", "{again:?}");
    breakpoints
        .remove_breakpoint(RemoveBreakpointRequest { id: bp })
        .await
        .unwrap();
    dap::answer(&daemon, &again.key, Command::Resume(Default::default()))
        .await
        .unwrap();
    let ended = dap::ended(&mut sub, &session.id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.reason, EndReason::Exited as i32);
    daemon.stop().await;
}

#[tokio::test]
async fn debugpy_has_no_data_breakpoints_and_says_so() {
    let (daemon, mut sub) = watched().await;
    let path = fixture("python/loop.py");
    let file = path.to_str().unwrap();
    dap::add_breakpoint(&daemon, source_spec(file, line_of(&path, "step"))).await;
    let session = dap::launch(&daemon, "debugpy", file, &[])
        .await
        .session
        .unwrap();
    dap::next_pause(&mut sub, &session.id).await;
    let added = BreakpointServiceClient::new(daemon.channel().await)
        .add_breakpoint(AddBreakpointRequest {
            spec: Some(watch("total")),
        })
        .await
        .unwrap()
        .into_inner();
    let status = status_of(&mut sub, &added.breakpoint.unwrap().id).await;
    assert!(!status.verified, "{status:?}");
    assert!(
        status.message.contains("debugpy has no data breakpoints"),
        "{status:?}"
    );
    daemon.stop().await;
}

#[tokio::test]
async fn a_watch_added_before_the_program_stops_is_placed_at_its_first_stop() {
    let (daemon, mut sub) = watched().await;
    let source = fixture("go/hello/main.go");
    dap::add_breakpoint(
        &daemon,
        source_spec(source.to_str().unwrap(), line_of(&source, "call")),
    )
    .await;
    let bp = dap::add_breakpoint(&daemon, watch("total")).await;
    let session = dap::launch_with(
        &daemon,
        LaunchRequest {
            adapter: "dlv".into(),
            program: fixture("build/go-hello").to_str().unwrap().into(),
            ..Default::default()
        },
    )
    .await;
    let waiting = session
        .breakpoints
        .iter()
        .find(|p| p.breakpoint_id == bp)
        .and_then(|p| p.status.clone())
        .unwrap_or_default();
    assert!(!waiting.verified, "{waiting:?}");
    assert!(
        waiting
            .message
            .contains("placed at the session's next stop"),
        "{waiting:?}"
    );
    let session = session.session.unwrap();
    dap::next_pause(&mut sub, &session.id).await;
    let placed = status_of(&mut sub, &bp).await;
    assert!(placed.verified, "{placed:?}");
    daemon.stop().await;
}

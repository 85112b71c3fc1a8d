//! Function breakpoints keep every field they are given, under each real
//! adapter: a condition, a hit condition and a LOG action decide the stop
//! as they do for a line, and the stop names the breakpoint.

use stepd_e2e::{Daemon, Subscription, dap, fixture, watched};
use stepd_proto::v1::{
    BreakpointAction, BreakpointSpec, EndReason, FunctionLocation, LaunchRequest, Pause,
    breakpoint_spec::Location,
};

fn on_function(name: &str) -> BreakpointSpec {
    BreakpointSpec {
        location: Some(Location::Function(FunctionLocation { name: name.into() })),
        ..Default::default()
    }
}

/// The fixture each adapter runs (a loop calling `step(i, total)` for i in
/// 0..5), and how that adapter names the function.
fn program(adapter: &str) -> (String, &'static str) {
    match adapter {
        "debugpy" => (fixture("python/loop.py").display().to_string(), "step"),
        "lldb" => (fixture("build/hello").display().to_string(), "step"),
        _ => (fixture("build/go-hello").display().to_string(), "main.step"),
    }
}

/// Launches the adapter's fixture and answers every pause with CONTINUE
/// until it ends; the pauses and the output.
async fn run(daemon: &Daemon, sub: &mut Subscription, adapter: &str) -> (Vec<Pause>, String) {
    let (path, _) = program(adapter);
    let session = dap::launch_with(
        daemon,
        LaunchRequest {
            adapter: adapter.into(),
            program: path,
            ..Default::default()
        },
    )
    .await
    .session
    .unwrap();
    let (pauses, end, output) = dap::continue_to_the_end(daemon, sub, &session.id).await;
    assert_ne!(end.reason, EndReason::AdapterDied as i32, "{end:?}");
    (pauses, output)
}

async fn fields_are_honoured(adapter: &str) {
    let (_, function) = program(adapter);
    // A condition and a hit condition: the second call with i >= 1 (i == 2).
    let (daemon, mut sub) = watched().await;
    let bp = dap::add_breakpoint(
        &daemon,
        BreakpointSpec {
            condition: "i >= 1".into(),
            hit_condition: "2".into(),
            ..on_function(function)
        },
    )
    .await;
    let (pauses, _) = run(&daemon, &mut sub, adapter).await;
    let at: Vec<&str> = pauses.iter().map(|p| dap::local(p, "i")).collect();
    assert_eq!(at, ["2"], "{adapter}: {pauses:#?}");
    assert_eq!(pauses[0].breakpoint_ids, [bp], "{adapter}");
    daemon.stop().await;

    // A LOG action logs every call and never stops.
    let (daemon, mut sub) = watched().await;
    dap::add_breakpoint(
        &daemon,
        BreakpointSpec {
            action: BreakpointAction::Log.into(),
            log_message: "called with {i}".into(),
            ..on_function(function)
        },
    )
    .await;
    let (pauses, output) = run(&daemon, &mut sub, adapter).await;
    assert!(pauses.is_empty(), "{adapter}: {pauses:#?}");
    for i in 0..5 {
        assert!(
            output.contains(&format!("called with {i}")),
            "{adapter}: {output}"
        );
    }
    daemon.stop().await;
}

#[tokio::test]
async fn debugpy_function_breakpoints() {
    fields_are_honoured("debugpy").await;
}

#[tokio::test]
async fn lldb_function_breakpoints() {
    fields_are_honoured("lldb").await;
}

#[tokio::test]
async fn dlv_function_breakpoints() {
    fields_are_honoured("dlv").await;
}

#[tokio::test]
async fn a_field_no_dap_breakpoint_can_carry_out_is_refused() {
    let daemon = Daemon::start(&[]).await;
    let mut client = stepd_proto::v1::breakpoint_service_client::BreakpointServiceClient::new(
        daemon.channel().await,
    );
    let err = client
        .add_breakpoint(stepd_proto::v1::AddBreakpointRequest {
            spec: Some(BreakpointSpec {
                hold_limit: Some(prost_types::Duration {
                    seconds: 5,
                    nanos: 0,
                }),
                ..on_function("step")
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        stepd_e2e::violated_fields(&err),
        ["spec.hold_limit"],
        "{err:?}"
    );
    let listed = client
        .list_breakpoints(stepd_proto::v1::ListBreakpointsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .breakpoints;
    assert!(listed.is_empty(), "a refused breakpoint is not stored");
    daemon.stop().await;
}

/// A launch field the adapter cannot carry out is refused before anything
/// starts: dlv always steps into every package.
#[tokio::test]
async fn just_my_code_is_refused_where_the_adapter_cannot_keep_to_your_code() {
    let daemon = Daemon::start(&[]).await;
    let mut sessions = dap::sessions(&daemon).await;
    let err = sessions
        .launch(LaunchRequest {
            adapter: "dlv".into(),
            program: fixture("build/go-hello").to_str().unwrap().into(),
            just_my_code: Some(true),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert_eq!(stepd_e2e::violated_fields(&err), ["just_my_code"]);
    let listed = sessions
        .list_sessions(stepd_proto::v1::ListSessionsRequest {
            include_ended: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert!(listed.is_empty(), "nothing started: {listed:?}");
    daemon.stop().await;
}

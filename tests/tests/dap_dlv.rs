//! DAP sessions under the real Delve adapter (`dlv dap`, reached over a
//! loopback socket).

use stepd_e2e::{dap, fixture, line_of, source_spec, watched};
use stepd_proto::v1::{
    BreakpointAction, EndReason, EvaluateRequest, LaunchRequest, PauseReason, SessionState,
    StepKind, event::Payload,
};

#[tokio::test]
async fn breakpoints_locals_steps_logs_and_exit_code() {
    let (daemon, mut sub) = watched().await;
    let source = fixture("go/hello/main.go");
    let line = line_of(&source, "step");
    let bp = dap::add_breakpoint(&daemon, source_spec(source.to_str().unwrap(), line)).await;
    let mut log = source_spec(source.to_str().unwrap(), line_of(&source, "after_call"));
    log.action = BreakpointAction::Log as i32;
    log.log_message = "after {i}".into();
    dap::add_breakpoint(&daemon, log).await;
    let binary = fixture("build/go-hello");
    assert!(binary.is_file(), "run scripts/build-fixtures");
    let launched = dap::launch_with(
        &daemon,
        LaunchRequest {
            adapter: "dlv".into(),
            program: binary.to_str().unwrap().into(),
            ..Default::default()
        },
    )
    .await;
    let session = launched.session.unwrap();
    assert!(launched.breakpoints[0].status.as_ref().unwrap().verified);
    let pause = dap::next_pause(&mut sub, &session.id).await;
    assert_eq!(pause.reason, PauseReason::Breakpoint as i32);
    assert_eq!(pause.breakpoint_ids, std::slice::from_ref(&bp));
    assert_eq!(dap::local(&pause, "i"), "0");

    let mut sessions = dap::sessions(&daemon).await;
    let value = sessions
        .evaluate(EvaluateRequest {
            session_id: session.id.clone(),
            expression: "i + 40".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(value.value, "40");
    let stepped = dap::step(&mut sessions, &session.id, StepKind::Over).await;
    assert_eq!(
        stepped.top_frame.unwrap().location.unwrap().line,
        line_of(&source, "step_return")
    );
    // Drop the stop breakpoint and run to the end.
    use stepd_proto::v1::{
        RemoveBreakpointRequest, breakpoint_service_client::BreakpointServiceClient,
    };
    BreakpointServiceClient::new(daemon.channel().await)
        .remove_breakpoint(RemoveBreakpointRequest { id: bp })
        .await
        .unwrap();
    sub.wait_for("the breakpoint cleared from the session", |e| {
        e.session_id == session.id && matches!(e.payload, Some(Payload::BreakpointUpdated(_)))
    })
    .await;
    let end = dap::resume(&mut sessions, &session.id).await;
    assert_eq!(end.end_reason, EndReason::Exited as i32, "{end:?}");
    assert_eq!(end.exit_code, Some(3));
    let text: String = end.output.iter().map(|c| c.text.as_str()).collect();
    assert!(text.contains("after 1"), "{text}");
    daemon.stop().await;
}

#[tokio::test]
async fn a_go_binary_launched_without_an_adapter_runs_under_dlv() {
    // The binary has no .go suffix: only its Go build information says Go
    // (lldb would fail "Could not find type system for language go").
    let (daemon, mut sub) = watched().await;
    let source = fixture("go/hello/main.go");
    let line = line_of(&source, "step");
    let bp = dap::add_breakpoint(&daemon, source_spec(source.to_str().unwrap(), line)).await;
    let binary = fixture("build/go-hello");
    assert!(binary.is_file(), "run scripts/build-fixtures");
    let launched = dap::launch_with(
        &daemon,
        LaunchRequest {
            program: binary.to_str().unwrap().into(),
            ..Default::default()
        },
    )
    .await;
    let session = launched.session.unwrap();
    assert_eq!(session.adapter, "dlv");
    let pause = dap::next_pause(&mut sub, &session.id).await;
    assert_eq!(pause.breakpoint_ids, std::slice::from_ref(&bp));
    assert_eq!(dap::local(&pause, "i"), "0");
    daemon.stop().await;
}

/// The state letter of a process in /proc ('Z' for a zombie), or None once
/// it is gone.
fn proc_state(pid: i64) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[tokio::test]
async fn a_debuggee_killed_while_stopped_ends_the_session_and_leaves_no_zombie() {
    // dlv waits for its debuggee only while it runs it: a stopped debuggee
    // that dies says nothing to dlv, which never reaps it.
    let (daemon, mut sub) = watched().await;
    let source = fixture("go/hello/main.go");
    dap::add_breakpoint(
        &daemon,
        source_spec(source.to_str().unwrap(), line_of(&source, "step")),
    )
    .await;
    let binary = fixture("build/go-hello");
    assert!(binary.is_file(), "run scripts/build-fixtures");
    let session = dap::launch_with(
        &daemon,
        LaunchRequest {
            adapter: "dlv".into(),
            program: binary.to_str().unwrap().into(),
            ..Default::default()
        },
    )
    .await
    .session
    .unwrap();
    dap::next_pause(&mut sub, &session.id).await;
    let pid = dap::published_pid(&daemon, &mut sub, &session).await;
    assert!(pid > 0);
    // SAFETY: kill(2) has no memory effects.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let ended = dap::ended(&mut sub, &session.id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.reason, EndReason::Signaled as i32, "{end:?}");
    assert_eq!(end.signal, "SIGKILL", "{end:?}");
    let got = dap::sessions(&daemon)
        .await
        .get_session(stepd_proto::v1::GetSessionRequest {
            session_id: session.id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(got.state, SessionState::Ended as i32);
    // Nobody is left to reap it but its debugger: it must not stay a zombie.
    let reaped = tokio::time::timeout(stepd_e2e::DEADLINE, async {
        while proc_state(pid).is_some() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        reaped.is_ok(),
        "the debuggee {pid} is still there in state {:?}",
        proc_state(pid)
    );
    daemon.stop().await;
}

//! DAP sessions under the real lldb adapters: lldb-dap 19 and lldb-vscode 14,
//! both driven with the `lldb` adapter kind's quirks.

use stepd_e2e::{Daemon, Subscription, dap, fixture, line_of, reason, source_spec};
use stepd_proto::v1::{
    BreakpointAction, EndReason, EvaluateContext, EvaluateRequest, GetStackTraceRequest,
    LaunchRequest, ListScopesRequest, ListVariablesRequest, PauseReason, StepKind, Watch,
    event::Payload,
};
use tonic::Code;

/// The two lldb adapters, as commands.
const ADAPTERS: &[&str] = &["lldb-dap-19", "lldb-vscode-14"];

fn program() -> std::path::PathBuf {
    let built = fixture("build/hello");
    assert!(
        built.is_file(),
        "{} is missing; run scripts/build-fixtures",
        built.display()
    );
    built
}

async fn launch(
    daemon: &Daemon,
    adapter: &str,
    stop_on_entry: bool,
) -> stepd_proto::v1::LaunchResponse {
    dap::launch_with(
        daemon,
        LaunchRequest {
            adapter: "lldb".into(),
            adapter_command: vec![adapter.into()],
            program: program().to_str().unwrap().into(),
            stop_on_entry,
            ..Default::default()
        },
    )
    .await
}

#[tokio::test]
async fn breakpoints_locals_steps_eval_and_exit_code() {
    for adapter in ADAPTERS {
        let daemon = Daemon::start(&[]).await;
        let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
        sub.next().await;
        let source = fixture("c/hello.c");
        let line = line_of(&source, "step");
        let bp = dap::add_breakpoint(&daemon, source_spec(source.to_str().unwrap(), line)).await;
        let launched = launch(&daemon, adapter, false).await;
        let session = launched.session.unwrap();
        let status = launched.breakpoints[0].status.clone().unwrap();
        assert!(status.verified, "{adapter}: {status:?}");
        assert_eq!(status.actual_line, line, "{adapter}");

        let pause = dap::next_pause(&mut sub, &session.id).await;
        assert_eq!(pause.reason, PauseReason::Breakpoint as i32, "{adapter}");
        assert_eq!(pause.location.as_ref().unwrap().line, line, "{adapter}");
        assert_eq!(pause.breakpoint_ids, std::slice::from_ref(&bp), "{adapter}");
        assert_eq!(dap::local(&pause, "i"), "0", "{adapter}");
        assert_eq!(dap::local(&pause, "doubled"), "0", "{adapter}");

        let mut sessions = dap::sessions(&daemon).await;
        let frames = sessions
            .get_stack_trace(GetStackTraceRequest {
                session_id: session.id.clone(),
                thread_id: pause.thread_id,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .frames;
        assert_eq!(frames[0].name, "step", "{adapter}");
        assert_eq!(frames[1].name, "main", "{adapter}");
        // The struct and the array are containers with children.
        let scopes = sessions
            .list_scopes(ListScopesRequest {
                session_id: session.id.clone(),
                frame_id: frames[0].id.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .scopes;
        let locals = sessions
            .list_variables(ListVariablesRequest {
                session_id: session.id.clone(),
                variables_ref: scopes[0].variables_ref.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .variables;
        let values = locals.iter().find(|v| v.name == "values").unwrap();
        let elements = sessions
            .list_variables(ListVariablesRequest {
                session_id: session.id.clone(),
                variables_ref: values.variables_ref.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .variables;
        assert_eq!(
            elements
                .iter()
                .map(|v| v.value.as_str())
                .collect::<Vec<_>>(),
            ["0", "1", "2"],
            "{adapter}"
        );
        let value = sessions
            .evaluate(EvaluateRequest {
                session_id: session.id.clone(),
                expression: "p.y * 10".into(),
                frame_id: frames[0].id.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .result
            .unwrap();
        assert_eq!(value.value, "10", "{adapter}");

        // A capability the adapter did not announce is refused, not sent.
        let err = sessions
            .evaluate(EvaluateRequest {
                session_id: session.id.clone(),
                expression: "i".into(),
                context: EvaluateContext::Clipboard.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unimplemented, "{adapter}");
        assert_eq!(reason(&err), "UNSUPPORTED_BY_ADAPTER", "{adapter}");

        let stepped = dap::step(&mut sessions, &session.id, StepKind::Over).await;
        assert_eq!(
            stepped.top_frame.unwrap().location.unwrap().line,
            line_of(&source, "step_return"),
            "{adapter}"
        );
        // Remove the breakpoint's effect: disconnecting from breakpoints is not
        // needed; continue until the program ends (four more hits).
        for _ in 0..4 {
            let state = dap::resume(&mut sessions, &session.id).await;
            assert_eq!(
                state.stop_reason,
                PauseReason::Breakpoint as i32,
                "{adapter}"
            );
        }
        let last = dap::resume(&mut sessions, &session.id).await;
        assert_eq!(
            last.end_reason,
            EndReason::Exited as i32,
            "{adapter}: {last:?}"
        );
        let ended = dap::ended(&mut sub, &session.id).await;
        let Some(Payload::SessionEnded(end)) = ended.payload else {
            unreachable!()
        };
        assert_eq!(end.exit_code, Some(3), "{adapter}");
        daemon.stop().await;
    }
}

#[tokio::test]
async fn stop_on_entry_reports_a_normalised_reason_and_the_raw_one() {
    for adapter in ADAPTERS {
        let daemon = Daemon::start(&[]).await;
        let launched = launch(&daemon, adapter, true).await;
        let entry = launched.entry.expect("the entry stop");
        let pause = entry.pause.unwrap();
        assert_eq!(pause.reason, PauseReason::Entry as i32, "{adapter}");
        assert!(!pause.raw_reason.is_empty(), "{adapter}");
        daemon.stop().await;
    }
}

#[tokio::test]
async fn log_points_on_lldb_dap() {
    let daemon = Daemon::start(&[]).await;
    let source = fixture("c/hello.c");
    let mut log = source_spec(source.to_str().unwrap(), line_of(&source, "step_return"));
    log.action = BreakpointAction::Log as i32;
    log.log_message = "total={total}".into();
    dap::add_breakpoint(&daemon, log).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    let session = launch(&daemon, "lldb-dap-19", false).await.session.unwrap();
    let ended = dap::ended(&mut sub, &session.id).await;
    assert!(matches!(ended.payload, Some(Payload::SessionEnded(_))));
    let text = dap::output_text(&daemon, &session.id).await;
    assert!(text.contains("total=0"), "{text}");
    assert!(text.contains("total=2"), "{text}");
    daemon.stop().await;
}

#[tokio::test]
async fn log_points_are_emulated_on_lldb_vscode_14() {
    let daemon = Daemon::start(&[]).await;
    let source = fixture("c/hello.c");
    let mut log = source_spec(source.to_str().unwrap(), line_of(&source, "step_return"));
    log.action = BreakpointAction::Log as i32;
    log.log_message = "i={i} total={total}".into();
    dap::add_breakpoint(&daemon, log).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    let session = launch(&daemon, "lldb-vscode-14", false)
        .await
        .session
        .unwrap();
    // Invisible but for the output: no stop, no pause, the program runs to its end.
    let mut saw_stop = false;
    let ended = sub
        .wait_for("session_ended", |e| {
            saw_stop |=
                e.session_id == session.id && matches!(e.payload, Some(Payload::Stopped(_)));
            e.session_id == session.id && matches!(e.payload, Some(Payload::SessionEnded(_)))
        })
        .await;
    assert!(!saw_stop, "an emulated log point never shows a stop");
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.exit_code, Some(3));
    let text = dap::output_text(&daemon, &session.id).await;
    for expected in ["i=0 total=0", "i=1 total=2", "i=4 total=20"] {
        assert!(text.contains(expected), "{expected} in {text}");
    }
    daemon.stop().await;
}

#[tokio::test]
async fn pause_is_reported_as_a_pause_request() {
    for adapter in ADAPTERS {
        let daemon = Daemon::start(&[]).await;
        let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
        sub.next().await;
        let busy = fixture("build/busy");
        let stop_file = stepd_e2e::TempDir::new("stop");
        let launched = dap::launch_with(
            &daemon,
            LaunchRequest {
                adapter: "lldb".into(),
                adapter_command: vec![adapter.to_string()],
                program: busy.to_str().unwrap().into(),
                args: vec![stop_file.path().join("stop").to_str().unwrap().into()],
                ..Default::default()
            },
        )
        .await;
        let session = launched.session.unwrap();
        // Pause a loop that is really running, not the dynamic loader.
        sub.wait_for("the program's first output", |e| {
            e.session_id == session.id
                && matches!(&e.payload, Some(Payload::Output(o))
                    if o.chunk.as_ref().is_some_and(|c| c.text.contains("busy: started")))
        })
        .await;
        let state = dap::sessions(&daemon)
            .await
            .pause(stepd_proto::v1::PauseRequest {
                session_id: session.id.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .state
            .unwrap();
        assert_eq!(
            state.stop_reason,
            PauseReason::PauseRequest as i32,
            "{adapter}: {state:?}"
        );
        assert!(!state.pause.unwrap().raw_reason.is_empty());
        daemon.stop().await;
    }
}

/// Launches a fixture built by scripts/build-fixtures under one lldb adapter.
async fn launch_fixture(
    daemon: &Daemon,
    adapter: &str,
    name: &str,
    args: &[&str],
) -> stepd_proto::v1::Session {
    let built = fixture(&format!("build/{name}"));
    assert!(
        built.is_file(),
        "{} is missing; run scripts/build-fixtures",
        built.display()
    );
    dap::launch_with(
        daemon,
        LaunchRequest {
            adapter: "lldb".into(),
            adapter_command: vec![adapter.into()],
            program: built.to_str().unwrap().into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        },
    )
    .await
    .session
    .unwrap()
}

/// The names of a scope's variables.
async fn names(
    sessions: &mut stepd_proto::v1::session_service_client::SessionServiceClient<
        tonic::transport::Channel,
    >,
    session_id: &str,
    variables_ref: &str,
) -> Vec<String> {
    sessions
        .list_variables(ListVariablesRequest {
            session_id: session_id.into(),
            variables_ref: variables_ref.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .variables
        .into_iter()
        .map(|v| v.name)
        .collect()
}

#[tokio::test]
async fn each_frames_locals_handle_names_that_frames_locals() {
    // lldb numbers every frame's Locals 1: after `step`'s scopes were listed,
    // `deref`'s handle must still list `deref`'s locals.
    for adapter in ADAPTERS {
        let (daemon, mut sub) = stepd_e2e::watched().await;
        let source = fixture("c/crash.c");
        dap::add_breakpoint(
            &daemon,
            source_spec(source.to_str().unwrap(), line_of(&source, "deref")),
        )
        .await;
        let session = launch_fixture(&daemon, adapter, "crash", &[]).await;
        let pause = dap::next_pause(&mut sub, &session.id).await;
        let mut sessions = dap::sessions(&daemon).await;
        let frames = sessions
            .get_stack_trace(GetStackTraceRequest {
                session_id: session.id.clone(),
                thread_id: pause.thread_id,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .frames;
        assert_eq!(frames[0].name, "deref", "{adapter}");
        assert_eq!(frames[1].name, "step", "{adapter}");
        let mut locals = Vec::new();
        for frame in &frames[..2] {
            let scopes = sessions
                .list_scopes(ListScopesRequest {
                    session_id: session.id.clone(),
                    frame_id: frame.id.clone(),
                })
                .await
                .unwrap()
                .into_inner()
                .scopes;
            locals.push(scopes[0].variables_ref.clone());
        }
        assert_ne!(locals[0], locals[1], "{adapter}: one handle for two frames");
        for _ in 0..2 {
            let deref = names(&mut sessions, &session.id, &locals[0]).await;
            assert!(deref.contains(&"offset".to_owned()), "{adapter}: {deref:?}");
            assert!(
                !deref.contains(&"before".to_owned()),
                "{adapter}: {deref:?}"
            );
            let step = names(&mut sessions, &session.id, &locals[1]).await;
            assert!(step.contains(&"before".to_owned()), "{adapter}: {step:?}");
            assert!(!step.contains(&"offset".to_owned()), "{adapter}: {step:?}");
        }
        daemon.stop().await;
    }
}

#[tokio::test]
async fn a_segfault_pauses_as_an_exception_and_ends_by_its_signal() {
    for adapter in ADAPTERS {
        let (daemon, mut sub) = stepd_e2e::watched().await;
        let source = fixture("c/crash.c");
        let session = launch_fixture(&daemon, adapter, "crash", &["crash"]).await;
        let pause = dap::next_pause(&mut sub, &session.id).await;
        assert_eq!(pause.reason, PauseReason::Exception as i32, "{adapter}");
        assert!(
            pause.caught_msg.starts_with("signal SIGSEGV"),
            "{adapter}: {}",
            pause.caught_msg
        );
        assert!(
            pause.breakpoint_ids.is_empty(),
            "{adapter}: no breakpoint caused it"
        );
        assert_eq!(
            pause.location.as_ref().unwrap().line,
            line_of(&source, "deref"),
            "{adapter}"
        );
        let mut sessions = dap::sessions(&daemon).await;
        let last = dap::resume(&mut sessions, &session.id).await;
        assert_eq!(
            last.end_reason,
            EndReason::Signaled as i32,
            "{adapter}: {last:?}"
        );
        assert_eq!(last.signal, "SIGSEGV", "{adapter}");
        assert_eq!(last.exit_code, None, "{adapter}: a signal is no exit code");
        let ended = dap::ended(&mut sub, &session.id).await;
        let Some(Payload::SessionEnded(end)) = ended.payload else {
            unreachable!()
        };
        assert_eq!(end.reason, EndReason::Signaled as i32, "{adapter}");
        assert_eq!(end.signal, "SIGSEGV", "{adapter}");
        let record = sessions
            .get_session(stepd_proto::v1::GetSessionRequest {
                session_id: session.id.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .session
            .unwrap();
        assert_eq!(record.signal, "SIGSEGV", "{adapter}");
        assert_eq!(record.end_reason, EndReason::Signaled as i32, "{adapter}");
        daemon.stop().await;
    }
}

#[tokio::test]
async fn a_cpp_throw_stop_carries_the_thrown_exception_and_its_breakpoint() {
    for adapter in ADAPTERS {
        let (daemon, mut sub) = stepd_e2e::watched().await;
        let source = fixture("c/throw.cpp");
        let bp = dap::add_breakpoint(
            &daemon,
            stepd_proto::v1::BreakpointSpec {
                location: Some(stepd_proto::v1::breakpoint_spec::Location::Exception(
                    stepd_proto::v1::ExceptionFilters {
                        filter_ids: vec!["cpp_throw".into()],
                    },
                )),
                ..Default::default()
            },
        )
        .await;
        let session = launch_fixture(&daemon, adapter, "throw", &[]).await;
        let pause = dap::next_pause(&mut sub, &session.id).await;
        assert_eq!(pause.reason, PauseReason::Exception as i32, "{adapter}");
        // The exception's type and what(), not the filter's label "C++ Throw".
        assert_eq!(
            pause.caught_msg, "std::runtime_error: bad value 42",
            "{adapter}"
        );
        assert_eq!(pause.breakpoint_ids, std::slice::from_ref(&bp), "{adapter}");
        let mut sessions = dap::sessions(&daemon).await;
        let frames = sessions
            .get_stack_trace(GetStackTraceRequest {
                session_id: session.id.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .frames;
        assert_eq!(
            frames[1].location.as_ref().unwrap().line,
            line_of(&source, "throw"),
            "{adapter}"
        );
        // Caught, the program goes on to the second throw.
        let second = dap::resume(&mut sessions, &session.id).await;
        let second = second.pause.unwrap();
        assert_eq!(
            second.caught_msg, "std::runtime_error: bad value 42",
            "{adapter}"
        );
        let text = dap::output_text(&daemon, &session.id).await;
        assert!(text.contains("caught: bad value 42"), "{adapter}: {text}");
        daemon.stop().await;
    }
}

#[tokio::test]
async fn get_session_names_the_breakpoint_of_each_placement() {
    let (daemon, mut sub) = stepd_e2e::watched().await;
    let source = fixture("c/hello.c");
    let bp = dap::add_breakpoint(
        &daemon,
        source_spec(source.to_str().unwrap(), line_of(&source, "step")),
    )
    .await;
    let session = launch_fixture(&daemon, "lldb-dap-19", "hello", &[]).await;
    let pause = dap::next_pause(&mut sub, &session.id).await;
    let mut sessions = dap::sessions(&daemon).await;
    let got = sessions
        .get_session(stepd_proto::v1::GetSessionRequest {
            session_id: session.id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<&str> = got
        .breakpoints
        .iter()
        .map(|b| b.breakpoint_id.as_str())
        .collect();
    assert_eq!(ids, [bp.as_str()], "{:?}", got.breakpoints);
    assert_eq!(pause.breakpoint_ids, [bp]);
    daemon.stop().await;
}

#[tokio::test]
async fn get_stack_trace_of_thread_zero_is_the_latest_pauses_thread() {
    let (daemon, mut sub) = stepd_e2e::watched().await;
    let source = fixture("c/hello.c");
    dap::add_breakpoint(
        &daemon,
        source_spec(source.to_str().unwrap(), line_of(&source, "step")),
    )
    .await;
    let session = launch_fixture(&daemon, "lldb-dap-19", "hello", &[]).await;
    let pause = dap::next_pause(&mut sub, &session.id).await;
    let mut sessions = dap::sessions(&daemon).await;
    // Thread 0 is the latest pause's thread, as for Step and Continue.
    let frames = sessions
        .get_stack_trace(GetStackTraceRequest {
            session_id: session.id.clone(),
            thread_id: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .frames;
    assert_eq!(frames[0].name, "step");
    let explicit = sessions
        .get_stack_trace(GetStackTraceRequest {
            session_id: session.id.clone(),
            thread_id: pause.thread_id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .frames;
    assert_eq!(frames, explicit);
    daemon.stop().await;
}

/// The parent of a process, from /proc.
fn parent_of(pid: i64) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command sits in parentheses and may hold spaces: skip past it.
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Whether a process still runs (a zombie has ended).
fn running(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .is_some_and(|end| !stat[end + 2..].starts_with('Z'))
    })
}

#[tokio::test]
async fn an_adapter_that_hangs_when_told_to_terminate_takes_its_debuggee_along() {
    let daemon = Daemon::start(&[]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    let source = fixture("c/busy.c");
    dap::add_breakpoint(
        &daemon,
        source_spec(source.to_str().unwrap(), line_of(&source, "busy")),
    )
    .await;
    let stop_file = stepd_e2e::TempDir::new("stop");
    let stop = stop_file.path().join("stop");
    let session = launch_fixture(&daemon, "lldb-dap-19", "busy", &[stop.to_str().unwrap()]).await;
    dap::next_pause(&mut sub, &session.id).await;
    let debuggee = dap::published_pid(&daemon, &mut sub, &session).await;
    assert!(running(debuggee));
    // lldb-dap runs lldb-server, which runs the program: stop lldb-dap so it
    // answers nothing, as a wedged adapter does.
    let adapter = parent_of(parent_of(debuggee).unwrap()).unwrap();
    // SAFETY: kill(2) has no memory effects.
    unsafe {
        libc::kill(adapter as i32, libc::SIGSTOP);
    }
    dap::sessions(&daemon)
        .await
        .disconnect(stepd_proto::v1::DisconnectRequest {
            session_id: session.id.clone(),
            mode: stepd_proto::v1::DisconnectMode::Terminate.into(),
        })
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + stepd_e2e::DEADLINE;
    while running(debuggee) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the debuggee {debuggee} outlived its session"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    std::fs::write(&stop, "").unwrap();
    daemon.stop().await;
}

#[tokio::test]
async fn a_killed_daemon_leaves_no_debuggee_behind() {
    for adapter in ADAPTERS {
        let mut daemon = Daemon::start(&[]).await;
        let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
        sub.next().await;
        let source = fixture("c/busy.c");
        dap::add_breakpoint(
            &daemon,
            source_spec(source.to_str().unwrap(), line_of(&source, "busy")),
        )
        .await;
        let stop_file = stepd_e2e::TempDir::new("stop");
        let stop = stop_file.path().join("stop");
        let session = launch_fixture(&daemon, adapter, "busy", &[stop.to_str().unwrap()]).await;
        dap::next_pause(&mut sub, &session.id).await;
        let debuggee = dap::published_pid(&daemon, &mut sub, &session).await;
        daemon.child.start_kill().unwrap();
        daemon.wait_exit(stepd_e2e::DEADLINE).await;
        let deadline = tokio::time::Instant::now() + stepd_e2e::DEADLINE;
        while running(debuggee) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{adapter}: the debuggee {debuggee} outlived the daemon"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        std::fs::write(&stop, "").unwrap();
    }
}

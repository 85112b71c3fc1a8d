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

//! DAP sessions under the real debugpy adapter.

use std::time::Duration;

use stepd_e2e::{Daemon, Subscription, dap, fixture, line_of, reason, source_spec, watched};
use stepd_proto::v1::{
    BreakpointAction, BreakpointSpec, ContinueRequest, EndReason, EvalCommand, EvaluateRequest,
    ExceptionFilters, GetStackTraceRequest, LaunchRequest, ListScopesRequest, ListVariablesRequest,
    NoWait, PauseReason, PauseRequest, ReadOutputRequest, SessionState, SetVariableRequest,
    StepKind, StepRequest, Wait, Watch, breakpoint_spec::Location, continue_request,
    debug_command::Command, event::Payload, pause_request,
};
use tonic::Code;

#[tokio::test]
async fn a_breakpoint_stops_with_location_and_locals_then_steps() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/loop.py");
    let line = line_of(&program, "step");
    let bp = dap::add_breakpoint(&daemon, source_spec(program.to_str().unwrap(), line)).await;
    let launched = dap::launch(&daemon, "debugpy", program.to_str().unwrap(), &[]).await;
    let session = launched.session.unwrap();
    let placed = &launched.breakpoints[0];
    assert_eq!(placed.breakpoint_id, bp);
    assert_eq!(placed.requested_line, line);
    let status = placed.status.as_ref().unwrap();
    assert!(status.verified, "{status:?}");
    assert_eq!(status.actual_line, line);

    let pause = dap::next_pause(&mut sub, &session.id).await;
    assert_eq!(pause.reason, PauseReason::Breakpoint as i32);
    assert_eq!(pause.breakpoint_ids, std::slice::from_ref(&bp));
    let location = pause.location.clone().unwrap();
    assert_eq!(location.line, line);
    assert_eq!(location.function, "step");
    let excerpt = location.excerpt.unwrap();
    assert!(excerpt.lines.iter().any(|l| l.contains("LINE: step")));
    assert_eq!(dap::local(&pause, "i"), "0");
    assert_eq!(dap::local(&pause, "items"), "[0, 1, 2]");

    let mut sessions = dap::sessions(&daemon).await;
    // Step over: one line down, same function.
    let stepped = dap::step(&mut sessions, &session.id, StepKind::Over).await;
    assert_eq!(stepped.stop_reason, PauseReason::Step as i32);
    let top = stepped.top_frame.unwrap().location.unwrap();
    assert_eq!(top.line, line_of(&program, "step_return"));
    // Step out: back in main at the call site.
    let out = dap::step(&mut sessions, &session.id, StepKind::Out).await;
    assert_eq!(out.top_frame.unwrap().name, "main");
    // Continue: the next iteration hits the breakpoint, with output meanwhile.
    let next = dap::resume(&mut sessions, &session.id).await;
    assert_eq!(next.stop_reason, PauseReason::Breakpoint as i32);
    assert_eq!(dap::local(next.pause.as_ref().unwrap(), "i"), "1");
    // debugpy may send the program's output after the stop it preceded, so
    // look for it in the output events rather than in this answer alone.
    if !next.output.iter().any(|c| c.text.contains("i=0 total=0")) {
        sub.wait_for("the first iteration's output", |e| {
            matches!(&e.payload, Some(Payload::Output(o))
                if o.chunk.as_ref().is_some_and(|c| c.text.contains("i=0 total=0")))
        })
        .await;
    }
    // Step in from the call site is covered by the recursion test; remove the
    // breakpoint's effect by continuing to the end.
    daemon.stop().await;
}

#[tokio::test]
async fn each_step_in_one_frame_carries_that_stops_locals() {
    // Stepping within one frame, every Step answer shows the locals of its
    // own stop, not those of the stop before (dap_locals.rs does the same
    // across calls and returns under every adapter).
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/loop.py");
    let after_call = line_of(&program, "after_call");
    let mut first = source_spec(program.to_str().unwrap(), after_call);
    first.condition = "i == 0".into();
    dap::add_breakpoint(&daemon, first).await;
    let session = dap::launch(&daemon, "debugpy", program.to_str().unwrap(), &[])
        .await
        .session
        .unwrap();
    dap::next_pause(&mut sub, &session.id).await;
    let mut sessions = dap::sessions(&daemon).await;
    let mut seen = Vec::new();
    for _ in 0..10 {
        let pause = dap::step(&mut sessions, &session.id, StepKind::Over)
            .await
            .pause
            .unwrap();
        if pause.location.as_ref().unwrap().line == after_call {
            let i: i64 = dap::local(&pause, "i").parse().unwrap();
            let total: i64 = dap::local(&pause, "total").parse().unwrap();
            assert_eq!(total, (0..=i).map(|k| 2 * k).sum::<i64>(), "at i={i}");
            seen.push(i);
        }
    }
    assert!(
        seen.len() >= 3 && seen.windows(2).all(|w| w[1] == w[0] + 1),
        "{seen:?}"
    );
    daemon.stop().await;
}

#[tokio::test]
async fn step_in_enters_the_called_function() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/recursion.py");
    let call = line_of(&program, "call");
    dap::add_breakpoint(&daemon, source_spec(program.to_str().unwrap(), call)).await;
    let session = dap::launch(&daemon, "debugpy", program.to_str().unwrap(), &[])
        .await
        .session
        .unwrap();
    dap::next_pause(&mut sub, &session.id).await;
    let state = dap::step(&mut dap::sessions(&daemon).await, &session.id, StepKind::In).await;
    assert_eq!(state.top_frame.unwrap().name, "fact");
    daemon.stop().await;
}

#[tokio::test]
async fn conditions_and_log_points() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/loop.py");
    let path = program.to_str().unwrap();
    let mut conditional = source_spec(path, line_of(&program, "step"));
    conditional.condition = "i == 3".into();
    dap::add_breakpoint(&daemon, conditional).await;
    let mut log = source_spec(path, line_of(&program, "step_return"));
    log.action = BreakpointAction::Log as i32;
    log.log_message = "total is {total}".into();
    dap::add_breakpoint(&daemon, log).await;
    let session = dap::launch(&daemon, "debugpy", path, &[])
        .await
        .session
        .unwrap();
    let pause = dap::next_pause(&mut sub, &session.id).await;
    assert_eq!(
        dap::local(&pause, "i"),
        "3",
        "the condition held back earlier hits"
    );
    let text = dap::output_text(&daemon, &session.id).await;
    for expected in ["total is 0", "total is 2", "total is 6"] {
        assert!(text.contains(expected), "{expected} in {text:?}");
    }
    daemon.stop().await;
}

#[tokio::test]
async fn an_exception_breakpoint_carries_the_message() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/exceptions.py");
    let bp = dap::add_breakpoint(
        &daemon,
        BreakpointSpec {
            location: Some(Location::Exception(ExceptionFilters {
                filter_ids: vec!["uncaught".into()],
            })),
            ..Default::default()
        },
    )
    .await;
    let launched = dap::launch(&daemon, "debugpy", program.to_str().unwrap(), &[]).await;
    let session = launched.session.unwrap();
    assert!(launched.breakpoints[0].status.as_ref().unwrap().verified);
    assert!(session.exception_filters.iter().any(|f| f.id == "raised"));
    let pause = dap::next_pause(&mut sub, &session.id).await;
    assert_eq!(pause.reason, PauseReason::Exception as i32);
    assert!(
        pause.caught_msg.contains("bad value 42"),
        "{}",
        pause.caught_msg
    );
    // The exception breakpoint is what matched.
    assert_eq!(pause.breakpoint_ids, [bp]);
    daemon.stop().await;
}

#[tokio::test]
async fn eval_set_variable_and_stale_handles() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/loop.py");
    let path = program.to_str().unwrap();
    dap::add_breakpoint(&daemon, source_spec(path, line_of(&program, "step"))).await;
    let session = dap::launch(&daemon, "debugpy", path, &[])
        .await
        .session
        .unwrap();
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
        .into_inner();
    assert_eq!(frames.frames[0].name, "step");
    assert_eq!(frames.frames[1].name, "main");
    let frame = frames.frames[0].id.clone();
    let value = sessions
        .evaluate(EvaluateRequest {
            session_id: session.id.clone(),
            expression: "items[2] * 10".into(),
            frame_id: frame.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(value.value, "20");
    let scopes = sessions
        .list_scopes(ListScopesRequest {
            session_id: session.id.clone(),
            frame_id: frame.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .scopes;
    let locals = scopes[0].variables_ref.clone();
    let set = sessions
        .set_variable(SetVariableRequest {
            session_id: session.id.clone(),
            variables_ref: locals.clone(),
            name: "total".into(),
            value: "100".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .variable
        .unwrap();
    assert_eq!(set.value, "100");
    let vars = sessions
        .list_variables(ListVariablesRequest {
            session_id: session.id.clone(),
            variables_ref: locals.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .variables;
    assert!(vars.iter().any(|v| v.name == "total" && v.value == "100"));

    // EVAL as a debug input: the pause is re-sent with the result.
    let answered = dap::answer(
        &daemon,
        &pause.key,
        Command::Eval(EvalCommand {
            code: "total + 1".into(),
        }),
    )
    .await
    .unwrap();
    let updated = answered.pause.unwrap();
    assert_eq!(updated.key, pause.key);
    assert_eq!(updated.debug_value.unwrap().text, "101");
    let err = sessions
        .evaluate(EvaluateRequest {
            session_id: session.id.clone(),
            expression: "no_such_name".into(),
            frame_id: frame.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "ADAPTER_ERROR");

    // After the program moves, the old handles are refused.
    sessions
        .step(StepRequest {
            session_id: session.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let err = sessions
        .list_scopes(ListScopesRequest {
            session_id: session.id.clone(),
            frame_id: frame,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(reason(&err), "STALE_HANDLE");
    daemon.stop().await;
}

#[tokio::test]
async fn the_exit_code_is_reported() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/hello.py");
    let session = dap::launch(&daemon, "debugpy", program.to_str().unwrap(), &[])
        .await
        .session
        .unwrap();
    let ended = dap::ended(&mut sub, &session.id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.reason, EndReason::Exited as i32);
    assert_eq!(end.exit_code, Some(3));
    let output = dap::sessions(&daemon)
        .await
        .read_output(ReadOutputRequest {
            session_id: session.id.clone(),
            ..Default::default()
        })
        .await;
    // Output of an ended session stays readable.
    let text: String = output
        .unwrap()
        .into_inner()
        .chunks
        .iter()
        .map(|c| c.text.clone())
        .collect();
    assert!(text.contains("hello from stepd fixture"), "{text}");
    daemon.stop().await;
}

#[tokio::test]
async fn pause_interrupts_a_busy_loop() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/busy.py");
    let session = dap::launch(&daemon, "debugpy", program.to_str().unwrap(), &[])
        .await
        .session
        .unwrap();
    let state = dap::sessions(&daemon)
        .await
        .pause(PauseRequest {
            session_id: session.id.clone(),
            wait: Some(pause_request::Wait::UntilStable(Wait {
                timeout_ms: Some(20_000),
            })),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .state
        .unwrap();
    assert!(!state.timed_out);
    assert_eq!(state.state, SessionState::Stopped as i32);
    assert_eq!(state.stop_reason, PauseReason::PauseRequest as i32);
    let _ = dap::next_pause(&mut sub, &session.id).await;
    // No-wait continue answers at once, while the program runs.
    let running = dap::sessions(&daemon)
        .await
        .r#continue(ContinueRequest {
            session_id: session.id.clone(),
            wait: Some(continue_request::Wait::NoWait(NoWait {})),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .state
        .unwrap();
    assert!(!running.waited);
    assert_eq!(running.state, SessionState::Running as i32);
    // A wait that times out is not an error.
    let waited = dap::sessions(&daemon)
        .await
        .r#continue(ContinueRequest {
            session_id: session.id.clone(),
            wait: Some(continue_request::Wait::UntilStable(Wait {
                timeout_ms: Some(200),
            })),
            ..Default::default()
        })
        .await;
    // Continuing a running program is refused by the adapter or times out; never hangs.
    if let Ok(state) = waited {
        assert!(state.into_inner().state.unwrap().timed_out);
    }
    daemon.stop().await;
}

#[tokio::test]
async fn killing_the_adapter_ends_the_session_and_its_program() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/busy.py");
    let launched = dap::launch(&daemon, "debugpy", program.to_str().unwrap(), &[]).await;
    let session = launched.session.unwrap();
    let adapter_pid = session.adapter_pid as i32;
    assert_ne!(session.pid, session.adapter_pid, "pid is the debuggee's");
    // The adapter runs through stepd's start script (docs/adapters/debugpy.md).
    let cmdline = std::fs::read(format!("/proc/{adapter_pid}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline);
    assert!(cmdline.contains("TCP_QUICKACK"), "{cmdline}");
    assert!(
        cmdline.contains("run_module(\"debugpy.adapter\""),
        "{cmdline}"
    );
    // The debuggee runs under the adapter (adapter → launcher → program);
    // other tests run busy.py too, so it is found among the adapter's
    // descendants.
    let debuggee = wait_for_descendant(adapter_pid as u32, &program)
        .await
        .expect("the program runs under the adapter");
    // A wait in flight when the adapter dies resolves with ADAPTER_DIED: stop
    // the program, then continue it with a wait that never ends by itself.
    let mut sessions = dap::sessions(&daemon).await;
    sessions
        .pause(PauseRequest {
            session_id: session.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let id = session.id.clone();
    let waiting = tokio::spawn(async move {
        sessions
            .r#continue(ContinueRequest {
                session_id: id,
                wait: Some(continue_request::Wait::UntilStable(Wait {
                    timeout_ms: Some(0),
                })),
                ..Default::default()
            })
            .await
    });
    std::process::Command::new("kill")
        .args(["-9", &adapter_pid.to_string()])
        .status()
        .unwrap();
    let ended = dap::ended(&mut sub, &session.id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.reason, EndReason::AdapterDied as i32);
    let result = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .unwrap()
        .unwrap();
    match result {
        Err(status) => assert!(
            matches!(
                reason(&status).as_str(),
                "ADAPTER_DIED" | "SESSION_ENDED" | "ADAPTER_ERROR"
            ),
            "{status:?}"
        ),
        Ok(state) => {
            let state = state.into_inner().state.unwrap();
            assert_eq!(state.state, SessionState::Ended as i32);
        }
    }
    wait_until_gone(debuggee).await;
    // The daemon lives on.
    let again = dap::launch(
        &daemon,
        "debugpy",
        fixture("python/hello.py").to_str().unwrap(),
        &[],
    )
    .await;
    assert!(again.session.is_some());
    daemon.stop().await;
}

/// The pid of the python process running `program`, once it runs.
/// A running process of `program` descended from `ancestor`.
async fn wait_for_descendant(ancestor: u32, program: &std::path::Path) -> Option<u32> {
    let needle = program.to_str().unwrap().to_owned();
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Some(pid) = descendant_running(ancestor, &needle) {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .ok()
}

fn descendant_running(ancestor: u32, needle: &str) -> Option<u32> {
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The fields after the command name, which is in parentheses.
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline);
        // The program itself runs as `python …/debugpy --connect … <program>`;
        // the launcher above it names the program too, without `--connect`.
        if !cmdline.contains(needle) || !cmdline.contains("--connect") {
            return None;
        }
        let mut up = pid;
        for _ in 0..4 {
            up = parent_of(up)?;
            if up == ancestor {
                return Some(pid);
            }
        }
        None
    })
}

async fn wait_until_gone(pid: u32) {
    tokio::time::timeout(Duration::from_secs(20), async {
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat.split_whitespace().nth(2) == Some("Z") {
                return; // a zombie has stopped running
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the debuggee was killed with its adapter");
}

#[tokio::test]
async fn a_missing_adapter_is_reported_with_the_paths_searched() {
    let dir = stepd_e2e::TempDir::new("noad");
    let mut command = Daemon::command(dir.path(), &[]);
    // A PATH with no debugpy anywhere.
    command
        .env("PATH", "/usr/bin:/bin")
        .env_remove("STEPD_PYTHON");
    let daemon = Daemon::spawn(command, dir.path()).await;
    let err = dap::sessions(&daemon)
        .await
        .launch(LaunchRequest {
            adapter: "debugpy".into(),
            program: fixture("python/hello.py").to_str().unwrap().into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(reason(&err), "ADAPTER_NOT_FOUND");
    use tonic_types::StatusExt;
    let searched = err.get_details_error_info().unwrap().metadata["searched"].clone();
    assert!(searched.contains("/usr/bin/python3"), "{searched}");
    daemon.stop().await;
}

#[tokio::test]
async fn a_client_that_disconnects_does_not_disturb_the_session() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/loop.py");
    let path = program.to_str().unwrap();
    dap::add_breakpoint(&daemon, source_spec(path, line_of(&program, "step"))).await;
    let session = {
        // Launch over a connection that is then dropped.
        let launched = dap::launch(&daemon, "debugpy", path, &[]).await;
        launched.session.unwrap()
    };
    let pause = dap::next_pause(&mut sub, &session.id).await;
    assert_eq!(dap::local(&pause, "i"), "0");
    let list = dap::sessions(&daemon)
        .await
        .list_pauses(stepd_proto::v1::ListPausesRequest {
            session_id: session.id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .pauses;
    assert_eq!(list.len(), 1);
    daemon.stop().await;
}

#[tokio::test]
async fn hit_conditions_max_hits_and_live_changes() {
    use stepd_proto::v1::{
        BreakpointSpec, RemoveBreakpointRequest, breakpoint_service_client::BreakpointServiceClient,
    };
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/loop.py");
    let path = program.to_str().unwrap();
    // Every second hit, at most twice: i = 1 and i = 3.
    let mut every_other = source_spec(path, line_of(&program, "step"));
    every_other.hit_condition = "%2".into();
    every_other.max_hits = 4;
    let bp = dap::add_breakpoint(&daemon, every_other).await;
    let session = dap::launch(&daemon, "debugpy", path, &[])
        .await
        .session
        .unwrap();
    let first = dap::next_pause(&mut sub, &session.id).await;
    assert_eq!(dap::local(&first, "i"), "1");
    let mut sessions = dap::sessions(&daemon).await;
    let second = dap::resume(&mut sessions, &session.id).await;
    assert_eq!(dap::local(second.pause.as_ref().unwrap(), "i"), "3");

    // A breakpoint added while the program runs applies at once; removing the
    // first one stops it from firing.
    BreakpointServiceClient::new(daemon.channel().await)
        .remove_breakpoint(RemoveBreakpointRequest { id: bp })
        .await
        .unwrap();
    let done: BreakpointSpec = source_spec(path, line_of(&program, "done"));
    let added = dap::add_breakpoint(&daemon, done).await;
    sub.wait_for("the new breakpoint placed in the session", |e| {
        e.session_id == session.id
            && matches!(&e.payload, Some(Payload::BreakpointUpdated(u))
                if u.breakpoint.as_ref().is_some_and(|b| b.id == added)
                    && u.status.as_ref().is_some_and(|s| s.verified))
    })
    .await;
    let last = dap::resume(&mut sessions, &session.id).await;
    assert_eq!(last.hit_breakpoint_ids, [added]);
    assert_eq!(
        last.top_frame.unwrap().location.unwrap().line,
        line_of(&program, "done")
    );
    daemon.stop().await;
}

#[tokio::test]
async fn a_snapshot_breakpoint_captures_and_goes_on() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/recursion.py");
    let path = program.to_str().unwrap();
    let mut snapshot = source_spec(path, line_of(&program, "base"));
    snapshot.action = BreakpointAction::Snapshot as i32;
    let bp = dap::add_breakpoint(&daemon, snapshot).await;
    let session = dap::launch(&daemon, "debugpy", path, &[])
        .await
        .session
        .unwrap();
    let captured = sub
        .wait_for("a breakpoint snapshot", |e| {
            matches!(e.payload, Some(Payload::BreakpointSnapshot(_)))
        })
        .await;
    let Some(Payload::BreakpointSnapshot(snap)) = captured.payload else {
        unreachable!()
    };
    assert_eq!(snap.breakpoint_id, bp);
    let facts = snap.frames.iter().filter(|f| f.function == "fact").count();
    assert_eq!(facts, 5, "{:?}", snap.frames);
    assert!(snap.locals.iter().any(|l| l.name == "n"));
    // No human needed: the program ran to its end without a pause.
    let ended = dap::ended(&mut sub, &session.id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.reason, EndReason::Exited as i32);
    daemon.stop().await;
}

#[tokio::test]
async fn a_refused_launch_is_launch_failed() {
    let (daemon, _sub) = watched().await;
    let err = dap::sessions(&daemon)
        .await
        .launch(LaunchRequest {
            adapter: "debugpy".into(),
            program: "/no/such/program.py".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert_eq!(reason(&err), "LAUNCH_FAILED");
    daemon.stop().await;
}

#[tokio::test]
async fn an_oversized_frame_ends_the_session_not_the_daemon() {
    // Frames up to 8 KiB: enough to start, too little for a long value.
    let daemon = Daemon::start(&["--max-dap-frame-bytes", "8192"]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    let program = fixture("python/loop.py");
    let path = program.to_str().unwrap();
    dap::add_breakpoint(&daemon, source_spec(path, line_of(&program, "step"))).await;
    let session = dap::launch(&daemon, "debugpy", path, &[])
        .await
        .session
        .unwrap();
    dap::next_pause(&mut sub, &session.id).await;
    let err = dap::sessions(&daemon)
        .await
        .evaluate(EvaluateRequest {
            session_id: session.id.clone(),
            expression: "'x' * 20000".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(reason(&err).as_str(), "PROTOCOL_ERROR" | "SESSION_ENDED"),
        "{err:?}"
    );
    let ended = dap::ended(&mut sub, &session.id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.reason, EndReason::ProtocolError as i32);
    assert!(end.detail.contains("8192"), "{}", end.detail);
    // The daemon carries on with other sessions.
    let other = dap::launch(
        &daemon,
        "debugpy",
        fixture("python/hello.py").to_str().unwrap(),
        &[],
    )
    .await;
    let other = other.session.unwrap();
    let ended = dap::ended(&mut sub, &other.id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.exit_code, Some(3));
    daemon.stop().await;
}

#[tokio::test]
async fn a_child_process_becomes_a_child_session() {
    let (daemon, mut sub) = watched().await;
    let parent_program = fixture("python/child.py");
    let hello = fixture("python/hello.py");
    dap::add_breakpoint(
        &daemon,
        source_spec(hello.to_str().unwrap(), line_of(&hello, "print")),
    )
    .await;
    let mut request = LaunchRequest {
        adapter: "debugpy".into(),
        program: parent_program.to_str().unwrap().into(),
        ..Default::default()
    };
    request.labels.insert("team".into(), "core".into());
    let parent = dap::launch_with(&daemon, request).await.session.unwrap();
    let started = sub
        .wait_for("the child session", |e| {
            matches!(&e.payload, Some(Payload::SessionStarted(s))
                if s.session.as_ref().is_some_and(|s| s.parent_session_id == parent.id))
        })
        .await;
    let Some(Payload::SessionStarted(child)) = started.payload else {
        unreachable!()
    };
    let child = child.session.unwrap();
    assert_eq!(
        child.labels.get("team").map(String::as_str),
        Some("core"),
        "labels are inherited"
    );
    // The child's breakpoint stops the child session.
    let pause = dap::next_pause(&mut sub, &child.id).await;
    assert_eq!(pause.location.unwrap().line, line_of(&hello, "print"));
    dap::sessions(&daemon)
        .await
        .r#continue(ContinueRequest {
            session_id: child.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let ended = dap::ended(&mut sub, &parent.id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(
        end.exit_code,
        Some(3),
        "the parent exits with the child's code"
    );
    daemon.stop().await;
}

/// Whether process `pid` runs `program` (its command line names it).
fn runs(pid: i64, program: &std::path::Path) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains(program.to_str().unwrap()))
        .unwrap_or(false)
}

#[tokio::test]
async fn a_launched_programs_pid_is_published() {
    // debugpy names the debuggee (its `process` event) only after it answers
    // launch, that is after session_started.
    // Whether the event beats session_started is a race, so three launches.
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/busy.py");
    for _ in 0..3 {
        launch_and_read_the_pid(&daemon, &mut sub, &program).await;
    }
    daemon.stop().await;
}

async fn launch_and_read_the_pid(
    daemon: &Daemon,
    sub: &mut Subscription,
    program: &std::path::Path,
) {
    let stop = stepd_e2e::TempDir::new("pid");
    let stop_file = stop.path().join("stop");
    let session = dap::launch(
        daemon,
        "debugpy",
        program.to_str().unwrap(),
        &[stop_file.to_str().unwrap()],
    )
    .await
    .session
    .unwrap();
    let pid = dap::published_pid(daemon, sub, &session).await;
    assert!(pid > 0, "pid {pid}");
    assert!(runs(pid, program), "pid {pid} is not the debuggee");
    assert_ne!(pid, session.adapter_pid, "the debuggee, not the adapter");
    std::fs::write(&stop_file, b"").unwrap();
    let ended = dap::ended(sub, &session.id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.exit_code, Some(0));
}

#[tokio::test]
async fn a_program_that_does_not_exist_fails_to_launch_under_every_adapter() {
    let (daemon, _sub) = watched().await;
    let dir = stepd_e2e::TempDir::new("nox");
    let cases = [
        ("debugpy", "/no/such/dir/program.py", ""),
        // A relative path is looked for in the launch's working directory.
        ("debugpy", "missing.py", dir.path().to_str().unwrap()),
        ("debugpy", "/no/such/program", ""),
        ("lldb", "/no/such/program", ""),
        ("dlv", "/no/such/program", ""),
        // No adapter named: the guess does not matter, the path is checked.
        ("", "/no/such/program.py", ""),
    ];
    let mut sessions = dap::sessions(&daemon).await;
    let mut wrong = Vec::new();
    for (adapter, program, cwd) in cases {
        let launched = sessions
            .launch(LaunchRequest {
                adapter: adapter.into(),
                program: program.into(),
                cwd: cwd.into(),
                ..Default::default()
            })
            .await;
        match launched {
            Err(err)
                if err.code() == Code::FailedPrecondition
                    && reason(&err) == "LAUNCH_FAILED"
                    && err.message().contains(program) => {}
            other => wrong.push(format!("{adapter:?} {program}: {other:?}")),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // No session was started for any of them: none runs, none exited 0.
    let listed = sessions
        .list_sessions(stepd_proto::v1::ListSessionsRequest {
            include_ended: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert!(listed.is_empty(), "{listed:?}");
    daemon.stop().await;
}

#[tokio::test]
async fn an_evaluation_error_shows_the_users_error_not_the_debuggers_insides() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/loop.py");
    let path = program.to_str().unwrap();
    dap::add_breakpoint(&daemon, source_spec(path, line_of(&program, "step"))).await;
    let session = dap::launch(&daemon, "debugpy", path, &[])
        .await
        .session
        .unwrap();
    dap::next_pause(&mut sub, &session.id).await;
    let mut sessions = dap::sessions(&daemon).await;
    for (expression, error) in [
        ("1+", "SyntaxError"),
        (
            "no_such_name",
            "NameError: name 'no_such_name' is not defined",
        ),
    ] {
        let err = sessions
            .evaluate(EvaluateRequest {
                session_id: session.id.clone(),
                expression: expression.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(err.message().contains(error), "{expression}: {err:?}");
        assert!(
            !err.message().contains("pydevd"),
            "{expression}: the debugger's frames: {}",
            err.message()
        );
    }
    daemon.stop().await;
}

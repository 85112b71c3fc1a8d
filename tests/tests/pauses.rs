//! The pause protocol at real DAP pauses: every command, the EXPRESSION round
//! trip, errors that keep the pause, and clients racing to answer.

use stepd_e2e::dap::answer;
use stepd_e2e::{Daemon, Subscription, dap, fixture, line_of, reason, source_spec, watched};
use stepd_proto::v1::{
    BreakpointSpec, CommandKind, ContinueAllCommand, ContinueCommand, ContinueScopeCommand,
    EndReason, EvalCommand, ExceptionFilters, ExpressionCommand, HereCommand, InjectCommand,
    NextCommand, Pause, PauseReason, PauseRequest, QuitCommand, StacktraceCommand, StepOutCommand,
    TraceCommand, Watch, breakpoint_spec::Location, debug_command::Command, event::Payload,
    inject_command::Replacement,
};
use tonic::Code;

/// The next stop with a key other than `old` (re-sent pauses keep their key).
async fn new_pause(sub: &mut Subscription, session: &str, old: &str) -> Pause {
    loop {
        let pause = dap::next_pause(sub, session).await;
        if pause.key != old {
            return pause;
        }
    }
}

fn offers(pause: &Pause, kind: CommandKind) -> bool {
    pause.input_type.contains(&(kind as i32))
}

/// Launches `program` under debugpy with breakpoints at `markers`; returns the
/// session id and the first pause.
async fn start(
    daemon: &Daemon,
    sub: &mut Subscription,
    program: &str,
    markers: &[&str],
) -> (String, Pause) {
    let path = fixture(program);
    for marker in markers {
        dap::add_breakpoint(
            daemon,
            source_spec(path.to_str().unwrap(), line_of(&path, marker)),
        )
        .await;
    }
    let session = dap::launch(daemon, "debugpy", path.to_str().unwrap(), &[])
        .await
        .session
        .unwrap();
    let pause = dap::next_pause(sub, &session.id).await;
    (session.id, pause)
}

#[tokio::test]
async fn input_type_lists_what_works_here() {
    let (daemon, mut sub) = watched().await;
    let (_, pause) = start(&daemon, &mut sub, "python/loop.py", &["step"]).await;
    for kind in [
        CommandKind::Next,
        CommandKind::In,
        CommandKind::Out,
        CommandKind::Here,
        CommandKind::Continue,
        CommandKind::ContinueScope,
        CommandKind::ContinueAll,
        CommandKind::Trace,
        CommandKind::Eval,
        CommandKind::Inject,
        CommandKind::Stacktrace,
        CommandKind::Quit,
    ] {
        assert!(offers(&pause, kind), "{kind:?} in {:?}", pause.input_type);
    }
    // Probe-only commands are not offered, and are refused.
    assert!(!offers(&pause, CommandKind::Skip));
    let err = answer(&daemon, &pause.key, Command::Skip(Default::default()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(reason(&err), "INVALID_COMMAND");
    daemon.stop().await;
}

#[tokio::test]
async fn eval_with_an_expression_round_trip_and_errors_that_keep_the_pause() {
    let (daemon, mut sub) = watched().await;
    let (_, pause) = start(&daemon, &mut sub, "python/loop.py", &["step"]).await;
    let revised = |after: u32| move |e: &stepd_proto::v1::Event| matches!(&e.payload, Some(Payload::Stopped(s)) if s.pause.as_ref().is_some_and(|p| p.revision > after));
    // EVAL without code asks for the expression.
    let asked = answer(
        &daemon,
        &pause.key,
        Command::Eval(EvalCommand {
            code: String::new(),
        }),
    )
    .await
    .unwrap()
    .pause
    .unwrap();
    assert_eq!(asked.key, pause.key);
    assert_eq!(asked.input_type, [CommandKind::Expression as i32]);
    assert!(!asked.prompt.is_empty());
    // Other commands wait until the expression comes.
    let err = answer(&daemon, &pause.key, Command::Next(NextCommand {}))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "INVALID_COMMAND");
    let evaluated = answer(
        &daemon,
        &pause.key,
        Command::Expression(ExpressionCommand {
            code: "items[1] + 100".into(),
        }),
    )
    .await
    .unwrap()
    .pause
    .unwrap();
    assert_eq!(evaluated.debug_value.as_ref().unwrap().text, "101");
    assert!(
        offers(&evaluated, CommandKind::Next),
        "the commands are back"
    );
    assert!(evaluated.revision > asked.revision);

    // A failing EVAL fails the call with the adapter's words; an
    // eval_error is sent, and the pause is re-prompted, not lost.
    let err = answer(
        &daemon,
        &pause.key,
        Command::Eval(EvalCommand {
            code: "nope +".into(),
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(reason(&err), "ADAPTER_ERROR");
    let error = sub
        .wait_for("eval_error", |e| {
            matches!(e.payload, Some(Payload::EvalError(_)))
        })
        .await;
    let Some(Payload::EvalError(error)) = error.payload else {
        unreachable!()
    };
    assert_eq!(error.key, pause.key);
    assert!(error.message.contains("SyntaxError"), "{}", error.message);
    let Some(Payload::Stopped(failed)) = sub
        .wait_for("the re-prompted pause", revised(evaluated.revision))
        .await
        .payload
    else {
        unreachable!()
    };
    let failed = failed.pause.unwrap();
    assert_eq!(failed.key, pause.key);
    let listed = dap::sessions(&daemon)
        .await
        .list_pauses(stepd_proto::v1::ListPausesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .pauses;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, pause.key);
    // A failing INJECT also fails, and keeps the pause, re-prompted.
    let err = answer(
        &daemon,
        &pause.key,
        Command::Inject(InjectCommand {
            replacement: Some(Replacement::Code("total = no_such_name".into())),
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(reason(&err), "ADAPTER_ERROR");
    let Some(Payload::Stopped(kept)) = sub
        .wait_for("the pause after INJECT failed", revised(failed.revision))
        .await
        .payload
    else {
        unreachable!()
    };
    assert_eq!(kept.pause.unwrap().key, pause.key);
    // The pause can still be answered.
    answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    daemon.stop().await;
}

#[tokio::test]
async fn inject_changes_the_program_and_continues() {
    let (daemon, mut sub) = watched().await;
    let (session, pause) = start(&daemon, &mut sub, "python/loop.py", &["step_return"]).await;
    answer(
        &daemon,
        &pause.key,
        Command::Inject(InjectCommand {
            replacement: Some(Replacement::Code("total = 1000".into())),
        }),
    )
    .await
    .unwrap();
    let next = dap::next_pause(&mut sub, &session).await;
    // The loop carried the injected total: 1000 + 2 at the next return.
    assert_eq!(dap::local(&next, "total"), "1002");
    daemon.stop().await;
}

#[tokio::test]
async fn here_runs_to_a_line_and_continue_all_turns_breakpoints_off() {
    let (daemon, mut sub) = watched().await;
    let path = fixture("python/loop.py");
    let (session, pause) = start(&daemon, &mut sub, "python/loop.py", &["step"]).await;
    let done = line_of(&path, "done");
    // HERE with force runs past the breakpoint (hit four more times) to `done`.
    answer(
        &daemon,
        &pause.key,
        Command::Here(HereCommand {
            line: done,
            force: true,
            ..Default::default()
        }),
    )
    .await
    .unwrap();
    let at = dap::next_pause(&mut sub, &session).await;
    assert_eq!(at.location.as_ref().unwrap().line, done);
    assert_eq!(at.reason, PauseReason::Goto as i32);
    daemon.stop().await;

    let (daemon, mut sub) = watched().await;
    let (session, pause) = start(&daemon, &mut sub, "python/loop.py", &["step"]).await;
    answer(
        &daemon,
        &pause.key,
        Command::ContinueAll(ContinueAllCommand {}),
    )
    .await
    .unwrap();
    let note = sub
        .wait_for("a notification", |e| {
            matches!(e.payload, Some(Payload::Notification(_)))
        })
        .await;
    let Some(Payload::Notification(note)) = note.payload else {
        unreachable!()
    };
    assert!(note.message.contains("CONTINUE_ALL"));
    // With breakpoints off, the program runs to its end.
    let ended = dap::ended(&mut sub, &session).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.reason, EndReason::Exited as i32);
    daemon.stop().await;
}

#[tokio::test]
async fn continue_all_lasts_until_the_next_pause_request() {
    let (daemon, mut sub) = watched().await;
    let busy = fixture("python/busy.py");
    let stop_dir = stepd_e2e::TempDir::new("ca");
    let busy_line = line_of(&busy, "busy");
    dap::add_breakpoint(&daemon, source_spec(busy.to_str().unwrap(), busy_line)).await;
    let session = dap::launch(
        &daemon,
        "debugpy",
        busy.to_str().unwrap(),
        &[stop_dir.path().join("stop").to_str().unwrap()],
    )
    .await
    .session
    .unwrap();
    let pause = dap::next_pause(&mut sub, &session.id).await;
    answer(
        &daemon,
        &pause.key,
        Command::ContinueAll(ContinueAllCommand {}),
    )
    .await
    .unwrap();
    // The loop passes the breakpoint line constantly, yet nothing stops
    // until a Pause request, whose pause says breakpoints were off.
    let paused = dap::sessions(&daemon)
        .await
        .pause(PauseRequest {
            session_id: session.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .state
        .unwrap();
    assert_eq!(paused.stop_reason, PauseReason::PauseRequest as i32);
    // After the Pause request the breakpoint is back, and the pause says so.
    let pause = paused.pause.unwrap();
    assert!(
        pause.notes.iter().any(|n| n.contains("CONTINUE_ALL")),
        "{:?}",
        pause.notes
    );
    answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let again = new_pause(&mut sub, &session.id, &pause.key).await;
    assert_eq!(again.reason, PauseReason::Breakpoint as i32);
    assert_eq!(again.location.unwrap().line, busy_line);
    daemon.stop().await;
}

#[tokio::test]
async fn trace_emits_a_step_per_line_until_a_breakpoint() {
    let (daemon, mut sub) = watched().await;
    let path = fixture("python/loop.py");
    let (session, pause) = start(&daemon, &mut sub, "python/loop.py", &["call", "done"]).await;
    answer(
        &daemon,
        &pause.key,
        Command::Trace(TraceCommand { max_steps: 0 }),
    )
    .await
    .unwrap();
    let mut steps = Vec::new();
    let stopped = loop {
        let e = sub
            .wait_for("trace or stopped", |e| {
                matches!(e.payload, Some(Payload::Trace(_) | Payload::Stopped(_)))
            })
            .await;
        match e.payload {
            Some(Payload::Trace(t)) => {
                assert_eq!(t.key, pause.key);
                steps.push(t);
            }
            Some(Payload::Stopped(s)) => break s.pause.unwrap(),
            _ => unreachable!(),
        }
    };
    assert!(!steps.is_empty());
    assert_eq!(steps[0].step, 1);
    assert!(
        steps
            .iter()
            .any(|t| t.changed_locals.iter().any(|l| l.name == "total"))
    );
    // The trace ends at the next breakpoint hit (the same call line, next loop).
    assert_eq!(stopped.reason, PauseReason::Breakpoint as i32);
    assert_eq!(stopped.location.unwrap().line, line_of(&path, "call"));
    assert_eq!(session, stopped.session_id);
    daemon.stop().await;
}

#[tokio::test]
async fn out_with_force_and_continue_scope_skip_breakpoints_on_the_way() {
    let (daemon, mut sub) = watched().await;
    let path = fixture("python/recursion.py");
    // Stop in the outermost fact (n = 5), with a breakpoint in every deeper call.
    let mut outer = source_spec(path.to_str().unwrap(), line_of(&path, "recurse"));
    outer.condition = "n == 5".into();
    dap::add_breakpoint(&daemon, outer).await;
    dap::add_breakpoint(
        &daemon,
        source_spec(path.to_str().unwrap(), line_of(&path, "base")),
    )
    .await;
    let session = dap::launch(&daemon, "debugpy", path.to_str().unwrap(), &[])
        .await
        .session
        .unwrap();
    let pause = dap::next_pause(&mut sub, &session.id).await;
    assert_eq!(dap::local(&pause, "n"), "5");
    answer(
        &daemon,
        &pause.key,
        Command::StepOut(StepOutCommand { force: true }),
    )
    .await
    .unwrap();
    let out = dap::next_pause(&mut sub, &session.id).await;
    assert_eq!(out.location.as_ref().unwrap().function, "main", "{out:?}");
    daemon.stop().await;

    let (daemon, mut sub) = watched().await;
    let mut outer = source_spec(path.to_str().unwrap(), line_of(&path, "recurse"));
    outer.condition = "n == 5".into();
    dap::add_breakpoint(&daemon, outer).await;
    dap::add_breakpoint(
        &daemon,
        source_spec(path.to_str().unwrap(), line_of(&path, "base")),
    )
    .await;
    let session = dap::launch(&daemon, "debugpy", path.to_str().unwrap(), &[])
        .await
        .session
        .unwrap();
    let pause = dap::next_pause(&mut sub, &session.id).await;
    answer(
        &daemon,
        &pause.key,
        Command::ContinueScope(ContinueScopeCommand {}),
    )
    .await
    .unwrap();
    // Nothing stops inside; after the frame returns the program runs on to its end.
    let ended = dap::ended(&mut sub, &session.id).await;
    assert!(matches!(ended.payload, Some(Payload::SessionEnded(_))));
    daemon.stop().await;
}

#[tokio::test]
async fn stacktrace_and_quit() {
    let (daemon, mut sub) = watched().await;
    let path = fixture("python/exceptions.py");
    dap::add_breakpoint(
        &daemon,
        BreakpointSpec {
            location: Some(Location::Exception(ExceptionFilters {
                filter_ids: vec!["uncaught".into()],
            })),
            ..Default::default()
        },
    )
    .await;
    let session = dap::launch(&daemon, "debugpy", path.to_str().unwrap(), &[])
        .await
        .session
        .unwrap();
    let pause = dap::next_pause(&mut sub, &session.id).await;
    let again = answer(
        &daemon,
        &pause.key,
        Command::Stacktrace(StacktraceCommand {}),
    )
    .await
    .unwrap()
    .pause
    .unwrap();
    assert_eq!(again.key, pause.key, "STACKTRACE re-prompts the same pause");
    let stack = sub
        .wait_for("a stack event", |e| {
            matches!(e.payload, Some(Payload::Stack(_)))
        })
        .await;
    let Some(Payload::Stack(stack)) = stack.payload else {
        unreachable!()
    };
    assert!(stack.frames.iter().any(|f| f.name == "check"));
    assert!(
        stack
            .causes
            .iter()
            .any(|c| c.message.contains("bad value 42")),
        "{:?}",
        stack.causes
    );
    answer(&daemon, &pause.key, Command::Quit(QuitCommand {}))
        .await
        .unwrap();
    let ended = dap::ended(&mut sub, &session.id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.reason, EndReason::Quit as i32);
    daemon.stop().await;
}

#[tokio::test]
async fn two_clients_race_and_exactly_one_wins() {
    let (daemon, mut sub) = watched().await;
    let (_, pause) = start(&daemon, &mut sub, "python/loop.py", &["step"]).await;
    let mut other = Subscription::open(daemon.channel().await, Watch::default()).await;
    other.next().await;
    let a = answer(&daemon, &pause.key, Command::Next(NextCommand {}));
    let b = answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}));
    let (a, b) = tokio::join!(a, b);
    let (wins, losses): (Vec<_>, Vec<_>) = [a, b].into_iter().partition(|r| r.is_ok());
    assert_eq!(wins.len(), 1, "exactly one answer wins");
    let loss = losses.into_iter().next().unwrap().unwrap_err();
    assert_eq!(loss.code(), Code::FailedPrecondition);
    assert_eq!(reason(&loss), "ALREADY_ANSWERED");
    // Both subscribers see the same resolution.
    let is_resolution = |e: &stepd_proto::v1::Event| matches!(&e.payload, Some(Payload::PauseResolved(r)) if r.key == pause.key);
    let seen_a = sub.wait_for("pause_resolved", is_resolution).await;
    let seen_b = other.wait_for("pause_resolved", is_resolution).await;
    assert_eq!(seen_a, seen_b);
    let Some(Payload::PauseResolved(resolved)) = seen_a.payload else {
        unreachable!()
    };
    assert!(
        resolved.by.starts_with("uid:"),
        "the authenticated identity: {}",
        resolved.by
    );
    assert_ne!(resolved.command, CommandKind::Unspecified as i32);
    daemon.stop().await;
}

/// Answers `key` as a client that names itself `name`.
async fn answer_named(
    daemon: &Daemon,
    key: &str,
    command: Command,
    name: &str,
) -> Result<stepd_proto::v1::SendDebugInputResponse, tonic::Status> {
    dap::sessions(daemon)
        .await
        .send_debug_input(stepd_proto::v1::SendDebugInputRequest {
            input: Some(stepd_proto::v1::DebugInput {
                key: key.into(),
                command: Some(stepd_proto::v1::DebugCommand {
                    command: Some(command),
                }),
                client_name: name.into(),
            }),
        })
        .await
        .map(|r| r.into_inner())
}

#[tokio::test]
async fn a_race_records_each_clients_own_name_beside_the_identity() {
    let (daemon, mut sub) = watched().await;
    let (session, pause) = start(&daemon, &mut sub, "python/loop.py", &["step"]).await;
    // Two clients of one identity (this user), each with its own name.
    let a = answer_named(&daemon, &pause.key, Command::Next(NextCommand {}), "alpha");
    let b = answer_named(
        &daemon,
        &pause.key,
        Command::Resume(ContinueCommand {}),
        "beta",
    );
    let (a, b) = tokio::join!(a, b);
    let (winner, loss) = match (a, b) {
        (Ok(_), Err(loss)) => ("alpha", loss),
        (Err(loss), Ok(_)) => ("beta", loss),
        other => panic!("exactly one answer wins: {other:?}"),
    };
    // The loser is told who won: identity and client name.
    assert_eq!(reason(&loss), "ALREADY_ANSWERED");
    assert!(
        loss.message().contains(&format!("client \"{winner}\"")),
        "{loss:?}"
    );
    let resolved = sub
        .wait_for(
            "pause_resolved",
            |e| matches!(&e.payload, Some(Payload::PauseResolved(r)) if r.key == pause.key),
        )
        .await;
    let Some(Payload::PauseResolved(resolved)) = resolved.payload else {
        unreachable!()
    };
    assert!(resolved.by.starts_with("uid:"), "{resolved:?}");
    assert_eq!(resolved.client_name, winner);
    // An answer on a Subscribe stream is recorded with the stream's name.
    let next = dap::next_pause(&mut sub, &session).await;
    let stream = Subscription::open(
        daemon.channel().await,
        Watch {
            client_name: "gamma".into(),
            ..Default::default()
        },
    )
    .await;
    stream
        .send(stepd_proto::v1::subscribe_request::Message::DebugInput(
            stepd_proto::v1::DebugInput {
                key: next.key.clone(),
                command: Some(stepd_proto::v1::DebugCommand {
                    command: Some(Command::Resume(ContinueCommand {})),
                }),
                client_name: String::new(),
            },
        ))
        .await;
    let resolved = sub
        .wait_for(
            "the stream's answer",
            |e| matches!(&e.payload, Some(Payload::PauseResolved(r)) if r.key == next.key),
        )
        .await;
    let Some(Payload::PauseResolved(resolved)) = resolved.payload else {
        unreachable!()
    };
    assert_eq!(resolved.client_name, "gamma");
    // The session's history keeps it too (read once the session ended).
    remove_breakpoints(&daemon).await;
    for key in dap::pending_keys(&daemon, &session).await {
        let _ = answer(&daemon, &key, Command::Resume(ContinueCommand {})).await;
    }
    dap::ended(&mut sub, &session).await;
    let history =
        stepd_proto::v1::history_service_client::HistoryServiceClient::new(daemon.channel().await)
            .get_session_history(stepd_proto::v1::GetSessionHistoryRequest {
                session_id: session.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
    let recorded = history.events.iter().find_map(|e| match &e.payload {
        Some(Payload::PauseResolved(r)) if r.key == pause.key => Some(r.clone()),
        _ => None,
    });
    assert_eq!(recorded.map(|r| r.client_name), Some(winner.to_owned()));

    daemon.stop().await;
}

/// Removes every breakpoint, so the program runs to its end.
async fn remove_breakpoints(daemon: &Daemon) {
    let mut client = stepd_proto::v1::breakpoint_service_client::BreakpointServiceClient::new(
        daemon.channel().await,
    );
    let all = client
        .list_breakpoints(stepd_proto::v1::ListBreakpointsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .breakpoints;
    for bp in all {
        client
            .remove_breakpoint(stepd_proto::v1::RemoveBreakpointRequest { id: bp.id })
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn commands_at_an_lldb_pause() {
    let (daemon, mut sub) = watched().await;
    let source = fixture("c/hello.c");
    dap::add_breakpoint(
        &daemon,
        source_spec(source.to_str().unwrap(), line_of(&source, "step")),
    )
    .await;
    let session = dap::launch_c_hello(&daemon).await;
    let pause = dap::next_pause(&mut sub, &session.id).await;
    let evaluated = answer(
        &daemon,
        &pause.key,
        Command::Eval(EvalCommand {
            code: "doubled + 7".into(),
        }),
    )
    .await
    .unwrap()
    .pause
    .unwrap();
    assert_eq!(evaluated.debug_value.unwrap().text, "7");
    answer(
        &daemon,
        &pause.key,
        Command::StepOut(StepOutCommand { force: false }),
    )
    .await
    .unwrap();
    let out = new_pause(&mut sub, &session.id, &pause.key).await;
    assert_eq!(out.location.as_ref().unwrap().function, "main");
    let done = line_of(&source, "done");
    answer(
        &daemon,
        &out.key,
        Command::Here(HereCommand {
            line: done,
            force: true,
            ..Default::default()
        }),
    )
    .await
    .unwrap();
    let here = new_pause(&mut sub, &session.id, &out.key).await;
    assert_eq!(here.location.unwrap().line, done);
    answer(&daemon, &here.key, Command::Quit(QuitCommand {}))
        .await
        .unwrap();
    dap::ended(&mut sub, &session.id).await;
    daemon.stop().await;
}

#[tokio::test]
async fn more_commands_at_lldb_pauses() {
    let (daemon, mut sub) = watched().await;
    let source = fixture("c/hello.c");
    let path = source.to_str().unwrap();
    dap::add_breakpoint(&daemon, source_spec(path, line_of(&source, "call"))).await;
    let session = dap::launch_c_hello(&daemon).await;
    let at_call = dap::next_pause(&mut sub, &session.id).await;
    // IN enters step(); NEXT moves a line; STACKTRACE shows both frames.
    answer(&daemon, &at_call.key, Command::StepIn(Default::default()))
        .await
        .unwrap();
    let inside = new_pause(&mut sub, &session.id, &at_call.key).await;
    assert_eq!(inside.location.as_ref().unwrap().function, "step");
    answer(&daemon, &inside.key, Command::Next(NextCommand {}))
        .await
        .unwrap();
    let next = new_pause(&mut sub, &session.id, &inside.key).await;
    assert_eq!(next.reason, PauseReason::Step as i32);
    answer(
        &daemon,
        &next.key,
        Command::Stacktrace(StacktraceCommand {}),
    )
    .await
    .unwrap();
    let stack = sub
        .wait_for("a stack event", |e| {
            matches!(e.payload, Some(Payload::Stack(_)))
        })
        .await;
    let Some(Payload::Stack(stack)) = stack.payload else {
        unreachable!()
    };
    let names: Vec<_> = stack.frames.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(&names[..2], ["step", "main"]);
    // INJECT through setVariable (lldb has no setExpression), then the loop goes on.
    assert!(offers(&next, CommandKind::Inject));
    answer(
        &daemon,
        &next.key,
        Command::Inject(InjectCommand {
            replacement: Some(Replacement::Code("doubled = 40".into())),
        }),
    )
    .await
    .unwrap();
    let again = new_pause(&mut sub, &session.id, &next.key).await;
    assert_eq!(
        again.location.as_ref().unwrap().line,
        line_of(&source, "call")
    );
    // CONTINUE_SCOPE from main's loop: nothing stops until the program ends.
    answer(
        &daemon,
        &again.key,
        Command::ContinueAll(ContinueAllCommand {}),
    )
    .await
    .unwrap();
    let ended = dap::ended(&mut sub, &session.id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.exit_code, Some(3));
    let text = dap::output_text(&daemon, &session.id).await;
    // The injected doubled (40 instead of 2) changed the total of the first step.
    assert!(text.contains("i=0 total=40"), "{text}");
    daemon.stop().await;
}

#[tokio::test]
async fn inspect_locals_and_inspect_prompt_open_inspectors_at_the_pause() {
    let (daemon, mut sub) = watched().await;
    let (_, pause) = start(&daemon, &mut sub, "python/loop.py", &["step"]).await;
    for kind in [
        CommandKind::Inspect,
        CommandKind::InspectPrompt,
        CommandKind::Locals,
    ] {
        assert!(offers(&pause, kind), "{kind:?}");
    }
    let text = |p: &Pause| -> String {
        p.inspect
            .as_ref()
            .unwrap()
            .items
            .iter()
            .filter_map(|i| match &i.item {
                Some(stepd_proto::v1::render_item::Item::Text(t)) => Some(t.clone()),
                Some(stepd_proto::v1::render_item::Item::Value(v)) => Some(v.repr.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let locals = answer(&daemon, &pause.key, Command::Locals(Default::default()))
        .await
        .unwrap()
        .pause
        .unwrap();
    assert!(text(&locals).contains("items"), "{}", text(&locals));
    assert!(!locals.inspect.as_ref().unwrap().inspector_id.is_empty());
    // INSPECT_PROMPT without code asks for the expression first.
    let asked = answer(
        &daemon,
        &pause.key,
        Command::InspectPrompt(Default::default()),
    )
    .await
    .unwrap()
    .pause
    .unwrap();
    assert_eq!(asked.input_type, [CommandKind::Expression as i32]);
    let inspected = answer(
        &daemon,
        &pause.key,
        Command::Expression(ExpressionCommand {
            code: "{'answer': [1, 2, 42]}".into(),
        }),
    )
    .await
    .unwrap()
    .pause
    .unwrap();
    assert!(text(&inspected).contains("answer"), "{}", text(&inspected));
    assert!(
        offers(&inspected, CommandKind::Next),
        "the commands are back"
    );
    daemon.stop().await;
}

#[tokio::test]
async fn the_rest_of_the_commands_at_lldb_pauses() {
    let (daemon, mut sub) = watched().await;
    let source = fixture("c/hello.c");
    let path = source.to_str().unwrap();
    dap::add_breakpoint(&daemon, source_spec(path, line_of(&source, "step"))).await;
    let session = dap::launch_c_hello(&daemon).await;
    let first = dap::next_pause(&mut sub, &session.id).await;
    for kind in [
        CommandKind::Trace,
        CommandKind::ContinueScope,
        CommandKind::Locals,
        CommandKind::Inspect,
        CommandKind::InspectPrompt,
    ] {
        assert!(offers(&first, kind), "{kind:?}");
    }
    // The EXPRESSION round trip.
    answer(
        &daemon,
        &first.key,
        Command::Eval(EvalCommand {
            code: String::new(),
        }),
    )
    .await
    .unwrap();
    let evaluated = answer(
        &daemon,
        &first.key,
        Command::Expression(ExpressionCommand {
            code: "values[2] * 10".into(),
        }),
    )
    .await
    .unwrap()
    .pause
    .unwrap();
    assert_eq!(evaluated.debug_value.unwrap().text, "20");
    // LOCALS opens an inspector on the frame's locals.
    let inspected = answer(&daemon, &first.key, Command::Locals(Default::default()))
        .await
        .unwrap()
        .pause
        .unwrap();
    assert!(inspected.inspect.is_some());
    // TRACE with a limit: trace events, then a pause where the limit is reached.
    answer(
        &daemon,
        &first.key,
        Command::Trace(TraceCommand { max_steps: 2 }),
    )
    .await
    .unwrap();
    let mut traced = 0;
    let after_trace = loop {
        let e = sub
            .wait_for("trace or stopped", |e| {
                matches!(e.payload, Some(Payload::Trace(_) | Payload::Stopped(_)))
            })
            .await;
        match e.payload {
            Some(Payload::Trace(_)) => traced += 1,
            Some(Payload::Stopped(s)) if s.pause.as_ref().unwrap().key != first.key => {
                break s.pause.unwrap();
            }
            _ => {}
        }
    };
    assert_eq!(traced, 2);
    assert_eq!(after_trace.location.as_ref().unwrap().function, "step");
    // OUT with force: back in main, past the breakpoint in the next call.
    answer(
        &daemon,
        &after_trace.key,
        Command::StepOut(StepOutCommand { force: true }),
    )
    .await
    .unwrap();
    let out = new_pause(&mut sub, &session.id, &after_trace.key).await;
    assert_eq!(out.location.as_ref().unwrap().function, "main");
    // CONTINUE stops at the breakpoint again; CONTINUE_SCOPE from there runs
    // out of step() without stopping and on to the next hit.
    answer(&daemon, &out.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let hit = new_pause(&mut sub, &session.id, &out.key).await;
    assert_eq!(hit.reason, PauseReason::Breakpoint as i32);
    assert_eq!(dap::local(&hit, "i"), "1");
    answer(
        &daemon,
        &hit.key,
        Command::ContinueScope(ContinueScopeCommand {}),
    )
    .await
    .unwrap();
    let next_hit = new_pause(&mut sub, &session.id, &hit.key).await;
    assert_eq!(dap::local(&next_hit, "i"), "2");
    daemon.stop().await;
}

//! Moving a paused thread by line on real adapters. pdb's and gdb's
//! `until LINE` (HERE with `within_frame`) on debugpy: a line a branch
//! never reaches still stops the run at the first line after it in the
//! frame, and a frame that returns first stops it in the caller; the REPL's `until` sends the same command. JUMP (DAP goto)
//! moves the thread without running the lines between, where the adapter
//! can. A run (TRACE or `until`) that another thread's stop cuts short says
//! so.

use std::process::{Command as Process, Stdio};

use stepd_e2e::dap::answer;
use stepd_e2e::{
    Daemon, Subscription, dap, fixture, line_of, reason, source_spec, stepctl_bin, watched,
};
use stepd_proto::v1::{
    CommandKind, HereCommand, Pause, PauseReason, RemoveBreakpointRequest,
    breakpoint_service_client::BreakpointServiceClient, debug_command::Command, event::Payload,
};
use tonic::Code;

/// Launches python/until.py with a breakpoint at `marker`; the session and
/// its first pause. The breakpoint is removed once it stopped, so the
/// commands under test meet no breakpoint.
async fn start(daemon: &Daemon, sub: &mut Subscription, marker: &str) -> (String, Pause) {
    let path = fixture("python/until.py");
    let file = path.to_str().unwrap();
    let id = dap::add_breakpoint(daemon, source_spec(file, line_of(&path, marker))).await;
    let session = dap::launch(daemon, "debugpy", file, &[])
        .await
        .session
        .unwrap();
    let pause = dap::next_pause(sub, &session.id).await;
    BreakpointServiceClient::new(daemon.channel().await)
        .remove_breakpoint(RemoveBreakpointRequest { id })
        .await
        .unwrap();
    (session.id, pause)
}

fn until(line: u32) -> Command {
    Command::Here(HereCommand {
        line,
        within_frame: true,
        ..Default::default()
    })
}

#[tokio::test]
async fn until_a_line_never_reached_stops_at_the_first_line_after_it_in_the_frame() {
    let (daemon, mut sub) = watched().await;
    let path = fixture("python/until.py");
    let (session, pause) = start(&daemon, &mut sub, "loop").await;
    let never = line_of(&path, "never");
    answer(&daemon, &pause.key, until(never)).await.unwrap();
    let at = dap::next_pause(&mut sub, &session).await;
    let location = at.location.clone().unwrap();
    // Without within_frame, HERE would wait at `never` and the program would end.
    assert_eq!(location.line, line_of(&path, "after_loop"), "{at:?}");
    assert_eq!(at.reason, PauseReason::Goto as i32);
    assert_eq!(dap::local(&at, "total"), "4950");
    daemon.stop().await;
}

#[tokio::test]
async fn until_past_the_frame_stops_where_it_returns_and_says_so() {
    let (daemon, mut sub) = watched().await;
    let path = fixture("python/until.py");
    let (session, pause) = start(&daemon, &mut sub, "after_loop").await;
    // `print` is below every line of work(): the frame returns first.
    answer(&daemon, &pause.key, until(line_of(&path, "print")))
        .await
        .unwrap();
    let note = sub
        .wait_for("the until notification", |e| {
            matches!(&e.payload, Some(Payload::Notification(n)) if n.message.contains("returned"))
        })
        .await;
    let Some(Payload::Notification(note)) = note.payload else {
        unreachable!()
    };
    assert!(note.message.contains("before reaching line"), "{note:?}");
    let at = dap::next_pause(&mut sub, &session).await;
    let location = at.location.clone().unwrap();
    // In the caller, as a step out of the frame leaves it (debugpy goes on to
    // the line after the call).
    assert_eq!(location.function, "main", "{at:?}");
    assert!(
        [line_of(&path, "call"), line_of(&path, "print")].contains(&location.line),
        "{at:?}"
    );
    assert_eq!(at.reason, PauseReason::Step as i32);
    daemon.stop().await;
}

#[tokio::test]
async fn until_in_another_file_is_refused_and_the_pause_stays() {
    let (daemon, mut sub) = watched().await;
    let (session, pause) = start(&daemon, &mut sub, "after_loop").await;
    let err = answer(
        &daemon,
        &pause.key,
        Command::Here(HereCommand {
            path: fixture("python/loop.py").to_str().unwrap().into(),
            line: 3,
            within_frame: true,
            ..Default::default()
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(reason(&err), "INVALID_ARGUMENT");
    assert_eq!(dap::pending_keys(&daemon, &session).await, vec![pause.key]);
    daemon.stop().await;
}

/// The REPL's `until LINE`, fed from a pipe as a script would.
#[tokio::test]
async fn repl_until_from_a_pipe_leaves_the_loop() {
    let daemon = Daemon::start(&[]).await;
    let path = fixture("python/until.py");
    let file = path.to_str().unwrap();
    let body = line_of(&path, "body");
    let never = line_of(&path, "never");
    let after = line_of(&path, "after_loop");
    let mut repl = Process::new(stepctl_bin())
        .args(["--addr", &daemon.addr, "debug", "--launch", file])
        .args(["--break", &format!("{file}:{body}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let mut stdin = repl.stdin.take().unwrap();
    writeln!(stdin, "clear {body}\nuntil {never}\np total\nc").unwrap();
    drop(stdin);
    let out = tokio::task::spawn_blocking(move || repl.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("at {file}:{after} in work")),
        "{text}"
    );
    assert!(text.contains("= 4950"), "{text}");
    assert!(text.contains("result=9900"), "{text}");
    daemon.stop().await;
}

/// A TRACE whose thread is overtaken by another thread's breakpoint ends
/// with a word about it, rather than leaving its client waiting.
#[tokio::test]
async fn a_trace_cut_short_by_another_threads_stop_says_so() {
    let (daemon, mut sub) = watched().await;
    let path = fixture("python/threads.py");
    let file = path.to_str().unwrap();
    dap::add_breakpoint(&daemon, source_spec(file, line_of(&path, "work"))).await;
    let session = dap::launch(&daemon, "debugpy", file, &[])
        .await
        .session
        .unwrap();
    let first = dap::next_pause(&mut sub, &session.id).await;
    // worker-a's trace sets a_done, which sends worker-b to the breakpoint.
    answer(
        &daemon,
        &first.key,
        Command::Trace(stepd_proto::v1::TraceCommand { max_steps: 50 }),
    )
    .await
    .unwrap();
    // Said before the stop it is about is shown.
    let note = sub
        .wait_for("the trace's end", |e| {
            matches!(&e.payload, Some(Payload::Notification(n)) if n.message.contains("stopped first"))
        })
        .await;
    let Some(Payload::Notification(note)) = note.payload else {
        unreachable!()
    };
    let other = sub
        .wait_for("worker-b's stop", |e| {
            matches!(&e.payload, Some(Payload::Stopped(s))
                if s.pause.as_ref().is_some_and(|p| p.thread_id != first.thread_id))
        })
        .await;
    let Some(Payload::Stopped(stopped)) = other.payload else {
        unreachable!()
    };
    let b = stopped.pause.unwrap().thread_id;
    assert!(
        note.message.contains(&format!(
            "thread {b} stopped first, and thread {}",
            first.thread_id
        )),
        "{note:?}"
    );
    daemon.stop().await;
}

#[tokio::test]
async fn jump_moves_the_thread_without_running_the_lines_between() {
    let (daemon, mut sub) = watched().await;
    let path = fixture("python/loop.py");
    let file = path.to_str().unwrap();
    // The second call (i == 1) stops.
    dap::add_breakpoint(
        &daemon,
        stepd_proto::v1::BreakpointSpec {
            hit_condition: "2".into(),
            ..source_spec(file, line_of(&path, "step"))
        },
    )
    .await;
    let session = dap::launch(&daemon, "debugpy", file, &[])
        .await
        .session
        .unwrap();
    let pause = dap::next_pause(&mut sub, &session.id).await;
    assert!(
        pause.input_type.contains(&(CommandKind::Jump as i32)),
        "{:?}",
        pause.input_type
    );
    let to = line_of(&path, "step_return");
    answer(
        &daemon,
        &pause.key,
        Command::Jump(stepd_proto::v1::JumpCommand {
            path: String::new(),
            line: to,
        }),
    )
    .await
    .unwrap();
    let moved = dap::next_pause(&mut sub, &session.id).await;
    assert_ne!(moved.key, pause.key);
    assert_eq!(moved.reason, PauseReason::Goto as i32, "{moved:?}");
    assert_eq!(moved.location.as_ref().unwrap().line, to);
    // The addition was skipped: step(1, 0) returns 0, not 2.
    assert_eq!(dap::local(&moved, "total"), "0");
    answer(
        &daemon,
        &moved.key,
        Command::Resume(stepd_proto::v1::ContinueCommand {}),
    )
    .await
    .unwrap();
    dap::ended(&mut sub, &session.id).await;
    let output = dap::output_text(&daemon, &session.id).await;
    assert!(output.contains("done total=18"), "{output}");
    daemon.stop().await;
}

#[tokio::test]
async fn jump_is_refused_where_the_adapter_cannot_and_the_pause_stays() {
    let (daemon, mut sub) = watched().await;
    let source = fixture("c/hello.c");
    dap::add_breakpoint(
        &daemon,
        source_spec(source.to_str().unwrap(), line_of(&source, "step")),
    )
    .await;
    let session = dap::launch_c_hello(&daemon).await;
    let pause = dap::next_pause(&mut sub, &session.id).await;
    // lldb-dap 19 has no DAP goto.
    assert!(
        !pause.input_type.contains(&(CommandKind::Jump as i32)),
        "{:?}",
        pause.input_type
    );
    let err = answer(
        &daemon,
        &pause.key,
        Command::Jump(stepd_proto::v1::JumpCommand {
            path: String::new(),
            line: line_of(&source, "step_return"),
        }),
    )
    .await
    .unwrap_err();
    assert_eq!(reason(&err), "INVALID_COMMAND", "{err:?}");
    assert_eq!(
        dap::pending_keys(&daemon, &session.id).await,
        vec![pause.key]
    );
    daemon.stop().await;
}

/// `until` meets a breakpoint: one on the way stops the run first, as in
/// pdb, and the run is over (CONTINUE then goes to the next hit).
#[tokio::test]
async fn until_stops_first_at_a_breakpoint_on_the_way() {
    let (daemon, mut sub) = watched().await;
    let path = fixture("python/until.py");
    let (session, pause) = start(&daemon, &mut sub, "loop").await;
    let body = line_of(&path, "body");
    dap::add_breakpoint(&daemon, source_spec(path.to_str().unwrap(), body)).await;
    answer(&daemon, &pause.key, until(line_of(&path, "never")))
        .await
        .unwrap();
    let at = dap::next_pause(&mut sub, &session).await;
    assert_eq!(at.reason, PauseReason::Breakpoint as i32, "{at:?}");
    assert_eq!(at.location.as_ref().unwrap().line, body);
    assert_eq!(dap::local(&at, "i"), "0");
    answer(
        &daemon,
        &at.key,
        Command::Resume(stepd_proto::v1::ContinueCommand {}),
    )
    .await
    .unwrap();
    let next = dap::next_pause(&mut sub, &session).await;
    assert_eq!(next.reason, PauseReason::Breakpoint as i32, "{next:?}");
    assert_eq!(dap::local(&next, "i"), "1", "the until run is over");
    daemon.stop().await;
}

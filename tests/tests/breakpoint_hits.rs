//! What a breakpoint hit does, end to end against the real adapters and a
//! probe: steps that land on breakpoints stepd does not stop at, Pause
//! requests during auto-continued hits, log points with conditions, two
//! breakpoints on one line, coalesced events, and label selectors.

use stepd_e2e::{Daemon, Subscription, dap, fixture, line_of, source_spec, watched};
use stepd_proto::v1::{
    BreakpointAction, BreakpointChange, BreakpointSpec, ConnectRequest, ConnectResponse,
    ContinueRequest, Event, Hello, Hit, LaunchRequest, ListBreakpointsRequest, NextCommand, NoWait,
    PauseReason, PauseRequest, PointInfo, ProbeMatch, ResumeDecision, TraceCommand, Wait,
    breakpoint_service_client::BreakpointServiceClient, breakpoint_spec::Location,
    connect_request::Message as In, connect_response::Message as Out, continue_request,
    debug_command::Command, event::Payload, pause_request,
    probe_service_client::ProbeServiceClient,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// The two lldb adapters, as commands.
const LLDB: &[&str] = &["lldb-dap-19", "lldb-vscode-14"];

/// Launches a fixture under an adapter kind, with an explicit adapter command
/// for lldb.
async fn launch(daemon: &Daemon, adapter: &str, program: &str, args: &[&str]) -> String {
    let (kind, command) = if adapter.starts_with("lldb") {
        ("lldb", vec![adapter.to_string()])
    } else {
        (adapter, Vec::new())
    };
    dap::launch_with(
        daemon,
        LaunchRequest {
            adapter: kind.into(),
            adapter_command: command,
            program: program.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        },
    )
    .await
    .session
    .expect("a session")
    .id
}

fn hello_c() -> (std::path::PathBuf, String) {
    let built = fixture("build/hello");
    assert!(built.is_file(), "run scripts/build-fixtures");
    (fixture("c/hello.c"), built.to_str().unwrap().to_owned())
}

/// The next stop of a session, or None when it ended first.
async fn stop_or_end(sub: &mut Subscription, session_id: &str) -> Option<stepd_proto::v1::Pause> {
    let event = sub
        .wait_for("a stop or the end", |e| {
            e.session_id == session_id
                && matches!(
                    e.payload,
                    Some(Payload::Stopped(_) | Payload::SessionEnded(_))
                )
        })
        .await;
    match event.payload {
        Some(Payload::Stopped(s)) => s.pause,
        _ => None,
    }
}

fn is_hit_update(e: &Event, bp: &str) -> bool {
    matches!(&e.payload, Some(Payload::BreakpointUpdated(u))
        if u.change == BreakpointChange::Hit as i32
            && u.breakpoint.as_ref().is_some_and(|b| b.id == bp))
}

fn line(pause: &stepd_proto::v1::Pause) -> u32 {
    pause.location.as_ref().map_or(0, |l| l.line)
}

// ----- defect: a step that lands on a breakpoint stepd does not stop at ------

#[tokio::test]
async fn debugpy_next_over_a_call_whose_breakpoint_does_not_stop_ends_on_the_next_line() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/loop.py");
    let path = program.to_str().unwrap();
    let mut call = source_spec(path, line_of(&program, "call"));
    call.condition = "i == 2".into();
    dap::add_breakpoint(&daemon, call).await;
    // Inside the called function; its hit condition never passes.
    let mut inside = source_spec(path, line_of(&program, "step"));
    inside.hit_condition = "==100".into();
    dap::add_breakpoint(&daemon, inside).await;
    let session = launch(&daemon, "debugpy", path, &[]).await;
    let pause = dap::next_pause(&mut sub, &session).await;
    assert_eq!(dap::local(&pause, "i"), "2");
    dap::answer(&daemon, &pause.key, Command::Next(NextCommand {}))
        .await
        .unwrap();
    let stepped = stop_or_end(&mut sub, &session)
        .await
        .expect("the NEXT ends in a pause, not at the program's end");
    assert_eq!(stepped.reason, PauseReason::Step as i32, "{stepped:?}");
    assert_eq!(line(&stepped), line_of(&program, "after_call"));
    assert_eq!(dap::local(&stepped, "i"), "2");
    daemon.stop().await;
}

#[tokio::test]
async fn debugpy_next_onto_a_log_point_stepd_carries_out_logs_once_and_ends_there() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/loop.py");
    let path = program.to_str().unwrap();
    let mut stop = source_spec(path, line_of(&program, "step"));
    stop.condition = "i == 2".into();
    dap::add_breakpoint(&daemon, stop).await;
    // A hit condition is stepd's to count, so stepd carries this log out.
    let mut log = source_spec(path, line_of(&program, "step_return"));
    log.action = BreakpointAction::Log as i32;
    log.log_message = "landed i={i}".into();
    log.hit_condition = ">=1".into();
    let log = dap::add_breakpoint(&daemon, log).await;
    let session = launch(&daemon, "debugpy", path, &[]).await;
    let pause = dap::next_pause(&mut sub, &session).await;
    assert_eq!(dap::local(&pause, "i"), "2");
    dap::answer(&daemon, &pause.key, Command::Next(NextCommand {}))
        .await
        .unwrap();
    let stepped = stop_or_end(&mut sub, &session)
        .await
        .expect("the NEXT ends in a pause");
    assert_eq!(stepped.reason, PauseReason::Step as i32);
    assert_eq!(line(&stepped), line_of(&program, "step_return"));
    assert!(stepped.breakpoint_ids.is_empty());
    let text = dap::output_text(&daemon, &session).await;
    for i in 0..3 {
        assert_eq!(text.matches(&format!("landed i={i}")).count(), 1, "{text}");
    }
    let listed = BreakpointServiceClient::new(daemon.channel().await)
        .list_breakpoints(ListBreakpointsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .breakpoints;
    assert_eq!(listed.iter().find(|b| b.id == log).unwrap().hit_count, 3);
    daemon.stop().await;
}

#[tokio::test]
async fn lldb_next_onto_a_log_point_ends_there_and_logs_once() {
    let (source, program) = hello_c();
    let src = source.to_str().unwrap();
    for adapter in LLDB {
        let (daemon, mut sub) = watched().await;
        let mut stop = source_spec(src, line_of(&source, "step"));
        stop.hit_condition = "==3".into();
        dap::add_breakpoint(&daemon, stop).await;
        let mut log = source_spec(src, line_of(&source, "step_return"));
        log.action = BreakpointAction::Log as i32;
        log.log_message = "logged i={i}".into();
        dap::add_breakpoint(&daemon, log).await;
        let session = launch(&daemon, adapter, &program, &[]).await;
        let pause = dap::next_pause(&mut sub, &session).await;
        assert_eq!(dap::local(&pause, "i"), "2", "{adapter}");
        dap::answer(&daemon, &pause.key, Command::Next(NextCommand {}))
            .await
            .unwrap();
        let stepped = stop_or_end(&mut sub, &session)
            .await
            .unwrap_or_else(|| panic!("{adapter}: the NEXT ran to the program's end"));
        assert_eq!(stepped.reason, PauseReason::Step as i32, "{adapter}");
        assert_eq!(line(&stepped), line_of(&source, "step_return"), "{adapter}");
        assert_eq!(dap::local(&stepped, "i"), "2", "{adapter}");
        let text = dap::output_text(&daemon, &session).await;
        assert_eq!(text.matches("logged i=2").count(), 1, "{adapter}: {text}");
        daemon.stop().await;
    }
}

#[tokio::test]
async fn trace_goes_through_breakpoints_that_do_not_stop() {
    let (source, program) = hello_c();
    let src = source.to_str().unwrap();
    for adapter in LLDB {
        let (daemon, mut sub) = watched().await;
        let mut first = source_spec(src, line_of(&source, "step"));
        first.hit_condition = "==1".into();
        dap::add_breakpoint(&daemon, first).await;
        let mut never = source_spec(src, line_of(&source, "step_return"));
        never.hit_condition = "==100".into();
        dap::add_breakpoint(&daemon, never).await;
        let session = launch(&daemon, adapter, &program, &[]).await;
        let pause = dap::next_pause(&mut sub, &session).await;
        dap::answer(
            &daemon,
            &pause.key,
            Command::Trace(TraceCommand { max_steps: 5 }),
        )
        .await
        .unwrap();
        let mut steps = 0;
        let end = sub
            .wait_for("the trace's end", |e| {
                if e.session_id != session {
                    return false;
                }
                match &e.payload {
                    Some(Payload::Trace(t)) if t.key == pause.key => {
                        steps += 1;
                        false
                    }
                    Some(Payload::Stopped(_) | Payload::SessionEnded(_)) => true,
                    _ => false,
                }
            })
            .await;
        assert_eq!(steps, 5, "{adapter}");
        let Some(Payload::Stopped(stopped)) = end.payload else {
            panic!("{adapter}: the trace ran to the program's end")
        };
        assert_eq!(
            stopped.pause.unwrap().reason,
            PauseReason::Step as i32,
            "{adapter}"
        );
        daemon.stop().await;
    }
}

// ----- defect: a Pause request during auto-continued hits ---------------------

/// Launches the busy loop under `adapter` with `breakpoint` added, and
/// returns once the loop runs; the loop ends when the returned directory's
/// `stop` file exists.
async fn busy_running(
    daemon: &Daemon,
    sub: &mut Subscription,
    adapter: &str,
    program: &str,
    breakpoint: BreakpointSpec,
) -> (String, stepd_e2e::TempDir) {
    let stop_file = stepd_e2e::TempDir::new("stop");
    dap::add_breakpoint(daemon, breakpoint).await;
    let session = launch(
        daemon,
        adapter,
        program,
        &[stop_file.path().join("stop").to_str().unwrap()],
    )
    .await;
    sub.wait_for("the program's first output", |e| {
        e.session_id == session
            && matches!(&e.payload, Some(Payload::Output(o))
                if o.chunk.as_ref().is_some_and(|c| c.text.contains("busy: started")))
    })
    .await;
    (session, stop_file)
}

/// A Pause that waits up to 10 s for the session to be stable.
async fn pause_until_stable(daemon: &Daemon, session: &str) -> stepd_proto::v1::StableState {
    dap::sessions(daemon)
        .await
        .pause(PauseRequest {
            session_id: session.to_owned(),
            wait: Some(pause_request::Wait::UntilStable(Wait {
                timeout_ms: Some(10_000),
            })),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .state
        .unwrap()
}

async fn pause_hot_loop(adapter: &str, program: &str, source: &std::path::Path) {
    let (daemon, mut sub) = watched().await;
    let mut never = source_spec(source.to_str().unwrap(), line_of(source, "busy"));
    never.hit_condition = "==1000000000".into();
    let (session, stop_file) = busy_running(&daemon, &mut sub, adapter, program, never).await;
    let mut sessions = dap::sessions(&daemon).await;
    for round in 0..4 {
        let state = pause_until_stable(&daemon, &session).await;
        assert!(!state.timed_out, "{adapter} round {round}: {state:?}");
        assert_eq!(
            state.stop_reason,
            PauseReason::PauseRequest as i32,
            "{adapter} round {round}"
        );
        sessions
            .r#continue(ContinueRequest {
                session_id: session.clone(),
                wait: Some(continue_request::Wait::NoWait(NoWait {})),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    std::fs::write(stop_file.path().join("stop"), "").unwrap();
    daemon.stop().await;
}

#[tokio::test]
async fn a_pause_request_wins_over_hits_that_do_not_stop_debugpy() {
    let program = fixture("python/busy.py");
    pause_hot_loop("debugpy", program.to_str().unwrap(), &program).await;
}

// Under lldb an interrupt that crosses a breakpoint stop leaves the adapter
// reporting nothing more (docs/adapters/lldb.md); stepd takes the next hit
// instead, so the hot loop pauses under both lldb adapters too.
#[tokio::test]
async fn a_pause_request_wins_over_hits_that_do_not_stop_lldb() {
    let built = fixture("build/busy");
    for adapter in LLDB {
        pause_hot_loop(adapter, built.to_str().unwrap(), &fixture("c/busy.c")).await;
    }
}

// The other side of the same rule: with a breakpoint placed that the loop
// never reaches, no stop comes by itself, and the Pause interrupts lldb.
#[tokio::test]
async fn a_pause_with_breakpoints_that_are_not_hit_interrupts_lldb() {
    let built = fixture("build/busy");
    let source = fixture("c/busy.c");
    for adapter in LLDB {
        let (daemon, mut sub) = watched().await;
        let after = source_spec(source.to_str().unwrap(), line_of(&source, "stopped"));
        let (session, stop_file) =
            busy_running(&daemon, &mut sub, adapter, built.to_str().unwrap(), after).await;
        let state = pause_until_stable(&daemon, &session).await;
        assert!(!state.timed_out, "{adapter}: {state:?}");
        assert_eq!(
            state.stop_reason,
            PauseReason::PauseRequest as i32,
            "{adapter}"
        );
        let pause = state.pause.unwrap();
        assert!(pause.breakpoint_ids.is_empty(), "{adapter}: {pause:?}");
        assert_eq!(pause.raw_reason, "exception", "{adapter}: lldb's SIGSTOP");
        std::fs::write(stop_file.path().join("stop"), "").unwrap();
        daemon.stop().await;
    }
}

// ----- defect: log points with conditions -----------------------------------

async fn conditional_logs(adapter: &str, program: &str, source: &std::path::Path) {
    let (daemon, mut sub) = watched().await;
    let src = source.to_str().unwrap();
    let mut log = source_spec(src, line_of(source, "step_return"));
    log.action = BreakpointAction::Log as i32;
    log.log_message = "first i={i}".into();
    log.condition = "i < 3".into();
    log.hit_condition = ">=2".into();
    dap::add_breakpoint(&daemon, log).await;
    let mut only = source_spec(src, line_of(source, "after_call"));
    only.action = BreakpointAction::Log as i32;
    only.log_message = "second i={i}".into();
    only.condition = "i == 4".into();
    dap::add_breakpoint(&daemon, only).await;
    let session = launch(&daemon, adapter, program, &[]).await;
    assert!(
        stop_or_end(&mut sub, &session).await.is_none(),
        "{adapter}: log points never stop"
    );
    let text = dap::output_text(&daemon, &session).await;
    for wanted in ["first i=1", "first i=2", "second i=4"] {
        assert!(text.contains(wanted), "{adapter}: {wanted} in {text}");
    }
    for unwanted in ["first i=0", "first i=3", "first i=4", "second i=3"] {
        assert!(!text.contains(unwanted), "{adapter}: {unwanted} in {text}");
    }
    daemon.stop().await;
}

#[tokio::test]
async fn log_points_honour_their_condition_and_hit_condition() {
    let program = fixture("python/loop.py");
    conditional_logs("debugpy", program.to_str().unwrap(), &program).await;
    let (source, built) = hello_c();
    for adapter in LLDB {
        conditional_logs(adapter, &built, &source).await;
    }
}

// ----- defect: two breakpoints on one line -----------------------------------

async fn two_on_one_line(adapter: &str, program: &str, source: &std::path::Path) {
    let (daemon, mut sub) = watched().await;
    let src = source.to_str().unwrap();
    let at = line_of(source, "step");
    let mut stop = source_spec(src, at);
    stop.condition = "i >= 2".into();
    let stop_id = dap::add_breakpoint(&daemon, stop).await;
    let mut log = source_spec(src, at);
    log.action = BreakpointAction::Log as i32;
    log.log_message = "both i={i}".into();
    dap::add_breakpoint(&daemon, log).await;
    let session = launch(&daemon, adapter, program, &[]).await;
    let mut sessions = dap::sessions(&daemon).await;
    let mut seen = Vec::new();
    while let Some(pause) = stop_or_end(&mut sub, &session).await {
        assert_eq!(
            pause.breakpoint_ids,
            std::slice::from_ref(&stop_id),
            "{adapter}"
        );
        seen.push(dap::local(&pause, "i").to_owned());
        sessions
            .r#continue(ContinueRequest {
                session_id: session.clone(),
                wait: Some(continue_request::Wait::NoWait(NoWait {})),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    assert_eq!(seen, ["2", "3", "4"], "{adapter}");
    let text = dap::output_text(&daemon, &session).await;
    for i in 0..5 {
        assert_eq!(
            text.matches(&format!("both i={i}")).count(),
            1,
            "{adapter}: {text}"
        );
    }
    daemon.stop().await;
}

#[tokio::test]
async fn two_breakpoints_on_one_line_each_act() {
    let program = fixture("python/loop.py");
    two_on_one_line("debugpy", program.to_str().unwrap(), &program).await;
    let (source, built) = hello_c();
    for adapter in LLDB {
        two_on_one_line(adapter, &built, &source).await;
    }
}

// ----- defect: event floods ---------------------------------------------------

/// Continues a session and counts the `continued` events until its next stop
/// or end.
async fn continued_until_next_stop(
    daemon: &Daemon,
    sub: &mut Subscription,
    session: &str,
) -> (usize, Option<stepd_proto::v1::Pause>) {
    dap::sessions(daemon)
        .await
        .r#continue(ContinueRequest {
            session_id: session.into(),
            wait: Some(continue_request::Wait::NoWait(NoWait {})),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut continued = 0;
    let end = sub
        .wait_for("the next stop", |e| {
            if e.session_id != session {
                return false;
            }
            if matches!(e.payload, Some(Payload::Continued(_))) {
                continued += 1;
            }
            matches!(
                e.payload,
                Some(Payload::Stopped(_) | Payload::SessionEnded(_))
            )
        })
        .await;
    let pause = match end.payload {
        Some(Payload::Stopped(s)) => s.pause,
        _ => None,
    };
    (continued, pause)
}

#[tokio::test]
async fn one_continued_per_resume_and_hit_updates_are_batched() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/hot.py");
    let path = program.to_str().unwrap();
    let mut every = source_spec(path, line_of(&program, "work"));
    every.hit_condition = "%100".into();
    let bp = dap::add_breakpoint(&daemon, every).await;
    let session = launch(&daemon, "debugpy", path, &["300"]).await;
    let mut hit_updates = 0;
    let first = sub
        .wait_for("the first stop", |e| {
            hit_updates += usize::from(is_hit_update(e, &bp));
            e.session_id == session && matches!(e.payload, Some(Payload::Stopped(_)))
        })
        .await;
    let Some(Payload::Stopped(_)) = first.payload else {
        unreachable!()
    };
    for _ in 0..3 {
        let (continued, _) = continued_until_next_stop(&daemon, &mut sub, &session).await;
        assert_eq!(continued, 1, "one continued event per resume");
    }
    // 300 hits, 297 of them auto-continued: their counts are published in
    // batches, not one event each.
    let listed = BreakpointServiceClient::new(daemon.channel().await)
        .list_breakpoints(ListBreakpointsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .breakpoints;
    assert_eq!(listed[0].hit_count, 300);
    daemon.stop().await;
    assert!(
        hit_updates < 60,
        "{hit_updates} hit updates before the first stop"
    );
}

#[tokio::test]
async fn lldb_dap_resumes_publish_one_continued_each() {
    let (source, program) = hello_c();
    let (daemon, mut sub) = watched().await;
    dap::add_breakpoint(
        &daemon,
        source_spec(source.to_str().unwrap(), line_of(&source, "step")),
    )
    .await;
    let session = launch(&daemon, "lldb-dap-19", &program, &[]).await;
    dap::next_pause(&mut sub, &session).await;
    for _ in 0..2 {
        let (continued, pause) = continued_until_next_stop(&daemon, &mut sub, &session).await;
        assert!(pause.is_some());
        assert_eq!(continued, 1, "one continued event per resume");
    }
    daemon.stop().await;
}

// ----- defect: label selectors and sessions without labels -------------------

#[tokio::test]
async fn a_selector_does_not_match_a_session_without_labels() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/loop.py");
    let path = program.to_str().unwrap();
    let mut sub_only = source_spec(path, line_of(&program, "step"));
    sub_only.label_selector = "agent=sub".into();
    dap::add_breakpoint(&daemon, sub_only).await;
    let mut unlabelled = source_spec(path, line_of(&program, "after_call"));
    unlabelled.label_selector = "!agent".into();
    let unlabelled = dap::add_breakpoint(&daemon, unlabelled).await;
    let session = launch(&daemon, "debugpy", path, &[]).await;
    let pause = dap::next_pause(&mut sub, &session).await;
    assert_eq!(pause.breakpoint_ids, [unlabelled]);
    assert_eq!(line(&pause), line_of(&program, "after_call"));
    daemon.stop().await;
}

async fn probe_armed(
    daemon: &Daemon,
) -> (
    mpsc::Sender<ConnectRequest>,
    tonic::Streaming<ConnectResponse>,
    Vec<String>,
) {
    let (tx, rx) = mpsc::channel(16);
    tx.send(ConnectRequest {
        message: Some(In::Hello(Hello {
            name: "agent".into(),
            language: "test".into(),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut rx = ProbeServiceClient::new(daemon.channel().await)
        .connect(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let welcome = match next_out(&mut rx).await {
        Out::Welcome(w) => w,
        other => panic!("expected Welcome, got {other:?}"),
    };
    let ids = welcome
        .armed
        .unwrap()
        .matchers
        .into_iter()
        .map(|m| m.breakpoint_id)
        .collect();
    (tx, rx, ids)
}

async fn next_out(rx: &mut tonic::Streaming<ConnectResponse>) -> Out {
    tokio::time::timeout(stepd_e2e::DEADLINE, rx.message())
        .await
        .expect("a message in time")
        .unwrap()
        .expect("the stream is open")
        .message
        .unwrap()
}

fn probe_spec(selector: &str) -> BreakpointSpec {
    BreakpointSpec {
        location: Some(Location::Probe(ProbeMatch {
            point_kind: "tool_call".into(),
            name_glob: "*".into(),
            ..Default::default()
        })),
        label_selector: selector.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_selector_does_not_match_a_probe_without_labels() {
    let daemon = Daemon::start(&[]).await;
    dap::add_breakpoint(&daemon, probe_spec("agent=sub")).await;
    let everywhere = dap::add_breakpoint(&daemon, probe_spec("")).await;
    let unlabelled = dap::add_breakpoint(&daemon, probe_spec("!agent")).await;
    let (_tx, _rx, armed) = probe_armed(&daemon).await;
    assert_eq!(armed, [everywhere, unlabelled]);
    daemon.stop().await;
}

// ----- probes carry out actions -------------------------------------------------

#[tokio::test]
async fn probe_log_and_snapshot_breakpoints_do_not_hold() {
    let (daemon, mut sub) = watched().await;
    let mut log = probe_spec("");
    log.action = BreakpointAction::Log as i32;
    log.log_message = "tool {name} ran {value.cmd}".into();
    let log = dap::add_breakpoint(&daemon, log).await;
    let mut snap = probe_spec("");
    snap.action = BreakpointAction::Snapshot as i32;
    let snap = dap::add_breakpoint(&daemon, snap).await;
    let (tx, mut rx, _) = probe_armed(&daemon).await;
    let payload = prost_types::Value {
        kind: Some(prost_types::value::Kind::StructValue(prost_types::Struct {
            fields: [(
                "cmd".to_string(),
                prost_types::Value {
                    kind: Some(prost_types::value::Kind::StringValue("ls".into())),
                },
            )]
            .into(),
        })),
    };
    for (hit_id, bp) in [("h1", &log), ("h2", &snap)] {
        tx.send(ConnectRequest {
            message: Some(In::Hit(Hit {
                hit_id: hit_id.into(),
                point: Some(PointInfo {
                    kind: "tool_call".into(),
                    name: "Bash".into(),
                    payload: Some(payload.clone()),
                    ..Default::default()
                }),
                breakpoint_ids: vec![bp.clone()],
                ..Default::default()
            })),
        })
        .await
        .unwrap();
        let resume = loop {
            if let Out::Resume(r) = next_out(&mut rx).await {
                break r;
            }
        };
        assert_eq!(resume.hit_id, hit_id);
        assert_eq!(resume.decision, ResumeDecision::Continue as i32);
    }
    let mut logged = false;
    sub.wait_for("the snapshot", |e| {
        if let Some(Payload::Output(o)) = &e.payload {
            logged |= o
                .chunk
                .as_ref()
                .is_some_and(|c| c.text.contains("tool Bash ran ls"));
        }
        assert!(
            !matches!(e.payload, Some(Payload::Stopped(_))),
            "no hold: {e:?}"
        );
        matches!(&e.payload, Some(Payload::BreakpointSnapshot(s)) if s.breakpoint_id == snap)
    })
    .await;
    assert!(logged);
    daemon.stop().await;
}

//! Session-level behaviour across adapters: attach, several sessions at
//! once, serialised execution, threads, adapters that must not be used.

use std::process::Stdio;

use stepd_e2e::{
    Subscription, TempDir, dap, fixture, line_of, reason, source_spec, tools_path, watched,
};
use stepd_proto::v1::{
    AttachRequest, DisconnectMode, DisconnectRequest, EndReason, LaunchRequest,
    ListSessionsRequest, ListThreadsRequest, PauseReason, SessionState, StepKind, StepRequest,
    Watch, event::Payload,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tonic::Code;

/// A free loopback port (the OS picks it; debugpy is told to listen there).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn attach_to_a_debugpy_listener_then_detach() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/busy.py");
    let stop = TempDir::new("att");
    let stop_file = stop.path().join("stop");
    let port = free_port();
    let mut debuggee = tokio::process::Command::new("python3")
        .env("PATH", tools_path())
        .args(["-m", "debugpy", "--listen", &format!("127.0.0.1:{port}")])
        .arg(&program)
        .arg(&stop_file)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The program prints once it runs, by then debugpy listens.
    let mut lines = BufReader::new(debuggee.stdout.take().unwrap()).lines();
    tokio::time::timeout(stepd_e2e::DEADLINE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("busy") {
                return;
            }
        }
    })
    .await
    .expect("the debuggee started");
    let attached = dap::sessions(&daemon)
        .await
        .attach(AttachRequest {
            adapter: "debugpy".into(),
            connect: format!("127.0.0.1:{port}"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let session = attached.session.unwrap();
    // The session record names the debuggee, in GetSession and ListSessions.
    let pid = dap::published_pid(&daemon, &mut sub, &session).await;
    assert_eq!(pid, i64::from(debuggee.id().unwrap()));
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
    assert_eq!(state.stop_reason, PauseReason::PauseRequest as i32);
    // An attached program has no QUIT: stepd did not start it.
    let pause = state.pause.unwrap();
    assert!(
        !pause
            .input_type
            .contains(&(stepd_proto::v1::CommandKind::Quit as i32))
    );
    dap::sessions(&daemon)
        .await
        .disconnect(DisconnectRequest {
            session_id: session.id.clone(),
            mode: DisconnectMode::Detach.into(),
        })
        .await
        .unwrap();
    let ended = dap::ended(&mut sub, &session.id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.reason, EndReason::Detached as i32);
    // Detached, the program runs on until told to stop.
    assert!(
        debuggee.try_wait().unwrap().is_none(),
        "the program still runs"
    );
    std::fs::write(&stop_file, b"").unwrap();
    let status = tokio::time::timeout(stepd_e2e::DEADLINE, debuggee.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    daemon.stop().await;
}

#[tokio::test]
async fn attach_to_a_running_c_program_by_pid() {
    let (daemon, mut sub) = watched().await;
    let stop = TempDir::new("attc");
    let stop_file = stop.path().join("stop");
    let mut debuggee = tokio::process::Command::new(fixture("build/busy"))
        .arg(&stop_file)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(debuggee.stdout.take().unwrap()).lines();
    let started = tokio::time::timeout(stepd_e2e::DEADLINE, lines.next_line())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(started.as_deref(), Some("busy: started"));
    let session = dap::sessions(&daemon)
        .await
        .attach(AttachRequest {
            adapter: "lldb".into(),
            pid: i64::from(debuggee.id().unwrap()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    let pid = dap::published_pid(&daemon, &mut sub, &session).await;
    assert_eq!(pid, i64::from(debuggee.id().unwrap()));
    let threads = dap::sessions(&daemon)
        .await
        .list_threads(ListThreadsRequest {
            session_id: session.id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .threads;
    assert!(!threads.is_empty());
    dap::sessions(&daemon)
        .await
        .disconnect(DisconnectRequest {
            session_id: session.id.clone(),
            mode: DisconnectMode::Detach.into(),
        })
        .await
        .unwrap();
    dap::ended(&mut sub, &session.id).await;
    std::fs::write(&stop_file, b"").unwrap();
    let status = tokio::time::timeout(stepd_e2e::DEADLINE, debuggee.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "the detached program finished on its own");
    daemon.stop().await;
}

#[tokio::test]
async fn attach_to_a_running_go_program_by_pid_names_it() {
    // Without an adapter named, the process's executable says Go: dlv.
    for adapter in ["dlv", ""] {
        attach_to_go_busy(adapter).await;
    }
}

async fn attach_to_go_busy(adapter: &str) {
    let (daemon, mut sub) = watched().await;
    let stop = TempDir::new("attg");
    let stop_file = stop.path().join("stop");
    let mut debuggee = tokio::process::Command::new(fixture("build/go-busy"))
        .arg(&stop_file)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(debuggee.stdout.take().unwrap()).lines();
    let started = tokio::time::timeout(stepd_e2e::DEADLINE, lines.next_line())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(started.as_deref(), Some("busy: started"));
    let session = dap::sessions(&daemon)
        .await
        .attach(AttachRequest {
            adapter: adapter.into(),
            pid: i64::from(debuggee.id().unwrap()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(session.adapter, "dlv", "{adapter:?}");
    let pid = dap::published_pid(&daemon, &mut sub, &session).await;
    assert_eq!(pid, i64::from(debuggee.id().unwrap()));
    dap::sessions(&daemon)
        .await
        .disconnect(DisconnectRequest {
            session_id: session.id.clone(),
            mode: DisconnectMode::Detach.into(),
        })
        .await
        .unwrap();
    dap::ended(&mut sub, &session.id).await;
    std::fs::write(&stop_file, b"").unwrap();
    let status = tokio::time::timeout(stepd_e2e::DEADLINE, debuggee.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "the detached program finished on its own");
    daemon.stop().await;
}

#[tokio::test]
async fn sessions_of_different_adapters_run_at_once_and_steps_queue_in_order() {
    let (daemon, mut sub) = watched().await;
    let py = fixture("python/loop.py");
    let c = fixture("c/hello.c");
    dap::add_breakpoint(
        &daemon,
        source_spec(py.to_str().unwrap(), line_of(&py, "call")),
    )
    .await;
    dap::add_breakpoint(
        &daemon,
        source_spec(c.to_str().unwrap(), line_of(&c, "call")),
    )
    .await;
    let (python, native) = tokio::join!(
        dap::launch(&daemon, "debugpy", py.to_str().unwrap(), &[]),
        dap::launch_with(
            &daemon,
            LaunchRequest {
                adapter: "lldb".into(),
                program: fixture("build/hello").to_str().unwrap().into(),
                ..Default::default()
            }
        )
    );
    let (python, native) = (python.session.unwrap(), native.session.unwrap());
    dap::next_pause(&mut sub, &python.id).await;
    let listed = dap::sessions(&daemon)
        .await
        .list_sessions(ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .sessions;
    let adapters: Vec<_> = listed.iter().map(|s| s.adapter.as_str()).collect();
    assert!(
        adapters.contains(&"debugpy") && adapters.contains(&"lldb"),
        "{adapters:?}"
    );

    // Two steps sent at once run one after the other, in order.
    let step = |kind: StepKind| {
        let id = python.id.clone();
        let daemon_addr = daemon.addr.clone();
        async move {
            let channel = tonic::transport::Channel::from_shared(format!("http://{daemon_addr}"))
                .unwrap()
                .connect()
                .await
                .unwrap();
            stepd_proto::v1::session_service_client::SessionServiceClient::new(channel)
                .step(StepRequest {
                    session_id: id,
                    kind: kind.into(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .state
                .unwrap()
        }
    };
    let first = step(StepKind::In);
    let second = step(StepKind::Over);
    let (a, b) = tokio::join!(first, async {
        // Sent after the first is queued.
        tokio::task::yield_now().await;
        second.await
    });
    let a_frame = a.top_frame.unwrap();
    let b_frame = b.top_frame.unwrap();
    // Whatever order they were accepted in, each ran on the state the other left.
    let lines = [
        a_frame.location.unwrap().line,
        b_frame.location.unwrap().line,
    ];
    // Both succeeded: the second ran once the first had stopped again (sent
    // while the program ran, it would have failed with NOT_STOPPED).
    assert_ne!(lines[0], lines[1], "the steps did not run on the same stop");
    // Its stop may have come while the test waited for the Python one: the
    // snapshot of a session-filtered subscription has it either way.
    let mut native_sub = Subscription::open(
        daemon.channel().await,
        Watch {
            session_ids: vec![native.id.clone()],
            ..Default::default()
        },
    )
    .await;
    let snapshot = native_sub.next().await;
    let native_pause = match snapshot.payload {
        Some(Payload::Snapshot(s)) if !s.pauses.is_empty() => s.pauses[0].clone(),
        _ => dap::next_pause(&mut native_sub, &native.id).await,
    };
    assert_eq!(native_pause.location.unwrap().line, line_of(&c, "call"));
    daemon.stop().await;
}

#[tokio::test]
async fn gdb_older_than_14_is_not_tried() {
    let (daemon, _sub) = watched().await;
    let gdb = std::process::Command::new("gdb").arg("--version").output();
    let major = gdb
        .ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.lines()
                .next()?
                .rsplit(' ')
                .next()?
                .split('.')
                .next()?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(0);
    let result = dap::sessions(&daemon)
        .await
        .launch(LaunchRequest {
            adapter: "gdb".into(),
            program: fixture("build/hello").to_str().unwrap().into(),
            ..Default::default()
        })
        .await;
    if major < 14 {
        let err = result.unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition);
        assert_eq!(reason(&err), "ADAPTER_NOT_FOUND");
        assert!(err.message().contains("14"), "{}", err.message());
    } else {
        assert!(result.is_ok(), "gdb {major} speaks DAP: {result:?}");
    }
    daemon.stop().await;
}

#[tokio::test]
async fn threads_stop_with_their_own_pauses() {
    let (daemon, mut sub) = watched().await;
    let program = fixture("python/threads.py");
    let path = program.to_str().unwrap();
    dap::add_breakpoint(&daemon, source_spec(path, line_of(&program, "work"))).await;
    let session = dap::launch(&daemon, "debugpy", path, &[])
        .await
        .session
        .unwrap();
    let first = dap::next_pause(&mut sub, &session.id).await;
    let threads = dap::sessions(&daemon)
        .await
        .list_threads(ListThreadsRequest {
            session_id: session.id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .threads;
    // worker-b may not have started yet when worker-a stops.
    let names: Vec<_> = threads.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"worker-a"), "{names:?}");
    let stopped = threads.iter().find(|t| t.id == first.thread_id).unwrap();
    assert_eq!(stopped.name, "worker-a");
    assert_eq!(stopped.pause_key, first.key);
    dap::sessions(&daemon)
        .await
        .r#continue(stepd_proto::v1::ContinueRequest {
            session_id: session.id.clone(),
            wait: Some(stepd_proto::v1::continue_request::Wait::NoWait(
                stepd_proto::v1::NoWait {},
            )),
            ..Default::default()
        })
        .await
        .unwrap();
    let second = dap::next_pause(&mut sub, &session.id).await;
    assert_ne!(second.key, first.key, "each stop has its own key");
    assert_ne!(
        second.thread_id, first.thread_id,
        "worker-b stopped on its own thread"
    );
    let threads = dap::sessions(&daemon)
        .await
        .list_threads(ListThreadsRequest {
            session_id: session.id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .threads;
    let b = threads.iter().find(|t| t.id == second.thread_id).unwrap();
    assert_eq!(b.name, "worker-b");
    assert_eq!(b.pause_key, second.key);
    let state = dap::sessions(&daemon)
        .await
        .get_session(stepd_proto::v1::GetSessionRequest {
            session_id: session.id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(state.session.unwrap().state, SessionState::Stopped as i32);
    assert_eq!(state.pauses.len(), 1);
    assert_eq!(state.pauses[0].key, second.key);
    daemon.stop().await;
}

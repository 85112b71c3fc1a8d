//! Faults around a DAP session's start: an adapter that breaks the protocol
//! before the session runs, a Launch whose caller goes away, and Launch
//! requests whose paths stepd must refuse or resolve. The faulty adapter is
//! a custom adapter (`adapter_command`) that speaks bad DAP on purpose.

use std::time::Duration;

use stepd_e2e::{
    DEADLINE, Daemon, TempDir, dap, fixture, reason, source_spec, violated_fields, watched,
};
use stepd_proto::v1::{
    AddBreakpointRequest, LaunchRequest, ListSessionsRequest,
    breakpoint_service_client::BreakpointServiceClient, event::Payload,
};
use tonic::Code;

fn faulty(mode: &str, pid_file: Option<&std::path::Path>) -> Vec<String> {
    let mut command = vec![
        "python3".to_owned(),
        fixture("adapters/faulty.py").display().to_string(),
        mode.to_owned(),
    ];
    command.extend(pid_file.map(|p| p.display().to_string()));
    command
}

/// Whether a process still runs (gone, or a zombie, is not running).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
    })
}

/// Polls until `done` holds, failing after the deadline.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    tokio::time::timeout(DEADLINE, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} before the deadline"));
}

#[tokio::test]
async fn adapter_faults_while_starting_fail_launch_with_protocol_error() {
    let (daemon, _sub) = watched().await;
    let mut sessions = dap::sessions(&daemon).await;
    for (mode, names) in [
        ("garbage", "malformed header"),
        ("huge", "99999999999"),
        ("badjson", "invalid JSON"),
    ] {
        let err = sessions
            .launch(LaunchRequest {
                adapter_command: faulty(mode, None),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Internal, "{mode}: {err:?}");
        assert_eq!(reason(&err), "PROTOCOL_ERROR", "{mode}: {err:?}");
        assert!(err.message().contains(names), "{mode}: {err:?}");
    }
    // The daemon carries on, with nothing left of the three.
    let listed = sessions
        .list_sessions(ListSessionsRequest {
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
async fn a_cancelled_launch_kills_its_adapter_and_debuggee() {
    let (daemon, _sub) = watched().await;
    let dir = TempDir::new("cancel");
    let pid_file = dir.path().join("pids");
    let mut sessions = dap::sessions(&daemon).await;
    let launch = sessions.launch(LaunchRequest {
        adapter_command: faulty("hang", Some(&pid_file)),
        ..Default::default()
    });
    // The adapter never says `initialized`: the Launch waits, and is
    // cancelled (dropped) once the adapter has started its debuggee.
    let pids = tokio::select! {
        answer = launch => panic!("the launch answered: {answer:?}"),
        pids = async {
            eventually("the adapter's pid file", || pid_file.exists()).await;
            std::fs::read_to_string(&pid_file).unwrap()
        } => pids,
    };
    let pids: Vec<u32> = pids
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let (adapter, debuggee) = (pids[0], pids[1]);
    assert!(adapter > 0 && debuggee > 0, "{pids:?}");
    eventually("the adapter is killed", || !running(adapter)).await;
    eventually("the debuggee is killed", || !running(debuggee)).await;
    let listed = sessions
        .list_sessions(ListSessionsRequest {
            include_ended: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert!(listed.is_empty(), "nothing lingers: {listed:?}");
    daemon.stop().await;
}

#[tokio::test]
async fn nul_in_launch_paths_and_breakpoint_paths_is_invalid_argument() {
    let (daemon, _sub) = watched().await;
    let hello = fixture("python/hello.py").display().to_string();
    let err = dap::sessions(&daemon)
        .await
        .launch(LaunchRequest {
            adapter: "debugpy".into(),
            program: format!("{hello}\0.txt"),
            cwd: "/tmp\0/x".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(reason(&err), "INVALID_ARGUMENT");
    let fields = violated_fields(&err);
    assert!(fields.contains(&"program".to_owned()), "{fields:?}");
    assert!(fields.contains(&"cwd".to_owned()), "{fields:?}");
    let err = BreakpointServiceClient::new(daemon.channel().await)
        .add_breakpoint(AddBreakpointRequest {
            spec: Some(source_spec(&format!("{hello}\0"), 3)),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(violated_fields(&err), ["spec.source.path"]);
    daemon.stop().await;
}

#[tokio::test]
async fn a_relative_program_is_resolved_against_cwd_and_refused_without_one() {
    let (daemon, mut sub) = watched().await;
    let mut sessions = dap::sessions(&daemon).await;
    let err = sessions
        .launch(LaunchRequest {
            adapter: "debugpy".into(),
            program: "python/hello.py".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(violated_fields(&err), ["program"]);
    assert!(err.message().contains("absolute"), "{err:?}");
    let err = sessions
        .launch(LaunchRequest {
            adapter: "debugpy".into(),
            program: fixture("python/hello.py").display().to_string(),
            cwd: "tests/fixtures".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(violated_fields(&err), ["cwd"], "{err:?}");
    // With an absolute cwd, the program is found there, and the session
    // names it by its full path.
    let launched = sessions
        .launch(LaunchRequest {
            adapter: "debugpy".into(),
            program: "python/hello.py".into(),
            cwd: fixture("").display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let session = launched.session.unwrap();
    assert_eq!(
        session.program,
        fixture("python/hello.py").display().to_string()
    );
    let ended = dap::ended(&mut sub, &session.id).await;
    let Some(Payload::SessionEnded(end)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(end.exit_code, Some(3), "{end:?}");
    daemon.stop().await;
}

#[tokio::test]
async fn launch_environment_and_arguments_are_not_logged_even_at_trace() {
    let dir = TempDir::new("trace");
    let log_path = dir.path().join("stderr.log");
    let data = dir.path().join("data");
    let mut command = Daemon::command(&data, &[]);
    command
        .env("RUST_LOG", "trace")
        .stderr(std::fs::File::create(&log_path).unwrap());
    let daemon = Daemon::spawn(command, &data).await;
    let mut sub =
        stepd_e2e::Subscription::open(daemon.channel().await, stepd_proto::v1::Watch::default())
            .await;
    sub.next().await;
    let mut request = LaunchRequest {
        adapter: "debugpy".into(),
        program: fixture("python/hello.py").display().to_string(),
        args: vec!["--password=arg-secret-5d1e".into()],
        ..Default::default()
    };
    request
        .env
        .insert("STEPD_TEST_TOKEN".into(), "env-secret-8c3f".into());
    let session = dap::launch_with(&daemon, request).await.session.unwrap();
    dap::ended(&mut sub, &session.id).await;
    daemon.stop().await;
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("STEPD_TEST_TOKEN"),
        "the launch was logged at trace, with the variable's name"
    );
    for secret in ["env-secret-8c3f", "arg-secret-5d1e"] {
        let line = log.lines().find(|l| l.contains(secret));
        assert!(line.is_none(), "{secret} logged: {line:?}");
    }
}

//! `--redact`: a local named `password` (and a dict key and an attribute of
//! that name) never leaves the daemon, under the real debugpy: not in a
//! pause, an EVAL, an Evaluate, a variables listing, an inspector rendering,
//! a printed value, a snapshot, a trace event or a Step's reply.

use stepd_e2e::{Daemon, Subscription, dap, fixture, line_of, source_spec};
use stepd_proto::v1::{
    BreakpointAction, EvalCommand, EvaluateRequest, GetStackTraceRequest, ListScopesRequest,
    ListVariablesRequest, LocalsCommand, StepKind, TraceCommand, Watch, debug_command::Command,
    event::Payload,
};

const SECRET: &str = "hunter2";

#[tokio::test]
async fn a_redacted_name_never_leaves_the_daemon() {
    let daemon = Daemon::start(&["--redact", "password"]).await;
    // Everything the daemon sends on a stream, kept as text.
    let (seen, recorder) = Subscription::record_everything(daemon.channel().await).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;

    let program = fixture("python/secret.py");
    let path = program.to_str().unwrap();
    dap::add_breakpoint(&daemon, source_spec(path, line_of(&program, "use"))).await;
    let mut snapshot = source_spec(path, line_of(&program, "loop"));
    snapshot.action = BreakpointAction::Snapshot as i32;
    dap::add_breakpoint(&daemon, snapshot).await;
    let session = dap::launch(&daemon, "debugpy", path, &[])
        .await
        .session
        .unwrap();
    let pause = dap::next_pause(&mut sub, &session.id).await;
    assert_eq!(dap::local(&pause, "password"), "<redacted>");
    assert_eq!(dap::local(&pause, "user"), "'ann'");
    let creds = dap::local(&pause, "creds");
    assert!(creds.contains("'password': <redacted>"), "{creds}");

    let mut answers = String::new();
    for code in ["password", "creds", "obj.password", "creds['password']"] {
        let shown = dap::answer(
            &daemon,
            &pause.key,
            Command::Eval(EvalCommand { code: code.into() }),
        )
        .await
        .unwrap();
        answers.push_str(&format!("{shown:?}\n"));
    }
    let locals = dap::answer(&daemon, &pause.key, Command::Locals(LocalsCommand {}))
        .await
        .unwrap();
    answers.push_str(&format!("{locals:?}\n"));

    let mut sessions = dap::sessions(&daemon).await;
    let frame = sessions
        .get_stack_trace(GetStackTraceRequest {
            session_id: session.id.clone(),
            thread_id: pause.thread_id,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .frames[0]
        .id
        .clone();
    for expression in ["password", "creds", "obj"] {
        let value = sessions
            .evaluate(EvaluateRequest {
                session_id: session.id.clone(),
                expression: expression.into(),
                frame_id: frame.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        answers.push_str(&format!("{value:?}\n"));
    }
    let scopes = sessions
        .list_scopes(ListScopesRequest {
            session_id: session.id.clone(),
            frame_id: frame.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .scopes;
    let variables = sessions
        .list_variables(ListVariablesRequest {
            session_id: session.id.clone(),
            variables_ref: scopes[0].variables_ref.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .variables;
    let password = variables.iter().find(|v| v.name == "password").unwrap();
    assert_eq!(password.value, "<redacted>");
    for v in &variables {
        // The containers' children too.
        if !v.variables_ref.is_empty() {
            let children = sessions
                .list_variables(ListVariablesRequest {
                    session_id: session.id.clone(),
                    variables_ref: v.variables_ref.clone(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            answers.push_str(&format!("{children:?}\n"));
        }
    }
    answers.push_str(&format!("{variables:?}\n"));

    // A trace through the loop, then on to the snapshot and the end.
    dap::answer(
        &daemon,
        &pause.key,
        Command::Trace(TraceCommand { max_steps: 4 }),
    )
    .await
    .unwrap();
    sub.wait_for("a trace event", |e| {
        matches!(e.payload, Some(Payload::Trace(_)))
    })
    .await;
    dap::next_pause(&mut sub, &session.id).await;
    // A Step's reply carries the pause it stopped at, with its locals.
    let stepped = dap::step(&mut sessions, &session.id, StepKind::Over).await;
    let locals = &stepped.pause.as_ref().expect("the step's pause").locals;
    assert!(locals.iter().any(|l| l.name == "password"), "{stepped:?}");
    answers.push_str(&format!("{stepped:?}\n"));
    dap::resume(&mut sessions, &session.id).await;
    dap::ended(&mut sub, &session.id).await;
    daemon.stop().await;
    // The stream ends with the daemon: everything it sent has been kept.
    recorder.await.unwrap();

    assert!(!answers.contains(SECRET), "{answers}");
    assert!(answers.contains("<redacted>"), "{answers}");
    let seen = seen.lock().unwrap().clone();
    assert!(seen.contains("BreakpointSnapshot"), "the snapshot was seen");
    assert!(seen.contains("Trace("), "the trace was seen");
    assert!(!seen.contains(SECRET), "{seen}");
}

//! One table of pause-protocol cases, run against both kinds of session:
//! the real DAP actor over a scripted adapter on `tokio::io::duplex`, and
//! the real probe actor over a scripted probe stream, both behind the real
//! registry and pause book. What each real adapter does is tested end to end
//! in `tests/`; these cases hold the two kinds to the same rules.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};
use stepd_proto::v1::{
    CommandKind, ConnectRequest, ConnectResponse, DebugCommand, DebugInput, DisconnectMode,
    ErrorReason, EvalCommand, EvalResult, Event, ExpressionCommand, Hello, HereCommand, Hit,
    NextCommand, Pause, PointInfo, ProbeCapabilities, SendDebugInputResponse, StacktraceCommand,
    Watch, connect_request::Message as In, connect_response::Message as Out,
    debug_command::Command, event::Payload,
};
use tokio::{
    io::{AsyncWriteExt, BufReader},
    sync::{broadcast, mpsc},
};
use tokio_stream::wrappers::ReceiverStream;

use stepd_core::session::{Context, SessionHandle, Sessions, pause::PauseRegistry};
use stepd_core::{
    breakpoints::Breakpoints,
    error::ApiResult,
    events::{EventBus, Filter},
    inspector::Inspectors,
};
use stepd_dap::{
    adapters::{Adapter, AdapterKind},
    codec::{read_frame, write_frame},
    session::{self as dap_session, LaunchRequest},
    transport::Transport,
};
use stepd_store::Store;

const DEADLINE: Duration = Duration::from_secs(10);

/// The daemon's parts a session needs, over a private store.
struct World {
    ctx: Context,
    sessions: Arc<Sessions>,
    events: broadcast::Receiver<Arc<stepd_core::events::Published>>,
    _dir: TempDir,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn world() -> World {
    let dir = std::env::temp_dir().join(format!("stepd-core-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = Store::open(&dir).await.unwrap();
    let bus = Arc::new(EventBus::new("test".into(), 1, 1024, 1024));
    let (_, events) = bus.subscribe(&Filter::from_watch(&Watch::default()), None, "");
    let ctx = Context {
        breakpoints: Arc::new(
            Breakpoints::load(Arc::new(store), bus.clone())
                .await
                .unwrap(),
        ),
        pauses: Arc::new(PauseRegistry::new(bus.clone())),
        inspectors: Arc::new(Inspectors::new(bus.clone(), Duration::from_secs(60), 16)),
        bus,
        redactor: Default::default(),
    };
    World {
        ctx,
        sessions: Sessions::new(),
        events,
        _dir: TempDir(dir),
    }
}

impl World {
    /// The next event that `matches`, within the deadline.
    async fn wait(&mut self, what: &str, matches: impl Fn(&Event) -> bool) -> Event {
        tokio::time::timeout(DEADLINE, async {
            loop {
                let event = self.events.recv().await.expect("the bus is open");
                if matches(&event) {
                    return (*event).clone();
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {what} in time"))
    }

    /// The next `stopped` event's pause, optionally with a revision above `after`.
    async fn pause(&mut self, after: Option<u32>) -> Pause {
        let event = self
            .wait("a stopped event", |e| match &e.payload {
                Some(Payload::Stopped(s)) => s
                    .pause
                    .as_ref()
                    .is_some_and(|p| after.is_none_or(|r| p.revision > r)),
                _ => false,
            })
            .await;
        match event.payload {
            Some(Payload::Stopped(s)) => s.pause.unwrap(),
            _ => unreachable!(),
        }
    }

    async fn answer(&self, key: &str, command: Command) -> ApiResult<SendDebugInputResponse> {
        let input = DebugInput {
            key: key.to_owned(),
            command: Some(DebugCommand {
                command: Some(command),
            }),
            client_name: "test".into(),
        };
        self.ctx.pauses.answer(input, "test".into()).await
    }
}

// ----- the scripted adapter ----------------------------------------------

/// A DAP adapter that stops at line 3 of /app/main.py, evaluates any
/// expression to itself except `boom` (refused) and `malformed` (a number
/// where the protocol has a string), and stops again after every step; the
/// stop after `stepIn` names no reason.
async fn scripted_adapter(stream: tokio::io::DuplexStream) {
    let (read, mut write) = tokio::io::split(stream);
    let mut read = BufReader::new(read);
    let mut seq = 1000;
    let mut send = async |write: &mut tokio::io::WriteHalf<tokio::io::DuplexStream>,
                          mut message: Value| {
        seq += 1;
        message["seq"] = json!(seq);
        write_frame(write, &message).await.is_ok()
    };
    let stopped = |reason: &str| {
        json!({"type": "event", "event": "stopped",
               "body": {"reason": reason, "threadId": 1, "allThreadsStopped": true}})
    };
    while let Ok(request) = read_frame(&mut read, 1 << 20).await {
        let command = request["command"].as_str().unwrap_or_default().to_owned();
        let args = &request["arguments"];
        let (success, body, message) = match command.as_str() {
            "initialize" => (true, json!({"supportsConfigurationDoneRequest": true}), ""),
            "threads" => (true, json!({"threads": [{"id": 1, "name": "main"}]}), ""),
            "stackTrace" => (
                true,
                json!({"stackFrames": [{"id": 11, "name": "main", "line": 3, "column": 1,
                                        "source": {"path": "/app/main.py"}}],
                       "totalFrames": 1}),
                "",
            ),
            "scopes" => (
                true,
                json!({"scopes": [{"name": "Locals", "variablesReference": 7, "expensive": false}]}),
                "",
            ),
            "variables" => (
                true,
                json!({"variables": [{"name": "x", "value": "41", "variablesReference": 0}]}),
                "",
            ),
            "evaluate" if args["expression"] == "boom" => {
                (false, Value::Null, "NameError: name 'boom' is not defined")
            }
            "evaluate" if args["expression"] == "malformed" => (true, json!({"result": 42}), ""),
            "evaluate" => (
                true,
                json!({"result": args["expression"], "variablesReference": 0}),
                "",
            ),
            _ => (true, json!({}), ""),
        };
        let response = json!({"type": "response", "request_seq": request["seq"],
                              "command": command, "success": success,
                              "message": message, "body": body});
        if !send(&mut write, response).await {
            return;
        }
        let after = match command.as_str() {
            "launch" => vec![json!({"type": "event", "event": "initialized"})],
            "configurationDone" => vec![stopped("breakpoint")],
            "next" | "stepOut" => vec![stopped("step")],
            "stepIn" => vec![json!({"type": "event", "event": "stopped",
                                    "body": {"threadId": 1, "allThreadsStopped": true}})],
            "disconnect" | "terminate" => {
                vec![json!({"type": "event", "event": "terminated"})]
            }
            _ => Vec::new(),
        };
        for event in after {
            if !send(&mut write, event).await {
                return;
            }
        }
    }
    let _ = write.shutdown().await;
}

// ----- the two kinds -------------------------------------------------------

/// A session of either kind, stopped at its first pause.
struct Stopped {
    handle: SessionHandle,
    pause: Pause,
    /// The probe's side of its stream (probe sessions only).
    probe: Option<ScriptedProbe>,
}

/// The test's side of a probe stream, answering evaluations like the
/// adapter does: every expression is itself, except `boom`.
struct ScriptedProbe {
    tx: mpsc::Sender<Result<ConnectRequest, tonic::Status>>,
    resumes: mpsc::UnboundedReceiver<stepd_proto::v1::Resume>,
}

impl ScriptedProbe {
    async fn hit(&self, id: &str) {
        let hit = Hit {
            hit_id: id.into(),
            point: Some(PointInfo {
                kind: "tool_call".into(),
                name: "Bash".into(),
                scope_path: vec!["turn".into()],
                ..Default::default()
            }),
            coor: vec![0, 1],
            ..Default::default()
        };
        let message = ConnectRequest {
            message: Some(In::Hit(hit)),
        };
        self.tx.send(Ok(message)).await.unwrap();
    }
}

async fn dap_session(world: &mut World) -> Stopped {
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    tokio::spawn(scripted_adapter(theirs));
    let (read, write) = tokio::io::split(ours);
    let transport = Transport {
        child: None,
        reader: Box::pin(BufReader::new(read)),
        writer: Box::pin(write),
        stderr: None,
    };
    let adapter = Adapter {
        kind: AdapterKind::Custom,
        command: Vec::new(),
        version: String::new(),
    };
    let request = LaunchRequest {
        program: "/app/main.py".into(),
        ..Default::default()
    };
    let (children, _) = mpsc::unbounded_channel();
    let mut registration =
        stepd_core::session::Registration::new(world.sessions.clone(), "test").unwrap();
    let outcome = dap_session::launch::run(
        world.ctx.clone(),
        dap_session::DapSettings {
            max_frame_bytes: 1 << 20,
            request_timeout: DEADLINE,
        },
        children,
        request,
        adapter,
        transport,
        &mut registration,
    )
    .await
    .unwrap();
    registration.keep();
    let handle = world.sessions.get(&outcome.session.id).unwrap();
    let pause = world.pause(None).await;
    Stopped {
        handle,
        pause,
        probe: None,
    }
}

async fn probe_session(world: &mut World) -> Stopped {
    let (tx, rx) = mpsc::channel(16);
    let (out, mut out_rx) = mpsc::channel::<Result<ConnectResponse, tonic::Status>>(64);
    let hello = Hello {
        name: "agent".into(),
        capabilities: Some(ProbeCapabilities {
            eval: true,
            skip: true,
            edit: true,
        }),
        ..Default::default()
    };
    stepd_probe::start(
        world.ctx.clone(),
        stepd_probe::ProbeSettings {
            hold_limit: Duration::from_secs(600),
            max_pauses: 1024,
            heartbeat_interval: Duration::from_secs(30),
        },
        &world.sessions,
        hello,
        "test",
        out,
        ReceiverStream::new(rx),
    )
    .unwrap();
    // The probe side: evaluations are answered, resumes are kept for the test.
    let (resumes_tx, resumes) = mpsc::unbounded_channel();
    // Weak, so dropping the probe's side ends its stream.
    let evals = tx.downgrade();
    tokio::spawn(async move {
        while let Some(Ok(message)) = out_rx.recv().await {
            match message.message {
                Some(Out::Eval(eval)) => {
                    let (value, error) = if eval.code == "boom" {
                        (
                            String::new(),
                            "NameError: name 'boom' is not defined".into(),
                        )
                    } else {
                        (eval.code.clone(), String::new())
                    };
                    let result = EvalResult {
                        eval_id: eval.eval_id,
                        value,
                        error,
                        ..Default::default()
                    };
                    let message = ConnectRequest {
                        message: Some(In::EvalResult(result)),
                    };
                    if let Some(evals) = evals.upgrade() {
                        let _ = evals.send(Ok(message)).await;
                    }
                }
                Some(Out::Resume(resume)) => {
                    let _ = resumes_tx.send(resume);
                }
                _ => {}
            }
        }
    });
    let probe = ScriptedProbe { tx, resumes };
    probe.hit("h1").await;
    let pause = world.pause(None).await;
    let handle = world.sessions.get(&pause.session_id).unwrap();
    Stopped {
        handle,
        pause,
        probe: Some(probe),
    }
}

/// Runs `case` against a fresh session of each kind.
async fn both_kinds<F>(case: F)
where
    F: AsyncFn(&mut World, &mut Stopped),
{
    for kind in ["dap", "probe"] {
        let mut world = world().await;
        let mut stopped = match kind {
            "dap" => dap_session(&mut world).await,
            _ => probe_session(&mut world).await,
        };
        case(&mut world, &mut stopped).await;
    }
}

fn reason(result: ApiResult<SendDebugInputResponse>) -> ErrorReason {
    result.map(|_| ()).unwrap_err().reason()
}

// ----- the table -----------------------------------------------------------

#[tokio::test]
async fn a_refused_move_leaves_the_pause_as_it_was_and_the_next_answer_works() {
    both_kinds(async |world, s| {
        // HERE with neither a line nor a coordinate is refused by both kinds.
        let refused = world
            .answer(&s.pause.key, Command::Here(HereCommand::default()))
            .await;
        assert_eq!(reason(refused), ErrorReason::InvalidArgument);
        let listed = world.ctx.pauses.get(&s.pause.key).expect("still pending");
        assert_eq!(listed.revision, s.pause.revision);
        assert_eq!(listed.input_type, s.pause.input_type);
        world
            .answer(&s.pause.key, Command::Next(NextCommand {}))
            .await
            .unwrap();
        let resolved = world
            .wait(
                "pause_resolved",
                |e| matches!(&e.payload, Some(Payload::PauseResolved(r)) if r.key == s.pause.key),
            )
            .await;
        let Some(Payload::PauseResolved(r)) = resolved.payload else {
            unreachable!()
        };
        assert_eq!(r.command, CommandKind::Next as i32);
        assert_eq!(r.by, "test");
        // The program moved: the probe was resumed (the adapter stepped).
        if let Some(probe) = &mut s.probe {
            let resume = tokio::time::timeout(DEADLINE, probe.resumes.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(resume.hit_id, "h1");
        }
    })
    .await;
}

#[tokio::test]
async fn the_first_moving_answer_wins() {
    both_kinds(async |world, s| {
        world
            .answer(&s.pause.key, Command::Next(NextCommand {}))
            .await
            .unwrap();
        let second = world
            .answer(&s.pause.key, Command::Next(NextCommand {}))
            .await;
        assert_eq!(reason(second), ErrorReason::AlreadyAnswered);
    })
    .await;
}

#[tokio::test]
async fn eval_shows_its_result_and_a_failed_one_fails_the_call_and_re_prompts() {
    both_kinds(async |world, s| {
        let shown = world
            .answer(
                &s.pause.key,
                Command::Eval(EvalCommand { code: "6*7".into() }),
            )
            .await
            .unwrap()
            .pause
            .unwrap();
        assert_eq!(shown.debug_value.unwrap().text, "6*7");
        assert!(shown.revision > s.pause.revision);
        let failed = world
            .answer(
                &s.pause.key,
                Command::Eval(EvalCommand {
                    code: "boom".into(),
                }),
            )
            .await;
        assert_eq!(reason(failed), ErrorReason::AdapterError);
        let error = world
            .wait(
                "eval_error",
                |e| matches!(&e.payload, Some(Payload::EvalError(err)) if err.key == s.pause.key),
            )
            .await;
        let Some(Payload::EvalError(error)) = error.payload else {
            unreachable!()
        };
        assert!(error.message.contains("NameError"), "{}", error.message);
        let again = world.pause(Some(shown.revision)).await;
        assert_eq!(again.key, s.pause.key);
        assert!(world.ctx.pauses.get(&s.pause.key).is_some());
    })
    .await;
}

#[tokio::test]
async fn an_expression_prompt_holds_the_commands_until_the_expression_comes() {
    both_kinds(async |world, s| {
        let asked = world
            .answer(&s.pause.key, Command::Eval(EvalCommand::default()))
            .await
            .unwrap()
            .pause
            .unwrap();
        assert_eq!(asked.input_type, [CommandKind::Expression as i32]);
        assert!(!asked.prompt.is_empty());
        let early = world
            .answer(&s.pause.key, Command::Next(NextCommand {}))
            .await;
        assert_eq!(reason(early), ErrorReason::InvalidCommand);
        let done = world
            .answer(
                &s.pause.key,
                Command::Expression(ExpressionCommand { code: "x".into() }),
            )
            .await
            .unwrap()
            .pause
            .unwrap();
        assert_eq!(done.debug_value.unwrap().text, "x");
        assert_eq!(done.input_type, s.pause.input_type);
        assert!(done.prompt.is_empty());
    })
    .await;
}

#[tokio::test]
async fn stacktrace_sends_the_stack_and_re_prompts() {
    both_kinds(async |world, s| {
        let again = world
            .answer(&s.pause.key, Command::Stacktrace(StacktraceCommand {}))
            .await
            .unwrap()
            .pause
            .unwrap();
        assert!(again.revision > s.pause.revision);
        world
            .wait(
                "stack",
                |e| matches!(&e.payload, Some(Payload::Stack(st)) if st.key == s.pause.key),
            )
            .await;
    })
    .await;
}

#[tokio::test]
async fn a_pause_of_an_ended_session_was_answered_by_nobody() {
    both_kinds(async |world, s| {
        // The program goes away: the adapter ends, or the probe's stream does.
        match s.probe.take() {
            Some(probe) => drop(probe),
            None => s
                .handle
                .disconnect(DisconnectMode::Terminate)
                .await
                .unwrap(),
        }
        let resolved = world
            .wait(
                "pause_resolved",
                |e| matches!(&e.payload, Some(Payload::PauseResolved(r)) if r.key == s.pause.key),
            )
            .await;
        let Some(Payload::PauseResolved(r)) = resolved.payload else {
            unreachable!()
        };
        assert_eq!(r.command, CommandKind::Unspecified as i32);
        let late = world
            .answer(&s.pause.key, Command::Next(NextCommand {}))
            .await
            .unwrap_err();
        assert_eq!(late.reason(), ErrorReason::SessionEnded, "{late}");
    })
    .await;
}

#[tokio::test]
async fn a_malformed_adapter_answer_is_reported_not_read_as_empty() {
    let mut world = world().await;
    let s = dap_session(&mut world).await;
    let failed = world
        .answer(
            &s.pause.key,
            Command::Eval(EvalCommand {
                code: "malformed".into(),
            }),
        )
        .await;
    let err = failed.expect_err("a malformed evaluate answer fails the EVAL");
    assert_eq!(err.reason(), ErrorReason::ProtocolError);
    assert!(
        err.message().contains("malformed evaluate response"),
        "{}",
        err.message()
    );
    // The pause is as it was: the next answer moves the program.
    world
        .answer(
            &s.pause.key,
            Command::StepIn(stepd_proto::v1::StepInCommand {}),
        )
        .await
        .unwrap();
    // A stop without a reason is still a stop, and the fault is said.
    let warned = world
        .wait("the adapter's fault", |e| {
            matches!(&e.payload, Some(Payload::Notification(n)) if n.message.contains("without a reason"))
        })
        .await;
    assert_eq!(warned.session_id, s.handle.id());
    let next = world.pause(None).await;
    assert_ne!(next.key, s.pause.key);
    assert_eq!(next.location.unwrap().line, 3);
}

/// A port with nothing behind it, for the mailbox's own tests.
struct Bare(&'static str);

impl stepd_core::session::SessionPort for Bare {
    fn id(&self) -> &str {
        self.0
    }

    fn kind(&self) -> stepd_proto::v1::SessionKind {
        stepd_proto::v1::SessionKind::Probe
    }

    fn pause_node<'a>(
        &'a self,
        _: &'a Pause,
        _: &'a stepd_core::session::PauseTarget,
    ) -> stepd_core::session::Fut<'a, Arc<dyn stepd_core::inspector::value::Node>> {
        Box::pin(async {
            Err(stepd_core::error::ApiError::invalid_field(
                "pause",
                "no pauses here",
            ))
        })
    }
}

#[tokio::test]
async fn breakpoint_changes_reach_a_busy_actor_once_and_first() {
    use stepd_core::session::Command as Cmd;
    let (handle, mut mailbox) = stepd_core::session::mailbox(Arc::new(Bare("bare")));
    for _ in 0..stepd_core::session::MAILBOX {
        let (reply, _) = tokio::sync::oneshot::channel();
        handle.send(Cmd::Shutdown { reply }).unwrap();
    }
    // The queue is full: the changes wait in the flag, not lost.
    handle.reapply();
    handle.reapply();
    assert!(matches!(mailbox.recv().await, Some(Cmd::Reapply)));
    for _ in 0..stepd_core::session::MAILBOX {
        assert!(matches!(mailbox.recv().await, Some(Cmd::Shutdown { .. })));
    }
    // Two changes to an idle actor are one Reapply; the message that woke
    // it for them is not a second.
    handle.reapply();
    handle.reapply();
    assert!(matches!(mailbox.recv().await, Some(Cmd::Reapply)));
    // A change while the last wake-up is still queued sends none: however
    // many changes come, one wake-up at most takes a slot.
    for _ in 0..stepd_core::session::MAILBOX * 2 {
        handle.reapply();
        assert!(matches!(mailbox.recv().await, Some(Cmd::Reapply)));
    }
    for _ in 0..stepd_core::session::MAILBOX - 1 {
        let (reply, _) = tokio::sync::oneshot::channel();
        handle
            .send(Cmd::Shutdown { reply })
            .expect("a wake-up takes one slot at most");
    }
    for _ in 0..stepd_core::session::MAILBOX - 1 {
        assert!(matches!(mailbox.recv().await, Some(Cmd::Shutdown { .. })));
    }
    drop(handle);
    assert!(mailbox.recv().await.is_none(), "nothing more");
}

/// The daemon's shutdown asks every session to end at once: one slow to
/// end (an adapter that takes its time to disconnect) holds up no other.
#[tokio::test]
async fn shutdown_ends_every_session_at_once() {
    use stepd_core::session::Command as Cmd;
    let sessions = stepd_core::session::Sessions::new();
    let mut mailboxes = Vec::new();
    for id in ["slow", "other"] {
        let (handle, mailbox) = stepd_core::session::mailbox(Arc::new(Bare(id)));
        sessions.insert(handle);
        mailboxes.push(mailbox);
    }
    let shutdown = tokio::spawn({
        let sessions = sessions.clone();
        async move { sessions.shutdown(Duration::from_secs(60)).await }
    });
    // Both are asked before either has answered.
    let mut replies = Vec::new();
    for mailbox in &mut mailboxes {
        let asked = tokio::time::timeout(Duration::from_secs(10), mailbox.recv())
            .await
            .expect("asked to end while another session has not answered yet");
        let Some(Cmd::Shutdown { reply }) = asked else {
            panic!("not a shutdown: {asked:?}");
        };
        replies.push(reply);
    }
    for reply in replies {
        let _ = reply.send(Ok(()));
    }
    tokio::time::timeout(Duration::from_secs(10), shutdown)
        .await
        .expect("the shutdown ends once every session has")
        .unwrap();
}

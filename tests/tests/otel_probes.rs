//! Probe libraries in programs that trace themselves, against a real Jaeger
//! (`.tools/bin/jaeger`; the tests fail when it is absent): a Python
//! HTTP service (examples/traced_service, OpenTelemetry SDK exporting to
//! the same Jaeger) and a Go program (tests/fixtures/go/tracedprobe) each
//! hold 2 s inside their own request span; the request's trace then holds
//! stepd's pause as a child of that span, as long as the hold, naming the
//! command that ended it and who gave it.

use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    process::Stdio,
    time::{Duration, Instant},
};

use serde_json::Value as Json;
use stepd_e2e::{
    DEADLINE, Subscription, TempDir, dap, fixture,
    jaeger::{Jaeger, find, operation, parent_of, service_of, span_id, tag, traced_daemon},
    repo_root,
};
use stepd_proto::v1::{
    BreakpointSpec, ContinueCommand, Pause, ProbeMatch, Watch, breakpoint_spec::Location,
    debug_command::Command, event::Payload,
};
use tokio::{
    io::{AsyncBufReadExt as _, BufReader, Lines},
    process::{Child, ChildStdout},
};

/// How long each program is held: the pause's span must be at least this long.
const HELD: Duration = Duration::from_secs(2);

async fn arm_transfer(daemon: &stepd_e2e::Daemon) {
    dap::add_breakpoint(
        daemon,
        BreakpointSpec {
            location: Some(Location::Probe(ProbeMatch {
                point_kind: "tool_call".into(),
                name_glob: "transfer".into(),
                ..Default::default()
            })),
            ..Default::default()
        },
    )
    .await;
}

/// The next new pause of any session.
async fn next_pause(sub: &mut Subscription) -> Pause {
    let event = sub
        .wait_for("a stopped event", |e| match &e.payload {
            Some(Payload::Stopped(s)) => s.pause.as_ref().is_some_and(|p| p.revision == 0),
            _ => false,
        })
        .await;
    match event.payload {
        Some(Payload::Stopped(s)) => s.pause.expect("a pause"),
        _ => unreachable!(),
    }
}

/// Holds the pause `HELD` long (the hold being measured, not a wait for
/// anything), then answers CONTINUE.
async fn hold_then_continue(daemon: &stepd_e2e::Daemon, pause: &Pause) {
    tokio::time::sleep(HELD).await;
    dap::answer(daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .expect("CONTINUE answered");
}

/// The program's next stdout line, within the deadline.
async fn line(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
    tokio::time::timeout(DEADLINE, lines.next_line())
        .await
        .expect("a line from the program in time")
        .expect("stdout readable")
        .expect("the program still runs")
}

fn spawn(mut command: tokio::process::Command) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the program starts");
    let stdout = child.stdout.take().unwrap();
    (child, BufReader::new(stdout).lines())
}

/// What both programs' traces must show: under `parent` (the program's own
/// span, exported by the program as `service`), stepd's pause span, as long
/// as the hold, with the command and who gave it.
async fn assert_pause_in_program_trace(
    jaeger: &Jaeger,
    trace: &str,
    parent: &str,
    service: &str,
    pause: &Pause,
) {
    assert_eq!(pause.trace_id, trace, "{pause:?}");
    let answer = jaeger
        .trace(trace, |spans| {
            [parent, pause.span_id.as_str()]
                .iter()
                .all(|id| find(spans, |s| span_id(s) == *id).is_some())
        })
        .await;
    let spans = answer["spans"].as_array().unwrap();
    let service_of = |span: &Json| service_of(&answer, span).to_owned();
    let request = find(spans, |s| span_id(s) == parent).unwrap();
    assert_eq!(service_of(request), service, "{request:#}");
    let span = find(spans, |s| span_id(s) == pause.span_id).unwrap();
    assert_eq!(service_of(span), "stepd", "{span:#}");
    assert_eq!(parent_of(span), Some(parent), "{span:#}");
    assert_eq!(operation(span), "paused at tool_call transfer");
    let duration = Duration::from_micros(span["duration"].as_u64().unwrap());
    assert!(duration >= HELD, "span {duration:?}");
    assert_eq!(
        tag(span, "stepd.pause.command"),
        Some(&Json::from("CONTINUE"))
    );
    let by = tag(span, "stepd.pause.resolved_by").and_then(Json::as_str);
    assert!(by.is_some_and(|by| !by.is_empty()), "{span:#}");
    assert_eq!(
        tag(span, "gen_ai.operation.name"),
        Some(&Json::from("execute_tool"))
    );
    assert_eq!(tag(span, "gen_ai.tool.name"), Some(&Json::from("transfer")));
    // The request's own span lasts at least as long as its hold.
    let request_duration = Duration::from_micros(request["duration"].as_u64().unwrap());
    assert!(request_duration >= duration, "request {request_duration:?}");
}

/// One HTTP/1.1 POST with a JSON body: status code and body.
fn post(addr: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("the service accepts");
    stream
        .set_read_timeout(Some(DEADLINE + HELD))
        .expect("a read timeout");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("an answer");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP answer");
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, body.to_owned())
}

#[tokio::test]
async fn a_python_service_request_shows_its_hold_in_its_own_trace() {
    let jaeger = Jaeger::start().await;
    let dir = TempDir::new("otel-python");
    let daemon = traced_daemon(&dir, &jaeger, "").await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    arm_transfer(&daemon).await;

    let root = repo_root();
    let mut command = tokio::process::Command::new(root.join(".tools/venv/bin/python"));
    command
        .arg(root.join("examples/traced_service/service.py"))
        .args(["--port", "0"])
        .env("PYTHONPATH", root.join("clients/python/src"))
        .env("STEPD_ADDR", &daemon.addr)
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", jaeger.otlp),
        )
        .env("OTEL_SERVICE_NAME", "traced-service-test")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let (mut service, mut lines) = spawn(command);
    let listening = line(&mut lines).await;
    let addr = listening
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {listening:?}"))
        .to_owned();

    let request = tokio::task::spawn_blocking(move || {
        post(
            &addr,
            "/tools/transfer",
            r#"{"to": "savings", "amount": 5}"#,
        )
    });
    let pause = next_pause(&mut sub).await;
    hold_then_continue(&daemon, &pause).await;
    let (code, body) = request.await.unwrap();
    assert_eq!(code, 200, "{body}");
    let answer: Json = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["result"]["to"], "savings", "{answer:#}");
    let trace = answer["trace_id"].as_str().unwrap().to_owned();

    // The request's span is the service's server span, under no parent.
    let spans = jaeger
        .spans_of(&trace, |spans| {
            find(spans, |s| operation(s) == "POST /tools/transfer").is_some()
        })
        .await;
    let request = find(&spans, |s| operation(s) == "POST /tools/transfer").unwrap();
    assert_eq!(parent_of(request), None, "{request:#}");
    let parent = span_id(request).to_owned();
    assert_pause_in_program_trace(&jaeger, &trace, &parent, "traced-service-test", &pause).await;

    let _ = service.start_kill();
    daemon.stop().await;
}

#[tokio::test]
async fn a_go_programs_hold_is_a_child_of_the_span_in_its_context() {
    let jaeger = Jaeger::start().await;
    let program = fixture("build/go-tracedprobe");
    assert!(
        program.is_file(),
        "{} is missing: run scripts/build-fixtures",
        program.display()
    );
    let dir = TempDir::new("otel-go");
    let daemon = traced_daemon(&dir, &jaeger, "").await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    arm_transfer(&daemon).await;

    let mut command = tokio::process::Command::new(program);
    command
        .env("STEPD_ADDR", &daemon.addr)
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", jaeger.otlp),
        )
        .env("OTEL_SERVICE_NAME", "traced-go-test");
    let (mut child, mut lines) = spawn(command);
    let first = line(&mut lines).await;
    let ids: Vec<&str> = first.split_whitespace().collect();
    let [_, trace, parent] = ids[..] else {
        panic!("unexpected first line {first:?}")
    };
    let pause = next_pause(&mut sub).await;
    let held_from = Instant::now();
    hold_then_continue(&daemon, &pause).await;
    assert_eq!(line(&mut lines).await, "done continue");
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .expect("the program exits")
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(held_from.elapsed() >= HELD);
    assert_pause_in_program_trace(&jaeger, trace, parent, "traced-go-test", &pause).await;
    daemon.stop().await;
}

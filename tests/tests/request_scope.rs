//! Breakpoints scoped to one request in a shared mesh: a Go net/http service
//! (tests/fixtures/go/baggageservice) calls a Python service
//! (examples/traced_service), each behind its own real HAProxy, both with
//! probes and the OpenTelemetry SDK exporting to a real Jaeger. A breakpoint
//! on `tool_call transfer` scoped with `stepctl break add --baggage` to a
//! baggage entry minted by `stepctl baggage mint`: of 50 concurrent requests,
//! only the one that carries the entry holds, in each service in turn; the
//! 49 others finish while it is held; both pauses are spans of that
//! request's own trace. Stepping from its holds stays in that request: NEXT
//! lands on its next point (`tool_result`, in each service), and while both
//! probes step it, 49 more requests go through without holding.

use std::{collections::HashSet, process::Stdio, time::Duration};

use serde_json::Value as Json;
use stepd_e2e::{
    DEADLINE, Subscription, TempDir, dap, fixture,
    haproxy::Haproxy,
    jaeger::{Jaeger, find, operation, parent_of, service_of, span_id, traced_daemon},
    repo_root, stepctl_bin,
};
use stepd_proto::v1::{
    ContinueCommand, ListPausesRequest, NextCommand, Pause, Watch, debug_command::Command,
    event::Payload, session_service_client::SessionServiceClient,
};
use tokio::{
    io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader, Lines},
    net::TcpStream,
    process::{Child, ChildStdout},
    time::Instant,
};

const REQUESTS: usize = 50;
/// The request that carries the minted baggage.
const TAGGED: usize = 17;

/// The program's next stdout line, within the deadline.
async fn line(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
    tokio::time::timeout(DEADLINE, lines.next_line())
        .await
        .expect("a line from the program in time")
        .expect("stdout readable")
        .expect("the program still runs")
}

/// Starts a service and returns it with the address it prints
/// (`listening on http://ADDR`).
async fn serve(mut command: tokio::process::Command) -> (Child, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the service starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = line(&mut lines).await;
    let addr = first
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_owned();
    (child, addr)
}

fn stepctl(addr: &str, args: &[&str]) -> Json {
    let out = std::process::Command::new(stepctl_bin())
        .arg("--json")
        .args(args)
        .env("STEPD_ADDR", addr)
        .stdin(Stdio::null())
        .output()
        .expect("run stepctl");
    assert!(
        out.status.success(),
        "stepctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// One HTTP/1.1 POST with extra headers: the status code and the body.
async fn post(addr: &str, path: &str, headers: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.expect("HAProxy accepts");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{headers}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("an answer");
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP answer");
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, body.to_owned())
}

type Answer = ((u16, String), Duration);

/// REQUESTS concurrent POSTs through `addr`, request i with `headers(i)`;
/// each answers with how long it took from the burst's start.
fn burst(addr: &str, headers: impl Fn(usize) -> String) -> Vec<tokio::task::JoinHandle<Answer>> {
    burst_of(REQUESTS, addr, headers)
}

/// `count` concurrent POSTs, as `burst`.
fn burst_of(
    count: usize,
    addr: &str,
    headers: impl Fn(usize) -> String,
) -> Vec<tokio::task::JoinHandle<Answer>> {
    let started = Instant::now();
    (0..count)
        .map(|i| {
            let (addr, headers) = (addr.to_owned(), headers(i));
            tokio::spawn(async move {
                let body = format!(r#"{{"to": "savings", "amount": {}}}"#, i + 1);
                let answer = post(&addr, "/tools/transfer", &headers, &body).await;
                (answer, started.elapsed())
            })
        })
        .collect()
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

/// Waits for every request to answer 200 within the deadline; `what` says
/// what they ran beside.
async fn all_finish(requests: Vec<tokio::task::JoinHandle<Answer>>, what: &str) -> Duration {
    let mut slowest = Duration::ZERO;
    for (i, request) in requests.into_iter().enumerate() {
        let ((code, body), took) = tokio::time::timeout(DEADLINE, request)
            .await
            .unwrap_or_else(|_| panic!("request {i} finished {what}"))
            .unwrap();
        assert_eq!(code, 200, "{body}");
        slowest = slowest.max(took);
    }
    slowest
}

/// The point a pause holds at: kind and name.
fn point_of(pause: &Pause) -> (String, String) {
    let point = pause.point.clone().unwrap_or_default();
    (point.kind, point.name)
}

/// Every pending pause of the daemon.
async fn pending(daemon: &stepd_e2e::Daemon) -> Vec<Pause> {
    let mut sessions = SessionServiceClient::new(daemon.channel().await);
    sessions
        .list_pauses(ListPausesRequest::default())
        .await
        .expect("ListPauses")
        .into_inner()
        .pauses
}

#[tokio::test]
async fn only_the_request_carrying_the_baggage_holds_in_a_shared_mesh() {
    let program = fixture("build/go-baggageservice");
    assert!(
        program.is_file(),
        "{} is missing: run scripts/build-fixtures",
        program.display()
    );
    let jaeger = Jaeger::start().await;
    let dir = TempDir::new("request-scope");
    let daemon = traced_daemon(&dir, &jaeger, "").await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;

    // The person debugging mints an entry and scopes a breakpoint to it.
    let minted = stepctl(&daemon.addr, &["baggage", "mint"]);
    let selector = minted["selector"].as_str().unwrap().to_owned();
    let header = minted["header"].as_str().unwrap().to_owned();
    assert_eq!(header, format!("baggage: {selector}"));
    assert!(selector.starts_with("debug-session="), "{selector}");
    let added = stepctl(
        &daemon.addr,
        &[
            "break",
            "add",
            "--probe",
            "tool_call",
            "--name",
            "transfer",
            "--baggage",
            &selector,
        ],
    );
    let bp = added["id"].as_str().unwrap().to_owned();
    let other = stepctl(&daemon.addr, &["baggage", "mint"])["header"]
        .as_str()
        .unwrap()
        .to_owned();

    // Python behind one HAProxy, Go behind another calling it.
    let otlp = format!("http://127.0.0.1:{}", jaeger.otlp);
    let root = repo_root();
    let mut python = tokio::process::Command::new(root.join(".tools/venv/bin/python"));
    python
        .arg(root.join("examples/traced_service/service.py"))
        .args(["--port", "0"])
        .env("PYTHONPATH", root.join("clients/python/src"))
        .env("STEPD_ADDR", &daemon.addr)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp)
        .env("OTEL_SERVICE_NAME", "scope-python")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let (_python, python_addr) = serve(python).await;
    let python_proxy = Haproxy::http(&python_addr).await;
    let mut go = tokio::process::Command::new(program);
    go.env("STEPD_ADDR", &daemon.addr)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp)
        .env("OTEL_SERVICE_NAME", "scope-go")
        .env("DOWNSTREAM", format!("http://{}", python_proxy.addr));
    let (_go, go_addr) = serve(go).await;
    let ingress = Haproxy::http(&go_addr).await;

    // Both probes are connected (and so armed: Welcome carries the arming).
    let mut probes = HashSet::new();
    while probes.len() < 2 {
        let event = sub
            .wait_for("both probe sessions", |e| {
                matches!(&e.payload, Some(Payload::SessionStarted(_)))
            })
            .await;
        if let Some(Payload::SessionStarted(s)) = event.payload {
            probes.insert(s.session.unwrap_or_default().name);
        }
    }
    assert_eq!(
        probes,
        HashSet::from(["baggage-go".to_owned(), "traced-service".to_owned()])
    );

    // 50 concurrent requests: one carries the entry, a third someone else's
    // entry, the rest no baggage at all.
    let trace_id = format!(
        "{:032x}",
        (0x5c0be_u128 << 64) | u128::from(std::process::id())
    );
    let tagged_headers = format!("{header}\r\ntraceparent: 00-{trace_id}-00f067aa0ba902b7-01\r\n");
    let mut requests = burst(&ingress.addr, |i| {
        if i == TAGGED {
            tagged_headers.clone()
        } else if i % 3 == 0 {
            format!("{other}\r\n")
        } else {
            String::new()
        }
    });
    let tagged = requests.remove(TAGGED);

    // The tagged request holds in the Go service, in its own trace.
    let first = next_pause(&mut sub).await;
    assert_eq!(first.trace_id, trace_id, "{first:?}");
    assert_eq!(first.breakpoint_ids, [bp.as_str()]);
    // Every other request finishes meanwhile, at full speed: none waits on it.
    let during = all_finish(requests, "while the tagged one is held").await;
    assert!(!tagged.is_finished(), "the tagged request is still held");
    let held = pending(&daemon).await;
    assert_eq!(
        held.iter().map(|p| &p.key).collect::<Vec<_>>(),
        [&first.key],
        "only the tagged request holds"
    );
    let next = || Command::Next(NextCommand {});
    dap::answer(&daemon, &first.key, next())
        .await
        .expect("NEXT answered");

    // Then in the Python service, which got its baggage from the Go one.
    let second = next_pause(&mut sub).await;
    assert_eq!(second.trace_id, trace_id, "{second:?}");
    assert_ne!(second.session_id, first.session_id);
    assert_eq!(second.breakpoint_ids, [bp.as_str()]);
    assert_eq!(point_of(&second), ("tool_call".into(), "transfer".into()));
    dap::answer(&daemon, &second.key, next())
        .await
        .expect("NEXT answered");

    // NEXT lands on the same request's next point in Python: no breakpoint
    // is there, the step scoped to the request holds it.
    let third = next_pause(&mut sub).await;
    assert_eq!(third.trace_id, trace_id, "{third:?}");
    assert_eq!(third.session_id, second.session_id);
    assert_eq!(point_of(&third), ("tool_result".into(), "transfer".into()));
    assert!(third.breakpoint_ids.is_empty(), "{third:?}");
    dap::answer(&daemon, &third.key, next())
        .await
        .expect("NEXT answered");

    // And the Go service's step, from the first hold, lands on the same
    // request's next point there once Python answered.
    let fourth = next_pause(&mut sub).await;
    assert_eq!(fourth.trace_id, trace_id, "{fourth:?}");
    assert_eq!(fourth.session_id, first.session_id);
    assert_eq!(point_of(&fourth), ("tool_result".into(), "transfer".into()));
    assert!(fourth.breakpoint_ids.is_empty(), "{fourth:?}");

    // Both probes now step the tagged request: other requests, with no
    // baggage or someone else's, pass both services' points (each would
    // hold at the first of them were the step the whole process's).
    let others = burst_of(REQUESTS - 1, &ingress.addr, |i| {
        if i % 3 == 0 {
            format!("{other}\r\n")
        } else {
            String::new()
        }
    });
    all_finish(others, "while both probes step the tagged request").await;
    let held = pending(&daemon).await;
    assert_eq!(
        held.iter().map(|p| &p.key).collect::<Vec<_>>(),
        [&fourth.key],
        "only the tagged request holds while it is stepped"
    );
    dap::answer(&daemon, &fourth.key, Command::Resume(ContinueCommand {}))
        .await
        .expect("CONTINUE answered");
    let ((code, body), _) = tokio::time::timeout(DEADLINE, tagged)
        .await
        .expect("the tagged request finishes once answered")
        .unwrap();
    assert_eq!(code, 200, "{body}");
    let answer: Json = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["trace_id"], trace_id.as_str(), "{answer:#}");
    assert_eq!(answer["downstream"]["trace_id"], trace_id.as_str());
    assert!(pending(&daemon).await.is_empty());

    // The same burst with nobody held takes as long: the held request slowed
    // no other (a loose bound, for a loaded machine). The Python probe
    // still steps the tagged request (its last answer was NEXT): none of
    // these holds there.
    let requests = burst(&ingress.addr, |i| {
        if i % 3 == 0 {
            format!("{other}\r\n")
        } else {
            String::new()
        }
    });
    let slowest = all_finish(requests, "with nobody held").await;
    eprintln!("49 requests beside a held one: {during:?}; 50 with none held: {slowest:?}");
    assert!(
        during <= slowest * 3 + Duration::from_secs(2),
        "{during:?} against {slowest:?}"
    );
    assert!(pending(&daemon).await.is_empty());

    // Every pause is a span of the request's trace, each under its
    // service's server span.
    let trace = jaeger
        .trace(&trace_id, |spans| {
            // Each pause span is there, and so is its parent (each service
            // exports its own spans in its own time).
            [&first, &second, &third, &fourth].iter().all(|pause| {
                let id = &pause.span_id;
                find(spans, |s| span_id(s) == id.as_str())
                    .and_then(parent_of)
                    .is_some_and(|parent| find(spans, |s| span_id(s) == parent).is_some())
            })
        })
        .await;
    let spans = trace["spans"].as_array().unwrap();
    for (pause, service) in [
        (&first, "scope-go"),
        (&second, "scope-python"),
        (&third, "scope-python"),
        (&fourth, "scope-go"),
    ] {
        let span = find(spans, |s| span_id(s) == pause.span_id).unwrap();
        assert_eq!(service_of(&trace, span), "stepd", "{span:#}");
        let (kind, name) = point_of(pause);
        assert_eq!(operation(span), format!("paused at {kind} {name}"));
        let parent = parent_of(span).expect("a parent span");
        let parent = find(spans, |s| span_id(s) == parent)
            .unwrap_or_else(|| panic!("the parent of {span:#} in the trace"));
        assert_eq!(service_of(&trace, parent), service, "{parent:#}");
        assert_eq!(operation(parent), "POST /tools/transfer");
    }
    daemon.stop().await;
}

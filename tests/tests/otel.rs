//! OpenTelemetry end to end, against a real Jaeger started here (v2
//! all-in-one, in memory, every port on loopback; `.tools/bin/jaeger`,
//! failing when absent): an RPC carrying `traceparent` is a
//! child in the caller's trace; a probe's pause is a span as long as the
//! hold, naming the command that ended it and who gave it; a launched
//! program's pause carries its source location, and the program gets the
//! session's span as its TRACEPARENT; with no `OTEL_*` variable the daemon
//! opens no connection and stamps no ids.

use std::{
    net::TcpListener,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use serde_json::Value as Json;
use stepd_e2e::probe::{arm, connect_probe, hold, next};
use stepd_e2e::{
    DEADLINE, Daemon, Subscription, TempDir, dap, fixture,
    jaeger::{
        Jaeger, caller_context, command_without_otel, find, operation, parent_of, span_id, tag,
        traced_command, traced_daemon,
    },
    line_of, source_spec,
};
use stepd_proto::v1::{
    ContinueCommand, EvaluateRequest, GetSessionRequest, LaunchRequest, PingRequest, Watch,
    connect_response::Message as Out, daemon_service_client::DaemonServiceClient,
    debug_command::Command,
};

// ----- the tests ------------------------------------------------------------

#[tokio::test]
async fn an_rpc_with_traceparent_is_a_child_in_the_callers_trace() {
    let jaeger = Jaeger::start().await;
    let dir = TempDir::new("otel-rpc");
    let mut command = command_without_otel(dir.path());
    command
        .env(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            format!("http://127.0.0.1:{}", jaeger.otlp),
        )
        .env("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=otel-test")
        .env(
            "OTEL_RESOURCE_ATTRIBUTES",
            "service.name=stepd-otel-rpc,deployment.environment.name=otel-test",
        )
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let daemon = Daemon::spawn(command, dir.path()).await;
    let (traceparent, trace, parent) = caller_context(0x11);
    let mut request = tonic::Request::new(PingRequest::default());
    request
        .metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    // A health check in the same trace, before the Ping (so exported no
    // later than the Ping, were it exported), is not traced.
    let mut check = tonic::Request::new(tonic_health::pb::HealthCheckRequest::default());
    check
        .metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    tonic_health::pb::health_client::HealthClient::new(daemon.channel().await)
        .check(check)
        .await
        .unwrap();
    DaemonServiceClient::new(daemon.channel().await)
        .ping(request)
        .await
        .unwrap();

    let spans = jaeger
        .spans_of(&trace, |spans| {
            find(spans, |s| operation(s) == "stepd.v1.DaemonService/Ping").is_some()
        })
        .await;
    let ping = find(&spans, |s| operation(s) == "stepd.v1.DaemonService/Ping").unwrap();
    assert_eq!(parent_of(ping), Some(parent.as_str()), "{ping:#}");
    assert!(
        find(&spans, |s| operation(s).starts_with("grpc.health")).is_none(),
        "{spans:#?}"
    );
    assert_eq!(tag(ping, "rpc.system.name"), Some(&Json::from("grpc")));
    assert_eq!(
        tag(ping, "rpc.method"),
        Some(&Json::from("stepd.v1.DaemonService/Ping"))
    );
    assert_eq!(
        tag(ping, "rpc.response.status_code"),
        Some(&Json::from("OK"))
    );
    assert_eq!(tag(ping, "span.kind"), Some(&Json::from("server")));
    // The resource is what OTEL_RESOURCE_ATTRIBUTES says.
    let (_, body) = jaeger.get(&format!("/api/traces/{trace}")).unwrap();
    let json: Json = serde_json::from_str(&body).unwrap();
    let process = &json["data"][0]["processes"][ping["processID"].as_str().unwrap()];
    assert_eq!(process["serviceName"], "stepd-otel-rpc", "{process:#}");
    assert_eq!(
        tag(process, "deployment.environment.name"),
        Some(&Json::from("otel-test")),
        "{process:#}"
    );
    daemon.stop().await;
}

#[tokio::test]
async fn a_probe_pause_is_a_span_as_long_as_the_hold() {
    let jaeger = Jaeger::start().await;
    let dir = TempDir::new("otel-pause");
    // No OTEL_SERVICE_NAME: the service is stepd.
    let daemon = traced_daemon(&dir, &jaeger, "").await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    let (traceparent, trace, parent) = caller_context(0x22);
    let mut probe = connect_probe(&daemon, &traceparent).await;
    let breakpoint = arm(&daemon, &mut probe, "Bash").await;

    // The session is in the caller's trace, and says so.
    let session = dap::sessions(&daemon)
        .await
        .get_session(GetSessionRequest {
            session_id: probe.session_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(session.trace_id, trace);
    assert_eq!(session.span_id.len(), 16, "{session:?}");

    // The pause's span can start no sooner than the hold is sent.
    let held_from = Instant::now();
    hold(&probe, "h1", "Bash", &breakpoint, "").await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    assert_eq!(pause.trace_id, trace);
    assert_eq!(pause.span_id.len(), 16, "{pause:?}");
    // A hold of a second at least: the length measured, not a wait for
    // anything.
    tokio::time::sleep(Duration::from_secs(1)).await;
    dap::answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let held = held_from.elapsed();
    let Out::Resume(_) = next(&mut probe.rx).await else {
        panic!("expected Resume")
    };

    // A span is exported when it ends: the pause's now, the session's and
    // the Connect call's when the probe goes.
    let spans = jaeger
        .spans_of(&trace, |spans| {
            find(spans, |s| span_id(s) == pause.span_id).is_some()
        })
        .await;
    let span = find(&spans, |s| span_id(s) == pause.span_id).unwrap();
    assert_eq!(operation(span), "paused at tool_call Bash");
    let (_, body) = jaeger.get(&format!("/api/traces/{trace}")).unwrap();
    let json: Json = serde_json::from_str(&body).unwrap();
    let process = &json["data"][0]["processes"][span["processID"].as_str().unwrap()];
    assert_eq!(process["serviceName"], "stepd", "{process:#}");
    assert_eq!(parent_of(span), Some(session.span_id.as_str()), "{span:#}");
    // Jaeger's durations are in microseconds. The span starts after the
    // hold was sent and ends before the answer returns (the daemon's clock
    // and this one may differ by a few milliseconds over a second).
    let duration = Duration::from_micros(span["duration"].as_u64().unwrap());
    assert!(
        duration >= Duration::from_millis(950) && duration <= held + Duration::from_millis(10),
        "held {held:?}, span {duration:?}"
    );
    assert_eq!(
        tag(span, "stepd.pause.key"),
        Some(&Json::from(pause.key.as_str()))
    );
    assert_eq!(
        tag(span, "stepd.pause.command"),
        Some(&Json::from("CONTINUE"))
    );
    let by = tag(span, "stepd.pause.resolved_by").and_then(Json::as_str);
    assert!(by.is_some_and(|by| !by.is_empty()), "{span:#}");
    assert_eq!(tag(span, "stepd.point.name"), Some(&Json::from("Bash")));
    // A tool point is a GenAI tool execution of the tool it names.
    assert_eq!(
        tag(span, "gen_ai.operation.name"),
        Some(&Json::from("execute_tool"))
    );
    assert_eq!(tag(span, "gen_ai.tool.name"), Some(&Json::from("Bash")));
    // An array attribute; Jaeger shows it as JSON text.
    let ids = tag(span, "stepd.breakpoint.ids").map(Json::to_string);
    assert!(ids.is_some_and(|ids| ids.contains(&breakpoint)), "{span:#}");

    // A hold whose program reports its own span is a pause in the
    // program's trace, under that span, linked to the session's.
    let (program, program_trace, program_span) = caller_context(0x55);
    hold(&probe, "h2", "Bash", &breakpoint, &program).await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    assert_eq!(pause.trace_id, program_trace);
    dap::answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let Out::Resume(_) = next(&mut probe.rx).await else {
        panic!("expected Resume")
    };
    let spans = jaeger
        .spans_of(&program_trace, |spans| {
            find(spans, |s| span_id(s) == pause.span_id).is_some()
        })
        .await;
    let span = find(&spans, |s| span_id(s) == pause.span_id).unwrap();
    assert_eq!(parent_of(span), Some(program_span.as_str()), "{span:#}");
    let linked = span["references"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["spanID"] == session.span_id.as_str() && r["traceID"] == trace.as_str());
    assert!(linked, "{span:#}");

    // The session's span is the Connect call's child, and the call the
    // caller's; the session's ends with the session, saying why.
    drop(probe);
    dap::ended(&mut sub, &session.id).await;
    let spans = jaeger
        .spans_of(&trace, |spans| {
            find(spans, |s| span_id(s) == session.span_id).is_some()
                && find(spans, |s| operation(s) == "stepd.v1.ProbeService/Connect").is_some()
        })
        .await;
    let session_span = find(&spans, |s| span_id(s) == session.span_id).unwrap();
    assert_eq!(operation(session_span), "session");
    let connect = find(&spans, |s| operation(s) == "stepd.v1.ProbeService/Connect").unwrap();
    assert_eq!(parent_of(session_span), Some(span_id(connect)));
    assert_eq!(parent_of(connect), Some(parent.as_str()));
    assert_eq!(
        tag(session_span, "stepd.probe.name"),
        Some(&Json::from("traced-agent"))
    );
    assert_eq!(
        tag(session_span, "stepd.session.end_reason"),
        Some(&Json::from("PROBE_DISCONNECTED")),
        "{session_span:#}"
    );
    daemon.stop().await;
}

#[tokio::test]
async fn a_dap_pause_is_a_span_with_its_source_location() {
    let jaeger = Jaeger::start().await;
    let dir = TempDir::new("otel-dap");
    let daemon = traced_daemon(&dir, &jaeger, "stepd-otel-dap").await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    let program = fixture("python/hello.py");
    let path = program.to_str().unwrap();
    let line = line_of(&program, "print");
    let breakpoint = dap::add_breakpoint(&daemon, source_spec(path, line)).await;
    let (traceparent, trace, parent) = caller_context(0x44);
    let mut request = tonic::Request::new(LaunchRequest {
        adapter: "debugpy".into(),
        program: path.into(),
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    let session = tokio::time::timeout(DEADLINE, dap::sessions(&daemon).await.launch(request))
        .await
        .expect("launch answered in time")
        .expect("launch")
        .into_inner()
        .session
        .unwrap();
    assert_eq!(session.trace_id, trace);

    let pause = dap::next_pause(&mut sub, &session.id).await;
    assert_eq!(pause.trace_id, trace);
    // The program was started with the session's span as its TRACEPARENT.
    let value = dap::sessions(&daemon)
        .await
        .evaluate(EvaluateRequest {
            session_id: session.id.clone(),
            expression: "__import__('os').environ.get('TRACEPARENT', '')".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(
        value.value.trim_matches('\''),
        format!("00-{trace}-{}-01", session.span_id)
    );
    dap::answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    dap::ended(&mut sub, &session.id).await;

    let spans = jaeger
        .spans_of(&trace, |spans| {
            [pause.span_id.as_str(), session.span_id.as_str()]
                .iter()
                .all(|id| find(spans, |s| span_id(s) == *id).is_some())
                && find(spans, |s| operation(s) == "stepd.v1.SessionService/Launch").is_some()
        })
        .await;
    let launch = find(&spans, |s| operation(s) == "stepd.v1.SessionService/Launch").unwrap();
    assert_eq!(parent_of(launch), Some(parent.as_str()));
    let session_span = find(&spans, |s| span_id(s) == session.span_id).unwrap();
    assert_eq!(parent_of(session_span), Some(span_id(launch)));
    assert_eq!(
        tag(session_span, "stepd.session.kind"),
        Some(&Json::from("DAP"))
    );
    assert_eq!(
        tag(session_span, "stepd.adapter"),
        Some(&Json::from("debugpy"))
    );
    assert!(
        tag(session_span, "stepd.session.end_reason").is_some(),
        "{session_span:#}"
    );
    let span = find(&spans, |s| span_id(s) == pause.span_id).unwrap();
    assert_eq!(parent_of(span), Some(session.span_id.as_str()));
    assert_eq!(
        tag(span, "stepd.pause.reason"),
        Some(&Json::from("BREAKPOINT"))
    );
    let file = tag(span, "code.file.path")
        .and_then(Json::as_str)
        .unwrap_or_default();
    assert!(file.ends_with("hello.py"), "{span:#}");
    assert_eq!(tag(span, "code.line.number"), Some(&Json::from(line)));
    assert_eq!(
        tag(span, "stepd.pause.command"),
        Some(&Json::from("CONTINUE"))
    );
    let ids = tag(span, "stepd.breakpoint.ids").map(Json::to_string);
    assert!(ids.is_some_and(|ids| ids.contains(&breakpoint)), "{span:#}");
    // DAP requests are spans only when asked for (the next test).
    let dap = find(&spans, |s| operation(s).starts_with("dap "));
    assert!(dap.is_none(), "a DAP request span by default: {dap:?}");
    daemon.stop().await;
}

#[tokio::test]
async fn dap_requests_are_spans_under_the_session_when_asked_for() {
    let jaeger = Jaeger::start().await;
    let dir = TempDir::new("otel-dap-requests");
    let mut command = traced_command(&dir, &jaeger, "stepd-otel-dap-requests");
    command.env("RUST_LOG", "warn,stepd::dap::requests=debug");
    let daemon = Daemon::spawn(command, dir.path()).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    let program = fixture("python/hello.py");
    let path = program.to_str().unwrap();
    dap::add_breakpoint(&daemon, source_spec(path, line_of(&program, "print"))).await;
    let session = dap::launch(&daemon, "debugpy", path, &[])
        .await
        .session
        .unwrap();
    let pause = dap::next_pause(&mut sub, &session.id).await;
    dap::answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    dap::ended(&mut sub, &session.id).await;
    let spans = jaeger
        .spans_of(&session.trace_id, |spans| {
            find(spans, |s| span_id(s) == session.span_id).is_some()
                && ["dap initialize", "dap stackTrace", "dap continue"]
                    .iter()
                    .all(|name| find(spans, |s| operation(s) == *name).is_some())
        })
        .await;
    for name in [
        "dap initialize",
        "dap launch",
        "dap setBreakpoints",
        "dap stackTrace",
        "dap continue",
    ] {
        let span =
            find(&spans, |s| operation(s) == name).unwrap_or_else(|| panic!("no {name:?} span"));
        assert_eq!(parent_of(span), Some(session.span_id.as_str()), "{span:#}");
        assert_eq!(tag(span, "stepd.adapter"), Some(&Json::from("debugpy")));
        assert_eq!(
            tag(span, "stepd.dap.command"),
            Some(&Json::from(&name["dap ".len()..]))
        );
        assert_eq!(
            tag(span, "stepd.dap.success"),
            Some(&Json::from(true)),
            "{span:#}"
        );
    }
    daemon.stop().await;
}

/// One TCP socket of a process, from `/proc/PID/net/tcp*`.
struct Socket {
    local_port: u16,
    listening: bool,
    line: String,
}

/// The TCP sockets process `pid` holds open.
fn sockets_of(pid: u32) -> Vec<Socket> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|target| {
                    let target = target.to_string_lossy().into_owned();
                    Some(
                        target
                            .strip_prefix("socket:[")?
                            .strip_suffix(']')?
                            .to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut sockets = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            if !inodes.iter().any(|i| i == inode) {
                continue;
            }
            let local_port = local
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok())
                .unwrap_or(0);
            sockets.push(Socket {
                local_port,
                listening: *state == "0A",
                line: line.trim().to_owned(),
            });
        }
    }
    sockets
}

/// The TCP sockets of process `pid` that are neither listening nor
/// accepted on one of `served` ports: its outbound connections.
fn outbound_connections(pid: u32, served: &[u16]) -> Vec<String> {
    sockets_of(pid)
        .into_iter()
        .filter(|s| !s.listening && !served.contains(&s.local_port))
        .map(|s| s.line)
        .collect()
}

/// Accepts on `listener` until `stop`, and returns the connections that
/// came from process `pid`. Others are only noted: the port is the
/// machine's, and any OpenTelemetry SDK left at its defaults (a Jaeger's
/// own tracing, another program) exports there.
fn connections_from(
    listener: TcpListener,
    pid: u32,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        listener.set_nonblocking(true).unwrap();
        let mut from_pid = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                // Checked while the connection is held open, so its other
                // end is still in the table of whoever made it.
                Ok((stream, peer)) => {
                    if sockets_of(pid).iter().any(|s| s.local_port == peer.port()) {
                        from_pid.push(peer.to_string());
                    } else {
                        eprintln!("note: {peer}, not the daemon, connected to 127.0.0.1:4317");
                    }
                    drop(stream);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("accepting on 127.0.0.1:4317: {e}"),
            }
        }
        from_pid
    })
}

#[tokio::test]
async fn without_otel_variables_nothing_is_exported_or_connected() {
    // The OTLP gRPC default port, held here when free: an exporter that
    // fell back to the default endpoint would connect to it.
    let sentinel = TcpListener::bind("127.0.0.1:4317").ok();
    if sentinel.is_none() {
        eprintln!("note: 127.0.0.1:4317 is taken; checking /proc only");
    }
    let dir = TempDir::new("otel-off");
    // Variables that name no endpoint but would make an exporter, had one
    // been installed anyway, export within the test's window.
    let mut command = command_without_otel(dir.path());
    command
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let daemon = Daemon::spawn(command, dir.path()).await;
    let pid = daemon.child.id().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = sentinel.map(|listener| connections_from(listener, pid, stop.clone()));
    let served: u16 = daemon
        .addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap();
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    let (traceparent, _, _) = caller_context(0x33);
    let mut request = tonic::Request::new(PingRequest::default());
    request
        .metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    DaemonServiceClient::new(daemon.channel().await)
        .ping(request)
        .await
        .unwrap();
    let mut probe = connect_probe(&daemon, &traceparent).await;
    let breakpoint = arm(&daemon, &mut probe, "Bash").await;
    hold(&probe, "h1", "Bash", &breakpoint, "").await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    assert_eq!((pause.trace_id.as_str(), pause.span_id.as_str()), ("", ""));
    let session = dap::sessions(&daemon)
        .await
        .get_session(GetSessionRequest {
            session_id: probe.session_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(
        (session.trace_id.as_str(), session.span_id.as_str()),
        ("", "")
    );
    dap::answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    // An exporter would have tried by now (batches every 100 ms, metrics
    // every 200 ms, its first connection lazy): look twice, the second
    // time after the SDK's default 5 s batch delay too.
    assert_eq!(outbound_connections(pid, &[served]), Vec::<String>::new());
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(outbound_connections(pid, &[served]), Vec::<String>::new());
    stop.store(true, Ordering::Relaxed);
    if let Some(watcher) = watcher {
        let connected = watcher.join().unwrap();
        assert!(
            connected.is_empty(),
            "the daemon connected to 127.0.0.1:4317 from {connected:?}"
        );
    }
    drop(probe);
    daemon.stop().await;
}

//! Limits against hostile or careless clients, on the real binary: idle
//! connection floods (also under a low open-file limit), malformed protobuf
//! messages, two daemons on one data directory, the data directory's
//! permissions and PrintValue's smallest chunk.

use std::{
    os::unix::fs::PermissionsExt,
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use prost::Message as _;
use stepd_e2e::{DEADLINE, Daemon, Raw, TempDir, reason};
use stepd_proto::v1::{
    PingRequest, SubscribeRequest, SubscribeResponse, Watch,
    daemon_service_client::DaemonServiceClient, subscribe_request::Message,
};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, BufReader},
    net::TcpStream,
};
use tonic::{Code, Status, codegen::http::uri::PathAndQuery, transport::Channel};

/// CPU time (user + system) the process has used so far.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start at state.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no memory effects.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap();
    Duration::from_millis(ticks * 1000 / per_second)
}

/// The share of one core the process used while `during` ran.
async fn cpu_share<F: std::future::Future>(pid: u32, during: F) -> (f64, F::Output) {
    let (cpu, wall) = (cpu_time(pid), Instant::now());
    let out = during.await;
    let used = cpu_time(pid).saturating_sub(cpu);
    (used.as_secs_f64() / wall.elapsed().as_secs_f64(), out)
}

async fn ping(channel: Channel) -> Result<(), Status> {
    DaemonServiceClient::new(channel)
        .ping(PingRequest {})
        .await
        .map(|_| ())
}

/// A channel that has answered one Ping, within `within`.
async fn used_channel(addr: &str, within: Duration) -> Option<Channel> {
    tokio::time::timeout(within, async {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .ok()?;
        ping(channel.clone()).await.ok()?;
        Some(channel)
    })
    .await
    .ok()
    .flatten()
}

/// Pings on fresh connections until one is answered, failing at the deadline.
async fn ping_eventually(addr: &str) {
    let deadline = Instant::now() + DEADLINE;
    while Instant::now() < deadline {
        if used_channel(addr, Duration::from_secs(2)).await.is_some() {
            return;
        }
    }
    panic!("no Ping answered within {DEADLINE:?}");
}

/// Waits until the daemon closes `stream` (reads end of file or a reset).
async fn closed(mut stream: TcpStream) {
    let mut buf = [0u8; 256];
    tokio::time::timeout(DEADLINE, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the daemon closes an idle connection");
}

#[tokio::test]
async fn idle_connections_beyond_the_cap_never_lock_a_client_out() {
    let daemon = Daemon::start(&["--max-connections", "16", "--first-request-timeout", "1s"]).await;
    let pid = daemon.child.id().unwrap();
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(TcpStream::connect(&daemon.addr).await.unwrap());
    }
    let (share, answered) = cpu_share(pid, async {
        let answered = used_channel(&daemon.addr, DEADLINE).await;
        // Every silent connection is closed: the oldest to make room at the
        // cap, the rest after the first-request timeout.
        for stream in idle {
            closed(stream).await;
        }
        answered
    })
    .await;
    let first = answered.expect("a client gets through 100 idle connections");
    // A silent connection costs no work beyond its accept: the same-user
    // lookup waits for a first request.
    assert!(share < 0.25, "the daemon used {share:.2} of a core");

    // Connections that sent a request are never closed to make room: at the
    // cap a new one is refused at once, and admitted again once one leaves.
    let mut used = vec![first];
    let deadline = Instant::now() + DEADLINE;
    while used.len() < 16 && Instant::now() < deadline {
        if let Some(channel) = used_channel(&daemon.addr, Duration::from_secs(2)).await {
            used.push(channel);
        }
    }
    assert_eq!(used.len(), 16);
    let started = Instant::now();
    assert!(
        used_channel(&daemon.addr, Duration::from_secs(5))
            .await
            .is_none(),
        "a 17th connection is refused"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    for channel in &used {
        ping(channel.clone())
            .await
            .expect("admitted connections still serve");
    }
    used.pop();
    ping_eventually(&daemon.addr).await;
    drop(used);
    daemon.stop().await;
}

#[tokio::test]
async fn out_of_file_descriptors_the_accept_loop_backs_off_and_recovers() {
    let dir = TempDir::new("fd");
    let mut command = Daemon::command(dir.path(), &["--no-unix-socket"]);
    command.env("RUST_LOG", "warn").stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut daemon = Daemon::spawn(command, dir.path()).await;
    let pid = daemon.child.id().unwrap();
    let mut log = BufReader::new(daemon.child.stderr.take().unwrap()).lines();

    // Connections that each sent a request cannot be closed to make room, so
    // 80 of them exhaust the daemon's 64 descriptors.
    let attempts = (0..80).map(|_| {
        let addr = daemon.addr.clone();
        async move { used_channel(&addr, Duration::from_secs(3)).await }
    });
    let used: Vec<Channel> = futures_join_all(attempts)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert!(used.len() < 80, "the open-file limit applies");
    // More waiting in the listen queue keep accept failing with EMFILE.
    let mut waiting = Vec::new();
    for _ in 0..20 {
        waiting.push(TcpStream::connect(&daemon.addr).await.unwrap());
    }
    tokio::time::timeout(DEADLINE, async {
        while let Some(line) = log.next_line().await.unwrap() {
            if line.contains("out of file descriptors") {
                return;
            }
        }
        panic!("stepd exited");
    })
    .await
    .expect("the accept loop reports running out of descriptors");
    let (share, ()) = cpu_share(pid, async {
        // A measuring interval, not a wait for anything: half a second of
        // the daemon failing to accept.
        tokio::time::sleep(Duration::from_millis(500)).await;
    })
    .await;
    assert!(share < 0.5, "the accept loop spins: {share:.2} of a core");

    drop(used);
    drop(waiting);
    ping_eventually(&daemon.addr).await;
    assert!(daemon.child.try_wait().unwrap().is_none(), "stepd is alive");
    daemon.stop().await;
}

/// Runs futures concurrently and collects their outputs in order.
async fn futures_join_all<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    for (i, f) in futures.enumerate() {
        set.spawn(async move { (i, f.await) });
    }
    let mut out: Vec<(usize, F::Output)> = Vec::new();
    while let Some(done) = set.join_next().await {
        out.push(done.unwrap());
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, o)| o).collect()
}

/// Field 1, length-delimited, with a length that never ends.
const MALFORMED: &[u8] = &[0x0a, 0xff];

fn invalid_argument(status: &Status) {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(reason(status), "INVALID_ARGUMENT", "{status:?}");
    assert_eq!(
        stepd_e2e::violated_fields(status),
        ["request"],
        "{status:?}"
    );
}

#[tokio::test]
async fn malformed_messages_are_invalid_arguments_with_a_reason() {
    let daemon = Daemon::start(&[]).await;
    let mut grpc = tonic::client::Grpc::new(daemon.channel().await);

    // Unary.
    grpc.ready().await.unwrap();
    let status = grpc
        .unary(
            tonic::Request::new(MALFORMED.to_vec()),
            PathAndQuery::from_static("/stepd.v1.DaemonService/Ping"),
            Raw,
        )
        .await
        .unwrap_err();
    invalid_argument(&status);

    // A stream's first message.
    grpc.ready().await.unwrap();
    let status = grpc
        .streaming(
            tonic::Request::new(tokio_stream::iter([MALFORMED.to_vec()])),
            PathAndQuery::from_static("/stepd.v1.ProbeService/Connect"),
            Raw,
        )
        .await
        .unwrap_err();
    invalid_argument(&status);

    // A Subscribe stream that was serving: it ends with a status saying why,
    // not with OK like a daemon shutdown.
    let watch = SubscribeRequest {
        message: Some(Message::Watch(Watch::default())),
    }
    .encode_to_vec();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(watch).await.unwrap();
    grpc.ready().await.unwrap();
    let mut stream = grpc
        .streaming(
            tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx)),
            PathAndQuery::from_static("/stepd.v1.EventService/Subscribe"),
            Raw,
        )
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(DEADLINE, stream.message())
        .await
        .unwrap()
        .unwrap()
        .expect("the snapshot");
    assert!(SubscribeResponse::decode(first.as_slice()).is_ok());
    tx.send(MALFORMED.to_vec()).await.unwrap();
    let status = tokio::time::timeout(DEADLINE, async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => {}
                Ok(None) => panic!("the stream ended with OK"),
                Err(status) => return status,
            }
        }
    })
    .await
    .unwrap();
    invalid_argument(&status);

    // A probe stream after its Hello.
    let hello = stepd_proto::v1::ConnectRequest {
        message: Some(stepd_proto::v1::connect_request::Message::Hello(
            stepd_proto::v1::Hello {
                name: "malformed".into(),
                language: "test".into(),
                ..Default::default()
            },
        )),
    }
    .encode_to_vec();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(hello).await.unwrap();
    grpc.ready().await.unwrap();
    let mut stream = grpc
        .streaming(
            tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx)),
            PathAndQuery::from_static("/stepd.v1.ProbeService/Connect"),
            Raw,
        )
        .await
        .unwrap()
        .into_inner();
    let welcome = tokio::time::timeout(DEADLINE, stream.message())
        .await
        .unwrap()
        .unwrap()
        .expect("the welcome");
    assert!(stepd_proto::v1::ConnectResponse::decode(welcome.as_slice()).is_ok());
    tx.send(MALFORMED.to_vec()).await.unwrap();
    let status = tokio::time::timeout(DEADLINE, async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => {}
                Ok(None) => panic!("the probe stream ended with OK"),
                Err(status) => return status,
            }
        }
    })
    .await
    .unwrap();
    invalid_argument(&status);

    ping(daemon.channel().await)
        .await
        .expect("the daemon lives on");
    daemon.stop().await;
}

#[tokio::test]
async fn a_second_daemon_on_one_data_directory_fails_naming_it_and_the_first() {
    let dir = TempDir::new("lock");
    let first = Daemon::start_in(dir.path(), &["--no-unix-socket"]).await;
    let mut second = Daemon::command(dir.path(), &["--no-unix-socket"]);
    second.stderr(Stdio::piped());
    let second = second.spawn().unwrap();
    let out = tokio::time::timeout(DEADLINE, second.wait_with_output())
        .await
        .expect("the second daemon stops at once instead of serving")
        .unwrap();
    assert!(!out.status.success(), "{:?}", out.status);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&dir.path().display().to_string()),
        "{stderr}"
    );
    let pid = first.child.id().unwrap();
    assert!(stderr.contains(&format!("pid {pid}")), "{stderr}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("stepd ready"),
        "the second daemon never served"
    );
    first.stop().await;
    // Once the first is gone the directory is free again.
    Daemon::start_in(dir.path(), &["--no-unix-socket"])
        .await
        .stop()
        .await;
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn the_data_directory_and_database_are_private() {
    let dir = TempDir::new("perm");
    let data = dir.path().join("data");
    let daemon = Daemon::start_in(&data, &[]).await;
    assert_eq!(mode(&data), 0o700);
    for name in ["stepd.db", "stepd.db-wal", "stepd.db-shm"] {
        let path = data.join(name);
        if name == "stepd.db" || path.exists() {
            assert_eq!(mode(&path), 0o600, "{name}");
        }
    }
    daemon.stop().await;

    // Found open to others, they are tightened.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        data.join("stepd.db"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let daemon = Daemon::start_in(&data, &[]).await;
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("stepd.db")), 0o600);
    daemon.stop().await;
}

#[tokio::test]
async fn print_value_raises_tiny_chunks_to_one_kib() {
    use prost_types::{Value, value::Kind};
    use stepd_proto::v1::{
        ConnectRequest, Hello, Hit, InspectRequest, InspectSource, PointInfo, PrintValueRequest,
        connect_request::Message as In, inspect_source::Source,
        inspector_service_client::InspectorServiceClient, probe_service_client::ProbeServiceClient,
    };
    let (daemon, mut sub) = stepd_e2e::watched().await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(ConnectRequest {
        message: Some(In::Hello(Hello {
            name: "chunks".into(),
            language: "test".into(),
            pid: i64::from(std::process::id()),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut probe = ProbeServiceClient::new(daemon.channel().await)
        .connect(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let welcome = probe.message().await.unwrap().unwrap();
    let Some(stepd_proto::v1::connect_response::Message::Welcome(welcome)) = welcome.message else {
        panic!("expected Welcome");
    };
    let text = "x".repeat(10_000);
    tx.send(ConnectRequest {
        message: Some(In::Hit(Hit {
            hit_id: "h1".into(),
            point: Some(PointInfo {
                kind: "tool_call".into(),
                name: "Bash".into(),
                payload: Some(Value {
                    kind: Some(Kind::StringValue(text.clone())),
                }),
                scope_path: vec!["turn".into()],
                ..Default::default()
            }),
            coor: vec![0],
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let pause = stepd_e2e::dap::next_pause(&mut sub, &welcome.session_id).await;
    let mut inspector = InspectorServiceClient::new(daemon.channel().await);
    let root = inspector
        .inspect(InspectRequest {
            session_id: welcome.session_id.clone(),
            source: Some(InspectSource {
                source: Some(Source::PauseValue(pause.key.clone())),
            }),
            config: None,
        })
        .await
        .unwrap()
        .into_inner()
        .rendering
        .unwrap();
    let mut stream = inspector
        .print_value(PrintValueRequest {
            inspector_id: root.inspector_id.clone(),
            chunk_size: 1,
        })
        .await
        .unwrap()
        .into_inner();
    let mut chunks = Vec::new();
    while let Some(chunk) = tokio::time::timeout(DEADLINE, stream.message())
        .await
        .unwrap()
        .unwrap()
    {
        let last = chunk.last;
        chunks.push(chunk.chunk);
        if last {
            break;
        }
    }
    let printed: String = chunks.concat();
    assert!(printed.contains(&text), "the whole value is printed");
    assert_eq!(chunks.len(), printed.len().div_ceil(1024), "1 KiB chunks");
    drop(tx);
    daemon.stop().await;
}

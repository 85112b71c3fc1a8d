//! Serving: health, reflection (through the real grpcurl), the Unix socket,
//! loopback-only binding, and shutdown with open streams.

use std::{os::unix::fs::PermissionsExt, path::PathBuf, process::Stdio, time::Duration};

use stepd_e2e::{DEADLINE, Daemon, Subscription, TempDir, repo_root, stepd_bin};
use stepd_proto::v1::{
    PingRequest, ShutdownRequest, Watch, daemon_service_client::DaemonServiceClient, event::Payload,
};
use tonic::transport::Endpoint;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

#[tokio::test]
async fn health_serves() {
    let daemon = Daemon::start(&[]).await;
    let status = HealthClient::new(daemon.channel().await)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(status, 1, "SERVING");
    let by_name = HealthClient::new(daemon.channel().await)
        .check(HealthCheckRequest {
            service: "stepd.v1.EventService".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(by_name, 1, "each service answers by name");
    daemon.stop().await;
}

#[tokio::test]
async fn a_non_loopback_address_is_refused_without_insecure() {
    let dir = TempDir::new("nl");
    let out = std::process::Command::new(stepd_bin())
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--listen", "0.0.0.0:0", "--no-unix-socket"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("non-loopback"), "{stderr}");
    assert!(stderr.contains("--insecure"), "{stderr}");
}

#[tokio::test]
async fn the_unix_socket_is_private_and_serves() {
    let daemon = Daemon::start(&[]).await;
    let socket = daemon.unix.clone().expect("a unix socket by default");
    let mode = |p: &PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(&socket.parent().unwrap().to_path_buf()), 0o700);

    let path = socket.clone();
    let channel = Endpoint::from_static("http://stepd.local")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(path).await?,
                ))
            }
        }))
        .await
        .unwrap();
    let pong = DaemonServiceClient::new(channel)
        .ping(PingRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(pong.protocol_version, "stepd.v1");
    daemon.stop().await;
    assert!(!socket.exists(), "the socket file is removed on shutdown");
}

#[tokio::test]
async fn shutdown_with_open_streams_finishes_within_the_drain_deadline() {
    let mut daemon = Daemon::start(&["--drain-timeout", "3s"]).await;
    // One subscriber that reads, one that never reads, one that never hangs up.
    let mut reading = Subscription::open(daemon.channel().await, Watch::default()).await;
    reading.next().await;
    let _idle = Subscription::open(daemon.channel().await, Watch::default()).await;
    let _silent = Subscription::open(daemon.channel().await, Watch::default()).await;

    let started = std::time::Instant::now();
    DaemonServiceClient::new(daemon.channel().await)
        .shutdown(ShutdownRequest {})
        .await
        .unwrap();
    // Told to reconnect (stream-local, seq 0), then the stream ends cleanly.
    let told = reading.next().await;
    assert!(
        told.seq == 0 && matches!(told.payload, Some(Payload::Reconnect(_))),
        "{told:?}"
    );
    assert_eq!(reading.try_next().await, None, "open streams end cleanly");
    let status = daemon.wait_exit(DEADLINE).await;
    assert!(status.success(), "{status:?}");
    // A stream that never hangs up would hold the daemon forever; past the
    // drain deadline only the exit itself is left, which a loaded machine
    // may take seconds over.
    assert!(
        started.elapsed() < Duration::from_secs(3 + 10),
        "shutdown took {:?}",
        started.elapsed()
    );
}

fn grpcurl() -> PathBuf {
    let local = repo_root().join(".tools/bin/grpcurl");
    if local.is_file() {
        local
    } else {
        PathBuf::from("grpcurl")
    }
}

fn run_grpcurl(args: &[&str]) -> String {
    let out = std::process::Command::new(grpcurl())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("grpcurl is installed by scripts/tools");
    assert!(
        out.status.success(),
        "grpcurl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn reflection_lets_grpcurl_list_and_describe() {
    let daemon = Daemon::start(&[]).await;
    let addr = daemon.addr.as_str();
    let services = run_grpcurl(&["-plaintext", addr, "list"]);
    for service in [
        "stepd.v1.DaemonService",
        "stepd.v1.SessionService",
        "stepd.v1.BreakpointService",
        "stepd.v1.EventService",
        "stepd.v1.InspectorService",
        "stepd.v1.ProbeService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    ] {
        assert!(
            services.lines().any(|l| l == service),
            "{service} in {services}"
        );
    }
    let described = run_grpcurl(&["-plaintext", addr, "describe", "stepd.v1.EventService"]);
    assert!(described.contains("rpc Subscribe ( stream .stepd.v1.SubscribeRequest ) returns ( stream .stepd.v1.SubscribeResponse )"), "{described}");
    let message = run_grpcurl(&["-plaintext", addr, "describe", "stepd.v1.Watch"]);
    assert!(message.contains("resume_after_seq"), "{message}");
    let pong = run_grpcurl(&["-plaintext", addr, "stepd.v1.DaemonService/Ping"]);
    assert!(pong.contains("\"protocolVersion\": \"stepd.v1\""), "{pong}");
    daemon.stop().await;
}

#[tokio::test]
async fn reflection_v1alpha_is_served_for_older_tools() {
    use tonic_reflection::pb::v1alpha::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let daemon = Daemon::start(&[]).await;
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = ServerReflectionClient::new(daemon.channel().await)
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("expected a service list");
    };
    assert!(
        list.service
            .iter()
            .any(|s| s.name == "stepd.v1.SessionService")
    );
    daemon.stop().await;
}

async fn first_heartbeat(daemon: &Daemon) -> stepd_proto::v1::Event {
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await; // snapshot
    sub.next().await
}

#[tokio::test]
async fn configuration_comes_from_the_environment_and_the_toml_file() {
    use stepd_proto::v1::event::Payload;
    let env_dir = TempDir::new("env");
    let mut command = Daemon::command(env_dir.path(), &[]);
    command.env("STEPD_HEARTBEAT_INTERVAL", "150ms");
    let daemon = Daemon::spawn(command, env_dir.path()).await;
    let event = first_heartbeat(&daemon).await;
    assert!(
        matches!(event.payload, Some(Payload::Heartbeat(_))),
        "{event:?}"
    );
    daemon.stop().await;

    let file_dir = TempDir::new("toml");
    std::fs::write(
        file_dir.path().join("stepd.toml"),
        "heartbeat_interval = \"150ms\"\nmax_subscribers = 7\n",
    )
    .unwrap();
    let daemon = Daemon::start_in(file_dir.path(), &[]).await;
    let event = first_heartbeat(&daemon).await;
    assert!(
        matches!(event.payload, Some(Payload::Heartbeat(_))),
        "{event:?}"
    );
    let doctor = DaemonServiceClient::new(daemon.channel().await)
        .doctor(stepd_proto::v1::DoctorRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(doctor.config.unwrap().file.ends_with("stepd.toml"));
    daemon.stop().await;

    // A flag beats the file; an unknown setting in the file is an error.
    std::fs::write(file_dir.path().join("stepd.toml"), "no_such_setting = 1\n").unwrap();
    let out = std::process::Command::new(stepd_bin())
        .arg("--data-dir")
        .arg(file_dir.path())
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no_such_setting"));
}

#[tokio::test]
async fn logs_can_be_json_lines() {
    use tokio::io::AsyncBufReadExt;
    let dir = TempDir::new("log");
    let mut command = Daemon::command(dir.path(), &["--log-format", "json"]);
    command.env("RUST_LOG", "info").stderr(Stdio::piped());
    let mut daemon = Daemon::spawn(command, dir.path()).await;
    let stderr = daemon.child.stderr.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let line = tokio::time::timeout(DEADLINE, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .expect("a log line");
    let record: serde_json::Value = serde_json::from_str(&line).expect("JSON log line");
    assert_eq!(record["level"], "INFO", "{record}");
    assert!(record["message"].is_string(), "{record}");
    daemon.stop().await;
}

#[tokio::test]
async fn a_start_up_failure_names_the_file_it_is_about() {
    let dir = TempDir::new("baddb");
    let db = dir.path().join("stepd.db");
    std::fs::write(&db, vec![0x5a_u8; 8192]).unwrap();
    let out = std::process::Command::new(stepd_bin())
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--no-unix-socket"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.contains(&db.display().to_string()), "{stderr}");
    assert!(last.contains("not a database"), "{stderr}");
}

//! Authentication and authorization against the real daemon: another Unix
//! user is refused without a token and let in with one, tokens that are
//! wrong, missing or revoked are refused, every method × every role is
//! answered as docs/security.md says, health needs no credentials, and
//! records and the audit log carry the authenticated identity.
//!
//! The tests run as root (the daemon's user) and act as a second user,
//! `stepd-test-other` (created if missing), through grpcurl under `setpriv`.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use prost_reflect::{DescriptorPool, MethodDescriptor};
use stepd_e2e::{
    DEADLINE, Daemon, Raw, Subscription, TempDir, add_token, dap, other_user, reason, repo_root,
    stepd_bin, with_token,
};
use stepd_proto::v1::{
    AddBreakpointRequest, ConnectRequest, ConnectResponse, ContinueCommand, DebugCommand,
    DebugInput, GetSessionRequest, Hello, Hit, PingRequest, PointInfo, RemoveBreakpointRequest,
    SendDebugInputRequest, ShutdownRequest, SubscribeRequest, UpdateBreakpointRequest, Watch,
    breakpoint_service_client::BreakpointServiceClient, connect_request::Message as In,
    daemon_service_client::DaemonServiceClient, debug_command::Command, event::Payload,
    probe_service_client::ProbeServiceClient, session_service_client::SessionServiceClient,
    subscribe_request::Message as SubscribeMessage,
};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    sync::mpsc,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Status, codegen::http::uri::PathAndQuery, transport::Channel};

/// Protos grpcurl reads as the second user (no reflection: it needs a
/// role), in a directory that user can read.
fn protos() -> TempDir {
    let dir = TempDir::new("protos");
    let v1 = dir.path().join("stepd/v1");
    let health = dir.path().join("grpc/health/v1");
    std::fs::create_dir_all(&v1).unwrap();
    std::fs::create_dir_all(&health).unwrap();
    // All of stepd.v1: daemon.proto imports its siblings.
    for entry in std::fs::read_dir(repo_root().join("proto/stepd/v1")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "proto") {
            std::fs::copy(&path, v1.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        health.join("health.proto"),
        "syntax = \"proto3\";\npackage grpc.health.v1;\n\
         message HealthCheckRequest { string service = 1; }\n\
         message HealthCheckResponse { enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; } ServingStatus status = 1; }\n\
         service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }\n",
    )
    .unwrap();
    chmod_all(dir.path(), 0o755, 0o644);
    dir
}

fn chmod_all(dir: &Path, dirs: u32, files: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(dirs)).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            chmod_all(&path, dirs, files);
        } else {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(files)).unwrap();
        }
    }
}

/// What grpcurl said, run as the second user: Ok(stdout) or Err(the
/// error's code name, as grpcurl prints it).
async fn grpcurl_as_other(
    protos: &Path,
    target: &[&str],
    headers: &[String],
    method: &str,
) -> Result<String, String> {
    let (uid, gid) = other_user();
    let mut command = tokio::process::Command::new("setpriv");
    command
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg(repo_root().join(".tools/bin/grpcurl"))
        .arg("-plaintext")
        .arg("-import-path")
        .arg(protos)
        .args(["-proto", "stepd/v1/daemon.proto"])
        .args(["-proto", "grpc/health/v1/health.proto"]);
    for header in headers {
        command.arg("-H").arg(header);
    }
    command.args(target).arg(method).env("HOME", "/tmp");
    let out = tokio::time::timeout(DEADLINE, command.output())
        .await
        .expect("grpcurl in time")
        .expect("run grpcurl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        return Ok(stdout);
    }
    let code = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("Code: "))
        .map(str::to_owned);
    Err(code.unwrap_or_else(|| format!("no code: {stderr}")))
}

/// A daemon with a tokens file holding one token per role.
struct Tokened {
    daemon: Daemon,
    file: PathBuf,
    tokens: HashMap<&'static str, String>,
    _dir: TempDir,
}

async fn tokened(extra: &[&str]) -> Tokened {
    let dir = TempDir::new("tok");
    let file = dir.path().join("tokens");
    let mut tokens = HashMap::new();
    for role in ["viewer", "controller", "admin", "probe"] {
        tokens.insert(role, add_token(&file, &format!("t-{role}"), role));
    }
    let file_arg = file.display().to_string();
    let mut args = vec!["--auth-tokens", &file_arg];
    args.extend_from_slice(extra);
    let daemon = Daemon::start(&args).await;
    Tokened {
        daemon,
        file,
        tokens,
        _dir: dir,
    }
}

#[tokio::test]
async fn another_user_needs_a_token_on_tcp_and_on_the_socket() {
    let protos = protos();
    let sock_dir = TempDir::new("sock");
    let socket = sock_dir.path().join("s/stepd.sock");
    let socket_arg = socket.display().to_string();
    let t = tokened(&["--unix-socket", &socket_arg]).await;
    // Let the second user reach the socket: the daemon made it private.
    chmod_all(sock_dir.path(), 0o755, 0o666);
    let tcp = [t.daemon.addr.as_str()];
    let unix_target = format!("unix://{socket_arg}");
    let unix = [unix_target.as_str()];
    let ping = "stepd.v1.DaemonService/Ping";
    for target in [&tcp[..], &unix[..]] {
        assert_eq!(
            grpcurl_as_other(protos.path(), target, &[], ping).await,
            Err("Unauthenticated".into()),
            "the second user without a token on {target:?}"
        );
        let viewer = format!("authorization: Bearer {}", t.tokens["viewer"]);
        let pong =
            grpcurl_as_other(protos.path(), target, std::slice::from_ref(&viewer), ping).await;
        assert!(pong.is_ok(), "with a viewer token on {target:?}: {pong:?}");
        assert_eq!(
            grpcurl_as_other(
                protos.path(),
                target,
                &[viewer],
                "stepd.v1.DaemonService/Shutdown"
            )
            .await,
            Err("PermissionDenied".into()),
            "a viewer token is a viewer on {target:?}"
        );
        let health = grpcurl_as_other(protos.path(), target, &[], "grpc.health.v1.Health/Check")
            .await
            .expect("health needs no credentials");
        assert!(health.contains("SERVING"), "{health}");
    }
    // The message says why and what to do.
    let status = DaemonServiceClient::new(t.daemon.channel().await)
        .ping(with_token(PingRequest::default(), "stepd_wrong"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);
    assert_eq!(reason(&status), "UNAUTHENTICATED");
    // The daemon's own user needs nothing, on either transport.
    DaemonServiceClient::new(t.daemon.channel().await)
        .ping(PingRequest::default())
        .await
        .expect("the daemon's user over TCP");
    let unix_channel = unix_channel(&socket).await;
    DaemonServiceClient::new(unix_channel)
        .ping(PingRequest::default())
        .await
        .expect("the daemon's user on the socket");
    t.daemon.stop().await;
}

async fn unix_channel(path: &Path) -> Channel {
    let path = path.to_path_buf();
    tonic::transport::Endpoint::from_static("http://unix.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(path).await?,
                ))
            }
        }))
        .await
        .unwrap()
}

#[tokio::test]
async fn wrong_missing_and_revoked_tokens_are_unauthenticated() {
    let protos = protos();
    let t = tokened(&[]).await;
    let channel = t.daemon.channel().await;
    let ping = |token: &str| {
        let mut client = DaemonServiceClient::new(channel.clone());
        let request = with_token(PingRequest::default(), token);
        async move { client.ping(request).await.map(|_| ()) }
    };
    ping(&t.tokens["controller"]).await.expect("a valid token");
    for wrong in ["stepd_0000", "", "   "] {
        let err = ping(wrong).await.unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{wrong:?}");
    }
    let mut bare = Request::new(PingRequest::default());
    bare.metadata_mut()
        .insert("authorization", t.tokens["admin"].parse().unwrap());
    let err = DaemonServiceClient::new(channel.clone())
        .ping(bare)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "a token without Bearer");
    // Missing: the second user with no token.
    assert_eq!(
        grpcurl_as_other(
            protos.path(),
            &[&t.daemon.addr],
            &[],
            "stepd.v1.DaemonService/Ping"
        )
        .await,
        Err("Unauthenticated".into())
    );
    // Revoked: the line removed; the next request is refused.
    let out = std::process::Command::new(stepd_bin())
        .args(["token", "remove", "t-controller", "--file"])
        .arg(&t.file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = ping(&t.tokens["controller"]).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "a revoked token");
    ping(&t.tokens["viewer"]).await.expect("the others stay");
    // The local token is admin.
    let local = std::fs::read_to_string(t.daemon.data_dir.join("token")).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(t.daemon.data_dir.join("token"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    ping(local.trim()).await.expect("the local token");
    t.daemon.stop().await;
}

/// The role table of docs/security.md: method → what it needs.
fn documented_table() -> Vec<(String, String)> {
    let docs = std::fs::read_to_string(repo_root().join("docs/security.md")).unwrap();
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in docs.lines() {
        if line.starts_with("| method | needs |") {
            in_table = true;
            continue;
        }
        if in_table {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if cells.len() < 3 {
                break;
            }
            if let Some(method) = cells[1].strip_prefix('`').and_then(|c| c.strip_suffix('`')) {
                rows.push((method.to_owned(), cells[2].to_owned()));
            }
        }
    }
    rows
}

fn allowed(role: &str, need: &str) -> bool {
    match need {
        "open" => true,
        "viewer" => matches!(role, "viewer" | "controller" | "admin"),
        "controller" => matches!(role, "controller" | "admin"),
        "admin" => role == "admin",
        "probe" => matches!(role, "probe" | "admin"),
        other => panic!("docs/security.md: unknown need {other:?}"),
    }
}

/// Calls `path` with a message that cannot be decoded, so an allowed call
/// fails in its handler (INVALID_ARGUMENT and the like) and changes nothing,
/// and a refused one fails before it. `None`: still waiting after
/// `patience` (allowed).
async fn call_raw(
    channel: Channel,
    path: &str,
    (client_streaming, server_streaming): (bool, bool),
    token: &str,
    patience: Duration,
) -> Option<Status> {
    let path = PathAndQuery::try_from(format!("/{path}")).unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let garbage = vec![0xff, 0xff, 0xff];
    let answer = tokio::time::timeout(patience, async {
        if client_streaming {
            let stream = tokio_stream::iter(vec![garbage]).chain(tokio_stream::pending());
            let response = grpc.streaming(with_token(stream, token), path, Raw).await?;
            let mut inbound = response.into_inner();
            loop {
                match inbound.message().await? {
                    Some(_) => {}
                    None => return Ok(()),
                }
            }
        } else if server_streaming {
            let response = grpc
                .server_streaming(with_token(garbage, token), path, Raw)
                .await?;
            let mut inbound = response.into_inner();
            while inbound.message().await?.is_some() {}
            Ok(())
        } else {
            grpc.unary(with_token(garbage, token), path, Raw)
                .await
                .map(|_| ())
        }
    })
    .await;
    match answer {
        Err(_) | Ok(Ok(())) => None,
        Ok(Err(status)) => Some(status),
    }
}

use tokio_stream::StreamExt as _;

#[tokio::test]
async fn every_method_and_every_role_as_the_docs_say() {
    let t = tokened(&[]).await;
    let table = documented_table();
    assert!(table.len() > 40, "the table of docs/security.md: {table:?}");
    // Every stepd method is in the documented table.
    let pool = DescriptorPool::decode(stepd_proto::FILE_DESCRIPTOR_SET).unwrap();
    let methods: HashMap<String, MethodDescriptor> = pool
        .services()
        .flat_map(|s| s.methods().collect::<Vec<_>>())
        .map(|m| {
            (
                format!("{}/{}", m.parent_service().full_name(), m.name()),
                m,
            )
        })
        .collect();
    for method in methods.keys() {
        assert!(
            table.iter().any(|(m, _)| m == method),
            "{method} is not in docs/security.md"
        );
    }
    let channel = t.daemon.channel().await;
    let mut wrong = Vec::new();
    for (method, need) in &table {
        let (client_streaming, server_streaming) = match methods.get(method) {
            Some(m) => (m.is_client_streaming(), m.is_server_streaming()),
            None if method.contains("ServerReflectionInfo") => (true, true),
            None if method.ends_with("Health/Watch") => (false, true),
            None => (false, false),
        };
        for role in ["viewer", "controller", "admin", "probe"] {
            // An allowed stream may rightly wait for more; a refusal must
            // come, however slow the machine.
            let patience = if allowed(role, need) {
                Duration::from_secs(3)
            } else {
                DEADLINE
            };
            let status = call_raw(
                channel.clone(),
                method,
                (client_streaming, server_streaming),
                &t.tokens[role],
                patience,
            )
            .await;
            let code = status.as_ref().map(Status::code);
            let ok = if allowed(role, need) {
                !matches!(code, Some(Code::PermissionDenied | Code::Unauthenticated))
            } else {
                code == Some(Code::PermissionDenied)
                    && status
                        .as_ref()
                        .is_some_and(|s| reason(s) == "PERMISSION_DENIED")
            };
            if !ok {
                wrong.push(format!("{method} as {role} (needs {need}): {status:?}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "not as docs/security.md says:\n{}",
        wrong.join("\n")
    );
    // The daemon is still there: nothing allowed did anything.
    DaemonServiceClient::new(channel)
        .ping(PingRequest::default())
        .await
        .unwrap();
    t.daemon.stop().await;
}

/// Connects a probe (as `token`) and makes it hold one pause; returns the
/// probe's stream (kept open) and the session id.
async fn held_probe(
    daemon: &Daemon,
    token: &str,
) -> (
    mpsc::Sender<ConnectRequest>,
    tonic::Streaming<ConnectResponse>,
    String,
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
    let mut inbound = ProbeServiceClient::new(daemon.channel().await)
        .connect(with_token(ReceiverStream::new(rx), token))
        .await
        .expect("a probe token connects")
        .into_inner();
    let welcome = match inbound.message().await.unwrap().unwrap().message {
        Some(stepd_proto::v1::connect_response::Message::Welcome(w)) => w,
        other => panic!("expected Welcome, got {other:?}"),
    };
    tx.send(ConnectRequest {
        message: Some(In::Hit(Hit {
            hit_id: "h1".into(),
            point: Some(PointInfo {
                kind: "prompt".into(),
                name: "user".into(),
                ..Default::default()
            }),
            coor: vec![0],
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    (tx, inbound, welcome.session_id)
}

fn resume(key: &str) -> DebugInput {
    DebugInput {
        key: key.into(),
        command: Some(DebugCommand {
            command: Some(Command::Resume(ContinueCommand {})),
        }),
        client_name: "a-name-the-client-chose".into(),
    }
}

#[tokio::test]
async fn records_carry_the_authenticated_identity() {
    let t = tokened(&[]).await;
    let mut sub = Subscription::open(t.daemon.channel().await, Watch::default()).await;
    sub.next().await;
    let (_probe_tx, _probe_rx, session_id) = held_probe(&t.daemon, &t.tokens["probe"]).await;
    let pause = dap::next_pause(&mut sub, &session_id).await;
    let session = SessionServiceClient::new(t.daemon.channel().await)
        .get_session(GetSessionRequest {
            session_id: session_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(session.started_by, "token:t-probe");

    // A viewer's DebugInput on its stream: an error event, the stream goes on.
    let mut viewer_sub = {
        let (tx, rx) = mpsc::channel(8);
        tx.send(SubscribeRequest {
            message: Some(SubscribeMessage::Watch(Watch::default())),
        })
        .await
        .unwrap();
        let inbound = stepd_proto::v1::event_service_client::EventServiceClient::new(
            t.daemon.channel().await,
        )
        .subscribe(with_token(ReceiverStream::new(rx), &t.tokens["viewer"]))
        .await
        .expect("a viewer may watch")
        .into_inner();
        (tx, inbound)
    };
    viewer_sub
        .0
        .send(SubscribeRequest {
            message: Some(SubscribeMessage::DebugInput(resume(&pause.key))),
        })
        .await
        .unwrap();
    let error = loop {
        let event = tokio::time::timeout(DEADLINE, viewer_sub.1.message())
            .await
            .expect("an answer in time")
            .expect("the stream stays open")
            .expect("an event")
            .event
            .unwrap();
        if let Some(Payload::Error(e)) = event.payload {
            break e;
        }
    };
    assert_eq!(
        error.reason,
        stepd_proto::v1::ErrorReason::PermissionDenied as i32,
        "{error:?}"
    );
    assert_eq!(error.code, Code::PermissionDenied as i32);
    assert_eq!(error.key, pause.key);

    // A controller answers; the record names its token, not the name it chose.
    SessionServiceClient::new(t.daemon.channel().await)
        .send_debug_input(with_token(
            SendDebugInputRequest {
                input: Some(resume(&pause.key)),
            },
            &t.tokens["controller"],
        ))
        .await
        .expect("a controller answers");
    let resolved = sub
        .wait_for(
            "pause_resolved",
            |e| matches!(&e.payload, Some(Payload::PauseResolved(r)) if r.key == pause.key),
        )
        .await;
    let Some(Payload::PauseResolved(resolved)) = resolved.payload else {
        unreachable!()
    };
    assert_eq!(resolved.by, "token:t-controller");

    // Breakpoints: created_by and updated_by.
    let mut bps = BreakpointServiceClient::new(t.daemon.channel().await);
    let added = bps
        .add_breakpoint(with_token(
            AddBreakpointRequest {
                spec: Some(stepd_e2e::source_spec("/tmp/x.py", 3)),
            },
            &t.tokens["controller"],
        ))
        .await
        .unwrap()
        .into_inner()
        .breakpoint
        .unwrap();
    assert_eq!(added.created_by, "token:t-controller");
    assert_eq!(added.updated_by, "token:t-controller");
    let updated = bps
        .update_breakpoint(UpdateBreakpointRequest {
            id: added.id.clone(),
            spec: Some(stepd_e2e::source_spec("/tmp/x.py", 4)),
            update_mask: None,
        })
        .await
        .unwrap()
        .into_inner()
        .breakpoint
        .unwrap();
    assert_eq!(updated.created_by, "token:t-controller");
    assert!(
        updated.updated_by.starts_with("uid:0"),
        "the daemon's own user: {}",
        updated.updated_by
    );
    t.daemon.stop().await;
}

#[tokio::test]
async fn the_audit_log_has_one_line_per_mutating_call() {
    let dir = TempDir::new("audit");
    let file = dir.path().join("tokens");
    let controller = add_token(&file, "ctl", "controller");
    let viewer = add_token(&file, "view", "viewer");
    let data = TempDir::new("auditd");
    let mut command = Daemon::command(
        data.path(),
        &[
            "--auth-tokens",
            &file.display().to_string(),
            "--log-format",
            "json",
        ],
    );
    command
        .env("RUST_LOG", "warn,stepd::audit=info")
        .stderr(Stdio::piped());
    let mut daemon = Daemon::spawn(command, data.path()).await;
    let stderr = daemon.child.stderr.take().unwrap();
    let (lines_tx, mut lines) = mpsc::unbounded_channel::<serde_json::Value>();
    tokio::spawn(async move {
        let mut reader = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            if let Ok(json) = serde_json::from_str::<serde_json::Value>(&line)
                && json["target"] == "stepd::audit"
            {
                let _ = lines_tx.send(json);
            }
        }
    });
    let channel = daemon.channel().await;
    let mut bps = BreakpointServiceClient::new(channel.clone());
    let mut ping = DaemonServiceClient::new(channel.clone());
    // Not audited: reads.
    ping.ping(with_token(PingRequest::default(), &viewer))
        .await
        .unwrap();
    // Audited: a change, a refused change, a failed change, a removal.
    let added = bps
        .add_breakpoint(with_token(
            AddBreakpointRequest {
                spec: Some(stepd_e2e::source_spec("/tmp/a.py", 1)),
            },
            &controller,
        ))
        .await
        .unwrap()
        .into_inner()
        .breakpoint
        .unwrap();
    let denied = ping
        .shutdown(with_token(ShutdownRequest::default(), &viewer))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    let missing = bps
        .remove_breakpoint(with_token(
            RemoveBreakpointRequest {
                id: "bp-999".into(),
            },
            &controller,
        ))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    bps.remove_breakpoint(RemoveBreakpointRequest {
        id: added.id.clone(),
    })
    .await
    .unwrap();
    let expected = [
        (
            "token:ctl",
            "stepd.v1.BreakpointService/AddBreakpoint",
            "OK",
        ),
        (
            "token:view",
            "stepd.v1.DaemonService/Shutdown",
            "PERMISSION_DENIED",
        ),
        (
            "token:ctl",
            "stepd.v1.BreakpointService/RemoveBreakpoint",
            "NOT_FOUND",
        ),
        ("uid:0", "stepd.v1.BreakpointService/RemoveBreakpoint", "OK"),
    ];
    for (i, (who, method, code)) in expected.iter().enumerate() {
        let line = tokio::time::timeout(DEADLINE, lines.recv())
            .await
            .expect("an audit line in time")
            .expect("the daemon's stderr is open");
        assert!(
            line["identity"].as_str().unwrap().starts_with(who)
                && line["method"] == *method
                && line["code"] == *code,
            "line {i}: {line}"
        );
        if i == 0 || i == 3 {
            assert_eq!(line["about"], format!("breakpoint={}", added.id), "{line}");
        }
    }
    // The last call's line was the last: one line per call, none for Ping.
    ping.ping(PingRequest::default()).await.unwrap();
    ping.shutdown(ShutdownRequest::default()).await.unwrap();
    let last = tokio::time::timeout(DEADLINE, lines.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(last["method"], "stepd.v1.DaemonService/Shutdown", "{last}");
    assert_eq!(last["code"], "OK");
    daemon.wait_exit(DEADLINE).await;
    assert!(lines.recv().await.is_none(), "no more lines");
}

#[tokio::test]
async fn the_same_user_is_admin_with_no_flags() {
    let mut daemon = Daemon::start(&[]).await;
    let token = std::fs::read_to_string(daemon.data_dir.join("token")).unwrap();
    assert_eq!(token.lines().count(), 1);
    assert!(token.starts_with("stepd_"));
    // Shutdown needs admin.
    DaemonServiceClient::new(daemon.channel().await)
        .shutdown(ShutdownRequest::default())
        .await
        .expect("the daemon's own user is admin");
    daemon.wait_exit(DEADLINE).await;
}

/// A call that names another caller (as a forwarding replica does) is
/// taken as that caller only from an admin: the owner then enforces the
/// named role and records the named identity.
#[tokio::test]
async fn only_an_admin_may_name_the_caller_it_acts_for() {
    let t = tokened(&[]).await;
    let behalf = |token: &str, name: &str, role: &str| {
        let mut request = with_token(AddBreakpointRequest::default(), token);
        request
            .metadata_mut()
            .insert("x-stepd-on-behalf-of", name.parse().unwrap());
        request
            .metadata_mut()
            .insert("x-stepd-on-behalf-role", role.parse().unwrap());
        request
    };
    let mut client = BreakpointServiceClient::new(t.daemon.channel().await);
    for role in ["viewer", "controller", "probe"] {
        let err = client
            .add_breakpoint(behalf(&t.tokens[role], "token:someone", "admin"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{role}: {err:?}");
        assert_eq!(reason(&err), "PERMISSION_DENIED");
    }
    // An admin acting for a viewer gets the viewer's rights.
    let err = client
        .add_breakpoint(behalf(&t.tokens["admin"], "token:someone", "viewer"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    // For a controller, the record names the controller.
    let mut request = behalf(&t.tokens["admin"], "token:someone", "controller");
    request.get_mut().spec = Some(stepd_proto::v1::BreakpointSpec {
        location: Some(stepd_proto::v1::breakpoint_spec::Location::Probe(
            stepd_proto::v1::ProbeMatch {
                point_kind: "tool_call".into(),
                name_glob: "*".into(),
                ..Default::default()
            },
        )),
        ..Default::default()
    });
    let added = client.add_breakpoint(request).await.unwrap().into_inner();
    assert_eq!(added.breakpoint.unwrap().created_by, "token:someone");
    t.daemon.stop().await;
}

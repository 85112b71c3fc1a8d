//! Caps per identity as well as per daemon, on the real binary: sessions,
//! pending probe holds and Subscribe streams. One identity at its share is
//! refused `LIMIT_EXCEEDED` naming the cap and itself, the refusal changes
//! nothing, another identity is not affected, and a freed slot is reused.

use stepd_e2e::{DEADLINE, Daemon, TempDir, add_token, dap::pending_keys, reason, with_token};
use stepd_proto::v1::{
    ConnectRequest, ConnectResponse, ContinueCommand, DebugCommand, DebugInput, ErrorReason,
    GetStatusRequest, Hello, Hit, HitRefused, LaunchRequest, ListSessionsRequest, PointInfo,
    SendDebugInputRequest, SubscribeRequest, Watch, connect_request::Message as In,
    connect_response::Message as Out, daemon_service_client::DaemonServiceClient,
    debug_command::Command, event_service_client::EventServiceClient,
    probe_service_client::ProbeServiceClient, session_service_client::SessionServiceClient,
    subscribe_request::Message as SubscribeMessage,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status};

/// A daemon with tokens for probes `p1` and `p2`, viewers `v1`, `v2` and
/// admin `a1`.
struct Caps {
    daemon: Daemon,
    p1: String,
    p2: String,
    v1: String,
    v2: String,
    admin: String,
    _dir: TempDir,
}

async fn daemon_with(caps: &[&str]) -> Caps {
    let dir = TempDir::new("caps");
    let file = dir.path().join("tokens");
    let token = |name: &str, role: &str| add_token(&file, name, role);
    let (p1, p2, v1, v2) = (
        token("p1", "probe"),
        token("p2", "probe"),
        token("v1", "viewer"),
        token("v2", "viewer"),
    );
    let admin = token("a1", "admin");
    let file_arg = file.display().to_string();
    let mut args = vec!["--auth-tokens", &file_arg];
    args.extend_from_slice(caps);
    Caps {
        daemon: Daemon::start(&args).await,
        p1,
        p2,
        v1,
        v2,
        admin,
        _dir: dir,
    }
}

/// A connected probe: what it sends, what it hears, its session.
struct Probe {
    tx: mpsc::Sender<ConnectRequest>,
    rx: tonic::Streaming<ConnectResponse>,
    session_id: String,
}

impl Probe {
    async fn connect(daemon: &Daemon, token: &str) -> Result<Self, Status> {
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
        let mut rx = ProbeServiceClient::new(daemon.channel().await)
            .connect(with_token(ReceiverStream::new(rx), token))
            .await?
            .into_inner();
        let session_id = match Self::next(&mut rx).await {
            Out::Welcome(w) => w.session_id,
            other => panic!("expected Welcome, got {other:?}"),
        };
        Ok(Self { tx, rx, session_id })
    }

    async fn next(rx: &mut tonic::Streaming<ConnectResponse>) -> Out {
        loop {
            let message = tokio::time::timeout(DEADLINE, rx.message())
                .await
                .expect("a message from the daemon in time")
                .expect("the stream stays open")
                .expect("the stream has not ended")
                .message
                .expect("a message");
            if !matches!(message, Out::Armed(_)) {
                return message;
            }
        }
    }

    async fn hit(&self, id: &str) {
        self.tx
            .send(ConnectRequest {
                message: Some(In::Hit(Hit {
                    hit_id: id.into(),
                    point: Some(PointInfo {
                        kind: "tool_call".into(),
                        name: "Bash".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                })),
            })
            .await
            .unwrap();
    }

    async fn refused(&mut self) -> HitRefused {
        match Self::next(&mut self.rx).await {
            Out::Refused(r) => r,
            other => panic!("expected HitRefused, got {other:?}"),
        }
    }
}

fn limit_of(status: &Status) -> (String, String) {
    let info = tonic_types::StatusExt::get_details_error_info(status).expect("an ErrorInfo");
    let get = |k: &str| info.metadata.get(k).cloned().unwrap_or_default();
    (get("limit"), get("identity"))
}

async fn session_count(daemon: &Daemon) -> usize {
    SessionServiceClient::new(daemon.channel().await)
        .list_sessions(ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .sessions
        .len()
}

/// Waits for `n` pending pauses in the daemon.
async fn wait_pending(daemon: &Daemon, n: u32) {
    let mut client = DaemonServiceClient::new(daemon.channel().await);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let status = client.get_status(GetStatusRequest {}).await.unwrap();
        if status.into_inner().pending_pauses == n {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "never {n} pending");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn sessions_are_capped_per_identity_and_per_daemon() {
    let c = daemon_with(&["--max-sessions", "3", "--max-sessions-per-identity", "2"]).await;
    let d = &c.daemon;
    let first = Probe::connect(d, &c.p1).await.unwrap();
    let _second = Probe::connect(d, &c.p1).await.unwrap();
    let before = session_count(d).await;

    let refused = Probe::connect(d, &c.p1).await.err().expect("p1's third");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(reason(&refused), "LIMIT_EXCEEDED");
    assert_eq!(
        limit_of(&refused),
        ("max_sessions_per_identity".into(), "token:p1".into())
    );
    assert_eq!(session_count(d).await, before, "a refusal starts nothing");

    // Another identity has its own share, up to the daemon's cap.
    let _third = Probe::connect(d, &c.p2).await.unwrap();
    let refused = Probe::connect(d, &c.p2)
        .await
        .err()
        .expect("the daemon's fourth");
    assert_eq!(limit_of(&refused), ("max_sessions".into(), String::new()));

    // A session that ends frees its slot for its identity.
    let ended = first.session_id.clone();
    drop(first);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let again = loop {
        match Probe::connect(d, &c.p1).await {
            Ok(probe) => break probe,
            Err(status) => {
                assert_eq!(reason(&status), "LIMIT_EXCEEDED");
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "session {ended} never freed its slot"
                );
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    };
    assert_ne!(again.session_id, ended);
    c.daemon.stop().await;
}

#[tokio::test]
async fn a_launch_past_the_session_cap_is_refused_before_anything_starts() {
    let c = daemon_with(&["--max-sessions", "1"]).await;
    let d = &c.daemon;
    let _probe = Probe::connect(d, &c.p1).await.unwrap();
    let dir = TempDir::new("launch");
    let marker = dir.path().join("started");
    let refused = SessionServiceClient::new(d.channel().await)
        .launch(with_token(
            LaunchRequest {
                adapter_command: vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    format!("touch {}", marker.display()),
                ],
                program: "/bin/true".into(),
                ..Default::default()
            },
            &c.admin,
        ))
        .await
        .expect_err("the second session");
    assert_eq!(reason(&refused), "LIMIT_EXCEEDED");
    assert_eq!(limit_of(&refused).0, "max_sessions");
    assert!(!marker.exists(), "no adapter was started");
    assert_eq!(session_count(d).await, 1);
    c.daemon.stop().await;
}

#[tokio::test]
async fn probe_holds_are_capped_per_identity_across_its_sessions() {
    let c = daemon_with(&["--max-pauses-per-identity", "2"]).await;
    let d = &c.daemon;
    let (mut a, b) = (
        Probe::connect(d, &c.p1).await.unwrap(),
        Probe::connect(d, &c.p1).await.unwrap(),
    );
    a.hit("a1").await;
    b.hit("b1").await;
    wait_pending(d, 2).await;
    a.hit("a2").await;
    let refused = a.refused().await;
    assert_eq!(refused.hit_id, "a2");
    let error = refused.error.unwrap();
    assert_eq!(error.reason, ErrorReason::LimitExceeded as i32);
    assert_eq!(error.metadata["limit"], "max_pauses_per_identity");
    assert_eq!(error.metadata["identity"], "token:p1");
    assert_eq!(pending_keys(d, &a.session_id).await.len(), 1);

    // Another identity's probe still holds.
    let other = Probe::connect(d, &c.p2).await.unwrap();
    other.hit("o1").await;
    wait_pending(d, 3).await;

    // Answering one of p1's holds gives p1 its share back.
    let key = pending_keys(d, &a.session_id).await.remove(0);
    SessionServiceClient::new(d.channel().await)
        .send_debug_input(SendDebugInputRequest {
            input: Some(DebugInput {
                key,
                command: Some(DebugCommand {
                    command: Some(Command::Resume(ContinueCommand {})),
                }),
                client_name: "test".into(),
            }),
        })
        .await
        .unwrap();
    match Probe::next(&mut a.rx).await {
        Out::Resume(r) => assert_eq!(r.hit_id, "a1"),
        other => panic!("expected Resume, got {other:?}"),
    }
    a.hit("a3").await;
    wait_pending(d, 3).await;
    assert_eq!(pending_keys(d, &a.session_id).await.len(), 1);
    c.daemon.stop().await;
}

#[tokio::test]
async fn subscribers_are_capped_per_identity() {
    let c = daemon_with(&["--max-subscribers-per-identity", "1"]).await;
    let subscribe = |token: String| {
        let daemon = &c.daemon;
        async move {
            let (tx, rx) = mpsc::channel(4);
            tx.send(SubscribeRequest {
                message: Some(SubscribeMessage::Watch(Watch::default())),
            })
            .await
            .unwrap();
            let stream = EventServiceClient::new(daemon.channel().await)
                .subscribe(with_token(ReceiverStream::new(rx), &token))
                .await?;
            Ok::<_, Status>((tx, stream))
        }
    };
    let first = subscribe(c.v1.clone()).await.unwrap();
    let refused = subscribe(c.v1.clone()).await.expect_err("v1's second");
    assert_eq!(reason(&refused), "LIMIT_EXCEEDED");
    assert_eq!(
        limit_of(&refused),
        ("max_subscribers_per_identity".into(), "token:v1".into())
    );
    let _other = subscribe(c.v2.clone()).await.expect("v2 has its own share");
    drop(first);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while subscribe(c.v1.clone()).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a closed stream never freed its slot"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    c.daemon.stop().await;
}

//! Limits of probe sessions: how many holds a probe and the daemon keep,
//! the sizes of what a probe sends after its Hello, duplicate hit ids, releasing many holds when a probe goes away, and a
//! probe that sends faster than the daemon reads. The probe here speaks
//! HTTP/2 itself, so each message is its own DATA frame, as a probe library
//! writing one message per point sends them.

use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use prost::Message;
use stepd_e2e::{DEADLINE, Daemon, Subscription, dap::answer};
use stepd_proto::v1::{
    ConnectRequest, ConnectResponse, ContinueCommand, EndReason, ErrorReason, EvalCommand,
    EvalResult, GetSessionRequest, GetStatusRequest, Hello, Hit, HitRefused, ListPausesRequest,
    ObservedReport, PointInfo, ProbeCapabilities, Reports, ResumeDecision, Watch,
    connect_request::Message as In, connect_response::Message as Out,
    daemon_service_client::DaemonServiceClient, debug_command::Command, event::Payload,
    session_service_client::SessionServiceClient,
};
use tokio::net::TcpStream;

/// A probe connection over raw HTTP/2: one DATA frame per message, sent only
/// as the daemon's flow-control window allows.
struct RawProbe {
    send: h2::SendStream<Bytes>,
    body: h2::RecvStream,
    buf: BytesMut,
    session_id: String,
    /// The connection's driver; its result says how the connection ended.
    conn: tokio::task::JoinHandle<Result<(), h2::Error>>,
}

fn grpc_frame(message: &ConnectRequest) -> Bytes {
    let body = message.encode_to_vec();
    let mut frame = Vec::with_capacity(body.len() + 5);
    frame.push(0);
    frame.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(&body);
    frame.into()
}

impl RawProbe {
    async fn connect(daemon: &Daemon) -> Self {
        Self::connect_with(daemon, ProbeCapabilities::default()).await
    }

    async fn connect_with(daemon: &Daemon, capabilities: ProbeCapabilities) -> Self {
        let tcp = TcpStream::connect(&daemon.addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        let conn = tokio::spawn(conn);
        let mut client = client.ready().await.unwrap();
        let request = http::Request::builder()
            .method("POST")
            .uri(format!(
                "http://{}/stepd.v1.ProbeService/Connect",
                daemon.addr
            ))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (response, mut send) = client.send_request(request, false).unwrap();
        let hello = grpc_frame(&ConnectRequest {
            message: Some(In::Hello(Hello {
                name: "flood".into(),
                language: "test".into(),
                capabilities: Some(capabilities),
                ..Default::default()
            })),
        });
        send.send_data(hello, false).unwrap();
        let response = tokio::time::timeout(DEADLINE, response)
            .await
            .expect("response headers in time")
            .unwrap();
        assert_eq!(response.status(), 200);
        let mut probe = Self {
            send,
            body: response.into_body(),
            buf: BytesMut::new(),
            session_id: String::new(),
            conn,
        };
        match probe.next().await {
            Some(Out::Welcome(w)) => probe.session_id = w.session_id,
            other => panic!("expected Welcome, got {other:?}"),
        }
        probe
    }

    /// Sends one message as one DATA frame (or, past the window, as many as
    /// the window takes at a time), waiting for window as needed.
    async fn send(&mut self, message: In) {
        let mut frame = grpc_frame(&ConnectRequest {
            message: Some(message),
        });
        while !frame.is_empty() {
            self.send.reserve_capacity(frame.len());
            while self.send.capacity() == 0 {
                let granted = tokio::time::timeout(
                    DEADLINE,
                    std::future::poll_fn(|cx| self.send.poll_capacity(cx)),
                )
                .await
                .expect("the daemon opens its window in time");
                match granted {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => panic!("the connection failed while sending: {e}"),
                    None => {
                        let ended = tokio::time::timeout(DEADLINE, &mut self.conn).await;
                        panic!("the stream closed while sending: {ended:?}")
                    }
                }
            }
            let piece = frame.split_to(self.send.capacity().min(frame.len()));
            self.send.send_data(piece, false).unwrap();
        }
    }

    async fn hit(&mut self, id: &str) {
        self.send(In::Hit(Hit {
            hit_id: id.into(),
            point: Some(PointInfo {
                kind: "tool_call".into(),
                name: "Bash".into(),
                ..Default::default()
            }),
            ..Default::default()
        }))
        .await;
    }

    /// The next message from the daemon; None when its stream ended.
    async fn next(&mut self) -> Option<Out> {
        tokio::time::timeout(DEADLINE, self.try_next())
            .await
            .expect("a message from the daemon in time")
    }

    async fn try_next(&mut self) -> Option<Out> {
        loop {
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes(self.buf[1..5].try_into().unwrap()) as usize;
                if self.buf.len() >= 5 + len {
                    self.buf.advance(5);
                    let message = self.buf.split_to(len);
                    return ConnectResponse::decode(message.freeze()).unwrap().message;
                }
            }
            let chunk = self.body.data().await?.unwrap();
            let _ = self.body.flow_control().release_capacity(chunk.len());
            self.buf.extend_from_slice(&chunk);
        }
    }

    /// The next message that is not an Armed.
    async fn next_answer(&mut self) -> Out {
        loop {
            match self.next().await {
                Some(Out::Armed(_)) => {}
                Some(other) => return other,
                None => panic!("the daemon ended the probe's stream"),
            }
        }
    }

    async fn refused(&mut self) -> HitRefused {
        match self.next_answer().await {
            Out::Refused(r) => r,
            other => panic!("expected HitRefused, got {other:?}"),
        }
    }
}

async fn pending(daemon: &Daemon, session_id: &str) -> Vec<stepd_proto::v1::Pause> {
    SessionServiceClient::new(daemon.channel().await)
        .list_pauses(ListPausesRequest {
            session_id: session_id.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .pauses
}

/// Waits until the daemon counts `n` pending pauses.
async fn wait_pending(daemon: &Daemon, n: u32) -> Duration {
    let mut client = DaemonServiceClient::new(daemon.channel().await);
    let start = Instant::now();
    loop {
        let status = client
            .get_status(GetStatusRequest {})
            .await
            .unwrap()
            .into_inner();
        if status.pending_pauses == n {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < DEADLINE * 3,
            "{} pauses pending, waiting for {n}",
            status.pending_pauses
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn metadata<'a>(refused: &'a HitRefused, key: &str) -> &'a str {
    refused
        .error
        .as_ref()
        .and_then(|e| e.metadata.get(key))
        .map_or("", String::as_str)
}

fn reason_of(refused: &HitRefused) -> i32 {
    refused.error.as_ref().map_or(0, |e| e.reason)
}

#[tokio::test]
async fn a_probe_holds_at_most_its_limit_and_goes_on_working() {
    let daemon = Daemon::start(&[]).await;
    let mut probe = RawProbe::connect(&daemon).await;
    // The default: 1,024 holds per probe.
    for i in 0..1024 {
        probe.hit(&format!("h{i}")).await;
    }
    probe.hit("over").await;
    let refused = probe.refused().await;
    assert_eq!(refused.hit_id, "over");
    assert_eq!(reason_of(&refused), ErrorReason::LimitExceeded as i32);
    assert_eq!(
        refused.error.as_ref().unwrap().code,
        tonic::Code::ResourceExhausted as i32
    );
    assert_eq!(metadata(&refused, "limit"), "max_probe_pauses");
    assert_eq!(metadata(&refused, "max"), "1024");
    let pauses = pending(&daemon, &probe.session_id).await;
    assert_eq!(pauses.len(), 1024);
    assert!(pauses.iter().all(|p| p.original_id != "over"));

    // The session still works: a hold is answered, and its room is used again.
    let first = pauses.iter().find(|p| p.original_id == "h0").unwrap();
    answer(&daemon, &first.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let Out::Resume(resume) = probe.next_answer().await else {
        panic!("expected Resume")
    };
    assert_eq!(resume.hit_id, "h0");
    assert_eq!(resume.decision, ResumeDecision::Continue as i32);
    probe.hit("again").await;
    wait_pending(&daemon, 1024).await;
    let pauses = pending(&daemon, &probe.session_id).await;
    assert!(pauses.iter().any(|p| p.original_id == "again"));
    daemon.stop().await;
}

#[tokio::test]
async fn the_daemon_holds_at_most_its_limit_across_probes() {
    // Both probes are the same identity: its share is set to the daemon's
    // cap, so the daemon's cap is the one met.
    let daemon = Daemon::start(&[
        "--max-probe-pauses",
        "3",
        "--max-pauses",
        "4",
        "--max-pauses-per-identity",
        "4",
    ])
    .await;
    let mut a = RawProbe::connect(&daemon).await;
    let mut b = RawProbe::connect(&daemon).await;
    for i in 0..3 {
        a.hit(&format!("a{i}")).await;
    }
    a.hit("a-over").await;
    let refused = a.refused().await;
    assert_eq!(refused.hit_id, "a-over");
    assert_eq!(metadata(&refused, "limit"), "max_probe_pauses");
    assert_eq!(metadata(&refused, "max"), "3");
    b.hit("b0").await;
    wait_pending(&daemon, 4).await;
    b.hit("b1").await;
    let refused = b.refused().await;
    assert_eq!(refused.hit_id, "b1");
    assert_eq!(reason_of(&refused), ErrorReason::LimitExceeded as i32);
    assert_eq!(metadata(&refused, "limit"), "max_pauses");
    assert_eq!(metadata(&refused, "max"), "4");
    assert_eq!(pending(&daemon, "").await.len(), 4);
    daemon.stop().await;
}

#[tokio::test]
async fn a_duplicate_hit_id_is_refused_and_the_first_hold_stays() {
    let daemon = Daemon::start(&[]).await;
    let mut probe = RawProbe::connect(&daemon).await;
    probe.hit("h1").await;
    probe.hit("h1").await;
    let refused = probe.refused().await;
    assert_eq!(refused.hit_id, "h1");
    assert_eq!(reason_of(&refused), ErrorReason::InvalidArgument as i32);
    assert_eq!(metadata(&refused, "field"), "hit.hit_id");
    let pauses = pending(&daemon, &probe.session_id).await;
    assert_eq!(pauses.len(), 1, "{pauses:?}");
    answer(&daemon, &pauses[0].key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let Out::Resume(resume) = probe.next_answer().await else {
        panic!("expected Resume")
    };
    assert_eq!(resume.hit_id, "h1");
    // Once resolved, the id may be used again.
    probe.hit("h1").await;
    wait_pending(&daemon, 1).await;
    daemon.stop().await;
}

#[tokio::test]
async fn twenty_thousand_holds_are_released_when_the_probe_goes_away() {
    const N: u32 = 20_000;
    let daemon = Daemon::start(&[
        "--max-probe-pauses",
        "20000",
        "--max-pauses",
        "20000",
        "--max-pauses-per-identity",
        "20000",
    ])
    .await;
    let mut probe = RawProbe::connect(&daemon).await;
    // In batches the daemon takes in one at a time: this is about
    // releasing them, not about a flood.
    let start = Instant::now();
    for batch in 0..N / 500 {
        for i in batch * 500..(batch + 1) * 500 {
            probe.hit(&format!("h{i}")).await;
        }
        wait_pending(&daemon, (batch + 1) * 500).await;
    }
    let held = start.elapsed();
    let last = pending(&daemon, &probe.session_id)
        .await
        .into_iter()
        .find(|p| p.original_id == format!("h{}", N - 1))
        .expect("the last hold is pending");
    let session_id = probe.session_id.clone();
    let start = Instant::now();
    drop(probe);
    wait_pending(&daemon, 0).await;
    let released = start.elapsed();
    eprintln!("{N} holds: held in {held:?}; released in {released:?}");
    // The session ends once its holds are released.
    let mut sessions = SessionServiceClient::new(daemon.channel().await);
    let deadline = Instant::now() + DEADLINE;
    let session = loop {
        let session = sessions
            .get_session(GetSessionRequest {
                session_id: session_id.clone(),
            })
            .await
            .unwrap()
            .into_inner()
            .session
            .unwrap();
        if session.end_reason != EndReason::Unspecified as i32 || Instant::now() > deadline {
            break session;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(session.end_reason, EndReason::ProbeDisconnected as i32);
    // Nobody answered them: they ended with their session.
    let err = answer(&daemon, &last.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap_err();
    assert_eq!(stepd_e2e::reason(&err), "SESSION_ENDED");
    daemon.stop().await;
}

#[tokio::test]
async fn a_probe_that_sends_faster_than_the_daemon_reads_is_slowed_not_dropped() {
    const N: usize = 50_000;
    let daemon = Daemon::start(&[]).await;
    let mut probe = RawProbe::connect(&daemon).await;
    let started = Instant::now();
    for i in 0..N {
        probe
            .send(In::Reports(Reports {
                observed: vec![ObservedReport {
                    kind: "k".into(),
                    name: format!("{i}"),
                    ..Default::default()
                }],
                ..Default::default()
            }))
            .await;
    }
    // Every report was read, and the stream is still the probe's: a hold
    // after them, with a value many windows long (just within the 1 MiB
    // `value_bytes`), is held and answered.
    let sent = Instant::now();
    probe
        .send(In::Hit(Hit {
            hit_id: "after".into(),
            point: Some(PointInfo {
                kind: "tool_result".into(),
                name: "Bash".into(),
                payload: Some(prost_types::Value {
                    kind: Some(prost_types::value::Kind::StringValue(
                        "x".repeat((1 << 20) - 16),
                    )),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }))
        .await;
    let deadline = Instant::now() + DEADLINE;
    let pause = loop {
        if let Some(p) = pending(&daemon, &probe.session_id).await.into_iter().next() {
            break p;
        }
        assert!(
            !probe.conn.is_finished(),
            "the daemon closed the connection"
        );
        assert!(
            Instant::now() < deadline,
            "the hold after the flood never came"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    eprintln!(
        "{N} reports sent in {:?}; a 1 MiB hold after them pending in {:?}",
        sent - started,
        sent.elapsed()
    );
    assert_eq!(pause.original_id, "after");
    answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let Out::Resume(resume) = probe.next_answer().await else {
        panic!("expected Resume")
    };
    assert_eq!(resume.hit_id, "after");
    daemon.stop().await;
}

#[tokio::test]
async fn a_hit_over_a_size_limit_is_refused_and_the_stream_goes_on() {
    let daemon = Daemon::start(&[]).await;
    let mut probe = RawProbe::connect(&daemon).await;
    let long = "n".repeat(5000);
    let oversized = [
        ("point.name", "hit.point.name", "name_bytes"),
        ("locals", "hit.locals", "local_count"),
        ("payload", "hit.point.payload", "value_bytes"),
        ("location", "hit.location.path", "path_bytes"),
        ("exception", "hit.exception_message", "message_bytes"),
    ];
    for (i, (what, field, limit)) in oversized.into_iter().enumerate() {
        let mut hit = Hit {
            hit_id: format!("big-{i}"),
            point: Some(PointInfo {
                kind: "tool_call".into(),
                name: "Bash".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let point = hit.point.as_mut().unwrap();
        match what {
            "point.name" => point.name.clone_from(&long),
            "locals" => hit.locals = vec![Default::default(); 1025],
            "payload" => point.payload = Some(string(&"v".repeat(1 << 20))),
            "location" => {
                hit.location = Some(stepd_proto::v1::Location {
                    path: long.clone(),
                    ..Default::default()
                });
            }
            _ => hit.exception_message = "e".repeat(65 * 1024),
        }
        probe.send(In::Hit(hit)).await;
        let refused = probe.refused().await;
        assert_eq!(refused.hit_id, format!("big-{i}"));
        assert_eq!(reason_of(&refused), ErrorReason::LimitExceeded as i32);
        assert_eq!(metadata(&refused, "field"), field, "{what}");
        assert_eq!(metadata(&refused, "limit"), limit, "{what}");
    }
    assert!(pending(&daemon, &probe.session_id).await.is_empty());
    // The session is unchanged: the next hit within limits holds.
    probe.hit("small").await;
    wait_pending(&daemon, 1).await;
    daemon.stop().await;
}

#[tokio::test]
async fn reports_over_a_size_limit_are_dropped_with_a_warning_and_the_rest_published() {
    let daemon = Daemon::start(&[]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    let mut probe = RawProbe::connect(&daemon).await;
    let observed = |name: &str, value: &str| ObservedReport {
        kind: "skill_loaded".into(),
        name: name.into(),
        value: Some(string(value)),
        ..Default::default()
    };
    probe
        .send(In::Reports(Reports {
            observed: vec![
                observed("before", "ok"),
                observed("huge", &"v".repeat(1 << 20)),
                observed("after", "ok"),
            ],
            ..Default::default()
        }))
        .await;
    let mut names = Vec::new();
    let warning = sub
        .wait_for("the warning about the dropped report", |event| {
            match &event.payload {
                Some(Payload::Observed(o)) => names.push(o.name.clone()),
                Some(Payload::Notification(n)) => return n.message.contains("size limit"),
                _ => {}
            }
            false
        })
        .await;
    let Some(Payload::Notification(warning)) = warning.payload else {
        unreachable!()
    };
    assert!(
        warning.message.contains("dropped 1 of")
            && warning.message.contains("reports.observed[1].value"),
        "{}",
        warning.message
    );
    sub.wait_for("the report after the dropped one", |event| {
        if let Some(Payload::Observed(o)) = &event.payload {
            names.push(o.name.clone());
        }
        names.len() == 2
    })
    .await;
    assert_eq!(names, ["before", "after"]);
    daemon.stop().await;
}

#[tokio::test]
async fn an_eval_result_over_a_size_limit_fails_the_eval_and_the_pause_stays() {
    let daemon = Daemon::start(&[]).await;
    let mut probe = RawProbe::connect_with(
        &daemon,
        ProbeCapabilities {
            eval: true,
            ..Default::default()
        },
    )
    .await;
    probe.hit("h1").await;
    wait_pending(&daemon, 1).await;
    let key = pending(&daemon, &probe.session_id).await[0].key.clone();
    let evaluating = answer(
        &daemon,
        &key,
        Command::Eval(EvalCommand {
            code: "huge".into(),
        }),
    );
    let at_probe = async {
        let eval = loop {
            match probe.next_answer().await {
                Out::Eval(eval) => break eval,
                _ => continue,
            }
        };
        probe
            .send(In::EvalResult(EvalResult {
                eval_id: eval.eval_id,
                value: "v".repeat((1 << 20) + 1),
                ..Default::default()
            }))
            .await;
    };
    let (evaluated, ()) = tokio::join!(evaluating, at_probe);
    let status = evaluated.expect_err("an oversized result fails the EVAL");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert_eq!(stepd_e2e::reason(&status), "LIMIT_EXCEEDED");
    assert!(
        status.message().contains("eval_result.value"),
        "{}",
        status.message()
    );
    // The pause is still there and answerable.
    answer(&daemon, &key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let Out::Resume(resume) = probe.next_answer().await else {
        panic!("expected Resume")
    };
    assert_eq!(resume.hit_id, "h1");
    daemon.stop().await;
}

fn string(text: &str) -> prost_types::Value {
    prost_types::Value {
        kind: Some(prost_types::value::Kind::StringValue(text.into())),
    }
}

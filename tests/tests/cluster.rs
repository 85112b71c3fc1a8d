//! Replicas sharing one PostgreSQL database act as one daemon: a session on
//! one replica is seen, listed and answered on every other (the session
//! directory, relayed events and forwarded calls), and a replica that dies
//! loses its sessions when its lease runs out.

use std::time::{Duration, Instant};

use stepd_e2e::{
    DEADLINE, Daemon, Subscription, dap, haproxy::Haproxy, held, postgres, probe::Probe, reason,
};
use stepd_proto::v1::{
    BreakpointAction, BreakpointChange, BreakpointSpec, CommandKind, DebugCommand, DebugInput,
    EndReason, GetSessionHistoryRequest, GetSessionRequest, GetStatusRequest, Hit, InspectRequest,
    InspectSource, ListPausesRequest, ListSessionsRequest, PointInfo, RefreshRequest,
    SendDebugInputRequest, Watch, connect_request::Message as In, connect_response::Message as Out,
    daemon_service_client::DaemonServiceClient, debug_command::Command, event::Payload,
    history_service_client::HistoryServiceClient, inspect_source::Source,
    inspector_service_client::InspectorServiceClient, session_service_client::SessionServiceClient,
    subscribe_request::Message as SubscribeMessage,
};

/// The replicas' lease: short enough for a test to see it run out, long
/// enough for a call made right after a kill to fall within it (two thirds
/// of it are left at the least, a renewal being a third of a lease apart).
const LEASE: Duration = Duration::from_secs(3);

/// How soon after a replica dies every other replica reports its sessions
/// lost: when its lease runs out, plus a second for reading the directory
/// and sending the event.
const LOST_WITHIN: Duration = Duration::from_secs(LEASE.as_secs() + 1);

async fn replica(url: &str) -> (Daemon, Subscription) {
    replica_leased(url, LEASE).await
}

async fn replica_leased(url: &str, lease: Duration) -> (Daemon, Subscription) {
    let lease = format!("{}s", lease.as_secs());
    let daemon = Daemon::start(&["--database-url", url, "--replica-lease", &lease]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    (daemon, sub)
}

/// Waits until `sub` shows `session` ended because its replica was lost,
/// and returns how long after `killed` it came.
async fn lost(sub: &mut Subscription, session: &str, killed: Instant) -> Duration {
    let event = dap::ended(sub, session).await;
    let after = killed.elapsed();
    let Some(Payload::SessionEnded(ended)) = event.payload else {
        panic!("a session_ended event, got {event:?}")
    };
    assert_eq!(ended.reason, EndReason::ReplicaLost as i32, "{ended:?}");
    assert!(ended.detail.contains("lease"), "{}", ended.detail);
    after
}

/// A STOP breakpoint at the tool call "Bash" the holds below report.
fn tool_calls() -> BreakpointSpec {
    BreakpointSpec {
        action: BreakpointAction::Stop as i32,
        ..held::bash_breakpoint()
    }
}

/// Waits until a stream shows a breakpoint added (on any replica).
async fn breakpoint_added(sub: &mut Subscription) {
    sub.wait_for("a breakpoint added", |e| {
        matches!(&e.payload, Some(Payload::BreakpointUpdated(u))
            if u.change == BreakpointChange::Added as i32)
    })
    .await;
}

/// How a stream says the pause `key` was resolved.
async fn resolution(sub: &mut Subscription, key: &str) -> stepd_proto::v1::PauseResolved {
    let event = sub
        .wait_for(
            "pause_resolved",
            |e| matches!(&e.payload, Some(Payload::PauseResolved(r)) if r.key == key),
        )
        .await;
    let Some(Payload::PauseResolved(resolved)) = event.payload else {
        unreachable!()
    };
    resolved
}

/// Waits until a stream shows the session started (relayed from its replica).
async fn started(sub: &mut Subscription, session_id: &str) {
    sub.wait_for("the session started", |e| {
        e.session_id == session_id && matches!(e.payload, Some(Payload::SessionStarted(_)))
    })
    .await;
}

async fn hold(probe: &Probe, breakpoint: &str) {
    probe
        .send(In::Hit(Hit {
            hit_id: "h1".into(),
            point: Some(PointInfo {
                kind: "tool_call".into(),
                name: "Bash".into(),
                payload: Some(prost_types::Value {
                    kind: Some(prost_types::value::Kind::ListValue(
                        prost_types::ListValue {
                            values: (0..3)
                                .map(|n| prost_types::Value {
                                    kind: Some(prost_types::value::Kind::NumberValue(n.into())),
                                })
                                .collect(),
                        },
                    )),
                }),
                ..Default::default()
            }),
            breakpoint_ids: vec![breakpoint.into()],
            ..Default::default()
        }))
        .await;
}

fn carry_on(key: &str) -> SendDebugInputRequest {
    SendDebugInputRequest {
        input: Some(DebugInput {
            key: key.into(),
            command: Some(DebugCommand {
                command: Some(Command::Continue(Default::default())),
            }),
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn a_pause_held_on_one_replica_is_answered_from_another_exactly_once() {
    let url = postgres::database("cluster_answer");
    let (a, mut on_a) = replica(&url).await;
    let (b, mut on_b) = replica(&url).await;
    let (c, mut on_c) = replica(&url).await;

    // The breakpoint is added through C and reaches B, where the probe is.
    let id = dap::add_breakpoint(&c, tool_calls()).await;
    breakpoint_added(&mut on_b).await;
    let (mut probe, _) = Probe::connect(&b, &[]).await;
    let session = probe.session_id.clone();
    started(&mut on_a, &session).await;
    started(&mut on_c, &session).await;

    hold(&probe, &id).await;
    let pause = dap::next_pause(&mut on_a, &session).await;
    dap::next_pause(&mut on_c, &session).await;

    // A lists the pause and the session it does not run.
    let listed = SessionServiceClient::new(a.channel().await)
        .list_pauses(ListPausesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .pauses;
    assert!(listed.iter().any(|p| p.key == pause.key), "{listed:?}");
    let sessions = SessionServiceClient::new(a.channel().await)
        .list_sessions(ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert!(sessions.iter().any(|s| s.id == session));
    // Every replica lists the three, and counts the cluster's sessions.
    let status = DaemonServiceClient::new(a.channel().await)
        .get_status(GetStatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.replicas.len(), 3, "{status:?}");
    let answering: Vec<_> = status.replicas.iter().filter(|r| r.answering).collect();
    assert_eq!(answering.len(), 1);
    assert_eq!(answering[0].address, a.addr);
    let b_status = status
        .replicas
        .iter()
        .find(|r| r.address == b.addr)
        .unwrap();
    assert_eq!(b_status.sessions, 1);
    assert_eq!(status.pending_pauses, 1);
    // `stepctl status` shows them too.
    let out = std::process::Command::new(stepd_e2e::stepctl_bin())
        .arg("status")
        .env("STEPD_ADDR", &a.addr)
        .env("NO_COLOR", "1")
        .output()
        .expect("run stepctl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("\nreplica ").count(), 3, "{text}");
    assert!(
        text.contains(&format!("{} {} (1 session)", b.addr, b_status.id)),
        "{text}"
    );
    // A request over the message limit is refused as on one daemon.
    let err = SessionServiceClient::new(a.channel().await)
        .get_session(GetSessionRequest {
            session_id: "x".repeat(17 << 20),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LIMIT_EXCEEDED", "{err:?}");
    // GetSession is answered by B, whose pause book holds the pause.
    let got = SessionServiceClient::new(a.channel().await)
        .get_session(GetSessionRequest {
            session_id: session.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.pauses.len(), 1, "{got:?}");
    // The probe and the test's clients run as one Unix user: that identity
    // is what B must record for an answer forwarded from A or C.
    let caller = got.session.as_ref().unwrap().started_by.clone();

    // An inspector opened on A over the held value lives on B, and every
    // call about it made on A is answered there.
    let mut inspector = InspectorServiceClient::new(a.channel().await);
    let rendering = inspector
        .inspect(InspectRequest {
            session_id: session.clone(),
            source: Some(InspectSource {
                source: Some(Source::PauseValue(pause.key.clone())),
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .rendering
        .unwrap();
    let total = |r: &stepd_proto::v1::Rendering| r.page.as_ref().and_then(|p| p.total);
    assert_eq!(total(&rendering), Some(3), "{rendering:?}");
    let refreshed = inspector
        .refresh(RefreshRequest {
            inspector_id: rendering.inspector_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(total(&refreshed.rendering.unwrap()), Some(3));

    // A command outside the pause's input_type, sent on A, is refused by B
    // and leaves the pause as it was: the answers below still find it.
    let refused = SessionServiceClient::new(a.channel().await)
        .send_debug_input(SendDebugInputRequest {
            input: Some(DebugInput {
                key: pause.key.clone(),
                command: Some(DebugCommand {
                    command: Some(Command::Locals(Default::default())),
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&refused), "INVALID_COMMAND", "{refused:?}");

    // Two clients, on A and on C, answer at once: one wins.
    let answered = Instant::now();
    let (mut on_a_rpc, mut on_c_rpc) = (
        SessionServiceClient::new(a.channel().await),
        SessionServiceClient::new(c.channel().await),
    );
    let (from_a, from_c) = tokio::join!(
        on_a_rpc.send_debug_input(carry_on(&pause.key)),
        on_c_rpc.send_debug_input(carry_on(&pause.key)),
    );
    let took = answered.elapsed();
    let outcomes = [from_a, from_c];
    let won: Vec<_> = outcomes.iter().filter(|r| r.is_ok()).collect();
    assert_eq!(won.len(), 1, "{outcomes:?}");
    let lost = outcomes.iter().find_map(|r| r.as_ref().err()).unwrap();
    assert_eq!(reason(lost), "ALREADY_ANSWERED", "{lost:?}");
    assert_eq!(
        won[0].as_ref().unwrap().get_ref().command,
        CommandKind::Continue as i32
    );
    eprintln!("answered across replicas in {took:?}");

    // The probe on B goes on, and every stream says who answered.
    tokio::time::timeout(DEADLINE, async {
        loop {
            if let Out::Resume(r) = stepd_e2e::probe::next(&mut probe.rx).await {
                assert_eq!(r.hit_id, "h1");
                return;
            }
        }
    })
    .await
    .expect("resumed");
    for sub in [&mut on_a, &mut on_b, &mut on_c] {
        let resolved = resolution(sub, &pause.key).await;
        assert!(resolved.by.starts_with("uid:"), "{}", resolved.by);
        assert_eq!(resolved.by, caller);
    }
    drop(probe);
    for daemon in [a, b, c] {
        daemon.stop().await;
    }
}

#[tokio::test]
async fn a_killed_replica_loses_its_sessions_when_its_lease_runs_out() {
    let url = postgres::database("cluster_lease");
    // B, which dies, has the short lease. A's is long, its own renewals 20 s
    // apart: A must look when B's lease runs out, not at its next renewal.
    let (mut b, _) = replica(&url).await;
    replicas_in_directory(&url, 1).await;
    let (a, mut on_a) = replica_leased(&url, Duration::from_secs(60)).await;
    let (probe, _) = Probe::connect(&b, &[]).await;
    let session = probe.session_id.clone();
    started(&mut on_a, &session).await;

    let killed = Instant::now();
    b.child.start_kill().unwrap();
    b.child.wait().await.unwrap();
    // Until the lease runs out the session is B's: a call about it says B
    // does not answer.
    let err = SessionServiceClient::new(a.channel().await)
        .get_session(GetSessionRequest {
            session_id: session.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "REPLICA_UNAVAILABLE", "{err:?}");

    let after = lost(&mut on_a, &session, killed).await;
    eprintln!("ended on A {after:?} after the kill");
    assert!(
        after <= LOST_WITHIN,
        "ended on A {after:?} after the kill; B's lease is {LEASE:?}"
    );
    // Ended, it is answered here again.
    let got = SessionServiceClient::new(a.channel().await)
        .get_session(GetSessionRequest {
            session_id: session.clone(),
        })
        .await
        .unwrap_or_else(|err| panic!("GetSession on A once B's session was lost: {err:?}"))
        .into_inner();
    assert_eq!(
        got.session.unwrap().end_reason,
        EndReason::ReplicaLost as i32
    );
    drop(probe);
    a.stop().await;
}

/// Waits until the session directory lists `n` replicas.
async fn replicas_in_directory(url: &str, n: usize) {
    let deadline = Instant::now() + DEADLINE;
    while postgres::query(url, "SELECT count(*) FROM stepd_replicas") != n.to_string() {
        assert!(
            Instant::now() < deadline,
            "never {n} replicas in the directory"
        );
        tokio::task::yield_now().await;
    }
}

/// The replica (of `replicas`) that runs `session`, as the session
/// directory records it.
async fn owner_of(url: &str, session: &str, replicas: &[&Daemon]) -> usize {
    let sql = format!(
        "SELECT r.address FROM stepd_sessions s JOIN stepd_replicas r ON r.id = s.replica_id \
         WHERE s.session_id = '{session}'"
    );
    let deadline = Instant::now() + DEADLINE;
    loop {
        let address = postgres::query(url, &sql);
        if let Some(i) = replicas.iter().position(|r| r.addr == address) {
            return i;
        }
        assert!(
            Instant::now() < deadline,
            "{session} is in no replica's directory row"
        );
        tokio::task::yield_now().await;
    }
}

/// The next pause a stream shows of the program in `lang`, in a session
/// other than `not_in`.
async fn pause_of(sub: &mut Subscription, lang: &str, not_in: &str) -> stepd_proto::v1::Pause {
    let event = sub
        .wait_for("a probe's pause", |e| match &e.payload {
            Some(Payload::Stopped(s)) => s.pause.as_ref().is_some_and(|p| {
                p.session_id != not_in && held::payload(p)["lang"].as_str() == Some(lang)
            }),
            _ => false,
        })
        .await;
    let Some(Payload::Stopped(stopped)) = event.payload else {
        unreachable!()
    };
    stopped.pause.unwrap()
}

/// A pending pause of the program in `lang`, in a session other than
/// `not_in`, as `ListPauses` on `daemon` lists it once it does.
async fn listed_pause(daemon: &Daemon, lang: &str, not_in: &str) -> stepd_proto::v1::Pause {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let pauses = SessionServiceClient::new(daemon.channel().await)
            .list_pauses(ListPausesRequest::default())
            .await
            .unwrap()
            .into_inner()
            .pauses;
        if let Some(pause) = pauses
            .into_iter()
            .find(|p| p.session_id != not_in && held::payload(p)["lang"].as_str() == Some(lang))
        {
            return pause;
        }
        assert!(Instant::now() < deadline, "no {lang} pause listed");
        tokio::task::yield_now().await;
    }
}

/// The replica id a stream is served by (its snapshot's instance).
fn instance_of(event: &stepd_proto::v1::Event) -> String {
    match &event.payload {
        Some(Payload::Snapshot(s)) => s.instance_id.clone(),
        other => panic!("a snapshot first, got {other:?}"),
    }
}

async fn through(proxy: &Haproxy) -> tonic::transport::Channel {
    tonic::transport::Channel::from_shared(format!("http://{}", proxy.addr))
        .unwrap()
        .connect()
        .await
        .expect("connect through the proxy")
}

#[tokio::test]
async fn three_replicas_behind_a_proxy_answer_for_each_other_and_survive_a_kill() {
    let url = postgres::database("cluster_proxy");
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(replica(&url).await);
    }
    let addrs: Vec<&str> = replicas.iter().map(|(d, _)| d.addr.as_str()).collect();
    let proxy = Haproxy::balance(&addrs).await;

    // Three watchers through the proxy: round-robin serves one from each
    // replica.
    let mut watchers = Vec::new();
    for _ in 0..3 {
        let mut watcher = Subscription::open(through(&proxy).await, Watch::default()).await;
        let first = watcher.next().await;
        watchers.push((watcher, instance_of(&first), first.seq));
    }

    // The breakpoint is added through replica 0 and reaches every replica.
    dap::add_breakpoint(&replicas[0].0, held::bash_breakpoint()).await;
    for (_, sub) in &mut replicas {
        breakpoint_added(sub).await;
    }

    // Both probe programs connect through the proxy.
    let (mut python, mut go) = held::programs(&proxy.addr, &[]);
    let session_of = |line: String| {
        line.strip_prefix("session ")
            .unwrap_or_else(|| panic!("a session line, got {line:?}"))
            .to_owned()
    };
    let python_session = session_of(python.line().await);
    let go_session = session_of(go.line().await);
    let daemons: Vec<&Daemon> = replicas.iter().map(|(d, _)| d).collect();
    let python_owner = owner_of(&url, &python_session, &daemons).await;
    let go_owner = owner_of(&url, &go_session, &daemons).await;

    // The Python hold is answered on a replica that does not run it (and is
    // not the one the breakpoint was added through, when there is one).
    let answerer = (0..3)
        .rev()
        .find(|i| *i != python_owner)
        .expect("another replica");
    let python_pause = pause_of(&mut replicas[answerer].1, "python", "").await;
    held::inject(&replicas[answerer].0, &python_pause, "python").await;
    assert_eq!(
        python.line().await,
        r#"result {"cmd": "injected", "lang": "python"}"#
    );

    // The replica running the Go probe is killed.
    let (mut killed, _) = replicas.remove(go_owner);
    let killed_at = Instant::now();
    killed.signal("KILL");
    killed.wait_exit(DEADLINE).await;
    // Its session ends on both others' streams, with the reason, once its
    // lease runs out (both streams read at once, so neither waits for the
    // other's event).
    let [(_, first), (_, second)] = &mut replicas[..] else {
        unreachable!("two replicas survive")
    };
    let after = tokio::join!(
        lost(first, &go_session, killed_at),
        lost(second, &go_session, killed_at)
    );
    eprintln!("ended on the survivors {after:?} after the kill");
    for after in [after.0, after.1] {
        assert!(
            after <= LOST_WITHIN,
            "the killed replica's session ended {after:?} after the kill; its lease is {LEASE:?}"
        );
    }

    // The Go probe reconnected through the proxy and re-reported its hold
    // on a survivor; it is answered on the other survivor when that one
    // does not run it.
    // (Its re-report may come before the old session's end: it is looked
    // up in the cluster's list of pauses.)
    let pause = listed_pause(&replicas[0].0, "go", &go_session).await;
    let survivors: Vec<&Daemon> = replicas.iter().map(|(d, _)| d).collect();
    let new_owner = owner_of(&url, &pause.session_id, &survivors).await;
    held::inject(survivors[1 - new_owner], &pause, "go").await;
    assert_eq!(go.line().await, r#"result {"cmd":"injected","lang":"go"}"#);

    // The watchers through the proxy lost nothing silently: one whose
    // replica lived saw the end; one whose stream broke is told what it
    // missed with a gap when it resumes (through the proxy, on a survivor).
    assert_eq!(
        postgres::query(&url, "SELECT count(*) FROM stepd_replicas"),
        "2",
        "the killed replica left the directory"
    );
    let mut broken = 0;
    for (mut watcher, watched, mut cursor) in watchers {
        let broke = loop {
            match watcher.next_or_error().await {
                Ok(Some(event)) => {
                    if event.seq > 0 {
                        cursor = event.seq;
                    }
                    if event.session_id == go_session
                        && matches!(event.payload, Some(Payload::SessionEnded(_)))
                    {
                        break false;
                    }
                }
                Ok(None) | Err(_) => break true,
            }
        };
        if !broke {
            continue;
        }
        broken += 1;
        let mut resumed = Subscription::open(
            through(&proxy).await,
            Watch {
                resume_after_seq: cursor,
                resume_instance_id: watched,
                ..Default::default()
            },
        )
        .await;
        let gap = resumed.next().await;
        assert!(matches!(gap.payload, Some(Payload::Gap(_))), "{gap:?}");
        let snapshot = resumed.next().await;
        let Some(Payload::Snapshot(snapshot)) = snapshot.payload else {
            panic!("a snapshot after the gap, got {snapshot:?}")
        };
        assert!(
            snapshot
                .sessions
                .iter()
                .all(|s| s.id != go_session || s.end_reason == EndReason::ReplicaLost as i32),
            "{snapshot:?}"
        );
    }
    assert_eq!(broken, 1, "one watcher was served by the killed replica");
    drop((python, go));
    for (daemon, _) in replicas {
        daemon.stop().await;
    }
}

#[tokio::test]
async fn a_pause_answered_on_another_replica_s_stream_is_in_the_history_after_every_restart() {
    let url = postgres::database("cluster_history");
    let (a, mut on_a) = replica(&url).await;
    let (b, mut on_b) = replica(&url).await;
    let id = dap::add_breakpoint(&a, tool_calls()).await;
    breakpoint_added(&mut on_b).await;
    let (probe, _) = Probe::connect(&b, &[]).await;
    let session = probe.session_id.clone();
    hold(&probe, &id).await;
    let pause = dap::next_pause(&mut on_a, &session).await;
    // Answered on A's stream: sent on to B.
    on_a.send(SubscribeMessage::DebugInput(
        carry_on(&pause.key).input.unwrap(),
    ))
    .await;
    let resolved = resolution(&mut on_a, &pause.key).await;
    drop(probe);
    dap::ended(&mut on_a, &session).await;
    a.stop().await;
    b.stop().await;

    // A new replica on the same database reads what the two recorded.
    let (c, _) = replica(&url).await;
    let events = HistoryServiceClient::new(c.channel().await)
        .get_session_history(GetSessionHistoryRequest {
            session_id: session.clone(),
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .events;
    let count = |f: fn(&Payload) -> bool| {
        events
            .iter()
            .filter(|e| e.payload.as_ref().is_some_and(f))
            .count()
    };
    // Each event once: only the replica that ran the session recorded it.
    assert_eq!(
        count(|p| matches!(p, Payload::SessionStarted(_))),
        1,
        "{events:#?}"
    );
    assert_eq!(count(|p| matches!(p, Payload::Stopped(_))), 1);
    assert_eq!(count(|p| matches!(p, Payload::SessionEnded(_))), 1);
    let decided = events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::PauseResolved(r)) => Some(r.clone()),
            _ => None,
        })
        .expect("the decision is in the history");
    assert_eq!(decided.key, pause.key);
    assert_eq!(decided.command, CommandKind::Continue as i32);
    assert_eq!(decided.by, resolved.by);
    assert!(!decided.by.is_empty());
    c.stop().await;
}

#[tokio::test]
async fn replicas_authenticate_to_each_other_with_a_token_and_record_the_caller() {
    let url = postgres::database("cluster_tokens");
    let dir = stepd_e2e::TempDir::new("peers");
    let tokens = dir.path().join("tokens");
    let peer = stepd_e2e::add_token(&tokens, "peer", "admin");
    let alice = stepd_e2e::add_token(&tokens, "alice", "controller");
    let peer_file = dir.path().join("peer-token");
    std::fs::write(&peer_file, format!("{peer}\n")).unwrap();
    let (tokens, peer_file) = (
        tokens.display().to_string(),
        peer_file.display().to_string(),
    );
    let args = [
        "--database-url",
        &url,
        "--auth-tokens",
        &tokens,
        "--peer-token-file",
        &peer_file,
    ];
    let (a, b) = (Daemon::start(&args).await, Daemon::start(&args).await);
    let mut on_a = Subscription::open(a.channel().await, Watch::default()).await;
    on_a.next().await;
    let mut on_b = Subscription::open(b.channel().await, Watch::default()).await;
    on_b.next().await;
    let id = dap::add_breakpoint(&a, tool_calls()).await;
    breakpoint_added(&mut on_b).await;
    let (probe, _) = Probe::connect(&b, &[]).await;
    let session = probe.session_id.clone();
    hold(&probe, &id).await;
    // Relayed to A over B's stream, which A opened with its token.
    let pause = dap::next_pause(&mut on_a, &session).await;
    SessionServiceClient::new(a.channel().await)
        .send_debug_input(stepd_e2e::with_token(carry_on(&pause.key), &alice))
        .await
        .expect("alice, a controller, may answer on any replica");
    // B recorded alice, not the replica that forwarded her answer.
    let resolved = resolution(&mut on_b, &pause.key).await;
    assert_eq!(resolved.by, "token:alice");
    drop(probe);
    a.stop().await;
    b.stop().await;
}

#[path = "common/pki.rs"]
mod pki;

#[tokio::test]
async fn replicas_serving_mutual_tls_reach_each_other_with_their_own_certificate() {
    use rcgen::{ExtendedKeyUsagePurpose as Usage, SanType};
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

    let url = postgres::database("cluster_mtls");
    let dir = stepd_e2e::TempDir::new("peers-pki");
    let ca = pki::ca("stepd replicas CA");
    let (server, server_key, _) = pki::leaf(
        &ca,
        "stepd",
        vec![SanType::IpAddress("127.0.0.1".parse().unwrap())],
        Usage::ServerAuth,
    );
    let identity = |name: &str| {
        pki::leaf(
            &ca,
            name,
            vec![SanType::URI(
                format!("spiffe://stepd.test/{name}").try_into().unwrap(),
            )],
            Usage::ClientAuth,
        )
    };
    let (replica_cert, replica_key, _) = identity("replica");
    let (alice_cert, alice_key, _) = identity("alice");
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let roles = file(
        "roles",
        "spiffe://stepd.test/replica admin\nspiffe://stepd.test/alice controller\n",
    );
    let args = [
        "--database-url".to_owned(),
        url.clone(),
        "--tls-cert".into(),
        file("server.pem", &server),
        "--tls-key".into(),
        file("server.key", &server_key),
        "--tls-client-ca".into(),
        file("ca.pem", &ca.pem),
        "--tls-client-roles".into(),
        roles,
        "--peer-tls-cert".into(),
        file("replica.pem", &replica_cert),
        "--peer-tls-key".into(),
        file("replica.key", &replica_key),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (a, b) = (Daemon::start(&args).await, Daemon::start(&args).await);
    let channel = |daemon: &Daemon, cert: &str, key: &str| {
        Endpoint::from_shared(format!("https://{}", daemon.addr))
            .unwrap()
            .tls_config(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(&ca.pem))
                    .identity(Identity::from_pem(cert, key)),
            )
            .unwrap()
            .connect_lazy()
    };
    let mut on_a = Subscription::open(channel(&a, &alice_cert, &alice_key), Watch::default()).await;
    on_a.next().await;
    let mut on_b = Subscription::open(channel(&b, &alice_cert, &alice_key), Watch::default()).await;
    on_b.next().await;
    let mut breakpoints = stepd_proto::v1::breakpoint_service_client::BreakpointServiceClient::new(
        channel(&a, &alice_cert, &alice_key),
    );
    let id = breakpoints
        .add_breakpoint(stepd_proto::v1::AddBreakpointRequest {
            spec: Some(tool_calls()),
        })
        .await
        .unwrap()
        .into_inner()
        .breakpoint
        .unwrap()
        .id;
    breakpoint_added(&mut on_b).await;
    // The probe connects to B with a certificate that may connect.
    let (probe, _) = Probe::open_on(
        channel(&b, &replica_cert, &replica_key),
        stepd_e2e::probe::hello("agent"),
        "",
    )
    .await;
    let session = probe.session_id.clone();
    hold(&probe, &id).await;
    let pause = dap::next_pause(&mut on_a, &session).await;
    SessionServiceClient::new(channel(&a, &alice_cert, &alice_key))
        .send_debug_input(carry_on(&pause.key))
        .await
        .expect("alice answers on A; B, over mutual TLS, decides");
    let resolved = resolution(&mut on_b, &pause.key).await;
    assert_eq!(resolved.by, "cert:spiffe://stepd.test/alice");
    drop(probe);
    a.stop().await;
    b.stop().await;
}

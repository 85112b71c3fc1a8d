//! Replicas sharing one PostgreSQL database act as one daemon: a session on
//! one replica is seen, listed and answered on every other (the session
//! directory, relayed events and forwarded calls), and a replica that dies
//! loses its sessions when its lease runs out.

use std::time::Instant;

use stepd_e2e::{DEADLINE, Daemon, Subscription, dap, postgres, probe::Probe, reason};
use stepd_proto::v1::{
    BreakpointAction, BreakpointChange, BreakpointSpec, CommandKind, DebugCommand, DebugInput,
    EndReason, GetSessionRequest, Hit, ListPausesRequest, ListSessionsRequest, PointInfo,
    ProbeMatch, SendDebugInputRequest, Watch, breakpoint_spec::Location,
    connect_request::Message as In, connect_response::Message as Out, debug_command::Command,
    event::Payload, session_service_client::SessionServiceClient,
};

/// A replica with a lease short enough for a test to see it run out, long
/// enough for a call made right after a kill to fall within it.
async fn replica(url: &str) -> (Daemon, Subscription) {
    let daemon = Daemon::start(&["--database-url", url, "--replica-lease", "3s"]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    (daemon, sub)
}

fn tool_calls() -> BreakpointSpec {
    BreakpointSpec {
        location: Some(Location::Probe(ProbeMatch {
            point_kind: "tool_call".into(),
            name_glob: "*".into(),
        })),
        action: BreakpointAction::Stop as i32,
        ..Default::default()
    }
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
    on_b.wait_for("the breakpoint on B", |e| {
        matches!(&e.payload, Some(Payload::BreakpointUpdated(u))
            if u.change == BreakpointChange::Added as i32)
    })
    .await;
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
    // GetSession is answered by B, whose pause book holds the pause.
    let got = SessionServiceClient::new(a.channel().await)
        .get_session(GetSessionRequest {
            session_id: session.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.pauses.len(), 1, "{got:?}");

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
        let event = sub
            .wait_for(
                "pause_resolved",
                |e| matches!(&e.payload, Some(Payload::PauseResolved(r)) if r.key == pause.key),
            )
            .await;
        let Some(Payload::PauseResolved(resolved)) = event.payload else {
            unreachable!()
        };
        assert!(!resolved.by.is_empty());
        assert!(!resolved.by.contains("forwarded"), "{}", resolved.by);
    }
    drop(probe);
    for daemon in [a, b, c] {
        daemon.stop().await;
    }
}

#[tokio::test]
async fn a_killed_replica_loses_its_sessions_when_its_lease_runs_out() {
    let url = postgres::database("cluster_lease");
    let (a, mut on_a) = replica(&url).await;
    let (mut b, _) = replica(&url).await;
    let (probe, _) = Probe::connect(&b, &[]).await;
    let session = probe.session_id.clone();
    started(&mut on_a, &session).await;

    b.child.start_kill().unwrap();
    b.child.wait().await.unwrap();
    let killed = Instant::now();
    // Until the lease runs out the session is B's: a call about it says B
    // does not answer.
    let err = SessionServiceClient::new(a.channel().await)
        .get_session(GetSessionRequest {
            session_id: session.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "REPLICA_UNAVAILABLE", "{err:?}");

    let ended = dap::ended(&mut on_a, &session).await;
    let Some(Payload::SessionEnded(ended)) = ended.payload else {
        unreachable!()
    };
    assert_eq!(ended.reason, EndReason::ReplicaLost as i32);
    assert!(ended.detail.contains("lease"), "{}", ended.detail);
    eprintln!("ended on A {:?} after the kill", killed.elapsed());
    // Ended, it is answered here again.
    let got = SessionServiceClient::new(a.channel().await)
        .get_session(GetSessionRequest {
            session_id: session.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        got.session.unwrap().end_reason,
        EndReason::ReplicaLost as i32
    );
    drop(probe);
    a.stop().await;
}

//! Rollouts lose no decision: a Python and a Go probe program each held at a
//! point keep waiting while the daemon restarts (SIGTERM or SIGKILL), re-report
//! their holds to the new daemon, and are answered there; a program that chose
//! to go on at once, or whose daemon never comes back, goes on with its value.

use std::time::{Duration, Instant};

use stepd_e2e::{
    DEADLINE, Daemon, Program, Subscription, TempDir, dap,
    held::{both_held, held, inject, payload, programs},
};
use stepd_proto::v1::{
    BreakpointSpec, ListBreakpointsRequest, ListPausesRequest, Watch,
    breakpoint_service_client::BreakpointServiceClient, event::Payload,
    session_service_client::SessionServiceClient,
};

/// Restarts a daemon holding a Python and a Go probe with `signal`, and
/// checks that both holds come back and are answered on the new daemon.
async fn holds_survive_a_restart(signal: &str) {
    let dir = TempDir::new("rollout");
    let old = Daemon::start_in(dir.path(), &["--no-unix-socket"]).await;
    // Spent by the two first hits: the re-reports must hold all the same.
    let spec = BreakpointSpec {
        max_hits: 2,
        ..stepd_e2e::held::bash_breakpoint()
    };
    let breakpoint = dap::add_breakpoint(&old, spec).await;
    let mut sub = Subscription::open(old.channel().await, Watch::default()).await;
    let first = sub.next().await;
    let Some(Payload::Snapshot(snapshot)) = first.payload else {
        panic!("a snapshot first, got {first:?}")
    };
    let (mut python, mut go) = programs(&old.addr, &[]);
    let before = both_held(&mut sub, &mut python, &mut go).await;
    let mut cursor = snapshot.seq;

    let addr = old.addr.clone();
    let mut old = old;
    old.signal(signal);
    if signal == "TERM" {
        // The subscriber is told to reconnect before its stream ends.
        let told = sub
            .wait_for("a reconnect event", |e| {
                if e.seq > 0 {
                    cursor = cursor.max(e.seq);
                }
                matches!(e.payload, Some(Payload::Reconnect(_)))
            })
            .await;
        assert_eq!(told.seq, 0, "stream-local: {told:?}");
    }
    old.wait_exit(DEADLINE).await;
    drop(sub);

    let new = Daemon::spawn(
        Daemon::command_on(dir.path(), &addr, &["--no-unix-socket"]),
        dir.path(),
    )
    .await;
    let mut watch = Subscription::open(new.channel().await, Watch::default()).await;
    let after = held(&mut watch).await;
    // Listed again, with their payloads, one per program.
    let listed = SessionServiceClient::new(new.channel().await)
        .list_pauses(ListPausesRequest::default())
        .await
        .expect("list pauses")
        .into_inner()
        .pauses;
    assert_eq!(listed.len(), 2, "{listed:#?}");
    for (was, is) in before.iter().zip(&after) {
        assert_eq!(payload(was), payload(is));
        assert_eq!(was.original_id, is.original_id, "the probe's hit id");
        // Held since the first hold (the program's clock, not the daemon's).
        let (was_at, is_at) = (was.created_at.unwrap(), is.created_at.unwrap());
        assert!(
            (was_at.seconds - is_at.seconds).abs() <= 1,
            "{was_at:?} vs {is_at:?}"
        );
        assert_eq!(was.breakpoint_ids, vec![breakpoint.clone()]);
        assert_eq!(is.breakpoint_ids, was.breakpoint_ids);
        assert!(listed.iter().any(|l| l.key == is.key), "{listed:#?}");
    }
    // A subscriber resuming from the old daemon's cursor gets a gap, then a
    // snapshot naming the re-reported pauses.
    let mut resumed = Subscription::open(
        new.channel().await,
        Watch {
            resume_after_seq: cursor,
            resume_instance_id: snapshot.instance_id.clone(),
            ..Default::default()
        },
    )
    .await;
    let gap = resumed.next().await;
    assert!(matches!(gap.payload, Some(Payload::Gap(_))), "{gap:?}");
    let again = resumed.next().await;
    let Some(Payload::Snapshot(again)) = again.payload else {
        panic!("a snapshot after the gap, got {again:?}")
    };
    for pause in &after {
        assert!(
            again.pauses.iter().any(|p| p.key == pause.key),
            "{:#?}",
            again.pauses
        );
    }
    // The breakpoint was stored; the re-reports did not count as hits.
    let breakpoints = BreakpointServiceClient::new(new.channel().await)
        .list_breakpoints(ListBreakpointsRequest::default())
        .await
        .expect("list breakpoints")
        .into_inner()
        .breakpoints;
    assert_eq!(breakpoints.len(), 1);
    assert_eq!(breakpoints[0].id, breakpoint);
    if signal == "TERM" {
        // Spent by the first two hits, and still holding the re-reports.
        // (Hits are written in batches and at shutdown: a SIGKILL may lose
        // the last batch, never add to it.)
        assert!(breakpoints[0].spent, "{:?}", breakpoints[0]);
        assert_eq!(breakpoints[0].hit_count, 2, "{:?}", breakpoints[0]);
    } else {
        assert!(breakpoints[0].hit_count <= 2, "{:?}", breakpoints[0]);
    }

    for (pause, lang) in after.iter().zip(["python", "go"]) {
        inject(&new, pause, lang).await;
    }
    assert_eq!(
        python.line().await,
        r#"result {"cmd": "injected", "lang": "python"}"#
    );
    assert_eq!(go.line().await, r#"result {"cmd":"injected","lang":"go"}"#);
    new.stop().await;
}

#[tokio::test]
async fn held_probes_are_answered_after_a_sigterm_restart() {
    holds_survive_a_restart("TERM").await;
}

#[tokio::test]
async fn held_probes_are_answered_after_a_sigkill_restart() {
    holds_survive_a_restart("KILL").await;
}

/// Kills the daemon holding both programs started with `flags`, and returns
/// them with the time just before the kill (no program can have seen the
/// daemon go before it).
async fn held_then_killed(flags: &[&str]) -> (Program, Program, Instant) {
    let daemon = Daemon::start(&["--no-unix-socket"]).await;
    dap::add_breakpoint(&daemon, stepd_e2e::held::bash_breakpoint()).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    let (mut python, mut go) = programs(&daemon.addr, flags);
    both_held(&mut sub, &mut python, &mut go).await;
    let mut daemon = daemon;
    let killed = Instant::now();
    daemon.signal("KILL");
    daemon.wait_exit(DEADLINE).await;
    (python, go, killed)
}

#[tokio::test]
async fn release_on_disconnect_goes_on_at_once_with_the_original_value() {
    // Without the release, a hold would wait out a reconnect deadline far
    // past the test's own: going on within the latter is going on at once.
    let (mut python, mut go, _) =
        held_then_killed(&["--release-on-disconnect", "--reconnect-deadline", "3600"]).await;
    assert_eq!(
        python.line().await,
        r#"result {"cmd": "ls", "lang": "python"}"#
    );
    assert_eq!(go.line().await, r#"result {"cmd":"ls","lang":"go"}"#);
}

#[tokio::test]
async fn a_hold_goes_on_when_no_daemon_comes_back_within_the_reconnect_deadline() {
    let (mut python, mut go, killed) = held_then_killed(&["--reconnect-deadline", "3"]).await;
    assert_eq!(
        python.line().await,
        r#"result {"cmd": "ls", "lang": "python"}"#
    );
    assert_eq!(go.line().await, r#"result {"cmd":"ls","lang":"go"}"#);
    assert!(
        killed.elapsed() >= Duration::from_secs(3),
        "released after {:?}",
        killed.elapsed()
    );
}

#[tokio::test]
async fn sigterm_turns_health_not_serving_and_tells_probes_to_reconnect() {
    use stepd_proto::v1::{
        ConnectRequest, Hello, connect_request::Message as In, connect_response::Message as Out,
        probe_service_client::ProbeServiceClient,
    };
    use tonic_health::pb::{
        HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
    };
    let mut daemon = Daemon::start(&["--no-unix-socket"]).await;
    let mut health = HealthClient::new(daemon.channel().await)
        .watch(HealthCheckRequest {
            service: "stepd.v1.ProbeService".into(),
        })
        .await
        .expect("health watch")
        .into_inner();
    let status = |m: Option<tonic_health::pb::HealthCheckResponse>| m.expect("a status").status;
    assert_eq!(
        status(health.message().await.unwrap()),
        ServingStatus::Serving as i32
    );
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(ConnectRequest {
        message: Some(In::Hello(Hello {
            name: "raw".into(),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut probe = ProbeServiceClient::new(daemon.channel().await)
        .connect(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("connect")
        .into_inner();
    let next = |m: Option<stepd_proto::v1::ConnectResponse>| m.and_then(|m| m.message);
    assert!(matches!(
        next(probe.message().await.unwrap()),
        Some(Out::Welcome(_))
    ));
    daemon.signal("TERM");
    let told = tokio::time::timeout(DEADLINE, async {
        loop {
            match next(probe.message().await.expect("the stream ends cleanly")) {
                Some(Out::Reconnect(r)) => return r,
                Some(_) => {}
                None => panic!("the stream ended without Reconnect"),
            }
        }
    })
    .await
    .expect("Reconnect in time");
    assert!(told.reason.contains("shutting down"), "{told:?}");
    assert_eq!(
        status(
            tokio::time::timeout(DEADLINE, health.message())
                .await
                .expect("a health change in time")
                .unwrap()
        ),
        ServingStatus::NotServing as i32
    );
    drop(tx);
    assert!(daemon.wait_exit(DEADLINE).await.success());
}

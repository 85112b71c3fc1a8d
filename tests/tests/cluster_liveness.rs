//! When a replica's session ends, and who ends it: a database outage ends
//! none (the replicas still answer each other, and write their sessions
//! back when it returns); a replica that shuts down ends its own sessions
//! (DAEMON_SHUTDOWN) and its peers relay those ends; a killed replica's
//! sessions end on the others (REPLICA_LOST) with their pauses resolved,
//! each session with one end in its history, and a probe that moved to
//! another replica is one pending pause there, not two; and a replica
//! started on a killed one's address is not taken for it.

use std::time::{Duration, Instant};

use stepd_e2e::{
    DEADLINE, Daemon, Subscription, TempDir, dap,
    postgres::{self, Cluster},
    probe::Probe,
};
use stepd_proto::v1::{
    BreakpointAction, BreakpointChange, BreakpointSpec, DebugCommand, DebugInput, EndReason,
    GetSessionHistoryRequest, Hit, ListPausesRequest, ListSessionsRequest, Pause, PointInfo,
    SendDebugInputRequest, SessionState, Watch, connect_request::Message as In,
    connect_response::Message as Out, debug_command::Command, event::Payload,
    history_service_client::HistoryServiceClient, session_service_client::SessionServiceClient,
};

/// The replicas' lease.
const LEASE: Duration = Duration::from_secs(2);

async fn replica(url: &str) -> (Daemon, Subscription) {
    let daemon = Daemon::start(&["--database-url", url, "--replica-lease", "2s"]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    (daemon, sub)
}

/// A STOP breakpoint at tool calls named "Bash", added on `on` and seen
/// by every stream.
async fn stop_at_bash(on: &Daemon, subs: &mut [&mut Subscription]) -> String {
    let id = dap::add_breakpoint(
        on,
        BreakpointSpec {
            action: BreakpointAction::Stop as i32,
            ..stepd_e2e::held::bash_breakpoint()
        },
    )
    .await;
    for sub in subs {
        sub.wait_for("the breakpoint added", |e| {
            matches!(&e.payload, Some(Payload::BreakpointUpdated(u))
                if u.change == BreakpointChange::Added as i32)
        })
        .await;
    }
    id
}

async fn hold(probe: &Probe, hit_id: &str, breakpoint: &str) {
    probe
        .send(In::Hit(Hit {
            hit_id: hit_id.into(),
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

async fn resumed(probe: &mut Probe, hit_id: &str) {
    tokio::time::timeout(DEADLINE, async {
        loop {
            if let Out::Resume(r) = stepd_e2e::probe::next(&mut probe.rx).await {
                assert_eq!(r.hit_id, hit_id);
                return;
            }
        }
    })
    .await
    .expect("the probe is resumed");
}

async fn pauses(daemon: &Daemon) -> Vec<Pause> {
    SessionServiceClient::new(daemon.channel().await)
        .list_pauses(ListPausesRequest::default())
        .await
        .expect("list pauses")
        .into_inner()
        .pauses
}

/// The live sessions `daemon` lists.
async fn live_sessions(daemon: &Daemon) -> Vec<String> {
    SessionServiceClient::new(daemon.channel().await)
        .list_sessions(ListSessionsRequest::default())
        .await
        .expect("list sessions")
        .into_inner()
        .sessions
        .into_iter()
        .filter(|s| s.state != SessionState::Ended as i32)
        .map(|s| s.id)
        .collect()
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

/// Each replica's lease as the directory holds it, by address.
fn leases(url: &str) -> Vec<(String, i64)> {
    postgres::query(
        url,
        "SELECT address, lease_until_us FROM stepd_replicas ORDER BY address",
    )
    .lines()
    .filter_map(|l| {
        let (address, until) = l.split_once('|')?;
        Some((address.to_owned(), until.parse().ok()?))
    })
    .collect()
}

/// Waits until each of `addresses` renewed its lease twice after `since`
/// (µs since the epoch): each has then looked at the directory at least
/// once after the database came back, and done whatever it does then.
async fn renewed_twice(url: &str, addresses: &[&str], since: i64) {
    let deadline = Instant::now() + DEADLINE;
    let mut first: Vec<Option<i64>> = vec![None; addresses.len()];
    loop {
        let now = leases(url);
        let mut done = true;
        for (i, address) in addresses.iter().enumerate() {
            let until = now.iter().find(|(a, _)| a == address).map(|(_, u)| *u);
            match (first[i], until) {
                (None, Some(u)) if u > since => {
                    first[i] = Some(u);
                    done = false;
                }
                (Some(f), Some(u)) if u > f => {}
                _ => done = false,
            }
        }
        if done {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the replicas did not renew their leases: {now:?}"
        );
        tokio::task::yield_now().await;
    }
}

fn now_us() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_database_outage_longer_than_the_lease_ends_no_session_and_loses_no_pause() {
    let pg = Cluster::start();
    let url = postgres::database_on(pg.url(), "cluster_db_outage");
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(replica(&url).await);
    }
    let breakpoint = {
        let (first, rest) = replicas.split_first_mut().unwrap();
        let mut subs: Vec<&mut Subscription> = rest.iter_mut().map(|(_, s)| s).collect();
        subs.push(&mut first.1);
        stop_at_bash(&first.0, &mut subs).await
    };
    // A held probe on each replica, its pause seen by every replica.
    let mut probes = Vec::new();
    for (daemon, _) in &replicas {
        let (probe, _) = Probe::connect(daemon, &[]).await;
        hold(&probe, "h1", &breakpoint).await;
        probes.push(probe);
    }
    let mut keys: Vec<String> = Vec::new();
    for (_, sub) in &mut replicas {
        let mut seen = vec![String::new(); 3];
        sub.wait_for("the three pauses", |e| {
            if let Some(Payload::Stopped(s)) = &e.payload
                && let Some(i) = probes.iter().position(|p| p.session_id == e.session_id)
            {
                seen[i] = s.pause.as_ref().map(|p| p.key.clone()).unwrap_or_default();
            }
            seen.iter().all(|k| !k.is_empty())
        })
        .await;
        keys = seen;
    }
    let addresses: Vec<&str> = replicas.iter().map(|(d, _)| d.addr.as_str()).collect();

    // PostgreSQL is away for three leases; every lease in the directory
    // runs out meanwhile.
    pg.stop();
    let stopped = Instant::now();
    while stopped.elapsed() < 3 * LEASE {
        for (daemon, _) in &replicas {
            assert_eq!(pauses(daemon).await.len(), 3, "while the database is down");
        }
        tokio::task::yield_now().await;
    }
    let back = now_us();
    pg.restart();
    renewed_twice(&url, &addresses, back).await;
    eprintln!(
        "the database was away {:?}; every replica renewed twice since",
        stopped.elapsed()
    );

    // Every replica lists every session and pause, and none ended.
    for (daemon, _) in &replicas {
        let live = live_sessions(daemon).await;
        for probe in &probes {
            assert!(
                live.contains(&probe.session_id),
                "{} lists {live:?}",
                daemon.addr
            );
        }
        let listed: Vec<String> = pauses(daemon).await.into_iter().map(|p| p.key).collect();
        for key in &keys {
            assert!(listed.contains(key), "{} lists {listed:?}", daemon.addr);
        }
    }
    // The directory holds the three replicas and their sessions again.
    let deadline = Instant::now() + DEADLINE;
    while postgres::query(&url, "SELECT count(*) FROM stepd_sessions") != "3" {
        assert!(
            Instant::now() < deadline,
            "the sessions are not in the directory"
        );
        tokio::task::yield_now().await;
    }
    // Each pause is answered on the next replica, and its program goes on.
    for (i, (probe, key)) in probes.iter_mut().zip(&keys).enumerate() {
        let answerer = &replicas[(i + 1) % 3].0;
        SessionServiceClient::new(answerer.channel().await)
            .send_debug_input(carry_on(key))
            .await
            .unwrap_or_else(|e| panic!("{key} answered on {}: {e:?}", answerer.addr));
        resumed(probe, "h1").await;
    }
    // Every stream shows the three answers, and no session ending before
    // them.
    for (daemon, sub) in &mut replicas {
        let mut answered = 0;
        sub.wait_for("the three answers", |e| {
            assert!(
                !matches!(e.payload, Some(Payload::SessionEnded(_))),
                "{}: {e:?}",
                daemon.addr
            );
            if matches!(&e.payload, Some(Payload::PauseResolved(r)) if keys.contains(&r.key)) {
                answered += 1;
            }
            answered == 3
        })
        .await;
    }
    drop(probes);
    for (daemon, _) in replicas {
        daemon.stop().await;
    }
}

/// A session's history as `daemon` reads it.
async fn history(daemon: &Daemon, session: &str) -> Vec<stepd_proto::v1::Event> {
    HistoryServiceClient::new(daemon.channel().await)
        .get_session_history(GetSessionHistoryRequest {
            session_id: session.into(),
            page_size: 1000,
            ..Default::default()
        })
        .await
        .expect("history")
        .into_inner()
        .events
}

/// A session's history as `daemon` reads it, once it holds an event that
/// `matches`.
async fn recorded(
    daemon: &Daemon,
    session: &str,
    matches: impl Fn(&stepd_proto::v1::Event) -> bool,
) -> Vec<stepd_proto::v1::Event> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let events = history(daemon, session).await;
        if events.iter().any(&matches) {
            return events;
        }
        assert!(Instant::now() < deadline, "{session}: {events:#?}");
        tokio::task::yield_now().await;
    }
}

/// The session's history has one start and one end, the end last, for
/// `reason`, and a resolution of `key` before it.
fn one_end(events: &[stepd_proto::v1::Event], reason: EndReason, key: &str) {
    let ends: Vec<_> = events
        .iter()
        .filter(|e| matches!(e.payload, Some(Payload::SessionEnded(_))))
        .collect();
    assert_eq!(ends.len(), 1, "{events:#?}");
    let Some(Payload::SessionEnded(end)) = &events.last().unwrap().payload else {
        panic!("the end is last: {events:#?}")
    };
    assert_eq!(end.reason, reason as i32, "{end:?}");
    let starts = events
        .iter()
        .filter(|e| matches!(e.payload, Some(Payload::SessionStarted(_))))
        .count();
    assert_eq!(starts, 1, "{events:#?}");
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.payload, Some(Payload::PauseResolved(r)) if r.key == key)),
        "{events:#?}"
    );
}

/// Waits until a stream shows `session` ended, checking that its pause
/// `key` was resolved first; returns the end.
async fn ends_after_resolving(
    sub: &mut Subscription,
    session: &str,
    key: &str,
) -> stepd_proto::v1::SessionEnded {
    let mut resolved = false;
    let event = sub
        .wait_for("the session's end", |e| {
            if matches!(&e.payload, Some(Payload::PauseResolved(r)) if r.key == key) {
                resolved = true;
            }
            e.session_id == session && matches!(e.payload, Some(Payload::SessionEnded(_)))
        })
        .await;
    assert!(resolved, "the pause was resolved before the end");
    let Some(Payload::SessionEnded(end)) = event.payload else {
        unreachable!()
    };
    end
}

#[tokio::test]
async fn a_replica_that_shuts_down_ends_its_sessions_once_and_its_peers_relay_the_end() {
    let url = postgres::database("cluster_shutdown");
    let (a, mut on_a) = replica(&url).await;
    let (mut b, mut on_b) = replica(&url).await;
    let (c, mut on_c) = replica(&url).await;
    let breakpoint = stop_at_bash(&a, &mut [&mut on_a, &mut on_b, &mut on_c]).await;
    let (probe, _) = Probe::connect(&b, &[]).await;
    let session = probe.session_id.clone();
    hold(&probe, "h1", &breakpoint).await;
    let key = dap::next_pause(&mut on_a, &session).await.key;
    dap::next_pause(&mut on_c, &session).await;

    b.signal("TERM");
    for sub in [&mut on_a, &mut on_c] {
        let end = ends_after_resolving(sub, &session, &key).await;
        assert_eq!(end.reason, EndReason::DaemonShutdown as i32, "{end:?}");
    }
    assert!(b.wait_exit(DEADLINE).await.success());
    drop(probe);
    // Once B left the directory and A and C looked at it again, no stream
    // said the session ended a second time, and its history has one end.
    let gone = now_us();
    let deadline = Instant::now() + DEADLINE;
    while postgres::query(&url, "SELECT count(*) FROM stepd_replicas") != "2" {
        assert!(Instant::now() < deadline, "B did not leave the directory");
        tokio::task::yield_now().await;
    }
    renewed_twice(&url, &[a.addr.as_str(), c.addr.as_str()], gone).await;
    for (daemon, sub) in [(&a, &mut on_a), (&c, &mut on_c)] {
        // A marker after whatever the look published: a breakpoint added.
        let marker = dap::add_breakpoint(daemon, stepd_e2e::held::bash_breakpoint()).await;
        sub.wait_for("the marker", |e| {
            assert!(
                !(e.session_id == session && matches!(e.payload, Some(Payload::SessionEnded(_)))),
                "a second end on {}: {e:?}",
                daemon.addr
            );
            matches!(&e.payload, Some(Payload::BreakpointUpdated(u))
                if u.breakpoint.as_ref().is_some_and(|b| b.id == marker))
        })
        .await;
        let events = recorded(daemon, &session, |e| {
            matches!(e.payload, Some(Payload::SessionEnded(_)))
        })
        .await;
        one_end(&events, EndReason::DaemonShutdown, &key);
    }
    a.stop().await;
    c.stop().await;
}

#[tokio::test]
async fn a_killed_replica_s_sessions_end_once_with_their_pauses_and_a_moved_hold_is_one_pause() {
    let url = postgres::database("cluster_killed");
    let (a, mut on_a) = replica(&url).await;
    let (mut b, mut on_b) = replica(&url).await;
    let (c, mut on_c) = replica(&url).await;
    let breakpoint = stop_at_bash(&a, &mut [&mut on_a, &mut on_b, &mut on_c]).await;
    // Two held probes on B: one moves to A when B dies, one does not.
    let (moving, _) = Probe::connect(&b, &[]).await;
    let (staying, _) = Probe::connect(&b, &[]).await;
    hold(&moving, "m1", &breakpoint).await;
    let moved_key = dap::next_pause(&mut on_c, &moving.session_id).await.key;
    dap::next_pause(&mut on_a, &moving.session_id).await;
    hold(&staying, "s1", &breakpoint).await;
    let stayed_key = dap::next_pause(&mut on_c, &staying.session_id).await.key;
    dap::next_pause(&mut on_a, &staying.session_id).await;

    let (moved_session, stayed_session) = (moving.session_id.clone(), staying.session_id.clone());
    // B has recorded both holds (what a replica had not yet written when
    // it was killed is lost with it).
    for session in [&moved_session, &stayed_session] {
        recorded(&b, session, |e| {
            matches!(e.payload, Some(Payload::Stopped(_)))
        })
        .await;
    }
    b.signal("KILL");
    b.wait_exit(DEADLINE).await;
    let killed = Instant::now();
    drop(staying);
    // The moving probe reconnects to A and holds again there.
    let (mut moved, _) = Probe::connect_with(&a, &[], &moving.session_id).await;
    drop(moving);
    hold(&moved, "m1", &breakpoint).await;
    // Every replica resolves the old pause (the probe reconnected) before
    // it shows the new one.
    let mut again = None;
    for sub in [&mut on_a, &mut on_c] {
        let mut superseded = false;
        let event = sub
            .wait_for("the moved hold", |e| {
                if matches!(&e.payload, Some(Payload::PauseResolved(r))
                    if r.key == moved_key && r.by == "probe-reconnected")
                {
                    superseded = true;
                }
                e.session_id == moved.session_id && matches!(e.payload, Some(Payload::Stopped(_)))
            })
            .await;
        assert!(superseded, "the old pause was resolved first");
        let Some(Payload::Stopped(stopped)) = event.payload else {
            unreachable!()
        };
        again = stopped.pause;
    }
    let again = again.unwrap();
    // C lists the hold once: the pause of the new session, not the old one.
    let listed: Vec<String> = pauses(&c).await.into_iter().map(|p| p.key).collect();
    assert!(listed.contains(&again.key), "{listed:?}");
    assert!(
        !listed.contains(&moved_key),
        "{listed:?} on C, {:?} on A, moved {moved_key}",
        pauses(&a)
            .await
            .into_iter()
            .map(|p| (p.key, p.session_id))
            .collect::<Vec<_>>()
    );

    // Both old sessions end on C and A once B's lease ran out, their
    // pauses resolved first.
    let old = [
        (stayed_key.clone(), stayed_session),
        (moved_key.clone(), moved_session),
    ];
    for sub in [&mut on_a, &mut on_c] {
        let mut by = Vec::new();
        let mut ends = 0;
        sub.wait_for("both old sessions' ends", |e| {
            match &e.payload {
                Some(Payload::PauseResolved(r)) if old.iter().any(|(k, _)| *k == r.key) => {
                    by.push((r.key.clone(), r.by.clone()));
                }
                Some(Payload::SessionEnded(end)) => {
                    assert_eq!(end.reason, EndReason::ReplicaLost as i32, "{end:?}");
                    ends += 1;
                }
                _ => {}
            }
            ends == 2
        })
        .await;
        // The pause nobody re-reported is resolved as lost, once; the
        // moved one is not resolved again.
        assert_eq!(by, vec![(stayed_key.clone(), "replica-lost".to_owned())]);
    }
    eprintln!("ended {:?} after the kill", killed.elapsed());
    // Each old session has one end in its history, the last event, after
    // its pause's resolution.
    for (key, session) in &old {
        let events = recorded(&a, session, |e| {
            matches!(e.payload, Some(Payload::SessionEnded(_)))
        })
        .await;
        one_end(&events, EndReason::ReplicaLost, key);
    }
    // The moved hold is answered from C.
    SessionServiceClient::new(c.channel().await)
        .send_debug_input(carry_on(&again.key))
        .await
        .expect("the moved hold is answered");
    resumed(&mut moved, "m1").await;
    a.stop().await;
    c.stop().await;
}

/// The lease of the replica at `address`, as the directory holds it.
fn lease_of(url: &str, address: &str) -> Option<i64> {
    leases(url)
        .into_iter()
        .find(|(a, _)| a == address)
        .map(|(_, until)| until)
}

#[tokio::test]
async fn a_replica_started_on_a_killed_one_s_address_is_not_taken_for_it() {
    let url = postgres::database("cluster_same_address");
    // Long enough that B's relay of the killed A reaches the replica
    // started on A's address before B next looks at the directory (every
    // 4 s) or A's lease runs out: the old relay took that replica's
    // sessions for A's and ended them with A's.
    let args = ["--database-url", url.as_str(), "--replica-lease", "12s"];
    let dir = TempDir::new("same-address");
    let mut a = Daemon::start_in(dir.path(), &args).await;
    let b = Daemon::start(&args).await;
    let mut on_b = Subscription::open(b.channel().await, Watch::default()).await;
    on_b.next().await;
    let mut a_sees = Subscription::open(a.channel().await, Watch::default()).await;
    a_sees.next().await;
    let breakpoint = stop_at_bash(&b, &mut [&mut on_b, &mut a_sees]).await;
    drop(a_sees);
    let (on_a, _) = Probe::connect(&a, &[]).await;
    hold(&on_a, "h1", &breakpoint).await;
    let killed_key = dap::next_pause(&mut on_b, &on_a.session_id).await.key;

    let address = a.addr.clone();
    a.signal("KILL");
    a.wait_exit(DEADLINE).await;
    drop(a);
    // Started just after B renewed, so B's next look is as far off as can be.
    let renewed = lease_of(&url, &b.addr);
    let deadline = Instant::now() + DEADLINE;
    while lease_of(&url, &b.addr) == renewed {
        assert!(Instant::now() < deadline, "B did not renew its lease");
        tokio::task::yield_now().await;
    }
    let restarted =
        Daemon::spawn(Daemon::command_on(dir.path(), &address, &args), dir.path()).await;
    let (mut probe, _) = Probe::connect(&restarted, &[]).await;
    hold(&probe, "h2", &breakpoint).await;
    let key = dap::next_pause(&mut on_b, &probe.session_id).await.key;

    // Once A's lease ran out and it does not answer (another replica does,
    // on its address), B ends A's session; the new replica's stays.
    let mut other_end = None;
    let end = {
        let mut resolved = false;
        let event = on_b
            .wait_for("the killed replica's session's end", |e| {
                if matches!(&e.payload, Some(Payload::PauseResolved(r)) if r.key == killed_key) {
                    resolved = true;
                }
                if e.session_id == probe.session_id
                    && matches!(
                        e.payload,
                        Some(Payload::SessionEnded(_) | Payload::PauseResolved(_))
                    )
                {
                    other_end.get_or_insert(e.clone());
                }
                e.session_id == on_a.session_id
                    && matches!(e.payload, Some(Payload::SessionEnded(_)))
            })
            .await;
        assert!(resolved, "the killed replica's pause was resolved first");
        event
    };
    let Some(Payload::SessionEnded(end)) = end.payload else {
        unreachable!()
    };
    assert_eq!(end.reason, EndReason::ReplicaLost as i32, "{end:?}");
    // A marker after whatever that look published: a breakpoint added.
    let marker = dap::add_breakpoint(&b, stepd_e2e::held::bash_breakpoint()).await;
    on_b.wait_for("the marker", |e| {
        if e.session_id == probe.session_id
            && matches!(
                e.payload,
                Some(Payload::SessionEnded(_) | Payload::PauseResolved(_))
            )
        {
            other_end.get_or_insert(e.clone());
        }
        matches!(&e.payload, Some(Payload::BreakpointUpdated(u))
            if u.breakpoint.as_ref().is_some_and(|b| b.id == marker))
    })
    .await;
    assert!(
        other_end.is_none(),
        "B ended the new replica's session with the killed one's: {other_end:?}"
    );
    let listed: Vec<String> = pauses(&b).await.into_iter().map(|p| p.key).collect();
    assert_eq!(listed, vec![key.clone()]);
    // The hold is answered through B, and the probe gets the answer.
    SessionServiceClient::new(b.channel().await)
        .send_debug_input(carry_on(&key))
        .await
        .expect("the new replica's hold is answered through B");
    resumed(&mut probe, "h2").await;
    drop(on_a);
    restarted.stop().await;
    b.stop().await;
}

/// A probe that connects to another replica in place of its session here
/// (before this replica saw its old connection break) ends that session at
/// once, as a reconnection to this replica would: not at the program's
/// reconnect deadline, nor never while the old connection lingers.
#[tokio::test]
async fn a_probe_that_reconnects_to_another_replica_ends_its_old_session_at_once() {
    let url = postgres::database("cluster_taken_over");
    let (a, mut on_a) = replica(&url).await;
    let (b, mut on_b) = replica(&url).await;
    let breakpoint = stop_at_bash(&a, &mut [&mut on_a, &mut on_b]).await;
    let (old, _) = Probe::connect(&b, &[]).await;
    hold(&old, "h1", &breakpoint).await;
    let key = dap::next_pause(&mut on_b, &old.session_id).await.key;
    // A knows the session (its peer relayed it) ...
    dap::next_pause(&mut on_a, &old.session_id).await;
    // ... when the probe comes back on A, its connection to B still open.
    let (new, _) = Probe::connect_with(&a, &[], &old.session_id).await;
    let end = ends_after_resolving(&mut on_b, &old.session_id, &key).await;
    assert_eq!(end.reason, EndReason::ProbeDisconnected as i32, "{end:?}");
    assert!(end.detail.contains(&new.session_id), "{end:?}");
    drop((old, new));
    a.stop().await;
    b.stop().await;
}

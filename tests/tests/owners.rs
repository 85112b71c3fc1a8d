//! Who owns what, and what is kept of it: sessions and pauses name the
//! replica that runs them, the history keeps each answer whole (masked as
//! `--redact` says), and `HistoryService.ListEndedSessions` lists every
//! replica's ended sessions from the store, by labels, a page at a time,
//! a killed replica's as lost on it.

use std::time::{Duration, Instant};

use prost_types::{Struct, Value, value::Kind};
use stepd_e2e::{DEADLINE, Daemon, Subscription, dap, postgres, probe::Probe};
use stepd_proto::v1::{
    EndReason, Event, GetSessionHistoryRequest, InjectCommand, ListEndedSessionsRequest,
    ListEndedSessionsResponse, Pause, PingRequest, SessionState, Watch,
    daemon_service_client::DaemonServiceClient, debug_command::Command, event::Payload,
    history_service_client::HistoryServiceClient, inject_command::Replacement,
};

fn text(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

async fn instance_of(daemon: &Daemon) -> String {
    DaemonServiceClient::new(daemon.channel().await)
        .ping(PingRequest::default())
        .await
        .unwrap()
        .into_inner()
        .instance_id
}

async fn ended_sessions(
    daemon: &Daemon,
    request: ListEndedSessionsRequest,
) -> Result<ListEndedSessionsResponse, tonic::Status> {
    HistoryServiceClient::new(daemon.channel().await)
        .list_ended_sessions(request)
        .await
        .map(|r| r.into_inner())
}

/// A probe session labelled `labels` on `daemon` that holds once, is
/// answered INJECT `value`, and ends; its pause as `sub` saw it.
async fn injected_session(
    daemon: &Daemon,
    sub: &mut Subscription,
    labels: &[(&str, &str)],
    value: Value,
) -> (String, Pause) {
    let (probe, _) = Probe::connect(daemon, labels).await;
    let session = probe.session_id.clone();
    probe
        .hit("h1", "tool_call", "Bash", text("rm -rf /tmp/x"), &["turn"])
        .await;
    let pause = dap::next_pause(sub, &session).await;
    dap::answer(
        daemon,
        &pause.key,
        Command::Inject(InjectCommand {
            replacement: Some(Replacement::Value(value)),
        }),
    )
    .await
    .unwrap();
    drop(probe);
    dap::ended(sub, &session).await;
    (session, pause)
}

/// `{"cmd": cmd}`: the probe's points take dicts.
fn cmd(cmd: &str) -> Value {
    Value {
        kind: Some(Kind::StructValue(Struct {
            fields: [("cmd".to_owned(), text(cmd))].into_iter().collect(),
        })),
    }
}

fn secret_value() -> Value {
    Value {
        kind: Some(Kind::StructValue(Struct {
            fields: [
                ("cmd".to_owned(), text("ls")),
                ("db_password".to_owned(), text("hunter2")),
            ]
            .into_iter()
            .collect(),
        })),
    }
}

async fn recorded(daemon: &Daemon, session: &str) -> Vec<Event> {
    HistoryServiceClient::new(daemon.channel().await)
        .get_session_history(GetSessionHistoryRequest {
            session_id: session.into(),
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .events
}

fn decision_of(events: &[Event]) -> Option<Command> {
    events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::PauseResolved(r)) => Some(r.clone()),
            _ => None,
        })
        .expect("the decision is in the history")
        .decision
        .and_then(|d| d.command)
}

#[tokio::test]
async fn an_inject_is_recorded_whole_and_masked_and_ended_sessions_are_listed_after_a_restart() {
    let args = ["--redact", "password"];
    let mut daemon = Daemon::start(&args).await;
    let instance = instance_of(&daemon).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    let (session, pause) =
        injected_session(&daemon, &mut sub, &[("team", "a")], secret_value()).await;
    assert_eq!(pause.replica_id, instance, "{pause:?}");
    let (other, _) = injected_session(&daemon, &mut sub, &[("team", "b")], cmd("pwd")).await;
    let data_dir = daemon.data_dir.clone();
    let owned = daemon.owned_dir.take();
    daemon.stop().await;

    let daemon = Daemon::start_in(&data_dir, &args).await;
    let events = recorded(&daemon, &session).await;
    let started = events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::SessionStarted(s)) => s.session.clone(),
            _ => None,
        })
        .unwrap();
    assert_eq!(started.replica_id, instance);
    // The value the hold was changed to, as the program got it but for
    // the secret: the history keeps what was decided, not the password.
    let Some(Command::Inject(InjectCommand {
        replacement: Some(Replacement::Value(value)),
    })) = decision_of(&events)
    else {
        panic!("an INJECT with its value in {events:?}")
    };
    let Some(Kind::StructValue(fields)) = value.kind else {
        panic!("{value:?}")
    };
    assert_eq!(fields.fields["cmd"], text("ls"));
    assert_eq!(fields.fields["db_password"], text("<redacted>"));

    // The restarted daemon lists both ended sessions, newest first.
    let all = ended_sessions(&daemon, ListEndedSessionsRequest::default())
        .await
        .unwrap();
    let ids: Vec<_> = all.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, [other.as_str(), session.as_str()]);
    for s in &all.sessions {
        assert_eq!(s.state, SessionState::Ended as i32, "{s:?}");
        assert_eq!(s.end_reason, EndReason::ProbeDisconnected as i32, "{s:?}");
        assert_eq!(s.replica_id, instance);
        assert!(s.ended_at.is_some());
    }
    let team_a = ended_sessions(
        &daemon,
        ListEndedSessionsRequest {
            label_selector: "team=a".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(team_a.sessions.len(), 1);
    assert_eq!(team_a.sessions[0].id, session);
    // None ended after the last one's end.
    let after = all.sessions[0].ended_at.map(|mut t| {
        t.seconds += 1;
        t
    });
    let none = ended_sessions(
        &daemon,
        ListEndedSessionsRequest {
            since: after,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(none.sessions.is_empty(), "{none:?}");
    let bad = ended_sessions(
        &daemon,
        ListEndedSessionsRequest {
            page_token: "nope".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    daemon.stop().await;
    drop(owned);
}

#[tokio::test]
async fn any_replica_lists_every_replica_s_ended_sessions_a_page_at_a_time() {
    let url = postgres::database("owners_ended");
    let args = ["--database-url", url.as_str()];
    let a = Daemon::start(&args).await;
    let b = Daemon::start(&args).await;
    let (id_a, id_b) = (instance_of(&a).await, instance_of(&b).await);
    let mut on_b = Subscription::open(b.channel().await, Watch::default()).await;
    on_b.next().await;

    // A session on A is shown on B's stream as A's, pause and all.
    let (probe, _) = Probe::connect(&a, &[("team", "a")]).await;
    let on_a_session = probe.session_id.clone();
    probe
        .hit("h1", "tool_call", "Bash", text("ls"), &["turn"])
        .await;
    let pause = dap::next_pause(&mut on_b, &on_a_session).await;
    assert_eq!(pause.replica_id, id_a, "{pause:?}");
    dap::answer(
        &b,
        &pause.key,
        Command::Inject(InjectCommand {
            replacement: Some(Replacement::Value(cmd("pwd"))),
        }),
    )
    .await
    .unwrap();
    drop(probe);
    dap::ended(&mut on_b, &on_a_session).await;
    let (on_b_session, _) = injected_session(&b, &mut on_b, &[("team", "b")], cmd("id")).await;
    // Stopped cleanly, each replica has written what it ran.
    a.stop().await;
    b.stop().await;

    let c = Daemon::start(&args).await;
    let first = ended_sessions(
        &c,
        ListEndedSessionsRequest {
            page_size: 1,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(first.sessions.len(), 1);
    assert_eq!(first.sessions[0].id, on_b_session);
    assert_eq!(first.sessions[0].replica_id, id_b);
    assert!(!first.next_page_token.is_empty());
    let second = ended_sessions(
        &c,
        ListEndedSessionsRequest {
            page_size: 1,
            page_token: first.next_page_token,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(second.sessions.len(), 1);
    assert_eq!(second.sessions[0].id, on_a_session);
    assert_eq!(second.sessions[0].replica_id, id_a);
    assert!(second.next_page_token.is_empty(), "{second:?}");
    let team_a = ended_sessions(
        &c,
        ListEndedSessionsRequest {
            label_selector: "team=a".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(team_a.sessions.len(), 1);
    assert_eq!(team_a.sessions[0].id, on_a_session);
    // The answer given on B to A's pause is on record whole, in A's history.
    assert_eq!(
        decision_of(&recorded(&c, &on_a_session).await),
        Some(Command::Inject(InjectCommand {
            replacement: Some(Replacement::Value(cmd("pwd"))),
        }))
    );
    c.stop().await;
}

#[tokio::test]
async fn a_killed_replica_s_session_is_listed_as_lost_with_its_replica() {
    let url = postgres::database("owners_lost");
    let args = ["--database-url", url.as_str(), "--replica-lease", "3s"];
    let a = Daemon::start(&args).await;
    let b = Daemon::start(&args).await;
    let id_a = instance_of(&a).await;
    let mut on_b = Subscription::open(b.channel().await, Watch::default()).await;
    on_b.next().await;
    let (probe, _) = Probe::connect(&a, &[("team", "a")]).await;
    let session = probe.session_id.clone();
    // A has written its record of the running session (not its end).
    let written = format!(
        "SELECT count(*) FROM session_records WHERE session_id = '{session}' AND ended_us = 0"
    );
    let deadline = Instant::now() + DEADLINE;
    while postgres::query(&url, &written) != "1" {
        assert!(Instant::now() < deadline, "A did not record {session}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Killed, A records nothing more; B ends the session once A's lease
    // has run out.
    let mut a = a;
    a.signal("KILL");
    a.wait_exit(DEADLINE).await;
    let Some(Payload::SessionEnded(ended)) = dap::ended(&mut on_b, &session).await.payload else {
        panic!("a session_ended event")
    };
    assert_eq!(ended.reason, EndReason::ReplicaLost as i32, "{ended:?}");

    // B lists it as lost on A, as soon as A is out of the directory.
    let deadline = Instant::now() + DEADLINE;
    let listed = loop {
        let page = ended_sessions(&b, ListEndedSessionsRequest::default())
            .await
            .unwrap();
        if let Some(s) = page.sessions.into_iter().find(|s| s.id == session) {
            break s;
        }
        assert!(Instant::now() < deadline, "B never listed {session}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(listed.state, SessionState::Ended as i32, "{listed:?}");
    assert_eq!(
        listed.end_reason,
        EndReason::ReplicaLost as i32,
        "{listed:?}"
    );
    assert_eq!(listed.replica_id, id_a);
    assert_eq!(listed.labels.get("team").map(String::as_str), Some("a"));
    assert!(listed.end_detail.contains(&id_a), "{listed:?}");
    drop(probe);
    b.stop().await;
}

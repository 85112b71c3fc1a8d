//! Session history (`HistoryService.GetSessionHistory`): what a session
//! published is readable after it ended and after the daemon restarted, on
//! SQLite and on PostgreSQL.

use prost_types::{Value, value::Kind};
use stepd_e2e::{Daemon, Subscription, dap, postgres, probe::Probe, reason};
use stepd_proto::v1::{
    Event, EventChannel, GetSessionHistoryRequest, GetSessionHistoryResponse, SkipCommand, Watch,
    debug_command::Command, event::Payload, history_service_client::HistoryServiceClient,
};
use tonic::Code;

async fn history(
    daemon: &Daemon,
    request: GetSessionHistoryRequest,
) -> Result<GetSessionHistoryResponse, tonic::Status> {
    HistoryServiceClient::new(daemon.channel().await)
        .get_session_history(request)
        .await
        .map(|r| r.into_inner())
}

/// Every recorded event of a session, page by page.
async fn all_of(daemon: &Daemon, session: &str, page_size: u32) -> Vec<Event> {
    let mut events = Vec::new();
    let mut token = String::new();
    loop {
        let page = history(
            daemon,
            GetSessionHistoryRequest {
                session_id: session.into(),
                page_size,
                page_token: token,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert!(page.events.len() <= page_size.max(1) as usize);
        events.extend(page.events);
        if page.next_page_token.is_empty() {
            return events;
        }
        token = page.next_page_token;
    }
}

/// A probe session that holds once, is answered SKIP, and ends; the events
/// of it a subscriber saw.
async fn one_session(daemon: &Daemon) -> (String, Vec<Event>) {
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    let (probe, _) = Probe::connect(daemon, &[]).await;
    let session = probe.session_id.clone();
    let value = Value {
        kind: Some(Kind::StringValue("rm -rf /tmp/x".into())),
    };
    probe.hit("h1", "tool_call", "Bash", value, &["turn"]).await;
    let mut seen = Vec::new();
    let stopped = sub
        .wait_for("the hold", |e| {
            if e.session_id == session {
                seen.push(e.clone());
            }
            e.session_id == session && matches!(e.payload, Some(Payload::Stopped(_)))
        })
        .await;
    let Some(Payload::Stopped(stopped)) = stopped.payload else {
        unreachable!()
    };
    let key = stopped.pause.unwrap().key;
    dap::answer(daemon, &key, Command::Skip(SkipCommand {}))
        .await
        .unwrap();
    drop(probe);
    sub.wait_for("the session's end", |e| {
        if e.session_id == session {
            seen.push(e.clone());
        }
        e.session_id == session && matches!(e.payload, Some(Payload::SessionEnded(_)))
    })
    .await;
    (session, seen)
}

async fn outlives_the_session_and_the_daemon(args: &[&str]) {
    let mut daemon = Daemon::start(args).await;
    let (session, seen) = one_session(&daemon).await;
    let data_dir = daemon.data_dir.clone();
    let owned = daemon.owned_dir.take();
    daemon.stop().await;

    let daemon = Daemon::start_in(&data_dir, args).await;
    let recorded = all_of(&daemon, &session, 2).await;
    // Recorded exactly as published: the hold with its value, the SKIP and
    // who sent it, the end.
    assert_eq!(recorded, seen);
    let resolved = recorded
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::PauseResolved(r)) => Some(r.clone()),
            _ => None,
        })
        .expect("the decision is in the history");
    assert!(!resolved.by.is_empty());
    let stopped = recorded
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::Stopped(s)) => s.pause.clone(),
            _ => None,
        })
        .expect("the pause is in the history");
    assert!(format!("{stopped:?}").contains("rm -rf /tmp/x"));

    // Filtered by channel.
    let lifecycle = history(
        &daemon,
        GetSessionHistoryRequest {
            session_id: session.clone(),
            channels: vec![EventChannel::Lifecycle as i32],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(!lifecycle.events.is_empty());
    assert!(lifecycle.events.iter().all(|e| matches!(
        e.payload,
        Some(Payload::SessionStarted(_) | Payload::SessionUpdated(_) | Payload::SessionEnded(_))
    )));
    assert!(lifecycle.dropped.is_none());
    daemon.stop().await;
    drop(owned);
}

#[tokio::test]
async fn history_outlives_the_session_and_the_daemon_on_sqlite() {
    outlives_the_session_and_the_daemon(&[]).await;
}

#[tokio::test]
async fn history_outlives_the_session_and_the_daemon_on_postgres() {
    let url = postgres::database("history_restart");
    outlives_the_session_and_the_daemon(&["--database-url", &url]).await;
}

#[tokio::test]
async fn unknown_sessions_and_bad_tokens_are_refused() {
    let daemon = Daemon::start(&[]).await;
    let err = history(
        &daemon,
        GetSessionHistoryRequest {
            session_id: "no-such-session".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert_eq!(reason(&err), "SESSION_NOT_FOUND");
    for (field, request) in [
        ("session_id", GetSessionHistoryRequest::default()),
        (
            "page_token",
            GetSessionHistoryRequest {
                session_id: "s".into(),
                page_token: "bp-7".into(),
                ..Default::default()
            },
        ),
        (
            "channels",
            GetSessionHistoryRequest {
                session_id: "s".into(),
                channels: vec![99],
                ..Default::default()
            },
        ),
    ] {
        let err = history(&daemon, request).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{field}");
        assert_eq!(stepd_e2e::violated_fields(&err), [field]);
    }
    daemon.stop().await;
}

#[tokio::test]
async fn no_history_records_nothing() {
    let daemon = Daemon::start(&["--no-history"]).await;
    let (session, _) = one_session(&daemon).await;
    let err = history(
        &daemon,
        GetSessionHistoryRequest {
            session_id: session,
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(reason(&err), "SESSION_NOT_FOUND");
    daemon.stop().await;
}

#[tokio::test]
async fn history_over_its_size_drops_the_oldest_and_says_so_on_sqlite() {
    over_its_size(&[]).await;
}

#[tokio::test]
async fn history_over_its_size_drops_the_oldest_and_says_so_on_postgres() {
    let url = postgres::database("history_size");
    over_its_size(&["--database-url", &url]).await;
}

async fn over_its_size(args: &[&str]) {
    let daemon = Daemon::start(&[args, &["--history-max-bytes", "1"]].concat()).await;
    let (session, _) = one_session(&daemon).await;
    let deadline = tokio::time::Instant::now() + stepd_e2e::DEADLINE;
    let page = loop {
        let page = history(
            &daemon,
            GetSessionHistoryRequest {
                session_id: session.clone(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        if page.dropped.is_some() {
            break page;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "retention never dropped anything"
        );
        tokio::task::yield_now().await;
    };
    let dropped = page.dropped.unwrap();
    assert_eq!(dropped.reason, "over --history-max-bytes");
    assert!(dropped.events > 0);
    assert!(page.events.iter().all(|e| e.seq > dropped.through_seq));
    daemon.stop().await;
}

/// Waits until `count` events of a session are recorded (they are written
/// a moment after they are published).
async fn recorded(daemon: &Daemon, session: &str, count: usize) {
    let deadline = tokio::time::Instant::now() + stepd_e2e::DEADLINE;
    loop {
        let have = history(
            daemon,
            GetSessionHistoryRequest {
                session_id: session.into(),
                page_size: 1000,
                ..Default::default()
            },
        )
        .await
        .map_or(0, |page| page.events.len());
        if have >= count {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{have} of {count} events recorded"
        );
        tokio::task::yield_now().await;
    }
}

fn stepctl(addr: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(stepd_e2e::stepctl_bin())
        .args(args)
        .env("STEPD_ADDR", addr)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run stepctl")
}

#[tokio::test]
async fn stepctl_history_shows_a_timeline_of_an_ended_session() {
    let daemon = Daemon::start(&[]).await;
    let (session, seen) = one_session(&daemon).await;
    recorded(&daemon, &session, seen.len()).await;

    let out = stepctl(&daemon.addr, &["history", &session]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("    ")).collect();
    assert_eq!(lines.len(), seen.len(), "one line per event:\n{text}");
    assert!(!text.contains(&format!("[{session}]")), "{text}");
    assert!(text.contains("rm -rf /tmp/x"), "the held value:\n{text}");
    assert!(text.contains("answered by uid:"), "who decided:\n{text}");
    assert!(text.contains("ended"), "{text}");

    let out = stepctl(
        &daemon.addr,
        &["--json", "history", &session, "--channel", "lifecycle"],
    );
    assert!(out.status.success());
    let events: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(events.len() >= 2);
    assert!(
        events.iter().all(|e| e.get("sessionStarted").is_some()
            || e.get("sessionUpdated").is_some()
            || e.get("sessionEnded").is_some()),
        "{events:?}"
    );

    let out = stepctl(&daemon.addr, &["history", "no-such-session"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no history of session"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    daemon.stop().await;
}

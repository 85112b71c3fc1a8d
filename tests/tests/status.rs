//! What an operator sees: `GetStatus` counts sessions by kind and state,
//! probes, pending pauses and subscribers; `stepctl status` shows them and
//! the connected probes by their labels; the JSON log lines of a session's
//! actor carry its id, and those of a pause its key.

use std::{collections::HashMap, process::Stdio, time::Instant};

use serde_json::Value as Json;
use stepd_e2e::{
    DEADLINE, Daemon, Subscription, TempDir, dap,
    probe::{Probe, arm, connect_with, hello, hold, next},
    stepctl_bin,
};
use stepd_proto::v1::{
    ContinueCommand, GetStatusRequest, GetStatusResponse, SessionCount, SessionKind, SessionState,
    Watch, connect_response::Message as Out, daemon_service_client::DaemonServiceClient,
    debug_command::Command,
};
use tokio::io::{AsyncBufReadExt, BufReader};

async fn status(daemon: &Daemon) -> GetStatusResponse {
    DaemonServiceClient::new(daemon.channel().await)
        .get_status(GetStatusRequest {})
        .await
        .unwrap()
        .into_inner()
}

async fn labelled(daemon: &Daemon, name: &str, pod: &str) -> Probe {
    let mut hello = hello(name);
    hello.labels = HashMap::from([
        ("pod".to_owned(), pod.to_owned()),
        ("app".to_owned(), "web".to_owned()),
    ]);
    connect_with(daemon, hello, "").await
}

fn count(kind: SessionKind, state: SessionState, count: u32) -> SessionCount {
    SessionCount {
        kind: kind.into(),
        state: state.into(),
        count,
    }
}

#[tokio::test]
async fn status_counts_sessions_probes_pauses_and_subscribers() {
    let daemon = Daemon::start(&[]).await;
    let before = status(&daemon).await;
    assert_eq!(
        (before.probes, before.pending_pauses, before.active_sessions),
        (0, 0, 0)
    );
    assert!(before.sessions.is_empty());
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    let mut held = labelled(&daemon, "checkout", "web-1").await;
    let idle = labelled(&daemon, "search", "web-2").await;
    let breakpoint = arm(&daemon, &mut held, "Bash").await;
    hold(&held, "h1", "Bash", &breakpoint, "").await;
    let pause = dap::next_pause(&mut sub, &held.session_id).await;

    let now = status(&daemon).await;
    assert_eq!(now.probes, 2);
    assert_eq!(now.pending_pauses, 1);
    assert_eq!(now.subscribers, 1);
    assert_eq!(now.active_sessions, 2);
    let mut sessions = now.sessions.clone();
    sessions.sort_by_key(|c| (c.kind, c.state));
    assert_eq!(
        sessions,
        [
            count(SessionKind::Probe, SessionState::Running, 1),
            count(SessionKind::Probe, SessionState::Stopped, 1),
        ]
    );
    assert!(now.events_published > before.events_published);
    assert_eq!(now.events_dropped, 0);

    // stepctl status: the counts, then each probe under its labels.
    let out = std::process::Command::new(stepctl_bin())
        .arg("status")
        .env("STEPD_ADDR", &daemon.addr)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let line = |key: &str| {
        text.lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key:?} line in:\n{text}"))
            .to_owned()
    };
    assert_eq!(line("probes "), format!("{:<15} 2", "probes"));
    assert_eq!(
        line("pending pauses"),
        format!("{:<15} 1", "pending pauses")
    );
    // The pairs in the order the daemon lists them.
    let pairs: Vec<String> = now
        .sessions
        .iter()
        .map(|c| {
            let state = SessionState::try_from(c.state).unwrap().as_str_name();
            let state = state["SESSION_STATE_".len()..].to_lowercase();
            format!("probe {} {state}", c.count)
        })
        .collect();
    assert_eq!(
        line("sessions "),
        format!("{:<15} 2 ({})", "sessions", pairs.join(", "))
    );
    assert!(line("events").contains("0 dropped"), "{text}");
    let web1 = line("app=web,pod=web-1");
    assert!(
        web1.contains("checkout") && web1.contains(&held.session_id),
        "{web1}"
    );
    let web2 = line("app=web,pod=web-2");
    assert!(
        web2.contains("search") && web2.contains(&idle.session_id),
        "{web2}"
    );

    dap::answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let Out::Resume(_) = next(&mut held.rx).await else {
        panic!("expected Resume")
    };
    drop(idle);
    // The idle probe's stream closed: its session ends.
    let deadline = Instant::now() + DEADLINE;
    let after = loop {
        let s = status(&daemon).await;
        if s.probes == 1 {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the idle probe never left: {s:?}"
        );
        sub.next().await;
    };
    assert_eq!(after.pending_pauses, 0);
    assert_eq!(
        after.sessions,
        [count(SessionKind::Probe, SessionState::Running, 1)]
    );
    daemon.stop().await;
}

#[tokio::test]
async fn json_logs_carry_the_session_and_the_pause() {
    let dir = TempDir::new("status-logs");
    let mut command = Daemon::command(dir.path(), &["--log-format", "json"]);
    command
        .env("RUST_LOG", "warn,stepd::session::pause=debug")
        .stderr(Stdio::piped());
    let mut daemon = Daemon::spawn(command, dir.path()).await;
    let stderr = daemon.child.stderr.take().unwrap();
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<Json>();
    tokio::spawn(async move {
        let mut reader = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            if let Ok(json) = serde_json::from_str::<Json>(&line) {
                let _ = lines_tx.send(json);
            }
        }
    });
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    let mut probe = labelled(&daemon, "checkout", "web-1").await;
    let breakpoint = arm(&daemon, &mut probe, "Bash").await;
    hold(&probe, "h1", "Bash", &breakpoint, "").await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    dap::answer(&daemon, &pause.key, Command::Resume(ContinueCommand {}))
        .await
        .unwrap();
    let mut seen = Vec::new();
    for message in ["pause opened", "pause resolved"] {
        let line = tokio::time::timeout(DEADLINE, async {
            loop {
                let line = lines.recv().await.expect("stepd's stderr is open");
                if line["message"] == message {
                    return line;
                }
                seen.push(line);
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {message:?} line; saw {seen:#?}"));
        assert_eq!(line["pause"], Json::from(pause.key.clone()), "{line:#}");
        assert_eq!(
            line["span"]["session"],
            Json::from(probe.session_id.clone()),
            "{line:#}"
        );
        assert_eq!(line["span"]["kind"], "PROBE", "{line:#}");
    }
    daemon.stop().await;
}

//! `--redact` and labels: a probe's Hello labels, a probe point's labels and
//! a launched session's labels whose names match a pattern are masked in
//! everything that leaves the daemon (events, snapshots, GetSession,
//! ListSessions, ListPauses, a Pause's reply, a LOG breakpoint's line, the
//! history, the database, the log), while label selectors still match the
//! real values inside the daemon.

use std::{
    path::Path,
    process::Stdio,
    sync::{Arc, Mutex},
};

use prost_types::{Struct, Value, value::Kind};
use stepd_e2e::{
    DEADLINE, Daemon, Subscription, dap, fixture, postgres,
    probe::{Probe, next},
};
use stepd_proto::v1::{
    BreakpointAction, BreakpointSpec, ContinueCommand, GetSessionHistoryRequest, GetSessionRequest,
    Hit, LaunchRequest, ListPausesRequest, ListSessionsRequest, PauseRequest, PointInfo,
    ProbeMatch, Wait, Watch, breakpoint_spec::Location, connect_request::Message as In,
    connect_response::Message as Out, debug_command::Command, event::Payload,
    history_service_client::HistoryServiceClient, pause_request,
};
use tokio::io::{AsyncBufReadExt, BufReader};

const SECRET: &str = "s3cret";
const MASK: &str = "<redacted>";
const LABELS: &[(&str, &str)] = &[("api_token", SECRET), ("team", "a")];

/// A breakpoint on `tool_call` points named `name`, for sessions `selector`
/// selects.
fn tool_call(name: &str, selector: &str) -> BreakpointSpec {
    BreakpointSpec {
        location: Some(Location::Probe(ProbeMatch {
            point_kind: "tool_call".into(),
            name_glob: name.into(),
            ..Default::default()
        })),
        label_selector: selector.into(),
        ..Default::default()
    }
}

fn string(text: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(text.into())),
    }
}

/// A point as a probe library reports it: with the probe's labels.
fn point(name: &str) -> PointInfo {
    PointInfo {
        kind: "tool_call".into(),
        name: name.into(),
        payload: Some(Value {
            kind: Some(Kind::StructValue(Struct {
                fields: [("cmd".to_owned(), string("ls"))].into(),
            })),
        }),
        labels: LABELS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

/// The next message the daemon sends the probe that is not a heartbeat.
async fn next_message(probe: &mut Probe) -> Out {
    loop {
        match next(&mut probe.rx).await {
            Out::Heartbeat(_) => {}
            other => return other,
        }
    }
}

/// Starts a daemon with `args` whose standard error (at debug level for
/// stepd) is gathered into the returned text.
async fn daemon_with_log(data_dir: &Path, args: &[&str]) -> (Daemon, Arc<Mutex<String>>) {
    let mut command = Daemon::command(data_dir, args);
    command
        .env("RUST_LOG", "info,stepd=debug")
        .stderr(Stdio::piped());
    let mut daemon = Daemon::spawn(command, data_dir).await;
    let log = Arc::new(Mutex::new(String::new()));
    let kept = log.clone();
    let stderr = daemon.child.stderr.take().unwrap();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut log = kept.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    (daemon, log)
}

/// Every file under `dir`, its bytes read as text (lossily).
fn files_under(dir: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            text.push_str(&files_under(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    text
}

/// Every row of every table of the PostgreSQL database at `url`, as text
/// (`bytea` columns in hex).
fn rows_of(url: &str) -> String {
    let tables = postgres::query(
        url,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
    );
    tables
        .lines()
        .map(|table| postgres::query(url, &format!("SELECT t::text FROM {table} t")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The bytes of `text` in lowercase hex, as PostgreSQL prints a `bytea`.
fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

async fn a_redacted_label_never_leaves_the_daemon(database_url: Option<&str>) {
    let dir = stepd_e2e::TempDir::new("labels");
    let mut args = vec!["--redact", "api_token"];
    if let Some(url) = database_url {
        args.extend(["--database-url", url]);
    }
    let (daemon, log) = daemon_with_log(dir.path(), &args).await;

    // Everything the daemon sends on a stream, kept as text.
    let (seen, recorder) = Subscription::record_everything(daemon.channel().await).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    // Everything the daemon answers, kept as text.
    let mut answers = String::new();

    // A selector naming the redacted label (by existence) and another.
    let stop = dap::add_breakpoint(&daemon, tool_call("Bash", "team=a,api_token")).await;
    let log_bp = dap::add_breakpoint(
        &daemon,
        BreakpointSpec {
            action: BreakpointAction::Log as i32,
            log_message: "token={labels.api_token} team={labels.team}".into(),
            ..tool_call("Echo", "team=a")
        },
    )
    .await;
    let (mut probe, armed) = Probe::connect(&daemon, LABELS).await;
    let session = probe.session_id.clone();
    let armed_ids: Vec<&str> = armed
        .matchers
        .iter()
        .map(|m| m.breakpoint_id.as_str())
        .collect();
    assert!(
        armed_ids.contains(&stop.as_str()) && armed_ids.contains(&log_bp.as_str()),
        "{armed:?}"
    );
    let started = sub
        .wait_for("the probe's session", |e| {
            e.session_id == session && matches!(e.payload, Some(Payload::SessionStarted(_)))
        })
        .await;
    let Some(Payload::SessionStarted(started)) = started.payload else {
        unreachable!()
    };
    let labels = started.session.unwrap().labels;
    assert_eq!(labels["api_token"], MASK, "{labels:?}");
    assert_eq!(labels["team"], "a");

    // A LOG breakpoint's line names the label.
    probe
        .send(In::Hit(Hit {
            hit_id: "log-1".into(),
            point: Some(point("Echo")),
            coor: vec![0],
            breakpoint_ids: vec![log_bp.clone()],
            ..Default::default()
        }))
        .await;
    let output = sub
        .wait_for("the LOG breakpoint's line", |e| {
            e.session_id == session && matches!(e.payload, Some(Payload::Output(_)))
        })
        .await;
    let text = format!("{output:?}");
    assert!(text.contains("token=<redacted> team=a"), "{text}");
    let Out::Resume(_) = next_message(&mut probe).await else {
        panic!("the LOG hit goes on")
    };

    // A Pause that waits is answered with the next hold.
    let mut sessions = dap::sessions(&daemon).await;
    let waiting = tokio::spawn({
        let mut sessions = sessions.clone();
        let session = session.clone();
        async move {
            sessions
                .pause(PauseRequest {
                    session_id: session,
                    wait: Some(pause_request::Wait::UntilStable(Wait::default())),
                    ..Default::default()
                })
                .await
        }
    });
    // The Pause is registered once the probe is told to step.
    let Out::Armed(_) = next_message(&mut probe).await else {
        panic!("expected Armed after the Pause request")
    };
    probe
        .send(In::Hit(Hit {
            hit_id: "hold-1".into(),
            point: Some(point("Bash")),
            coor: vec![0],
            breakpoint_ids: vec![stop.clone()],
            ..Default::default()
        }))
        .await;
    let pause = dap::next_pause(&mut sub, &session).await;
    let point_labels = &pause.point.as_ref().unwrap().labels;
    assert_eq!(point_labels["api_token"], MASK, "{point_labels:?}");
    let replied = tokio::time::timeout(DEADLINE, waiting)
        .await
        .expect("the Pause answered in time")
        .unwrap()
        .expect("pause")
        .into_inner();
    assert!(
        replied.state.as_ref().unwrap().pause.is_some(),
        "{replied:?}"
    );
    answers.push_str(&format!("{replied:?}\n"));

    let got = sessions
        .get_session(GetSessionRequest {
            session_id: session.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.session.as_ref().unwrap().labels["api_token"], MASK);
    answers.push_str(&format!("{got:?}\n"));
    let listed = sessions
        .list_sessions(ListSessionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    answers.push_str(&format!("{listed:?}\n"));
    let pauses = sessions
        .list_pauses(ListPausesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(pauses.pauses.len(), 1);
    answers.push_str(&format!("{pauses:?}\n"));
    // Listing cannot be asked whether a guess is the secret: a selector
    // sees the labels as they are shown.
    let by_value = sessions
        .list_sessions(ListSessionsRequest {
            label_selector: format!("api_token={SECRET}"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(by_value.sessions.is_empty(), "{by_value:?}");
    let by_name = sessions
        .list_sessions(ListSessionsRequest {
            label_selector: "api_token".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_name.sessions.len(), 1, "{by_name:?}");
    // A new subscriber's snapshot.
    let mut late = Subscription::open(daemon.channel().await, Watch::default()).await;
    let snapshot = late.next().await;
    assert!(
        matches!(snapshot.payload, Some(Payload::Snapshot(_))),
        "{snapshot:?}"
    );
    answers.push_str(&format!("{snapshot:?}\n"));
    drop(late);

    dap::answer(&daemon, &pause.key, Command::Continue(ContinueCommand {}))
        .await
        .unwrap();
    drop(probe);
    dap::ended(&mut sub, &session).await;

    // A launched session's labels.
    let launched = dap::launch_with(
        &daemon,
        LaunchRequest {
            adapter: "debugpy".into(),
            program: fixture("python/hello.py").to_str().unwrap().into(),
            labels: [("api_token".to_owned(), SECRET.to_owned())].into(),
            ..Default::default()
        },
    )
    .await;
    let launched_session = launched.session.clone().unwrap();
    assert_eq!(launched_session.labels["api_token"], MASK);
    answers.push_str(&format!("{launched:?}\n"));
    dap::ended(&mut sub, &launched_session.id).await;

    let data_dir = daemon.data_dir.clone();
    daemon.stop().await;
    // The stream ends with the daemon: everything it sent has been kept.
    recorder.await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert!(seen.contains("SessionStarted"), "the sessions were seen");
    assert!(!seen.contains(SECRET), "{seen}");
    assert!(!answers.contains(SECRET), "{answers}");

    // What was stored, read back by a daemon started on the same store.
    match database_url {
        None => {
            let stored = files_under(&data_dir);
            assert!(stored.contains(MASK), "the history was written");
            assert!(
                !stored.contains(SECRET),
                "the secret is in the data directory"
            );
        }
        Some(url) => {
            let stored = rows_of(url);
            assert!(stored.contains(&hex(MASK)), "the history was written");
            assert!(
                !stored.contains(SECRET) && !stored.contains(&hex(SECRET)),
                "the secret is in the database"
            );
        }
    }
    let (daemon, restarted_log) = daemon_with_log(&data_dir, &args).await;
    let mut history = HistoryServiceClient::new(daemon.channel().await);
    for id in [&session, &launched_session.id] {
        let recorded = history
            .get_session_history(GetSessionHistoryRequest {
                session_id: id.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let recorded = format!("{recorded:?}");
        assert!(recorded.contains("SessionStarted"), "{recorded}");
        assert!(!recorded.contains(SECRET), "{recorded}");
    }
    daemon.stop().await;

    for log in [log, restarted_log] {
        let log = log.lock().unwrap().clone();
        assert!(!log.is_empty(), "the daemon logged");
        assert!(!log.contains(SECRET), "{log}");
    }
}

#[tokio::test]
async fn a_redacted_label_never_leaves_the_daemon_on_sqlite() {
    a_redacted_label_never_leaves_the_daemon(None).await;
}

#[tokio::test]
async fn a_redacted_label_never_leaves_the_daemon_on_postgres() {
    let url = postgres::database("redacted_labels");
    a_redacted_label_never_leaves_the_daemon(Some(&url)).await;
}

/// Redaction is for what leaves the daemon: a breakpoint whose selector
/// names a redacted label's value still applies to the probe that has it,
/// and one naming another value does not.
#[tokio::test]
async fn a_selector_on_a_redacted_label_matches_its_real_value() {
    let daemon = Daemon::start(&["--redact", "api_token"]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    let matching =
        dap::add_breakpoint(&daemon, tool_call("Bash", &format!("api_token={SECRET}"))).await;
    let other = dap::add_breakpoint(&daemon, tool_call("Bash", "api_token=guess")).await;
    let (probe, armed) = Probe::connect(&daemon, LABELS).await;
    let armed: Vec<&str> = armed
        .matchers
        .iter()
        .map(|m| m.breakpoint_id.as_str())
        .collect();
    assert_eq!(
        armed,
        [matching.as_str()],
        "armed with {armed:?}, not {other}"
    );
    probe
        .send(In::Hit(Hit {
            hit_id: "h1".into(),
            point: Some(point("Bash")),
            coor: vec![0],
            breakpoint_ids: vec![matching.clone()],
            ..Default::default()
        }))
        .await;
    let pause = dap::next_pause(&mut sub, &probe.session_id).await;
    assert_eq!(pause.breakpoint_ids, [matching]);
    assert_eq!(pause.point.unwrap().labels["api_token"], MASK);
    daemon.stop().await;
}

//! stepctl as scripts and shells use it, against a real daemon and debugpy:
//! sessions selected by id prefix or name, shell completion of live sessions
//! and adapters (bash in a real terminal), a `--wait` that runs out, `watch
//! --session` ending with its session, tables fitted to the terminal.

use std::process::{Output, Stdio};

use stepd_e2e::{
    DEADLINE, Daemon, TempDir, dap, fixture, stepctl_bin,
    tmux::{Tmux, stepctl_command},
};
use stepd_proto::v1::LaunchRequest;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Runs `stepctl ARGS` against `addr`, waiting at most the deadline.
async fn stepctl(addr: &str, args: &[&str]) -> Output {
    let child = tokio::process::Command::new(stepctl_bin())
        .args(args)
        .env("STEPD_ADDR", addr)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run stepctl");
    tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("stepctl {args:?} never ended"))
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Launches busy.py (it runs until told to stop) under debugpy as `name`.
async fn busy(daemon: &Daemon, name: &str, stop_on_entry: bool) -> String {
    let program = fixture("python/busy.py");
    dap::launch_with(
        daemon,
        LaunchRequest {
            adapter: "debugpy".into(),
            program: program.to_str().unwrap().into(),
            name: name.into(),
            stop_on_entry,
            ..Default::default()
        },
    )
    .await
    .session
    .expect("a session")
    .id
}

/// The longest prefix two ids share.
fn common_prefix(a: &str, b: &str) -> String {
    a.chars()
        .zip(b.chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect()
}

#[tokio::test]
async fn sessions_are_selected_by_unique_prefix_or_name() {
    let daemon = Daemon::start(&[]).await;
    let first = busy(&daemon, "alpha", false).await;
    let second = busy(&daemon, "beta", false).await;
    let shared = common_prefix(&first, &second);
    assert!(shared.len() >= 2, "{first} {second}");

    // A prefix only the first has.
    let unique = &first[..shared.len() + 1];
    let out = stepctl(&daemon.addr, &["--json", "threads", unique]).await;
    assert!(out.status.success(), "{}", text(&out));
    // The name given at launch.
    let out = stepctl(&daemon.addr, &["--json", "threads", "beta"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let out = stepctl(&daemon.addr, &["pause", "beta"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let out = stepctl(&daemon.addr, &["--json", "pauses", "--session", "beta"]).await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&second),
        "{}",
        text(&out)
    );
    // A prefix both have: a usage error naming both.
    let out = stepctl(&daemon.addr, &["threads", &shared]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{first} (alpha)"))
            && stderr.contains(&format!("{second} (beta)")),
        "{stderr}"
    );
    // Nothing matches: the daemon's own answer.
    let out = stepctl(&daemon.addr, &["threads", "zz-no-such"]).await;
    assert_eq!(out.status.code(), Some(11), "{}", text(&out));

    for id in [&first, &second] {
        let out = stepctl(&daemon.addr, &["disconnect", &id[..shared.len() + 1]]).await;
        assert!(out.status.success(), "{}", text(&out));
    }
    daemon.stop().await;
}

#[tokio::test]
async fn bash_completes_live_sessions_and_adapter_names() {
    let daemon = Daemon::start(&[]).await;
    let id = busy(&daemon, "completeme", false).await;
    let dir = TempDir::new("complete");
    let bin = stepctl_bin();
    let bin_dir = bin.parent().unwrap().to_str().unwrap().to_owned();
    let tmux = Tmux::start(&format!(
        "env STEPD_ADDR='{}' PATH='{bin_dir}':\"$PATH\" HOME='{}' bash --norc --noprofile -i",
        daemon.addr,
        dir.path().display()
    ));
    tmux.type_line("source <(stepctl completion bash); echo sourced-$?");
    tmux.wait_count("sourced-0", 1).await;

    // A session argument: the live session's id from a prefix, its name.
    tmux.type_text(&format!("stepctl stack {}", &id[..20]));
    tmux.keys(&["Tab"]);
    tmux.wait_count(&format!("stepctl stack {id}"), 1).await;
    tmux.keys(&["C-u"]);
    tmux.type_text("stepctl threads complet");
    tmux.keys(&["Tab"]);
    tmux.wait_count("stepctl threads completeme", 1).await;
    tmux.keys(&["C-u"]);
    // `--session` too, and `step KIND SESSION`.
    tmux.type_text("stepctl pauses --session complet");
    tmux.keys(&["Tab"]);
    tmux.wait_count("stepctl pauses --session completeme", 1)
        .await;
    tmux.keys(&["C-u"]);
    tmux.type_text("stepctl step over complet");
    tmux.keys(&["Tab"]);
    tmux.wait_count("stepctl step over completeme", 1).await;
    tmux.keys(&["C-u"]);
    // --adapter: adapter names, not files.
    tmux.type_text("stepctl launch --adapter deb");
    tmux.keys(&["Tab"]);
    tmux.wait_count("stepctl launch --adapter debugpy", 1).await;
    tmux.keys(&["C-u"]);
    daemon.stop().await;
}

#[tokio::test]
async fn a_wait_that_runs_out_exits_with_its_own_code() {
    let daemon = Daemon::start(&[]).await;
    let id = busy(&daemon, "busy", true).await;
    // From the entry stop the program runs on for longer than the wait.
    let out = stepctl(&daemon.addr, &["continue", &id, "--wait", "1s"]).await;
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("timed out"),
        "{}",
        text(&out)
    );
    // A stop within the wait is success.
    let out = stepctl(&daemon.addr, &["pause", &id, "--wait", "30s"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let out = stepctl(&daemon.addr, &["disconnect", &id]).await;
    assert!(out.status.success(), "{}", text(&out));
    daemon.stop().await;
}

#[tokio::test]
async fn watch_of_a_session_ends_when_it_ends_and_at_once_when_it_has() {
    let daemon = Daemon::start(&[]).await;
    let id = busy(&daemon, "watched", false).await;
    let mut watch = tokio::process::Command::new(stepctl_bin())
        .args(["watch", "--session", &id])
        .env("STEPD_ADDR", &daemon.addr)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Subscribed once its snapshot line is out.
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let snapshot = tokio::time::timeout(DEADLINE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("snapshot at seq") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(snapshot, Ok(true), "the watch's snapshot");
    let out = stepctl(&daemon.addr, &["disconnect", &id]).await;
    assert!(out.status.success(), "{}", text(&out));
    let rest = tokio::time::timeout(DEADLINE, async {
        let mut rest = Vec::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            rest.push(line);
        }
        rest
    })
    .await
    .expect("watch --session ended with its session");
    assert!(
        rest.iter().any(|l| l.contains("ended")),
        "{}",
        rest.join("\n")
    );
    let status = watch.wait().await.unwrap();
    assert!(status.success(), "{status:?}");

    // An ended session: at once.
    let out = stepctl(&daemon.addr, &["watch", "--session", &id]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has ended"),
        "{}",
        text(&out)
    );
    daemon.stop().await;
}

#[tokio::test]
async fn tables_fit_the_terminal() {
    let daemon = Daemon::start(&[]).await;
    let id = busy(&daemon, "a-session-with-a-rather-long-name", false).await;
    let dir = TempDir::new("width");
    let tmux = Tmux::start(&format!(
        "COLUMNS=60 {}",
        stepctl_command(&daemon.addr, &dir.path().join("h"), &["sessions"])
    ));
    let screen = tmux.wait_count("[stepctl exit 0]", 1).await;
    let table: Vec<&str> = screen
        .lines()
        .take_while(|l| !l.starts_with("[stepctl exit"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(table.len() >= 2, "{screen}");
    for line in &table {
        assert!(line.trim_end().chars().count() <= 60, "{line:?}\n{screen}");
    }
    assert!(screen.contains('…'), "{screen}");
    // Piped, a table is whole.
    let out = stepctl(&daemon.addr, &["sessions"]).await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&id),
        "{}",
        text(&out)
    );
    let out = stepctl(&daemon.addr, &["disconnect", &id]).await;
    assert!(out.status.success(), "{}", text(&out));
    daemon.stop().await;
}

#[tokio::test]
async fn json_history_says_what_retention_dropped_first() {
    use stepd_proto::v1::{GetSessionHistoryRequest, history_service_client::HistoryServiceClient};
    let daemon = Daemon::start(&["--history-max-bytes", "1"]).await;
    let id = busy(&daemon, "kept", false).await;
    let out = stepctl(&daemon.addr, &["disconnect", &id]).await;
    assert!(out.status.success(), "{}", text(&out));
    // Retention runs on its own: wait until it has dropped something.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let page = HistoryServiceClient::new(daemon.channel().await)
            .get_session_history(GetSessionHistoryRequest {
                session_id: id.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        if page.dropped.is_some() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "retention never dropped anything"
        );
        tokio::task::yield_now().await;
    }
    let out = stepctl(&daemon.addr, &["--json", "history", &id]).await;
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first: serde_json::Value =
        serde_json::from_str(stdout.lines().next().expect("a first line")).unwrap();
    assert_eq!(
        first["dropped"]["reason"], "over --history-max-bytes",
        "{stdout}"
    );
    for line in stdout.lines().skip(1) {
        let event: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(event["sessionId"], id.as_str(), "{line}");
    }
    daemon.stop().await;
}

//! The stepctl binary: help, JSON output, exit codes, watch, auto-start.

use std::{
    process::{Output, Stdio},
    time::Duration,
};

use serde_json::Value;
use stepd_e2e::{DEADLINE, Daemon, TempDir, stepctl_bin};
use tokio::io::{AsyncBufReadExt, BufReader};

fn stepctl(addr: &str, args: &[&str]) -> Output {
    std::process::Command::new(stepctl_bin())
        .args(args)
        .env("STEPD_ADDR", addr)
        .stdin(Stdio::null())
        .output()
        .expect("run stepctl")
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "stepctl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON object")
}

#[test]
fn help_lists_every_command_and_exit_code() {
    let out = std::process::Command::new(stepctl_bin())
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for command in [
        "ping", "status", "doctor", "version", "shutdown", "break", "watch",
    ] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} in help:\n{help}"
        );
    }
    for code in [
        "3   daemon unreachable",
        "11  SESSION_NOT_FOUND",
        "12  PAUSE_NOT_FOUND",
        "24  INVALID_ARGUMENT",
        "25  BREAKPOINT_NOT_FOUND",
    ] {
        assert!(help.contains(code), "{code} in help:\n{help}");
    }
    assert!(help.contains("--json") && help.contains("--addr"));
    let out = std::process::Command::new(stepctl_bin())
        .args(["break", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for sub in ["add", "list", "rm", "enable", "disable"] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(sub)),
            "{sub}"
        );
    }
}

#[tokio::test]
async fn breakpoints_round_trip_as_json() {
    let daemon = Daemon::start(&[]).await;
    let addr = daemon.addr.clone();
    let added = json(&stepctl(
        &addr,
        &[
            "--json",
            "break",
            "add",
            "/src/app.py:7",
            "--condition",
            "n > 2",
        ],
    ));
    let id = added["id"].as_str().unwrap().to_owned();
    assert_eq!(added["spec"]["source"]["path"], "/src/app.py");
    assert_eq!(added["spec"]["source"]["line"], 7);
    assert_eq!(added["spec"]["condition"], "n > 2");

    let logged = json(&stepctl(
        &addr,
        &[
            "--json",
            "break",
            "add",
            "--function",
            "main",
            "--log",
            "hit {n}",
        ],
    ));
    assert_eq!(logged["spec"]["action"], "BREAKPOINT_ACTION_LOG");
    assert_eq!(logged["spec"]["logMessage"], "hit {n}");

    let disabled = json(&stepctl(&addr, &["--json", "break", "disable", &id]));
    assert_eq!(disabled["spec"]["enabled"], false);
    let enabled = json(&stepctl(&addr, &["--json", "break", "enable", &id]));
    assert_eq!(enabled["spec"]["enabled"], true);

    let list = json(&stepctl(&addr, &["--json", "break", "list"]));
    assert_eq!(list["breakpoints"].as_array().unwrap().len(), 2);
    let table = stepctl(&addr, &["break", "list"]);
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table.contains("/src/app.py:7") && table.contains("if n > 2"),
        "{table}"
    );

    let removed = json(&stepctl(&addr, &["--json", "break", "rm", &id]));
    assert_eq!(removed["id"], id.as_str());
    daemon.stop().await;
}

#[tokio::test]
async fn each_error_has_its_exit_code() {
    let daemon = Daemon::start(&[]).await;
    let addr = daemon.addr.clone();
    let invalid = stepctl(&addr, &["break", "add", "/a.py:0"]);
    assert_eq!(invalid.status.code(), Some(24));
    let stderr = String::from_utf8_lossy(&invalid.stderr);
    assert!(stderr.contains("spec.source.line"), "{stderr}");

    let missing = stepctl(&addr, &["--json", "break", "rm", "bp-999"]);
    assert_eq!(missing.status.code(), Some(25));
    let err: Value = serde_json::from_slice(&missing.stderr).unwrap();
    assert_eq!(err["error"]["reason"], "BREAKPOINT_NOT_FOUND");

    let usage = stepctl(&addr, &["watch", "--channel", "nonsense"]);
    assert_eq!(usage.status.code(), Some(2));
    let not_a_location = stepctl(&addr, &["break", "add", "app.py"]);
    assert_eq!(not_a_location.status.code(), Some(2));
    daemon.stop().await;

    // Nothing listens there any more.
    let unreachable = stepctl(&addr, &["ping"]);
    assert_eq!(unreachable.status.code(), Some(3));
}

async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> String {
    tokio::time::timeout(DEADLINE, lines.next_line())
        .await
        .expect("a line before the deadline")
        .unwrap()
        .expect("a line")
}

#[tokio::test]
async fn watch_prints_json_lines_as_events_come() {
    let daemon = Daemon::start(&[]).await;
    let mut watch = tokio::process::Command::new(stepctl_bin())
        .args(["--json", "watch", "--count", "2"])
        .env("STEPD_ADDR", &daemon.addr)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
    assert!(first["snapshot"].is_object(), "{first}");
    json(&stepctl(
        &daemon.addr,
        &["--json", "break", "add", "/w.py:3"],
    ));
    let second: Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
    assert_eq!(
        second["breakpointUpdated"]["change"],
        "BREAKPOINT_CHANGE_ADDED"
    );
    assert!(second["seq"].as_str().unwrap().parse::<u64>().unwrap() > 0);
    let status = tokio::time::timeout(DEADLINE, watch.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "--count ends the watch");
    daemon.stop().await;
}

#[tokio::test]
async fn the_default_daemon_is_started_when_it_is_not_running() {
    let home = TempDir::new("home");
    let run = |args: &[&str]| {
        std::process::Command::new(stepctl_bin())
            .args(args)
            .env_remove("STEPD_ADDR")
            .env("HOME", home.path())
            .env("XDG_DATA_HOME", home.path())
            .env_remove("STEPD_DATA_DIR")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // Precondition: nothing answers on the default address yet.
    assert!(
        std::net::TcpStream::connect_timeout(
            &"127.0.0.1:7701".parse().unwrap(),
            Duration::from_millis(200)
        )
        .is_err(),
        "something already listens on 127.0.0.1:7701; stop it to run this test"
    );
    let out = run(&["--json", "ping"]);
    let pong = json(&out);
    assert_eq!(pong["protocolVersion"], "stepd.v1");
    assert!(String::from_utf8_lossy(&out.stderr).contains("started stepd"));
    // It is the daemon of this HOME: its data lives there.
    let status = json(&run(&["--json", "status"]));
    assert!(
        status["dataDir"]
            .as_str()
            .unwrap()
            .starts_with(&home.path().display().to_string())
    );
    let out = run(&["shutdown"]);
    assert!(out.status.success());
}

//! `stepctl watch` without `--json`: every event as text a person reads —
//! breakpoints, the session's start and end, stops with their location and
//! reason, output as text, pause resolutions. No event falls back to JSON.

use std::process::{Output, Stdio};

use stepd_e2e::{DEADLINE, Daemon, fixture, line_of, stepctl_bin};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};

fn stepctl(addr: &str, args: &[&str]) -> Output {
    let out = std::process::Command::new(stepctl_bin())
        .args(args)
        .env("STEPD_ADDR", addr)
        .output()
        .expect("run stepctl");
    assert!(
        out.status.success(),
        "stepctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Reads lines of the watch until one holds `text`; every line read is kept.
async fn until(
    lines: &mut Lines<BufReader<tokio::process::ChildStdout>>,
    seen: &mut Vec<String>,
    text: &str,
) -> String {
    tokio::time::timeout(DEADLINE, async {
        loop {
            let line = lines
                .next_line()
                .await
                .expect("read watch")
                .unwrap_or_else(|| panic!("watch ended before {text:?}:\n{}", seen.join("\n")));
            seen.push(line.clone());
            if line.contains(text) {
                return line;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{text:?} never came:\n{}", seen.join("\n")))
}

#[tokio::test]
async fn watch_prints_each_event_kind_as_text() {
    let daemon = Daemon::start(&[]).await;
    let addr = daemon.addr.clone();
    let path = fixture("python/loop.py");
    let file = path.to_str().unwrap();
    let step = line_of(&path, "step");
    let mut child = tokio::process::Command::new(stepctl_bin())
        .args(["watch"])
        .env("STEPD_ADDR", &addr)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn stepctl watch");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    until(&mut lines, &mut seen, "snapshot at seq").await;

    stepctl(&addr, &["break", "add", &format!("{file}:{step}")]);
    until(
        &mut lines,
        &mut seen,
        &format!("breakpoint added bp-1 at {file}:{step}"),
    )
    .await;
    let launched = stepctl(&addr, &["--json", "launch", file, "--adapter", "debugpy"]);
    let launched: serde_json::Value = serde_json::from_slice(&launched.stdout).unwrap();
    let session = launched["session"]["id"].as_str().unwrap().to_owned();

    until(
        &mut lines,
        &mut seen,
        &format!("[{session}] session {session} started under debugpy"),
    )
    .await;
    until(&mut lines, &mut seen, "stopped: breakpoint on thread").await;
    until(&mut lines, &mut seen, &format!("at {file}:{step} in step")).await;
    until(&mut lines, &mut seen, "total = 0").await;
    until(&mut lines, &mut seen, "breakpoint hit bp-1").await;
    assert!(
        seen.iter().any(|l| l.contains("breakpoint status bp-1")
            && l.ends_with(&format!("placed on line {step}"))),
        "{}",
        seen.join("\n")
    );

    stepctl(&addr, &["break", "rm", "bp-1"]);
    until(&mut lines, &mut seen, "breakpoint removed bp-1").await;
    stepctl(&addr, &["continue", &session]);
    until(&mut lines, &mut seen, "continued (all threads)").await;
    until(&mut lines, &mut seen, "stdout: i=0 total=0").await;
    until(&mut lines, &mut seen, "done total=20").await;
    until(
        &mut lines,
        &mut seen,
        &format!("session {session} ended: exited, exit code 0"),
    )
    .await;

    for line in &seen {
        assert!(
            !line.contains("\"seq\":") && !line.contains("\"time\":"),
            "an event printed as JSON: {line}\n{}",
            seen.join("\n")
        );
    }
    daemon.stop().await;
}

//! stepctl's session commands, driven through `stepctl --json` against a real
//! daemon with real adapters (debugpy, lldb-dap 19): launch, the stop, steps,
//! stack/scopes/vars, eval, set, pauses and input, exit codes, output.
//!
//! Stops are awaited on a background `stepctl --json watch` (never sleeps).

use std::{
    path::Path,
    process::{Output, Stdio},
};

use serde_json::Value;
use stepd_e2e::{DEADLINE, Daemon, fixture, line_of, stepctl_bin};
use tokio::{
    io::{AsyncBufReadExt, BufReader, Lines},
    process::{Child, ChildStdout},
};

/// Runs stepctl against `addr` from `dir` (relative paths resolve there).
fn stepctl_in(addr: &str, dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(stepctl_bin())
        .args(args)
        .current_dir(dir)
        .env("STEPD_ADDR", addr)
        .stdin(Stdio::null())
        .output()
        .expect("run stepctl")
}

fn stepctl(addr: &str, args: &[&str]) -> Output {
    stepctl_in(addr, &fixture(""), args)
}

/// The one JSON object a successful `stepctl --json …` printed.
fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "stepctl failed ({:?}): {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Runs `stepctl --json ARGS` and parses its object.
fn run(addr: &str, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    json(&stepctl(addr, &all))
}

/// Asserts a failure with this exit code and reason (JSON error on stderr).
fn fails(out: &Output, code: i32, reason: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout {} stderr {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let err: Value = serde_json::from_slice(&out.stderr).expect("stderr is a JSON error");
    assert_eq!(err["error"]["reason"], reason, "{err}");
    assert_eq!(err["error"]["exitCode"], code, "{err}");
}

fn line(state: &Value) -> u32 {
    state["topFrame"]["location"]["line"].as_u64().unwrap_or(0) as u32
}

fn local<'a>(pause: &'a Value, name: &str) -> &'a str {
    pause["locals"]
        .as_array()
        .and_then(|ls| ls.iter().find(|l| l["name"] == name))
        .and_then(|l| l["value"]["text"].as_str())
        .unwrap_or_else(|| panic!("no local {name} in {pause}"))
}

/// A background `stepctl --json watch` whose snapshot has arrived, so every
/// later event reaches it.
struct Watcher {
    _child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Watcher {
    async fn start(addr: &str) -> Self {
        let mut child = tokio::process::Command::new(stepctl_bin())
            .args([
                "--json",
                "watch",
                "--channel",
                "execution",
                "--channel",
                "lifecycle",
                "--count",
                "10000",
            ])
            .env("STEPD_ADDR", addr)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn stepctl watch");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut watcher = Self {
            _child: child,
            lines,
        };
        watcher
            .wait_for("the snapshot", |e| e["snapshot"].is_object())
            .await;
        watcher
    }

    async fn wait_for(&mut self, what: &str, mut matches: impl FnMut(&Value) -> bool) -> Value {
        let found = tokio::time::timeout(DEADLINE, async {
            loop {
                let line = self
                    .lines
                    .next_line()
                    .await
                    .expect("read watch output")
                    .unwrap_or_else(|| panic!("watch ended while waiting for {what}"));
                let event: Value = serde_json::from_str(&line).expect("a JSON line");
                if matches(&event) {
                    return event;
                }
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("no {what} before the deadline"))
    }

    /// The pause of the next `stopped` event of a session.
    async fn stopped(&mut self, session: &str) -> Value {
        let event = self
            .wait_for("a stopped event", |e| {
                e["sessionId"] == session && e["stopped"].is_object()
            })
            .await;
        event["stopped"]["pause"].clone()
    }

    /// The next `sessionEnded` payload of a session.
    async fn ended(&mut self, session: &str) -> Value {
        let event = self
            .wait_for("session_ended", |e| {
                e["sessionId"] == session && e["sessionEnded"].is_object()
            })
            .await;
        event["sessionEnded"].clone()
    }
}

#[test]
fn help_lists_the_session_commands_and_exit_codes() {
    let out = std::process::Command::new(stepctl_bin())
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for command in [
        "launch",
        "attach",
        "disconnect",
        "sessions",
        "continue",
        "step",
        "pause",
        "threads",
        "stack",
        "scopes",
        "vars",
        "set",
        "eval",
        "output",
        "pauses",
        "input",
        "break",
        "watch",
    ] {
        assert!(
            help.lines()
                .any(|l| l.split_whitespace().next() == Some(command)),
            "{command} in help:\n{help}"
        );
    }
    for code in ["14  NOT_STOPPED", "15  STALE_HANDLE", "34  ADAPTER_ERROR"] {
        assert!(help.contains(code), "{code} in help:\n{help}");
    }
    // Usage errors exit 2 before any daemon is needed.
    let usage = stepctl("127.0.0.1:1", &["step", "sideways", "s"]);
    assert_eq!(usage.status.code(), Some(2));
    let usage = stepctl("127.0.0.1:1", &["continue", "s", "--wait", "soon"]);
    assert_eq!(usage.status.code(), Some(2));
    let usage = stepctl("127.0.0.1:1", &["attach"]);
    assert_eq!(usage.status.code(), Some(2));
}

#[tokio::test]
async fn a_python_session_driven_through_stepctl() {
    let daemon = Daemon::start(&[]).await;
    let addr = daemon.addr.clone();
    let program = fixture("python/loop.py");
    let step_line = line_of(&program, "step");
    let python_dir = fixture("python");
    // Relative paths are made absolute, for breakpoints and the program.
    let bp = json(&stepctl_in(
        &addr,
        &python_dir,
        &["--json", "break", "add", &format!("loop.py:{step_line}")],
    ));
    let bp_id = bp["id"].as_str().unwrap().to_owned();

    let mut watch = Watcher::start(&addr).await;
    let launched = json(&stepctl_in(
        &addr,
        &python_dir,
        &[
            "--json",
            "launch",
            "loop.py",
            "--adapter",
            "debugpy",
            "--label",
            "suite=e2e",
            "--name",
            "loop",
        ],
    ));
    let session = launched["session"]["id"].as_str().unwrap().to_owned();
    let id = session.as_str();
    assert_eq!(launched["session"]["adapter"], "debugpy");
    assert_eq!(launched["session"]["program"], program.to_str().unwrap());
    assert_eq!(launched["session"]["labels"]["suite"], "e2e");
    let placed = &launched["breakpoints"][0];
    assert_eq!(placed["breakpointId"], bp_id.as_str());
    assert_eq!(placed["requestedLine"], step_line);
    assert_eq!(placed["status"]["verified"], true);
    assert_eq!(placed["status"]["actualLine"], step_line);

    let pause = watch.stopped(id).await;
    assert_eq!(pause["reason"], "PAUSE_REASON_BREAKPOINT");
    assert_eq!(pause["location"]["line"], step_line);
    assert_eq!(local(&pause, "i"), "0");
    let key = pause["key"].as_str().unwrap().to_owned();

    // pauses, threads, stack (thread from the latest pause), scopes, vars.
    let pauses = run(&addr, &["pauses", "--session", id]);
    assert_eq!(pauses["pauses"][0]["key"], key.as_str());
    let threads = run(&addr, &["threads", id]);
    let thread = threads["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["pauseKey"] == key.as_str())
        .expect("the paused thread");
    assert_eq!(thread["stopped"], true);
    let stack = run(&addr, &["stack", id]);
    assert_eq!(stack["frames"][0]["name"], "step");
    assert_eq!(stack["frames"][1]["name"], "main");
    let frame = stack["frames"][0]["id"].as_str().unwrap().to_owned();
    let top_only = run(&addr, &["stack", id, "--levels", "1"]);
    assert_eq!(top_only["frames"].as_array().unwrap().len(), 1);
    let scopes = run(&addr, &["scopes", id, &frame]);
    let locals_ref = scopes["scopes"][0]["variablesRef"]
        .as_str()
        .unwrap()
        .to_owned();
    let vars = run(&addr, &["vars", id, &locals_ref]);
    let items = vars["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "items")
        .expect("items among the locals")
        .clone();
    assert_eq!(items["value"], "[0, 1, 2]");
    let elements = run(
        &addr,
        &["vars", id, items["variablesRef"].as_str().unwrap()],
    );
    assert!(
        elements["variables"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "2" && v["value"] == "2"),
        "{elements}"
    );

    // eval in the frame, set a local, EVAL through the pause.
    let value = run(&addr, &["eval", id, "items[2] * 10", "--frame", &frame]);
    assert_eq!(value["value"], "20");
    let set = run(&addr, &["set", id, &locals_ref, "total", "100"]);
    assert_eq!(set["value"], "100");
    let answered = run(&addr, &["input", &key, "eval", "total + 1"]);
    assert_eq!(answered["command"], "COMMAND_KIND_EVAL");
    assert_eq!(answered["pause"]["key"], key.as_str());
    assert_eq!(answered["pause"]["debugValue"]["text"], "101");
    // A failing EVAL keeps the pause and exits with ADAPTER_ERROR.
    fails(
        &stepctl(&addr, &["--json", "input", &key, "eval", "no_such_name"]),
        34,
        "ADAPTER_ERROR",
    );
    // A command the pause does not offer; an unknown key.
    fails(
        &stepctl(&addr, &["--json", "input", &key, "skip"]),
        20,
        "INVALID_COMMAND",
    );
    fails(
        &stepctl(&addr, &["--json", "input", "p-nope", "next"]),
        12,
        "PAUSE_NOT_FOUND",
    );

    // Step over: the next line, with the wait as an explicit limit.
    let over = run(&addr, &["step", "over", id, "--wait", "20s"]);
    assert_eq!(over["state"], "SESSION_STATE_STOPPED");
    assert_eq!(over["stopReason"], "PAUSE_REASON_STEP");
    assert_eq!(over["waited"], true);
    assert_eq!(line(&over), line_of(&program, "step_return"));
    assert_eq!(local(&over["pause"], "total"), "100");
    // The frame handle is from the earlier stop now.
    fails(
        &stepctl(&addr, &["--json", "scopes", id, &frame]),
        15,
        "STALE_HANDLE",
    );
    // Step out: back in main at the call.
    let out = run(&addr, &["step", "out", id]);
    assert_eq!(out["topFrame"]["name"], "main");
    assert_eq!(line(&out), line_of(&program, "call"));
    // Continue: the breakpoint again, with the program's output meanwhile.
    let again = run(&addr, &["continue", id, "--wait", "0"]);
    assert_eq!(again["stopReason"], "PAUSE_REASON_BREAKPOINT");
    assert_eq!(again["hitBreakpointIds"][0], bp_id.as_str());
    assert_eq!(local(&again["pause"], "i"), "1");
    // (Its output is checked at the end: debugpy's output events may trail
    // the stop, so the StableState does not always hold them yet.)

    // Drop the breakpoint and answer the pause with CONTINUE: the program ends.
    run(&addr, &["break", "rm", &bp_id]);
    let key = again["pause"]["key"].as_str().unwrap();
    let resumed = run(&addr, &["input", key, "continue"]);
    assert_eq!(resumed["command"], "COMMAND_KIND_CONTINUE");
    let end = watch.ended(id).await;
    assert_eq!(end["reason"], "END_REASON_EXITED");
    assert_eq!(end["exitCode"], 0);

    let all = run(&addr, &["sessions", "--all"]);
    let listed = all["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .expect("the ended session with --all");
    assert_eq!(listed["state"], "SESSION_STATE_ENDED");
    assert_eq!(listed["endReason"], "END_REASON_EXITED");
    assert_eq!(listed["exitCode"], 0);
    let live = run(&addr, &["sessions"]);
    assert!(
        live["sessions"]
            .as_array()
            .is_none_or(|s| s.iter().all(|s| s["id"] != id)),
        "{live}"
    );
    let selected = run(&addr, &["sessions", "--all", "--labels", "suite=other"]);
    assert!(
        selected["sessions"].as_array().is_none_or(|s| s.is_empty()),
        "{selected}"
    );
    let table = stepctl(&addr, &["sessions", "--all"]);
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table.contains("ended (exited, exit code 0)") && table.contains("suite=e2e"),
        "{table}"
    );

    // The output stays readable, whole and from an offset.
    let output = run(&addr, &["output", id]);
    let text: String = output["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    assert!(
        text.contains("i=0 total=100") && text.contains("done total=120"),
        "the assignment took effect: {text}"
    );
    let tail = stepctl(&addr, &["output", id, "--after", "14"]);
    let tail = String::from_utf8(tail.stdout).unwrap();
    assert!(tail.starts_with("i=1 total=102"), "{tail:?}");
    daemon.stop().await;
}

#[tokio::test]
async fn a_c_program_under_lldb_dap_steps_in_and_out_and_exits_3() {
    let daemon = Daemon::start(&[]).await;
    let addr = daemon.addr.clone();
    let source = fixture("c/hello.c");
    let call = line_of(&source, "call");
    assert!(
        fixture("build/hello").is_file(),
        "tests/fixtures/build/hello is missing; run scripts/build-fixtures"
    );
    let bp = run(&addr, &["break", "add", &format!("c/hello.c:{call}")]);
    let bp_id = bp["id"].as_str().unwrap().to_owned();
    let mut watch = Watcher::start(&addr).await;
    let launched = run(
        &addr,
        &[
            "launch",
            "build/hello",
            "--adapter",
            "lldb",
            "--adapter-command",
            "lldb-dap-19",
        ],
    );
    let session = launched["session"]["id"].as_str().unwrap().to_owned();
    let id = session.as_str();
    assert_eq!(launched["session"]["adapter"], "lldb");
    assert_eq!(launched["breakpoints"][0]["status"]["verified"], true);
    assert_eq!(launched["breakpoints"][0]["status"]["actualLine"], call);

    let pause = watch.stopped(id).await;
    assert_eq!(pause["reason"], "PAUSE_REASON_BREAKPOINT");
    assert_eq!(pause["location"]["line"], call);
    assert_eq!(local(&pause, "i"), "0");

    let into = run(&addr, &["step", "in", id]);
    assert_eq!(into["topFrame"]["name"], "step");
    let first = line(&into);
    assert!(first > 0 && first < line_of(&source, "step"), "{into}");
    let over = run(&addr, &["step", "over", id]);
    assert_eq!(over["topFrame"]["name"], "step");
    assert_eq!(line(&over), first + 1);
    let value = run(&addr, &["eval", id, "i + 40"]);
    assert_eq!(value["value"], "40");
    let back = run(&addr, &["step", "out", id]);
    assert_eq!(back["topFrame"]["name"], "main");
    assert_eq!(line(&back), call);

    // Locals of main through stack → scopes → vars, then an element of the array.
    let stack = run(&addr, &["stack", id]);
    assert_eq!(stack["frames"][0]["name"], "main");
    let frame = stack["frames"][0]["id"].as_str().unwrap();
    let scopes = run(&addr, &["scopes", id, frame]);
    let locals = run(
        &addr,
        &[
            "vars",
            id,
            scopes["scopes"][0]["variablesRef"].as_str().unwrap(),
        ],
    );
    let numbers = locals["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "numbers")
        .expect("numbers among main's locals");
    let elements = run(
        &addr,
        &["vars", id, numbers["variablesRef"].as_str().unwrap()],
    );
    assert_eq!(elements["variables"][4]["value"], "50", "{elements}");

    // No breakpoint left: continue runs to the exit, whose code is kept.
    run(&addr, &["break", "rm", &bp_id]);
    let last = run(&addr, &["continue", id]);
    assert_eq!(last["state"], "SESSION_STATE_ENDED", "{last}");
    assert_eq!(last["endReason"], "END_REASON_EXITED");
    let end = watch.ended(id).await;
    assert_eq!(end["exitCode"], 3);
    let all = run(&addr, &["sessions", "--all"]);
    let listed = all["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap();
    assert_eq!(listed["exitCode"], 3);
    let text = stepctl(&addr, &["output", id]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("done total=20 numbers[4]=50"), "{text}");
    daemon.stop().await;
}

#[tokio::test]
async fn error_exit_codes_of_session_commands() {
    let daemon = Daemon::start(&[]).await;
    let addr = daemon.addr.clone();
    for args in [
        &["--json", "continue", "no-such-session"][..],
        &["--json", "step", "over", "no-such-session"],
        &["--json", "stack", "no-such-session"],
        &["--json", "output", "no-such-session"],
        &["--json", "disconnect", "no-such-session"],
    ] {
        fails(&stepctl(&addr, args), 11, "SESSION_NOT_FOUND");
    }
    // A running program: steps and stacks need a stopped thread.
    let mut watch = Watcher::start(&addr).await;
    let launched = run(&addr, &["launch", "python/busy.py", "--adapter", "debugpy"]);
    let id = launched["session"]["id"].as_str().unwrap().to_owned();
    assert_eq!(launched["session"]["state"], "SESSION_STATE_RUNNING");
    fails(
        &stepctl(&addr, &["--json", "step", "over", &id]),
        14,
        "NOT_STOPPED",
    );
    fails(
        &stepctl(&addr, &["--json", "stack", &id]),
        14,
        "NOT_STOPPED",
    );
    // Pause waits for the stop; continue --no-wait answers while it runs.
    let paused = run(&addr, &["pause", &id, "--wait", "20s"]);
    assert_eq!(paused["state"], "SESSION_STATE_STOPPED");
    assert_eq!(paused["stopReason"], "PAUSE_REASON_PAUSE_REQUEST");
    assert_ne!(paused["timedOut"], true);
    watch.stopped(&id).await;
    let running = run(&addr, &["continue", &id, "--no-wait"]);
    assert_eq!(running["state"], "SESSION_STATE_RUNNING");
    assert_eq!(running.get("waited"), None, "waited=false is omitted");
    let gone = run(&addr, &["disconnect", &id, "--terminate"]);
    assert_eq!(gone["state"], "SESSION_STATE_ENDED");
    assert_eq!(gone["endReason"], "END_REASON_TERMINATED");
    // Driving an ended session is refused with its own code.
    fails(
        &stepctl(&addr, &["--json", "continue", &id]),
        31,
        "SESSION_ENDED",
    );
    daemon.stop().await;
}

#[tokio::test]
async fn stop_on_entry_then_output_follow_until_the_end() {
    let daemon = Daemon::start(&[]).await;
    let addr = daemon.addr.clone();
    let launched = run(
        &addr,
        &[
            "launch",
            "python/hello.py",
            "--adapter",
            "debugpy",
            "--stop-on-entry",
        ],
    );
    let id = launched["session"]["id"].as_str().unwrap().to_owned();
    let entry = &launched["entry"];
    assert_eq!(entry["state"], "SESSION_STATE_STOPPED", "{launched}");
    assert_eq!(entry["stopReason"], "PAUSE_REASON_ENTRY");
    // The human rendering marks the current line of the excerpt.
    let human = stepctl(&addr, &["pauses", "--session", &id]);
    let human = String::from_utf8(human.stdout).unwrap();
    assert!(
        human.starts_with("KEY") && human.contains("entry"),
        "{human}"
    );

    // Follow the output as JSON lines while the program runs to its end.
    let mut follow = tokio::process::Command::new(stepctl_bin())
        .args(["--json", "output", &id, "--follow"])
        .env("STEPD_ADDR", &addr)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = follow.stdout.take().unwrap();
    let state = run(&addr, &["continue", &id]);
    assert_eq!(state["state"], "SESSION_STATE_ENDED", "{state}");
    assert_eq!(state["exitCode"], 3);
    let status = tokio::time::timeout(DEADLINE, follow.wait())
        .await
        .expect("--follow ends with the session")
        .unwrap();
    assert!(status.success());
    let mut lines = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut lines)
        .await
        .unwrap();
    let events: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let text: String = events
        .iter()
        .filter_map(|e| e["output"]["chunk"]["text"].as_str())
        .collect();
    assert_eq!(
        text.matches("hello from stepd fixture").count(),
        1,
        "each chunk once: {text:?}"
    );
    let last = events.last().expect("at least the end");
    assert_eq!(
        last["sessionEnded"]["reason"], "END_REASON_EXITED",
        "{last}"
    );
    assert_eq!(last["sessionEnded"]["exitCode"], 3);

    // Following an ended session prints what it printed, then stops.
    let again = stepctl(&addr, &["output", &id, "--follow"]);
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).contains("hello from stepd fixture"));
    daemon.stop().await;
}

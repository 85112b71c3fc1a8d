//! `stepctl debug` speaks gdb/pdb habits, at a real terminal (tmux): `p` in
//! the selected frame, `up`/`down`/`frame`, `list` with the current line
//! marked, `display`, `b FILE:LINE if COND`, `clear`, `finish`, `until`,
//! `info`, `help CMD`, Tab completion, colour; against debugpy and lldb.

use std::process::{Command, Stdio};

use stepd_e2e::{
    Daemon, TempDir, fixture, line_of, stepctl_bin,
    tmux::{Tmux, stepctl_command},
};

/// The lines of the screen after the last line that starts with `marker`.
fn after_last<'a>(screen: &'a str, marker: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = screen.lines().collect();
    let from = lines
        .iter()
        .rposition(|l| l.starts_with(marker))
        .unwrap_or_else(|| panic!("no line starts with {marker:?}:\n{screen}"));
    lines[from + 1..].to_vec()
}

#[tokio::test]
async fn debugpy_frames_list_display_conditions_finish_until_and_completion() {
    let daemon = Daemon::start(&[]).await;
    let path = fixture("python/loop.py");
    let file = path.to_str().unwrap();
    let step = line_of(&path, "step");
    let call = line_of(&path, "call");
    let after_call = line_of(&path, "after_call");
    let done = line_of(&path, "done");
    let dir = TempDir::new("dbgcmd");
    let tmux = Tmux::start(&stepctl_command(
        &daemon.addr,
        &dir.path().join("history"),
        &[
            "debug",
            "--launch",
            file,
            "--break",
            &format!("{file}:{step}"),
        ],
    ));
    tmux.wait_count(&format!("at {file}:{step} in step"), 1)
        .await;
    tmux.wait_count("(stepd) ", 1).await;

    // Colour at a terminal: the location is painted.
    let painted = tmux.screen_with_escapes();
    assert!(
        painted.contains(&format!("\x1b[36m{file}:{step} in step")),
        "{painted}"
    );

    // list: the code around the stop, the current line marked.
    tmux.type_line("list");
    let screen = tmux.wait_count("def step(i, total):", 2).await;
    assert!(
        screen
            .lines()
            .filter(|l| l.starts_with(&format!("-> {step} |")))
            .count()
            >= 2,
        "{screen}"
    );

    // p in the stopped frame; info locals.
    tmux.type_line("p items");
    tmux.wait_line("= [0, 1, 2]", 1).await;
    tmux.type_line("info locals");
    tmux.wait_line("items = [0, 1, 2]", 1).await;

    // bt marks frame 0; up selects main, and p, info locals, list follow it.
    tmux.type_line("bt");
    tmux.wait_count(&format!("> #0 {file}:{step} in step"), 1)
        .await;
    tmux.type_line("up");
    tmux.wait_count(&format!("> #1 {file}:{call} in main"), 1)
        .await;
    tmux.type_line("p items");
    tmux.wait_count("name 'items' is not defined", 1).await;
    tmux.type_line("p total + 100");
    tmux.wait_line("= 100", 1).await;
    tmux.type_line("list");
    tmux.wait_count("def main():", 1).await;
    let screen = tmux.screen();
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with(&format!("-> {call} |"))),
        "{screen}"
    );
    tmux.type_line("frame 9");
    tmux.wait_count("no frame #9", 1).await;
    tmux.type_line("frame 0");
    tmux.wait_count(&format!("> #0 {file}:{step} in step"), 2)
        .await;
    tmux.type_line("p items");
    tmux.wait_line("= [0, 1, 2]", 2).await;

    // display: now, and at every stop.
    tmux.type_line("display i");
    tmux.wait_line("1: i = 0", 1).await;

    // finish: back in the caller.
    tmux.type_line("finish");
    tmux.wait_count(&format!("at {file}:{call} in main"), 1)
        .await;
    tmux.wait_line("1: i = 0", 2).await;

    // c: the next call stops at the breakpoint; the display follows.
    tmux.type_line("c");
    tmux.wait_line("1: i = 1", 1).await;

    // clear removes the breakpoint on this line; b FILE:LINE if COND (FILE
    // found beside the stopped file) stops only when the condition holds.
    tmux.type_line("clear");
    tmux.wait_count("deleted bp-", 1).await;
    tmux.type_line(&format!("b loop.py:{after_call} if i == 3"));
    tmux.wait_count(&format!("at {file}:{after_call} if i == 3"), 1)
        .await;
    tmux.type_line("info breakpoints");
    tmux.wait_count("if i == 3", 2).await;
    tmux.type_line("c");
    tmux.wait_count(&format!("at {file}:{after_call} in main"), 1)
        .await;
    let screen = tmux.wait_line("1: i = 3", 1).await;
    assert!(
        !screen.contains("1: i = 2"),
        "stopped before i == 3: {screen}"
    );
    let stops = screen.matches("stopped: breakpoint on thread").count();
    assert_eq!(stops, 3, "{screen}");

    // until: out of the loop to the next line below.
    tmux.type_line("until");
    tmux.wait_count(&format!("at {file}:{done} in main"), 1)
        .await;

    // Tab completes commands, their words and the locals.
    tmux.type_text("inf");
    tmux.keys(&["Tab"]);
    tmux.type_text("lo");
    tmux.keys(&["Tab"]);
    tmux.keys(&["Enter"]);
    tmux.wait_line("total = 20", 1).await;
    tmux.type_text("p tot");
    tmux.keys(&["Tab"]);
    tmux.keys(&["Enter"]);
    tmux.wait_line("= 20", 1).await;
    let screen = tmux.screen();
    assert!(screen.contains("(stepd) info locals"), "{screen}");
    assert!(screen.contains("(stepd) p total"), "{screen}");

    // Tab completes file paths after list (from the working directory).
    tmux.type_text("list fixtures/python/loo");
    tmux.keys(&["Tab"]);
    tmux.type_text(":1");
    tmux.keys(&["Enter"]);
    tmux.wait_count("1 | \"\"\"A function called in a loop", 1)
        .await;

    // An unknown command says so; help CMD tells about one.
    tmux.type_line("jmp 3");
    tmux.wait_count("unknown command \"jmp\" (? lists the commands)", 1)
        .await;
    tmux.type_line("help up");
    tmux.wait_count("select the caller's frame", 1).await;
    tmux.type_line("pauses");
    tmux.wait_count("* 1 p-", 1).await;

    tmux.type_line("c");
    let screen = tmux.wait_count("[stepctl exit 0]", 1).await;
    assert!(screen.contains("ended: exited, exit code 0"), "{screen}");
    assert!(
        !screen.contains(" answered by "),
        "its own answers go without saying: {screen}"
    );
    let tail = after_last(&screen, "(stepd) c");
    assert!(tail.iter().any(|l| l.contains("done total=20")), "{screen}");
    daemon.stop().await;
}

#[tokio::test]
async fn lldb_frames_change_what_p_evaluates_and_finish_returns_to_main() {
    let daemon = Daemon::start(&[]).await;
    let source = fixture("c/hello.c");
    let program = fixture("build/hello");
    assert!(
        program.is_file(),
        "tests/fixtures/build/hello is missing; run scripts/build-fixtures"
    );
    let step = line_of(&source, "step");
    let call = line_of(&source, "call");
    let dir = TempDir::new("dbgcmd-lldb");
    let command = stepctl_command(
        &daemon.addr,
        &dir.path().join("history"),
        &[
            "debug",
            "--launch",
            program.to_str().unwrap(),
            "--adapter",
            "lldb",
            "--adapter-command",
            "lldb-dap-19",
            "--break",
            &format!("{}:{step}", source.display()),
        ],
    );
    let tmux = Tmux::start(&format!("env NO_COLOR=1 {command}"));
    tmux.wait_count(&format!("{}:{step} in step", source.display()), 1)
        .await;
    tmux.wait_count("(stepd) ", 1).await;

    tmux.type_line("p values[1]");
    tmux.wait_line("= 1", 1).await;
    tmux.type_line("up");
    tmux.wait_count(&format!("> #1 {}:{call} in main", source.display()), 1)
        .await;
    tmux.type_line("p numbers[4]");
    tmux.wait_line("= 50", 1).await;
    tmux.type_line("info locals");
    tmux.wait_line("total = 0", 1).await;
    tmux.type_line("down");
    tmux.wait_count(&format!("> #0 {}:{step} in step", source.display()), 1)
        .await;
    tmux.type_line("p doubled + 7");
    tmux.wait_line("= 7", 1).await;

    tmux.type_line("list");
    tmux.wait_count("static int step(int i, int total) {", 1)
        .await;
    let screen = tmux.screen();
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with(&format!("-> {step} |"))),
        "{screen}"
    );

    tmux.type_line("display i * 10");
    tmux.wait_line("1: i * 10 = 0", 1).await;
    tmux.type_line("finish");
    tmux.wait_count(&format!("{}:{call} in main", source.display()), 2)
        .await;
    tmux.wait_line("1: i * 10 = 0", 2).await;
    tmux.type_line("c");
    tmux.wait_line("1: i * 10 = 10", 1).await;

    tmux.type_line("frobnicate");
    tmux.wait_count("unknown command \"frobnicate\"", 1).await;

    // NO_COLOR: no escapes even at a terminal.
    let painted = tmux.screen_with_escapes();
    assert!(!painted.contains("\x1b[36m"), "{painted}");

    tmux.type_line("q");
    let screen = tmux.wait_count("[stepctl exit 0]", 1).await;
    assert!(screen.contains("ended:"), "{screen}");
    daemon.stop().await;
}

#[tokio::test]
async fn program_output_is_passed_on_as_it_arrives_not_split_at_chunks() {
    let daemon = Daemon::start(&[]).await;
    let path = fixture("python/partial.py");
    let addr = daemon.addr.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(stepctl_bin())
            .args(["debug", "--launch", path.to_str().unwrap()])
            .env("STEPD_ADDR", &addr)
            .env("STEPCTL_HISTORY", "")
            .stdin(Stdio::null())
            .output()
    })
    .await
    .unwrap()
    .expect("run stepctl debug");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.lines().any(|l| l == "working... done"), "{stdout:?}");
    assert!(
        !stdout.contains('\x1b'),
        "no colour off a terminal: {stdout:?}"
    );
    daemon.stop().await;
}

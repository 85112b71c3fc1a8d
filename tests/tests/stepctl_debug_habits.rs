//! `stepctl debug` speaks more pdb, dlv and gdb: `w`, `a`, `whatis`, `pp`,
//! `ll`, assignments and `!stmt` that stay stopped, `retval`, `tbreak`,
//! `condition`, `ignore`, `enable`/`disable`/`delete N`, `jump` and `watch`
//! saying why not, `goroutines`/`thread N`, `restart`, Enter repeating the
//! last command, and breakpoints that apply to the loop's own session.
//! Scripted through a pipe, Enter and `restart` at a terminal (tmux).

use std::process::Command;

use stepd_e2e::{
    Daemon, TempDir, fixture, line_of,
    piped::Piped,
    stepctl_bin,
    tmux::{Tmux, stepctl_command},
};

/// Runs `stepctl debug ARGS` with `input` on a pipe; its stdout once it ended.
async fn debug_through_a_pipe(daemon: &Daemon, args: &[&str], input: String) -> String {
    let (status, stdout) = Piped::start(daemon, args).finish(&input).await;
    assert!(status.success(), "{stdout}");
    stdout
}

/// The lines between the echo of marker `from` (`p '#from'` prints
/// `= '#from'`; in Go, `p "#from"`) and the next marker.
fn section<'a>(stdout: &'a str, from: &str) -> Vec<&'a str> {
    let starts = [format!("= '{from}'"), format!("= \"{from}\"")];
    stdout
        .lines()
        .skip_while(|l| !starts.iter().any(|s| s == l))
        .skip(1)
        .take_while(|l| !l.starts_with("= '#") && !l.starts_with("= \"#"))
        .collect()
}

/// The first `= VALUE` line of a section (the program's output may come
/// late, among the answers).
fn first_value<'a>(lines: &[&'a str]) -> &'a str {
    lines
        .iter()
        .find(|l| l.starts_with("= "))
        .copied()
        .unwrap_or_default()
}

#[tokio::test]
async fn debugpy_values_breakpoints_by_number_and_session_scope_through_a_pipe() {
    let daemon = Daemon::start(&[]).await;
    let path = fixture("python/loop.py");
    let file = path.to_str().unwrap();
    let step = line_of(&path, "step");
    let step_return = line_of(&path, "step_return");
    let after_call = line_of(&path, "after_call");
    let done = line_of(&path, "done");
    // Back to the start of the stopped line: the line has not run yet, so
    // the program is where it was, stopped again by the jump.
    let jump_here = format!("j {step}");
    let script = [
        // Stop 1: step(0, 0) at the breakpoint.
        "p '#w'",
        "w",
        "u",
        "d",
        "p '#a'",
        "a",
        "p '#whatis'",
        "whatis info",
        "p '#pp'",
        "pp info",
        "p '#ll'",
        "ll",
        "p '#assign'",
        "total = 42",
        "info locals",
        "!items.append(99)",
        "p items",
        "n = 7",
        "p n",
        "p '#jump'",
        &jump_here,
        "p '#finish'",
        "finish",
        // Stop 2: back in main, after step returned.
        "retval",
        "condition 1 i == 2",
        "c",
        // Stop 3: step(2, …), the condition passed step(1, …) by.
        "p '#stop3'",
        "p i",
        "condition 1",
        "disable 1",
        &format!("tbreak loop.py:{after_call} if i == 3"),
        "c",
        // Stop 4: the tbreak, with bp-1 disabled on the way.
        "p '#stop4'",
        "p i",
        "enable 1",
        "ignore 1 1",
        &format!("b loop.py:{done}"),
        "delete 3",
        "b --global nosuchfunction",
        "info breakpoints",
        "p '#end'",
        // debugpy has no data breakpoints: the watchpoint is not placed.
        "watch total",
        // bp-1 is hit a third time at i == 4, which `ignore` passes; bp-3
        // was deleted: the program runs to its end.
        "c",
    ]
    .join("\n")
        + "\n";
    let stdout = debug_through_a_pipe(
        &daemon,
        &["--launch", file, "--break", &format!("{file}:{step}")],
        script,
    )
    .await;

    let w = section(&stdout, "#w");
    assert!(
        w.iter()
            .any(|l| *l == format!("> #0 {file}:{step} in step")),
        "{stdout}"
    );
    let call = line_of(&path, "call");
    let up = w
        .iter()
        .position(|l| *l == format!("> #1 {file}:{call} in main"))
        .expect("u selects main");
    assert!(
        w[up..].contains(&format!("> #0 {file}:{step} in step").as_str()),
        "d selects step again: {stdout}"
    );
    assert_eq!(section(&stdout, "#a"), ["i = 0", "total = 0"], "{stdout}");
    assert_eq!(section(&stdout, "#whatis"), ["type = dict"], "{stdout}");
    assert!(
        section(&stdout, "#pp").join("\n").contains("'double': 0"),
        "{stdout}"
    );
    let ll = section(&stdout, "#ll");
    assert!(ll[0].ends_with("| def step(i, total):"), "{stdout}");
    assert!(
        ll.last()
            .unwrap()
            .starts_with(&format!("   {step_return} |")),
        "{stdout}"
    );
    assert!(ll.iter().any(|l| l.starts_with(&format!("-> {step} |"))));

    // Assignments and statements leave the program where it was.
    let assign = section(&stdout, "#assign");
    assert_eq!(assign[0], "total = 42", "{stdout}");
    assert!(
        assign.contains(&"total = 42") && assign.len() > 2,
        "{stdout}"
    );
    assert!(assign[1..].contains(&"total = 42"), "info locals: {stdout}");
    assert!(assign.contains(&"= [0, 1, 2, 99]"), "{stdout}");
    assert!(assign.contains(&"= 7"), "n = 7 assigns: {stdout}");
    assert!(
        !assign.iter().any(|l| l.starts_with("stopped:")),
        "{stdout}"
    );

    // jump moves the thread (debugpy has DAP goto) and stops it again.
    let jump = section(&stdout, "#jump").join("\n");
    assert!(jump.contains("stopped: goto"), "{stdout}");
    assert!(
        jump.contains(&format!("at {file}:{step} in step")),
        "{stdout}"
    );

    // finish, then retval: what step returned (42 + 0 from the assignment).
    let finish = section(&stdout, "#finish").join("\n");
    assert!(finish.contains("step returned 42"), "{stdout}");
    assert!(
        finish.contains("breakpoint bp-1 stops only if i == 2"),
        "{stdout}"
    );
    assert_eq!(first_value(&section(&stdout, "#stop3")), "= 2", "{stdout}");

    // The tbreak stopped once and was deleted; bp-1, disabled, did not stop
    // step(3, …) on the way.
    let stop3 = section(&stdout, "#stop3").join("\n");
    assert!(stop3.contains("breakpoint bp-1 is now unconditional"));
    assert!(stop3.contains("breakpoint bp-1 disabled"));
    assert!(stop3.contains(&format!("at {file}:{after_call} in main")));
    assert!(
        stop3.contains("deleted temporary breakpoint bp-2"),
        "{stdout}"
    );
    let stop4 = section(&stdout, "#stop4");
    assert_eq!(first_value(&stop4), "= 3", "{stdout}");
    let stop4 = stop4.join("\n");
    assert!(stop4.contains("breakpoint bp-1 enabled"), "{stdout}");
    assert!(
        stop4.contains("will ignore the next 1 hits of breakpoint bp-1"),
        "{stdout}"
    );
    assert!(
        stop4.contains(&format!("breakpoint bp-3 at {file}:{done} (this session)")),
        "{stdout}"
    );
    assert!(stop4.contains("deleted bp-3"), "{stdout}");
    assert!(
        stop4.contains("breakpoint bp-4 at function nosuchfunction (every session)"),
        "{stdout}"
    );
    // info breakpoints: bp-1 selects this session's label; bp-4 has no selector.
    assert!(
        stop4
            .lines()
            .any(|l| l.starts_with("bp-1") && l.contains("labels stepctl-debug=")),
        "{stdout}"
    );
    assert!(!stop4.lines().any(|l| l.starts_with("bp-2")), "{stdout}");

    let end = section(&stdout, "#end").join("\n");
    assert!(end.contains("done total="), "{stdout}");
    assert!(end.contains("watchpoint bp-5 on total"), "{stdout}");
    assert!(
        end.contains("not placed: debugpy has no data breakpoints"),
        "{stdout}"
    );
    assert!(!end.contains("stopped:"), "{stdout}");
    assert!(end.contains("ended: exited, exit code 0"), "{stdout}");

    // Another loop's session: the breakpoints typed above for the Python
    // session do not apply to it; only the --global one does.
    let go = fixture("build/go-hello");
    assert!(go.is_file(), "run scripts/build-fixtures");
    let stdout =
        debug_through_a_pipe(&daemon, &["--launch", go.to_str().unwrap()], "c\n".into()).await;
    assert!(stdout.contains("bp-4"), "{stdout}");
    assert!(!stdout.contains("bp-1"), "{stdout}");
    assert!(!stdout.contains("loop.py"), "{stdout}");
    daemon.stop().await;
}

#[tokio::test]
async fn dlv_goroutines_thread_args_and_assignment_through_a_pipe() {
    let daemon = Daemon::start(&[]).await;
    let source = fixture("go/hello/main.go");
    let file = source.to_str().unwrap();
    let step = line_of(&source, "step");
    let binary = fixture("build/go-hello");
    assert!(binary.is_file(), "run scripts/build-fixtures");
    let mut repl = Piped::start(
        &daemon,
        &[
            "--launch",
            binary.to_str().unwrap(),
            "--break",
            &format!("{file}:{step}"),
        ],
    );
    repl.write("p \"#goroutines\"\ngoroutines\n");
    // A goroutine other than the stopped one: its number varies.
    let other = loop {
        let line = repl.wait_for(&["  thread "]).await;
        if line.starts_with("  thread ") {
            break line;
        }
    };
    let other: i64 = other.split_whitespace().nth(1).unwrap().parse().unwrap();
    let script = [
        "p \"#thread\"",
        &format!("thread {other}"),
        "thread 999",
        "thread 1",
        "p \"#a\"",
        "a",
        "whatis p",
        "doubled = 40",
        "p doubled",
        "j 20",
        "watch total",
        "retval",
        "p \"#end\"",
        "q",
    ];
    let (status, stdout) = repl.finish(&(script.join("\n") + "\n")).await;
    assert!(status.success(), "{stdout}");

    // Goroutines as threads; * marks the one stopped at the breakpoint.
    let goroutines = section(&stdout, "#goroutines");
    assert!(
        goroutines
            .iter()
            .any(|l| l.starts_with("* thread 1 ") && l.contains("main.step")),
        "{stdout}"
    );
    assert!(goroutines.len() > 1, "{stdout}");
    assert!(
        goroutines
            .iter()
            .any(|l| l.starts_with(&format!("  thread {other} "))
                && l.contains(&format!("[Go {other}]"))
                && l.ends_with("(stopped)")),
        "{stdout}"
    );
    // dlv stops every goroutine (allThreadsStopped): one without a pause of
    // its own is stopped too, and shows its stack.
    let thread = section(&stdout, "#thread").join("\n");
    assert!(
        thread.contains(&format!("thread {other} ([Go {other}]"))
            && thread.contains("is stopped without a pause of its own"),
        "{stdout}"
    );
    assert!(
        thread.contains("no thread 999 (threads lists them)"),
        "{stdout}"
    );
    assert!(thread.contains("commands now go to pause p-"), "{stdout}");

    let a = section(&stdout, "#a");
    assert_eq!(
        a[..3],
        ["i = 0", "total = 0", "type = main.Point"],
        "{stdout}"
    );
    assert_eq!(a[3..5], ["doubled = 40", "= 40"], "{stdout}");
    let a = a.join("\n");
    assert!(
        a.contains("jump: dlv cannot jump (it has no DAP goto); until 20 runs to that line"),
        "{stdout}"
    );
    assert!(a.contains("watchpoint bp-"), "{stdout}");
    assert!(
        a.contains("no return value here: debugpy reports one right after finish"),
        "{stdout}"
    );
    // dlv's quit ends the session as QUIT or, when the adapter goes before
    // it reports the exit, as TERMINATED.
    assert!(
        section(&stdout, "#end").join("\n").contains(" ended: "),
        "{stdout}"
    );
    daemon.stop().await;
}

#[tokio::test]
async fn enter_repeats_the_last_command_and_restart_relaunches_at_a_terminal() {
    let daemon = Daemon::start(&[]).await;
    let path = fixture("python/loop.py");
    let file = path.to_str().unwrap();
    let step = line_of(&path, "step");
    let step_return = line_of(&path, "step_return");
    let after_call = line_of(&path, "after_call");
    let dir = TempDir::new("dbg-habits");
    let tmux = Tmux::start(&stepctl_command(
        &daemon.addr,
        &dir.path().join("history"),
        &["debug", "--launch", file, "--stop-on-entry"],
    ));
    tmux.wait_count("stopped: entry", 1).await;
    tmux.wait_count("(stepd) ", 1).await;
    // A breakpoint typed here applies to this session (and the next).
    tmux.type_line(&format!("b loop.py:{step}"));
    tmux.wait_count(&format!("at {file}:{step} (this session)"), 1)
        .await;
    tmux.type_line("c");
    tmux.wait_count(&format!("at {file}:{step} in step"), 1)
        .await;

    // Enter repeats p, then n (two steps: to the return, on in main).
    tmux.type_line("p total + 5");
    tmux.wait_line("= 5", 1).await;
    tmux.keys(&["Enter"]);
    tmux.wait_line("= 5", 2).await;
    tmux.type_line("n");
    tmux.wait_count(&format!("at {file}:{step_return} in step"), 1)
        .await;
    tmux.keys(&["Enter"]);
    tmux.wait_count(&format!("at {file}:{after_call} in main"), 1)
        .await;
    let screen = tmux.screen();
    assert_eq!(
        screen.matches("stopped: step on thread").count(),
        2,
        "{screen}"
    );

    // restart: the program again, from its entry, with this session's
    // breakpoint in the new session.
    tmux.type_line("restart");
    tmux.wait_count("relaunched under debugpy", 1).await;
    tmux.wait_count("stopped: entry", 2).await;
    tmux.type_line("c");
    tmux.wait_count(&format!("at {file}:{step} in step"), 2)
        .await;
    tmux.type_line("q");
    let screen = tmux.wait_count("[stepctl exit 0]", 1).await;
    assert!(screen.contains("ended: quit"), "{screen}");
    daemon.stop().await;
}

#[tokio::test]
async fn a_session_launched_elsewhere_cannot_restart_and_its_breakpoints_are_global() {
    let daemon = Daemon::start(&[]).await;
    let path = fixture("python/loop.py");
    let file = path.to_str().unwrap();
    let step = line_of(&path, "step");
    let addr = daemon.addr.clone();
    let file_owned = file.to_owned();
    let launched = tokio::task::spawn_blocking(move || {
        Command::new(stepctl_bin())
            .args(["launch", &file_owned, "--stop-on-entry"])
            .env("STEPD_ADDR", &addr)
            .output()
    })
    .await
    .unwrap()
    .expect("run stepctl launch");
    assert!(
        launched.status.success(),
        "{}",
        String::from_utf8_lossy(&launched.stderr)
    );
    let stdout =
        debug_through_a_pipe(&daemon, &[], format!("restart\nb loop.py:{step}\nc\nq\n")).await;
    assert!(
        stdout.contains("restart: this session was not launched by this stepctl debug"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "breakpoint bp-1 at {file}:{step} (every session: this one was not launched by stepctl debug)"
        )),
        "{stdout}"
    );
    // The breakpoint applies here all the same.
    assert!(
        stdout.contains(&format!("at {file}:{step} in step")),
        "{stdout}"
    );
    daemon.stop().await;
}

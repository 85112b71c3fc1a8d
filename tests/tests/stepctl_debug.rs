//! `stepctl debug`, the interactive loop, driven through a real terminal:
//! tmux runs it in a detached session of a fixed size, `send-keys` types the
//! commands and `capture-pane` shows what a person would see. Waits poll the
//! screen until the expected text appears, within the deadline.
//!
//! Needs tmux (`scripts/tools` installs it).

use std::process::{Command, Stdio};

use stepd_e2e::{
    Daemon, TempDir, dap, fixture, line_of, stepctl_bin,
    tmux::{Tmux, stepctl_command},
    watched,
};
use stepd_proto::v1::{NextCommand, debug_command};

#[tokio::test]
async fn debug_loop_shows_pauses_and_answers_them_at_a_terminal() {
    let daemon = Daemon::start(&[]).await;
    let path = fixture("python/loop.py");
    let file = path.to_str().unwrap();
    let (step, step_return) = (line_of(&path, "step"), line_of(&path, "step_return"));
    let dir = TempDir::new("dbg");
    let history = dir.path().join("history");
    let tmux = Tmux::start(&stepctl_command(
        &daemon.addr,
        &history,
        &[
            "debug",
            "--launch",
            file,
            "--break",
            &format!("{file}:{step}"),
        ],
    ));

    // The first pause: where, the code with the current line marked, locals.
    let at_step = format!("at {file}:{step} in step");
    tmux.wait_count(&at_step, 1).await;
    let screen = tmux.wait_count("pause p-", 1).await;
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with(&format!("-> {step} |")) && l.contains("LINE: step")),
        "{screen}"
    );
    assert!(screen.contains("stopped: breakpoint on thread"), "{screen}");
    assert!(
        screen.lines().any(|l| l.trim_end() == "  total = 0"),
        "{screen}"
    );

    // n: the next line of the same function.
    tmux.type_line("n");
    tmux.wait_count(&format!("at {file}:{step_return} in step"), 1)
        .await;
    tmux.wait_count("stopped: step on thread", 1).await;

    // e EXPR: the result; !! repeats it.
    tmux.type_line("e total + 1");
    tmux.wait_line("= 1", 1).await;
    tmux.type_line("!!");
    tmux.wait_line("!! e total + 1", 1).await;
    tmux.wait_line("= 1", 2).await;

    // e alone: the pause asks for the expression; the next line answers it.
    tmux.type_line("e");
    tmux.wait_count("Expression to evaluate", 1).await;
    tmux.wait_count("expression> ", 1).await;
    tmux.type_line("items[1] + 100");
    tmux.wait_line("= 101", 1).await;

    // t N: a line per step, then the pause where it stopped.
    tmux.type_line("t 3");
    tmux.wait_count("trace 3: ", 1).await;
    // The trace pauses where its third step landed; `c` goes on to the
    // breakpoint in the next call.
    tmux.wait_count("stopped: step on thread", 2).await;
    tmux.type_line("c");
    let screen = tmux.wait_count("stopped: breakpoint on thread", 2).await;
    assert!(screen.contains("trace 1: "), "{screen}");
    assert!(
        screen.contains("i=0 total=0"),
        "the program's output: {screen}"
    );

    // bt: the stack, then the same pause.
    tmux.type_line("bt");
    let screen = tmux.wait_count("stack of pause", 1).await;
    assert!(
        screen.contains(&format!("#0 {file}:{step} in step")),
        "{screen}"
    );
    tmux.wait_count(" in main", 1).await;

    // A command this pause does not offer: an error, and the loop goes on.
    tmux.type_line("skip");
    tmux.wait_count("error INVALID_COMMAND", 1).await;

    // ?: the aliases and what this pause offers.
    tmux.type_line("?");
    let screen = tmux.wait_count("offered at pause", 1).await;
    assert!(screen.contains("inj NAME = EXPR"), "{screen}");
    let offered = screen
        .lines()
        .find(|l| l.starts_with("offered at pause"))
        .unwrap();
    assert!(
        offered.contains(" n ") && offered.contains(" bt "),
        "{offered}"
    );

    // inj: assign and continue; the next stop shows the injected value.
    tmux.type_line("inj total = 1000");
    tmux.wait_count("stopped: breakpoint on thread", 3).await;
    tmux.wait_line("  total = 1002", 1).await;

    // ca: breakpoints off, the program runs to its end; stepctl says how.
    tmux.type_line("ca");
    let screen = tmux.wait_count("[stepctl exit 0]", 1).await;
    assert!(screen.contains("CONTINUE_ALL"), "{screen}");
    assert!(screen.contains("ended: exited, exit code 0"), "{screen}");
    assert!(screen.contains("done total="), "{screen}");

    let remembered = std::fs::read_to_string(&history).expect("the history file");
    assert!(remembered.contains("e total + 1"), "{remembered}");
    daemon.stop().await;
}

#[tokio::test]
async fn another_client_answers_first_and_the_loop_moves_on() {
    let (daemon, mut sub) = watched().await;
    let path = fixture("python/loop.py");
    let file = path.to_str().unwrap();
    let (step, step_return) = (line_of(&path, "step"), line_of(&path, "step_return"));
    dap::add_breakpoint(&daemon, stepd_e2e::source_spec(file, step)).await;
    let session = dap::launch(&daemon, "debugpy", file, &[])
        .await
        .session
        .unwrap();
    let pause = dap::next_pause(&mut sub, &session.id).await;

    let dir = TempDir::new("dbg2");
    let tmux = Tmux::start(&stepctl_command(
        &daemon.addr,
        &dir.path().join("history"),
        &["debug", &session.id],
    ));
    // Attached: the pending pause is shown from the snapshot.
    tmux.wait_count(&format!("pause {} (commands:", pause.key), 1)
        .await;

    // The harness answers first.
    dap::answer(
        &daemon,
        &pause.key,
        debug_command::Command::Next(NextCommand {}),
    )
    .await
    .expect("the harness answers");
    // `by` is who the daemon authenticated (the harness runs as the
    // daemon's own user), and beside it the name the client chose.
    // SAFETY: getuid(2) cannot fail and touches no memory.
    let me = stepd_api::auth::same_user_name(unsafe { libc::getuid() });
    tmux.wait_count(
        &format!("pause {} answered by {me} (test): next", pause.key),
        1,
    )
    .await;
    tmux.wait_count(&format!("at {file}:{step_return} in step"), 1)
        .await;

    // stepctl's own answers go to the new pause.
    tmux.type_line("c");
    tmux.wait_line("  i = 1", 1).await;
    tmux.type_line("pauses");
    tmux.wait_count("* 1 p-", 1).await;
    tmux.type_line("q");
    let screen = tmux.wait_count("[stepctl exit 0]", 1).await;
    assert!(
        screen.contains(&format!("session {} ended:", session.id)),
        "{screen}"
    );
    daemon.stop().await;
}

#[tokio::test]
async fn debug_reads_commands_from_a_pipe_one_outcome_at_a_time() {
    use std::io::Write;
    let daemon = Daemon::start(&[]).await;
    let path = fixture("python/loop.py");
    let file = path.to_str().unwrap();
    let (step, done) = (line_of(&path, "step"), line_of(&path, "done"));
    let mut child = Command::new(stepctl_bin())
        .args([
            "debug",
            "--launch",
            file,
            "--break",
            &format!("{file}:{step}"),
        ])
        .env("STEPD_ADDR", &daemon.addr)
        .env("STEPCTL_HISTORY", "")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run stepctl debug");
    // Every line is written at once; each waits for the previous outcome.
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("n\ne total * 10\nc\nh! {done}\nc\n").as_bytes())
        .unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("stopped: step on thread"), "{stdout}");
    assert!(stdout.lines().any(|l| l == "= 0"), "{stdout}");
    assert!(stdout.contains("  i = 1"), "{stdout}");
    assert!(
        stdout.contains(&format!("at {file}:{done} in main")),
        "{stdout}"
    );
    assert!(stdout.contains("ended: exited, exit code 0"), "{stdout}");
    assert!(!stdout.contains("error"), "{stdout}");
    daemon.stop().await;
}

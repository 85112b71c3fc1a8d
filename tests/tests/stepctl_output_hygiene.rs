//! What stepctl shows is the user's program and the user's errors, once and
//! in order: no debugger internals in an evaluation's error (debugpy, at a
//! real terminal), locals shown once, no dlv banner (dlv, from a pipe), the
//! program's output before the stop that followed it.

use std::{
    io::Write,
    process::{Command, Stdio},
};

use stepd_e2e::{
    Daemon, TempDir, dap, fixture, line_of, stepctl_bin,
    tmux::{Tmux, stepctl_command},
    watched,
};

#[tokio::test]
async fn evaluation_errors_show_the_users_error_and_locals_show_once() {
    let daemon = Daemon::start(&[]).await;
    let path = fixture("python/loop.py");
    let file = path.to_str().unwrap();
    let step = line_of(&path, "step");
    let dir = TempDir::new("hygiene");
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

    // p and e with a syntax error: the error, not pydevd's traceback.
    tmux.type_line("p 1+");
    tmux.wait_count("SyntaxError: invalid syntax", 1).await;
    tmux.type_line("e 1+");
    tmux.wait_count("SyntaxError: invalid syntax", 2).await;
    // The loop takes the next command: it answers, once.
    tmux.type_line("p items");
    let screen = tmux.wait_line("= [0, 1, 2]", 1).await;
    assert!(!screen.contains("pydevd"), "{screen}");
    assert!(!screen.contains("Traceback"), "{screen}");
    assert_eq!(screen.matches("error ADAPTER_ERROR").count(), 0, "{screen}");

    // locals: the inspector's rendering, without the stop's locals again.
    tmux.type_line("locals");
    let screen = tmux.wait_count("i = 0 [#0]", 1).await;
    assert_eq!(
        screen.lines().filter(|l| l.trim_end() == "  i = 0").count(),
        1,
        "{screen}"
    );
    tmux.type_line("q");
    tmux.wait_count("[stepctl exit 0]", 1).await;
    daemon.stop().await;
}

#[tokio::test]
async fn dlv_says_nothing_of_itself_in_the_program_output() {
    let daemon = Daemon::start(&[]).await;
    let program = fixture("build/go-hello");
    assert!(program.is_file(), "run scripts/build-fixtures");
    let mut child = Command::new(stepctl_bin())
        .args([
            "debug",
            "--launch",
            program.to_str().unwrap(),
            "--stop-on-entry",
        ])
        .env("STEPD_ADDR", &daemon.addr)
        .env("STEPCTL_HISTORY", "")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run stepctl debug");
    child.stdin.take().unwrap().write_all(b"c\n").unwrap();
    let out = tokio::time::timeout(
        stepd_e2e::DEADLINE,
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    .expect("stepctl debug ended in time")
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("done total=20"), "{stdout}");
    assert!(stdout.contains("ended: exited"), "{stdout}");
    assert!(!stdout.contains("dlv help"), "{stdout}");
    assert!(!stdout.contains("server listening"), "{stdout}");
    daemon.stop().await;
}

#[tokio::test]
async fn continue_prints_the_output_before_how_the_session_ended() {
    let (daemon, mut sub) = watched().await;
    let path = fixture("python/loop.py");
    let file = path.to_str().unwrap();
    let step = line_of(&path, "step");
    let bp = dap::add_breakpoint(&daemon, stepd_e2e::source_spec(file, step)).await;
    let session = dap::launch(&daemon, "debugpy", file, &[])
        .await
        .session
        .unwrap();
    dap::next_pause(&mut sub, &session.id).await;
    let stepctl = |args: &[&str]| {
        Command::new(stepctl_bin())
            .args(args)
            .env("STEPD_ADDR", &daemon.addr)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    assert!(stepctl(&["break", "rm", &bp]).status.success());
    // The program prints every iteration and its total, then ends.
    let out = stepctl(&["continue", &session.id]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let (Some(printed), Some(ended)) = (stdout.find("done total="), stdout.find("ended: exited"))
    else {
        panic!("the output and the end:\n{stdout}");
    };
    assert!(printed < ended, "{stdout}");
    daemon.stop().await;
}

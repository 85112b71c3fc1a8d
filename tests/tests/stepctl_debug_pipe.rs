//! `stepctl debug` fed from a pipe, as scripts use it: each line waits for
//! the outcome of the one before, exactly as a person typing would, also
//! when several pauses are pending at once.

use stepd_e2e::{Daemon, fixture, line_of, piped::Piped};

#[tokio::test]
async fn a_piped_trace_with_two_pauses_pending_waits_for_its_own_outcome() {
    let daemon = Daemon::start(&[]).await;
    let program = fixture("build/together");
    assert!(program.is_file(), "run scripts/build-fixtures");
    let source = fixture("c/together.c");
    let work = line_of(&source, "work");
    let mut debug = Piped::start(
        &daemon,
        &[
            "--adapter",
            "lldb",
            "--launch",
            program.to_str().unwrap(),
            "--break",
            &format!("{}:{work}", source.display()),
        ],
    );
    // Continue until both threads stop together (`sw 2` finds a second
    // pending pause); then the whole script comes at once.
    let mut together = false;
    for _ in 0..20 {
        debug.wait_for(&["(commands:"]).await;
        debug.write("sw 2\n");
        let said = debug
            .wait_for(&["commands now go to pause", "no pending pause 2"])
            .await;
        if said.contains("commands now go to pause") {
            together = true;
            break;
        }
        debug.write("c\n");
    }
    assert!(
        together,
        "the threads never stopped together:\n{}",
        debug.seen
    );
    let from = debug.seen.len();
    let (status, stdout) = debug.finish("t 3\npauses\nca\n").await;
    assert!(status.success(), "{stdout}");
    let stdout = &stdout[from..];
    // `pauses` ran once the trace had ended (at the stop after its steps;
    // lldb may end it early when the other thread stops), not when the
    // other thread's stop came in: it lists that stop.
    let Some(traced) = stdout.find("trace 1: ") else {
        panic!("the trace's first step:\n{stdout}");
    };
    let (Some(ended), Some(listed)) = (
        stdout[traced..].find("stopped: ").map(|at| traced + at),
        stdout.find("* 1 p-").or_else(|| stdout.find("  1 p-")),
    ) else {
        panic!("the trace's stop, then the pauses listing:\n{stdout}");
    };
    assert!(traced < ended && ended < listed, "{stdout}");
    // No command went to a pause that had already been answered.
    assert!(!stdout.contains("error"), "{stdout}");
    assert!(stdout.contains("ended: exited, exit code 0"), "{stdout}");
    daemon.stop().await;
}

#[tokio::test]
async fn the_programs_output_comes_before_the_stop_that_followed_it() {
    let daemon = Daemon::start(&[]).await;
    let path = fixture("python/loop.py");
    let file = path.to_str().unwrap();
    let step = line_of(&path, "step");
    let debug = Piped::start(
        &daemon,
        &["--launch", file, "--break", &format!("{file}:{step}")],
    );
    let (status, stdout) = debug.finish("c\nc\nc\nc\nc\n").await;
    assert!(status.success(), "{stdout}");
    // Each iteration prints its line before the next call stops.
    for i in 0..4 {
        let printed = stdout
            .find(&format!("i={i} total="))
            .unwrap_or_else(|| panic!("iteration {i}'s line:\n{stdout}"));
        let stop = stdout
            .match_indices("stopped: breakpoint")
            .nth(i + 1)
            .map(|(at, _)| at)
            .unwrap_or_else(|| panic!("stop {}:\n{stdout}", i + 2));
        assert!(printed < stop, "iteration {i}:\n{stdout}");
    }
    daemon.stop().await;
}

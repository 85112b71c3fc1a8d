//! `stepctl debug` fed from a pipe, as scripts use it: each line waits for
//! the outcome of the one before, exactly as a person typing would, also
//! when several pauses are pending at once.

use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
};

use tokio::sync::mpsc;

use stepd_e2e::{Daemon, fixture, line_of, stepctl_bin};

/// `stepctl debug ARGS` against `daemon` with its stdin a pipe and its
/// stdout read line by line as it comes.
struct Piped {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
    seen: String,
}

impl Piped {
    fn start(daemon: &Daemon, args: &[&str]) -> Self {
        let mut child = Command::new(stepctl_bin())
            .arg("debug")
            .args(args)
            .env("STEPD_ADDR", &daemon.addr)
            .env("STEPCTL_HISTORY", "")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run stepctl debug");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: String::new(),
        }
    }

    /// Waits until a line containing one of `texts` was printed; that line.
    async fn wait_for(&mut self, texts: &[&str]) -> String {
        let found = tokio::time::timeout(stepd_e2e::DEADLINE, async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push_str(&line);
                self.seen.push('\n');
                if texts.iter().any(|t| line.contains(t)) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        found
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("{texts:?} never showed; the output:\n{}", self.seen))
    }

    /// Writes lines to stdin.
    fn write(&mut self, input: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Writes all of `input` at once, closes stdin, and waits for the end:
    /// the exit status and the whole output.
    async fn finish(mut self, input: &str) -> (ExitStatus, String) {
        let mut stdin = self.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        let rest = tokio::time::timeout(stepd_e2e::DEADLINE, async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push_str(&line);
                self.seen.push('\n');
            }
        })
        .await;
        assert!(
            rest.is_ok(),
            "stepctl debug never ended (a piped command hung); the output:\n{}",
            self.seen
        );
        let status = self.child.wait().unwrap();
        (status, self.seen)
    }
}

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

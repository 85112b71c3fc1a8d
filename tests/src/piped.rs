//! `stepctl debug` on pipes, as scripts drive it: input written as the
//! answers come, the output read line by line.

use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, ChildStdin, Command, ExitStatus, Stdio},
};

use tokio::sync::mpsc;

use crate::{Daemon, stepctl_bin};

/// `stepctl debug ARGS` against `daemon` with its stdin a pipe and its
/// stdout read line by line as it comes.
pub struct Piped {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
    /// Everything printed so far.
    pub seen: String,
}

impl Piped {
    pub fn start(daemon: &Daemon, args: &[&str]) -> Self {
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
    pub async fn wait_for(&mut self, texts: &[&str]) -> String {
        let found = tokio::time::timeout(crate::DEADLINE, async {
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
    pub fn write(&mut self, input: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Writes all of `input` at once, closes stdin, and waits for the end:
    /// the exit status and the whole output.
    pub async fn finish(mut self, input: &str) -> (ExitStatus, String) {
        let mut stdin = self.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        let rest = tokio::time::timeout(crate::DEADLINE, async {
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

//! A real terminal for the interactive loops of stepctl: tmux runs a command
//! in a detached session of a fixed size, `send-keys` types, `capture-pane`
//! shows what a person would see. Waits poll the screen until the expected
//! text appears, within the deadline.
//!
//! Needs tmux (`scripts/tools` installs it).

use std::{
    path::Path,
    process::{Command, Stdio},
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use crate::{DEADLINE, stepctl_bin};

/// A tmux server of our own (its own socket) running one command in a pane.
pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// Runs `shell_command` in a detached 200x50 session; when it ends the pane
    /// says "[stepctl exit N]" and stays.
    pub fn start(shell_command: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let socket = format!(
            "stepd-e2e-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let script = format!("{shell_command}; echo \"[stepctl exit $?]\"; exec sleep 3600");
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-s", "debug", "-x", "200", "-y", "50", "sh", "-c", &script])
            .status()
            .expect("run tmux (install it with scripts/tools)");
        assert!(status.success(), "tmux new-session failed");
        let tmux = Self { socket };
        tmux.tmux(&["set-option", "-g", "history-limit", "10000"]);
        tmux
    }

    pub fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types a line and presses Enter.
    pub fn type_line(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "debug", "-l", text]);
        self.tmux(&["send-keys", "-t", "debug", "Enter"]);
    }

    /// The whole pane, scrollback included, wrapped lines joined.
    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-S", "-", "-t", "debug"])
    }

    /// Polls the screen until `found` holds, failing after the deadline.
    pub async fn wait(&self, what: &str, found: impl Fn(&str) -> bool) -> String {
        let waited = tokio::time::timeout(DEADLINE, async {
            loop {
                let screen = self.screen();
                if found(&screen) {
                    return screen;
                }
                // Polling an external terminal: a short pause between captures.
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| panic!("{what} never showed; the screen:\n{}", self.screen()))
    }

    /// Waits until `text` occurs at least `n` times.
    pub async fn wait_count(&self, text: &str, n: usize) -> String {
        self.wait(&format!("{text:?} x{n}"), |s| s.matches(text).count() >= n)
            .await
    }

    /// Waits until a line reads exactly `line` (trailing blanks ignored) at least `n` times.
    pub async fn wait_line(&self, line: &str, n: usize) -> String {
        self.wait(&format!("the line {line:?} x{n}"), |s| {
            s.lines().filter(|l| l.trim_end() == line).count() >= n
        })
        .await
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .stderr(Stdio::null())
            .status();
    }
}

/// `stepctl ARGS` as a shell command line against `addr`, with the history of
/// its interactive loops in `history`.
pub fn stepctl_command(addr: &str, history: &Path, args: &[&str]) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let mut words = vec![
        "env".to_owned(),
        quote(&format!("STEPD_ADDR={addr}")),
        quote(&format!("STEPCTL_HISTORY={}", history.display())),
        quote(&format!("STEPCTL_INSPECT_HISTORY={}", history.display())),
        quote(stepctl_bin().to_str().unwrap()),
    ];
    words.extend(args.iter().map(|a| quote(a)));
    words.join(" ")
}

impl Tmux {
    /// Presses keys by tmux name ("Tab", "Enter", "C-c").
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "debug"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Types text without pressing Enter.
    pub fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "debug", "-l", text]);
    }

    /// The pane with its colour escapes.
    pub fn screen_with_escapes(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-e", "-J", "-S", "-", "-t", "debug"])
    }
}

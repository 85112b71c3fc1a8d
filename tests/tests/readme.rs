//! Every command of the README's console blocks runs against a real daemon,
//! so the tour cannot rot. Each block runs as one shell script from the
//! repository root, so a block may set variables for its later lines.

use std::{
    path::Path,
    process::{ExitStatus, Stdio},
    time::Duration,
};

use stepd_e2e::{Daemon, TempDir, repo_root, stepctl_bin, tools_path};

/// How long one block may run: its slowest command waits 30 s for a pause.
const BLOCK_DEADLINE: Duration = Duration::from_secs(120);

/// What the daemon holds, shown when a block fails: which of its waits went wrong.
const DAEMON_STATE: &str = "stepctl sessions --all; stepctl pauses";

/// The `$ ` lines of each ```console block.
fn console_blocks(markdown: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in markdown.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            current = match current.take() {
                Some(block) => {
                    blocks.push(block);
                    None
                }
                None if trimmed == "```console" => Some(Vec::new()),
                // Fences of other blocks leave the state alone.
                None => None,
            };
            continue;
        }
        if let Some(block) = current.as_mut()
            && let Some(command) = trimmed.strip_prefix("$ ")
        {
            block.push(command.to_owned());
        }
    }
    blocks
}

/// What a block printed, and how it ended (`None`: not within the deadline).
struct Ran {
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
    /// For a block past its deadline: its processes still running then,
    /// with what each was waiting in, the daemon's sessions and pauses
    /// before the kill ended them, and the stacks of its Python processes.
    at_deadline: String,
}

/// Runs `script` with bash in a process group of its own, its output going to
/// files: a program a failed block leaves running (a probe still held) can
/// neither keep the output open nor outlive the block, as the group is killed
/// when bash ends or the deadline passes.
async fn run_block(script: &str, path: &str, addr: &str, dir: &Path) -> Ran {
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = tokio::process::Command::new("bash")
        .args(["-c", script])
        .current_dir(repo_root())
        .env("PATH", path)
        .env("STEPD_ADDR", addr)
        .env("PYTHONFAULTHANDLER", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let group = child.id().expect("bash runs") as libc::pid_t;
    let status = tokio::time::timeout(BLOCK_DEADLINE, child.wait())
        .await
        .ok()
        .map(|waited| waited.unwrap());
    let at_deadline = if status.is_none() {
        at_deadline(group, path, addr)
    } else {
        String::new()
    };
    // SAFETY: killpg only sends a signal, to the group this block created.
    unsafe { libc::killpg(group, libc::SIGKILL) };
    let _ = child.wait().await;
    let read =
        |file| String::from_utf8_lossy(&std::fs::read(file).unwrap_or_default()).into_owned();
    Ran {
        status,
        stdout: read(&out),
        stderr: read(&err),
        at_deadline,
    }
}

/// Which of a block's commands hung and where: the group's processes and
/// their wait channels, what the daemon held, and each Python process's
/// stacks, while they still run.
fn at_deadline(group: libc::pid_t, path: &str, addr: &str) -> String {
    let run = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .env("PATH", path)
            .env("STEPD_ADDR", addr)
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr)
            })
            .unwrap_or_else(|e| format!("{program}: {e}\n"))
    };
    let processes: String = run("ps", &["-eo", "pgid=,pid=,stat=,wchan:32=,etime=,args="])
        .lines()
        .filter(|line| line.split_whitespace().next() == Some(&group.to_string()))
        .map(|line| format!("{line}\n"))
        .collect();
    let held = run("timeout", &["10", "bash", "-c", DAEMON_STATE]);
    // Where each Python process waits: its threads' native stacks (when gdb
    // is installed), then SIGABRT, on which faulthandler (PYTHONFAULTHANDLER,
    // set for every block) writes every thread's Python stack to stderr.
    let mut stacks = String::new();
    let mut aborted = Vec::new();
    for line in processes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(pid), Some(program)) = (fields.get(1), fields.get(5)) else {
            continue;
        };
        if !program.contains("python") {
            continue;
        }
        stacks += &format!("native stacks of {pid}:\n");
        stacks += &run(
            "timeout",
            &[
                "30",
                "gdb",
                "-p",
                pid,
                "-batch",
                "-ex",
                "thread apply all bt 30",
            ],
        );
        if let Ok(pid) = pid.parse::<libc::pid_t>() {
            // SAFETY: kill only sends a signal, to a process of this block's group.
            unsafe { libc::kill(pid, libc::SIGABRT) };
            aborted.push(pid);
        }
    }
    // faulthandler has written once the process has ended.
    wait_ended(&aborted, Duration::from_secs(10));
    format!("still running:\n{processes}the daemon:\n{held}{stacks}")
}

/// Waits until each of `pids` has ended, or `within` has passed. They are
/// bash's children, not ours, so a pidfd tells when each ends.
fn wait_ended(pids: &[libc::pid_t], within: Duration) {
    let mut waiting: Vec<libc::pollfd> = pids
        .iter()
        .filter_map(|&pid| {
            // SAFETY: pidfd_open takes a pid and no flags, and returns a new
            // descriptor or -1.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            (fd >= 0).then_some(libc::pollfd {
                fd: fd as libc::c_int,
                events: libc::POLLIN,
                revents: 0,
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + within;
    while !waiting.is_empty() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        // SAFETY: `waiting` is a live array of `waiting.len()` pollfds.
        let ready = unsafe {
            libc::poll(
                waiting.as_mut_ptr(),
                waiting.len() as libc::nfds_t,
                left.as_millis() as libc::c_int,
            )
        };
        if ready <= 0 {
            break;
        }
        waiting.retain(|p| {
            let ended = p.revents != 0;
            if ended {
                // SAFETY: the descriptor is ours, and closed once.
                unsafe { libc::close(p.fd) };
            }
            !ended
        });
    }
    for p in waiting {
        // SAFETY: as above.
        unsafe { libc::close(p.fd) };
    }
}

#[tokio::test]
async fn every_readme_command_works() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let blocks = console_blocks(&readme);
    let commands: usize = blocks.iter().map(Vec::len).sum();
    assert!(commands >= 18, "found only {blocks:?}");

    let daemon = Daemon::start(&[]).await;
    let bin_dir = stepctl_bin().parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), tools_path());
    let scratch = TempDir::new("readme");
    for block in &blocks {
        let mut script = String::new();
        for command in block {
            let command = command.replace("127.0.0.1:7701", &daemon.addr);
            script.push_str(&format!(
                "{command} || {{ echo \"README command failed: {}\" >&2; exit 1; }}\n",
                command
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('$', "\\$")
            ));
        }
        let Ran {
            status,
            stdout,
            stderr,
            at_deadline,
        } = run_block(&script, &path, &daemon.addr, scratch.path()).await;
        if !status.is_some_and(|s| s.success()) {
            let state = run_block(DAEMON_STATE, &path, &daemon.addr, scratch.path()).await;
            let ended = match status {
                Some(status) => format!("failed ({status})"),
                None => format!("did not end within {BLOCK_DEADLINE:?}"),
            };
            panic!(
                "README block {ended}:\n{script}\nstdout: {stdout}\nstderr: {stderr}\n\
                 {at_deadline}the daemon then:\n{}{}",
                state.stdout, state.stderr
            );
        }
        if block.iter().any(|c| c.starts_with("stepctl ping")) {
            assert!(stdout.contains("stepd.v1"), "{stdout}");
        }
        if block
            .iter()
            .any(|c| c.starts_with("stepctl launch") || c.contains("stepctl launch"))
        {
            // The conditional breakpoint held back the first hits, and the run ended.
            assert!(stdout.contains("[2, 3, 4]"), "{stdout}");
            assert!(stdout.contains("exited"), "{stdout}");
            // The tour's logpoint is meaningful for this program: it logs,
            // and nothing it names is undefined there.
            assert!(stdout.contains("step(2, 2)"), "{stdout}");
            assert!(!stdout.contains("Error"), "{stdout}");
        }
        if block.iter().any(|c| c.contains("examples/agent_loop")) {
            // The injected tool arguments reached the agent.
            assert!(
                stdout.contains("agent answer: The answer is 36"),
                "{stdout}"
            );
        }
    }
    daemon.stop().await;
}

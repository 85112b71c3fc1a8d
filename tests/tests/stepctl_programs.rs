//! stepctl on a program nobody here wrote: a breakpoint and a step inside a
//! third-party library (tabulate) with `--just-my-code=false`, the
//! program's own interpreter (`--python`, VIRTUAL_ENV, a `.venv` beside
//! it), the caller's working directory, environment and PATH when the
//! daemon runs here as the same user (and `doctor` showing both sides), and
//! attach guessing debugpy for a debugpy listener.

use std::{path::Path, process::Stdio, time::Duration};

use stepd_e2e::{DEADLINE, Daemon, TempDir, fixture, line_of, repo_root, stepctl_bin, tools_path};
use tokio::io::AsyncWriteExt;

/// What a stepctl run printed, and how it ended.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs stepctl against `daemon` in `cwd` with `env` (on a clean
/// environment but PATH), feeding `input` on stdin.
async fn stepctl(
    daemon: &Daemon,
    cwd: &Path,
    env: &[(&str, &str)],
    args: &[&str],
    input: &str,
) -> Run {
    let mut command = tokio::process::Command::new(stepctl_bin());
    command
        .env_clear()
        .env("PATH", tools_path())
        .env("HOME", std::env::var("HOME").unwrap_or_default())
        .env("STEPD_ADDR", &daemon.addr)
        .env("STEPCTL_HISTORY", cwd.join(".history"))
        .envs(env.iter().copied())
        .current_dir(cwd)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .expect("stepctl finished in time")
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn app_venv() -> std::path::PathBuf {
    repo_root().join(".tools/appvenv")
}

/// tabulate's source in the program's virtualenv.
fn tabulate_source() -> std::path::PathBuf {
    let lib = app_venv().join("lib");
    let python = std::fs::read_dir(&lib)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .expect("the program virtualenv; run scripts/tools");
    python.path().join("site-packages/tabulate/__init__.py")
}

#[tokio::test]
async fn library_code_with_the_programs_virtualenv() {
    let daemon = Daemon::start(&[]).await;
    let dir = TempDir::new("lib");
    let program = fixture("python/tables.py");
    let file = program.to_str().unwrap();
    let call = line_of(&program, "call");
    let library = tabulate_source();
    let inside = line_of_text(&library, "    if tabular_data is None:");
    let venv = app_venv();
    let venv_python = venv.join("bin/python");
    let breaks = [
        format!("{file}:{call}"),
        format!("{}:{inside}", library.display()),
    ];
    let run = stepctl(
        &daemon,
        dir.path(),
        &[("VIRTUAL_ENV", venv.to_str().unwrap())],
        &[
            "debug",
            "--just-my-code=false",
            "--break",
            &breaks[0],
            "--break",
            &breaks[1],
            "--launch",
            file,
        ],
        "s\nc\np tabular_data\nc\n",
    )
    .await;
    let out = &run.stdout;
    assert_eq!(run.code, Some(0), "{out}\n{}", run.stderr);
    // The interpreter came from VIRTUAL_ENV, and stepctl said so.
    assert!(
        out.contains(&format!(
            "python: {} (from VIRTUAL_ENV)",
            venv_python.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("python={}", venv_python.display())),
        "{out}"
    );
    // `s` went into the library, and its breakpoint stopped.
    assert!(out.contains(" in tabulate"), "{out}");
    assert!(
        out.contains(&format!("{}:{inside}", library.display())),
        "{out}"
    );
    assert!(out.contains("[['a', 1], ['b', 2]]"), "{out}");
    // The program's working directory is stepctl's.
    assert!(
        out.contains(&format!("cwd={}", dir.path().display())),
        "{out}"
    );

    // With just-my-code (the default), the library's breakpoint never stops
    // (a new daemon: breakpoints outlive the REPL that set them).
    daemon.stop().await;
    let daemon = Daemon::start(&[]).await;
    let run = stepctl(
        &daemon,
        dir.path(),
        &[("VIRTUAL_ENV", venv.to_str().unwrap())],
        &["debug", "--break", &breaks[1], "--launch", file],
        "",
    )
    .await;
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(!run.stdout.contains(" in tabulate"), "{}", run.stdout);
    assert!(run.stdout.contains("python="), "{}", run.stdout);
    daemon.stop().await;
}

/// The line number of the first line of `path` that is `text`.
fn line_of_text(path: &Path, text: &str) -> u32 {
    let source = std::fs::read_to_string(path).unwrap();
    source
        .lines()
        .position(|l| l == text)
        .map(|i| i as u32 + 1)
        .unwrap_or_else(|| panic!("{text:?} not in {}", path.display()))
}

#[tokio::test]
async fn a_dot_venv_beside_the_program_or_python_chooses_the_interpreter() {
    let daemon = Daemon::start(&[]).await;
    let dir = TempDir::new("venv");
    let program = dir.path().join("tables.py");
    std::fs::copy(fixture("python/tables.py"), &program).unwrap();
    std::os::unix::fs::symlink(app_venv(), dir.path().join(".venv")).unwrap();
    let file = program.to_str().unwrap();
    let run = stepctl(&daemon, dir.path(), &[], &["debug", "--launch", file], "").await;
    let beside = dir.path().join(".venv/bin/python");
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains(&format!(
            "python: {} (from .venv beside the program)",
            beside.display()
        )),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("python="), "{}", run.stdout);

    // A shell whose PATH has no debugpy still launches: the daemon looks on
    // the launch's PATH first, then on its own.
    let run = stepctl(
        &daemon,
        dir.path(),
        &[("PATH", "/usr/bin:/bin")],
        &["debug", "--launch", file],
        "",
    )
    .await;
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("name      n"), "{}", run.stdout);

    // --python wins; an interpreter without tabulate cannot run it.
    let run = stepctl(
        &daemon,
        dir.path(),
        &[],
        &["debug", "--python", "/usr/bin/python3", "--launch", file],
        "",
    )
    .await;
    assert!(
        run.stdout
            .contains("python: /usr/bin/python3 (from --python)"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("No module named 'tabulate'"),
        "{}",
        run.stdout
    );

    // --python is for Python programs.
    let run = stepctl(
        &daemon,
        dir.path(),
        &[],
        &[
            "launch",
            "--adapter",
            "lldb",
            "--python",
            "/usr/bin/python3",
            file,
        ],
        "",
    )
    .await;
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    daemon.stop().await;
}

#[tokio::test]
async fn launches_use_the_callers_context_and_path_and_doctor_shows_both_sides() {
    // A daemon whose PATH has no Python with debugpy.
    let data = TempDir::new("ctx");
    let mut command = Daemon::command(data.path(), &[]);
    command.env("PATH", "/usr/bin:/bin");
    let daemon = Daemon::spawn(command, data.path()).await;
    let dir = TempDir::new("ctx-cwd");
    let hello = fixture("python/tables.py");
    let venv = app_venv();
    let env = [
        ("STEPD_TEST_MARK", "from-the-shell"),
        ("VIRTUAL_ENV", venv.to_str().unwrap()),
    ];

    // doctor: debugpy is found on the caller's PATH, not on the daemon's.
    let run = stepctl(&daemon, dir.path(), &env, &["doctor"], "").await;
    let out = &run.stdout;
    let mine = out.find("adapters on your PATH").expect(out);
    let theirs = out.find("adapters on the daemon's PATH").expect(out);
    assert!(mine < theirs, "{out}");
    let debugpy_ok = |text: &str| {
        text.lines()
            .any(|l| l.starts_with("debugpy") && l.contains(" ok "))
    };
    assert!(debugpy_ok(&out[mine..theirs]), "{out}");
    assert!(!debugpy_ok(&out[theirs..]), "{out}");

    // A launch gets the shell's working directory, environment and PATH.
    let file = hello.to_str().unwrap();
    let run = stepctl(&daemon, dir.path(), &env, &["debug", "--launch", file], "").await;
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("mark=from-the-shell"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains(&format!("cwd={}", dir.path().display())),
        "{}",
        run.stdout
    );

    // --daemon-context keeps the daemon's: its PATH has no debugpy, and the
    // error says whose PATH was searched and that a restart would help.
    let run = stepctl(
        &daemon,
        dir.path(),
        &env,
        &["launch", "--daemon-context", file],
        "",
    )
    .await;
    assert_eq!(run.code, Some(10 + 6), "{}", run.stderr);
    assert!(run.stderr.contains("ADAPTER_NOT_FOUND"), "{}", run.stderr);
    assert!(run.stderr.contains("daemon's PATH"), "{}", run.stderr);
    assert!(run.stderr.contains("restart the daemon"), "{}", run.stderr);
    daemon.stop().await;
}

#[tokio::test]
async fn attach_to_a_debugpy_listener_picks_debugpy() {
    let daemon = Daemon::start(&[]).await;
    let dir = TempDir::new("attach");
    let stop_file = dir.path().join("stop");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut debuggee = tokio::process::Command::new("python3")
        .env("PATH", tools_path())
        .args(["-m", "debugpy", "--listen", &format!("127.0.0.1:{port}")])
        .arg(fixture("python/busy.py"))
        .arg(&stop_file)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = debuggee.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout);
    let mut line = String::new();
    use tokio::io::AsyncBufReadExt;
    tokio::time::timeout(DEADLINE, async {
        while lines.read_line(&mut line).await.unwrap() > 0 {
            if line.contains("busy") {
                return;
            }
        }
    })
    .await
    .expect("the debuggee started");
    // No --adapter: lldb was the guess before.
    let run = stepctl(
        &daemon,
        dir.path(),
        &[],
        &[
            "--json",
            "attach",
            "--connect",
            &format!("127.0.0.1:{port}"),
        ],
        "",
    )
    .await;
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let answer: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(answer["session"]["adapter"], "debugpy", "{answer}");
    std::fs::write(&stop_file, "").unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(20), debuggee.wait()).await;
    daemon.stop().await;
}

//! Every command of the README's console blocks runs against a real daemon,
//! so the tour cannot rot.

use std::process::Stdio;

use stepd_e2e::{Daemon, TempDir, repo_root, stepctl_bin};

/// The `$ ` lines of every ```console block.
fn console_commands(markdown: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_console = false;
    for line in markdown.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_console = !in_console && trimmed == "```console";
            continue;
        }
        if in_console && let Some(command) = trimmed.strip_prefix("$ ") {
            commands.push(command.to_owned());
        }
    }
    commands
}

#[tokio::test]
async fn every_readme_command_works() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let commands = console_commands(&readme);
    assert!(commands.len() >= 10, "found only {commands:?}");

    let daemon = Daemon::start(&[]).await;
    let work = TempDir::new("readme");
    let bin_dir = stepctl_bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}:{}",
        bin_dir.display(),
        repo_root().join(".tools/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for command in &commands {
        let command = command.replace("127.0.0.1:7701", &daemon.addr);
        let out = std::process::Command::new("bash")
            .args(["-c", &command])
            .current_dir(work.path())
            .env("PATH", &path)
            .env("STEPD_ADDR", &daemon.addr)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "README command failed: {command}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        if command.starts_with("stepctl ping") {
            assert!(stdout.contains("stepd.v1"), "{stdout}");
        }
        if command.starts_with("stepctl break list") {
            assert!(stdout.contains("app.py:12"), "{stdout}");
        }
    }
    daemon.stop().await;
}

//! Every command of the README's console blocks runs against a real daemon,
//! so the tour cannot rot. Each block runs as one shell script from the
//! repository root, so a block may set variables for its later lines.

use std::process::Stdio;

use stepd_e2e::{Daemon, repo_root, stepctl_bin, tools_path};

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

#[tokio::test]
async fn every_readme_command_works() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let blocks = console_blocks(&readme);
    let commands: usize = blocks.iter().map(Vec::len).sum();
    assert!(commands >= 18, "found only {blocks:?}");

    let daemon = Daemon::start(&[]).await;
    let bin_dir = stepctl_bin().parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin_dir.display(), tools_path());
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
        let out = std::process::Command::new("bash")
            .args(["-c", &script])
            .current_dir(repo_root())
            .env("PATH", &path)
            .env("STEPD_ADDR", &daemon.addr)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "README block failed:\n{script}\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
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

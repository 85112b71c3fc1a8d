//! `stepctl completion` and `stepctl man`: generated from stepctl's own
//! commands, loaded in a real bash, rendered by groff. Neither needs a daemon.

use std::process::{Command, Stdio};

use stepd_e2e::{TempDir, stepctl_bin};

fn stepctl(args: &[&str]) -> String {
    let out = Command::new(stepctl_bin())
        .args(args)
        // Unreachable on purpose: these commands must not connect.
        .env("STEPD_ADDR", "127.0.0.1:1")
        .output()
        .expect("run stepctl");
    assert!(
        out.status.success(),
        "stepctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What bash offers for the words typed after `stepctl`, with the script loaded.
fn bash_completes(script: &std::path::Path, words: &[&str]) -> Vec<String> {
    let words_list = words
        .iter()
        .map(|w| format!("'{w}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let program = format!(
        "source '{}'; COMP_WORDS=(stepctl {words_list}); COMP_CWORD={}; \
         COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}; \
         _stepctl stepctl '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        words.len(),
        words.last().unwrap(),
        words
            .get(words.len().wrapping_sub(2))
            .copied()
            .unwrap_or("stepctl"),
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .stderr(Stdio::inherit())
        .output()
        .expect("run bash");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_subcommands_from_the_generated_script() {
    let dir = TempDir::new("completion");
    let script = dir.path().join("stepctl.bash");
    std::fs::write(&script, stepctl(&["completion", "bash"])).unwrap();
    assert_eq!(bash_completes(&script, &["lau"]), ["launch"]);
    assert_eq!(bash_completes(&script, &["break", "a"]), ["add"]);
    let options = bash_completes(&script, &["debug", "--la"]);
    assert!(options.contains(&"--launch".to_owned()), "{options:?}");

    assert!(stepctl(&["completion", "zsh"]).starts_with("#compdef stepctl"));
    assert!(stepctl(&["completion", "fish"]).contains("complete -c stepctl"));
}

#[test]
fn man_pages_are_written_per_command_and_render() {
    let dir = TempDir::new("man");
    let out = stepctl(&["man", dir.path().to_str().unwrap()]);
    assert!(out.starts_with("wrote "), "{out}");
    let mut pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    for page in [
        "stepctl.1",
        "stepctl-debug.1",
        "stepctl-break-add.1",
        "stepctl-watch.1",
    ] {
        assert!(
            pages.contains(&page.to_owned()),
            "{page} missing: {pages:?}"
        );
    }
    for page in &pages {
        let rendered = Command::new("groff")
            .args(["-k", "-man", "-Tutf8", "-ww", "-P-cbou"])
            .arg(dir.path().join(page))
            .output()
            .expect("run groff (scripts/tools installs it)");
        let warnings = String::from_utf8_lossy(&rendered.stderr);
        assert!(
            rendered.status.success() && warnings.is_empty(),
            "{page}: {warnings}"
        );
        let text = String::from_utf8_lossy(&rendered.stdout);
        let name = page.trim_end_matches(".1");
        assert!(
            text.contains("NAME") && text.contains(name),
            "{page}: {text}"
        );
    }
    let debug = std::fs::read_to_string(dir.path().join("stepctl-debug.1")).unwrap();
    assert!(debug.contains("launch"), "{debug}");
}

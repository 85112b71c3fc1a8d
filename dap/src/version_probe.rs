//! Version probes of adapter binaries (`gdb --version`, `python3 -c "import
//! debugpy"`, …), run once per binary and remembered: an installed binary's
//! answer does not change, and probing again on a loaded machine could time
//! out and turn a working adapter into a broken one from one `Doctor` to the
//! next.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, SystemTime},
};

use tokio::{process::Command, sync::OnceCell};

/// How long a probe may take before the adapter counts as broken: a
/// `--version` answers in well under a second, but a machine busy with
/// builds and tests can stretch that many times over.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// A probe is remembered for the binary as it is on disk: reinstalling it
/// (another size or modification time) probes it again.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    program: PathBuf,
    args: Vec<String>,
    modified: Option<SystemTime>,
    len: u64,
}

type Answer = Arc<OnceCell<Result<String, String>>>;

fn answers() -> &'static Mutex<HashMap<Key, Answer>> {
    static ANSWERS: OnceLock<Mutex<HashMap<Key, Answer>>> = OnceLock::new();
    ANSWERS.get_or_init(Default::default)
}

/// Runs `program args` with no stdin and a deadline; stdout+stderr on
/// success. The first successful answer per binary is kept; concurrent
/// callers share one run. A failure is not kept, so the next call tries again.
pub async fn run(program: &Path, args: &[&str]) -> Result<String, String> {
    let meta = std::fs::metadata(program).ok();
    let key = Key {
        program: program.to_owned(),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        modified: meta.as_ref().and_then(|m| m.modified().ok()),
        len: meta.as_ref().map_or(0, |m| m.len()),
    };
    let cell = answers()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key.clone())
        .or_default()
        .clone();
    let answer = cell.get_or_init(|| probe(program, args)).await.clone();
    if answer.is_err() {
        let mut all = answers().lock().unwrap_or_else(|e| e.into_inner());
        if all.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            all.remove(&key);
        }
    }
    answer
}

async fn probe(program: &Path, args: &[&str]) -> Result<String, String> {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(PROBE_TIMEOUT, child).await {
        Err(_) => Err(format!(
            "{} {} did not answer within {PROBE_TIMEOUT:?}",
            program.display(),
            args.join(" ")
        )),
        Ok(Err(err)) => Err(format!("{}: {err}", program.display())),
        Ok(Ok(out)) if out.status.success() => Ok(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )),
        Ok(Ok(out)) => Err(format!(
            "{} exited with {}: {}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_binary_is_probed_once_until_it_changes() {
        let dir = std::env::temp_dir().join(format!("stepd-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("tool");
        // Each run counts itself, so a second run would answer "2".
        let body = format!(
            "#!/bin/sh\necho run >> '{}/runs'\nwc -l < '{}/runs'\n",
            dir.display(),
            dir.display()
        );
        std::fs::write(&script, &body).unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let (a, b) = tokio::join!(run(&script, &["--version"]), run(&script, &["--version"]));
        assert_eq!(a.as_deref().map(str::trim), Ok("1"));
        assert_eq!(b, a);
        assert_eq!(run(&script, &["--version"]).await, a);
        // Reinstalled (another size): probed again.
        std::fs::write(&script, format!("{body}\n")).unwrap();
        assert_eq!(
            run(&script, &["--version"]).await.as_deref().map(str::trim),
            Ok("2")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

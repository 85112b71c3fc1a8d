//! The caller's context. When the daemon runs on this machine as this user,
//! a program launched from stepctl runs as it would from this shell: in its
//! working directory, with its environment and PATH (so its virtualenv and
//! the adapters installed there), and a Python program with the shell's
//! interpreter. Elsewhere the daemon's own context applies, since paths on
//! this machine mean nothing there.

use std::{
    collections::HashMap,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use crate::connect::{self, Options};

/// Whether the daemon at `options` runs on this machine as this user: a
/// Unix socket this user owns, or a loopback port this user listens on.
pub fn local_same_user(options: &Options) -> bool {
    let Some(me) = my_uid() else {
        return false;
    };
    let addr = options.addr.as_deref().unwrap_or(connect::DEFAULT_ADDR);
    if let Some(path) = addr.strip_prefix("unix:") {
        return std::fs::metadata(path).is_ok_and(|m| m.uid() == me);
    }
    let hostport = addr
        .strip_prefix("http://")
        .or_else(|| addr.strip_prefix("https://"))
        .unwrap_or(addr)
        .trim_end_matches('/');
    let Some((host, port)) = hostport.rsplit_once(':') else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    let Ok(port) = port.parse::<u16>() else {
        return false;
    };
    loopback && listener_uids(port).contains(&me)
}

fn my_uid() -> Option<u32> {
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// The owners of the TCP sockets listening on `port`, from the kernel's
/// socket tables (`/proc/net/tcp` and `tcp6`: the local address is
/// `ADDR:PORT` in hex, state `0A` is LISTEN, the eighth column the uid).
fn listener_uids(port: u16) -> Vec<u32> {
    let want = format!("{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|line| {
                    let cols: Vec<&str> = line.split_whitespace().collect();
                    let (_, local_port) = cols.get(1)?.rsplit_once(':')?;
                    (local_port == want && *cols.get(3)? == "0A")
                        .then(|| cols.get(7)?.parse().ok())
                        .flatten()
                })
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// What a launch takes from this shell.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The working directory.
    pub cwd: String,
    /// The whole environment, PATH included.
    pub env: HashMap<String, String>,
}

impl Caller {
    /// This process's context.
    pub fn here() -> Self {
        Caller {
            cwd: std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
            env: std::env::vars().collect(),
        }
    }
}

/// The interpreter a Python program is launched with, and why that one:
/// `--python`; else, from a shell on the daemon's machine, the active
/// virtualenv (`VIRTUAL_ENV`), or a `.venv` beside the program.
pub fn interpreter(
    explicit: Option<&str>,
    program: &str,
    env: Option<&HashMap<String, String>>,
) -> Option<(String, &'static str)> {
    if let Some(python) = explicit {
        return Some((absolute(python), "--python"));
    }
    let env = env?;
    if let Some(venv) = env.get("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
        let python = Path::new(venv).join("bin/python");
        if python.exists() {
            return Some((python.display().to_string(), "VIRTUAL_ENV"));
        }
    }
    let beside = Path::new(program).parent()?.join(".venv/bin/python");
    beside
        .exists()
        .then(|| (beside.display().to_string(), ".venv beside the program"))
}

/// Whether a launch runs a Python program: adapter debugpy, or a `.py`
/// program when the daemon guesses (as it does from the name).
pub fn is_python(adapter: Option<&str>, program: &str) -> bool {
    match adapter {
        Some(adapter) => adapter == "debugpy",
        None => program.ends_with(".py"),
    }
}

fn absolute(path: &str) -> String {
    let p = PathBuf::from(path);
    if p.is_absolute() || !path.contains('/') {
        return path.to_owned();
    }
    std::env::current_dir()
        .map(|d| d.join(p).display().to_string())
        .unwrap_or_else(|_| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interpreter_comes_from_the_flag_then_the_virtualenv_then_dot_venv() {
        let dir = std::env::temp_dir().join(format!("stepctl-caller-{}", std::process::id()));
        let venv = dir.join("venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::write(venv.join("bin/python"), "").unwrap();
        std::fs::create_dir_all(dir.join("app/.venv/bin")).unwrap();
        std::fs::write(dir.join("app/.venv/bin/python"), "").unwrap();
        let program = dir.join("app/main.py").display().to_string();
        let mut env = HashMap::new();
        assert_eq!(
            interpreter(Some("/usr/bin/python3"), &program, Some(&env)),
            Some(("/usr/bin/python3".into(), "--python"))
        );
        let dot_venv = dir.join("app/.venv/bin/python").display().to_string();
        assert_eq!(
            interpreter(None, &program, Some(&env)),
            Some((dot_venv, ".venv beside the program"))
        );
        env.insert("VIRTUAL_ENV".into(), venv.display().to_string());
        let active = venv.join("bin/python").display().to_string();
        assert_eq!(
            interpreter(None, &program, Some(&env)),
            Some((active, "VIRTUAL_ENV"))
        );
        // A remote daemon gets no guess from this machine.
        assert_eq!(interpreter(None, &program, None), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_python_launches_take_an_interpreter() {
        assert!(is_python(None, "/a/b.py"));
        assert!(is_python(Some("debugpy"), "/a/b"));
        assert!(!is_python(Some("lldb"), "/a/b.py"));
        assert!(!is_python(None, "/a/b"));
    }
}

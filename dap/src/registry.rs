//! Adapter registry: where each adapter is looked for, how its version is
//! read, and whether it is usable. `Doctor` shows the result; launching uses
//! the same lookup so the two never disagree.

use std::path::{Path, PathBuf};

use stepd_proto::v1::{AdapterCheck, CheckStatus};

use super::{kind::AdapterKind, version_probe::run};

/// gdb speaks DAP from version 14 on.
const GDB_MIN_MAJOR: u32 = 14;

/// Checks every adapter kind concurrently, on `path` (a PATH value) or,
/// without one, the daemon's own PATH.
pub async fn check_all(path: Option<&str>) -> Vec<AdapterCheck> {
    let (debugpy, lldb, dlv, gdb) = tokio::join!(
        check_debugpy(path),
        check_lldb(path),
        check_dlv(path),
        check_gdb(path)
    );
    vec![debugpy, lldb, dlv, gdb]
}

/// Checks one adapter kind on `path` (None: the daemon's PATH); a custom
/// command has nothing to find.
pub async fn check(kind: AdapterKind, path: Option<&str>) -> Option<AdapterCheck> {
    Some(match kind {
        AdapterKind::Debugpy => check_debugpy(path).await,
        AdapterKind::Lldb => check_lldb(path).await,
        AdapterKind::Dlv => check_dlv(path).await,
        AdapterKind::Gdb => check_gdb(path).await,
        AdapterKind::Custom => return None,
    })
}

/// The names of the kinds the registry can find, for messages.
pub fn known_names() -> String {
    AdapterKind::KNOWN.map(AdapterKind::name).join(", ")
}

/// The directories of `path` (None: the daemon's PATH), in order, without
/// repeats.
fn path_dirs(path: Option<&str>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let path = path
        .map(std::ffi::OsString::from)
        .or_else(|| std::env::var_os("PATH"));
    for dir in path
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
    {
        if !dir.as_os_str().is_empty() && !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// Debian's versioned LLVM installs, newest first.
fn llvm_dirs() -> Vec<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let major = name.strip_prefix("llvm-")?.parse().ok()?;
                    Some((major, e.path().join("bin")))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort_by_key(|(major, _)| std::cmp::Reverse(*major));
    found.into_iter().map(|(_, dir)| dir).collect()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn missing(adapter: &str, searched: Vec<String>, message: &str) -> AdapterCheck {
    AdapterCheck {
        adapter: adapter.into(),
        status: CheckStatus::Missing.into(),
        searched,
        message: message.into(),
        ..Default::default()
    }
}

async fn check_debugpy(path: Option<&str>) -> AdapterCheck {
    let mut searched = Vec::new();
    let mut interpreters = Vec::new();
    if let Some(py) = std::env::var_os("STEPD_PYTHON") {
        interpreters.push(PathBuf::from(py));
    }
    for dir in path_dirs(path) {
        interpreters.push(dir.join("python3"));
    }
    let mut last_error = String::new();
    for py in interpreters {
        searched.push(format!("{} -m debugpy.adapter", py.display()));
        if !is_executable(&py) {
            continue;
        }
        match run(
            &py,
            &[
                "-c",
                "import debugpy,sys; sys.stdout.write(debugpy.__version__)",
            ],
        )
        .await
        {
            Ok(version) => {
                return AdapterCheck {
                    adapter: "debugpy".into(),
                    status: CheckStatus::Ok.into(),
                    command: vec![
                        py.display().to_string(),
                        "-m".into(),
                        "debugpy.adapter".into(),
                    ],
                    version: version.trim().to_owned(),
                    searched,
                    message: String::new(),
                };
            }
            Err(err) => last_error = err,
        }
    }
    let message = if last_error.is_empty() {
        "no python3 found; set STEPD_PYTHON or put python3 on PATH".to_owned()
    } else {
        format!(
            "debugpy is not importable ({}); install it with `python3 -m pip install debugpy`",
            last_error.lines().last().unwrap_or_default()
        )
    };
    missing("debugpy", searched, &message)
}

/// lldb's DAP server is `lldb-dap` (LLVM ≥ 18) or `lldb-vscode` (older),
/// often with a version suffix. Newest lldb-dap wins, then newest lldb-vscode.
async fn check_lldb(path: Option<&str>) -> AdapterCheck {
    let mut dirs = path_dirs(path);
    dirs.extend(llvm_dirs());
    let mut searched = Vec::new();
    // (is lldb-dap, version, path)
    let mut found: Vec<(bool, u32, PathBuf)> = Vec::new();
    for dir in &dirs {
        searched.push(format!(
            "{}/{{lldb-dap,lldb-dap-N,lldb-vscode,lldb-vscode-N}}",
            dir.display()
        ));
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let (is_dap, rest) = if let Some(rest) = name.strip_prefix("lldb-dap") {
                (true, rest)
            } else if let Some(rest) = name.strip_prefix("lldb-vscode") {
                (false, rest)
            } else {
                continue;
            };
            let version = match rest.strip_prefix('-') {
                None if rest.is_empty() => 0,
                Some(v) => match v.parse::<u32>() {
                    Ok(v) => v,
                    Err(_) => continue,
                },
                None => continue,
            };
            let path = entry.path();
            if is_executable(&path) {
                found.push((is_dap, version, path));
            }
        }
    }
    found.sort_by_key(|(is_dap, version, _)| std::cmp::Reverse((*is_dap, *version)));
    let Some((_, suffix, path)) = found.into_iter().next() else {
        return missing(
            "lldb",
            searched,
            "install lldb (Debian: `apt-get install lldb-19` for lldb-dap-19)",
        );
    };
    let version = lldb_version(&path, suffix).await;
    AdapterCheck {
        adapter: "lldb".into(),
        status: CheckStatus::Ok.into(),
        command: vec![path.display().to_string()],
        version,
        searched,
        message: String::new(),
    }
}

/// lldb-vscode has no `--version` (it would wait for DAP on stdin), so ask the
/// `lldb` binary installed beside it.
async fn lldb_version(adapter: &Path, suffix: u32) -> String {
    let dir = adapter.parent().unwrap_or(Path::new("/"));
    let lldb = if suffix > 0 {
        dir.join(format!("lldb-{suffix}"))
    } else {
        dir.join("lldb")
    };
    if is_executable(&lldb)
        && let Ok(out) = run(&lldb, &["--version"]).await
        && let Some(line) = out.lines().next()
    {
        return line.trim().to_owned();
    }
    if suffix > 0 {
        suffix.to_string()
    } else {
        String::new()
    }
}

async fn check_dlv(path: Option<&str>) -> AdapterCheck {
    let mut candidates: Vec<PathBuf> = path_dirs(path).into_iter().map(|d| d.join("dlv")).collect();
    if let Some(gopath) = std::env::var_os("GOPATH") {
        for p in std::env::split_paths(&gopath) {
            candidates.push(p.join("bin/dlv"));
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(PathBuf::from(home).join("go/bin/dlv"));
    }
    let mut unique = Vec::new();
    for c in candidates {
        if !unique.contains(&c) {
            unique.push(c);
        }
    }
    let candidates = unique;
    let mut searched = Vec::new();
    for path in candidates {
        searched.push(path.display().to_string());
        if !is_executable(&path) {
            continue;
        }
        return match run(&path, &["version"]).await {
            Ok(out) => AdapterCheck {
                adapter: "dlv".into(),
                status: CheckStatus::Ok.into(),
                command: vec![path.display().to_string(), "dap".into()],
                version: out
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("Version:"))
                    .unwrap_or_default()
                    .trim()
                    .to_owned(),
                searched,
                message: String::new(),
            },
            Err(err) => AdapterCheck {
                adapter: "dlv".into(),
                status: CheckStatus::Broken.into(),
                command: vec![path.display().to_string(), "dap".into()],
                searched,
                message: err,
                ..Default::default()
            },
        };
    }
    missing(
        "dlv",
        searched,
        "install Delve with `go install github.com/go-delve/delve/cmd/dlv@latest`",
    )
}

async fn check_gdb(path: Option<&str>) -> AdapterCheck {
    let mut searched = Vec::new();
    for dir in path_dirs(path) {
        let path = dir.join("gdb");
        searched.push(path.display().to_string());
        if !is_executable(&path) {
            continue;
        }
        let out = match run(&path, &["--version"]).await {
            Ok(out) => out,
            Err(err) => {
                return AdapterCheck {
                    adapter: "gdb".into(),
                    status: CheckStatus::Broken.into(),
                    searched,
                    message: err,
                    ..Default::default()
                };
            }
        };
        let first = out.lines().next().unwrap_or_default().trim().to_owned();
        let version = first.rsplit(' ').next().unwrap_or_default().to_owned();
        let major: u32 = version
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        let usable = major >= GDB_MIN_MAJOR;
        return AdapterCheck {
            adapter: "gdb".into(),
            status: if usable {
                CheckStatus::Ok
            } else {
                CheckStatus::TooOld
            }
            .into(),
            command: vec![path.display().to_string(), "-i".into(), "dap".into()],
            version,
            searched,
            message: if usable {
                String::new()
            } else {
                format!(
                    "{first}: gdb speaks DAP from version {GDB_MIN_MAJOR}; stepd will not use this one"
                )
            },
        };
    }
    missing("gdb", searched, "install gdb 14 or newer")
}

//! What each adapter is called with: the command that starts it and the
//! arguments of its `launch` and `attach` requests.

use serde_json::{Value, json};
use stepd_proto::v1::{CheckStatus, ErrorReason};

pub use super::kind::AdapterKind;
use super::registry;
use stepd_core::error::{ApiError, ApiResult};

impl Adapter {
    /// The registry name of its kind.
    pub fn name(&self) -> &'static str {
        self.kind.name()
    }
}

/// A resolved adapter, ready to start.
#[derive(Debug, Clone)]
pub struct Adapter {
    /// Its kind, which carries its quirks.
    pub kind: AdapterKind,
    /// Command line that speaks DAP on stdio.
    pub command: Vec<String>,
    /// Version as reported, when known.
    pub version: String,
}

/// Guesses the adapter from the program when none is named.
pub fn guess(program: &str) -> AdapterKind {
    if program.ends_with(".py") {
        AdapterKind::Debugpy
    } else if program.ends_with(".go")
        || std::path::Path::new(program).join("go.mod").exists()
        || is_go_binary(std::path::Path::new(program))
    {
        AdapterKind::Dlv
    } else {
        AdapterKind::Lldb
    }
}

/// Guesses the adapter for a running process from its executable: a
/// Python interpreter (python3.12, pypy3…) is debugpy's; otherwise as for
/// a program (a Go binary is dlv's, anything else lldb's).
pub fn guess_process(pid: i64) -> AdapterKind {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    let name = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.starts_with("python") || name.starts_with("pypy") {
        return AdapterKind::Debugpy;
    }
    guess(&format!("/proc/{pid}/exe"))
}

/// The magic that starts Go's build information in every binary the Go
/// linker writes (debug/buildinfo).
const GO_BUILDINFO_MAGIC: &[u8] = b"\xff Go buildinf:";

/// Whether `path` is a binary built by Go: lldb cannot debug those ("Could
/// not find type system for language go"), dlv can. An ELF file is read for
/// its `.go.buildinfo` section; other formats are searched for the
/// build-info magic in their first 32 MiB, where Go's linkers put it.
pub fn is_go_binary(path: &std::path::Path) -> bool {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let mut ident = [0u8; 64];
    if file.read_exact(&mut ident).is_err() {
        return false;
    }
    if ident.starts_with(b"\x7fELF") {
        return elf_section(&mut file, &ident, ".go.buildinfo")
            .is_some_and(|start| start.starts_with(GO_BUILDINFO_MAGIC));
    }
    let mut head = ident.to_vec();
    if file.take(32 * 1024 * 1024).read_to_end(&mut head).is_err() {
        return false;
    }
    // The blob is 16-byte aligned.
    head.chunks(16).any(|c| c.starts_with(GO_BUILDINFO_MAGIC))
}

/// The first bytes of the ELF section `name`, from the section headers.
fn elf_section(file: &mut std::fs::File, ident: &[u8; 64], name: &str) -> Option<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let wide = match ident[4] {
        1 => false,
        2 => true,
        _ => return None,
    };
    let little = match ident[5] {
        1 => true,
        2 => false,
        _ => return None,
    };
    let int = |b: &[u8]| -> u64 {
        let mut v = 0u64;
        for (i, byte) in b.iter().enumerate() {
            let shift = if little { i } else { b.len() - 1 - i };
            v |= u64::from(*byte) << (8 * shift);
        }
        v
    };
    let (shoff, entsize, count, strndx) = if wide {
        (
            int(&ident[0x28..0x30]),
            int(&ident[0x3a..0x3c]),
            int(&ident[0x3c..0x3e]),
            int(&ident[0x3e..0x40]),
        )
    } else {
        (
            int(&ident[0x20..0x24]),
            int(&ident[0x2e..0x30]),
            int(&ident[0x30..0x32]),
            int(&ident[0x32..0x34]),
        )
    };
    let min_entsize = if wide { 0x40 } else { 0x28 };
    if entsize < min_entsize || count == 0 || count > 0xff00 || strndx >= count {
        return None;
    }
    let mut table = vec![0u8; usize::try_from(entsize * count).ok()?];
    file.seek(SeekFrom::Start(shoff)).ok()?;
    file.read_exact(&mut table).ok()?;
    let header = |i: u64| -> (u64, u64, u64) {
        let at = usize::try_from(i * entsize).unwrap_or(usize::MAX);
        let h = &table[at..at + usize::try_from(min_entsize).unwrap_or(0)];
        if wide {
            (int(&h[0..4]), int(&h[0x18..0x20]), int(&h[0x20..0x28]))
        } else {
            (int(&h[0..4]), int(&h[0x10..0x14]), int(&h[0x14..0x18]))
        }
    };
    let mut read = |offset: u64, len: u64| -> Option<Vec<u8>> {
        let mut buf = vec![0u8; usize::try_from(len.min(1 << 20)).ok()?];
        file.seek(SeekFrom::Start(offset)).ok()?;
        file.read_exact(&mut buf).ok()?;
        Some(buf)
    };
    let (_, str_offset, str_size) = header(strndx);
    let names = read(str_offset, str_size)?;
    (0..count)
        .find_map(|i| {
            let (name_at, offset, size) = header(i);
            let rest = names.get(usize::try_from(name_at).ok()?..)?;
            let end = rest.iter().position(|b| *b == 0)?;
            (&rest[..end] == name.as_bytes()).then_some((offset, size))
        })
        .and_then(|(offset, size)| read(offset, size.min(GO_BUILDINFO_MAGIC.len() as u64)))
}

/// Finds the adapter on `path` (a launch's PATH), then on the daemon's own
/// PATH, or fails with ADAPTER_NOT_FOUND listing where it looked and on
/// whose PATH.
/// A custom command keeps the quirks of a named adapter kind (e.g. `lldb`
/// with `lldb-vscode-14`); without a name it is treated as plain DAP.
pub async fn resolve(name: &str, custom: &[String], path: Option<&str>) -> ApiResult<Adapter> {
    if !custom.is_empty() {
        return Ok(Adapter {
            kind: AdapterKind::named(name).unwrap_or(AdapterKind::Custom),
            command: custom.to_vec(),
            version: String::new(),
        });
    }
    if let Some(found) = cached(name, path) {
        return Ok(found);
    }
    let unknown = || {
        ApiError::invalid_field(
            "adapter",
            format!(
                "unknown adapter {}; use one of {} or adapter_command",
                stepd_core::error::quote(name),
                registry::known_names()
            ),
        )
    };
    let kind = AdapterKind::named(name).ok_or_else(unknown)?;
    let mut check = registry::check(kind, path).await.ok_or_else(unknown)?;
    if check.status != CheckStatus::Ok as i32 && path.is_some() {
        // Not on the launch's PATH: the daemon's own may still have it.
        let daemons = registry::check(kind, None).await.ok_or_else(unknown)?;
        let mut searched = std::mem::take(&mut check.searched);
        if daemons.status == CheckStatus::Ok as i32 {
            check = daemons;
        } else {
            searched.extend(daemons.searched);
            check.searched = searched;
        }
    }
    if check.status != CheckStatus::Ok as i32 {
        let whose = match path {
            Some(_) => {
                "looked on the launch's PATH (its env), then on the daemon's, which it keeps \
                 from its start"
            }
            None => {
                "looked on the daemon's PATH, which it keeps from its start: restart \
                 the daemon from a shell that has the adapter, or launch with PATH in env"
            }
        };
        return Err(ApiError::new(
            ErrorReason::AdapterNotFound,
            format!("{name}: {}; {whose}", check.message),
        )
        .with("adapter", name)
        .with("searched", check.searched.join("\n")));
    }
    let mut command = check.command;
    if kind.listens_on_socket() {
        // Only the program: stepd adds the listening arguments (`transport`).
        command.truncate(1);
    }
    let adapter = Adapter {
        kind,
        command,
        version: check.version,
    };
    remember(&adapter, path);
    Ok(adapter)
}

/// How long a found adapter is trusted without looking again. Looking means
/// running the adapter's version check (for debugpy, a Python start), which
/// would otherwise be paid on every launch.
const FOUND_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// Found adapters by kind name and the PATH they were found on.
type Found = std::sync::Mutex<
    std::collections::HashMap<(String, Option<String>), (std::time::Instant, Adapter)>,
>;

fn found() -> &'static Found {
    static FOUND: std::sync::OnceLock<Found> = std::sync::OnceLock::new();
    FOUND.get_or_init(Default::default)
}

fn cached(name: &str, path: Option<&str>) -> Option<Adapter> {
    let map = found().lock().unwrap_or_else(|e| e.into_inner());
    map.get(&(name.to_owned(), path.map(str::to_owned)))
        .filter(|(at, _)| at.elapsed() < FOUND_TTL)
        .map(|(_, adapter)| adapter.clone())
}

fn remember(adapter: &Adapter, path: Option<&str>) {
    found().lock().unwrap_or_else(|e| e.into_inner()).insert(
        (adapter.name().to_owned(), path.map(str::to_owned)),
        (std::time::Instant::now(), adapter.clone()),
    );
}

/// Forgets a found adapter (it failed to start), so the next launch looks again.
pub fn forget(name: &str) {
    found()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(kind, _), _| kind != name);
}

/// What a launch asks for, adapter-independently.
pub struct LaunchSpec<'a> {
    /// Program to run.
    pub program: &'a str,
    /// Its arguments.
    pub args: &'a [String],
    /// Working directory ("" = inherit).
    pub cwd: &'a str,
    /// Environment additions.
    pub env: &'a std::collections::HashMap<String, String>,
    /// Stop on entry.
    pub stop_on_entry: bool,
    /// Keep to the program's own code (None = the adapter's default).
    pub just_my_code: Option<bool>,
    /// Adapter-specific extras, merged last.
    pub extra: Option<&'a prost_types::Struct>,
}

/// Refuses a `just_my_code` the adapter cannot carry out, before anything
/// starts: dlv and gdb step into every package and cannot be told not to,
/// and stepd knows no such setting of a custom adapter.
pub fn check_just_my_code(kind: AdapterKind, just_my_code: Option<bool>) -> ApiResult<()> {
    let refused = match (kind, just_my_code) {
        (_, None) | (AdapterKind::Debugpy | AdapterKind::Lldb, _) => return Ok(()),
        (AdapterKind::Dlv | AdapterKind::Gdb, Some(false)) => return Ok(()),
        (AdapterKind::Dlv | AdapterKind::Gdb, Some(true)) => format!(
            "{} always steps into every package and cannot keep to your code; leave \
             just_my_code unset",
            kind.name()
        ),
        (AdapterKind::Custom, Some(_)) => "stepd knows no just-my-code setting of a custom \
             adapter; set the adapter's own option in adapter_options"
            .to_owned(),
    };
    Err(ApiError::invalid_field("just_my_code", refused))
}

/// Writes `just_my_code` into launch or attach arguments, in the adapter's
/// words: debugpy's `justMyCode` (on unless turned off); for lldb, off means
/// stepping into functions without debug information and into `std::`.
pub fn apply_just_my_code(kind: AdapterKind, just_my_code: Option<bool>, args: &mut Value) {
    match kind {
        AdapterKind::Debugpy => args["justMyCode"] = json!(just_my_code.unwrap_or(true)),
        AdapterKind::Lldb if just_my_code == Some(false) => {
            let commands = [
                "settings set target.process.thread.step-in-avoid-nodebug false",
                "settings set target.process.thread.step-avoid-regexp \"\"",
            ];
            match args["initCommands"].as_array_mut() {
                Some(list) => list.extend(commands.map(|c| json!(c))),
                None => args["initCommands"] = json!(commands),
            }
        }
        _ => {}
    }
}

/// The `launch` arguments for `adapter`.
pub fn launch_arguments(adapter: &Adapter, spec: &LaunchSpec<'_>) -> Value {
    let mut args = json!({
        "program": spec.program,
        "args": spec.args,
        "stopOnEntry": spec.stop_on_entry,
    });
    if !spec.cwd.is_empty() {
        args["cwd"] = json!(spec.cwd);
    }
    match adapter.kind {
        AdapterKind::Debugpy => {
            args["type"] = json!("python");
            args["request"] = json!("launch");
            args["console"] = json!("internalConsole");
            args["redirectOutput"] = json!(true);
            args["env"] = json!(spec.env);
        }
        AdapterKind::Lldb => {
            // lldb-vscode takes the environment as "KEY=VALUE" strings.
            let env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            args["env"] = json!(env);
        }
        AdapterKind::Dlv => {
            args["mode"] = json!(if spec.program.ends_with(".go") {
                "debug"
            } else {
                "exec"
            });
            args["env"] = json!(spec.env);
            // Program output travels as DAP output events, not to dlv's terminal.
            args["outputMode"] = json!("remote");
        }
        AdapterKind::Gdb | AdapterKind::Custom => {
            args["env"] = json!(spec.env);
        }
    }
    apply_just_my_code(adapter.kind, spec.just_my_code, &mut args);
    if let Some(extra) = spec.extra {
        merge(&mut args, stepd_core::json::from_struct(extra));
    }
    args
}

fn merge(into: &mut Value, extra: Value) {
    if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
        for (k, v) in extra {
            into.insert(k, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_python_interpreter_is_guessed_as_debugpy() {
        // The interpreter itself, not a launcher script (pyenv's shims are bash).
        let mut python = std::process::Command::new("/usr/bin/python3")
            .args(["-c", "import sys; sys.stdin.read()"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = i64::from(python.id());
        assert_eq!(guess_process(pid), AdapterKind::Debugpy);
        assert_eq!(
            guess_process(i64::from(std::process::id())),
            AdapterKind::Lldb
        );
        drop(python.stdin.take());
        python.wait().unwrap();
    }

    #[test]
    fn only_go_binaries_are_guessed_as_go() {
        let dir = std::env::temp_dir().join(format!("stepd-guess-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Not ELF, but carrying the magic at an aligned offset (as in Mach-O).
        let mut blob = vec![0u8; 4096];
        blob[1024..1024 + GO_BUILDINFO_MAGIC.len()].copy_from_slice(GO_BUILDINFO_MAGIC);
        std::fs::write(dir.join("macho"), &blob).unwrap();
        std::fs::write(dir.join("script"), b"#!/bin/sh\necho hi\n").unwrap();
        assert!(is_go_binary(&dir.join("macho")));
        assert!(!is_go_binary(&dir.join("script")));
        assert!(!is_go_binary(&dir.join("missing")));
        // This test's own executable is an ELF file built by Rust, not Go.
        let me = std::env::current_exe().unwrap();
        assert!(!is_go_binary(&me));
        assert_eq!(guess(me.to_str().unwrap()), AdapterKind::Lldb);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! What each adapter is called with: the command that starts it and the
//! arguments of its `launch` and `attach` requests.

use serde_json::{Value, json};
use stepd_proto::v1::{CheckStatus, ErrorReason};

use super::registry;
use crate::error::{ApiError, ApiResult};

/// A resolved adapter, ready to start.
#[derive(Debug, Clone)]
pub struct Adapter {
    /// Registry name ("debugpy", "lldb", "dlv", "gdb", "custom").
    pub name: String,
    /// Command line that speaks DAP on stdio.
    pub command: Vec<String>,
    /// Version as reported, when known.
    pub version: String,
}

/// The script debugpy's adapter is started through (why: in the script).
const DEBUGPY_ADAPTER_START: &str = include_str!("debugpy_adapter.py");

/// The command line that starts `adapter`. It is the adapter's command, except
/// that `python3 -m debugpy.adapter` runs as `python3 -c <start script>`,
/// which removes debugpy's 40 ms per request (see `debugpy_adapter.py`).
pub fn spawn_command(adapter: &Adapter) -> Vec<String> {
    let mut command = adapter.command.clone();
    if adapter.name == "debugpy"
        && command.len() >= 3
        && command[1] == "-m"
        && command[2] == "debugpy.adapter"
    {
        command[1] = "-c".into();
        command[2] = DEBUGPY_ADAPTER_START.into();
    }
    command
}

/// Whether requests for an earlier stop's handles are harmless: the adapter
/// answers them with an error and nothing else. debugpy's adapter also writes
/// each such failure to its stderr, which is the session's output, so it
/// never gets requests sent ahead (`session/actor/locals.rs`).
pub fn quiet_on_stale_handles(name: &str) -> bool {
    matches!(name, "lldb" | "dlv")
}

/// Guesses the adapter from the program when none is named.
pub fn guess(program: &str) -> &'static str {
    if program.ends_with(".py") {
        "debugpy"
    } else if program.ends_with(".go") || std::path::Path::new(program).join("go.mod").exists() {
        "dlv"
    } else {
        "lldb"
    }
}

/// Finds the adapter, or fails with ADAPTER_NOT_FOUND listing where it looked.
/// A custom command keeps the quirks of a named adapter kind (e.g. `lldb`
/// with `lldb-vscode-14`); without a name it is treated as plain DAP.
pub async fn resolve(name: &str, custom: &[String]) -> ApiResult<Adapter> {
    if !custom.is_empty() {
        let known = registry::ADAPTERS.contains(&name);
        return Ok(Adapter {
            name: if known { name } else { "custom" }.into(),
            command: custom.to_vec(),
            version: String::new(),
        });
    }
    if let Some(found) = cached(name) {
        return Ok(found);
    }
    let check = registry::check(name).await.ok_or_else(|| {
        ApiError::invalid_field(
            "adapter",
            format!(
                "unknown adapter {name:?}; use one of {} or adapter_command",
                registry::ADAPTERS.join(", ")
            ),
        )
    })?;
    if check.status != CheckStatus::Ok as i32 {
        return Err(ApiError::new(
            ErrorReason::AdapterNotFound,
            format!("{name}: {}", check.message),
        )
        .with("adapter", name)
        .with("searched", check.searched.join("\n")));
    }
    let mut command = check.command;
    if name == "dlv" {
        // `dlv dap` speaks DAP over a socket only; stepd connects to it.
        command.truncate(1);
    }
    let adapter = Adapter {
        name: name.to_owned(),
        command,
        version: check.version,
    };
    remember(&adapter);
    Ok(adapter)
}

/// How long a found adapter is trusted without looking again. Looking means
/// running the adapter's version check (for debugpy, a Python start), which
/// would otherwise be paid on every launch.
const FOUND_TTL: std::time::Duration = std::time::Duration::from_secs(60);

type Found = std::sync::Mutex<std::collections::HashMap<String, (std::time::Instant, Adapter)>>;

fn found() -> &'static Found {
    static FOUND: std::sync::OnceLock<Found> = std::sync::OnceLock::new();
    FOUND.get_or_init(Default::default)
}

fn cached(name: &str) -> Option<Adapter> {
    let map = found().lock().unwrap_or_else(|e| e.into_inner());
    map.get(name)
        .filter(|(at, _)| at.elapsed() < FOUND_TTL)
        .map(|(_, adapter)| adapter.clone())
}

fn remember(adapter: &Adapter) {
    found().lock().unwrap_or_else(|e| e.into_inner()).insert(
        adapter.name.clone(),
        (std::time::Instant::now(), adapter.clone()),
    );
}

/// Forgets a found adapter (it failed to start), so the next launch looks again.
pub fn forget(name: &str) {
    found()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(name);
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
    /// Adapter-specific extras, merged last.
    pub extra: Option<&'a prost_types::Struct>,
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
    match adapter.name.as_str() {
        "debugpy" => {
            args["type"] = json!("python");
            args["request"] = json!("launch");
            args["console"] = json!("internalConsole");
            args["redirectOutput"] = json!(true);
            args["justMyCode"] = json!(true);
            args["env"] = json!(spec.env);
        }
        "lldb" => {
            // lldb-vscode takes the environment as "KEY=VALUE" strings.
            let env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            args["env"] = json!(env);
        }
        "dlv" => {
            args["mode"] = json!(if spec.program.ends_with(".go") {
                "debug"
            } else {
                "exec"
            });
            args["env"] = json!(spec.env);
            // Program output travels as DAP output events, not to dlv's terminal.
            args["outputMode"] = json!("remote");
        }
        _ => {
            args["env"] = json!(spec.env);
        }
    }
    if let Some(extra) = spec.extra {
        merge(&mut args, crate::json::from_struct(extra));
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

    fn adapter(name: &str, command: &[&str]) -> Adapter {
        Adapter {
            name: name.into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            version: String::new(),
        }
    }

    #[test]
    fn debugpy_starts_through_the_start_script() {
        let command = spawn_command(&adapter("debugpy", &["py", "-m", "debugpy.adapter", "--x"]));
        assert_eq!(command[..2], ["py", "-c"]);
        assert!(command[2].contains("runpy.run_module(\"debugpy.adapter\""));
        assert_eq!(command[3], "--x");
    }

    #[test]
    fn other_commands_start_as_given() {
        for (name, argv) in [
            ("debugpy", &["py", "/opt/my_adapter.py"][..]),
            ("custom", &["py", "-m", "debugpy.adapter"][..]),
            ("lldb", &["lldb-dap-19"][..]),
        ] {
            assert_eq!(spawn_command(&adapter(name, argv)), argv);
        }
    }
}

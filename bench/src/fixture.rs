//! What the Step benchmarks (`step`, its profile, `export`) share: the
//! debuggee each adapter steps through, and the adapter's name in their tables.

use std::path::PathBuf;

use stepd_e2e::{line_of, repo_root};

use crate::direct::AdapterCmd;

/// The debuggee of an adapter, built, and the line of its first stop:
/// (program, source, line).
pub fn step_fixture(adapter: &AdapterCmd) -> anyhow::Result<(PathBuf, PathBuf, u32)> {
    let dir = repo_root().join("bench/fixtures");
    let (program, source) = match adapter.kind.name() {
        "debugpy" => (dir.join("step_loop.py"), dir.join("step_loop.py")),
        _ => (dir.join("build/step_loop"), dir.join("step_loop.c")),
    };
    anyhow::ensure!(
        program.is_file(),
        "{} is missing; run bench/run",
        program.display()
    );
    let line = line_of(&source, "start");
    Ok((program, source, line))
}

/// An adapter's name in the benchmarks' tables.
pub fn label(adapter: &AdapterCmd) -> &'static str {
    match adapter.kind.name() {
        "debugpy" => "debugpy",
        _ => "lldb-dap-19",
    }
}

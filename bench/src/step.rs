//! `stepd-bench step`: one `Step{OVER}` through stepd against the same `next`
//! sent straight to the adapter, both sessions alive at once and stepped
//! alternately so they share the machine's conditions.

use std::path::PathBuf;

use serde_json::json;
use stepd_e2e::{Daemon, line_of, repo_root};

use crate::{
    direct::{AdapterCmd, Direct},
    profile,
    stats::{Samples, machine, write_result},
    via_stepd::{ViaStepd, add_breakpoint},
};

/// The debuggee of an adapter: (program, source).
pub fn step_fixture(adapter: &AdapterCmd) -> (PathBuf, PathBuf) {
    let dir = repo_root().join("bench/fixtures");
    match adapter.kind {
        "debugpy" => (dir.join("step_loop.py"), dir.join("step_loop.py")),
        _ => (dir.join("build/step_loop"), dir.join("step_loop.c")),
    }
}

/// Runs the comparison for debugpy and lldb-dap.
pub async fn run(steps: usize, warmup: usize, profile_steps: usize) -> anyhow::Result<()> {
    let mut results = Vec::new();
    println!(
        "| adapter | path | steps | median | p90 | p99 |\n| --- | --- | --- | --- | --- | --- |"
    );
    let mut verdicts = Vec::new();
    for adapter in [AdapterCmd::debugpy(), AdapterCmd::lldb()] {
        let (program, source) = step_fixture(&adapter);
        anyhow::ensure!(
            program.is_file(),
            "{} is missing; run bench/run",
            program.display()
        );
        let line = line_of(&source, "start");
        let daemon = Daemon::start(&["--no-unix-socket"]).await;
        add_breakpoint(&daemon, &source, line).await?;
        let (mut direct, _) = Direct::launch(&adapter, &program, &source, line).await?;
        let mut via = ViaStepd::launch(&daemon, &adapter, &program).await?.session;
        let (mut raw, mut full, mut stepd) =
            (Samples::default(), Samples::default(), Samples::default());
        for i in 0..warmup + steps {
            let (d, s) = if i % 2 == 0 {
                let d = direct.step().await?;
                (d, via.step().await?.0)
            } else {
                let s = via.step().await?.0;
                (direct.step().await?, s)
            };
            if i >= warmup {
                raw.push(d.raw);
                full.push(d.full);
                stepd.push(s);
            }
        }
        direct.stop().await;
        via.stop().await;
        daemon.stop().await;

        let name = match adapter.kind {
            "debugpy" => "debugpy",
            _ => "lldb-dap-19",
        };
        for (path, s) in [
            ("direct: next → stopped", &raw),
            (
                "direct: next → stopped + stackTrace + scopes + variables",
                &full,
            ),
            ("stepd: Step{OVER} (wait)", &stepd),
        ] {
            println!("| {name} | {path} | {} | {} |", s.len(), s.cells());
        }
        let (m_raw, m_full, m_stepd) = (raw.median_ms(), full.median_ms(), stepd.median_ms());
        let overhead = json!({
            "ratio_vs_raw": m_stepd / m_raw,
            "ratio_vs_full": m_stepd / m_full,
            "added_ms_vs_raw": m_stepd - m_raw,
            "added_ms_vs_full": m_stepd - m_full,
        });
        let (target, met_raw, met_full) = match adapter.kind {
            "debugpy" => (
                "at most +10 % at the median",
                m_stepd <= m_raw * 1.10,
                m_stepd <= m_full * 1.10,
            ),
            _ => (
                "at most +0.5 ms at the median",
                m_stepd - m_raw <= 0.5,
                m_stepd - m_full <= 0.5,
            ),
        };
        verdicts.push(format!(
            "| {name} | {target} | {:.2}× / {:+.2} ms ({}) | {:.2}× / {:+.2} ms ({}) |",
            m_stepd / m_raw,
            m_stepd - m_raw,
            if met_raw { "met" } else { "missed" },
            m_stepd / m_full,
            m_stepd - m_full,
            if met_full { "met" } else { "missed" },
        ));
        results.push(json!({
            "adapter": name,
            "program": program.strip_prefix(repo_root()).unwrap_or(&program).display().to_string(),
            "steps": steps,
            "warmup": warmup,
            "direct_raw_us": raw.summary(),
            "direct_full_us": full.summary(),
            "stepd_us": stepd.summary(),
            "overhead_at_median": overhead,
            "target": target,
            "target_met_vs_raw": met_raw,
            "target_met_vs_full": met_full,
            "samples_us": {"direct_raw": raw.raw(), "direct_full": full.raw(), "stepd": stepd.raw()},
        }));
    }
    println!();
    println!(
        "| adapter | target | stepd vs direct next → stopped | stepd vs direct with the pause's round trips |\n| --- | --- | --- | --- |"
    );
    for v in &verdicts {
        println!("{v}");
    }
    let mut profiles = Vec::new();
    if profile_steps > 0 {
        println!();
        for adapter in [AdapterCmd::debugpy(), AdapterCmd::lldb()] {
            profiles.push(profile::run(&adapter, profile_steps).await?);
        }
    }
    write_result(
        "step",
        &json!({"machine": machine(), "step": results, "profile": profiles}),
    )
}

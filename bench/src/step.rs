//! `stepd-bench step`: one `Step{OVER}` through stepd against the same `next`
//! sent straight to the adapter, both sessions alive at once and stepped
//! alternately so they share the machine's conditions.

use serde_json::json;
use stepd_e2e::{Daemon, repo_root};

use crate::{
    direct::{AdapterCmd, Direct},
    fixture::{label, step_fixture},
    profile,
    stats::{Samples, machine, write_result},
    via_stepd::{ViaStepd, add_breakpoint},
};

/// The direct baselines of an adapter, each with its label.
fn baselines(kind: &str) -> Vec<(&'static str, AdapterCmd)> {
    match kind {
        "debugpy" => vec![
            ("direct (stock adapter)", AdapterCmd::debugpy_stock()),
            ("direct (stepd's adapter start)", AdapterCmd::debugpy()),
        ],
        _ => vec![("direct", AdapterCmd::lldb())],
    }
}

/// One direct baseline's samples.
struct Baseline {
    label: &'static str,
    raw: Samples,
    full: Samples,
}

/// Runs the comparison for debugpy and lldb-dap.
pub async fn run(steps: usize, warmup: usize, profile_steps: usize) -> anyhow::Result<()> {
    let mut results = Vec::new();
    println!(
        "| adapter | path | steps | median | p90 | p99 |\n| --- | --- | --- | --- | --- | --- |"
    );
    let mut verdicts = Vec::new();
    for adapter in [AdapterCmd::debugpy(), AdapterCmd::lldb()] {
        let (program, source, line) = step_fixture(&adapter)?;
        let daemon = Daemon::start(&["--no-unix-socket"]).await;
        add_breakpoint(&daemon, &source, line).await?;
        let (mut directs, mut sessions) = (Vec::new(), Vec::new());
        for (label, cmd) in baselines(adapter.kind.name()) {
            sessions.push(Direct::launch(&cmd, &program, &source, line).await?.0);
            directs.push(Baseline {
                label,
                raw: Samples::default(),
                full: Samples::default(),
            });
        }
        let mut via = ViaStepd::launch(&daemon, &adapter, &program).await?.session;
        let mut stepd = Samples::default();
        // Each round steps every session once; who goes first rotates.
        let paths = directs.len() + 1;
        for i in 0..warmup + steps {
            for turn in 0..paths {
                let who = (i + turn) % paths;
                if who == directs.len() {
                    let s = via.step().await?.0;
                    if i >= warmup {
                        stepd.push(s);
                    }
                } else {
                    let d = sessions[who].step().await?;
                    if i >= warmup {
                        directs[who].raw.push(d.raw);
                        directs[who].full.push(d.full);
                    }
                }
            }
        }
        for session in sessions {
            session.stop().await;
        }
        via.stop().await;
        daemon.stop().await;

        let name = label(&adapter);
        for d in &directs {
            println!(
                "| {name} | {}: next → stopped | {} | {} |",
                d.label,
                d.raw.len(),
                d.raw.cells()
            );
            println!(
                "| {name} | {}: next → stopped + stackTrace + scopes + variables | {} | {} |",
                d.label,
                d.full.len(),
                d.full.cells()
            );
        }
        println!(
            "| {name} | stepd: Step{{OVER}} (wait) | {} | {} |",
            stepd.len(),
            stepd.cells()
        );
        let m_stepd = stepd.median_ms();
        let target = match adapter.kind.name() {
            "debugpy" => "at most +10 % at the median",
            _ => "at most +0.5 ms at the median",
        };
        let met = |baseline: f64| match adapter.kind.name() {
            "debugpy" => m_stepd <= baseline * 1.10,
            _ => m_stepd - baseline <= 0.5,
        };
        let mut baselines_json = Vec::new();
        for d in &directs {
            let (m_raw, m_full) = (d.raw.median_ms(), d.full.median_ms());
            verdicts.push(format!(
                "| {name} | {} | {target} | {:.2}× / {:+.2} ms ({}) | {:.2}× / {:+.2} ms ({}) |",
                d.label,
                m_stepd / m_raw,
                m_stepd - m_raw,
                if met(m_raw) { "met" } else { "missed" },
                m_stepd / m_full,
                m_stepd - m_full,
                if met(m_full) { "met" } else { "missed" },
            ));
            baselines_json.push(json!({
                "baseline": d.label,
                "direct_raw_us": d.raw.summary(),
                "direct_full_us": d.full.summary(),
                "ratio_vs_raw": m_stepd / m_raw,
                "ratio_vs_full": m_stepd / m_full,
                "added_ms_vs_raw": m_stepd - m_raw,
                "added_ms_vs_full": m_stepd - m_full,
                "target_met_vs_raw": met(m_raw),
                "target_met_vs_full": met(m_full),
                "samples_us": {"direct_raw": d.raw.raw(), "direct_full": d.full.raw()},
            }));
        }
        results.push(json!({
            "adapter": name,
            "program": program.strip_prefix(repo_root()).unwrap_or(&program).display().to_string(),
            "steps": steps,
            "warmup": warmup,
            "target": target,
            "stepd_us": stepd.summary(),
            "stepd_samples_us": stepd.raw(),
            "baselines": baselines_json,
        }));
    }
    println!();
    println!(
        "| adapter | baseline | target | stepd vs its next → stopped | stepd vs its next + the pause's round trips |\n| --- | --- | --- | --- | --- |"
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

//! `stepd-bench export [STEPS] [WARMUP]`: the cost of OpenTelemetry export
//! on a `Step{OVER}`. Two daemons run at once, one exporting to the OTLP
//! endpoint in `STEPD_BENCH_OTLP` (traces, and metrics every second) and one
//! exporting nothing, each with a session on the same adapter; their steps
//! alternate, who goes first rotating, so every pair of samples shares the
//! machine's moment. Rounds of whole runs, as `bench/compare` makes, differ
//! by more than the few per cent measured here. `STEPD_BENCH_OTLP=none`
//! runs the control: neither daemon exports. `STEPD_BENCH_BASE_BIN` runs
//! the daemon that does not export from another build.

use anyhow::Context as _;
use serde_json::json;
use std::path::PathBuf;

use stepd_e2e::{Daemon, TempDir, stepd_bin};
use tokio::process::Command;

use crate::{
    direct::AdapterCmd,
    fixture::{label, step_fixture},
    stats::{Samples, machine, write_result},
    via_stepd::{ViaStepd, add_breakpoint},
};

const ARGS: &[&str] = &["--no-unix-socket"];

/// A daemon whose environment has no `OTEL_` variable but `otel`; `bin`
/// replaces `STEPD_BIN`'s binary.
async fn daemon(dir: &TempDir, otel: &[(&str, &str)], bin: Option<&str>) -> Daemon {
    let bin = bin.map_or_else(stepd_bin, PathBuf::from);
    let mut command: Command = Daemon::command_of(&bin, dir.path(), "127.0.0.1:0", ARGS);
    for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("OTEL_")) {
        command.env_remove(name);
    }
    for (name, value) in otel {
        command.env(name, value);
    }
    Daemon::spawn(command, dir.path()).await
}

/// Runs the comparison for debugpy and lldb-dap.
pub async fn run(steps: usize, warmup: usize) -> anyhow::Result<()> {
    let endpoint = std::env::var("STEPD_BENCH_OTLP")
        .context("STEPD_BENCH_OTLP names the OTLP endpoint (bench/compare-export starts Jaeger)")?;
    // `none`: both daemons export nothing, the control that shows the
    // comparison's own bias and noise.
    // `STEPD_BENCH_SIGNALS=traces` or `metrics` exports that signal alone,
    // to tell their costs apart.
    let endpoint_var = match std::env::var("STEPD_BENCH_SIGNALS").as_deref() {
        Ok("traces") => "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        Ok("metrics") => "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        _ => "OTEL_EXPORTER_OTLP_ENDPOINT",
    };
    let on: &[(&str, &str)] = if endpoint == "none" {
        &[]
    } else {
        &[
            (endpoint_var, endpoint.as_str()),
            ("OTEL_METRIC_EXPORT_INTERVAL", "1000"),
            ("OTEL_SERVICE_NAME", "stepd-bench"),
        ]
    };
    // `STEPD_BENCH_BASE_BIN`: the daemon that does not export runs this
    // binary (a build from before a change; with `STEPD_BENCH_OTLP=none`,
    // export off against before).
    let base = std::env::var("STEPD_BENCH_BASE_BIN").ok();
    println!(
        "| adapter | steps | export off: median | export on: median | on / off | on / off, median of pairs |\n| --- | --- | --- | --- | --- | --- |"
    );
    let mut results = Vec::new();
    for adapter in [AdapterCmd::debugpy(), AdapterCmd::lldb()] {
        let (program, source, line) = step_fixture(&adapter)?;
        let (dir_off, dir_on) = (TempDir::new("off"), TempDir::new("on"));
        let off = daemon(&dir_off, &[], base.as_deref()).await;
        let exporting = daemon(&dir_on, on, None).await;
        let mut sessions = Vec::new();
        for d in [&off, &exporting] {
            add_breakpoint(d, &source, line).await?;
            sessions.push(ViaStepd::launch(d, &adapter, &program).await?.session);
        }
        let (mut a, mut b) = (Samples::default(), Samples::default());
        let mut pairs = Vec::with_capacity(steps);
        for i in 0..warmup + steps {
            let mut taken = [0u64; 2];
            for turn in 0..2 {
                let who = (i + turn) % 2;
                let d = sessions[who].step().await?.0;
                taken[who] = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
                if i >= warmup {
                    if who == 0 { &mut a } else { &mut b }.push(d);
                }
            }
            if i >= warmup {
                pairs.push(taken[1] as f64 / taken[0].max(1) as f64);
            }
        }
        for s in sessions {
            s.stop().await;
        }
        off.stop().await;
        exporting.stop().await;
        pairs.sort_by(f64::total_cmp);
        let paired = pairs.get(pairs.len() / 2).copied().unwrap_or(f64::NAN);
        let name = label(&adapter);
        let ratio = b.median_ms() / a.median_ms();
        println!(
            "| {name} | {} | {:.3} ms | {:.3} ms | {ratio:.3} | {paired:.3} |",
            a.len(),
            a.median_ms(),
            b.median_ms()
        );
        results.push(json!({
            "adapter": name,
            "steps": steps,
            "warmup": warmup,
            "off_us": a.summary(),
            "on_us": b.summary(),
            "ratio_of_medians": ratio,
            "median_of_paired_ratios": paired,
        }));
    }
    write_result(
        "export",
        &json!({"machine": machine(), "target": "within 3 %", "step": results}),
    )
}

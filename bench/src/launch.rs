//! `stepd-bench launch`: Launch → first `stopped` event (a breakpoint on the
//! first line of a hello world), through stepd and, alternately, straight to
//! the adapter.

use serde_json::json;
use stepd_e2e::{Daemon, line_of, repo_root};

use crate::{
    direct::{AdapterCmd, Direct},
    stats::{Samples, machine, write_result},
    via_stepd::{ViaStepd, add_breakpoint},
};

/// Runs `runs` launches per adapter and path.
pub async fn run(runs: usize) -> anyhow::Result<()> {
    let dir = repo_root().join("bench/fixtures");
    let mut results = Vec::new();
    println!(
        "| program | path | runs | median | p90 | min | max |\n| --- | --- | --- | --- | --- | --- | --- |"
    );
    for (name, adapter, program, source) in [
        (
            "hello.py (debugpy)",
            AdapterCmd::debugpy(),
            dir.join("hello.py"),
            dir.join("hello.py"),
        ),
        (
            "hello.c (lldb-dap-19)",
            AdapterCmd::lldb(),
            dir.join("build/hello"),
            dir.join("hello.c"),
        ),
    ] {
        anyhow::ensure!(
            program.is_file(),
            "{} is missing; run bench/run",
            program.display()
        );
        let line = line_of(&source, "first");
        let daemon = Daemon::start(&["--no-unix-socket"]).await;
        add_breakpoint(&daemon, &source, line).await?;
        let (mut direct, mut configured, mut stopped) =
            (Samples::default(), Samples::default(), Samples::default());
        // One unmeasured launch of each warms the page cache.
        for i in 0..=runs {
            let d = Direct::launch(&adapter, &program, &source, line).await?;
            let (session, d) = (d.0, d.1);
            session.stop().await;
            let s = ViaStepd::launch(&daemon, &adapter, &program).await?;
            let (configured_in, first_stop) = (s.configured, s.first_stop);
            s.session.stop().await;
            if i > 0 {
                direct.push(d);
                configured.push(configured_in);
                stopped.push(first_stop);
            }
        }
        daemon.stop().await;
        for (path, s) in [
            ("direct: spawn adapter → stopped", &direct),
            ("stepd: Launch → answered (configured)", &configured),
            ("stepd: Launch → stopped event", &stopped),
        ] {
            println!(
                "| {name} | {path} | {} | {} | {} | {} | {} |",
                s.len(),
                crate::stats::ms(s.quantile_us(0.5)),
                crate::stats::ms(s.quantile_us(0.9)),
                crate::stats::ms(s.quantile_us(0.0)),
                crate::stats::ms(s.quantile_us(1.0)),
            );
        }
        results.push(json!({
            "program": name,
            "runs": runs,
            "direct_us": direct.summary(),
            "stepd_configured_us": configured.summary(),
            "stepd_first_stop_us": stopped.summary(),
            "stepd_minus_direct_median_ms": stopped.median_ms() - direct.median_ms(),
            "samples_us": {"direct": direct.raw(), "stepd_configured": configured.raw(), "stepd_first_stop": stopped.raw()},
        }));
    }
    write_result("launch", &json!({"machine": machine(), "launch": results}))
}

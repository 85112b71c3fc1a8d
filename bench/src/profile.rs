//! Where a Step's time goes inside stepd: a separate, shorter pass with the
//! daemon's DAP trace on (which slows it a little), matching each Step's
//! client-side send and answer instants with the instants stepd logged each
//! DAP message to and from the adapter.

use std::{path::Path, process::Stdio, time::SystemTime};

use anyhow::Context as _;
use serde_json::{Value, json};
use stepd_e2e::{Daemon, TempDir};

use crate::{
    direct::AdapterCmd,
    fixture::{label, step_fixture},
    stats::Samples,
    via_stepd::{ViaStepd, add_breakpoint},
};

/// A logged DAP message: when, which way, and the message.
struct Logged {
    at: f64,
    to_adapter: bool,
    message: Value,
}

/// Seconds since the epoch of an RFC 3339 UTC timestamp
/// ("2025-01-02T03:04:05.123456Z"); only differences matter here.
fn parse_time(ts: &str) -> Option<f64> {
    let (date, time) = ts.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let mut t = time.split(':');
    let (h, min, s) = (
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    Some(days as f64 * 86_400.0 + h * 3600.0 + min * 60.0 + s)
}

fn epoch(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// Reads the daemon's JSON log for DAP messages.
fn read_log(path: &Path) -> anyhow::Result<Vec<Logged>> {
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let Some(at) = entry["timestamp"].as_str().and_then(parse_time) else {
            continue;
        };
        // Two fields are called `message`: the event's text ("to adapter" /
        // "from adapter") and the DAP message; look for the text in the line.
        let to_adapter = line.contains(r#""message":"to adapter""#);
        if !to_adapter && !line.contains(r#""message":"from adapter""#) {
            continue;
        }
        let Some(message) = entry
            .as_object()
            .into_iter()
            .flat_map(|o| o.values())
            .filter_map(Value::as_str)
            .find_map(|s| {
                serde_json::from_str::<Value>(s)
                    .ok()
                    .filter(Value::is_object)
            })
        else {
            continue;
        };
        out.push(Logged {
            at,
            to_adapter,
            message,
        });
    }
    Ok(out)
}

/// Profiles `steps` Steps through stepd under `adapter`.
pub async fn run(adapter: &AdapterCmd, steps: usize) -> anyhow::Result<Value> {
    let (program, source, line) = step_fixture(adapter)?;
    let dir = TempDir::new("prof");
    let log_path = dir.path().join("stepd.log");
    let mut command = Daemon::command(dir.path(), &["--no-unix-socket", "--log-format", "json"]);
    command
        .env("RUST_LOG", "warn,stepd::dap::client=trace")
        .stderr(Stdio::from(std::fs::File::create(&log_path)?));
    let daemon = Daemon::spawn(command, dir.path()).await;
    add_breakpoint(&daemon, &source, line).await?;
    let mut via = ViaStepd::launch(&daemon, adapter, &program).await?.session;
    let mut windows = Vec::new();
    for i in 0..steps + 5 {
        let (_, sent, answered) = via.step().await?;
        if i >= 5 {
            windows.push((epoch(sent), epoch(answered)));
        }
    }
    via.stop().await;
    daemon.stop().await;
    let log = read_log(&log_path).context("reading the daemon's log")?;
    Ok(breakdown(adapter, &windows, &log))
}

/// When the first logged message matching `what` happened in `[from, to]`.
fn first(log: &[Logged], from: f64, to: f64, what: impl Fn(&Logged) -> bool) -> Option<f64> {
    log.iter()
        .find(|l| l.at >= from && l.at <= to && what(l))
        .map(|l| l.at)
}

fn request(l: &Logged, command: &str) -> bool {
    l.to_adapter && l.message["type"] == "request" && l.message["command"] == command
}

fn response(l: &Logged, command: &str) -> bool {
    !l.to_adapter && l.message["type"] == "response" && l.message["command"] == command
}

/// Splits each Step into its segments and prints their medians.
fn breakdown(adapter: &AdapterCmd, windows: &[(f64, f64)], log: &[Logged]) -> Value {
    const SEGMENTS: &[&str] = &[
        "Step sent → stepd sends `next` (gRPC in, actor)",
        "`next` → its response (adapter)",
        "`next` → `stopped` event (adapter)",
        "`stopped` → `stackTrace` sent (stepd)",
        "`stackTrace` sent → answered (adapter)",
        "`scopes` sent → answered (adapter)",
        "`variables` sent → answered (adapter)",
        "`stopped` → the last of the three answered",
        "last answer → Step answer received (pause built, gRPC out)",
        "whole Step (client-side, traced)",
        "adapter's share: `next` → `stopped`, plus `stackTrace` sent → last answer",
    ];
    let mut samples: Vec<Samples> = vec![Samples::default(); SEGMENTS.len()];
    let mut requests_per_step = Vec::new();
    let (mut matched, mut ahead) = (0, 0);
    for &(sent, answered) in windows {
        let at = |what: &dyn Fn(&Logged) -> bool| first(log, sent, answered + 0.001, what);
        let (
            Some(next_out),
            Some(next_in),
            Some(stopped),
            Some(st_out),
            Some(st_in),
            Some(sc_out),
            Some(sc_in),
            Some(va_out),
            Some(va_in),
        ) = (
            at(&|l| request(l, "next")),
            at(&|l| response(l, "next")),
            at(&|l| !l.to_adapter && l.message["event"] == "stopped"),
            at(&|l| request(l, "stackTrace")),
            at(&|l| response(l, "stackTrace")),
            at(&|l| request(l, "scopes")),
            at(&|l| response(l, "scopes")),
            at(&|l| request(l, "variables")),
            at(&|l| response(l, "variables")),
        )
        else {
            continue;
        };
        matched += 1;
        // Sent before the stack trace was answered: asked for ahead.
        if sc_out < st_in {
            ahead += 1;
        }
        requests_per_step.push(
            log.iter()
                .filter(|l| l.at >= sent && l.at <= answered && l.to_adapter)
                .count(),
        );
        let d = |a: f64, b: f64| std::time::Duration::from_secs_f64((b - a).max(0.0));
        let last = st_in.max(sc_in).max(va_in);
        let values = [
            d(sent, next_out),
            d(next_out, next_in),
            d(next_out, stopped),
            d(stopped.max(next_in), st_out),
            d(st_out, st_in),
            d(sc_out, sc_in),
            d(va_out, va_in),
            d(stopped, last),
            d(last, answered),
            d(sent, answered),
            d(next_out, stopped.max(next_in)) + d(st_out, last),
        ];
        for (s, v) in samples.iter_mut().zip(values) {
            s.push(v);
        }
    }
    let name = label(adapter);
    let requests = requests_per_step.iter().max().copied().unwrap_or(0);
    println!(
        "Where a Step goes under {name} ({matched} traced steps; {requests} DAP requests per step; in {ahead} of them `scopes` and `variables` went out with `stackTrace`):\n\n| segment | median | p90 |\n| --- | --- | --- |"
    );
    let mut out = serde_json::Map::new();
    for (label, s) in SEGMENTS.iter().zip(&samples) {
        println!(
            "| {label} | {} | {} |",
            crate::stats::ms(s.quantile_us(0.5)),
            crate::stats::ms(s.quantile_us(0.9))
        );
        out.insert((*label).to_owned(), s.summary());
    }
    println!();
    json!({
        "adapter": name,
        "traced_steps": matched,
        "locals_asked_ahead": ahead,
        "dap_requests_per_step": requests,
        "segments_us": out,
    })
}

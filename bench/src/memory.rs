//! `stepd-bench memory [STREAMS] [EVENTS] [EVENT_KIB]`: Subscribe streams
//! that never read while a probe publishes large events. Reports the
//! daemon's resident memory idle, at its peak and after the streams closed,
//! against `--subscriber-bytes-total`, how a stream that did not read
//! ended, and what a stream that reads got meanwhile. With
//! `STEPD_BASE_BIN` set, the same first against that (older) stepd.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use prost_types::{Value, value::Kind};
use serde_json::json;
use stepd_e2e::{
    Daemon, Subscription, TempDir,
    probe::{Probe, hello},
};
use stepd_proto::v1::{
    ObservedReport, PingRequest, Reports, Watch, connect_request::Message as In,
    daemon_service_client::DaemonServiceClient, event::Payload,
};
use tonic_types::StatusExt;

use crate::{
    fanout::rss_kib,
    stats::{machine, write_result},
};

/// The daemon's default `--subscriber-bytes-total`, in MiB.
const DEFAULT_TOTAL_MIB: u64 = 64;

/// Events published before the idle figure is taken: they fill the
/// probe session's ring (8 MiB by default) and warm the allocator, so that
/// "idle" is a daemon that has already seen such events.
const WARM_UP_BYTES: usize = 24 << 20;

/// CPU ticks (user + system) of a process.
fn cpu_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    tick(11) + tick(12)
}

/// Waits until the process has used no CPU for a second: it has done all
/// the work it was given (and freed what it lets go of).
async fn settled(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut last, mut quiet_since) = (cpu_ticks(pid), Instant::now());
    while quiet_since.elapsed() < Duration::from_secs(1) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = cpu_ticks(pid);
        if now != last {
            (last, quiet_since) = (now, Instant::now());
        }
    }
}

fn report(bytes: usize) -> In {
    In::Reports(Reports {
        observed: vec![ObservedReport {
            kind: "bench".into(),
            name: "large".into(),
            value: Some(Value {
                kind: Some(Kind::StringValue("v".repeat(bytes))),
            }),
            ..Default::default()
        }],
        ..Default::default()
    })
}

/// How a stream that did not read ends once it reads.
async fn how_it_ended(sub: &mut Subscription) -> String {
    let mut events = 0u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if Instant::now() > deadline {
            return format!("still open after {events} events");
        }
        match tokio::time::timeout(Duration::from_secs(10), sub.rx.message()).await {
            Err(_) => return format!("open, quiet after {events} events"),
            Ok(Ok(Some(response))) => match response.event.and_then(|e| e.payload) {
                Some(Payload::Gap(_)) => return format!("gap after {events} events"),
                _ => events += 1,
            },
            Ok(Ok(None)) => return format!("ended OK after {events} events"),
            Ok(Err(status)) => {
                let info = status.get_details_error_info();
                let field = |key: &str| {
                    info.as_ref()
                        .and_then(|i| i.metadata.get(key).cloned())
                        .unwrap_or_default()
                };
                return format!(
                    "{:?} {} `{}` after {events} events, resume_after_seq set: {}",
                    status.code(),
                    info.as_ref().map(|i| i.reason.clone()).unwrap_or_default(),
                    field("limit"),
                    !field("resume_after_seq").is_empty(),
                );
            }
        }
    }
}

struct Run {
    label: &'static str,
    idle: u64,
    peak: u64,
    loaded: u64,
    after: u64,
    ended: String,
    reader_events: u64,
    reader_lost: u64,
}

async fn run_one(
    label: &'static str,
    daemon: Daemon,
    streams: usize,
    events: usize,
    bytes: usize,
) -> anyhow::Result<Run> {
    let pid = daemon.child.id().unwrap_or(0);
    DaemonServiceClient::new(daemon.channel().await)
        .ping(PingRequest {})
        .await?;
    let (probe, _) = Probe::open(&daemon, hello("bench"), "").await;
    for _ in 0..WARM_UP_BYTES.div_ceil(bytes) {
        probe.send(report(bytes)).await;
    }
    settled(pid).await;
    let idle = rss_kib(pid);

    // A stream that reads everything, beside the ones that do not.
    let mut reader = Subscription::open(daemon.channel().await, Watch::default()).await;
    reader.next().await; // its snapshot
    let reading = tokio::spawn(async move {
        let (mut got, mut lost) = (0u64, 0u64);
        while let Ok(Some(response)) = reader.rx.message().await {
            match response.event.and_then(|e| e.payload) {
                Some(Payload::Observed(_)) => got += 1,
                Some(Payload::Gap(g)) => lost += g.to_seq - g.from_seq + 1,
                _ => {}
            }
        }
        (got, lost)
    });
    let mut idle_streams = Vec::with_capacity(streams);
    for _ in 0..streams {
        idle_streams.push(Subscription::open(daemon.channel().await, Watch::default()).await);
    }

    let peak = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn({
        let (peak, sampling) = (peak.clone(), sampling.clone());
        async move {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    for _ in 0..events {
        probe.send(report(bytes)).await;
    }
    settled(pid).await;
    let loaded = rss_kib(pid);

    let ended = match idle_streams.first_mut() {
        Some(stream) => how_it_ended(stream).await,
        None => "-".into(),
    };
    drop(idle_streams);
    drop(probe);
    settled(pid).await;
    let after = rss_kib(pid);
    sampling.store(false, Ordering::Relaxed);
    sampler.await?;
    // The reading stream ends with the daemon, having read what it could.
    daemon.stop().await;
    let (reader_events, reader_lost) = reading.await?;
    Ok(Run {
        label,
        idle,
        peak: peak.load(Ordering::Relaxed).max(loaded),
        loaded,
        after,
        ended,
        reader_events,
        reader_lost,
    })
}

pub async fn run(streams: usize, events: usize, kib: usize) -> anyhow::Result<()> {
    let bytes = (kib * 1024).saturating_sub(64).max(1);
    // More daemon flags (e.g. `--no-history`), for both daemons.
    let extra = std::env::var("STEPD_BENCH_FLAGS").unwrap_or_default();
    let mut flags = vec!["--no-unix-socket", "--max-subscribers-per-identity", "1000"];
    flags.extend(extra.split_whitespace());
    let mut runs = Vec::new();
    if let Some(bin) = std::env::var_os("STEPD_BASE_BIN") {
        let dir = TempDir::new("benchbase");
        let command = Daemon::command_of(
            std::path::Path::new(&bin),
            dir.path(),
            "127.0.0.1:0",
            &flags,
        );
        let daemon = Daemon::spawn(command, dir.path()).await;
        runs.push(run_one("before (STEPD_BASE_BIN)", daemon, streams, events, bytes).await?);
    }
    let daemon = Daemon::start(&flags).await;
    runs.push(run_one("this build", daemon, streams, events, bytes).await?);

    println!(
        "{streams} Subscribe streams that never read, one that reads, {events} events of {kib} KiB published by a probe (`--subscriber-bytes-total` {DEFAULT_TOTAL_MIB} MiB):"
    );
    println!();
    println!(
        "| daemon | RSS idle | RSS peak | growth at peak | growth / configured total | RSS after the streams closed | after / idle | a stream that did not read, once it reads | the reading stream |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut results = Vec::new();
    for r in &runs {
        let growth = r.peak.saturating_sub(r.idle);
        println!(
            "| {} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.2} | {:.1} MiB | {:.3} | {} | {} events, {} lost |",
            r.label,
            r.idle as f64 / 1024.0,
            r.peak as f64 / 1024.0,
            growth as f64 / 1024.0,
            growth as f64 / 1024.0 / DEFAULT_TOTAL_MIB as f64,
            r.after as f64 / 1024.0,
            r.after as f64 / r.idle as f64,
            r.ended,
            r.reader_events,
            r.reader_lost,
        );
        results.push(json!({
            "daemon": r.label,
            "rss_kib": {"idle": r.idle, "peak": r.peak, "loaded": r.loaded, "after_close": r.after},
            "growth_over_total": growth as f64 / 1024.0 / DEFAULT_TOTAL_MIB as f64,
            "after_over_idle": r.after as f64 / r.idle as f64,
            "non_reader_ended": r.ended,
            "reader": {"events": r.reader_events, "lost": r.reader_lost},
        }));
    }
    write_result(
        "memory",
        &json!({
            "machine": machine(),
            "streams": streams,
            "events": events,
            "event_kib": kib,
            "subscriber_bytes_total_mib": DEFAULT_TOTAL_MIB,
            "runs": results,
        }),
    )
}

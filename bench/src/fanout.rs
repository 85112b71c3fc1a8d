//! `stepd-bench fanout [EVENTS] [SUBSCRIBERS,...]`: events published through
//! the API (AddBreakpoint, so each one is also a database write) and delivered
//! over `Subscribe` to 1, 10 and 100 subscribers, each on its own connection.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use serde_json::json;
use stepd_e2e::{Daemon, Subscription, source_spec};
use stepd_proto::v1::{
    AddBreakpointRequest, PingRequest, Watch, breakpoint_service_client::BreakpointServiceClient,
    daemon_service_client::DaemonServiceClient, event::Payload,
};

use crate::stats::{machine, percentile, write_result};

/// Concurrent publishers (AddBreakpoint callers).
const PUBLISHERS: u32 = 8;

/// Resident memory of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// What one subscriber saw.
struct Received {
    latencies_us: Vec<u64>,
    lost: u64,
    done_at: Instant,
}

async fn subscriber(mut sub: Subscription, expected: u64) -> Received {
    let mut latencies_us = Vec::with_capacity(expected as usize);
    let mut lost = 0;
    while (latencies_us.len() as u64) + lost < expected {
        let event = sub.next().await;
        match &event.payload {
            Some(Payload::BreakpointUpdated(_)) => {
                let sent = event
                    .time
                    .map(|t| {
                        SystemTime::UNIX_EPOCH + Duration::new(t.seconds as u64, t.nanos as u32)
                    })
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                let latency = SystemTime::now()
                    .duration_since(sent)
                    .unwrap_or_default()
                    .as_micros() as u64;
                latencies_us.push(latency);
            }
            Some(Payload::Gap(gap)) => lost += gap.to_seq - gap.from_seq + 1,
            _ => {}
        }
    }
    Received {
        latencies_us,
        lost,
        done_at: Instant::now(),
    }
}

pub async fn run(events: u32, counts: &[usize]) -> anyhow::Result<()> {
    let mut results = Vec::new();
    println!(
        "| subscribers | events | publish rate (events/s) | delivered (events/s, all subscribers) | per subscriber (events/s) | latency p50 | p99 | max | lost | RSS idle | RSS subscribed | RSS after |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for &n in counts {
        let daemon = Daemon::start(&["--max-subscribers", "1000", "--no-unix-socket"]).await;
        let pid = daemon.child.id().unwrap_or(0);
        DaemonServiceClient::new(daemon.channel().await)
            .ping(PingRequest {})
            .await?;
        let rss_idle = rss_kib(pid);

        let mut subs = Vec::with_capacity(n);
        for _ in 0..n {
            let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
            sub.next().await; // the snapshot
            subs.push(sub);
        }
        let rss_subscribed = rss_kib(pid);
        let readers: Vec<_> = subs
            .into_iter()
            .map(|sub| tokio::spawn(subscriber(sub, u64::from(events))))
            .collect();

        let channel = daemon.channel().await;
        let started = Instant::now();
        let next_line = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let publishers: Vec<_> = (0..PUBLISHERS)
            .map(|_| {
                let mut client = BreakpointServiceClient::new(channel.clone());
                let next_line = next_line.clone();
                tokio::spawn(async move {
                    loop {
                        let line = next_line.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if line >= events {
                            return;
                        }
                        client
                            .add_breakpoint(AddBreakpointRequest {
                                spec: Some(source_spec("/bench.py", line + 1)),
                            })
                            .await
                            .expect("add breakpoint");
                    }
                })
            })
            .collect();
        for p in publishers {
            p.await?;
        }
        let published = started.elapsed();
        let mut latencies = Vec::new();
        let mut lost = 0;
        let mut last_done = started;
        for r in readers {
            let r = r.await?;
            latencies.extend(r.latencies_us);
            lost += r.lost;
            last_done = last_done.max(r.done_at);
        }
        let delivered = last_done - started;
        let rss_after = rss_kib(pid);
        latencies.sort_unstable();
        let (p50, p99, max) = (
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.99),
            latencies.last().copied().unwrap_or(0),
        );
        let publish_rate = f64::from(events) / published.as_secs_f64();
        let delivered_rate = latencies.len() as f64 / delivered.as_secs_f64();
        println!(
            "| {n} | {events} | {publish_rate:.0} | {delivered_rate:.0} | {:.0} | {:.2} ms | {:.2} ms | {:.2} ms | {lost} | {} MiB | {} MiB | {} MiB |",
            delivered_rate / n as f64,
            p50 as f64 / 1000.0,
            p99 as f64 / 1000.0,
            max as f64 / 1000.0,
            rss_idle / 1024,
            rss_subscribed / 1024,
            rss_after / 1024,
        );
        results.push(json!({
            "subscribers": n,
            "events": events,
            "publishers": PUBLISHERS,
            "publish_seconds": published.as_secs_f64(),
            "delivery_seconds": delivered.as_secs_f64(),
            "publish_events_per_second": publish_rate,
            "delivered_events_per_second": delivered_rate,
            "latency_us": {"p50": p50, "p99": p99, "max": max},
            "lost": lost,
            "rss_kib": {"idle": rss_idle, "subscribed": rss_subscribed, "after": rss_after},
        }));
        daemon.stop().await;
    }
    write_result(
        "fanout",
        &json!({ "machine": machine(), "fanout": results }),
    )
}

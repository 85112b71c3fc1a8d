//! `stepd-bench inspect`: the inspector over a Python list of ten elements
//! and of ten million, under debugpy. Each operation is timed on both and
//! their ratio reported: opening the list (Inspect: evaluate + first page),
//! the next page, a push straight to the last element (debugpy lists only the
//! first 100 children, so on the big list this goes through slicing) and a
//! pop. Then the daemon's resident memory is read before and after opening
//! many inspectors on each list, per inspector.

use std::{path::Path, time::Instant};

use serde_json::json;
use stepd_e2e::{Daemon, Subscription, dap, line_of, repo_root, source_spec};
use stepd_proto::v1::{
    ClearRequest, FrameExpression, InspectRequest, InspectSource, InspectorConfig, LaunchRequest,
    NextPageRequest, PopRequest, PushRequest, Watch, inspect_source::Source,
    inspector_service_client::InspectorServiceClient,
};
use tonic::transport::Channel;

use crate::stats::{Samples, machine, ms, write_result};

/// Children per page in the measured inspectors.
const PAGE_SIZE: u32 = 4;
/// Inspectors opened for the memory measurement.
const MEMORY_INSPECTORS: usize = 100;

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS for {pid}"))
}

struct Measured {
    open: Samples,
    next_page: Samples,
    push_last: Samples,
    pop: Samples,
    rss_per_inspector_kib: f64,
}

async fn open(
    client: &mut InspectorServiceClient<Channel>,
    session: &str,
) -> anyhow::Result<String> {
    Ok(client
        .inspect(InspectRequest {
            session_id: session.into(),
            source: Some(InspectSource {
                source: Some(Source::Expression(FrameExpression {
                    code: "big".into(),
                    ..Default::default()
                })),
            }),
            config: Some(InspectorConfig {
                page_size: Some(PAGE_SIZE),
                ..Default::default()
            }),
        })
        .await?
        .into_inner()
        .rendering
        .unwrap_or_default()
        .inspector_id)
}

async fn measure(program: &Path, size: u64, runs: usize) -> anyhow::Result<Measured> {
    let daemon = Daemon::start(&["--no-unix-socket", "--max-inspectors", "1000"]).await;
    let pid = daemon.child.id().unwrap_or(0);
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    dap::add_breakpoint(
        &daemon,
        source_spec(program.to_str().unwrap(), line_of(program, "inspect")),
    )
    .await;
    let session = dap::launch_with(
        &daemon,
        LaunchRequest {
            adapter: "debugpy".into(),
            program: program.to_str().unwrap().into(),
            args: vec![size.to_string()],
            ..Default::default()
        },
    )
    .await
    .session
    .unwrap_or_default()
    .id;
    dap::next_pause(&mut sub, &session).await;
    let mut c = InspectorServiceClient::new(daemon.channel().await);
    let mut m = Measured {
        open: Samples::default(),
        next_page: Samples::default(),
        push_last: Samples::default(),
        pop: Samples::default(),
        rss_per_inspector_kib: 0.0,
    };
    let last = u32::try_from(size - 1)?;
    // Two unmeasured rounds warm both processes up.
    for round in 0..runs + 2 {
        let t = Instant::now();
        let id = open(&mut c, &session).await?;
        let opened = t.elapsed();
        let t = Instant::now();
        c.next_page(NextPageRequest {
            inspector_id: id.clone(),
        })
        .await?;
        let paged = t.elapsed();
        let t = Instant::now();
        c.push(PushRequest {
            inspector_id: id.clone(),
            idx: last,
        })
        .await?;
        let pushed = t.elapsed();
        let t = Instant::now();
        c.pop(PopRequest {
            inspector_id: id.clone(),
        })
        .await?;
        let popped = t.elapsed();
        c.clear(ClearRequest { inspector_id: id }).await?;
        if round >= 2 {
            m.open.push(opened);
            m.next_page.push(paged);
            m.push_last.push(pushed);
            m.pop.push(popped);
        }
    }
    let before = rss_kib(pid)?;
    for _ in 0..MEMORY_INSPECTORS {
        let id = open(&mut c, &session).await?;
        c.next_page(NextPageRequest { inspector_id: id }).await?;
    }
    let after = rss_kib(pid)?;
    m.rss_per_inspector_kib = after.saturating_sub(before) as f64 / MEMORY_INSPECTORS as f64;
    daemon.stop().await;
    Ok(m)
}

/// Runs `runs` measured rounds per list size.
pub async fn run(runs: usize) -> anyhow::Result<()> {
    let program = repo_root().join("bench/fixtures/inspect_list.py");
    let small = measure(&program, 10, runs).await?;
    let big = measure(&program, 10_000_000, runs).await?;
    println!(
        "| operation | 10 elements (median) | 10,000,000 elements (median) | ratio |\n| --- | --- | --- | --- |"
    );
    let mut rows = Vec::new();
    for (name, s, b) in [
        ("Inspect (evaluate + first page)", &small.open, &big.open),
        ("NextPage", &small.next_page, &big.next_page),
        ("Push the last element", &small.push_last, &big.push_last),
        ("Pop", &small.pop, &big.pop),
    ] {
        let ratio = b.median_ms() / s.median_ms();
        println!(
            "| {name} | {} | {} | {ratio:.2}× |",
            ms(s.quantile_us(0.5)),
            ms(b.quantile_us(0.5))
        );
        rows.push(json!({
            "operation": name,
            "small_us": s.summary(),
            "big_us": b.summary(),
            "median_ratio": ratio,
        }));
    }
    println!();
    println!(
        "Daemon resident memory per open inspector ({MEMORY_INSPECTORS} inspectors, each on its second page): \
         {:.1} KiB on the 10-element list, {:.1} KiB on the 10,000,000-element list.",
        small.rss_per_inspector_kib, big.rss_per_inspector_kib
    );
    write_result(
        "inspect",
        &json!({
            "machine": machine(),
            "runs": runs,
            "page_size": PAGE_SIZE,
            "operations": rows,
            "rss_per_inspector_kib": {
                "small": small.rss_per_inspector_kib,
                "big": big.rss_per_inspector_kib,
                "inspectors": MEMORY_INSPECTORS,
            },
        }),
    )
}

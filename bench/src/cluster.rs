//! `stepd-bench cluster [HOLDS] [ROUNDS] [CHANGES]`: what a cluster of
//! replicas on PostgreSQL (`STEPD_TEST_POSTGRES`, as the test command
//! starts it) costs the paths a user waits on.
//!
//! - The probe hold round trip — a probe's hit held at a STOP breakpoint,
//!   seen by a subscribed client, answered with SendDebugInput, resumed —
//!   measured at the probe, in interleaved rounds: on one daemon on SQLite,
//!   on one replica on PostgreSQL (probe and client on it), and across
//!   replicas (the probe on B, the client on A, its answer forwarded).
//! - Breakpoint propagation: an AddBreakpoint on A until B's stream shows
//!   the `breakpoint_updated`.

use std::time::Instant;

use serde_json::json;
use stepd_e2e::{Daemon, Subscription, dap, postgres, probe::Probe};
use stepd_proto::v1::{
    BreakpointAction, BreakpointChange, BreakpointSpec, DebugCommand, DebugInput, Hit, PointInfo,
    SendDebugInputRequest, Watch, connect_request::Message as In, connect_response::Message as Out,
    debug_command::Command, event::Payload, session_service_client::SessionServiceClient,
};

use crate::stats::{Samples, machine, write_result};

/// A STOP breakpoint at the tool call "Bash" the probe holds at.
fn stop_at_tool_calls() -> BreakpointSpec {
    BreakpointSpec {
        action: BreakpointAction::Stop as i32,
        ..stepd_e2e::held::bash_breakpoint()
    }
}

/// A probe on `probe_on` and a client on `client_on` that answers every
/// pause of the probe's session with CONTINUE, as soon as it sees it.
struct Pair {
    probe: Probe,
    breakpoint: String,
    answering: tokio::task::JoinHandle<()>,
}

async fn pair(probe_on: &Daemon, client_on: &Daemon, breakpoint: &str) -> Pair {
    let (probe, _) = Probe::connect(probe_on, &[]).await;
    let session = probe.session_id.clone();
    let mut sub = Subscription::open(client_on.channel().await, Watch::default()).await;
    let mut client = SessionServiceClient::new(client_on.channel().await);
    let answering = tokio::spawn(async move {
        loop {
            let event = sub.next().await;
            let Some(Payload::Stopped(stopped)) = event.payload else {
                continue;
            };
            let Some(pause) = stopped.pause.filter(|p| p.session_id == session) else {
                continue;
            };
            let answer = SendDebugInputRequest {
                input: Some(DebugInput {
                    key: pause.key,
                    command: Some(DebugCommand {
                        command: Some(Command::Continue(Default::default())),
                    }),
                    ..Default::default()
                }),
            };
            if client.send_debug_input(answer).await.is_err() {
                return;
            }
        }
    });
    Pair {
        probe,
        breakpoint: breakpoint.to_owned(),
        answering,
    }
}

impl Pair {
    async fn hold(&mut self, n: usize, samples: &mut Samples) {
        let started = Instant::now();
        self.probe
            .send(In::Hit(Hit {
                hit_id: format!("h{n}"),
                point: Some(PointInfo {
                    kind: "tool_call".into(),
                    name: "Bash".into(),
                    ..Default::default()
                }),
                breakpoint_ids: vec![self.breakpoint.clone()],
                ..Default::default()
            }))
            .await;
        loop {
            if let Out::Resume(_) = stepd_e2e::probe::next(&mut self.probe.rx).await {
                break;
            }
        }
        samples.push(started.elapsed());
    }
}

/// Runs the benchmark.
pub async fn run(holds: usize, rounds: usize, changes: usize) -> anyhow::Result<()> {
    let url = postgres::database("bench_cluster");
    let single = Daemon::start(&["--no-unix-socket"]).await;
    let a = Daemon::start(&["--no-unix-socket", "--database-url", &url]).await;
    let b = Daemon::start(&["--no-unix-socket", "--database-url", &url]).await;

    let mut on_b = Subscription::open(b.channel().await, Watch::default()).await;
    on_b.next().await;
    let single_bp = dap::add_breakpoint(&single, stop_at_tool_calls()).await;
    let cluster_bp = dap::add_breakpoint(&a, stop_at_tool_calls()).await;
    on_b.wait_for("the breakpoint on B", |e| {
        matches!(&e.payload, Some(Payload::BreakpointUpdated(u))
            if u.change == BreakpointChange::Added as i32)
    })
    .await;

    let labels = [
        "one daemon (SQLite)",
        "one replica (PostgreSQL)",
        "across replicas (client on A, probe on B)",
    ];
    let mut pairs = [
        pair(&single, &single, &single_bp).await,
        pair(&b, &b, &cluster_bp).await,
        pair(&b, &a, &cluster_bp).await,
    ];
    let mut samples = [Samples::default(), Samples::default(), Samples::default()];
    // Warm-up, then rounds in turn so all see the same machine.
    for pair in &mut pairs {
        let mut warm = Samples::default();
        for n in 0..20 {
            pair.hold(n, &mut warm).await;
        }
    }
    for round in 0..rounds {
        for (i, pair) in pairs.iter_mut().enumerate() {
            for n in 0..holds {
                pair.hold(round * holds + n + 100, &mut samples[i]).await;
            }
        }
    }
    for pair in &pairs {
        pair.answering.abort();
    }

    let mut propagation = Samples::default();
    for _ in 0..changes {
        let started = Instant::now();
        dap::add_breakpoint(&a, stop_at_tool_calls()).await;
        on_b.wait_for("the breakpoint on B", |e| {
            matches!(&e.payload, Some(Payload::BreakpointUpdated(u))
                if u.change == BreakpointChange::Added as i32)
        })
        .await;
        propagation.push(started.elapsed());
    }

    println!("| hold round trip | holds | p50 | p90 | p99 | p50 / one daemon |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let base = samples[0].quantile_us(0.5).max(1) as f64;
    for (label, s) in labels.iter().zip(&samples) {
        println!(
            "| {label} | {} | {} | {:.2} |",
            s.len(),
            s.cells(),
            s.quantile_us(0.5) as f64 / base
        );
    }
    println!();
    println!("| breakpoint propagation (add on A → event on B) | changes | p50 | p90 | p99 |");
    println!("| --- | --- | --- | --- | --- |");
    println!("| | {} | {} |", propagation.len(), propagation.cells());
    write_result(
        "cluster",
        &json!({
            "machine": machine(),
            "holds": labels.iter().zip(&samples).map(|(l, s)| json!({"path": l, "summary": s.summary()})).collect::<Vec<_>>(),
            "propagation": propagation.summary(),
        }),
    )?;
    drop(pairs);
    for daemon in [single, a, b] {
        daemon.stop().await;
    }
    Ok(())
}

//! Benchmarks against the real `stepd` binary. Each prints a Markdown summary
//! and writes its raw numbers as JSON under `bench/results/`.
//!
//! - `stepd-bench fanout [EVENTS] [SUBSCRIBERS,...]`: events published through
//!   the API and delivered over `Subscribe` to N subscribers.
//! - `stepd-bench memory [STREAMS] [EVENTS] [EVENT_KIB]`: Subscribe streams
//!   that never read while large events are published; the daemon's memory
//!   against `--subscriber-bytes-total`, and after they closed.
//! - `stepd-bench step [STEPS] [WARMUP] [PROFILE_STEPS]`: one `Step{OVER}`
//!   through stepd against the same `next` sent straight to the adapter, for
//!   debugpy and lldb-dap 19; then a traced pass showing where stepd's time goes.
//! - `stepd-bench export [STEPS] [WARMUP]`: a `Step{OVER}` on a daemon
//!   exporting OpenTelemetry (to `STEPD_BENCH_OTLP`) against one that does
//!   not, stepped alternately (`bench/compare-export` starts Jaeger).
//! - `stepd-bench launch [RUNS]`: Launch → first stop of a hello world, through
//!   stepd and straight to the adapter.
//! - `stepd-bench auth [CALLS] [ROUNDS]`: Ping as the daemon's own user, with
//!   a token and with the local token (and before authentication, given
//!   `STEPD_BASE_BIN`).
//! - `stepd-bench tls [PINGS]`: a unary Ping over mutual TLS against the same
//!   over plaintext, on warm connections.
//! - `stepd-bench cluster [HOLDS] [ROUNDS] [CHANGES]`: the probe hold round
//!   trip on one daemon, on one replica and across replicas on PostgreSQL
//!   (`STEPD_TEST_POSTGRES`), and breakpoint propagation between replicas.

mod auth;
mod cluster;
mod direct;
mod export;
mod fanout;
mod fixture;
mod inspect;
mod launch;
mod memory;
mod profile;
mod stats;
mod step;
mod tls;
mod via_stepd;

const USAGE: &str = "usage: stepd-bench fanout [EVENTS] [SUBSCRIBERS,...]
       stepd-bench memory [STREAMS] [EVENTS] [EVENT_KIB]
       stepd-bench step [STEPS] [WARMUP] [PROFILE_STEPS]
       stepd-bench export [STEPS] [WARMUP]
       stepd-bench launch [RUNS]
       stepd-bench auth [CALLS] [ROUNDS]
       stepd-bench tls [PINGS]
       stepd-bench cluster [HOLDS] [ROUNDS] [CHANGES]";

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> anyhow::Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    Ok(args
        .get(i)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(default))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("fanout") => {
            let events: u32 = arg(&args, 2, 10_000)?;
            let counts: Vec<usize> = args
                .get(3)
                .map(|s| s.split(',').map(str::parse).collect::<Result<_, _>>())
                .transpose()?
                .unwrap_or_else(|| vec![1, 10, 100]);
            fanout::run(events, &counts).await
        }
        Some("memory") => {
            memory::run(
                arg(&args, 2, 100)?,
                arg(&args, 3, 1024)?,
                arg(&args, 4, 64)?,
            )
            .await
        }
        Some("step") => {
            step::run(arg(&args, 2, 200)?, arg(&args, 3, 10)?, arg(&args, 4, 50)?).await
        }
        Some("export") => export::run(arg(&args, 2, 400)?, arg(&args, 3, 20)?).await,
        Some("launch") => launch::run(arg(&args, 2, 10)?).await,
        Some("auth") => auth::run(arg(&args, 2, 500)?, arg(&args, 3, 10)?).await,
        Some("inspect") => inspect::run(arg(&args, 2, 30)?).await,
        Some("tls") => tls::run(arg(&args, 2, 5000)?).await,
        Some("cluster") => {
            cluster::run(arg(&args, 2, 200)?, arg(&args, 3, 5)?, arg(&args, 4, 200)?).await
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    }
}

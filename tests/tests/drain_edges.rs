//! What must not hold a SIGTERM: an open `grpc.health.v1.Health/Watch`
//! (from the real grpcurl) is told NOT_SERVING and closed when the drain
//! starts, whatever the drain deadline; an OTLP collector that accepts the
//! connection and never answers, or that is not there at all, adds at most
//! a second to the exit.

use std::{
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use stepd_e2e::{DEADLINE, Daemon, TempDir, jaeger::command_without_otel, repo_root};
use stepd_proto::v1::{PingRequest, daemon_service_client::DaemonServiceClient};
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// The drain deadline the daemons here get: far above anything measured, so
/// a shutdown that waited for it fails the test.
const LONG_DRAIN: &str = "60s";

/// What a SIGTERM-to-exit may take on a loaded machine, all told; the old
/// behaviour took the drain deadline (60 s) or the exporter's timeout (30 s).
const EXIT_WITHIN: Duration = Duration::from_secs(8);

fn grpcurl() -> std::path::PathBuf {
    let local = repo_root().join(".tools/bin/grpcurl");
    if local.is_file() {
        local
    } else {
        "grpcurl".into()
    }
}

#[tokio::test]
async fn an_open_health_watch_is_closed_when_the_drain_starts() {
    let mut daemon = Daemon::start(&["--no-unix-socket", "--drain-timeout", LONG_DRAIN]).await;
    let mut watcher = tokio::process::Command::new(grpcurl())
        .args(["-plaintext", "-d", r#"{"service":""}"#, &daemon.addr])
        .arg("grpc.health.v1.Health/Watch")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("grpcurl is installed by scripts/tools");
    let mut out = BufReader::new(watcher.stdout.take().unwrap()).lines();
    let mut said = String::new();
    // The first status arrives before the signal, so the stream is open.
    tokio::time::timeout(DEADLINE, async {
        while let Some(line) = out.next_line().await.unwrap() {
            said.push_str(&line);
            if said.contains("\"SERVING\"") {
                return;
            }
        }
        panic!("grpcurl's watch ended before SERVING: {said}");
    })
    .await
    .expect("SERVING in time");

    let signalled = Instant::now();
    daemon.signal("TERM");
    let status = daemon.wait_exit(EXIT_WITHIN).await;
    let took = signalled.elapsed();
    assert!(status.success(), "{status:?}");
    eprintln!("SIGTERM to exit with an open Watch: {took:?}");

    // The watcher was told, and its stream ended cleanly (grpcurl exits 0).
    while let Some(line) = out.next_line().await.unwrap() {
        said.push_str(&line);
    }
    assert!(said.contains("NOT_SERVING"), "grpcurl printed {said}");
    let exit = tokio::time::timeout(DEADLINE, watcher.wait())
        .await
        .expect("grpcurl exits")
        .unwrap();
    let mut err = String::new();
    tokio::io::AsyncReadExt::read_to_string(watcher.stderr.as_mut().unwrap(), &mut err)
        .await
        .unwrap();
    assert!(exit.success(), "grpcurl: {exit:?} {err}");
}

/// How a collector misbehaves.
enum Collector {
    /// Accepts connections and never answers a byte.
    Silent,
    /// Nothing listens on the port.
    Absent,
}

/// Starts a daemon exporting traces and metrics to `collector`, makes one
/// exported span, and measures SIGTERM to exit; answers the time and how
/// many connections the collector accepted.
async fn exit_with(collector: Collector) -> (Duration, usize) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    match collector {
        Collector::Silent => {
            let accepted = accepted.clone();
            listener.set_nonblocking(true).unwrap();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            tokio::spawn(async move {
                let mut held = Vec::new();
                while let Ok((socket, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    held.push(socket);
                }
            });
        }
        Collector::Absent => drop(listener),
    }
    let dir = TempDir::new("otlp-silent");
    let mut command = command_without_otel(dir.path());
    command
        .args(["--no-unix-socket", "--drain-timeout", LONG_DRAIN])
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        )
        // The exporter would wait this long for an answer on its own.
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "30000")
        // Spans stay batched until shutdown flushes them.
        .env("OTEL_BSP_SCHEDULE_DELAY", "600000")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "600000");
    let mut daemon = Daemon::spawn(command, dir.path()).await;
    DaemonServiceClient::new(daemon.channel().await)
        .ping(PingRequest {})
        .await
        .expect("ping");
    let signalled = Instant::now();
    daemon.signal("TERM");
    let status = daemon.wait_exit(EXIT_WITHIN).await;
    let took = signalled.elapsed();
    assert!(status.success(), "{status:?}");
    (took, accepted.load(Ordering::SeqCst))
}

/// A daemon without export, stopped the same way: the part of the exit
/// that is not the collector's.
async fn exit_without_export() -> Duration {
    let dir = TempDir::new("otlp-none");
    let mut command = command_without_otel(dir.path());
    command.args(["--no-unix-socket", "--drain-timeout", LONG_DRAIN]);
    let mut daemon = Daemon::spawn(command, dir.path()).await;
    DaemonServiceClient::new(daemon.channel().await)
        .ping(PingRequest {})
        .await
        .expect("ping");
    let signalled = Instant::now();
    daemon.signal("TERM");
    assert!(daemon.wait_exit(EXIT_WITHIN).await.success());
    signalled.elapsed()
}

/// The collector's share of the exit may be a second; the rest is slack for
/// a loaded machine, far below the exporter's own 30 s.
fn assert_at_most_a_second_more(with: Duration, without: Duration) {
    assert!(
        with < without + Duration::from_secs(1) + Duration::from_millis(2500),
        "exit took {with:?} with the collector, {without:?} without"
    );
}

#[tokio::test]
async fn a_collector_that_never_answers_adds_at_most_a_second_to_shutdown() {
    let without = exit_without_export().await;
    let (with, accepted) = exit_with(Collector::Silent).await;
    eprintln!("SIGTERM to exit: {with:?} with a silent collector, {without:?} without export");
    assert!(accepted >= 1, "the exporter never connected");
    assert!(
        with >= Duration::from_millis(900),
        "the last export was not even tried: {with:?}"
    );
    assert_at_most_a_second_more(with, without);
}

#[tokio::test]
async fn a_collector_that_is_not_there_adds_at_most_a_second_to_shutdown() {
    let without = exit_without_export().await;
    let (with, _) = exit_with(Collector::Absent).await;
    eprintln!("SIGTERM to exit: {with:?} with no collector, {without:?} without export");
    assert_at_most_a_second_more(with, without);
}

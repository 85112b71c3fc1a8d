//! `stepd-bench auth [CALLS] [ROUNDS]`: what authentication costs a unary
//! RPC. Ping over one TCP connection each, interleaved in rounds so all see
//! the same machine: as the daemon's own user (the peer's uid looked up once
//! when the connection was accepted), with a token from the tokens file, and
//! with the local token. With `STEPD_BASE_BIN` set to a stepd from before
//! authentication, that daemon's Ping is measured alongside as the baseline.

use std::time::Instant;

use serde_json::json;
use stepd_e2e::{Daemon, TempDir, stepd_bin};
use stepd_proto::v1::{PingRequest, daemon_service_client::DaemonServiceClient};
use tonic::{Request, transport::Channel};

use crate::stats::{machine, write_result};

struct Variant {
    label: &'static str,
    channel: Channel,
    token: Option<String>,
    ns: Vec<u64>,
}

async fn ping(variant: &mut Variant) -> anyhow::Result<()> {
    let mut client = DaemonServiceClient::new(variant.channel.clone());
    let mut request = Request::new(PingRequest::default());
    if let Some(token) = &variant.token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse()?);
    }
    let start = Instant::now();
    client.ping(request).await?;
    variant
        .ns
        .push(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
    Ok(())
}

fn median_us(ns: &[u64]) -> f64 {
    let mut s = ns.to_vec();
    s.sort_unstable();
    crate::stats::percentile(&s, 0.5) as f64 / 1000.0
}

fn quantile_us(ns: &[u64], p: f64) -> f64 {
    let mut s = ns.to_vec();
    s.sort_unstable();
    crate::stats::percentile(&s, p) as f64 / 1000.0
}

/// Runs the benchmark.
pub async fn run(calls: usize, rounds: usize) -> anyhow::Result<()> {
    let dir = TempDir::new("benchauth");
    let tokens_file = dir.path().join("tokens");
    let token = stepd_api::auth::tokens::add(&tokens_file, "bench", "viewer", None)?;
    let daemon = Daemon::start(&[
        "--auth-tokens",
        &tokens_file.display().to_string(),
        "--no-unix-socket",
    ])
    .await;
    let local = std::fs::read_to_string(daemon.data_dir.join("token"))?
        .trim()
        .to_owned();
    let base = match std::env::var_os("STEPD_BASE_BIN") {
        Some(bin) => {
            let base_dir = TempDir::new("benchbase");
            let mut command = tokio::process::Command::new(bin);
            command
                .arg("--data-dir")
                .arg(base_dir.path())
                .args(["--listen", "127.0.0.1:0", "--no-unix-socket"])
                .env("RUST_LOG", "warn")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .kill_on_drop(true);
            Some((Daemon::spawn(command, base_dir.path()).await, base_dir))
        }
        None => None,
    };
    let mut variants = Vec::new();
    if let Some((base, _)) = &base {
        variants.push(Variant {
            label: "before authentication (STEPD_BASE_BIN)",
            channel: base.channel().await,
            token: None,
            ns: Vec::new(),
        });
    }
    for (label, token) in [
        ("same user, no token", None),
        ("token from --auth-tokens", Some(token)),
        ("local token", Some(local)),
    ] {
        variants.push(Variant {
            label,
            channel: daemon.channel().await,
            token,
            ns: Vec::new(),
        });
    }
    // Warm up every connection, then measure in interleaved rounds.
    for variant in &mut variants {
        for _ in 0..50 {
            ping(variant).await?;
        }
        variant.ns.clear();
    }
    for _ in 0..rounds {
        for variant in &mut variants {
            for _ in 0..calls {
                ping(variant).await?;
            }
        }
    }
    let same_user = variants
        .iter()
        .find(|v| v.label.starts_with("same user"))
        .map(|v| median_us(&v.ns))
        .unwrap_or_default();
    println!(
        "| Ping over TCP, {} calls each ({rounds} rounds of {calls}) | median | p90 | p99 | median − same user |",
        calls * rounds
    );
    println!("| --- | --- | --- | --- | --- |");
    let mut results = Vec::new();
    for v in &variants {
        let median = median_us(&v.ns);
        println!(
            "| {} | {:.1} µs | {:.1} µs | {:.1} µs | {:+.1} µs |",
            v.label,
            median,
            quantile_us(&v.ns, 0.9),
            quantile_us(&v.ns, 0.99),
            median - same_user
        );
        results.push(json!({
            "variant": v.label,
            "n": v.ns.len(),
            "p50_us": median,
            "p90_us": quantile_us(&v.ns, 0.9),
            "p99_us": quantile_us(&v.ns, 0.99),
        }));
    }
    let in_process = in_process(&tokens_file, dir.path())?;
    println!();
    println!("| the daemon's check alone, in process ({IN_PROCESS} calls) | mean per request |");
    println!("| --- | --- |");
    for (label, ns) in &in_process {
        println!("| {label} | {:.2} µs |", ns / 1000.0);
    }
    write_result(
        "auth",
        &json!({
            "machine": machine(),
            "stepd": stepd_bin().display().to_string(),
            "calls": calls,
            "rounds": rounds,
            "results": results,
            "in_process_mean_ns": in_process.iter().map(|(l, ns)| json!({"variant": l, "mean_ns": ns})).collect::<Vec<_>>(),
        }),
    )?;
    daemon.stop().await;
    if let Some((base, _dir)) = base {
        base.stop().await;
    }
    Ok(())
}

/// Calls of the in-process measurement.
const IN_PROCESS: u32 = 100_000;

/// What `Auth::authenticate` and the role lookup cost per request, without
/// the network: the same-user path (the uid cached on the connection) and
/// the token path (hash, constant-time compare, the file's stat).
fn in_process(
    tokens_file: &std::path::Path,
    data_dir: &std::path::Path,
) -> anyhow::Result<Vec<(&'static str, f64)>> {
    use stepd_api::{
        auth::{Auth, roles},
        peer::TcpPeer,
    };
    use tonic::codegen::http::{Extensions, HeaderMap};
    let auth = Auth::new(
        &data_dir.join("inproc"),
        Some(tokens_file),
        &Default::default(),
        false,
    )?;
    let token = stepd_api::auth::tokens::add(tokens_file, "inproc", "viewer", None)?;
    let mut extensions = Extensions::new();
    extensions.insert(TcpPeer::with_uid(
        tonic::transport::server::TcpConnectInfo {
            local_addr: "127.0.0.1:7701".parse().ok(),
            remote_addr: "127.0.0.1:40000".parse().ok(),
        },
        Some(stepd_api::peer::own_uid()),
    ));
    let bare = HeaderMap::new();
    let mut with_token = HeaderMap::new();
    with_token.insert("authorization", format!("Bearer {token}").parse()?);
    let mut out = Vec::new();
    for (label, headers) in [("same user", &bare), ("token", &with_token)] {
        let start = Instant::now();
        for _ in 0..IN_PROCESS {
            let who = auth
                .authenticate(headers, &extensions)
                .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
            let need = roles::need("/stepd.v1.DaemonService/Ping");
            anyhow::ensure!(who.identity.role.may(need));
        }
        out.push((
            label,
            start.elapsed().as_nanos() as f64 / f64::from(IN_PROCESS),
        ));
    }
    Ok(out)
}

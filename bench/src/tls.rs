//! `stepd-bench tls [PINGS]`: the cost of mutual TLS on a unary RPC. Two
//! daemons, one plaintext and one requiring client certificates (a CA, a
//! server and a client certificate made here with rcgen), each pinged over
//! one warm connection (the handshake is done before anything is timed).
//! The pings alternate between them in rounds of 100, so all see the same
//! machine; the result is each one's distribution, the difference of the
//! medians, and the paired difference (the median over rounds of each
//! round's difference). With `STEPD_BASE_BIN` set, a third daemon from that
//! binary, also requiring client certificates, is measured alongside.

use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use serde_json::json;
use stepd_e2e::{Daemon, TempDir};
use stepd_proto::v1::{PingRequest, daemon_service_client::DaemonServiceClient};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::stats::{machine, write_result};

/// Pings per round on each daemon before switching to the other.
const ROUND: usize = 100;
/// Unmeasured pings on each connection first.
const WARMUP: usize = 200;

struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new() -> anyhow::Result<Self> {
        let dir = TempDir::new("bench-pki");
        let mut ca = CertificateParams::default();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "bench CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);
        let leaf = |sans: Vec<SanType>, usage| -> anyhow::Result<(String, String)> {
            let mut params = CertificateParams::default();
            params.subject_alt_names = sans;
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate()?;
            let cert = params.signed_by(&key, &issuer)?;
            Ok((cert.pem(), key.serialize_pem()))
        };
        let (server, server_key) = leaf(
            vec![SanType::IpAddress("127.0.0.1".parse()?)],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let (client, client_key) = leaf(
            vec![SanType::URI("spiffe://bench/client".try_into()?)],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        for (name, text) in [
            ("ca.pem", ca_cert.pem()),
            ("server.pem", server),
            ("server.key", server_key),
            ("client.pem", client),
            ("client.key", client_key),
        ] {
            std::fs::write(dir.path().join(name), text)?;
        }
        Ok(Self { dir })
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn read(&self, name: &str) -> anyhow::Result<Vec<u8>> {
        Ok(std::fs::read(self.dir.path().join(name))?)
    }
}

/// Nanoseconds of one ping each.
#[derive(Default)]
struct Nanos(Vec<u64>);

impl Nanos {
    fn quantile_us(&self, p: f64) -> f64 {
        let mut s = self.0.clone();
        s.sort_unstable();
        let rank = ((s.len() as f64 - 1.0) * p).round() as usize;
        s.get(rank).copied().unwrap_or(0) as f64 / 1000.0
    }

    fn summary(&self) -> serde_json::Value {
        json!({
            "n": self.0.len(),
            "p50_us": self.quantile_us(0.5),
            "p90_us": self.quantile_us(0.9),
            "p99_us": self.quantile_us(0.99),
        })
    }
}

async fn ping(client: &mut DaemonServiceClient<Channel>) -> anyhow::Result<Duration> {
    let start = Instant::now();
    client.ping(PingRequest::default()).await?;
    Ok(start.elapsed())
}

/// One daemon pinged over one warm connection.
struct Variant {
    label: &'static str,
    client: DaemonServiceClient<Channel>,
    all: Nanos,
    /// Each round's median, for the paired difference.
    rounds: Vec<f64>,
}

/// A daemon from `bin` requiring client certificates from `pki`'s CA.
async fn mtls_daemon(bin: Option<std::ffi::OsString>, pki: &Pki) -> (Daemon, Option<TempDir>) {
    let args = [
        "--no-unix-socket".to_owned(),
        "--tls-cert".to_owned(),
        pki.path("server.pem"),
        "--tls-key".to_owned(),
        pki.path("server.key"),
        "--tls-client-ca".to_owned(),
        pki.path("ca.pem"),
        "--tls-client-roles".to_owned(),
        pki.path("roles"),
    ];
    let Some(bin) = bin else {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        return (Daemon::start(&args).await, None);
    };
    let dir = TempDir::new("benchbase");
    let mut command = tokio::process::Command::new(bin);
    command
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0"])
        .args(&args)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    (Daemon::spawn(command, dir.path()).await, Some(dir))
}

pub async fn run(pings: usize) -> anyhow::Result<()> {
    let pki = Pki::new()?;
    // The client certificate's identity is a viewer: Ping is all it does.
    std::fs::write(
        pki.dir.path().join("roles"),
        "spiffe://bench/client viewer\n",
    )?;
    let plain = Daemon::start(&["--no-unix-socket"]).await;
    let mtls = mtls_daemon(None, &pki).await;
    let base = match std::env::var_os("STEPD_BASE_BIN") {
        Some(bin) => Some(mtls_daemon(Some(bin), &pki).await),
        None => None,
    };
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(pki.read("ca.pem")?))
        .identity(Identity::from_pem(
            pki.read("client.pem")?,
            pki.read("client.key")?,
        ));
    let mut variants = vec![Variant {
        label: "plaintext",
        client: DaemonServiceClient::new(plain.channel().await),
        all: Nanos::default(),
        rounds: Vec::new(),
    }];
    let mut secured = vec![("mTLS", &mtls.0)];
    if let Some((base, _)) = &base {
        secured.push(("mTLS, STEPD_BASE_BIN", base));
    }
    for (label, daemon) in secured {
        let channel = Endpoint::from_shared(format!("https://{}", daemon.addr))?
            .tls_config(tls.clone())?
            .connect()
            .await?;
        variants.push(Variant {
            label,
            client: DaemonServiceClient::new(channel),
            all: Nanos::default(),
            rounds: Vec::new(),
        });
    }
    for variant in &mut variants {
        for _ in 0..WARMUP {
            ping(&mut variant.client).await?;
        }
    }
    let mut done = 0;
    while done < pings {
        let n = ROUND.min(pings - done);
        for variant in &mut variants {
            let mut round = Nanos::default();
            for _ in 0..n {
                round
                    .0
                    .push(ping(&mut variant.client).await?.as_nanos() as u64);
            }
            variant.rounds.push(round.quantile_us(0.5));
            variant.all.0.extend(round.0);
        }
        done += n;
    }
    let plain_median = variants[0].all.quantile_us(0.5);
    println!("| Ping, warm connection | median | p90 | p99 | median − plaintext | paired |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let mut results = serde_json::Map::new();
    for variant in &variants {
        let added = variant.all.quantile_us(0.5) - plain_median;
        let paired = paired_difference(&variant.rounds, &variants[0].rounds);
        println!(
            "| {} | {:.1} µs | {:.1} µs | {:.1} µs | {added:+.1} µs | {paired:+.1} µs |",
            variant.label,
            variant.all.quantile_us(0.5),
            variant.all.quantile_us(0.9),
            variant.all.quantile_us(0.99),
        );
        let mut summary = variant.all.summary();
        summary["added_median_us"] = json!(added);
        summary["paired_added_us"] = json!(paired);
        results.insert(variant.label.to_owned(), summary);
    }
    let paired = paired_difference(&variants[1].rounds, &variants[0].rounds);
    println!();
    println!(
        "mTLS adds {paired:.1} µs to the median Ping, the median over {} rounds of each \
         round's difference ({} pings each, target ≤ 20 µs)",
        variants[0].rounds.len(),
        variants[0].all.0.len()
    );
    write_result(
        "tls",
        &json!({
            "machine": machine(),
            "pings": variants[0].all.0.len(),
            "round": ROUND,
            "variants": results,
            "added_median_us": paired,
        }),
    )?;
    plain.stop().await;
    mtls.0.stop().await;
    if let Some((base, _)) = base {
        base.stop().await;
    }
    Ok(())
}

/// The median over rounds of `b`'s round median minus `a`'s in the same
/// round: what each round, run back to back, says the difference is.
fn paired_difference(b: &[f64], a: &[f64]) -> f64 {
    let mut differences: Vec<f64> = b.iter().zip(a).map(|(b, a)| b - a).collect();
    differences.sort_by(f64::total_cmp);
    differences
        .get(differences.len() / 2)
        .copied()
        .unwrap_or(0.0)
}

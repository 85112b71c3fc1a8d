//! `stepd-bench tls [PINGS]`: the cost of mutual TLS on a unary RPC. Two
//! daemons, one plaintext and one requiring client certificates (a CA, a
//! server and a client certificate made here with rcgen), each pinged over
//! one warm connection (the handshake is done before anything is timed).
//! The pings alternate between the two in rounds of 100, so both see the
//! same machine; the result is each one's distribution and the difference
//! of the medians.

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

pub async fn run(pings: usize) -> anyhow::Result<()> {
    let pki = Pki::new()?;
    // The client certificate's identity is a viewer: Ping is all it does.
    std::fs::write(
        pki.dir.path().join("roles"),
        "spiffe://bench/client viewer\n",
    )?;
    let plain = Daemon::start(&["--no-unix-socket"]).await;
    let mtls = Daemon::start(&[
        "--no-unix-socket",
        "--tls-cert",
        &pki.path("server.pem"),
        "--tls-key",
        &pki.path("server.key"),
        "--tls-client-ca",
        &pki.path("ca.pem"),
        "--tls-client-roles",
        &pki.path("roles"),
    ])
    .await;
    let mut plain_client = DaemonServiceClient::new(plain.channel().await);
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(pki.read("ca.pem")?))
        .identity(Identity::from_pem(
            pki.read("client.pem")?,
            pki.read("client.key")?,
        ));
    let mtls_channel = Endpoint::from_shared(format!("https://{}", mtls.addr))?
        .tls_config(tls)?
        .connect()
        .await?;
    let mut mtls_client = DaemonServiceClient::new(mtls_channel);
    for _ in 0..WARMUP {
        ping(&mut plain_client).await?;
        ping(&mut mtls_client).await?;
    }
    let (mut a, mut b) = (Nanos::default(), Nanos::default());
    let mut done = 0;
    while done < pings {
        let n = ROUND.min(pings - done);
        for _ in 0..n {
            a.0.push(ping(&mut plain_client).await?.as_nanos() as u64);
        }
        for _ in 0..n {
            b.0.push(ping(&mut mtls_client).await?.as_nanos() as u64);
        }
        done += n;
    }
    let added = b.quantile_us(0.5) - a.quantile_us(0.5);
    println!("| Ping, warm connection | median | p90 | p99 |");
    println!("| --- | --- | --- | --- |");
    for (label, s) in [("plaintext", &a), ("mTLS", &b)] {
        println!(
            "| {label} | {:.1} µs | {:.1} µs | {:.1} µs |",
            s.quantile_us(0.5),
            s.quantile_us(0.9),
            s.quantile_us(0.99)
        );
    }
    println!();
    println!(
        "mTLS adds {added:.1} µs to the median Ping ({} pings each, target ≤ 20 µs)",
        a.0.len()
    );
    write_result(
        "tls",
        &json!({
            "machine": machine(),
            "pings": a.0.len(),
            "plaintext": a.summary(),
            "mtls": b.summary(),
            "added_median_us": added,
        }),
    )?;
    plain.stop().await;
    mtls.stop().await;
    Ok(())
}

//! TLS and mutual TLS on the real daemon: who gets through the handshake,
//! health without credentials, the refusal to listen off loopback without
//! authentication, and stepctl over mTLS. Certificates are made here with
//! rcgen: a CA, a server certificate for 127.0.0.1 and localhost, a client
//! certificate from that CA and one from another CA.

use std::{path::Path, process::Stdio, time::Duration};

#[path = "common/pki.rs"]
mod pki;

use pki::{ca, leaf};
use rcgen::{ExtendedKeyUsagePurpose, SanType};
use stepd_e2e::{DEADLINE, Daemon, TempDir, stepctl_bin};
use stepd_proto::v1::{PingRequest, daemon_service_client::DaemonServiceClient};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

/// The URI name in the good client certificate: its identity.
const CLIENT_ID: &str = "spiffe://stepd.test/ns/ci/sa/runner";

/// PEM files of a test PKI, in a temporary directory.
struct Pki {
    dir: TempDir,
    /// The client certificate from the CA, DER (to compare identities).
    client_der: Vec<u8>,
}

impl Pki {
    fn new() -> Self {
        let dir = TempDir::new("pki");
        let ca_main = ca("stepd test CA");
        let ca_other = ca("another CA");
        let (server, server_key, _) = leaf(
            &ca_main,
            "stepd",
            vec![
                SanType::IpAddress("127.0.0.1".parse().unwrap()),
                SanType::DnsName("localhost".try_into().unwrap()),
            ],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client, client_key, client_der) = leaf(
            &ca_main,
            "ci runner",
            vec![SanType::URI(CLIENT_ID.try_into().unwrap())],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let (other, other_key, _) = leaf(
            &ca_other,
            "intruder",
            vec![SanType::URI(CLIENT_ID.try_into().unwrap())],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        for (name, text) in [
            ("ca.pem", &ca_main.pem),
            ("server.pem", &server),
            ("server.key", &server_key),
            ("client.pem", &client),
            ("client.key", &client_key),
            ("other.pem", &other),
            ("other.key", &other_key),
        ] {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        Self { dir, client_der }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.path().join(name)).unwrap()
    }

    fn server_args(&self) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.path("server.pem"),
            "--tls-key".into(),
            self.path("server.key"),
        ]
    }

    /// Mutual TLS, the client certificate's identity given `role`.
    fn mtls_args(&self, role: &str) -> Vec<String> {
        let roles = self.dir.path().join(format!("roles-{role}"));
        std::fs::write(&roles, format!("{CLIENT_ID} {role}\n")).unwrap();
        let mut args = self.server_args();
        args.extend([
            "--tls-client-ca".into(),
            self.path("ca.pem"),
            "--tls-client-roles".into(),
            roles.display().to_string(),
        ]);
        args
    }

    /// A TLS client trusting the CA, presenting `identity` ("client" or
    /// "other") when given.
    fn tls(&self, identity: Option<&str>) -> ClientTlsConfig {
        let mut config =
            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(self.read("ca.pem")));
        if let Some(name) = identity {
            config = config.identity(Identity::from_pem(
                self.read(&format!("{name}.pem")),
                self.read(&format!("{name}.key")),
            ));
        }
        config
    }
}

fn strings(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// A channel over TLS to `addr` (lazily connected: a refused handshake shows
/// on the first call).
fn tls_channel(addr: &str, tls: ClientTlsConfig) -> Channel {
    Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect_lazy()
}

fn plain_channel(addr: &str) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect_lazy()
}

async fn ping(channel: Channel) -> Result<(), tonic::Status> {
    tokio::time::timeout(
        DEADLINE,
        DaemonServiceClient::new(channel).ping(PingRequest::default()),
    )
    .await
    .expect("ping answered or failed in time")
    .map(drop)
}

async fn health(channel: Channel) -> Result<i32, tonic::Status> {
    tokio::time::timeout(
        DEADLINE,
        HealthClient::new(channel).check(HealthCheckRequest {
            service: String::new(),
        }),
    )
    .await
    .expect("health answered or failed in time")
    .map(|r| r.into_inner().status)
}

const SERVING: i32 = 1;

#[tokio::test]
async fn tls_serves_tls_clients_and_refuses_plaintext() {
    let pki = Pki::new();
    let daemon = Daemon::start(&strings(&pki.server_args())).await;
    ping(tls_channel(&daemon.addr, pki.tls(None)))
        .await
        .expect("a TLS client trusting the CA is served");
    // With a certificate too: TLS without --tls-client-ca does not mind one.
    ping(tls_channel(&daemon.addr, pki.tls(Some("client"))))
        .await
        .expect("a client certificate is accepted when none is required");
    ping(plain_channel(&daemon.addr))
        .await
        .expect_err("plaintext is refused on a TLS listener");
    // Health answers without credentials on the main port.
    assert_eq!(
        health(tls_channel(&daemon.addr, pki.tls(None)))
            .await
            .unwrap(),
        SERVING
    );
    // A client that does not trust the CA refuses the daemon.
    let stranger =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pki.read("other.pem")));
    assert!(ping(tls_channel(&daemon.addr, stranger)).await.is_err());
    // The Unix socket stays plaintext, for the daemon's own user.
    assert!(daemon.unix.is_some());
    daemon.stop().await;
}

#[tokio::test]
async fn mtls_admits_only_certificates_from_the_client_ca() {
    let pki = Pki::new();
    let mut args = pki.mtls_args("viewer");
    args.extend(["--health-listen".into(), "127.0.0.1:0".into()]);
    let daemon = Daemon::start(&strings(&args)).await;

    ping(tls_channel(&daemon.addr, pki.tls(Some("client"))))
        .await
        .expect("a certificate from the client CA is admitted");
    // The daemon refuses these in the handshake (nothing else in it could
    // refuse them yet); the client sees its alert or the closed connection,
    // whichever it reads first.
    ping(tls_channel(&daemon.addr, pki.tls(None)))
        .await
        .expect_err("no client certificate: refused at the handshake");
    ping(tls_channel(&daemon.addr, pki.tls(Some("other"))))
        .await
        .expect_err("a certificate from another CA: refused at the handshake");
    assert!(ping(plain_channel(&daemon.addr)).await.is_err());

    // The identity the daemon reads from the admitted certificate.
    assert_eq!(
        stepd_api::tls::identity_of(&pki.client_der).as_deref(),
        Some(CLIENT_ID)
    );

    // Health: on the main port for an admitted client, and in plaintext,
    // without any credentials, on --health-listen, which serves nothing else.
    assert_eq!(
        health(tls_channel(&daemon.addr, pki.tls(Some("client"))))
            .await
            .unwrap(),
        SERVING
    );
    let health_addr = daemon.health.clone().expect("ready line names health=");
    assert_eq!(health(plain_channel(&health_addr)).await.unwrap(), SERVING);
    let err = ping(plain_channel(&health_addr))
        .await
        .expect_err("the health listener serves health alone");
    assert_eq!(err.code(), tonic::Code::Unimplemented, "{err:?}");
    daemon.stop().await;
}

#[tokio::test]
async fn stepctl_talks_to_an_mtls_daemon() {
    let pki = Pki::new();
    let daemon = Daemon::start(&strings(&pki.mtls_args("admin"))).await;
    let stepctl = |args: &[&str], envs: &[(&str, String)]| {
        let mut command = std::process::Command::new(stepctl_bin());
        command
            .args(args)
            .env_remove("STEPD_ADDR")
            .env_remove("STEPD_TOKEN")
            .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null());
        command.output().expect("run stepctl")
    };
    let addr = daemon.addr.clone();
    // Flags, a bare address (TLS because --tls-ca is given).
    let out = stepctl(
        &[
            "--addr",
            &addr,
            "--tls-ca",
            &pki.path("ca.pem"),
            "--tls-cert",
            &pki.path("client.pem"),
            "--tls-key",
            &pki.path("client.key"),
            "--json",
            "ping",
        ],
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    let pong: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(pong.get("version").is_some(), "{pong}");
    // Environment variables, an https:// address.
    let out = stepctl(
        &["ping"],
        &[
            ("STEPD_ADDR", format!("https://{addr}")),
            ("STEPD_TLS_CA", pki.path("ca.pem")),
            ("STEPD_TLS_CERT", pki.path("client.pem")),
            ("STEPD_TLS_KEY", pki.path("client.key")),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    // Without a client certificate the daemon refuses: "unreachable" (3) or
    // a gRPC error without a stepd reason (4), never success.
    let out = stepctl(
        &["--addr", &addr, "--tls-ca", &pki.path("ca.pem"), "ping"],
        &[],
    );
    assert!(matches!(out.status.code(), Some(3 | 4)), "{out:?}");
    // Half an identity is a usage error.
    let out = stepctl(
        &[
            "--addr",
            &addr,
            "--tls-ca",
            &pki.path("ca.pem"),
            "--tls-cert",
            &pki.path("client.pem"),
            "ping",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    daemon.stop().await;
}

/// Runs stepd with exactly `args` (no default --listen) and returns its
/// exit status and standard error, or `None` if it got ready.
async fn start_fails(data_dir: &Path, args: &[&str]) -> Option<(std::process::ExitStatus, String)> {
    let mut command = tokio::process::Command::new(stepd_e2e::stepd_bin());
    command
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--no-unix-socket")
        .args(args)
        .env_remove("STEPD_INSECURE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().expect("spawn stepd");
    let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
        .await
        .ok()?
        .expect("wait for stepd");
    if String::from_utf8_lossy(&out.stdout).contains("stepd ready") {
        return None;
    }
    Some((
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[tokio::test]
async fn non_loopback_without_authentication_is_refused_at_start() {
    let dir = TempDir::new("exposed");
    let (status, stderr) = start_fails(dir.path(), &["--listen", "0.0.0.0:0"])
        .await
        .expect("stepd must not start on 0.0.0.0 without authentication");
    assert!(!status.success(), "{status:?}");
    for needle in ["0.0.0.0:0", "--tls-cert", "--auth-tokens", "--insecure"] {
        assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
    }
    // Bad TLS settings stop it too, naming the file.
    let missing = dir.path().join("nope.pem").display().to_string();
    let (status, stderr) = start_fails(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            &missing,
            "--tls-key",
            &missing,
        ],
    )
    .await
    .expect("a missing certificate file stops the daemon");
    assert!(!status.success());
    assert!(stderr.contains("nope.pem"), "{stderr}");
    let (_, stderr) = start_fails(
        dir.path(),
        &["--listen", "127.0.0.1:0", "--tls-cert", &missing],
    )
    .await
    .expect("--tls-cert without --tls-key is refused");
    assert!(stderr.contains("--tls-key"), "{stderr}");
}

#[tokio::test]
async fn a_certificate_is_an_identity_with_the_role_the_operator_gave_it() {
    use stepd_proto::v1::{
        AddBreakpointRequest, breakpoint_service_client::BreakpointServiceClient,
    };
    let pki = Pki::new();
    let spec = stepd_e2e::source_spec("/app/main.py", 3);
    // A viewer may look, not change.
    let daemon = Daemon::start(&strings(&pki.mtls_args("viewer"))).await;
    let channel = tls_channel(&daemon.addr, pki.tls(Some("client")));
    ping(channel.clone()).await.expect("a viewer may ping");
    let refused = BreakpointServiceClient::new(channel)
        .add_breakpoint(AddBreakpointRequest {
            spec: Some(spec.clone()),
        })
        .await
        .expect_err("a viewer may not add breakpoints");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert_eq!(stepd_e2e::reason(&refused), "PERMISSION_DENIED");
    daemon.stop().await;
    // A controller may, and the record names the certificate.
    let daemon = Daemon::start(&strings(&pki.mtls_args("controller"))).await;
    let channel = tls_channel(&daemon.addr, pki.tls(Some("client")));
    let added = BreakpointServiceClient::new(channel)
        .add_breakpoint(AddBreakpointRequest { spec: Some(spec) })
        .await
        .unwrap()
        .into_inner()
        .breakpoint
        .unwrap();
    assert_eq!(added.created_by, format!("cert:{CLIENT_ID}"));
    daemon.stop().await;
    // A certificate the roles file does not name has no role.
    let roles = pki.dir.path().join("roles-nobody");
    std::fs::write(&roles, "spiffe://stepd.test/someone/else viewer\n").unwrap();
    let mut args = pki.server_args();
    args.extend([
        "--tls-client-ca".into(),
        pki.path("ca.pem"),
        "--tls-client-roles".into(),
        roles.display().to_string(),
    ]);
    let daemon = Daemon::start(&strings(&args)).await;
    let refused = ping(tls_channel(&daemon.addr, pki.tls(Some("client"))))
        .await
        .expect_err("no role, no call");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    daemon.stop().await;
}

/// The handshake is stepd's own, before tonic sees the connection: a TLS
/// connection that sent a request must still count as used, never closed
/// to make room at `--max-connections`.
#[tokio::test]
async fn a_used_tls_connection_is_never_closed_to_make_room() {
    let pki = Pki::new();
    let mut args = pki.server_args();
    args.extend(["--max-connections".into(), "1".into()]);
    let daemon = Daemon::start(&strings(&args)).await;
    let first = tls_channel(&daemon.addr, pki.tls(None));
    ping(first.clone())
        .await
        .expect("the first connection is served");
    ping(tls_channel(&daemon.addr, pki.tls(None)))
        .await
        .expect_err("the one connection allowed is taken by a used one");
    ping(first).await.expect("the used connection still serves");
    daemon.stop().await;
}

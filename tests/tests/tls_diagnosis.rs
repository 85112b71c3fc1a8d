//! Refused TLS handshakes can be diagnosed from both ends: the daemon logs
//! each refusal with its reason (at most a line per reason every ten
//! seconds), and `stepctl doctor --addr` shakes hands itself and says which
//! it was: no client certificate, one from another CA, an expired one, one
//! not meant for clients, a server certificate stepctl's CA does not trust,
//! an expired one or one for another name, plaintext at a TLS port, TLS at a
//! plaintext port, and an old TLS version.

use std::{path::Path, process::Stdio};

#[path = "common/pki.rs"]
mod pki;

use pki::{Ca, ca, leaf, leaf_with};
use rcgen::{ExtendedKeyUsagePurpose, SanType, date_time_ymd};
use stepd_e2e::{DEADLINE, Daemon, TempDir, stepctl_bin};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::TcpStream,
    sync::mpsc,
};

/// The URI name in the client certificates.
const CLIENT_ID: &str = "spiffe://stepd.test/ns/ci/sa/runner";

/// The test PKI's files.
struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new() -> Self {
        let dir = TempDir::new("tlsdiag");
        let main = ca("stepd test CA");
        let other = ca("another CA");
        let local = || {
            vec![
                SanType::IpAddress("127.0.0.1".parse().unwrap()),
                SanType::DnsName("localhost".try_into().unwrap()),
            ]
        };
        let client = || vec![SanType::URI(CLIENT_ID.try_into().unwrap())];
        let expired = |p: &mut rcgen::CertificateParams| {
            p.not_before = date_time_ymd(2020, 1, 1);
            p.not_after = date_time_ymd(2021, 1, 1);
        };
        let server = ExtendedKeyUsagePurpose::ServerAuth;
        let client_auth = ExtendedKeyUsagePurpose::ClientAuth;
        let pairs = [
            ("server", leaf(&main, "stepd", local(), server.clone())),
            (
                "server-expired",
                leaf_with(&main, "stepd", local(), server.clone(), expired),
            ),
            (
                "server-elsewhere",
                leaf(
                    &main,
                    "stepd",
                    vec![SanType::DnsName("stepd.example.org".try_into().unwrap())],
                    server.clone(),
                ),
            ),
            (
                "client",
                leaf(&main, "ci runner", client(), client_auth.clone()),
            ),
            (
                "client-expired",
                leaf_with(&main, "ci runner", client(), client_auth.clone(), expired),
            ),
            (
                "client-server-usage",
                leaf(&main, "ci runner", client(), server),
            ),
            ("intruder", leaf(&other, "intruder", client(), client_auth)),
        ];
        for (name, (cert, key, _)) in pairs {
            std::fs::write(dir.path().join(format!("{name}.pem")), cert).unwrap();
            std::fs::write(dir.path().join(format!("{name}.key")), key).unwrap();
        }
        let write_ca = |name: &str, ca: &Ca| {
            std::fs::write(dir.path().join(name), &ca.pem).unwrap();
        };
        write_ca("ca.pem", &main);
        write_ca("other-ca.pem", &other);
        std::fs::write(dir.path().join("roles"), format!("{CLIENT_ID} viewer\n")).unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// The daemon's flags: serving `server` (a name above), with mutual TLS.
    fn daemon_args(&self, server: &str) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.path(&format!("{server}.pem")),
            "--tls-key".into(),
            self.path(&format!("{server}.key")),
            "--tls-client-ca".into(),
            self.path("ca.pem"),
            "--tls-client-roles".into(),
            self.path("roles"),
        ]
    }

    /// stepctl's flags: trusting `ca`, presenting `client` when given.
    fn client_args(&self, ca: &str, client: Option<&str>) -> Vec<String> {
        let mut args = vec!["--tls-ca".into(), self.path(ca)];
        if let Some(client) = client {
            args.extend([
                "--tls-cert".into(),
                self.path(&format!("{client}.pem")),
                "--tls-key".into(),
                self.path(&format!("{client}.key")),
            ]);
        }
        args
    }
}

/// A daemon started with `args`, and the lines of its standard error.
async fn logged_daemon(
    data_dir: &Path,
    args: &[String],
) -> (Daemon, mpsc::UnboundedReceiver<String>) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut command = Daemon::command(data_dir, &args);
    command.env("RUST_LOG", "warn").stderr(Stdio::piped());
    let mut daemon = Daemon::spawn(command, data_dir).await;
    let stderr = daemon.child.stderr.take().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = tx.send(line);
        }
    });
    (daemon, rx)
}

/// The next log line holding `needle` (others are skipped).
async fn line_with(log: &mut mpsc::UnboundedReceiver<String>, needle: &str) -> String {
    tokio::time::timeout(DEADLINE, async {
        loop {
            let line = log.recv().await.expect("the daemon's stderr is open");
            if line.contains(needle) {
                return line;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no log line with {needle:?} in time"))
}

/// `stepctl doctor --addr ADDR ARGS…` (text, then --json): the exit code,
/// the text output, and the `tls` object of the JSON output.
async fn doctor(addr: &str, args: &[String]) -> (Option<i32>, String, serde_json::Value) {
    let run = |json: bool| async move {
        let mut command = tokio::process::Command::new(stepctl_bin());
        command
            .args(["--addr", addr])
            .args(args)
            .args(json.then_some("--json"))
            .arg("doctor")
            .env_remove("STEPD_ADDR")
            .env_remove("STEPD_TOKEN")
            .env_remove("STEPD_TLS_CA")
            .env_remove("STEPD_TLS_CERT")
            .env_remove("STEPD_TLS_KEY")
            .stdin(Stdio::null());
        tokio::time::timeout(DEADLINE, command.output())
            .await
            .expect("doctor finished in time")
            .expect("run stepctl")
    };
    let text = run(false).await;
    let json = run(true).await;
    assert_eq!(text.status.code(), json.status.code());
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&text.stdout),
        String::from_utf8_lossy(&text.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&json.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&json.stdout)));
    (text.status.code(), printed, value["tls"].clone())
}

/// Asserts that doctor diagnosed `status`, its text saying each of `words`.
async fn diagnosed(addr: &str, args: &[String], status: &str, words: &[&str]) -> String {
    let (code, text, tls) = doctor(addr, args).await;
    assert_eq!(tls["status"], status, "{tls}\n{text}");
    assert!(text.contains(&format!("tls: {status}")), "{text}");
    for word in words {
        assert!(text.contains(word), "{word:?} not in: {text}");
    }
    if status != "ok" {
        assert_eq!(code, Some(3), "a failed handshake is 'unreachable': {text}");
    }
    text
}

#[tokio::test]
async fn a_refused_client_certificate_is_logged_and_diagnosed() {
    let pki = Pki::new();
    let dir = TempDir::new("d");
    let (daemon, mut log) = logged_daemon(dir.path(), &pki.daemon_args("server")).await;
    let addr = daemon.addr.clone();

    // All is well: doctor's own check, then the daemon's answer.
    let (code, text, tls) = doctor(&addr, &pki.client_args("ca.pem", Some("client"))).await;
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(tls["status"], "ok", "{tls}");
    assert_eq!(tls["serverCertificate"]["subject"], "CN=stepd", "{tls}");
    assert!(
        text.contains("ADAPTER") && text.contains("tls: ok"),
        "{text}"
    );

    // No client certificate.
    diagnosed(
        &addr,
        &pki.client_args("ca.pem", None),
        "client_certificate_required",
        &["--tls-cert"],
    )
    .await;
    let line = line_with(&mut log, "no_client_certificate").await;
    assert!(
        line.contains("WARN") && line.contains("127.0.0.1"),
        "{line}"
    );

    // From another CA.
    diagnosed(
        &addr,
        &pki.client_args("ca.pem", Some("intruder")),
        "client_certificate_refused",
        &["unknown_ca", "CN=intruder", "CN=another CA"],
    )
    .await;
    line_with(&mut log, "client_certificate_unknown_ca").await;

    // Expired.
    diagnosed(
        &addr,
        &pki.client_args("ca.pem", Some("client-expired")),
        "client_certificate_refused",
        &["certificate_expired"],
    )
    .await;
    line_with(&mut log, "client_certificate_expired").await;

    // Meant for servers.
    diagnosed(
        &addr,
        &pki.client_args("ca.pem", Some("client-server-usage")),
        "client_certificate_refused",
        &["unsupported_certificate"],
    )
    .await;
    line_with(&mut log, "client_certificate_unusable").await;
    daemon.stop().await;
}

#[tokio::test]
async fn a_server_certificate_stepctl_refuses_is_logged_and_diagnosed() {
    let pki = Pki::new();
    let dir = TempDir::new("d");
    let (daemon, mut log) = logged_daemon(dir.path(), &pki.daemon_args("server")).await;
    // Not issued by the CA stepctl trusts: what the server presented, and
    // what stepctl trusted, are named.
    diagnosed(
        &daemon.addr,
        &pki.client_args("other-ca.pem", Some("client")),
        "server_certificate_untrusted",
        &[
            "CN=stepd",
            "CN=stepd test CA",
            "other-ca.pem",
            "CN=another CA",
        ],
    )
    .await;
    let line = line_with(&mut log, "server_certificate_refused").await;
    assert!(line.contains("UnknownCA"), "{line}");
    daemon.stop().await;

    // Expired.
    let dir = TempDir::new("d");
    let (daemon, mut log) = logged_daemon(dir.path(), &pki.daemon_args("server-expired")).await;
    diagnosed(
        &daemon.addr,
        &pki.client_args("ca.pem", Some("client")),
        "server_certificate_expired",
        &["has expired on 2021-01-01"],
    )
    .await;
    line_with(&mut log, "server_certificate_refused").await;
    daemon.stop().await;

    // For another name.
    let dir = TempDir::new("d");
    let (daemon, mut log) = logged_daemon(dir.path(), &pki.daemon_args("server-elsewhere")).await;
    diagnosed(
        &daemon.addr,
        &pki.client_args("ca.pem", Some("client")),
        "server_name_mismatch",
        &["127.0.0.1", "stepd.example.org"],
    )
    .await;
    line_with(&mut log, "server_certificate_refused").await;
    daemon.stop().await;
}

/// A TLS 1.0 ClientHello (signature algorithms and nothing newer).
const TLS10_HELLO: &[u8] = &[
    0x16, 0x03, 0x01, 0x00, 0x37, // record: handshake, TLS 1.0, 55 bytes
    0x01, 0x00, 0x00, 0x33, // ClientHello, 51 bytes
    0x03, 0x01, // client_version TLS 1.0
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // random
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,    //
    0x00, // no session id
    0x00, 0x02, 0x00, 0x2f, // TLS_RSA_WITH_AES_128_CBC_SHA
    0x01, 0x00, // null compression
    0x00, 0x08, // extensions
    0x00, 0x0d, 0x00, 0x04, 0x00, 0x02, 0x04, 0x01, // signature_algorithms
];

#[tokio::test]
async fn plaintext_and_old_versions_at_a_tls_port_are_logged_and_rate_limited() {
    let pki = Pki::new();
    let dir = TempDir::new("d");
    let (daemon, mut log) = logged_daemon(dir.path(), &pki.daemon_args("server")).await;

    // stepctl without TLS settings: the port speaks TLS.
    let text = diagnosed(
        &daemon.addr,
        &[],
        "server_speaks_tls",
        &["--tls-ca", "CN=stepd"],
    )
    .await;
    assert!(!text.contains("ADAPTER"), "{text}");
    let line = line_with(&mut log, "not_tls").await;
    assert!(
        line.contains("PRI * HTTP/2.0"),
        "what it sent is shown: {line}"
    );

    // A client offering only TLS 1.0.
    let mut old = TcpStream::connect(&daemon.addr).await.unwrap();
    old.write_all(TLS10_HELLO).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, old.read_to_end(&mut answer)).await;
    line_with(&mut log, "protocol_version").await;

    // A flood of plaintext clients is a few lines, not one each: the first
    // of them was logged above, the rest fall in its window. The line that
    // tells the flood has ended is another reason's.
    for _ in 0..30 {
        let mut plain = TcpStream::connect(&daemon.addr).await.unwrap();
        plain
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(DEADLINE, plain.read_to_end(&mut rest)).await;
    }
    let mut intruder = std::process::Command::new(stepctl_bin());
    intruder
        .args(["--addr", &daemon.addr])
        .args(pki.client_args("ca.pem", Some("intruder")))
        .args(["ping"])
        .env_remove("STEPD_ADDR")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    assert!(!intruder.status().unwrap().success());
    let mut flood = 0;
    tokio::time::timeout(DEADLINE, async {
        loop {
            let line = log.recv().await.expect("the daemon's stderr is open");
            if line.contains("not_tls") {
                flood += 1;
            }
            if line.contains("client_certificate_unknown_ca") {
                return;
            }
        }
    })
    .await
    .expect("the last refusal is logged");
    // Ten-second windows: a loaded machine may take more than one.
    assert!(flood <= 3, "{flood} lines for 30 refusals");
    daemon.stop().await;
}

#[tokio::test]
async fn tls_at_a_plaintext_port_is_diagnosed() {
    let pki = Pki::new();
    let daemon = Daemon::start(&[]).await;
    diagnosed(
        &daemon.addr,
        &pki.client_args("ca.pem", None),
        "not_tls",
        &["plaintext gRPC"],
    )
    .await;
    daemon.stop().await;
}

//! `stepctl doctor`'s own TLS handshake with the daemon, to say why a
//! connection fails where tonic only says "invalid peer certificate" or
//! "connection reset": the server's certificate not trusted by the CA
//! stepctl uses (and what the server presented), expired or not yet valid,
//! not valid for the name dialled; a client certificate required and not
//! given, or refused (the alert the server sent); a port that does not speak
//! TLS, or one that does while stepctl was not told to.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tokio_rustls::{
    TlsConnector,
    rustls::{
        self, AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct,
        Error as TlsError, RootCertStore, SignatureScheme,
        client::{
            WebPkiServerVerifier,
            danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
        },
        crypto::CryptoProvider,
        pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime, pem::PemObject},
    },
};
use x509_parser::{certificate::X509Certificate, extensions::GeneralName, prelude::FromDer};

use crate::{connect::Options, exit::Failure};

/// How long each step (connecting, the handshake, the server's first
/// answer) may take.
const WAIT: Duration = Duration::from_secs(5);

/// What a connection of the daemon's port showed.
#[derive(Debug, Default)]
pub struct Diagnosis {
    /// `ok`, or what went wrong, in stable words (`server_certificate_untrusted`, …).
    pub status: &'static str,
    /// What a person reads.
    pub message: String,
    /// `HOST:PORT` as dialled.
    pub address: String,
    /// The TLS version agreed, once the handshake got that far.
    pub protocol: Option<String>,
    /// Who was trusted to vouch for the server.
    pub trusted: Option<String>,
    /// The certificate the server presented.
    pub server_certificate: Option<Summary>,
    /// The certificate stepctl presented (`--tls-cert`).
    pub client_certificate: Option<Summary>,
}

/// What a certificate says about itself.
#[derive(Debug, Clone)]
pub struct Summary {
    pub subject: String,
    pub issuer: String,
    pub not_before: String,
    pub not_after: String,
    /// Its subject alternative names (DNS, IP, URI).
    pub names: Vec<String>,
}

impl Summary {
    fn of(der: &[u8]) -> Option<Self> {
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let time = |t: x509_parser::time::ASN1Time| {
            let secs = u64::try_from(t.timestamp()).unwrap_or(0);
            humantime::format_rfc3339_seconds(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
                .to_string()
        };
        let names = match cert.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                    GeneralName::URI(uri) => Some((*uri).to_owned()),
                    GeneralName::IPAddress(bytes) => ip_of(bytes),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        Some(Self {
            subject: cert.subject().to_string(),
            issuer: cert.issuer().to_string(),
            not_before: time(cert.validity().not_before),
            not_after: time(cert.validity().not_after),
            names,
        })
    }

    fn text(&self) -> String {
        let names = if self.names.is_empty() {
            String::new()
        } else {
            format!(", names {}", self.names.join(", "))
        };
        format!(
            "{}, issued by {}, valid {} to {}{names}",
            self.subject, self.issuer, self.not_before, self.not_after
        )
    }

    fn json(&self) -> Value {
        json!({
            "subject": self.subject,
            "issuer": self.issuer,
            "notBefore": self.not_before,
            "notAfter": self.not_after,
            "names": self.names,
        })
    }
}

fn ip_of(bytes: &[u8]) -> Option<String> {
    match bytes.len() {
        4 => Some(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?).to_string()),
        16 => Some(std::net::Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?).to_string()),
        _ => None,
    }
}

impl Diagnosis {
    pub fn ok(&self) -> bool {
        self.status == "ok"
    }

    /// The diagnosis as `doctor` prints it.
    pub fn print(&self) {
        println!("tls: {} — {}", self.status, self.message);
        if let Some(protocol) = &self.protocol {
            println!("  protocol: {protocol}");
        }
        if let Some(cert) = &self.server_certificate {
            println!("  server certificate: {}", cert.text());
        }
        if let Some(trusted) = &self.trusted {
            println!("  trusted: {trusted}");
        }
        if let Some(cert) = &self.client_certificate {
            println!("  client certificate: {}", cert.text());
        }
    }

    /// The diagnosis as `doctor --json` prints it (the `tls` object).
    pub fn json(&self) -> Value {
        let mut out = json!({
            "status": self.status,
            "message": self.message,
            "address": self.address,
        });
        if let Some(protocol) = &self.protocol {
            out["protocol"] = json!(protocol);
        }
        if let Some(trusted) = &self.trusted {
            out["trusted"] = json!(trusted);
        }
        if let Some(cert) = &self.server_certificate {
            out["serverCertificate"] = cert.json();
        }
        if let Some(cert) = &self.client_certificate {
            out["clientCertificate"] = cert.json();
        }
        out
    }
}

/// `HOST:PORT` of a TCP address (`https://` and `http://` stripped), or
/// `None` for a Unix socket.
pub fn target(addr: &str) -> Option<(String, u16)> {
    if addr.starts_with("unix:") {
        return None;
    }
    let rest = addr
        .split_once("://")
        .map_or(addr, |(_, rest)| rest)
        .trim_end_matches('/');
    let (host, port) = rest.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), port.parse().ok()?))
}

/// Shakes hands with `host:port` as `options` say (their CA, their client
/// certificate) and says how it went.
pub async fn diagnose(options: &Options, host: &str, port: u16) -> Result<Diagnosis, Failure> {
    let files = Files::read(options)?;
    let mut diagnosis = Diagnosis {
        address: format!("{host}:{port}"),
        trusted: Some(files.trusted.clone()),
        client_certificate: files
            .client
            .as_ref()
            .and_then(|(chain, _)| chain.first().and_then(|c| Summary::of(c.as_ref()))),
        ..Default::default()
    };
    let verifier = Recording::new(Some(files.roots.clone()))?;
    let config = client_config(verifier.clone(), files.client.clone())?;
    let gave_cert = files.client.is_some();
    let outcome = shake(config, host, port).await;
    diagnosis.server_certificate = verifier.presented();
    let (status, message) = match outcome {
        Shaken::Unreachable(err) => (
            "unreachable",
            format!("nothing answers at {host}:{port}: {err}"),
        ),
        Shaken::NoAnswer => (
            "no_answer",
            format!(
                "{host}:{port} accepted the connection but did not answer the handshake within {WAIT:?}"
            ),
        ),
        Shaken::Failed(err) => {
            let (status, message) = failed(&err, host, &diagnosis, gave_cert);
            if status == "not_tls" && plaintext_grpc(host, port).await {
                (
                    status,
                    format!(
                        "{host}:{port} does not speak TLS: it serves plaintext gRPC. Drop --tls-ca/--tls-cert and https://, or use the daemon's TLS port"
                    ),
                )
            } else {
                (status, message)
            }
        }
        Shaken::Done { protocol, answer } => {
            diagnosis.protocol = Some(protocol);
            match answer {
                Answer::Served => (
                    "ok",
                    "the handshake succeeded and the server speaks HTTP/2".to_owned(),
                ),
                Answer::Closed => (
                    "closed",
                    "the server closed the connection right after the handshake without saying why"
                        .to_owned(),
                ),
                Answer::Silent => (
                    "no_answer",
                    format!("the server said nothing within {WAIT:?} after the handshake"),
                ),
                Answer::Failed(err) => failed(&err, host, &diagnosis, gave_cert),
            }
        }
    };
    diagnosis.status = status;
    diagnosis.message = message;
    Ok(diagnosis)
}

/// Whether `host:port` speaks TLS: a handshake that trusts anything gets as
/// far as the server's certificate. For a plaintext client that failed.
pub async fn speaks_tls(host: &str, port: u16) -> Option<Diagnosis> {
    let verifier = Recording::new(None).ok()?;
    let config = client_config(verifier.clone(), None).ok()?;
    shake(config, host, port).await;
    let presented = verifier.presented()?;
    Some(Diagnosis {
        status: "server_speaks_tls",
        message: format!(
            "{host}:{port} speaks TLS and stepctl spoke plaintext: pass --tls-ca FILE (with \
             --tls-cert and --tls-key for mutual TLS), or use https://{host}:{port}"
        ),
        address: format!("{host}:{port}"),
        server_certificate: Some(presented),
        ..Default::default()
    })
}

/// The status and words of a failed handshake or first read.
fn failed(
    err: &std::io::Error,
    host: &str,
    diagnosis: &Diagnosis,
    gave_cert: bool,
) -> (&'static str, String) {
    let presented = diagnosis
        .server_certificate
        .as_ref()
        .map(|c| format!(" (it presented {}, issued by {})", c.subject, c.issuer))
        .unwrap_or_default();
    let trusted = diagnosis.trusted.as_deref().unwrap_or("the system's roots");
    let Some(tls) = err.get_ref().and_then(|e| e.downcast_ref::<TlsError>()) else {
        return match err.kind() {
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => (
                "not_tls",
                format!(
                    "the server closed the connection during the handshake without a TLS alert: it may not speak TLS ({err})"
                ),
            ),
            _ => ("handshake_failed", format!("the handshake failed: {err}")),
        };
    };
    match tls {
        TlsError::InvalidCertificate(cert) => match cert {
            CertificateError::UnknownIssuer => (
                "server_certificate_untrusted",
                format!("the server's certificate is not trusted by {trusted}{presented}"),
            ),
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => (
                "server_certificate_expired",
                format!(
                    "the server's certificate has expired{}{presented}",
                    dated(diagnosis, "on", |c| &c.not_after)
                ),
            ),
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => (
                "server_certificate_not_yet_valid",
                format!(
                    "the server's certificate is not valid yet{}{presented}",
                    dated(diagnosis, "until", |c| &c.not_before)
                ),
            ),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                let names = diagnosis
                    .server_certificate
                    .as_ref()
                    .map(|c| c.names.join(", "))
                    .unwrap_or_default();
                (
                    "server_name_mismatch",
                    format!("the server's certificate is not valid for {host}: it names {names}"),
                )
            }
            other => (
                "server_certificate_unusable",
                format!("the server's certificate cannot be used: {other:?}{presented}"),
            ),
        },
        TlsError::AlertReceived(alert) => refused(*alert, gave_cert),
        TlsError::InvalidMessage(_) => (
            "not_tls",
            format!("the server does not speak TLS: it answered with something else ({tls})"),
        ),
        TlsError::PeerIncompatible(_) => (
            "protocol_version",
            format!("stepctl and the server have no TLS version or parameters in common: {tls}"),
        ),
        other => ("handshake_failed", format!("the handshake failed: {other}")),
    }
}

/// ` WORD DATE` of the server's certificate, when it is known.
fn dated(diagnosis: &Diagnosis, word: &str, date: impl Fn(&Summary) -> &String) -> String {
    diagnosis
        .server_certificate
        .as_ref()
        .map(|c| format!(" {word} {}", date(c)))
        .unwrap_or_default()
}

/// The status and words of an alert the server sent.
fn refused(alert: AlertDescription, gave_cert: bool) -> (&'static str, String) {
    let name = alert_name(alert);
    let why = match alert {
        AlertDescription::CertificateRequired | AlertDescription::NoCertificate => {
            return (
                "client_certificate_required",
                format!(
                    "the server requires a client certificate and {} (alert {name}): pass --tls-cert and --tls-key",
                    if gave_cert {
                        "did not take the one given"
                    } else {
                        "none was given"
                    }
                ),
            );
        }
        AlertDescription::ProtocolVersion => {
            return (
                "protocol_version",
                format!("the server speaks no TLS version stepctl offers (alert {name})"),
            );
        }
        AlertDescription::UnknownCA => "it is not issued by a CA the server trusts",
        AlertDescription::CertificateExpired => "it has expired or is not valid yet",
        AlertDescription::CertificateRevoked => "it has been revoked",
        AlertDescription::BadCertificate
        | AlertDescription::UnsupportedCertificate
        | AlertDescription::CertificateUnknown => {
            "it cannot be used for client authentication (its key usage, names or encoding)"
        }
        AlertDescription::AccessDenied => "its holder is not allowed in",
        _ => {
            return (
                "handshake_refused",
                format!("the server ended the handshake with alert {name}"),
            );
        }
    };
    (
        "client_certificate_refused",
        format!("the server refused the client certificate (alert {name}): {why}"),
    )
}

/// An alert as TLS names it (`unknown_ca`, `certificate_expired`).
fn alert_name(alert: AlertDescription) -> String {
    let known = match alert {
        AlertDescription::HandshakeFailure => "handshake_failure",
        AlertDescription::NoCertificate => "no_certificate",
        AlertDescription::BadCertificate => "bad_certificate",
        AlertDescription::UnsupportedCertificate => "unsupported_certificate",
        AlertDescription::CertificateRevoked => "certificate_revoked",
        AlertDescription::CertificateExpired => "certificate_expired",
        AlertDescription::CertificateUnknown => "certificate_unknown",
        AlertDescription::UnknownCA => "unknown_ca",
        AlertDescription::AccessDenied => "access_denied",
        AlertDescription::DecryptError => "decrypt_error",
        AlertDescription::ProtocolVersion => "protocol_version",
        AlertDescription::InternalError => "internal_error",
        AlertDescription::CertificateRequired => "certificate_required",
        AlertDescription::NoApplicationProtocol => "no_application_protocol",
        other => return format!("{other:?}"),
    };
    known.to_owned()
}

/// What the options' files hold.
struct Files {
    roots: Arc<RootCertStore>,
    /// "--tls-ca FILE (its CAs)" or "the system's roots".
    trusted: String,
    client: Option<(Vec<CertificateDer<'static>>, Arc<PrivateKeyDer<'static>>)>,
}

impl Files {
    fn read(options: &Options) -> Result<Self, Failure> {
        let read = |path: &std::path::Path, flag: &str| {
            std::fs::read(path)
                .map_err(|err| Failure::Usage(format!("{flag} {}: {err}", path.display())))
        };
        let certs = |pem: &[u8], path: &std::path::Path, flag: &str| {
            CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| Failure::Usage(format!("{flag} {}: {err}", path.display())))
        };
        let mut roots = RootCertStore::empty();
        let trusted = match &options.tls_ca {
            Some(path) => {
                let cas = certs(&read(path, "--tls-ca")?, path, "--tls-ca")?;
                let subjects: Vec<String> = cas
                    .iter()
                    .filter_map(|c| Summary::of(c.as_ref()).map(|s| s.subject))
                    .collect();
                roots.add_parsable_certificates(cas);
                format!("--tls-ca {} ({})", path.display(), subjects.join("; "))
            }
            None => {
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
                "the system's roots".to_owned()
            }
        };
        let client = match (&options.tls_cert, &options.tls_key) {
            (Some(cert), Some(key)) => {
                let chain = certs(&read(cert, "--tls-cert")?, cert, "--tls-cert")?;
                let key = PrivateKeyDer::from_pem_slice(&read(key, "--tls-key")?)
                    .map_err(|err| Failure::Usage(format!("--tls-key {}: {err}", key.display())))?;
                Some((chain, Arc::new(key)))
            }
            (None, None) => None,
            _ => {
                return Err(Failure::Usage(
                    "--tls-cert and --tls-key go together".into(),
                ));
            }
        };
        Ok(Self {
            roots: Arc::new(roots),
            trusted,
            client,
        })
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn client_config(
    verifier: Arc<Recording>,
    client: Option<(Vec<CertificateDer<'static>>, Arc<PrivateKeyDer<'static>>)>,
) -> Result<Arc<ClientConfig>, Failure> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|err| Failure::Other(err.into()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match client {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key.clone_key())
            .map_err(|err| Failure::Usage(format!("--tls-cert with --tls-key: {err}")))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// How far a handshake got.
enum Shaken {
    Unreachable(std::io::Error),
    NoAnswer,
    Failed(std::io::Error),
    Done { protocol: String, answer: Answer },
}

/// What the server did after the handshake.
enum Answer {
    /// It answered the HTTP/2 preface.
    Served,
    Closed,
    Silent,
    /// It sent an alert (TLS 1.3 refuses a client certificate only now).
    Failed(std::io::Error),
}

/// The client's HTTP/2 preface and an empty SETTINGS frame: a server that
/// admitted the client answers with its own SETTINGS.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

async fn shake(config: Arc<ClientConfig>, host: &str, port: u16) -> Shaken {
    let tcp = match tokio::time::timeout(WAIT, TcpStream::connect((host, port))).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(err)) => return Shaken::Unreachable(err),
        Err(_) => return Shaken::Unreachable(std::io::ErrorKind::TimedOut.into()),
    };
    let name = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => match ServerName::try_from(host.to_owned()) {
            Ok(name) => name,
            Err(err) => {
                return Shaken::Failed(std::io::Error::new(std::io::ErrorKind::InvalidInput, err));
            }
        },
    };
    let mut tls =
        match tokio::time::timeout(WAIT, TlsConnector::from(config).connect(name, tcp)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(err)) => return Shaken::Failed(err),
            Err(_) => return Shaken::NoAnswer,
        };
    let protocol = tls
        .get_ref()
        .1
        .protocol_version()
        .map(|v| format!("{v:?}"))
        .unwrap_or_default();
    let answer = async {
        tls.write_all(PREFACE).await?;
        tls.flush().await?;
        let mut buf = [0u8; 64];
        tls.read(&mut buf).await
    };
    let answer = match tokio::time::timeout(WAIT, answer).await {
        Ok(Ok(0)) => Answer::Closed,
        Ok(Ok(_)) => Answer::Served,
        Ok(Err(err)) => Answer::Failed(err),
        Err(_) => Answer::Silent,
    };
    Shaken::Done { protocol, answer }
}

/// Whether `host:port` answers a plaintext gRPC health check.
async fn plaintext_grpc(host: &str, port: u16) -> bool {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let check = async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{host}:{port}"))
            .ok()?
            .connect()
            .await
            .ok()?;
        HealthClient::new(channel)
            .check(HealthCheckRequest::default())
            .await
            .ok()
    };
    matches!(tokio::time::timeout(WAIT, check).await, Ok(Some(_)))
}

/// A verifier that keeps the chain the server presented, then verifies it
/// as usual (or, with no roots, accepts it: only to learn whether the port
/// speaks TLS).
#[derive(Debug)]
struct Recording {
    inner: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
    presented: Mutex<Option<CertificateDer<'static>>>,
}

impl Recording {
    fn new(roots: Option<Arc<RootCertStore>>) -> Result<Arc<Self>, Failure> {
        let provider = provider();
        let inner = match roots {
            Some(roots) => Some(
                WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                    .build()
                    .map_err(|err| Failure::Usage(format!("--tls-ca: {err}")))?,
            ),
            None => None,
        };
        Ok(Arc::new(Self {
            inner,
            provider,
            presented: Mutex::default(),
        }))
    }

    fn presented(&self) -> Option<Summary> {
        let presented = self.presented.lock().unwrap_or_else(|e| e.into_inner());
        presented.as_ref().and_then(|c| Summary::of(c.as_ref()))
    }
}

impl ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        *self.presented.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(end_entity.clone().into_owned());
        match &self.inner {
            Some(inner) => {
                inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            }
            None => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_of_addresses() {
        assert_eq!(target("127.0.0.1:7701"), Some(("127.0.0.1".into(), 7701)));
        assert_eq!(
            target("https://stepd.example.org:443/"),
            Some(("stepd.example.org".into(), 443))
        );
        assert_eq!(target("http://[::1]:7701"), Some(("::1".into(), 7701)));
        assert_eq!(target("unix:/run/stepd.sock"), None);
        assert_eq!(target("nohost"), None);
    }

    #[test]
    fn alerts_say_what_the_server_refused() {
        let (status, message) = refused(AlertDescription::UnknownCA, true);
        assert_eq!(status, "client_certificate_refused");
        assert!(message.contains("unknown_ca"), "{message}");
        let (status, _) = refused(AlertDescription::CertificateRequired, false);
        assert_eq!(status, "client_certificate_required");
        let (status, message) = refused(AlertDescription::CertificateExpired, true);
        assert_eq!(status, "client_certificate_refused");
        assert!(message.contains("certificate_expired"), "{message}");
        let (status, _) = refused(AlertDescription::ProtocolVersion, false);
        assert_eq!(status, "protocol_version");
    }
}

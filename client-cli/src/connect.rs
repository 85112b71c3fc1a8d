//! Reaching the daemon: TCP or Unix socket addresses, TLS and mutual TLS,
//! a bearer token on every call, and starting the default local daemon when
//! it is not running.

use std::{path::PathBuf, process::Stdio, time::Duration};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::{
    metadata::{Ascii, MetadataValue},
    service::{Interceptor, interceptor::InterceptedService},
    transport::{Certificate, ClientTlsConfig, Endpoint, Identity},
};
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::exit::Failure;

/// The default address; the daemon is started automatically only for this one.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7701";

/// The largest message stepctl reads or sends: the daemon's default limit,
/// so every answer a default daemon can send is readable (tonic's own default
/// of 4 MiB was not). `STEPD_MAX_MESSAGE_BYTES`, which raises the daemon's,
/// raises this one too.
pub fn max_message_bytes() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var("STEPD_MAX_MESSAGE_BYTES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&n: &usize| n > 0)
            .unwrap_or(16 * 1024 * 1024)
    })
}

/// A generated client over a channel, with stepctl's message size limits.
macro_rules! client {
    ($client:ident, $channel:expr) => {
        $client::new($channel)
            .max_decoding_message_size($crate::connect::max_message_bytes())
            .max_encoding_message_size($crate::connect::max_message_bytes())
    };
}
pub(crate) use client;

/// The channel every command talks over: tonic's, with the bearer token (if
/// any) added to each call.
pub type Channel = InterceptedService<tonic::transport::Channel, Bearer>;

/// Adds `authorization: Bearer TOKEN` to every call when there is a token.
#[derive(Clone, Default)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// How to reach the daemon: the global options of stepctl.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--addr`: "host:port", "http://…", "https://…" or "unix:/path".
    pub addr: Option<String>,
    /// `--tls-ca`: PEM roots that verify the daemon's certificate.
    pub tls_ca: Option<PathBuf>,
    /// `--tls-cert`: PEM client certificate (mutual TLS).
    pub tls_cert: Option<PathBuf>,
    /// `--tls-key`: PEM key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// `--token`: bearer token sent on every call.
    pub token: Option<String>,
    /// Start the local daemon when the default address is down (not for
    /// shell completion, which must stay quick and harmless).
    pub start: bool,
}

/// The TLS settings of a connection, read from the files once.
#[derive(Clone)]
struct Tls(ClientTlsConfig);

impl Options {
    /// Whether `addr` is reached over TLS: `https://`, or a bare `HOST:PORT`
    /// with a CA or a client certificate given.
    pub fn wants_tls(&self, addr: &str) -> bool {
        addr.starts_with("https://")
            || (!addr.starts_with("http://")
                && !addr.starts_with("unix:")
                && (self.tls_ca.is_some() || self.tls_cert.is_some()))
    }

    fn tls(&self, uri: &str) -> Result<Option<Tls>, Failure> {
        if !self.wants_tls(uri) {
            return Ok(None);
        }
        let read = |path: &PathBuf, flag: &str| {
            std::fs::read(path)
                .map_err(|err| Failure::Usage(format!("{flag} {}: {err}", path.display())))
        };
        let mut config = ClientTlsConfig::new();
        config = match &self.tls_ca {
            Some(path) => config.ca_certificate(Certificate::from_pem(read(path, "--tls-ca")?)),
            None => config.with_native_roots(),
        };
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                config = config.identity(Identity::from_pem(
                    read(cert, "--tls-cert")?,
                    read(key, "--tls-key")?,
                ));
            }
            (None, None) => {}
            _ => {
                return Err(Failure::Usage(
                    "--tls-cert and --tls-key go together".into(),
                ));
            }
        }
        Ok(Some(Tls(config)))
    }

    /// The token to send: `--token` / `STEPD_TOKEN`, else, for the default
    /// local daemon only, the one it wrote to `<data dir>/token` (sent
    /// harmlessly when the daemon does not ask for one).
    fn bearer(&self) -> Result<Bearer, Failure> {
        let token = match &self.token {
            Some(token) => Some(token.trim().to_owned()),
            None if self.addr.is_none() => data_dir()
                .and_then(|dir| std::fs::read_to_string(dir.join("token")).ok())
                .map(|t| t.trim().to_owned()),
            None => None,
        };
        match token.filter(|t| !t.is_empty()) {
            None => Ok(Bearer(None)),
            Some(token) => format!("Bearer {token}")
                .parse()
                .map(|value| Bearer(Some(value)))
                .map_err(|_| Failure::Usage("the token must be printable ASCII".into())),
        }
    }
}

/// How long to wait for an auto-started daemon to serve.
const START_DEADLINE: Duration = Duration::from_secs(15);

/// Connects as `options` say ("host:port", "http://host:port",
/// "https://host:port" or "unix:/path"; TLS for https:// and whenever
/// --tls-ca or --tls-cert is given). When no address was given and the
/// default one is down, starts `stepd` first (plaintext, local).
pub async fn channel(options: &Options) -> Result<Channel, Failure> {
    let explicit = options.addr.is_some();
    let addr = options.addr.as_deref().unwrap_or(DEFAULT_ADDR);
    let tls = options.tls(addr)?;
    let bearer = options.bearer()?;
    let wrap = |channel| InterceptedService::new(channel, bearer.clone());
    match connect(addr, tls.as_ref()).await {
        Ok(channel) => Ok(wrap(channel)),
        Err(err) if explicit || tls.is_some() || !options.start => Err(Failure::Unreachable(
            format!("cannot reach stepd at {addr}: {}", error_chain(&err)),
        )),
        Err(_) => {
            start_daemon().await?;
            connect(addr, None).await.map(wrap).map_err(|err| {
                Failure::Unreachable(format!(
                    "started stepd but cannot reach it at {addr}: {}",
                    error_chain(&err)
                ))
            })
        }
    }
}

/// An error with its causes ("transport error: invalid peer certificate: …"),
/// since tonic's own words alone do not say what failed.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let words = cause.to_string();
        if !text.contains(&words) {
            text.push_str(": ");
            text.push_str(&words);
        }
        source = cause.source();
    }
    text
}

async fn connect(
    addr: &str,
    tls: Option<&Tls>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    if let Some(path) = addr.strip_prefix("unix:") {
        let path = PathBuf::from(path);
        // The URI is ignored by the connector; it only has to parse.
        return Endpoint::from_static("http://stepd.local")
            .connect_with_connector(tower::service_fn(move |_| {
                let path = path.clone();
                async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
            }))
            .await;
    }
    let uri = if addr.contains("://") {
        addr.to_owned()
    } else if tls.is_some() {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    };
    let mut endpoint = Endpoint::from_shared(uri)?;
    if let Some(Tls(config)) = tls {
        endpoint = endpoint.tls_config(config.clone())?;
    }
    endpoint
        .connect_with_connector(tower::service_fn(
            |uri: tonic::codegen::http::Uri| async move {
                let host = uri.host().unwrap_or("127.0.0.1");
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let port = uri.port_u16().unwrap_or(80);
                let stream = tokio::time::timeout(
                    Duration::from_secs(3),
                    tokio::net::TcpStream::connect((host, port)),
                )
                .await
                .map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
                })??;
                stream.set_nodelay(true)?;
                Ok::<_, std::io::Error>(TokioIo::new(NoSigpipe(stream)))
            },
        ))
        .await
}

/// A TCP stream that never writes with `writev(2)`.
///
/// stepctl keeps the default SIGPIPE disposition so that `stepctl … | head`
/// ends quietly; `writev` to a socket the daemon closed (a refused TLS
/// handshake, a daemon going away) would raise SIGPIPE and kill stepctl
/// without a word, where `send(2)`, which the plain writes use, only
/// returns `EPIPE`.
struct NoSigpipe(tokio::net::TcpStream);

impl tokio::io::AsyncRead for NoSigpipe {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for NoSigpipe {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let first = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &**b);
        self.poll_write(cx, first)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The `stepd` next to this executable, else the one on PATH.
fn stepd_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("stepd")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("stepd"))
}

/// The default daemon's data directory, as stepd picks it.
fn data_dir() -> Option<PathBuf> {
    std::env::var_os("STEPD_DATA_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_DATA_HOME")
                .filter(|d| !d.is_empty())
                .map(|d| PathBuf::from(d).join("stepd"))
        })
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share/stepd")))
}

fn log_path() -> Option<PathBuf> {
    let base = data_dir()?;
    // The daemon's directory is private to its user (stepd tightens it too).
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&base)
        .ok()?;
    Some(base.join("stepd.log"))
}

/// Starts the default daemon in its own process group and waits until its
/// health service answers SERVING.
async fn start_daemon() -> Result<(), Failure> {
    use std::os::unix::process::CommandExt;
    let binary = stepd_binary();
    let log = log_path().and_then(|p| {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&p)
            .ok()
            .map(|f| (f, p))
    });
    let mut command = std::process::Command::new(&binary);
    command
        .arg("--listen")
        .arg(DEFAULT_ADDR)
        // stepctl's own client certificate settings share these names; the
        // local default daemon serves plaintext.
        .env_remove("STEPD_TLS_CERT")
        .env_remove("STEPD_TLS_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .process_group(0);
    match &log {
        Some((file, _)) => {
            command.stderr(
                file.try_clone()
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null()),
            );
        }
        None => {
            command.stderr(Stdio::null());
        }
    }
    let mut child = command.spawn().map_err(|err| {
        Failure::Unreachable(format!(
            "stepd is not running at {DEFAULT_ADDR} and starting {} failed: {err}",
            binary.display()
        ))
    })?;
    let log_hint = log
        .map(|(_, p)| format!("; see {}", p.display()))
        .unwrap_or_default();
    eprintln!(
        "stepctl: started stepd (pid {}) on {DEFAULT_ADDR}",
        child.id()
    );
    let deadline = tokio::time::Instant::now() + START_DEADLINE;
    let mut backoff = Duration::from_millis(20);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Failure::Unreachable(format!(
                "stepd exited while starting ({status}){log_hint}"
            )));
        }
        if let Ok(channel) = connect(DEFAULT_ADDR, None).await {
            let serving = HealthClient::new(channel)
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .is_ok_and(|r| r.into_inner().status == 1);
            if serving {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Failure::Unreachable(format!(
                "stepd did not become healthy within {START_DEADLINE:?}{log_hint}"
            )));
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(250));
    }
}

//! Reaching the daemon: TCP or Unix socket addresses, and starting the
//! default local daemon when it is not running.

use std::{path::PathBuf, process::Stdio, time::Duration};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};
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

/// How long to wait for an auto-started daemon to serve.
const START_DEADLINE: Duration = Duration::from_secs(15);

/// Connects to `addr` ("host:port", "http://host:port" or "unix:/path"). When
/// no address was given and the default one is down, starts `stepd` first.
pub async fn channel(addr: Option<&str>) -> Result<Channel, Failure> {
    let explicit = addr.is_some();
    let addr = addr.unwrap_or(DEFAULT_ADDR);
    match connect(addr).await {
        Ok(channel) => Ok(channel),
        Err(err) if explicit => Err(Failure::Unreachable(format!(
            "cannot reach stepd at {addr}: {err}"
        ))),
        Err(_) => {
            start_daemon().await?;
            connect(addr).await.map_err(|err| {
                Failure::Unreachable(format!(
                    "started stepd but cannot reach it at {addr}: {err}"
                ))
            })
        }
    }
}

async fn connect(addr: &str) -> Result<Channel, tonic::transport::Error> {
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
    } else {
        format!("http://{addr}")
    };
    Endpoint::from_shared(uri)?
        .connect_timeout(Duration::from_secs(3))
        .connect()
        .await
}

/// The `stepd` next to this executable, else the one on PATH.
fn stepd_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("stepd")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("stepd"))
}

fn log_path() -> Option<PathBuf> {
    let base = std::env::var_os("STEPD_DATA_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_DATA_HOME").map(|d| PathBuf::from(d).join("stepd")))
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share/stepd"))
        })?;
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
        if let Ok(channel) = connect(DEFAULT_ADDR).await {
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

//! Starting an adapter process and reaching its DAP stream: stdio for most
//! adapters, a loopback socket for `dlv dap`.

use std::{pin::Pin, process::Stdio, time::Duration};

use tokio::{
    io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, BufReader},
    net::TcpStream,
    process::{Child, ChildStderr, Command},
};

use super::adapters::{Adapter, AdapterKind};

/// A running adapter and its DAP stream.
pub struct Transport {
    /// The adapter process, when stepd started one.
    pub child: Option<Child>,
    /// Frames from the adapter.
    pub reader: Pin<Box<dyn AsyncBufRead + Send>>,
    /// Frames to the adapter.
    pub writer: Pin<Box<dyn AsyncWrite + Send>>,
    /// The adapter's own diagnostics.
    pub stderr: Option<ChildStderr>,
}

/// How long dlv may take to announce its listening address.
const DLV_LISTEN_DEADLINE: Duration = Duration::from_secs(20);

/// Starts the adapter the way stepd does (`AdapterKind::spawn_command`); its
/// process is killed when the Child is dropped.
pub async fn start(adapter: &Adapter, cwd: &str) -> std::io::Result<Transport> {
    let argv = adapter.kind.spawn_command(&adapter.command);
    start_command(adapter.kind, &argv, cwd).await
}

/// Starts `argv` as an adapter of `kind`, exactly as given.
pub async fn start_command(
    kind: AdapterKind,
    argv: &[String],
    cwd: &str,
) -> std::io::Result<Transport> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("empty adapter command"))?;
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that the adapter and what it starts can
        // be killed together (`process::kill_tree`) without touching stepd.
        .process_group(0)
        .kill_on_drop(true);
    if !cwd.is_empty() {
        command.current_dir(cwd);
    }
    if kind.listens_on_socket() {
        command.args(["dap", "--listen", "127.0.0.1:0"]);
        return start_dlv(command).await;
    }
    let mut child = command.spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no stdout"))?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin"))?;
    let stderr = child.stderr.take();
    Ok(Transport {
        child: Some(child),
        reader: Box::pin(BufReader::new(stdout)),
        writer: Box::pin(stdin),
        stderr,
    })
}

/// `dlv dap` prints "DAP server listening at: HOST:PORT" and serves one client.
async fn start_dlv(mut command: Command) -> std::io::Result<Transport> {
    let mut child = command.spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let addr = tokio::time::timeout(DLV_LISTEN_DEADLINE, async {
        while let Some(line) = lines.next_line().await? {
            if let Some(addr) = line.split("listening at:").nth(1) {
                return Ok(addr.trim().to_owned());
            }
        }
        Err(std::io::Error::other("dlv exited before listening"))
    })
    .await
    .map_err(|_| std::io::Error::other("dlv did not announce its address"))??;
    // Keep draining dlv's stdout so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let stream = TcpStream::connect(&addr).await?;
    stream.set_nodelay(true)?;
    let (read, write) = stream.into_split();
    let stderr = child.stderr.take();
    Ok(Transport {
        child: Some(child),
        reader: Box::pin(BufReader::new(read)),
        writer: Box::pin(write),
        stderr,
    })
}

/// Connects to a DAP server that is already running (a child session of
/// debugpy, which serves each child on its own connection).
pub async fn connect(addr: &str) -> std::io::Result<Transport> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (read, write) = stream.into_split();
    Ok(Transport {
        child: None,
        reader: Box::pin(BufReader::new(read)),
        writer: Box::pin(write),
        stderr: None,
    })
}

//! HAProxy in front of a daemon: a real HTTP/2 (h2c) proxy for gRPC, with
//! idle timeouts short enough that a test sees it cut a quiet stream.

use std::{path::PathBuf, process::Stdio, time::Duration};

use tokio::process::{Child, Command};

use crate::{DEADLINE, TempDir};

/// A running HAProxy forwarding one loopback port to a daemon.
pub struct Haproxy {
    /// The process (killed when dropped).
    _child: Child,
    /// The address to connect to instead of the daemon's.
    pub addr: String,
    _dir: TempDir,
}

/// The haproxy binary (Debian installs it in /usr/sbin, off most PATHs).
fn binary() -> PathBuf {
    let sbin = PathBuf::from("/usr/sbin/haproxy");
    if sbin.is_file() {
        sbin
    } else {
        PathBuf::from("haproxy")
    }
}

impl Haproxy {
    /// Proxies a free loopback port to `backend` (host:port), HTTP/2 without
    /// TLS on both sides, with client, server and tunnel timeouts of `idle`.
    pub async fn start(backend: &str, idle: Duration) -> Self {
        let idle = idle.as_millis();
        Self::run(|port| {
            format!(
                "global\n  maxconn 200\n\
                 defaults\n  mode http\n  timeout connect 5s\n  timeout client {idle}ms\n  \
                 timeout server {idle}ms\n  timeout tunnel {idle}ms\n\
                 frontend grpc\n  bind 127.0.0.1:{port} proto h2\n  default_backend stepd\n\
                 backend stepd\n  server daemon {backend} proto h2\n"
            )
        })
        .await
    }

    /// Proxies a free loopback port to an HTTP/1.1 service at `backend`
    /// (host:port), as a mesh's ingress would: headers (`traceparent`,
    /// `baggage`) pass through, every request on its own.
    pub async fn http(backend: &str) -> Self {
        Self::run(|port| {
            format!(
                "global\n  maxconn 400\n\
                 defaults\n  mode http\n  timeout connect 5s\n  timeout client 120s\n  \
                 timeout server 120s\n  option http-server-close\n\
                 frontend web\n  bind 127.0.0.1:{port}\n  default_backend service\n\
                 backend service\n  server s0 {backend} maxconn 200\n"
            )
        })
        .await
    }

    /// Balances a free loopback port round-robin over `backends`, each call
    /// (HTTP/2 stream) on its own, taking a backend out as soon as one
    /// health check fails and sending a call it cannot connect to another.
    pub async fn balance(backends: &[&str]) -> Self {
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, addr)| {
                format!("  server r{i} {addr} proto h2 check inter 100ms fall 1 rise 1\n")
            })
            .collect();
        Self::run(|port| {
            format!(
                "global\n  maxconn 200\n\
                 defaults\n  mode http\n  timeout connect 1s\n  timeout client 60s\n  \
                 timeout server 60s\n  timeout tunnel 60s\n  option redispatch\n  retries 3\n\
                 frontend grpc\n  bind 127.0.0.1:{port} proto h2\n  default_backend stepd\n\
                 backend stepd\n  balance roundrobin\n{servers}"
            )
        })
        .await
    }

    async fn run(config: impl FnOnce(u16) -> String) -> Self {
        let dir = TempDir::new("haproxy");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = config(port);
        let file = dir.path().join("haproxy.cfg");
        std::fs::write(&file, config).expect("write haproxy.cfg");
        let child = Command::new(binary())
            .arg("-db")
            .arg("-f")
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("haproxy starts (scripts/tools installs it)");
        let addr = format!("127.0.0.1:{port}");
        // Ready once it accepts connections.
        tokio::time::timeout(DEADLINE, async {
            while tokio::net::TcpStream::connect(&addr).await.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("haproxy listens in time");
        Self {
            _child: child,
            addr,
            _dir: dir,
        }
    }
}

//! The TCP listener's TLS handshakes. stepd does them itself rather than
//! letting tonic do them, because tonic drops a failed handshake with a
//! debug line and no reason: here each refusal is logged with why
//! ([`super::refusal`]). A connection that completes its handshake goes on
//! to the server as a `TlsStream`, which tonic describes to every request
//! as it would one it had accepted itself (`TlsConnectInfo`).

use std::{sync::Arc, time::Duration};

use tokio::sync::mpsc;
use tokio_rustls::{TlsAcceptor, rustls::ServerConfig, server::TlsStream};

use super::refusal::{Reason, Refusals};
use crate::conns::Conn;

/// The first byte of a TLS handshake record.
const HANDSHAKE_RECORD: u8 = 0x16;

/// Handshakes of the connections the listener admits.
#[derive(Clone)]
pub struct Handshakes {
    acceptor: TlsAcceptor,
    /// How long a handshake may take (`--first-request-timeout`).
    timeout: Duration,
    refusals: Arc<Refusals>,
}

impl Handshakes {
    pub fn new(config: Arc<ServerConfig>, timeout: Duration) -> Self {
        Self {
            acceptor: TlsAcceptor::from(config),
            timeout,
            refusals: Arc::default(),
        }
    }

    /// Shakes hands with each connection of `incoming`, each in a task of
    /// its own, and hands on those that succeed; the others are logged and
    /// closed.
    pub fn accept(self, mut incoming: mpsc::Receiver<Conn>) -> mpsc::Receiver<TlsStream<Conn>> {
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            while let Some(conn) = incoming.recv().await {
                let (this, tx) = (self.clone(), tx.clone());
                tokio::spawn(async move {
                    if let Some(stream) = this.handshake(conn).await {
                        let _ = tx.send(stream).await;
                    }
                });
            }
        });
        rx
    }

    async fn handshake(&self, conn: Conn) -> Option<TlsStream<Conn>> {
        let peer = conn.peer_addr();
        let outcome = tokio::time::timeout(self.timeout, self.shake(conn))
            .await
            .unwrap_or_else(|_| {
                let detail = format!("no handshake within {:?}", self.timeout);
                Outcome::Refused(Reason::Timeout, detail)
            });
        match outcome {
            Outcome::Done(stream) => return Some(*stream),
            Outcome::Refused(reason, detail) => self.refusals.note(reason, peer, &detail),
            // A port check (a TCP health probe, a scanner) connects and
            // closes: nothing was refused.
            Outcome::Closed => {
                tracing::debug!(?peer, "a connection closed before its TLS handshake");
            }
        }
        None
    }

    async fn shake(&self, conn: Conn) -> Outcome {
        // What the client sends first tells a plaintext client (an HTTP/2
        // preface, `PRI * HTTP/2.0`) from a TLS one, which rustls would
        // only call a malformed record.
        let mut first = [0u8; 16];
        let read = match conn.peek(&mut first).await {
            Ok(0) | Err(_) => return Outcome::Closed,
            Ok(read) => read,
        };
        if first[0] != HANDSHAKE_RECORD {
            let sent = String::from_utf8_lossy(&first[..read]);
            return Outcome::Refused(Reason::NotTls, format!("it sent {sent:?}"));
        }
        match self.acceptor.accept(conn).await {
            Ok(stream) => Outcome::Done(Box::new(stream)),
            Err(err) => Outcome::Refused(Reason::of(&err), err.to_string()),
        }
    }
}

/// How a handshake ended.
enum Outcome {
    Done(Box<TlsStream<Conn>>),
    Refused(Reason, String),
    /// The client went away before sending anything.
    Closed,
}

//! Accepting TCP connections within limits: at most `--max-connections` open
//! at once, a connection that sends no admitted request and falls silent for
//! `--first-request-timeout` is closed, and the accept loop backs off when
//! the process runs out of file descriptors instead of spinning on the error.

use std::{
    collections::{BTreeMap, HashMap},
    io,
    net::SocketAddr,
    os::fd::{AsRawFd, RawFd},
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream, UnixListener, UnixStream},
    sync::mpsc,
};
use tokio_util::sync::CancellationToken;
use tonic::transport::server::{Connected, TcpConnectInfo, TlsConnectInfo};

/// The shortest and longest pause of the accept loop after running out of
/// file descriptors; it doubles while the error lasts.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How often a repeated warning (refusals, back-offs) is logged at most.
const WARN_EVERY: Duration = Duration::from_secs(5);

/// The connection registry shared by the accept loop, the connections and
/// the layer that sees requests.
#[derive(Clone)]
pub struct Conns(Arc<Shared>);

struct Shared {
    state: Mutex<State>,
    max: usize,
    first_request: Duration,
}

#[derive(Default)]
struct State {
    live: usize,
    next_id: u64,
    /// Connections that have not sent a request yet, oldest first.
    fresh: BTreeMap<u64, Fresh>,
    by_peer: HashMap<SocketAddr, u64>,
    refused: u64,
    last_warned: Option<Instant>,
}

struct Fresh {
    fd: RawFd,
    peer: SocketAddr,
    /// When it last sent a request that was refused, if it has.
    heard: Option<Instant>,
}

impl State {
    fn forget(&mut self, id: u64) -> Option<Fresh> {
        let fresh = self.fresh.remove(&id)?;
        self.by_peer.remove(&fresh.peer);
        Some(fresh)
    }

    /// True when a warning may be logged now.
    fn may_warn(&mut self) -> bool {
        let now = Instant::now();
        if self
            .last_warned
            .is_some_and(|at| now.duration_since(at) < WARN_EVERY)
        {
            return false;
        }
        self.last_warned = Some(now);
        true
    }
}

/// Ends a connection from our side: its reads see end of file, so hyper
/// closes it and drops it (which closes the descriptor). Called only under
/// the state lock, which a connection's drop takes before its descriptor is
/// closed, so `fd` is still this connection's.
fn hang_up(fd: RawFd) {
    // SAFETY: shutdown(2) on a descriptor we own; it does not close it.
    unsafe {
        libc::shutdown(fd, libc::SHUT_RDWR);
    }
}

impl Conns {
    /// A registry allowing `max` connections and closing those silent for
    /// `first_request` after they connect.
    pub fn new(max: usize, first_request: Duration) -> Self {
        Self(Arc::new(Shared {
            state: Mutex::new(State::default()),
            max,
            first_request,
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere; the counts stay usable.
        self.0
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that the connection from `peer` sent a request, so it is no
    /// longer closed for silence nor chosen to make room.
    pub fn saw_request(&self, peer: SocketAddr) {
        let mut state = self.state();
        if let Some(id) = state.by_peer.get(&peer).copied() {
            state.forget(id);
        }
    }

    /// Records that the connection from `peer` sent a request, admitted or
    /// not: one whose requests are all refused is still closed once it falls
    /// silent, but not while it is asking, which would cut its requests
    /// off mid-way, without the typed refusal each one gets.
    pub fn heard_from(&self, peer: SocketAddr) {
        let mut state = self.state();
        if let Some(id) = state.by_peer.get(&peer).copied()
            && let Some(fresh) = state.fresh.get_mut(&id)
        {
            fresh.heard = Some(Instant::now());
        }
    }

    /// The connection to close to make room: the oldest that never sent a
    /// request, else the one whose refused requests stopped longest ago.
    fn evictable(state: &State) -> Option<u64> {
        state
            .fresh
            .iter()
            .find(|(_, f)| f.heard.is_none())
            .or_else(|| state.fresh.iter().min_by_key(|(_, f)| f.heard))
            .map(|(id, _)| *id)
    }

    /// Admits a new connection, making room by closing one that never sent
    /// an admitted request ([`Self::evictable`]) when the cap is reached;
    /// `None` refuses it.
    fn admit(&self, stream: TcpStream, peer: SocketAddr) -> Option<Conn> {
        let mut state = self.state();
        if state.live >= self.0.max {
            match Self::evictable(&state) {
                Some(oldest) => {
                    if let Some(fresh) = state.forget(oldest) {
                        hang_up(fresh.fd);
                    }
                }
                None => {
                    state.refused += 1;
                    if state.may_warn() {
                        tracing::warn!(
                            max = self.0.max,
                            refused = state.refused,
                            "connection limit reached; refusing new connections"
                        );
                    }
                    return None;
                }
            }
        }
        state.live += 1;
        state.next_id += 1;
        let id = state.next_id;
        state.fresh.insert(
            id,
            Fresh {
                fd: stream.as_raw_fd(),
                peer,
                heard: None,
            },
        );
        state.by_peer.insert(peer, id);
        drop(state);
        let conns = self.clone();
        tokio::spawn(async move {
            let quiet = conns.0.first_request;
            let mut wait = quiet;
            loop {
                tokio::time::sleep(wait).await;
                let mut state = conns.state();
                let Some(fresh) = state.fresh.get(&id) else {
                    return;
                };
                let silent = fresh.heard.map_or(quiet, |at| at.elapsed());
                if silent < quiet {
                    wait = quiet - silent;
                    continue;
                }
                if let Some(fresh) = state.forget(id) {
                    tracing::debug!(peer = %fresh.peer, "closing a connection that sent no admitted request");
                    hang_up(fresh.fd);
                }
                return;
            }
        });
        Some(Conn {
            stream,
            id,
            conns: self.clone(),
        })
    }

    /// Out of descriptors: closes the oldest connection that never sent a
    /// request, so one that does can be accepted.
    fn make_room(&self) {
        let mut state = self.state();
        if let Some(id) = Self::evictable(&state)
            && let Some(fresh) = state.forget(id)
        {
            hang_up(fresh.fd);
        }
    }

    /// Connections open now.
    #[cfg(test)]
    fn live(&self) -> usize {
        self.state().live
    }

    /// Accepts from `listener` until `shutdown`, handing admitted connections
    /// to the server through the returned channel.
    pub fn accept(
        &self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> mpsc::Receiver<Conn> {
        let (tx, rx) = mpsc::channel(16);
        let conns = self.clone();
        tokio::spawn(async move {
            let mut backoff = BACKOFF_MIN;
            loop {
                let accepted = tokio::select! {
                    () = shutdown.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                match accepted {
                    Ok((stream, peer)) => {
                        backoff = BACKOFF_MIN;
                        // Small event frames must not wait for Nagle's algorithm.
                        if let Err(err) = stream.set_nodelay(true) {
                            tracing::debug!(%err, "could not set TCP_NODELAY");
                        }
                        if let Some(conn) = conns.admit(stream, peer)
                            && tx.send(conn).await.is_err()
                        {
                            return;
                        }
                    }
                    Err(err) => {
                        if out_of_descriptors(&err) {
                            conns.make_room();
                        }
                        let warn = conns.state().may_warn();
                        if !back_off(&err, &mut backoff, warn, &shutdown).await {
                            return;
                        }
                    }
                }
            }
        });
        rx
    }

    /// Accepts from the Unix socket until `shutdown`, with the same back-off
    /// (the socket serves only the daemon's own user, so it has no cap).
    pub fn accept_unix(
        &self,
        listener: UnixListener,
        shutdown: CancellationToken,
    ) -> mpsc::Receiver<UnixStream> {
        let (tx, rx) = mpsc::channel(16);
        let conns = self.clone();
        tokio::spawn(async move {
            let mut backoff = BACKOFF_MIN;
            loop {
                let accepted = tokio::select! {
                    () = shutdown.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                match accepted {
                    Ok((stream, _)) => {
                        backoff = BACKOFF_MIN;
                        if tx.send(stream).await.is_err() {
                            return;
                        }
                    }
                    Err(err) => {
                        if out_of_descriptors(&err) {
                            conns.make_room();
                        }
                        let warn = conns.state().may_warn();
                        if !back_off(&err, &mut backoff, warn, &shutdown).await {
                            return;
                        }
                    }
                }
            }
        });
        rx
    }
}

/// Waits after a failed accept: out of descriptors, for a pause that doubles
/// while the error lasts; otherwise (a peer that gave up before it was
/// accepted, and the like) not at all. False when the daemon is stopping.
async fn back_off(
    err: &io::Error,
    backoff: &mut Duration,
    warn: bool,
    shutdown: &CancellationToken,
) -> bool {
    if !out_of_descriptors(err) {
        tracing::debug!(%err, "accept failed");
        return true;
    }
    if warn {
        tracing::warn!(%err, pause = ?*backoff, "out of file descriptors; pausing the accept loop");
    }
    let pause = *backoff;
    *backoff = (*backoff * 2).min(BACKOFF_MAX);
    tokio::select! {
        () = shutdown.cancelled() => false,
        () = tokio::time::sleep(pause) => true,
    }
}

/// Errors that last until some descriptors or memory are freed: retrying at
/// once only spins.
fn out_of_descriptors(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// An admitted TCP connection; it leaves the count when hyper drops it.
pub struct Conn {
    stream: TcpStream,
    id: u64,
    conns: Conns,
}

impl Conn {
    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.stream.peer_addr().ok()
    }

    /// Waits for the peer's first bytes and copies them into `buf`, leaving
    /// them to be read (the TLS handshake tells a plaintext client by them).
    pub async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.peek(buf).await
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let mut state = self.conns.state();
        state.live = state.live.saturating_sub(1);
        state.forget(self.id);
    }
}

impl Connected for Conn {
    type ConnectInfo = crate::peer::TcpPeer;

    /// Called once per connection: the peer's uid is looked up here, not
    /// per request.
    fn connect_info(&self) -> crate::peer::TcpPeer {
        crate::peer::TcpPeer::of(&self.stream)
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// A tower layer that tells the registry which connections sent a request:
/// in front of authentication, every request ([`Conns::heard_from`]);
/// behind it, the admitted ones ([`Conns::saw_request`]).
#[derive(Clone)]
pub struct SeenLayer {
    conns: Conns,
    admitted: bool,
}

impl SeenLayer {
    /// Tells of every request, refused or not.
    pub fn any(conns: Conns) -> Self {
        Self {
            conns,
            admitted: false,
        }
    }

    /// Tells of the requests that reach it, which mark the connection used.
    pub fn admitted(conns: Conns) -> Self {
        Self {
            conns,
            admitted: true,
        }
    }
}

impl<S> tower::Layer<S> for SeenLayer {
    type Service = Seen<S>;

    fn layer(&self, inner: S) -> Seen<S> {
        Seen {
            inner,
            layer: self.clone(),
        }
    }
}

/// See [`SeenLayer`].
#[derive(Clone)]
pub struct Seen<S> {
    inner: S,
    layer: SeenLayer,
}

impl<S, B> tower::Service<tonic::codegen::http::Request<B>> for Seen<S>
where
    S: tower::Service<tonic::codegen::http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: tonic::codegen::http::Request<B>) -> Self::Future {
        if let Some(peer) = remote_addr(request.extensions()) {
            if self.layer.admitted {
                self.layer.conns.saw_request(peer);
            } else {
                self.layer.conns.heard_from(peer);
            }
        }
        self.inner.call(request)
    }
}

/// The peer's address as the listener describes the connection (plain or
/// TLS), or as tonic does once the auth layer has put it there.
fn remote_addr(extensions: &tonic::codegen::http::Extensions) -> Option<SocketAddr> {
    use crate::peer::TcpPeer;
    extensions
        .get::<TcpPeer>()
        .map(|peer| &peer.info)
        .or_else(|| {
            extensions
                .get::<TlsConnectInfo<TcpPeer>>()
                .map(|tls| &tls.get_ref().info)
        })
        .or_else(|| extensions.get::<TcpConnectInfo>())
        .or_else(|| {
            extensions
                .get::<TlsConnectInfo<TcpConnectInfo>>()
                .map(TlsConnectInfo::get_ref)
        })
        .and_then(|info| info.remote_addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair(listener: &TcpListener) -> (TcpStream, TcpStream, SocketAddr) {
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (server, peer) = accepted.unwrap();
        (client.unwrap(), server, peer)
    }

    #[tokio::test]
    async fn the_oldest_silent_connection_makes_room_and_used_ones_stay() {
        use tokio::io::AsyncReadExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let conns = Conns::new(1, Duration::from_secs(600));
        let (mut c1, s1, p1) = pair(&listener).await;
        let _first = conns.admit(s1, p1).unwrap();
        let (_c2, s2, p2) = pair(&listener).await;
        let second = conns
            .admit(s2, p2)
            .expect("room made by closing the silent one");
        let mut byte = [0u8; 1];
        assert_eq!(
            c1.read(&mut byte).await.unwrap(),
            0,
            "the silent one is hung up"
        );
        conns.saw_request(p2);
        let (_c3, s3, p3) = pair(&listener).await;
        assert!(
            conns.admit(s3, p3).is_none(),
            "a used connection is never evicted"
        );
        drop(second);
        assert_eq!(conns.live(), 1);
    }
}

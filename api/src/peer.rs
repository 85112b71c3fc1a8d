//! Who is at the other end of a connection, found once per connection: the
//! peer's credentials on the Unix socket (`SO_PEERCRED`, read by tonic into
//! `UdsConnectInfo`), and on TCP the uid of the peer's socket from
//! `/proc/net/tcp` or `/proc/net/tcp6` (as delve does), looked up at the
//! connection's first request that needs it, so that a flood of silent
//! connections costs no scan of the socket tables; and the identity a
//! client certificate gives, which the TLS layer finds and the auth layer
//! maps to a role.

use std::{
    io::{BufRead as _, BufReader},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::{Arc, OnceLock},
};

use tonic::transport::server::TcpConnectInfo;

/// What tonic hands every request of a TCP connection: the addresses and,
/// once asked for, the peer's uid. Clones share the one lookup.
#[derive(Debug, Clone)]
pub struct TcpPeer {
    /// The addresses, as tonic reports them for a plain TCP stream.
    pub info: TcpConnectInfo,
    uid: Arc<OnceLock<Option<u32>>>,
}

impl TcpPeer {
    /// The TCP peer a request came from, over TLS or not (tonic describes a
    /// TLS connection as `TlsConnectInfo` around it).
    pub fn of_request(extensions: &tonic::codegen::http::Extensions) -> Option<&Self> {
        extensions.get::<Self>().or_else(|| {
            extensions
                .get::<tonic::transport::server::TlsConnectInfo<Self>>()
                .map(|tls| tls.get_ref())
        })
    }

    /// The peer of `stream`; its uid is looked up later, by [`Self::uid`].
    pub fn of(stream: &tokio::net::TcpStream) -> Self {
        Self {
            info: TcpConnectInfo {
                local_addr: stream.local_addr().ok(),
                remote_addr: stream.peer_addr().ok(),
            },
            uid: Arc::default(),
        }
    }

    /// A peer whose uid is already known (for measuring the checks alone).
    pub fn with_uid(info: TcpConnectInfo, uid: Option<u32>) -> Self {
        Self {
            info,
            uid: Arc::new(OnceLock::from(uid)),
        }
    }

    /// The uid owning the peer's socket, when the peer is on this machine
    /// and its socket is established; the tables are read on the first call
    /// only.
    pub fn uid(&self) -> Option<u32> {
        *self
            .uid
            .get_or_init(|| match (self.info.local_addr, self.info.remote_addr) {
                (Some(local), Some(remote))
                    if remote.ip().is_loopback() || local.ip() == remote.ip() =>
                {
                    peer_uid(local, remote)
                }
                _ => None,
            })
    }
}

/// The uid of the socket at `remote` connected to `local` (our side), read
/// from the kernel's socket tables. Only an ESTABLISHED row counts: a socket
/// in TIME_WAIT shows uid 0, which must never pass for root.
pub fn peer_uid(local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    let local = unmap(local);
    let remote = unmap(remote);
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .find_map(|table| uid_in(table, local, remote))
}

fn unmap(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), addr.port()),
            None => addr,
        },
        IpAddr::V4(_) => addr,
    }
}

fn uid_in(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    let file = std::fs::File::open(table).ok()?;
    for line in BufReader::new(file).lines().skip(1) {
        let Ok(line) = line else { break };
        if let Some(uid) = row_uid(&line, local, remote) {
            return Some(uid);
        }
    }
    None
}

/// The uid of one row when it is the peer's socket: its local address is
/// the peer and its remote address is us.
fn row_uid(line: &str, local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    let mut fields = line.split_whitespace();
    let _slot = fields.next()?;
    let row_local = unmap(parse_addr(fields.next()?)?);
    let row_remote = unmap(parse_addr(fields.next()?)?);
    let state = fields.next()?;
    if row_local != remote || row_remote != local || state != "01" {
        return None;
    }
    // tx_queue:rx_queue, tr:tm->when, retrnsmt, then uid.
    fields.nth(3)?.parse().ok()
}

/// `0100007F:1E15` (IPv4) or 32 hex digits and a port (IPv6): each 32-bit
/// word is printed in host byte order.
fn parse_addr(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |s: &str| u32::from_str_radix(s, 16).ok().map(u32::to_ne_bytes);
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(ip)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_mut(4).enumerate() {
                chunk.copy_from_slice(&word(ip.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The name of user `uid`, when the password database has one.
pub fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into `pwd` and `buf`, both ours and sized as
    // passed; `result` is null or points at `pwd`.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name points into `buf`, NUL-terminated by getpwuid_r.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// The daemon's own uid.
pub fn own_uid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Where a [`PeerIdentity`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentitySource {
    /// The client certificate verified in this connection's TLS handshake.
    Certificate,
    /// A trusted sidecar's `x-forwarded-client-cert` header
    /// (`--trust-forwarded-client-cert`).
    ForwardedHeader,
}

/// The caller named by its certificate, put in every request's extensions
/// by `tls::IdentityLayer` when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerIdentity {
    /// As `tls::identity_of` or `tls::forwarded_identity` returns it.
    pub name: String,
    /// Where it came from.
    pub source: IdentitySource,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_address_forms() {
        assert_eq!(
            parse_addr("0100007F:1E15"),
            Some("127.0.0.1:7701".parse().unwrap())
        );
        assert_eq!(
            parse_addr("00000000000000000000000001000000:1E15"),
            Some("[::1]:7701".parse().unwrap())
        );
        assert_eq!(
            unmap(parse_addr("0000000000000000FFFF00000100007F:0050").unwrap()),
            "127.0.0.1:80".parse().unwrap()
        );
    }

    #[test]
    fn only_an_established_row_of_the_peer_counts() {
        let us: SocketAddr = "127.0.0.1:7701".parse().unwrap();
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let row = |state: &str| {
            format!(
                "   1: 0100007F:9C40 0100007F:1E15 {state} 00000000:00000000 00:00000000 00000000  1000        0 12345 1 0000000000000000 20 4 30 10 -1"
            )
        };
        assert_eq!(row_uid(&row("01"), us, peer), Some(1000));
        assert_eq!(row_uid(&row("06"), us, peer), None, "TIME_WAIT");
        assert_eq!(row_uid(&row("01"), peer, us), None, "our own side");
    }

    #[tokio::test]
    async fn finds_our_own_connection() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) =
            tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
        let _client = client.unwrap();
        let (server, _) = accepted.unwrap();
        assert_eq!(TcpPeer::of(&server).uid(), Some(own_uid()));
    }
}

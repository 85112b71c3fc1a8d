//! The layer that names each request's caller from its connection's client
//! certificate or a trusted sidecar's header.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
    task::{Context, Poll},
};

use rustls_pki_types::CertificateDer;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use super::{FORWARDED_CLIENT_CERT, forwarded_identity, identity_of};
use crate::peer::{IdentitySource, PeerIdentity};

/// A connection's verified chain, as tonic hands it to every request.
type Chain = Arc<Vec<CertificateDer<'static>>>;

/// A tower layer that puts the caller's [`PeerIdentity`] into each
/// request's extensions (where `tonic::Request::extensions` finds it).
#[derive(Debug, Clone)]
pub struct IdentityLayer {
    /// Read `x-forwarded-client-cert` (`--trust-forwarded-client-cert`).
    trust_forwarded: bool,
    names: Arc<Names>,
}

impl IdentityLayer {
    /// A layer that reads the sidecar's header only when `trust_forwarded`.
    pub fn new(trust_forwarded: bool) -> Self {
        Self {
            trust_forwarded,
            names: Arc::default(),
        }
    }
}

impl<S> tower::Layer<S> for IdentityLayer {
    type Service = WithIdentity<S>;

    fn layer(&self, inner: S) -> WithIdentity<S> {
        WithIdentity {
            inner,
            layer: self.clone(),
        }
    }
}

/// See [`IdentityLayer`].
#[derive(Debug, Clone)]
pub struct WithIdentity<S> {
    inner: S,
    layer: IdentityLayer,
}

impl<S, B> tower::Service<tonic::codegen::http::Request<B>> for WithIdentity<S>
where
    S: tower::Service<tonic::codegen::http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: tonic::codegen::http::Request<B>) -> Self::Future {
        // Whatever a client put there, only this layer's verdict stands.
        request.extensions_mut().remove::<PeerIdentity>();
        let identity = match chain(&request) {
            Some(chain) => self.layer.names.of(&chain).map(|name| PeerIdentity {
                name,
                source: IdentitySource::Certificate,
            }),
            None if self.layer.trust_forwarded => from_header(&request),
            None => None,
        };
        if let Some(identity) = identity {
            request.extensions_mut().insert(identity);
        }
        self.inner.call(request)
    }
}

/// The peer's verified chain when the request came over mutual TLS.
fn chain<B>(request: &tonic::codegen::http::Request<B>) -> Option<Chain> {
    // The daemon's listener describes its connections as `TcpPeer` (the
    // peer's user, for the same-user rule); plain tonic ones as
    // `TcpConnectInfo`.
    let extensions = request.extensions();
    extensions
        .get::<TlsConnectInfo<crate::peer::TcpPeer>>()
        .and_then(TlsConnectInfo::peer_certs)
        .or_else(|| {
            extensions
                .get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(TlsConnectInfo::peer_certs)
        })
        .filter(|chain| !chain.is_empty())
}

/// The sidecar's `x-forwarded-client-cert` identity.
fn from_header<B>(request: &tonic::codegen::http::Request<B>) -> Option<PeerIdentity> {
    // Several header lines are one list; the last element is the nearest
    // proxy's.
    let header = request
        .headers()
        .get_all(FORWARDED_CLIENT_CERT)
        .iter()
        .next_back()?
        .to_str()
        .ok()?;
    forwarded_identity(header).map(|name| PeerIdentity {
        name,
        source: IdentitySource::ForwardedHeader,
    })
}

/// The identity each live connection's certificate names, read once per
/// connection instead of parsing the certificate on every call (the parse
/// cost as much as the record encryption of a small call).
///
/// Keyed by the address of the connection's chain: every request of a
/// connection carries a clone of one `Arc`, and the entry's `Weak` keeps
/// that allocation, so no other chain can have the address while the entry
/// lives. Entries of closed connections are dropped as the map grows.
#[derive(Debug, Default)]
struct Names(Mutex<Book>);

#[derive(Debug, Default)]
struct Book {
    by_chain: HashMap<usize, (Weak<Vec<CertificateDer<'static>>>, Option<String>)>,
    /// The size at which closed connections' entries are swept next.
    sweep_at: usize,
}

/// The smallest size at which the book sweeps.
const SWEEP_FLOOR: usize = 64;

impl Names {
    /// The identity the leaf of `chain` names (see [`identity_of`]).
    fn of(&self, chain: &Chain) -> Option<String> {
        let key = Arc::as_ptr(chain) as usize;
        let mut book = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, name)) = book.by_chain.get(&key) {
            return name.clone();
        }
        let name = identity_of(&chain[0]);
        if book.by_chain.len() >= book.sweep_at.max(SWEEP_FLOOR) {
            book.by_chain.retain(|_, (weak, _)| weak.strong_count() > 0);
            book.sweep_at = book.by_chain.len() * 2;
        }
        book.by_chain
            .insert(key, (Arc::downgrade(chain), name.clone()));
        name
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().map(|book| book.by_chain.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain_naming(cn: &str) -> Chain {
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Arc::new(vec![CertificateDer::from(cert.der().to_vec())])
    }

    #[test]
    fn each_connection_is_named_by_its_own_certificate() {
        let names = Names::default();
        let (alice, bob) = (chain_naming("alice"), chain_naming("bob"));
        for _ in 0..3 {
            assert_eq!(names.of(&alice).as_deref(), Some("alice"));
            assert_eq!(names.of(&bob).as_deref(), Some("bob"));
        }
        assert_eq!(names.len(), 2);
    }

    #[test]
    fn closed_connections_leave_the_book() {
        let names = Names::default();
        let kept = chain_naming("kept");
        names.of(&kept);
        let template = chain_naming("gone");
        for _ in 0..SWEEP_FLOOR * 4 {
            // A new connection with the same certificate: its own chain.
            let chain = Arc::new(template.as_ref().clone());
            assert_eq!(names.of(&chain).as_deref(), Some("gone"));
        }
        assert!(names.len() <= SWEEP_FLOOR + 1, "{} entries", names.len());
        assert_eq!(names.of(&kept).as_deref(), Some("kept"));
    }

    /// What the layer puts into a request with `header`.
    async fn named(trust_forwarded: bool, header: &str) -> Option<PeerIdentity> {
        use tower::{Layer, ServiceExt};
        let request = tonic::codegen::http::Request::builder()
            .header(FORWARDED_CLIENT_CERT, header)
            .body(())
            .unwrap();
        let echo = tower::service_fn(|request: tonic::codegen::http::Request<()>| async move {
            Ok::<_, std::convert::Infallible>(request.extensions().get::<PeerIdentity>().cloned())
        });
        let layered = IdentityLayer::new(trust_forwarded).layer(echo);
        layered.oneshot(request).await.unwrap()
    }

    #[tokio::test]
    async fn the_header_is_read_only_when_trusted() {
        let header = "Hash=abc;URI=spiffe://cluster.local/ns/ci/sa/runner";
        assert_eq!(named(false, header).await, None);
        assert_eq!(
            named(true, header).await,
            Some(PeerIdentity {
                name: "spiffe://cluster.local/ns/ci/sa/runner".into(),
                source: IdentitySource::ForwardedHeader,
            })
        );
    }
}

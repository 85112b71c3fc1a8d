//! One gRPC channel per peer replica, opened on first use and kept, and
//! the credentials this replica presents on it.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use tonic::{
    codegen::http::{HeaderMap, HeaderValue},
    transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity as TlsIdentity},
};

use super::{Peer, PeerTls};
use stepd_core::error::{ApiError, ApiResult};
use stepd_core::identity::Identity;
use stepd_rpc::{ON_BEHALF_OF, ON_BEHALF_ROLE};

/// How long a peer may take to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) struct Peers {
    token: Option<String>,
    tls: Option<ClientTlsConfig>,
    channels: Mutex<HashMap<String, Channel>>,
}

impl Peers {
    pub(super) fn new(token: Option<String>, tls: Option<PeerTls>) -> Self {
        let tls = tls.map(|tls| {
            let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(tls.ca));
            if let Some((cert, key)) = tls.identity {
                config = config.identity(TlsIdentity::from_pem(cert, key));
            }
            config
        });
        Self {
            token,
            tls,
            channels: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The channel to `peer` (connecting lazily: a peer that is down fails
    /// the call made on it, not this).
    pub(crate) fn channel(&self, peer: &Peer) -> ApiResult<Channel> {
        if let Some(channel) = self.lock().get(&peer.address) {
            return Ok(channel.clone());
        }
        let unusable = |err: &dyn std::fmt::Display| {
            ApiError::internal(format!(
                "replica {} has an unusable address {}: {err}",
                peer.id,
                stepd_core::error::quote(&peer.address)
            ))
        };
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", peer.address))
            .map_err(|err| unusable(&err))?;
        if let Some(tls) = &self.tls {
            endpoint = endpoint
                .tls_config(tls.clone())
                .map_err(|err| unusable(&err))?;
        }
        let endpoint = endpoint
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        let channel = endpoint.connect_lazy();
        self.lock().insert(peer.address.clone(), channel.clone());
        Ok(channel)
    }

    /// Forgets the channel of a peer that left.
    pub(super) fn forget(&self, peer: &Peer) {
        self.lock().remove(&peer.address);
    }

    /// The headers of a call to a peer: this replica's token, if it has
    /// one, and the caller it acts for, if any.
    pub(crate) fn headers(&self, acting_for: Option<&Identity>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let token = self
            .token
            .as_ref()
            .map(|t| ("authorization", format!("Bearer {t}")));
        let caller = acting_for.into_iter().flat_map(|who| {
            [
                (ON_BEHALF_OF, who.name.clone()),
                (ON_BEHALF_ROLE, who.role.as_str().to_owned()),
            ]
        });
        for (name, value) in token.into_iter().chain(caller) {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        }
        headers
    }
}

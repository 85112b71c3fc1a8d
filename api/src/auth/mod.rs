//! Who may talk to stepd, and as what (docs/security.md).
//!
//! Every request passes one tower layer ([`layer::AuthLayer`]) that
//! establishes the caller's [`Identity`] — a bearer token when the request
//! carries one, else the peer's Unix user as found when its connection was
//! accepted — checks it against the role table ([`roles`]) and puts it in
//! the request's extensions for the handlers, which record it (who started a
//! session, who answered a pause, who changed a breakpoint). Mutating calls
//! write one audit line each ([`audit`]). A call made with a token of the
//! tokens file holds a [`lease`] on it, which ends the call when the token
//! is revoked or expires.

pub mod audit;
pub mod cli;
pub mod layer;
pub mod lease;
pub mod roles;
pub mod tokens;

use std::{path::Path, sync::Arc};

use stepd_proto::v1::ErrorReason;
use tonic::codegen::http::{self, Extensions, HeaderMap};
use tonic::transport::server::UdsConnectInfo;

pub use roles::Role;
pub use stepd_core::identity::{How, Identity};

use crate::peer;
use stepd_core::error::ApiError;

pub use stepd_rpc::{ON_BEHALF_OF, ON_BEHALF_ROLE};

/// The identity a call acts as: the caller's, or, when an admin (a peer
/// replica authenticates as one) forwards it, the identity it names. An
/// admin may already run any code as the daemon's user, so trusting it to
/// name the caller grants nothing new; anyone else naming one is refused.
pub fn acting(who: Arc<Identity>, headers: &HeaderMap) -> Result<Arc<Identity>, ApiError> {
    let Some(name) = headers.get(ON_BEHALF_OF) else {
        return Ok(who);
    };
    roles::peer_replica(
        &who,
        "acting on behalf of another identity (x-stepd-on-behalf-of)",
    )?;
    let role = headers
        .get(ON_BEHALF_ROLE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<Role>().ok())
        .ok_or_else(|| {
            ApiError::invalid_field(ON_BEHALF_ROLE, "a forwarded call names the caller's role")
        })?;
    Ok(Arc::new(Identity {
        name: String::from_utf8_lossy(name.as_bytes()).into_owned(),
        role,
        how: How::Forwarded,
    }))
}

/// The identity a request was authenticated as. A request that did not
/// pass the layer (only possible in tests that call handlers directly) is
/// `unauthenticated` with role viewer, which the field rules refuse.
pub fn identity<T>(request: &tonic::Request<T>) -> Arc<Identity> {
    request
        .extensions()
        .get::<Arc<Identity>>()
        .cloned()
        .unwrap_or_else(|| {
            Arc::new(Identity {
                name: "unauthenticated".into(),
                role: Role::Viewer,
                how: How::Insecure,
            })
        })
}

/// Who a request was authenticated as.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// The identity.
    pub identity: Arc<Identity>,
    /// The hash of the tokens-file token it presented, if it did: that token
    /// must stay valid for as long as the call lasts.
    pub file_token: Option<tokens::Hash>,
}

impl From<Arc<Identity>> for Authenticated {
    fn from(identity: Arc<Identity>) -> Self {
        Self {
            identity,
            file_token: None,
        }
    }
}

/// Authenticates requests: the daemon's user, the local token, the tokens
/// file.
pub struct Auth {
    own_uid: u32,
    own_name: String,
    unix_peer: Arc<Identity>,
    tcp_peer: Arc<Identity>,
    local: tokens::Hash,
    local_identity: Arc<Identity>,
    tokens: Option<tokens::TokenFile>,
    /// Certificate identity → role (`--tls-client-roles`).
    client_roles: std::collections::BTreeMap<String, Role>,
    insecure: bool,
}

impl Auth {
    /// Sets up authentication for a daemon on `data_dir` (creating the local
    /// token if absent) with the tokens file `tokens_file`, if any.
    pub fn new(
        data_dir: &Path,
        tokens_file: Option<&Path>,
        client_roles: &std::collections::BTreeMap<String, String>,
        insecure: bool,
    ) -> anyhow::Result<Self> {
        let client_roles = client_roles
            .iter()
            .map(|(identity, role)| {
                role.parse::<Role>()
                    .map(|role| (identity.clone(), role))
                    .map_err(|e| anyhow::anyhow!("--tls-client-roles, {identity}: {e}"))
            })
            .collect::<anyhow::Result<_>>()?;
        let own_uid = peer::own_uid();
        let own_name = same_user_name(own_uid);
        let same = |how| {
            Arc::new(Identity {
                name: own_name.clone(),
                role: Role::Admin,
                how,
            })
        };
        Ok(Self {
            own_uid,
            unix_peer: same(How::UnixPeer),
            tcp_peer: same(How::TcpPeer),
            own_name: own_name.clone(),
            local: tokens::local_token(data_dir)?,
            local_identity: Arc::new(Identity {
                name: "local".into(),
                role: Role::Admin,
                how: How::LocalToken,
            }),
            tokens: tokens_file.map(tokens::TokenFile::open).transpose()?,
            client_roles,
            insecure,
        })
    }

    /// Re-reads the tokens file (SIGHUP).
    pub fn reload(&self) {
        if let Some(file) = &self.tokens {
            file.refresh(true);
        }
    }

    /// Re-reads the tokens file every [`tokens::REFRESH`] when it changed,
    /// so edits reach open streams without a request presenting a token.
    pub async fn watch_tokens(self: Arc<Self>) {
        let Some(file) = &self.tokens else {
            return;
        };
        let mut tick = tokio::time::interval(tokens::REFRESH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            file.refresh(false);
        }
    }

    /// The identity of a request with these headers on the connection these
    /// extensions describe, or why there is none (UNAUTHENTICATED,
    /// TOKEN_EXPIRED).
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        extensions: &Extensions,
    ) -> Result<Authenticated, ApiError> {
        if let Some(value) = headers.get(http::header::AUTHORIZATION) {
            return self.by_token(value.as_bytes());
        }
        if let Some(peer) = extensions.get::<crate::peer::PeerIdentity>() {
            return self.by_certificate(peer).map(Authenticated::from);
        }
        let tcp = peer::TcpPeer::of_request(extensions);
        let (uid, how, peer) = if let Some(tcp) = tcp {
            let (remote, uid) = (tcp.info.remote_addr, tcp.uid());
            if self.insecure && remote.is_some_and(|a| !a.ip().is_loopback()) && uid.is_none() {
                return Ok(Arc::new(Identity {
                    name: "insecure".into(),
                    role: Role::Admin,
                    how: How::Insecure,
                })
                .into());
            }
            let peer = remote.map_or_else(|| "an unknown address".to_owned(), |a| a.to_string());
            (uid, How::TcpPeer, peer)
        } else if let Some(unix) = extensions.get::<UdsConnectInfo>() {
            (
                unix.peer_cred.map(|c| c.uid()),
                How::UnixPeer,
                "the Unix socket".to_owned(),
            )
        } else {
            (None, How::TcpPeer, "an unknown transport".to_owned())
        };
        match uid {
            Some(uid) if uid == self.own_uid => Ok(match how {
                How::UnixPeer => self.unix_peer.clone(),
                _ => self.tcp_peer.clone(),
            }
            .into()),
            Some(uid) => Err(unauthenticated(format!(
                "this stepd admits only its own user ({}) without a token, and the peer on {peer} runs as {}; \
                 send a token as `authorization: Bearer <token>` (see docs/security.md)",
                self.own_name,
                same_user_name(uid),
            ))
            .with("peer_uid", uid.to_string())),
            None => Err(unauthenticated(format!(
                "the user of the peer on {peer} could not be established (not on this machine?); \
                 send a token as `authorization: Bearer <token>` (see docs/security.md)"
            ))),
        }
    }

    /// A certificate's identity, as `--tls-client-roles` maps it. One it does
    /// not name was verified but has no role: PERMISSION_DENIED.
    fn by_certificate(&self, peer: &crate::peer::PeerIdentity) -> Result<Arc<Identity>, ApiError> {
        let (prefix, how) = match peer.source {
            crate::peer::IdentitySource::Certificate => ("cert", How::Certificate),
            crate::peer::IdentitySource::ForwardedHeader => {
                ("forwarded", How::ForwardedCertificate)
            }
        };
        match self.client_roles.get(&peer.name) {
            Some(role) => Ok(Arc::new(Identity {
                name: format!("{prefix}:{}", peer.name),
                role: *role,
                how,
            })),
            None => Err(ApiError::new(
                stepd_proto::v1::ErrorReason::PermissionDenied,
                format!(
                    "the certificate of {} is valid but --tls-client-roles gives it no role",
                    stepd_core::error::quote(&peer.name)
                ),
            )
            .with("identity", stepd_core::error::clip(&peer.name))),
        }
    }

    fn by_token(&self, value: &[u8]) -> Result<Authenticated, ApiError> {
        let token = std::str::from_utf8(value)
            .ok()
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                unauthenticated("the authorization header must be `Bearer <token>`".to_owned())
            })?;
        let presented = tokens::hash(token);
        let local = tokens::same(&self.local, &presented);
        let from_file = self.tokens.as_ref().and_then(|f| f.find(&presented));
        if local {
            return Ok(self.local_identity.clone().into());
        }
        let entry = from_file.ok_or_else(|| {
            unauthenticated(
                "the bearer token is not valid: unknown, mistyped or revoked; \
                 ask for a new one (stepd token add, see docs/security.md)"
                    .to_owned(),
            )
        })?;
        if entry.expired(std::time::SystemTime::now()) {
            return Err(expired(&entry));
        }
        Ok(Authenticated {
            identity: entry.identity,
            file_token: Some(presented),
        })
    }

    /// Whether the tokens-file token hashing to `token`, which authenticated
    /// a call as `identity`, still does, as the file was last read: still
    /// there, with the same name and role, and not expired.
    pub fn still_valid(&self, token: &tokens::Hash, identity: &Identity) -> Result<(), ApiError> {
        let entry = self.tokens.as_ref().and_then(|f| f.lookup(token));
        let Some(entry) = entry else {
            return Err(unauthenticated(format!(
                "the bearer token of {} was revoked (it is no longer in the tokens file) \
                 while this call was open; ask for a new one (see docs/security.md)",
                identity.name
            ))
            .with("identity", identity.name.clone()));
        };
        if *entry.identity != *identity {
            return Err(unauthenticated(format!(
                "the bearer token of {} is now {} with role {} in the tokens file; \
                 call again to be authenticated as that",
                identity.name, entry.identity.name, entry.identity.role
            ))
            .with("identity", identity.name.clone()));
        }
        if entry.expired(std::time::SystemTime::now()) {
            return Err(expired(&entry));
        }
        Ok(())
    }
}

/// TOKEN_EXPIRED for a token of the file past its expiry; names when, never
/// the token.
fn expired(entry: &tokens::Entry) -> ApiError {
    let at = entry.expires.map(tokens::format_time).unwrap_or_default();
    ApiError::new(
        ErrorReason::TokenExpired,
        format!(
            "the bearer token of {} expired at {at}; ask for a new one (stepd token add, see docs/security.md)",
            entry.identity.name
        ),
    )
    .with("identity", entry.identity.name.clone())
    .with("expired_at", at)
}

/// `uid:1000(alice)`, or `uid:1000` when the user has no name.
pub fn same_user_name(uid: u32) -> String {
    match peer::user_name(uid) {
        Some(name) => format!("uid:{uid}({name})"),
        None => format!("uid:{uid}"),
    }
}

fn unauthenticated(message: String) -> ApiError {
    ApiError::new(ErrorReason::Unauthenticated, message)
}

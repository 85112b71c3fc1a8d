//! Why a TLS handshake was refused, and the log of refusals: each reason is
//! logged at warn at most once per [`LOG_EVERY`], the line saying how many
//! of the same reason went unlogged since the last, so a flood of bad
//! handshakes costs a line per reason every ten seconds and not the disk.

use std::{
    collections::HashMap,
    io,
    net::SocketAddr,
    sync::Mutex,
    time::{Duration, Instant},
};

use tokio_rustls::rustls::{CertificateError, Error as TlsError, PeerIncompatible};

/// The longest a reason stays silent while refusals of it go on.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// Why a handshake failed, as the daemon can tell from its side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The client's first bytes were not a TLS record (plaintext gRPC).
    NotTls,
    /// The client offers no TLS version the daemon speaks (1.2, 1.3).
    ProtocolVersion,
    /// No cipher suite, key exchange group or signature scheme in common.
    Incompatible,
    /// `--tls-client-ca` asks for a certificate and the client sent none.
    NoClientCertificate,
    /// The client's certificate was not issued by `--tls-client-ca`.
    ClientCertificateUnknownCa,
    /// The client's certificate has expired.
    ClientCertificateExpired,
    /// The client's certificate is not valid yet.
    ClientCertificateNotYetValid,
    /// The client's certificate cannot serve for client authentication (its
    /// extended key usage, encoding, signature, revocation).
    ClientCertificateUnusable,
    /// The client refused the daemon's certificate (it sent an alert).
    ServerCertificateRefused,
    /// The handshake did not finish within `--first-request-timeout`.
    Timeout,
    /// Anything else (a malformed message, a reset).
    Other,
}

impl Reason {
    /// The reason's stable name, as logged (`reason=…`).
    pub fn key(self) -> &'static str {
        match self {
            Self::NotTls => "not_tls",
            Self::ProtocolVersion => "protocol_version",
            Self::Incompatible => "incompatible",
            Self::NoClientCertificate => "no_client_certificate",
            Self::ClientCertificateUnknownCa => "client_certificate_unknown_ca",
            Self::ClientCertificateExpired => "client_certificate_expired",
            Self::ClientCertificateNotYetValid => "client_certificate_not_yet_valid",
            Self::ClientCertificateUnusable => "client_certificate_unusable",
            Self::ServerCertificateRefused => "server_certificate_refused",
            Self::Timeout => "timeout",
            Self::Other => "other",
        }
    }

    /// What an operator reads.
    pub fn text(self) -> &'static str {
        match self {
            Self::NotTls => "the client does not speak TLS (a plaintext client on the TLS port?)",
            Self::ProtocolVersion => "the client offers no TLS version stepd speaks (1.2 or 1.3)",
            Self::Incompatible => {
                "the client has no cipher suite, group or signature scheme in common with stepd"
            }
            Self::NoClientCertificate => {
                "the client sent no certificate, and --tls-client-ca requires one"
            }
            Self::ClientCertificateUnknownCa => {
                "the client's certificate is not issued by --tls-client-ca"
            }
            Self::ClientCertificateExpired => "the client's certificate has expired",
            Self::ClientCertificateNotYetValid => "the client's certificate is not valid yet",
            Self::ClientCertificateUnusable => {
                "the client's certificate cannot be used for client authentication"
            }
            Self::ServerCertificateRefused => {
                "the client refused stepd's certificate (check the CA it trusts and the name it dials)"
            }
            Self::Timeout => "the handshake did not finish in time",
            Self::Other => "the handshake failed",
        }
    }

    /// The reason of a failed `accept`.
    pub fn of(err: &io::Error) -> Self {
        let Some(tls) = err.get_ref().and_then(|e| e.downcast_ref::<TlsError>()) else {
            return Self::Other;
        };
        match tls {
            TlsError::NoCertificatesPresented => Self::NoClientCertificate,
            TlsError::InvalidCertificate(cert) => match cert {
                CertificateError::UnknownIssuer => Self::ClientCertificateUnknownCa,
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    Self::ClientCertificateExpired
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    Self::ClientCertificateNotYetValid
                }
                _ => Self::ClientCertificateUnusable,
            },
            TlsError::PeerIncompatible(
                PeerIncompatible::Tls12NotOffered
                | PeerIncompatible::Tls12NotOfferedOrEnabled
                | PeerIncompatible::SupportedVersionsExtensionRequired,
            ) => Self::ProtocolVersion,
            TlsError::PeerIncompatible(_) => Self::Incompatible,
            TlsError::AlertReceived(_) => Self::ServerCertificateRefused,
            _ => Self::Other,
        }
    }
}

/// One reason's count since its last line.
#[derive(Debug)]
struct Window {
    logged_at: Instant,
    suppressed: u64,
}

/// The rate limit of refusal lines, per reason.
#[derive(Debug, Default)]
pub struct Refusals {
    windows: Mutex<HashMap<Reason, Window>>,
}

impl Refusals {
    /// Logs a refusal of `peer` for `reason` (`detail`: the TLS library's
    /// own words), unless one of the same reason was logged less than
    /// [`LOG_EVERY`] ago.
    pub fn note(&self, reason: Reason, peer: Option<SocketAddr>, detail: &str) {
        let Some(suppressed) = self.may_log(reason, Instant::now()) else {
            return;
        };
        let peer = peer.map_or_else(|| "an unknown address".to_owned(), |p| p.to_string());
        tracing::warn!(
            reason = reason.key(),
            %peer,
            suppressed,
            "refused a TLS handshake: {}: {detail}",
            reason.text(),
        );
    }

    /// `Some(refusals of `reason` not logged since its last line)` when a
    /// line may be written at `now`, else `None` (and one more is counted).
    fn may_log(&self, reason: Reason, now: Instant) -> Option<u64> {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        match windows.get_mut(&reason) {
            Some(window) if now.duration_since(window.logged_at) < LOG_EVERY => {
                window.suppressed += 1;
                None
            }
            Some(window) => {
                window.logged_at = now;
                Some(std::mem::take(&mut window.suppressed))
            }
            None => {
                windows.insert(
                    reason,
                    Window {
                        logged_at: now,
                        suppressed: 0,
                    },
                );
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_logged_once_a_window_and_counts_the_rest() {
        let refusals = Refusals::default();
        let t0 = Instant::now();
        assert_eq!(refusals.may_log(Reason::NotTls, t0), Some(0));
        for i in 1..=5 {
            assert_eq!(
                refusals.may_log(Reason::NotTls, t0 + Duration::from_millis(i)),
                None
            );
        }
        // Another reason has a window of its own.
        assert_eq!(refusals.may_log(Reason::Timeout, t0), Some(0));
        assert_eq!(refusals.may_log(Reason::NotTls, t0 + LOG_EVERY), Some(5));
        assert_eq!(
            refusals.may_log(Reason::NotTls, t0 + LOG_EVERY + Duration::from_secs(1)),
            None
        );
    }

    #[test]
    fn reasons_of_tls_errors() {
        let of = |err: TlsError| Reason::of(&io::Error::new(io::ErrorKind::InvalidData, err));
        assert_eq!(
            of(TlsError::NoCertificatesPresented),
            Reason::NoClientCertificate
        );
        assert_eq!(
            of(TlsError::InvalidCertificate(
                CertificateError::UnknownIssuer
            )),
            Reason::ClientCertificateUnknownCa
        );
        assert_eq!(
            of(TlsError::InvalidCertificate(CertificateError::Expired)),
            Reason::ClientCertificateExpired
        );
        assert_eq!(
            of(TlsError::InvalidCertificate(
                CertificateError::InvalidPurpose
            )),
            Reason::ClientCertificateUnusable
        );
        assert_eq!(
            of(TlsError::PeerIncompatible(
                PeerIncompatible::Tls12NotOffered
            )),
            Reason::ProtocolVersion
        );
        assert_eq!(
            of(TlsError::AlertReceived(
                tokio_rustls::rustls::AlertDescription::UnknownCA
            )),
            Reason::ServerCertificateRefused
        );
        assert_eq!(
            Reason::of(&io::Error::from(io::ErrorKind::UnexpectedEof)),
            Reason::Other
        );
    }
}

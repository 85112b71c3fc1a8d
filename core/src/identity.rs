//! Who a caller is and what it may do, as the core records it
//! (`started_by`, `pause_resolved.by`, `created_by`): the identity the API's
//! auth layer established, its role, and what each role may call.

use std::{fmt, str::FromStr};

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// What records and logs call it: `uid:1000(alice)` for a same-user
    /// peer, `token:NAME` for a token from the tokens file, `local` for the
    /// local token, `insecure` for an unauthenticated peer under
    /// `--insecure`.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// How it was established.
    pub how: How,
}

/// How an identity was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// The peer runs as the daemon's own user, on the Unix socket.
    UnixPeer,
    /// The peer runs as the daemon's own user, over TCP on this machine.
    TcpPeer,
    /// A token from the `--auth-tokens` file.
    Token,
    /// The local token (`<data-dir>/token`).
    LocalToken,
    /// A client certificate verified in the TLS handshake, named in
    /// `--tls-client-roles`.
    Certificate,
    /// A trusted proxy's `x-forwarded-client-cert`, named in
    /// `--tls-client-roles` (`--trust-forwarded-client-cert`).
    ForwardedCertificate,
    /// No credentials, admitted because of `--insecure`.
    Insecure,
    /// A caller of another replica, whose call that replica forwarded
    /// (`x-stepd-on-behalf-of`; only an admin may forward).
    Forwarded,
}

impl How {
    /// The name written in audit lines.
    pub fn as_str(self) -> &'static str {
        match self {
            How::UnixPeer => "unix-peer",
            How::TcpPeer => "tcp-peer",
            How::Token => "token",
            How::LocalToken => "local-token",
            How::Certificate => "certificate",
            How::ForwardedCertificate => "forwarded-certificate",
            How::Insecure => "insecure",
            How::Forwarded => "forwarded",
        }
    }
}

impl fmt::Display for How {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A role, from a token's line or given to a same-user peer (admin).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Watches: status, lists, events, output, inspector navigation.
    Viewer,
    /// A viewer that also steers sessions: pauses, stepping, evaluation,
    /// variables, breakpoints.
    Controller,
    /// A controller that also starts programs and stops the daemon.
    Admin,
    /// A probe library: `ProbeService.Connect` only.
    Probe,
}

impl Role {
    /// Every role, for tables and tests.
    pub const ALL: [Role; 4] = [Role::Viewer, Role::Controller, Role::Admin, Role::Probe];

    /// The role's name as written in token files and docs.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Controller => "controller",
            Role::Admin => "admin",
            Role::Probe => "probe",
        }
    }

    /// True when this role may call a method needing `need`.
    pub fn may(self, need: Need) -> bool {
        match need {
            Need::Open => true,
            Need::Probe => matches!(self, Role::Probe | Role::Admin),
            Need::Viewer => matches!(self, Role::Viewer | Role::Controller | Role::Admin),
            Need::Controller => matches!(self, Role::Controller | Role::Admin),
            Need::Admin => self == Role::Admin,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown role {s:?}; roles: viewer, controller, admin, probe"))
    }
}

/// What a method needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Nothing: answered without credentials (health).
    Open,
    /// viewer, controller or admin.
    Viewer,
    /// controller or admin.
    Controller,
    /// admin.
    Admin,
    /// probe or admin.
    Probe,
}

impl Need {
    /// The name used in docs/security.md's table.
    pub fn as_str(self) -> &'static str {
        match self {
            Need::Open => "open",
            Need::Viewer => "viewer",
            Need::Controller => "controller",
            Need::Admin => "admin",
            Need::Probe => "probe",
        }
    }

    /// Calls needing more than viewer change something; each writes an
    /// audit line.
    pub fn audited(self) -> bool {
        matches!(self, Need::Controller | Need::Admin | Need::Probe)
    }
}

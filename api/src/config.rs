//! Daemon configuration: flags, then `STEPD_*` environment variables, then an
//! optional TOML file, then defaults — in that order of precedence.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, bail};
use clap::Parser;
use serde::Deserialize;

use crate::telemetry::LogFormat;

/// The default TCP address; `stepctl` looks here first.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7701";
/// Holds one probe may have pending unless configured.
pub const DEFAULT_MAX_PROBE_PAUSES: usize = 1024;
/// Pauses the daemon keeps pending unless configured.
pub const DEFAULT_MAX_PAUSES: usize = 16 * 1024;

/// Bytes of events one subscriber may hold unread by default: its share of
/// memory stays at 16 MiB (plus one snapshot) however slowly it reads.
pub const DEFAULT_SUBSCRIBER_BUFFER_BYTES: usize = 16 << 20;

/// Bytes all subscribers may hold unread together by default (each message
/// once, however many streams hold it): four streams' full buffers of
/// different events, however many streams there are.
pub const DEFAULT_SUBSCRIBER_BYTES_TOTAL: usize = 64 << 20;

/// Bytes of events one ring keeps by default: 4,096 events of 2 KiB.
pub const DEFAULT_RING_BYTES: usize = 8 << 20;

/// Bytes of events all rings keep together by default: eight sessions' full
/// rings, so a thousand busy probe sessions cannot take gigabytes.
pub const DEFAULT_RING_BYTES_TOTAL: usize = 64 << 20;

/// Command line of `stepd`. Every flag can also be set as `STEPD_<NAME>` or in
/// the TOML file under the same name with underscores.
#[derive(Debug, Parser, Default)]
#[command(name = "stepd", version, about = "The stepd debugging daemon")]
pub struct Cli {
    /// TCP address to serve gRPC on [default: 127.0.0.1:7701]. Port 0 picks a free port.
    #[arg(long, env = "STEPD_LISTEN")]
    pub listen: Option<String>,
    /// Unix socket path [default: <data-dir>/run/stepd.sock].
    #[arg(long, env = "STEPD_UNIX_SOCKET")]
    pub unix_socket: Option<PathBuf>,
    /// Do not serve on a Unix socket.
    #[arg(long, env = "STEPD_NO_UNIX_SOCKET")]
    pub no_unix_socket: bool,
    /// Directory for the database and the socket [default: $XDG_DATA_HOME/stepd or ~/.local/share/stepd].
    #[arg(long, env = "STEPD_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The database: `sqlite:` (embedded, in the data directory), `sqlite:PATH`, or `postgres://…` shared by replicas [default: sqlite:].
    #[arg(long, env = "STEPD_DATABASE_URL")]
    pub database_url: Option<String>,
    /// On PostgreSQL, the address this replica's peers reach it on (host:port) [default: the --listen address].
    #[arg(long, env = "STEPD_ADVERTISE_ADDRESS")]
    pub advertise_address: Option<String>,
    /// On PostgreSQL, how long a replica's sessions stay its own after it last renewed its lease [default: 10s].
    #[arg(long, env = "STEPD_REPLICA_LEASE")]
    pub replica_lease: Option<String>,
    /// On PostgreSQL, a file holding the bearer token this replica presents to its peers.
    #[arg(long, env = "STEPD_PEER_TOKEN_FILE")]
    pub peer_token_file: Option<PathBuf>,
    /// On PostgreSQL with --tls-cert, the PEM client certificate this replica presents to its peers (needs --peer-tls-key).
    #[arg(long, env = "STEPD_PEER_TLS_CERT")]
    pub peer_tls_cert: Option<PathBuf>,
    /// PEM private key of --peer-tls-cert.
    #[arg(long, env = "STEPD_PEER_TLS_KEY")]
    pub peer_tls_key: Option<PathBuf>,
    /// On PostgreSQL with --tls-cert, the CAs whose certificates peers' servers present [default: --tls-client-ca].
    #[arg(long, env = "STEPD_PEER_TLS_CA")]
    pub peer_tls_ca: Option<PathBuf>,
    /// Do not record session history.
    #[arg(long, env = "STEPD_NO_HISTORY")]
    pub no_history: bool,
    /// Drop recorded session events older than this [default: 30d].
    #[arg(long, env = "STEPD_HISTORY_MAX_AGE")]
    pub history_max_age: Option<String>,
    /// Drop the oldest recorded session events while the history is larger than this many bytes [default: 1 GiB].
    #[arg(long, env = "STEPD_HISTORY_MAX_BYTES")]
    pub history_max_bytes: Option<u64>,
    /// TOML configuration file [default: <data-dir>/stepd.toml when it exists].
    #[arg(long, env = "STEPD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Allow a non-loopback listen address without authentication (e.g. behind a mesh sidecar that enforces mTLS).
    #[arg(long, env = "STEPD_INSECURE")]
    pub insecure: bool,
    /// Serve TLS on the TCP listener with this PEM certificate chain (needs --tls-key).
    #[arg(long, env = "STEPD_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "STEPD_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: require a client certificate issued by a CA in this PEM file; the caller's identity is the certificate's URI or DNS name, else its common name.
    #[arg(long, env = "STEPD_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
    /// File of "IDENTITY ROLE" lines giving client-certificate identities their role (viewer, controller, admin, probe); an identity not listed has no role.
    #[arg(long, env = "STEPD_TLS_CLIENT_ROLES")]
    pub tls_client_roles: Option<PathBuf>,
    /// Take the caller's identity from a mesh sidecar's x-forwarded-client-cert header when the connection has no client certificate. Only when nothing but the sidecar can reach stepd.
    #[arg(long, env = "STEPD_TRUST_FORWARDED_CLIENT_CERT")]
    pub trust_forwarded_client_cert: bool,
    /// Also serve grpc.health.v1 alone, in plaintext, on this TCP address (for health probes of a TLS daemon).
    #[arg(long, env = "STEPD_HEALTH_LISTEN")]
    pub health_listen: Option<String>,
    /// Log format: "text" or "json". Filter with RUST_LOG.
    #[arg(long, env = "STEPD_LOG_FORMAT")]
    pub log_format: Option<String>,
    /// Interval of heartbeats on quiet Subscribe and probe streams, e.g. "30s".
    #[arg(long, env = "STEPD_HEARTBEAT_INTERVAL")]
    pub heartbeat_interval: Option<String>,
    /// Events a subscriber may lag behind before it gets a gap and a fresh snapshot.
    #[arg(long, env = "STEPD_SUBSCRIBER_BUFFER")]
    pub subscriber_buffer: Option<usize>,
    /// Bytes of events a subscriber may hold unread (queued or in its HTTP/2 stream) before its stream is ended with LIMIT_EXCEEDED and the seq to resume after.
    #[arg(long, env = "STEPD_SUBSCRIBER_BUFFER_BYTES")]
    pub subscriber_buffer_bytes: Option<usize>,
    /// Bytes all subscribers may hold unread together, each message counted once; over it, the stream holding the most is ended as for --subscriber-buffer-bytes.
    #[arg(long, env = "STEPD_SUBSCRIBER_BYTES_TOTAL")]
    pub subscriber_bytes_total: Option<usize>,
    /// Events kept per session (and for daemon-level events) for resuming subscribers.
    #[arg(long, env = "STEPD_RING_CAPACITY")]
    pub ring_capacity: Option<usize>,
    /// Memory, in bytes, of the events kept per session (and for daemon-level events) for resuming subscribers.
    #[arg(long, env = "STEPD_RING_BYTES")]
    pub ring_bytes: Option<usize>,
    /// Memory, in bytes, of the events all sessions' rings keep together; over it, the busiest publisher's oldest events go first.
    #[arg(long, env = "STEPD_RING_BYTES_TOTAL")]
    pub ring_bytes_total: Option<usize>,
    /// Most Subscribe streams open at once.
    #[arg(long, env = "STEPD_MAX_SUBSCRIBERS")]
    pub max_subscribers: Option<usize>,
    /// Largest gRPC message accepted or sent, in bytes.
    #[arg(long, env = "STEPD_MAX_MESSAGE_BYTES")]
    pub max_message_bytes: Option<usize>,
    /// How long shutdown waits for connections to close, e.g. "5s".
    #[arg(long, env = "STEPD_DRAIN_TIMEOUT")]
    pub drain_timeout: Option<String>,
    /// Default limit of a probe hold, e.g. "30m".
    #[arg(long, env = "STEPD_HOLD_LIMIT")]
    pub hold_limit: Option<String>,
    /// Most holds one probe may have pending; a Hit past it is refused (LIMIT_EXCEEDED) and does not hold.
    #[arg(long, env = "STEPD_MAX_PROBE_PAUSES")]
    pub max_probe_pauses: Option<usize>,
    /// Most pauses pending in the daemon; a probe Hit past it is refused (LIMIT_EXCEEDED) and does not hold.
    #[arg(long, env = "STEPD_MAX_PAUSES")]
    pub max_pauses: Option<usize>,
    /// Mask the values of names matching this case-insensitive glob (a pattern without `*` or `?` matches names containing it), in pauses, snapshots, traces, variables and the inspector; repeatable, or comma-separated in the variable.
    #[arg(long = "redact", env = "STEPD_REDACT", value_delimiter = ',')]
    pub redact: Vec<String>,
    /// Largest DAP message accepted from a debug adapter, in bytes.
    #[arg(long, env = "STEPD_MAX_DAP_FRAME_BYTES")]
    pub max_dap_frame_bytes: Option<usize>,
    /// How long a debug adapter may take to answer one request, e.g. "30s".
    #[arg(long, env = "STEPD_ADAPTER_TIMEOUT")]
    pub adapter_timeout: Option<String>,
    /// How long an inspector lives without calls, e.g. "10m".
    #[arg(long, env = "STEPD_INSPECTOR_IDLE")]
    pub inspector_idle: Option<String>,
    /// Most inspectors open at once.
    #[arg(long, env = "STEPD_MAX_INSPECTORS")]
    pub max_inspectors: Option<usize>,
    /// Most TCP connections open at once; at the cap the oldest one that has not sent a request is closed, else the new one is.
    #[arg(long, env = "STEPD_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// How long a new TCP connection may stay without sending a request before it is closed, e.g. "10s".
    #[arg(long, env = "STEPD_FIRST_REQUEST_TIMEOUT")]
    pub first_request_timeout: Option<String>,
    /// Bearer tokens file: `NAME ROLE sha256:HEX [expires=TIME]` a line (see `stepd token add`); re-read when it changes and on SIGHUP.
    #[arg(long, env = "STEPD_AUTH_TOKENS")]
    pub auth_tokens: Option<PathBuf>,
    /// Most Subscribe streams one identity may have open.
    #[arg(long, env = "STEPD_MAX_SUBSCRIBERS_PER_IDENTITY")]
    pub max_subscribers_per_identity: Option<usize>,
    /// Most inspectors one identity may have open through Inspect.
    #[arg(long, env = "STEPD_MAX_INSPECTORS_PER_IDENTITY")]
    pub max_inspectors_per_identity: Option<usize>,
    /// Most sessions (DAP and probe) running at once; a Launch, Attach or probe Hello past it fails LIMIT_EXCEEDED.
    #[arg(long, env = "STEPD_MAX_SESSIONS")]
    pub max_sessions: Option<usize>,
    /// Most sessions one identity may have running (those it launched, attached or connected as a probe).
    #[arg(long, env = "STEPD_MAX_SESSIONS_PER_IDENTITY")]
    pub max_sessions_per_identity: Option<usize>,
    /// Most probe holds pending in the sessions of one identity; a Hit past it is refused (LIMIT_EXCEEDED) and does not hold.
    #[arg(long, env = "STEPD_MAX_PAUSES_PER_IDENTITY")]
    pub max_pauses_per_identity: Option<usize>,
    /// Manage tokens instead of serving.
    #[command(subcommand)]
    pub command: Option<crate::auth::cli::Command>,
}

/// The TOML file: the same settings as the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    database_url: Option<String>,
    advertise_address: Option<String>,
    replica_lease: Option<String>,
    peer_token_file: Option<PathBuf>,
    peer_tls_cert: Option<PathBuf>,
    peer_tls_key: Option<PathBuf>,
    peer_tls_ca: Option<PathBuf>,
    no_history: Option<bool>,
    history_max_age: Option<String>,
    history_max_bytes: Option<u64>,
    unix_socket: Option<PathBuf>,
    no_unix_socket: Option<bool>,
    insecure: Option<bool>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    tls_client_roles: Option<PathBuf>,
    trust_forwarded_client_cert: Option<bool>,
    health_listen: Option<String>,
    log_format: Option<String>,
    heartbeat_interval: Option<String>,
    subscriber_buffer: Option<usize>,
    subscriber_buffer_bytes: Option<usize>,
    subscriber_bytes_total: Option<usize>,
    ring_capacity: Option<usize>,
    ring_bytes: Option<usize>,
    ring_bytes_total: Option<usize>,
    max_subscribers: Option<usize>,
    max_message_bytes: Option<usize>,
    drain_timeout: Option<String>,
    hold_limit: Option<String>,
    max_probe_pauses: Option<usize>,
    max_pauses: Option<usize>,
    redact: Option<Vec<String>>,
    max_dap_frame_bytes: Option<usize>,
    adapter_timeout: Option<String>,
    inspector_idle: Option<String>,
    max_inspectors: Option<usize>,
    max_connections: Option<usize>,
    first_request_timeout: Option<String>,
    auth_tokens: Option<PathBuf>,
    max_subscribers_per_identity: Option<usize>,
    max_inspectors_per_identity: Option<usize>,
    max_sessions: Option<usize>,
    max_sessions_per_identity: Option<usize>,
    max_pauses_per_identity: Option<usize>,
}

/// Resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// TCP address as given (host:port).
    pub listen: SocketAddr,
    /// Unix socket path, unless disabled.
    pub unix_socket: Option<PathBuf>,
    /// Data directory.
    pub data_dir: PathBuf,
    /// The database (`Store::connect`).
    pub database_url: String,
    /// How replicas sharing a PostgreSQL database find and trust each other.
    pub replica: stepd_cluster::ReplicaConfig,
    /// Whether session history is recorded.
    pub history: bool,
    /// How long and how much history is kept.
    pub history_retention: stepd_history::Retention,
    /// The configuration file read, if any.
    pub config_file: Option<PathBuf>,
    /// Non-loopback binding allowed without authentication.
    pub insecure: bool,
    /// PEM certificate chain served on the TCP listener (TLS), with its key.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// CA whose client certificates are required (mutual TLS).
    pub tls_client_ca: Option<PathBuf>,
    /// Client identity → role name, from `--tls-client-roles` (see
    /// [`crate::tls::parse_client_roles`]); an identity absent has no role.
    pub tls_client_roles: std::collections::BTreeMap<String, String>,
    /// Identity from `x-forwarded-client-cert` when there is no client certificate.
    pub trust_forwarded_client_cert: bool,
    /// Plaintext listener serving health alone.
    pub health_listen: Option<SocketAddr>,
    /// Log format.
    pub log_format: LogFormat,
    /// Heartbeat interval on quiet streams.
    pub heartbeat_interval: Duration,
    /// Subscriber lag bound, in events.
    pub subscriber_buffer: usize,
    /// Subscriber lag bound, in bytes.
    pub subscriber_buffer_bytes: usize,
    /// What all subscribers may hold unread together, in bytes.
    pub subscriber_bytes_total: usize,
    /// Ring capacity per session, in events.
    pub ring_capacity: usize,
    /// Ring capacity per session, in bytes.
    pub ring_bytes: usize,
    /// Ring capacity of all sessions together, in bytes.
    pub ring_bytes_total: usize,
    /// Subscribe streams cap.
    pub max_subscribers: usize,
    /// gRPC message size cap.
    pub max_message_bytes: usize,
    /// Shutdown drain deadline.
    pub drain_timeout: Duration,
    /// Default probe hold limit.
    pub hold_limit: Duration,
    /// Pending holds cap per probe session.
    pub max_probe_pauses: usize,
    /// Pending pauses cap of the daemon (enforced on probe holds).
    pub max_pauses: usize,
    /// Name patterns whose values are masked.
    pub redact: Vec<String>,
    /// DAP frame size cap.
    pub max_dap_frame_bytes: usize,
    /// Adapter request timeout.
    pub adapter_timeout: Duration,
    /// Inspector expiry after inactivity.
    pub inspector_idle: Duration,
    /// Inspectors cap.
    pub max_inspectors: usize,
    /// TCP connections cap.
    pub max_connections: usize,
    /// Time a new connection has to send its first request.
    pub first_request_timeout: Duration,
    /// The bearer tokens file, if any.
    pub auth_tokens: Option<PathBuf>,
    /// Subscribe streams cap per identity.
    pub max_subscribers_per_identity: usize,
    /// Inspectors cap per identity (those opened by Inspect).
    pub max_inspectors_per_identity: usize,
    /// Running sessions cap.
    pub max_sessions: usize,
    /// Running sessions cap per identity.
    pub max_sessions_per_identity: usize,
    /// Pending probe holds cap per identity.
    pub max_pauses_per_identity: usize,
}

impl Config {
    /// Resolves the command line against the environment (done by clap), the file and defaults.
    pub fn resolve(cli: Cli) -> anyhow::Result<Self> {
        let data_dir = match cli.data_dir {
            Some(dir) => dir,
            None => default_data_dir()?,
        };
        let (file, config_file) = load_file(cli.config.as_deref(), &data_dir)?;

        let listen_text = cli
            .listen
            .or(file.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
        let listen = parse_listen(&listen_text, "--listen")?;
        let insecure = cli.insecure || file.insecure.unwrap_or(false);
        let tls_cert = cli.tls_cert.or(file.tls_cert);
        let tls_key = cli.tls_key.or(file.tls_key);
        let tls_client_ca = cli.tls_client_ca.or(file.tls_client_ca);
        let tls_client_roles = cli.tls_client_roles.or(file.tls_client_roles);
        let trust_forwarded_client_cert =
            cli.trust_forwarded_client_cert || file.trust_forwarded_client_cert.unwrap_or(false);
        check_tls_flags(
            &tls_cert,
            &tls_key,
            &tls_client_ca,
            tls_client_roles.is_some(),
            trust_forwarded_client_cert,
        )?;
        let tls_client_roles = match &tls_client_roles {
            Some(path) => crate::tls::load_client_roles(path)?,
            None => Default::default(),
        };
        let tokens = cli.auth_tokens.is_some() || file.auth_tokens.is_some();
        crate::tls::check_exposure(listen, tls_cert.is_some(), tokens, insecure)?;
        let health_listen = cli
            .health_listen
            .or(file.health_listen)
            .map(|text| parse_listen(&text, "--health-listen"))
            .transpose()?;
        let no_unix = cli.no_unix_socket || file.no_unix_socket.unwrap_or(false);
        let unix_socket = if no_unix {
            None
        } else {
            Some(
                cli.unix_socket
                    .or(file.unix_socket)
                    .unwrap_or_else(|| data_dir.join("run").join("stepd.sock")),
            )
        };
        let log_format = match cli.log_format.or(file.log_format).as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => bail!("--log-format must be \"text\" or \"json\", not {other:?}"),
        };
        // Each identity's share defaults to half the daemon's cap, so one
        // client never takes every slot.
        let max_sessions = positive("max-sessions", cli.max_sessions.or(file.max_sessions), 4096)?;
        let max_pauses = positive(
            "max-pauses",
            cli.max_pauses.or(file.max_pauses),
            DEFAULT_MAX_PAUSES,
        )?;
        let database_url = cli
            .database_url
            .or(file.database_url)
            .unwrap_or_else(|| "sqlite:".to_owned());
        let history = !(cli.no_history || file.no_history.unwrap_or(false));
        let replica = replica_config(
            PeerFlags {
                ca: cli.peer_tls_ca.or(file.peer_tls_ca),
                cert: cli.peer_tls_cert.or(file.peer_tls_cert),
                key: cli.peer_tls_key.or(file.peer_tls_key),
                advertise_address: cli.advertise_address.or(file.advertise_address),
                lease: cli.replica_lease.or(file.replica_lease),
                token_file: cli.peer_token_file.or(file.peer_token_file),
            },
            tls_cert.is_some(),
            tls_client_ca.as_ref(),
            &database_url,
        )?;
        let history_retention = stepd_history::Retention {
            max_age: duration(
                "history-max-age",
                cli.history_max_age.or(file.history_max_age),
                Duration::from_secs(30 * 24 * 3600),
            )?,
            max_bytes: cli
                .history_max_bytes
                .or(file.history_max_bytes)
                .unwrap_or(1 << 30),
        };
        Ok(Self {
            listen,
            unix_socket,
            data_dir,
            database_url,
            history,
            history_retention,
            replica,
            config_file,
            insecure,
            tls_cert,
            tls_key,
            tls_client_ca,
            tls_client_roles,
            trust_forwarded_client_cert,
            health_listen,
            log_format,
            heartbeat_interval: duration(
                "heartbeat-interval",
                cli.heartbeat_interval.or(file.heartbeat_interval),
                Duration::from_secs(30),
            )?,
            subscriber_buffer: positive(
                "subscriber-buffer",
                cli.subscriber_buffer.or(file.subscriber_buffer),
                4096,
            )?,
            subscriber_buffer_bytes: positive(
                "subscriber-buffer-bytes",
                cli.subscriber_buffer_bytes.or(file.subscriber_buffer_bytes),
                DEFAULT_SUBSCRIBER_BUFFER_BYTES,
            )?,
            subscriber_bytes_total: positive(
                "subscriber-bytes-total",
                cli.subscriber_bytes_total.or(file.subscriber_bytes_total),
                DEFAULT_SUBSCRIBER_BYTES_TOTAL,
            )?,
            ring_capacity: positive(
                "ring-capacity",
                cli.ring_capacity.or(file.ring_capacity),
                4096,
            )?,
            ring_bytes: positive(
                "ring-bytes",
                cli.ring_bytes.or(file.ring_bytes),
                DEFAULT_RING_BYTES,
            )?,
            ring_bytes_total: positive(
                "ring-bytes-total",
                cli.ring_bytes_total.or(file.ring_bytes_total),
                DEFAULT_RING_BYTES_TOTAL,
            )?,
            max_subscribers: positive(
                "max-subscribers",
                cli.max_subscribers.or(file.max_subscribers),
                1024,
            )?,
            max_message_bytes: positive(
                "max-message-bytes",
                cli.max_message_bytes.or(file.max_message_bytes),
                16 * 1024 * 1024,
            )?,
            drain_timeout: duration(
                "drain-timeout",
                cli.drain_timeout.or(file.drain_timeout),
                Duration::from_secs(5),
            )?,
            hold_limit: duration(
                "hold-limit",
                cli.hold_limit.or(file.hold_limit),
                Duration::from_secs(30 * 60),
            )?,
            max_probe_pauses: positive(
                "max-probe-pauses",
                cli.max_probe_pauses.or(file.max_probe_pauses),
                DEFAULT_MAX_PROBE_PAUSES,
            )?,
            max_pauses,
            redact: if cli.redact.is_empty() {
                file.redact.unwrap_or_default()
            } else {
                cli.redact
            },
            max_dap_frame_bytes: positive(
                "max-dap-frame-bytes",
                cli.max_dap_frame_bytes.or(file.max_dap_frame_bytes),
                64 * 1024 * 1024,
            )?,
            adapter_timeout: duration(
                "adapter-timeout",
                cli.adapter_timeout.or(file.adapter_timeout),
                Duration::from_secs(30),
            )?,
            inspector_idle: duration(
                "inspector-idle",
                cli.inspector_idle.or(file.inspector_idle),
                Duration::from_secs(10 * 60),
            )?,
            max_inspectors: positive(
                "max-inspectors",
                cli.max_inspectors.or(file.max_inspectors),
                256,
            )?,
            max_connections: positive(
                "max-connections",
                cli.max_connections.or(file.max_connections),
                512,
            )?,
            first_request_timeout: duration(
                "first-request-timeout",
                cli.first_request_timeout.or(file.first_request_timeout),
                Duration::from_secs(10),
            )?,
            auth_tokens: cli.auth_tokens.or(file.auth_tokens),
            max_subscribers_per_identity: positive(
                "max-subscribers-per-identity",
                cli.max_subscribers_per_identity
                    .or(file.max_subscribers_per_identity),
                256,
            )?,
            max_inspectors_per_identity: positive(
                "max-inspectors-per-identity",
                cli.max_inspectors_per_identity
                    .or(file.max_inspectors_per_identity),
                64,
            )?,
            max_sessions,
            max_sessions_per_identity: positive(
                "max-sessions-per-identity",
                cli.max_sessions_per_identity
                    .or(file.max_sessions_per_identity),
                (max_sessions / 2).max(1),
            )?,
            max_pauses_per_identity: positive(
                "max-pauses-per-identity",
                cli.max_pauses_per_identity.or(file.max_pauses_per_identity),
                (max_pauses / 2).max(1),
            )?,
        })
    }
}

/// Refuses TLS flags given without the ones they need.
fn check_tls_flags(
    cert: &Option<PathBuf>,
    key: &Option<PathBuf>,
    client_ca: &Option<PathBuf>,
    client_roles: bool,
    trust_forwarded_client_cert: bool,
) -> anyhow::Result<()> {
    match (cert, key) {
        (Some(_), None) => bail!("--tls-cert needs --tls-key"),
        (None, Some(_)) => bail!("--tls-key needs --tls-cert"),
        _ => {}
    }
    if client_ca.is_some() && cert.is_none() {
        bail!("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS first)");
    }
    if client_roles && client_ca.is_none() && !trust_forwarded_client_cert {
        bail!(
            "--tls-client-roles needs client identities: --tls-client-ca or \
             --trust-forwarded-client-cert"
        );
    }
    Ok(())
}

/// The flags about this replica's peers, from the command line or the file.
struct PeerFlags {
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    advertise_address: Option<String>,
    lease: Option<String>,
    token_file: Option<PathBuf>,
}

/// Where this replica's peers are and how they are reached: TLS as this
/// replica serves it (the same deployment), its lease and its token.
fn replica_config(
    peer: PeerFlags,
    tls: bool,
    tls_client_ca: Option<&PathBuf>,
    database_url: &str,
) -> anyhow::Result<stepd_cluster::ReplicaConfig> {
    let read = |flag: &str, path: &PathBuf| {
        std::fs::read(path).with_context(|| format!("reading {flag} {}", path.display()))
    };
    // Peers serve TLS as this replica does (the same deployment).
    let peer_tls = if tls && database_url.starts_with("postgres") {
        let ca = peer.ca.or_else(|| tls_client_ca.cloned());
        let identity = match (peer.cert, peer.key) {
            (Some(cert), Some(key)) => Some((
                read("--peer-tls-cert", &cert)?,
                read("--peer-tls-key", &key)?,
            )),
            (None, None) => None,
            _ => bail!("--peer-tls-cert and --peer-tls-key go together"),
        };
        let Some(ca) = ca else {
            bail!(
                "replicas serving TLS check each other's certificates: give \
                 --peer-tls-ca (or --tls-client-ca)"
            );
        };
        Some(stepd_cluster::PeerTls {
            ca: read("--peer-tls-ca", &ca)?,
            identity,
        })
    } else {
        None
    };
    Ok(stepd_cluster::ReplicaConfig {
        tls: peer_tls,
        advertise_address: peer.advertise_address,
        lease: duration("replica-lease", peer.lease, Duration::from_secs(10))?,
        peer_token: match peer.token_file {
            None => None,
            Some(path) => Some(
                std::fs::read_to_string(&path)
                    .with_context(|| format!("reading --peer-token-file {}", path.display()))?
                    .trim()
                    .to_owned(),
            ),
        },
    })
}

/// A duration flag, from the command line or the file, else `default`.
fn duration(name: &str, value: Option<String>, default: Duration) -> anyhow::Result<Duration> {
    match value {
        None => Ok(default),
        Some(text) => humantime::parse_duration(&text)
            .with_context(|| format!("--{name}: {text:?} is not a duration like \"30s\"")),
    }
}

/// A count flag that must be at least 1, else `default`.
fn positive(name: &str, value: Option<usize>, default: usize) -> anyhow::Result<usize> {
    match value {
        Some(0) => bail!("--{name} must be at least 1"),
        Some(n) => Ok(n),
        None => Ok(default),
    }
}

fn parse_listen(text: &str, flag: &str) -> anyhow::Result<SocketAddr> {
    let normalised = match text.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => text.to_owned(),
    };
    normalised
        .parse()
        .with_context(|| format!("{flag}: {text:?} is not an address like 127.0.0.1:7701"))
}

fn default_data_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("stepd"));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .context("neither --data-dir, XDG_DATA_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".local/share/stepd"))
}

fn load_file(
    explicit: Option<&Path>,
    data_dir: &Path,
) -> anyhow::Result<(FileConfig, Option<PathBuf>)> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => {
            let default = data_dir.join("stepd.toml");
            if !default.exists() {
                return Ok((FileConfig::default(), None));
            }
            default
        }
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading configuration file {}", path.display()))?;
    let file = toml::from_str(&text)
        .with_context(|| format!("parsing configuration file {}", path.display()))?;
    Ok((file, Some(path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(data_dir: &Path) -> Cli {
        Cli {
            data_dir: Some(data_dir.to_path_buf()),
            ..Cli::default()
        }
    }

    #[test]
    fn non_loopback_needs_insecure() {
        let dir = std::env::temp_dir();
        let mut c = cli(&dir);
        c.listen = Some("0.0.0.0:7701".into());
        let err = Config::resolve(c).unwrap_err().to_string();
        assert!(err.contains("--insecure"), "{err}");
        let mut c = cli(&dir);
        c.listen = Some("0.0.0.0:7701".into());
        c.insecure = true;
        assert!(Config::resolve(c).is_ok());
    }

    #[test]
    fn flags_beat_file_beats_defaults() {
        let dir = std::env::temp_dir().join(format!("stepd-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("stepd.toml"),
            "ring_capacity = 7\nheartbeat_interval = \"2s\"\n",
        )
        .unwrap();
        let mut c = cli(&dir);
        c.ring_capacity = Some(9);
        let config = Config::resolve(c).unwrap();
        assert_eq!(config.ring_capacity, 9);
        assert_eq!(config.heartbeat_interval, Duration::from_secs(2));
        assert_eq!(config.subscriber_buffer, 4096);
        assert_eq!(
            config.subscriber_buffer_bytes,
            DEFAULT_SUBSCRIBER_BUFFER_BYTES
        );
        assert_eq!(config.ring_bytes, DEFAULT_RING_BYTES);
        assert_eq!(config.max_connections, 512);
        assert_eq!(config.max_probe_pauses, 1024);
        assert_eq!(config.max_pauses, 16384);
        assert_eq!(config.first_request_timeout, Duration::from_secs(10));
        assert_eq!(config.config_file, Some(dir.join("stepd.toml")));
        std::fs::write(dir.join("stepd.toml"), "no_such_setting = 1\n").unwrap();
        assert!(Config::resolve(cli(&dir)).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Serving: listeners (TCP on loopback, a private Unix socket), the gRPC
//! router with health and reflection, and a shutdown with a bounded drain.

use std::{
    os::unix::fs::{DirBuilderExt, PermissionsExt},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::{Context, bail};
use stepd_proto::v1::{
    breakpoint_service_server::BreakpointServiceServer, daemon_service_server::DaemonServiceServer,
    history_service_server::HistoryServiceServer, inspector_service_server::InspectorServiceServer,
    probe_service_server::ProbeServiceServer, session_service_server::SessionServiceServer,
};
use tokio::net::{TcpListener, UnixListener};
use tokio_stream::{StreamExt as _, wrappers::ReceiverStream};
use tokio_util::either::Either;
use tonic::transport::{Server, server::Router};
use tonic_health::ServingStatus;

use crate::http_limits::remap_size_refusal;
use crate::{
    auth::layer::AuthLayer,
    config::Config,
    conns::{Conns, SeenLayer},
    daemon::Daemon,
    handlers::{
        breakpoint::BreakpointApi, daemon::DaemonApi, event::EventApi, history::HistoryApi,
        inspector::InspectorApi, probe::ProbeApi, session::SessionApi,
    },
    malformed::remap_decode_refusal,
};

/// HTTP/2 flow-control window of each stream the daemon receives, in bytes.
///
/// A peer that sends faster than the daemon reads (a probe writing one small
/// message per point) fills this window and then waits for the daemon. The
/// HTTP/2 layer also closes a connection (GOAWAY `ENHANCE_YOUR_CALM`,
/// `too_many_data_frames`) whose unread small DATA frames cost more than half
/// the connection window, counting each frame as at least 256 bytes. So the
/// window must fill first: 16 KiB of the smallest frames a whole gRPC
/// message makes (5 bytes) counts as 16384 / 5 × 251 ≈ 0.8 MiB, within the
/// 1 MiB allowance of a 2 MiB connection window. With hyper's default 1 MiB
/// stream window a probe was dropped after about 2,300 unread messages.
const STREAM_WINDOW: u32 = 16 * 1024;
/// HTTP/2 flow-control window of each connection, in bytes (see
/// [`STREAM_WINDOW`]; half of it is the allowance for unread small frames).
const CONNECTION_WINDOW: u32 = 2 * 1024 * 1024;

/// The most header bytes HTTP/2 decodes for one request
/// (SETTINGS_MAX_HEADER_LIST_SIZE, counted as HTTP/2 does).
///
/// Far above what a request may carry (`limits::HEADER_BYTES`, 16 KiB), so
/// that a request over that is decoded and refused with a typed status on
/// its own stream. At hyper's default of 16 KiB, h2 answered a larger header
/// block with a bare HTTP 431 and one over four times that with a GOAWAY
/// that ended every stream of the connection. HPACK's state belongs to the
/// connection, so a header block h2 will not decode at all (beyond about
/// 1.25 × this, encoded, or 4 × this, decoded) still closes it; 1.5 MiB puts
/// that past a 1 MiB header, and what one connection may make the daemon
/// buffer (this, a quarter more while decoding) stays below what its
/// flow-control window already allows it ([`CONNECTION_WINDOW`]).
const HEADER_LIST_BYTES: u32 = 3 * 512 * 1024;

/// Runs the daemon until a signal or a Shutdown RPC, then drains.
pub async fn run(config: Config) -> anyhow::Result<()> {
    // Held until run returns, after the store is closed: a second daemon on
    // this directory fails here, whatever addresses it listens on.
    let lock = stepd_store::datadir::lock(&config.data_dir)?;
    let tls = crate::tls::server_config(&crate::tls::ServerTlsFiles {
        cert: config.tls_cert.clone(),
        key: config.tls_key.clone(),
        client_ca: config.tls_client_ca.clone(),
    })?;
    let tcp = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let tcp_addr = tcp
        .local_addr()
        .with_context(|| format!("reading the address bound for {}", config.listen))?;
    let unix = match &config.unix_socket {
        Some(path) => Some((bind_unix(path)?, path.clone())),
        None => None,
    };
    let auth = Arc::new(crate::auth::Auth::new(
        &config.data_dir,
        config.auth_tokens.as_deref(),
        &config.tls_client_roles,
        config.insecure,
    )?);
    let health_tcp = match config.health_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding --health-listen {addr}"))?,
        ),
        None => None,
    };
    let health_addr = health_tcp
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()
        .context("reading the address bound for --health-listen")?;
    let daemon = Arc::new(Daemon::open(config).await?);
    let mut listen = vec![tcp_addr.to_string()];
    if let Some(addr) = health_addr {
        listen.push(format!("health:{addr}"));
    }
    if let Some((_, path)) = &unix {
        listen.push(format!("unix:{}", path.display()));
    }
    let _ = daemon.listen.set(listen.clone());
    if let Some(cluster) = &daemon.cluster {
        cluster
            .join(&tcp_addr.to_string())
            .await
            .context("registering this replica in the session directory")?;
    }

    let (health, health_service) = crate::health::reporter(daemon.shutdown.clone());
    set_health(&health, ServingStatus::Serving).await;
    let conns = Conns::new(
        daemon.config.max_connections,
        daemon.config.first_request_timeout,
    );
    // TLS is the TCP listener's; the Unix socket stays plaintext (only the
    // daemon's user can open it).
    let tcp_router = router(&daemon, health_service.clone(), &conns, &auth)?;
    let router = router(&daemon, health_service.clone(), &conns, &auth)?;

    let shutdown = daemon.shutdown.clone();
    tokio::spawn(on_signal(shutdown.clone()));
    tokio::spawn(reload_on_hangup(auth.clone()));
    tokio::spawn(auth.clone().watch_tokens());
    tokio::spawn(end_sessions_on_shutdown(daemon.clone(), health.clone()));

    tracing::info!(listen = ?listen, instance = %daemon.instance_id, data_dir = %daemon.config.data_dir.display(), "stepd ready");
    announce_ready(
        tcp_addr,
        unix.as_ref().map(|(_, p)| p.as_path()),
        health_addr,
    );

    let tcp_incoming = conns.accept(tcp, shutdown.clone());
    let tcp_server = match tls {
        Some(tls) => {
            let handshakes = crate::tls::Handshakes::new(tls, daemon.config.first_request_timeout);
            Either::Left(tcp_router.serve_with_incoming_shutdown(
                ReceiverStream::new(handshakes.accept(tcp_incoming)).map(Ok::<_, std::io::Error>),
                shutdown.clone().cancelled_owned(),
            ))
        }
        None => Either::Right(tcp_router.serve_with_incoming_shutdown(
            ReceiverStream::new(tcp_incoming).map(Ok::<_, std::io::Error>),
            shutdown.clone().cancelled_owned(),
        )),
    };
    let health_server = serve_health(health_tcp, health_service, &conns, &shutdown);
    let unix_path = unix.as_ref().map(|(_, p)| p.clone());
    let unix_server = async {
        match unix {
            Some((listener, _)) => {
                router
                    .serve_with_incoming_shutdown(
                        ReceiverStream::new(conns.accept_unix(listener, shutdown.clone()))
                            .map(Ok::<_, std::io::Error>),
                        shutdown.clone().cancelled_owned(),
                    )
                    .await
            }
            None => Ok(()),
        }
    };
    let drain = daemon.config.drain_timeout;
    tokio::select! {
        result = async { tokio::try_join!(tcp_server, unix_server, health_server) } => { result?; }
        () = deadline_after(&shutdown, drain) => {
            tracing::warn!(?drain, "drain deadline passed; closing the remaining connections");
        }
    }
    close(&daemon, unix_path).await;
    drop(lock);
    tracing::info!("stepd stopped");
    Ok(())
}

/// A machine-readable line on stdout for whoever started the daemon (tests,
/// stepctl): where it listens.
fn announce_ready(
    tcp: std::net::SocketAddr,
    unix: Option<&std::path::Path>,
    health: Option<std::net::SocketAddr>,
) {
    println!(
        "stepd ready tcp={tcp} unix={}{}",
        unix.map(|p| p.display().to_string()).unwrap_or_default(),
        health
            .map(|addr| format!(" health={addr}"))
            .unwrap_or_default()
    );
}

/// Health alone, plaintext, on `--health-listen`, for probes that cannot
/// present a certificate.
async fn serve_health(
    listener: Option<TcpListener>,
    service: tonic_health::pb::health_server::HealthServer<crate::health::DrainingHealth>,
    conns: &Conns,
    shutdown: &tokio_util::sync::CancellationToken,
) -> Result<(), tonic::transport::Error> {
    let Some(listener) = listener else {
        return Ok(());
    };
    Server::builder()
        .layer(SeenLayer::admitted(conns.clone()))
        .add_service(service)
        .serve_with_incoming_shutdown(
            ReceiverStream::new(conns.accept(listener, shutdown.clone()))
                .map(Ok::<_, std::io::Error>),
            shutdown.clone().cancelled_owned(),
        )
        .await
}

/// At shutdown: health turns NOT_SERVING and every session ends while
/// connections drain, so probe streams close instead of holding the drain
/// open. Launched programs are terminated, attached ones left running,
/// probes go on.
async fn end_sessions_on_shutdown(
    daemon: Arc<Daemon>,
    health: tonic_health::server::HealthReporter,
) {
    daemon.shutdown.cancelled().await;
    set_health(&health, ServingStatus::NotServing).await;
    daemon.sessions.shutdown(daemon.config.drain_timeout).await;
    // Peers relaying this replica's sessions have their ends now.
    if let Some(cluster) = &daemon.cluster {
        cluster.sessions_ended();
    }
}

/// What is left to make durable once the server has stopped, then the
/// store closed and the socket file removed.
async fn close(daemon: &Daemon, unix_path: Option<PathBuf>) {
    daemon.breakpoints.flush_hits().await;
    daemon.history.flush(HISTORY_FLUSH).await;
    if let Some(cluster) = &daemon.cluster {
        cluster.retire().await;
    }
    daemon.store.close().await;
    if let Some(path) = unix_path {
        let _ = std::fs::remove_file(path);
    }
}

/// Every service answers health checks by name, as well as the daemon ("").
const HEALTH_NAMES: &[&str] = &[
    "",
    "stepd.v1.DaemonService",
    "stepd.v1.SessionService",
    "stepd.v1.BreakpointService",
    "stepd.v1.EventService",
    "stepd.v1.InspectorService",
    "stepd.v1.ProbeService",
];

async fn set_health(health: &tonic_health::server::HealthReporter, status: ServingStatus) {
    for name in HEALTH_NAMES {
        health.set_service_status(*name, status).await;
    }
}

async fn deadline_after(shutdown: &tokio_util::sync::CancellationToken, drain: Duration) {
    shutdown.cancelled().await;
    tokio::time::sleep(drain).await;
}

type HttpResponse = tonic::codegen::http::Response<tonic::body::Body>;
type Layered = tower::layer::util::Stack<
    stepd_cluster::ForwardLayer,
    tower::layer::util::Stack<
        SeenLayer,
        tower::layer::util::Stack<
            AuthLayer,
            tower::layer::util::Stack<
                crate::tls::IdentityLayer,
                tower::layer::util::Stack<
                    SeenLayer,
                    tower::layer::util::Stack<
                        tower::util::MapResponseLayer<fn(HttpResponse) -> HttpResponse>,
                        tower::layer::util::Identity,
                    >,
                >,
            >,
        >,
    >,
>;

/// Rewrites tonic's own refusals (size, malformed messages) into typed
/// stepd errors, and gives the RPC's span the status (runs inside it).
fn remap_refusals(response: HttpResponse) -> HttpResponse {
    crate::telemetry::rpc_response(remap_decode_refusal(remap_size_refusal(response)))
}

fn router(
    daemon: &Arc<Daemon>,
    health: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
    conns: &Conns,
    auth: &Arc<crate::auth::Auth>,
) -> anyhow::Result<Router<Layered>> {
    let max = daemon.config.max_message_bytes;
    // Every served service is described, health and reflection included, so
    // `grpcurl list` shows the whole server.
    let reflection_v1 = crate::reflection::builder().build_v1()?;
    let reflection_v1alpha = crate::reflection::builder().build_v1alpha()?;
    macro_rules! limited {
        ($server:expr) => {
            $server
                .max_decoding_message_size(max)
                .max_encoding_message_size(max)
        };
    }
    // No `tls_config`: the TCP listener's handshakes are done before tonic
    // sees a connection (`crate::tls::Handshakes`).
    Ok(Server::builder()
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .http2_max_header_list_size(HEADER_LIST_BYTES)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        // A peer that stops answering pings is gone; its connection is freed.
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        // The RPC's span: logs, and with OpenTelemetry export the exported
        // span continuing the caller's traceparent.
        .trace_fn(crate::telemetry::rpc_span)
        .layer(tower::util::MapResponseLayer::new(
            remap_refusals as fn(HttpResponse) -> HttpResponse,
        ))
        // The registry hears of every request, so a connection is not cut
        // off while it asks (each refusal is a typed status); then the
        // certificate's (or the proxy's) identity, for the one
        // authentication layer; then the registry again, marking used only
        // connections whose requests passed, so one whose requests are all
        // refused is closed once it falls silent and makes room at the cap.
        .layer(SeenLayer::any(conns.clone()))
        .layer(crate::tls::IdentityLayer::new(
            daemon.config.trust_forwarded_client_cert,
        ))
        .layer(AuthLayer(auth.clone()))
        .layer(SeenLayer::admitted(conns.clone()))
        // Innermost: a call about another replica's session is sent on
        // only once it is authenticated and allowed here.
        .layer(stepd_cluster::ForwardLayer {
            cluster: daemon.cluster.clone(),
            max_bytes: max,
        })
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(limited!(DaemonServiceServer::new(DaemonApi::new(
            daemon.clone()
        ))))
        .add_service(limited!(BreakpointServiceServer::new(BreakpointApi::new(
            daemon.clone()
        ))))
        // Served by hand: it sends events encoded once (handlers/event.rs).
        .add_service(EventApi::new(daemon.clone()))
        .add_service(limited!(SessionServiceServer::new(SessionApi::new(
            daemon.clone()
        ))))
        .add_service(limited!(HistoryServiceServer::new(HistoryApi::new(
            daemon.clone()
        ))))
        .add_service(limited!(InspectorServiceServer::new(InspectorApi::new(
            daemon.clone()
        ))))
        .add_service(limited!(ProbeServiceServer::new(ProbeApi::new(
            daemon.clone()
        )))))
}

/// How long shutdown waits for the last events to reach the history.
const HISTORY_FLUSH: Duration = Duration::from_secs(2);

/// Binds the Unix socket in a 0700 directory with mode 0600, replacing a stale
/// socket file but never one a live daemon still serves.
fn bind_unix(path: &Path) -> anyhow::Result<UnixListener> {
    let dir: PathBuf = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("making {} private (0700)", dir.display()))?;
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!("another stepd is serving on {}", path.display());
        }
        std::fs::remove_file(path)
            .with_context(|| format!("removing stale socket {}", path.display()))?;
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("making {} private (0600)", path.display()))?;
    Ok(listener)
}

/// SIGHUP re-reads the tokens file.
async fn reload_on_hangup(auth: Arc<crate::auth::Auth>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        tracing::warn!("could not install the SIGHUP handler");
        return;
    };
    while hangup.recv().await.is_some() {
        tracing::info!("SIGHUP: re-reading the tokens file");
        auth.reload();
    }
}

async fn on_signal(shutdown: tokio_util::sync::CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("could not install signal handlers");
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        () = shutdown.cancelled() => {}
    }
    shutdown.cancel();
}

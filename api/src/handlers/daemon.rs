//! `stepd.v1.DaemonService`.

use std::sync::Arc;
use stepd_rpc::status::OrStatus as _;

use stepd_proto::{
    PROTOCOL_VERSION,
    v1::{
        CheckStatus, ConfigCheck, DoctorRequest, DoctorResponse, GetStatusRequest,
        GetStatusResponse, GetVersionRequest, GetVersionResponse, PingRequest, PingResponse,
        SessionCount, ShutdownRequest, ShutdownResponse, StoreCheck,
        daemon_service_server::DaemonService,
    },
};
use tonic::{Request, Response, Status};

use crate::daemon::Daemon;
use stepd_core::time::now_timestamp;
use stepd_dap::registry;

/// Handler of DaemonService.
pub struct DaemonApi {
    daemon: Arc<Daemon>,
}

impl DaemonApi {
    /// A handler over the daemon.
    pub fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
    }

    fn uptime(&self) -> prost_types::Duration {
        prost_types::Duration::try_from(self.daemon.started.elapsed()).unwrap_or_default()
    }
}

fn count(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[tonic::async_trait]
impl DaemonService for DaemonApi {
    async fn ping(&self, _: Request<PingRequest>) -> Result<Response<PingResponse>, Status> {
        Ok(Response::new(PingResponse {
            version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: PROTOCOL_VERSION.into(),
            instance_id: self.daemon.instance_id.clone(),
            uptime: Some(self.uptime()),
            server_time: Some(now_timestamp()),
        }))
    }

    async fn get_status(
        &self,
        _: Request<GetStatusRequest>,
    ) -> Result<Response<GetStatusResponse>, Status> {
        let d = &self.daemon;
        let counts = d.counts();
        // The directory is in the database: while it is known to be down
        // the status is given without it rather than not at all.
        let replicas = match &d.cluster {
            Some(cluster) if d.store.down().is_none() => cluster.replicas().await.or_status()?,
            _ => Vec::new(),
        };
        let sessions: Vec<SessionCount> = counts
            .sessions
            .iter()
            .map(|c| SessionCount {
                kind: c.kind.into(),
                state: c.state.into(),
                count: count(c.count),
            })
            .collect();
        Ok(Response::new(GetStatusResponse {
            version: env!("CARGO_PKG_VERSION").into(),
            instance_id: d.instance_id.clone(),
            uptime: Some(self.uptime()),
            active_sessions: count(counts.sessions.iter().map(|c| c.count).sum()),
            subscribers: count(counts.subscribers),
            pending_pauses: count(counts.pending_pauses),
            breakpoints: count(d.bus.with_view(|v| v.breakpoint_count()) as u64),
            last_seq: d.bus.last_seq(),
            listen: d.listen.get().cloned().unwrap_or_default(),
            data_dir: d.config.data_dir.display().to_string(),
            probes: count(counts.probes),
            sessions,
            events_published: counts.events_published,
            events_dropped: counts.events_dropped,
            gaps_sent: counts.gaps_sent,
            replicas,
        }))
    }

    async fn get_version(
        &self,
        _: Request<GetVersionRequest>,
    ) -> Result<Response<GetVersionResponse>, Status> {
        Ok(Response::new(GetVersionResponse {
            version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: PROTOCOL_VERSION.into(),
            build_profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .into(),
            target: format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS),
        }))
    }

    async fn doctor(
        &self,
        request: Request<DoctorRequest>,
    ) -> Result<Response<DoctorResponse>, Status> {
        let r = request.into_inner();
        stepd_core::limits::doctor(&r).or_status()?;
        let path = r.path;
        let asked = (!path.is_empty()).then_some(path.as_str());
        let adapters = registry::check_all(asked).await;
        let path = match asked {
            Some(path) => path.to_owned(),
            None => std::env::var("PATH").unwrap_or_default(),
        };
        let store = match self.daemon.store.down() {
            Some(down) => Err(down.to_string()),
            None => self
                .daemon
                .store
                .schema_version()
                .await
                .map_err(|err| err.to_string()),
        };
        let store = match store {
            Ok(version) => StoreCheck {
                status: CheckStatus::Ok.into(),
                path: self.daemon.store.place().into(),
                schema_version: version,
                message: String::new(),
            },
            Err(err) => StoreCheck {
                status: CheckStatus::Broken.into(),
                path: self.daemon.store.place().into(),
                schema_version: 0,
                message: err,
            },
        };
        let config = &self.daemon.config;
        let mut warnings = Vec::new();
        if !config.listen.ip().is_loopback() {
            warnings.push(format!(
                "listening on non-loopback {} without authentication (--insecure)",
                config.listen
            ));
        }
        Ok(Response::new(DoctorResponse {
            adapters,
            path,
            store: Some(store),
            config: Some(ConfigCheck {
                status: if warnings.is_empty() {
                    CheckStatus::Ok
                } else {
                    CheckStatus::Broken
                }
                .into(),
                file: config
                    .config_file
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                warnings,
            }),
        }))
    }

    async fn shutdown(
        &self,
        request: Request<ShutdownRequest>,
    ) -> Result<Response<ShutdownResponse>, Status> {
        tracing::info!(by = %crate::auth::identity(&request).name, client = %super::client_name(&request), "shutdown requested");
        self.daemon.shutdown.cancel();
        Ok(Response::new(ShutdownResponse {}))
    }
}

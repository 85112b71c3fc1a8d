//! `HistoryService`: a session's recorded events (`history/`).

use std::sync::Arc;

use stepd_proto::v1::{
    GetSessionHistoryRequest, GetSessionHistoryResponse, history_service_server::HistoryService,
};
use tonic::{Request, Response, Status};

use crate::{daemon::Daemon, limits};

/// The HistoryService handler.
pub struct HistoryApi {
    daemon: Arc<Daemon>,
}

impl HistoryApi {
    /// A handler over the daemon.
    pub fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
    }
}

#[tonic::async_trait]
impl HistoryService for HistoryApi {
    async fn get_session_history(
        &self,
        request: Request<GetSessionHistoryRequest>,
    ) -> Result<Response<GetSessionHistoryResponse>, Status> {
        let req = request.into_inner();
        limits::Sizes::default()
            .text("session_id", &req.session_id, limits::NAME_BYTES)
            .text("page_token", &req.page_token, limits::TOKEN_BYTES)
            .check()?;
        let page = self
            .daemon
            .history
            .page(
                &req.session_id,
                &req.channels,
                req.page_size,
                &req.page_token,
                limits::page_bytes(self.daemon.config.max_message_bytes),
            )
            .await?;
        Ok(Response::new(GetSessionHistoryResponse {
            events: page.events,
            next_page_token: page.next_page_token,
            dropped: page.dropped,
        }))
    }
}

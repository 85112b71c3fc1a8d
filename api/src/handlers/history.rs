//! `HistoryService`: a session's recorded events and the sessions that
//! ended (`history/`).

use std::sync::Arc;
use stepd_rpc::status::IntoStatus as _;
use stepd_rpc::status::OrStatus as _;

use stepd_proto::v1::{
    GetSessionHistoryRequest, GetSessionHistoryResponse, ListEndedSessionsRequest,
    ListEndedSessionsResponse, history_service_server::HistoryService,
};
use tonic::{Request, Response, Status};

use crate::daemon::Daemon;
use stepd_core::{breakpoints::LabelSelector, error::ApiError, limits, time::us_from_timestamp};
use stepd_history::EndedFilter;

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
            .check()
            .or_status()?;
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
            .await
            .or_status()?;
        Ok(Response::new(GetSessionHistoryResponse {
            events: page.events,
            next_page_token: page.next_page_token,
            dropped: page.dropped,
        }))
    }

    async fn list_ended_sessions(
        &self,
        request: Request<ListEndedSessionsRequest>,
    ) -> Result<Response<ListEndedSessionsResponse>, Status> {
        let req = request.into_inner();
        limits::Sizes::default()
            .text(
                "label_selector",
                &req.label_selector,
                limits::SELECTOR_BYTES,
            )
            .text("page_token", &req.page_token, limits::TOKEN_BYTES)
            .check()
            .or_status()?;
        let selector = LabelSelector::parse(&req.label_selector)
            .map_err(|e| {
                ApiError::invalid_field("label_selector", format!("malformed label selector: {e}"))
            })
            .or_status()?;
        let since_us = req.since.as_ref().map_or(i64::MIN, us_from_timestamp);
        let until_us = req.until.as_ref().map_or(i64::MAX, us_from_timestamp);
        if since_us > until_us {
            return Err(ApiError::invalid_field("until", "is before `since`").into_status());
        }
        let (sessions, next_page_token) = self
            .daemon
            .history
            .ended(
                &EndedFilter {
                    selector: &selector,
                    since_us,
                    until_us,
                    page_size: req.page_size,
                    page_token: &req.page_token,
                },
                limits::page_bytes(self.daemon.config.max_message_bytes),
            )
            .await
            .or_status()?;
        Ok(Response::new(ListEndedSessionsResponse {
            sessions,
            next_page_token,
        }))
    }
}

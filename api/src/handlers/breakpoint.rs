//! `stepd.v1.BreakpointService`.

use std::sync::Arc;
use stepd_rpc::status::OrStatus as _;

use stepd_proto::v1::{
    AddBreakpointRequest, AddBreakpointResponse, ListBreakpointsRequest, ListBreakpointsResponse,
    RemoveBreakpointRequest, RemoveBreakpointResponse, UpdateBreakpointRequest,
    UpdateBreakpointResponse, breakpoint_service_server::BreakpointService,
};
use tonic::{Request, Response, Status};

use crate::{
    auth::{audit::Note, identity},
    daemon::Daemon,
};
use stepd_core::{error::ApiError, limits};

/// The number of a breakpoint id such as "bp-7".
fn breakpoint_number(id: &str) -> Option<u64> {
    id.strip_prefix("bp-")?.parse().ok()
}

/// Handler of BreakpointService.
pub struct BreakpointApi {
    daemon: Arc<Daemon>,
}

impl BreakpointApi {
    /// A handler over the daemon.
    pub fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
    }
}

#[tonic::async_trait]
impl BreakpointService for BreakpointApi {
    async fn list_breakpoints(
        &self,
        request: Request<ListBreakpointsRequest>,
    ) -> Result<Response<ListBreakpointsResponse>, Status> {
        let req = request.into_inner();
        limits::Sizes::default()
            .labels("for_labels", &req.for_labels)
            .text("page_token", &req.page_token, limits::TOKEN_BYTES)
            .check()
            .or_status()?;
        // The token is the id of the last breakpoint of the page before; ids
        // grow in creation order and are never reused, so it stays a valid
        // place to resume however breakpoints come and go.
        let after = match req.page_token.as_str() {
            "" => 0,
            token => breakpoint_number(token)
                .ok_or_else(|| {
                    ApiError::invalid_field(
                        "page_token",
                        format!(
                            "{} is not a page token from ListBreakpoints",
                            stepd_core::error::quote(token)
                        ),
                    )
                })
                .or_status()?,
        };
        let all = self
            .daemon
            .breakpoints
            .list(&req.for_labels)
            .await
            .or_status()?;
        let (breakpoints, more) = limits::page(
            all.into_iter()
                .filter(|bp| breakpoint_number(&bp.id).is_some_and(|n| n > after)),
            req.page_size as usize,
            limits::page_bytes(self.daemon.config.max_message_bytes),
        );
        let next_page_token = if more {
            breakpoints
                .last()
                .map(|bp| bp.id.clone())
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Response::new(ListBreakpointsResponse {
            breakpoints,
            next_page_token,
        }))
    }

    async fn add_breakpoint(
        &self,
        request: Request<AddBreakpointRequest>,
    ) -> Result<Response<AddBreakpointResponse>, Status> {
        let (who, note) = (identity(&request), Note::of(&request));
        let within = super::write_within(&request);
        let breakpoint = self
            .daemon
            .breakpoints
            .add(request.into_inner().spec, &who.name, within)
            .await
            .or_status()?;
        note.set("breakpoint", &breakpoint.id);
        Ok(Response::new(AddBreakpointResponse {
            breakpoint: Some(breakpoint),
        }))
    }

    async fn remove_breakpoint(
        &self,
        request: Request<RemoveBreakpointRequest>,
    ) -> Result<Response<RemoveBreakpointResponse>, Status> {
        let (note, within) = (Note::of(&request), super::write_within(&request));
        let id = request.into_inner().id;
        note.set("breakpoint", &id);
        let breakpoint = self
            .daemon
            .breakpoints
            .remove(&id, within)
            .await
            .or_status()?;
        Ok(Response::new(RemoveBreakpointResponse {
            breakpoint: Some(breakpoint),
        }))
    }

    async fn update_breakpoint(
        &self,
        request: Request<UpdateBreakpointRequest>,
    ) -> Result<Response<UpdateBreakpointResponse>, Status> {
        let (who, note) = (identity(&request), Note::of(&request));
        let within = super::write_within(&request);
        let req = request.into_inner();
        note.set("breakpoint", &req.id);
        let breakpoint = self
            .daemon
            .breakpoints
            .update(&req.id, req.spec, req.update_mask, &who.name, within)
            .await
            .or_status()?;
        Ok(Response::new(UpdateBreakpointResponse {
            breakpoint: Some(breakpoint),
        }))
    }
}

//! `stepd.v1.BreakpointService`.

use std::sync::Arc;

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
        let breakpoints = self.daemon.breakpoints.list(&req.for_labels).await?;
        Ok(Response::new(ListBreakpointsResponse { breakpoints }))
    }

    async fn add_breakpoint(
        &self,
        request: Request<AddBreakpointRequest>,
    ) -> Result<Response<AddBreakpointResponse>, Status> {
        let (who, note) = (identity(&request), Note::of(&request));
        let breakpoint = self
            .daemon
            .breakpoints
            .add(request.into_inner().spec, &who.name)
            .await?;
        note.set("breakpoint", &breakpoint.id);
        Ok(Response::new(AddBreakpointResponse {
            breakpoint: Some(breakpoint),
        }))
    }

    async fn remove_breakpoint(
        &self,
        request: Request<RemoveBreakpointRequest>,
    ) -> Result<Response<RemoveBreakpointResponse>, Status> {
        let note = Note::of(&request);
        let id = request.into_inner().id;
        note.set("breakpoint", &id);
        let breakpoint = self.daemon.breakpoints.remove(&id).await?;
        Ok(Response::new(RemoveBreakpointResponse {
            breakpoint: Some(breakpoint),
        }))
    }

    async fn update_breakpoint(
        &self,
        request: Request<UpdateBreakpointRequest>,
    ) -> Result<Response<UpdateBreakpointResponse>, Status> {
        let (who, note) = (identity(&request), Note::of(&request));
        let req = request.into_inner();
        note.set("breakpoint", &req.id);
        let breakpoint = self
            .daemon
            .breakpoints
            .update(&req.id, req.spec, req.update_mask, &who.name)
            .await?;
        Ok(Response::new(UpdateBreakpointResponse {
            breakpoint: Some(breakpoint),
        }))
    }
}

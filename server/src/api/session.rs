//! `stepd.v1.SessionService`.
//!
//! Debug input and pause listing work for every kind of session. Launching and
//! driving DAP sessions is not in this version yet: those RPCs answer
//! UNIMPLEMENTED with reason NOT_IMPLEMENTED rather than pretending.

use std::sync::Arc;

use stepd_proto::v1::{
    AttachRequest, AttachResponse, ContinueRequest, ContinueResponse, DisconnectRequest,
    DisconnectResponse, ErrorReason, EvaluateRequest, EvaluateResponse, GetSessionRequest,
    GetSessionResponse, GetStackTraceRequest, GetStackTraceResponse, LaunchRequest, LaunchResponse,
    ListPausesRequest, ListPausesResponse, ListScopesRequest, ListScopesResponse,
    ListSessionsRequest, ListSessionsResponse, ListThreadsRequest, ListThreadsResponse,
    ListVariablesRequest, ListVariablesResponse, PauseRequest, PauseResponse, ReadOutputRequest,
    ReadOutputResponse, SendDebugInputRequest, SendDebugInputResponse, SetVariableRequest,
    SetVariableResponse, StepRequest, StepResponse, session_service_server::SessionService,
};
use tonic::{Request, Response, Status};

use crate::{breakpoints::LabelSelector, daemon::Daemon, error::ApiError};

/// What the unimplemented RPCs are waiting for.
const DAP_MISSING: &str = "DAP sessions (launching and driving programs under debug adapters)";

/// Handler of SessionService.
pub struct SessionApi {
    daemon: Arc<Daemon>,
}

impl SessionApi {
    /// A handler over the daemon.
    pub fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
    }
}

fn unimplemented<T>(rpc: &str) -> Result<Response<T>, Status> {
    Err(ApiError::not_implemented(&format!("SessionService.{rpc}"), DAP_MISSING).into())
}

fn session_not_found(id: &str) -> ApiError {
    ApiError::new(ErrorReason::SessionNotFound, format!("no session {id:?}")).with("session_id", id)
}

#[tonic::async_trait]
impl SessionService for SessionApi {
    async fn launch(&self, _: Request<LaunchRequest>) -> Result<Response<LaunchResponse>, Status> {
        unimplemented("Launch")
    }

    async fn attach(&self, _: Request<AttachRequest>) -> Result<Response<AttachResponse>, Status> {
        unimplemented("Attach")
    }

    async fn disconnect(
        &self,
        _: Request<DisconnectRequest>,
    ) -> Result<Response<DisconnectResponse>, Status> {
        unimplemented("Disconnect")
    }

    async fn list_sessions(
        &self,
        request: Request<ListSessionsRequest>,
    ) -> Result<Response<ListSessionsResponse>, Status> {
        let req = request.into_inner();
        let selector = LabelSelector::parse(&req.label_selector).map_err(|e| {
            ApiError::invalid_field("label_selector", format!("malformed label selector: {e}"))
        })?;
        let sessions = self
            .daemon
            .bus
            .with_view(|v| v.sessions(req.include_ended))
            .into_iter()
            .filter(|s| selector.matches(&s.labels))
            .collect();
        Ok(Response::new(ListSessionsResponse { sessions }))
    }

    async fn get_session(
        &self,
        request: Request<GetSessionRequest>,
    ) -> Result<Response<GetSessionResponse>, Status> {
        let id = request.into_inner().session_id;
        let (session, breakpoints) = self
            .daemon
            .bus
            .with_view(|v| (v.session(&id), v.statuses_of(&id)));
        let session = session.ok_or_else(|| session_not_found(&id))?;
        Ok(Response::new(GetSessionResponse {
            session: Some(session),
            pauses: self.daemon.pauses.list(Some(&id)),
            breakpoints,
        }))
    }

    async fn r#continue(
        &self,
        _: Request<ContinueRequest>,
    ) -> Result<Response<ContinueResponse>, Status> {
        unimplemented("Continue")
    }

    async fn step(&self, _: Request<StepRequest>) -> Result<Response<StepResponse>, Status> {
        unimplemented("Step")
    }

    async fn pause(&self, _: Request<PauseRequest>) -> Result<Response<PauseResponse>, Status> {
        unimplemented("Pause")
    }

    async fn list_threads(
        &self,
        _: Request<ListThreadsRequest>,
    ) -> Result<Response<ListThreadsResponse>, Status> {
        unimplemented("ListThreads")
    }

    async fn get_stack_trace(
        &self,
        _: Request<GetStackTraceRequest>,
    ) -> Result<Response<GetStackTraceResponse>, Status> {
        unimplemented("GetStackTrace")
    }

    async fn list_scopes(
        &self,
        _: Request<ListScopesRequest>,
    ) -> Result<Response<ListScopesResponse>, Status> {
        unimplemented("ListScopes")
    }

    async fn list_variables(
        &self,
        _: Request<ListVariablesRequest>,
    ) -> Result<Response<ListVariablesResponse>, Status> {
        unimplemented("ListVariables")
    }

    async fn set_variable(
        &self,
        _: Request<SetVariableRequest>,
    ) -> Result<Response<SetVariableResponse>, Status> {
        unimplemented("SetVariable")
    }

    async fn evaluate(
        &self,
        _: Request<EvaluateRequest>,
    ) -> Result<Response<EvaluateResponse>, Status> {
        unimplemented("Evaluate")
    }

    async fn read_output(
        &self,
        _: Request<ReadOutputRequest>,
    ) -> Result<Response<ReadOutputResponse>, Status> {
        unimplemented("ReadOutput")
    }

    async fn send_debug_input(
        &self,
        request: Request<SendDebugInputRequest>,
    ) -> Result<Response<SendDebugInputResponse>, Status> {
        let default_by = super::client_name(&request);
        let input = request
            .into_inner()
            .input
            .ok_or_else(|| ApiError::invalid_field("input", "is required"))?;
        let by = if input.client_name.is_empty() {
            default_by
        } else {
            input.client_name.clone()
        };
        Ok(Response::new(self.daemon.pauses.answer(input, by).await?))
    }

    async fn list_pauses(
        &self,
        request: Request<ListPausesRequest>,
    ) -> Result<Response<ListPausesResponse>, Status> {
        let id = request.into_inner().session_id;
        let session = (!id.is_empty()).then_some(id.as_str());
        if let Some(id) = session
            && self.daemon.bus.with_view(|v| v.session(id)).is_none()
        {
            return Err(session_not_found(id).into());
        }
        Ok(Response::new(ListPausesResponse {
            pauses: self.daemon.pauses.list(session),
        }))
    }
}

//! `stepd.v1.SessionService`: translates requests and delegates to the DAP
//! launcher (Launch, Attach), the session registry and its actors
//! (execution), a session's port (inspection), and the pause registry
//! (debug input).

use std::{sync::Arc, time::Duration};
use stepd_rpc::status::IntoStatus as _;
use stepd_rpc::status::OrStatus as _;

use stepd_proto::v1::{
    AttachRequest, AttachResponse, ContinueRequest, ContinueResponse, DisconnectMode,
    DisconnectRequest, DisconnectResponse, ErrorReason, EvaluateContext, EvaluateRequest,
    EvaluateResponse, GetSessionRequest, GetSessionResponse, GetStackTraceRequest,
    GetStackTraceResponse, LaunchRequest, LaunchResponse, ListPausesRequest, ListPausesResponse,
    ListScopesRequest, ListScopesResponse, ListSessionsRequest, ListSessionsResponse,
    ListThreadsRequest, ListThreadsResponse, ListVariablesRequest, ListVariablesResponse,
    PauseRequest, PauseResponse, ReadOutputRequest, ReadOutputResponse, SendDebugInputRequest,
    SendDebugInputResponse, SetVariableRequest, SetVariableResponse, StepKind, StepRequest,
    StepResponse, VariableFilter, Wait, session_service_server::SessionService,
};
use tonic::{Request, Response, Status};

use crate::{
    auth::{audit::Note, identity},
    daemon::Daemon,
};
use stepd_core::{
    breakpoints::LabelSelector,
    error::ApiError,
    limits,
    session::{ExecOp, WaitMode},
};
use stepd_dap::session::LaunchRequest as Start;

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

fn session_not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorReason::SessionNotFound,
        format!("no session {}", stepd_core::error::quote(id)),
    )
    .with("session_id", stepd_core::error::clip(id))
}

/// The default wait of execution RPCs.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// `oneof wait`: unset or `until_stable` waits (30 s by default, 0 = forever).
fn wait_mode(no_wait: bool, until: Option<&Wait>) -> WaitMode {
    if no_wait {
        return WaitMode::NoWait;
    }
    match until.and_then(|w| w.timeout_ms) {
        None => WaitMode::UntilStable(Some(DEFAULT_WAIT)),
        Some(0) => WaitMode::UntilStable(None),
        Some(ms) => WaitMode::UntilStable(Some(Duration::from_millis(u64::from(ms)))),
    }
}

#[tonic::async_trait]
impl SessionService for SessionApi {
    async fn launch(
        &self,
        request: Request<LaunchRequest>,
    ) -> Result<Response<LaunchResponse>, Status> {
        let (who, note) = (identity(&request), Note::of(&request));
        crate::auth::roles::adapter_command(&who, &request.get_ref().adapter_command)
            .or_status()?;
        let r = request.into_inner();
        limits::launch(&r).or_status()?;
        let outcome = self
            .daemon
            .launcher
            .start(Start {
                attach: false,
                adapter: r.adapter,
                adapter_command: r.adapter_command,
                program: r.program,
                args: r.args,
                cwd: r.cwd,
                env: r.env,
                stop_on_entry: r.stop_on_entry,
                labels: r.labels,
                name: r.name,
                adapter_options: r.adapter_options,
                just_my_code: r.just_my_code,
                request_id: r.request_id,
                started_by: who.name.clone(),
                ..Default::default()
            })
            .await
            .or_status()?;
        note.set("session", &outcome.session.id);
        Ok(Response::new(LaunchResponse {
            session: Some(outcome.session),
            breakpoints: outcome.placements,
            entry: outcome.entry,
        }))
    }

    async fn attach(
        &self,
        request: Request<AttachRequest>,
    ) -> Result<Response<AttachResponse>, Status> {
        let (who, note) = (identity(&request), Note::of(&request));
        crate::auth::roles::adapter_command(&who, &request.get_ref().adapter_command)
            .or_status()?;
        let r = request.into_inner();
        limits::attach(&r).or_status()?;
        let outcome = self
            .daemon
            .launcher
            .start(Start {
                attach: true,
                adapter: r.adapter,
                adapter_command: r.adapter_command,
                pid: r.pid,
                connect: r.connect,
                labels: r.labels,
                name: r.name,
                adapter_options: r.adapter_options,
                just_my_code: r.just_my_code,
                request_id: r.request_id,
                started_by: who.name.clone(),
                ..Default::default()
            })
            .await
            .or_status()?;
        note.set("session", &outcome.session.id);
        Ok(Response::new(AttachResponse {
            session: Some(outcome.session),
            breakpoints: outcome.placements,
        }))
    }

    async fn disconnect(
        &self,
        request: Request<DisconnectRequest>,
    ) -> Result<Response<DisconnectResponse>, Status> {
        let note = Note::of(&request);
        let r = request.into_inner();
        note.set("session", &r.session_id);
        let mode = DisconnectMode::try_from(r.mode)
            .map_err(|_| {
                ApiError::invalid_field("mode", format!("unknown DisconnectMode {}", r.mode))
            })
            .or_status()?;
        let handle = self.daemon.sessions.get(&r.session_id).or_status()?;
        handle.disconnect(mode).await.or_status()?;
        let session = self.daemon.bus.with_view(|v| v.session(&r.session_id));
        Ok(Response::new(DisconnectResponse { session }))
    }

    async fn list_sessions(
        &self,
        request: Request<ListSessionsRequest>,
    ) -> Result<Response<ListSessionsResponse>, Status> {
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
        let after = req.page_token.as_str();
        let budget = limits::page_bytes(self.daemon.config.max_message_bytes);
        let sessions = self.daemon.bus.with_view(|v| {
            // Ids are UUIDv7, so id order is start order, and a page token
            // (the last id of the page before) stays a valid place to resume
            // however sessions come and go.
            limits::page(
                v.sessions(req.include_ended)
                    .into_iter()
                    .filter(|s| after.is_empty() || s.id.as_str() > after)
                    .filter(|s| selector.matches(&s.labels)),
                req.page_size as usize,
                budget,
            )
        });
        let (sessions, more) = sessions;
        let next_page_token = if more {
            sessions.last().map(|s| s.id.clone()).unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Response::new(ListSessionsResponse {
            sessions,
            next_page_token,
        }))
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
        let session = session.ok_or_else(|| session_not_found(&id)).or_status()?;
        Ok(Response::new(GetSessionResponse {
            session: Some(session),
            pauses: self.daemon.pauses.list(Some(&id)),
            breakpoints,
        }))
    }

    async fn r#continue(
        &self,
        request: Request<ContinueRequest>,
    ) -> Result<Response<ContinueResponse>, Status> {
        use stepd_proto::v1::continue_request::Wait as W;
        let note = Note::of(&request);
        let r = request.into_inner();
        note.set("session", &r.session_id);
        let wait = match &r.wait {
            Some(W::NoWait(_)) => wait_mode(true, None),
            Some(W::UntilStable(w)) => wait_mode(false, Some(w)),
            None => wait_mode(false, None),
        };
        let handle = self.daemon.sessions.get(&r.session_id).or_status()?;
        let op = ExecOp::Continue(r.thread_id);
        self.daemon.bus.counters().command(op.command_kind());
        let state = handle.exec(op, wait).await.or_status()?;
        Ok(Response::new(ContinueResponse { state: Some(state) }))
    }

    async fn step(&self, request: Request<StepRequest>) -> Result<Response<StepResponse>, Status> {
        use stepd_proto::v1::step_request::Wait as W;
        let note = Note::of(&request);
        let r = request.into_inner();
        note.set("session", &r.session_id);
        let kind = StepKind::try_from(r.kind)
            .map_err(|_| ApiError::invalid_field("kind", format!("unknown StepKind {}", r.kind)))
            .or_status()?;
        let wait = match &r.wait {
            Some(W::NoWait(_)) => wait_mode(true, None),
            Some(W::UntilStable(w)) => wait_mode(false, Some(w)),
            None => wait_mode(false, None),
        };
        let handle = self.daemon.sessions.get(&r.session_id).or_status()?;
        let op = ExecOp::Step(r.thread_id, kind);
        self.daemon.bus.counters().command(op.command_kind());
        let state = handle.exec(op, wait).await.or_status()?;
        Ok(Response::new(StepResponse { state: Some(state) }))
    }

    async fn pause(
        &self,
        request: Request<PauseRequest>,
    ) -> Result<Response<PauseResponse>, Status> {
        use stepd_proto::v1::pause_request::Wait as W;
        let note = Note::of(&request);
        let r = request.into_inner();
        note.set("session", &r.session_id);
        let wait = match &r.wait {
            Some(W::NoWait(_)) => wait_mode(true, None),
            Some(W::UntilStable(w)) => wait_mode(false, Some(w)),
            None => wait_mode(false, None),
        };
        let handle = self.daemon.sessions.get(&r.session_id).or_status()?;
        let state = handle
            .exec(ExecOp::Pause(r.thread_id), wait)
            .await
            .or_status()?;
        Ok(Response::new(PauseResponse { state: Some(state) }))
    }

    async fn list_threads(
        &self,
        request: Request<ListThreadsRequest>,
    ) -> Result<Response<ListThreadsResponse>, Status> {
        let handle = self
            .daemon
            .sessions
            .get(&request.into_inner().session_id)
            .or_status()?;
        let threads = handle.port.threads().await.or_status()?;
        Ok(Response::new(ListThreadsResponse { threads }))
    }

    async fn get_stack_trace(
        &self,
        request: Request<GetStackTraceRequest>,
    ) -> Result<Response<GetStackTraceResponse>, Status> {
        let r = request.into_inner();
        let handle = self.daemon.sessions.get(&r.session_id).or_status()?;
        let (frames, total_frames) = handle
            .port
            .stack_trace(r.thread_id, r.start_frame, r.levels)
            .await
            .or_status()?;
        Ok(Response::new(GetStackTraceResponse {
            frames,
            total_frames,
        }))
    }

    async fn list_scopes(
        &self,
        request: Request<ListScopesRequest>,
    ) -> Result<Response<ListScopesResponse>, Status> {
        let r = request.into_inner();
        let handle = self.daemon.sessions.get(&r.session_id).or_status()?;
        let scopes = handle.port.scopes(&r.frame_id).await.or_status()?;
        Ok(Response::new(ListScopesResponse { scopes }))
    }

    async fn list_variables(
        &self,
        request: Request<ListVariablesRequest>,
    ) -> Result<Response<ListVariablesResponse>, Status> {
        let r = request.into_inner();
        let filter = VariableFilter::try_from(r.filter)
            .map_err(|_| {
                ApiError::invalid_field("filter", format!("unknown VariableFilter {}", r.filter))
            })
            .or_status()?;
        let handle = self.daemon.sessions.get(&r.session_id).or_status()?;
        let variables = handle
            .port
            .variables(&r.variables_ref, filter, r.start, r.count)
            .await
            .or_status()?;
        let named_variables = variables
            .iter()
            .filter(|v| v.name.parse::<u64>().is_err())
            .count();
        Ok(Response::new(ListVariablesResponse {
            named_variables: u32::try_from(named_variables).unwrap_or(u32::MAX),
            indexed_variables: u32::try_from(variables.len() - named_variables).unwrap_or(u32::MAX),
            variables,
        }))
    }

    async fn set_variable(
        &self,
        request: Request<SetVariableRequest>,
    ) -> Result<Response<SetVariableResponse>, Status> {
        let note = Note::of(&request);
        let r = request.into_inner();
        note.set("session", &r.session_id);
        limits::Sizes::default()
            .text("name", &r.name, limits::NAME_BYTES)
            .text("value", &r.value, limits::VALUE_BYTES)
            .check()
            .or_status()?;
        let handle = self.daemon.sessions.get(&r.session_id).or_status()?;
        let variable = handle
            .port
            .set_variable(&r.variables_ref, &r.name, &r.value)
            .await
            .or_status()?;
        Ok(Response::new(SetVariableResponse {
            variable: Some(variable),
        }))
    }

    async fn evaluate(
        &self,
        request: Request<EvaluateRequest>,
    ) -> Result<Response<EvaluateResponse>, Status> {
        let note = Note::of(&request);
        let r = request.into_inner();
        note.set("session", &r.session_id);
        limits::Sizes::default()
            .text("expression", &r.expression, limits::EXPRESSION_BYTES)
            .check()
            .or_status()?;
        let context = EvaluateContext::try_from(r.context)
            .map_err(|_| {
                ApiError::invalid_field("context", format!("unknown EvaluateContext {}", r.context))
            })
            .or_status()?;
        let handle = self.daemon.sessions.get(&r.session_id).or_status()?;
        let result = handle
            .port
            .evaluate(&r.expression, &r.frame_id, context)
            .await
            .or_status()?;
        Ok(Response::new(EvaluateResponse {
            result: Some(result),
        }))
    }

    async fn read_output(
        &self,
        request: Request<ReadOutputRequest>,
    ) -> Result<Response<ReadOutputResponse>, Status> {
        let r = request.into_inner();
        let handle = self.daemon.sessions.get(&r.session_id).or_status()?;
        Ok(Response::new(handle.port.read_output(
            r.after_offset,
            r.max_bytes,
            &r.categories,
        )))
    }

    async fn send_debug_input(
        &self,
        request: Request<SendDebugInputRequest>,
    ) -> Result<Response<SendDebugInputResponse>, Status> {
        let (who, note) = (identity(&request), Note::of(&request));
        let connection = super::client_name(&request);
        let mut input = request
            .into_inner()
            .input
            .ok_or_else(|| ApiError::invalid_field("input", "is required"))
            .or_status()?;
        note.set("pause", &input.key);
        // The name a client gives itself goes to the audit line and to the
        // pause's record, beside its identity; else the connection's.
        if input.client_name.is_empty() {
            input.client_name = stepd_core::error::clip(&connection);
        } else {
            note.set("client_name", &input.client_name);
        }
        Ok(Response::new(
            self.daemon
                .answer_as(&who, input, "input.")
                .await
                .or_status()?,
        ))
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
            return Err(session_not_found(id).into_status());
        }
        let mut pauses = self.daemon.pauses.list(session);
        // A session on another replica is forwarded there; without one,
        // the other replicas' pauses come from what this one relays.
        if let Some(cluster) = &self.daemon.cluster {
            let elsewhere = self.daemon.bus.with_view(|v| v.pauses(None));
            pauses.extend(
                elsewhere
                    .into_iter()
                    .filter(|p| !cluster.runs(&p.session_id)),
            );
        }
        Ok(Response::new(ListPausesResponse { pauses }))
    }
}

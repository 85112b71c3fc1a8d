//! `stepd.v1.InspectorService`: translates requests and delegates to
//! `inspector::Inspectors` (the registry) and `inspector::state::Inspector`
//! (navigation over one value).

use std::sync::Arc;
use stepd_rpc::status::IntoStatus as _;
use stepd_rpc::status::OrStatus as _;

use stepd_proto::v1::{inspector_service_server::InspectorService, *};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::daemon::Daemon;
use stepd_core::{error::ApiError, inspector};

/// PrintValue's chunk when the request names none.
const DEFAULT_CHUNK: usize = 16 * 1024;
/// Smaller chunks are raised to this: one message per byte cost a client
/// 372,000 messages for a large value, for no use.
pub const MIN_CHUNK: usize = 1024;
/// Larger chunks are lowered to this, far below the message size limit.
pub const MAX_CHUNK: usize = 1024 * 1024;

/// Handler of InspectorService.
pub struct InspectorApi {
    daemon: Arc<Daemon>,
}

impl InspectorApi {
    /// A handler over the daemon.
    pub fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
    }
}

/// Runs `op` on the inspector `$id` (locked for the call) and wraps the result.
macro_rules! with_inspector {
    ($self:ident, $id:expr, |$i:ident| $op:expr) => {{
        let slot = $self.daemon.inspectors.get(&$id).or_status()?;
        let mut guard = slot.lock().await;
        let $i = &mut *guard;
        $op.await.or_status()
    }};
}

#[tonic::async_trait]
impl InspectorService for InspectorApi {
    type PrintValueStream = ReceiverStream<Result<PrintValueResponse, Status>>;

    async fn inspect(
        &self,
        request: Request<InspectRequest>,
    ) -> Result<Response<InspectResponse>, Status> {
        let who = crate::auth::identity(&request);
        crate::auth::roles::inspect(&who, request.get_ref()).or_status()?;
        let held = self
            .daemon
            .inspectors_per_identity
            .take(&who.name)
            .or_status()?;
        let r = request.into_inner();
        let d = &self.daemon;
        let (session_id, root) = stepd_core::session::values::resolve(
            &d.sessions,
            &d.pauses,
            &d.inspectors,
            &r.session_id,
            r.source.as_ref(),
        )
        .await
        .or_status()?;
        let rendering = d
            .inspectors
            .open_held(session_id, root, r.config.as_ref(), Some(held))
            .await
            .or_status()?;
        Ok(Response::new(InspectResponse {
            rendering: Some(rendering),
        }))
    }

    async fn push(&self, request: Request<PushRequest>) -> Result<Response<PushResponse>, Status> {
        let r = request.into_inner();
        let rendering = with_inspector!(self, r.inspector_id, |i| i.push(u64::from(r.idx)))?;
        Ok(Response::new(PushResponse {
            rendering: Some(rendering),
        }))
    }

    async fn pop(&self, request: Request<PopRequest>) -> Result<Response<PopResponse>, Status> {
        let r = request.into_inner();
        let rendering = with_inspector!(self, r.inspector_id, |i| i.pop())?;
        Ok(Response::new(PopResponse {
            rendering: Some(rendering),
        }))
    }

    async fn next_sibling(
        &self,
        request: Request<NextSiblingRequest>,
    ) -> Result<Response<NextSiblingResponse>, Status> {
        let r = request.into_inner();
        let rendering = with_inspector!(self, r.inspector_id, |i| i.sibling(1))?;
        Ok(Response::new(NextSiblingResponse {
            rendering: Some(rendering),
        }))
    }

    async fn previous_sibling(
        &self,
        request: Request<PreviousSiblingRequest>,
    ) -> Result<Response<PreviousSiblingResponse>, Status> {
        let r = request.into_inner();
        let rendering = with_inspector!(self, r.inspector_id, |i| i.sibling(-1))?;
        Ok(Response::new(PreviousSiblingResponse {
            rendering: Some(rendering),
        }))
    }

    async fn next_page(
        &self,
        request: Request<NextPageRequest>,
    ) -> Result<Response<NextPageResponse>, Status> {
        let r = request.into_inner();
        let rendering = with_inspector!(self, r.inspector_id, |i| i.turn_page(1))?;
        Ok(Response::new(NextPageResponse {
            rendering: Some(rendering),
        }))
    }

    async fn previous_page(
        &self,
        request: Request<PreviousPageRequest>,
    ) -> Result<Response<PreviousPageResponse>, Status> {
        let r = request.into_inner();
        let rendering = with_inspector!(self, r.inspector_id, |i| i.turn_page(-1))?;
        Ok(Response::new(PreviousPageResponse {
            rendering: Some(rendering),
        }))
    }

    async fn refresh(
        &self,
        request: Request<RefreshRequest>,
    ) -> Result<Response<RefreshResponse>, Status> {
        let r = request.into_inner();
        let rendering = with_inspector!(self, r.inspector_id, |i| i.refresh(r.config.as_ref()))?;
        Ok(Response::new(RefreshResponse {
            rendering: Some(rendering),
        }))
    }

    async fn toggle_view_mode(
        &self,
        request: Request<ToggleViewModeRequest>,
    ) -> Result<Response<ToggleViewModeResponse>, Status> {
        let r = request.into_inner();
        let rendering = with_inspector!(self, r.inspector_id, |i| i.toggle_view())?;
        Ok(Response::new(ToggleViewModeResponse {
            rendering: Some(rendering),
        }))
    }

    async fn toggle_pretty_print(
        &self,
        request: Request<TogglePrettyPrintRequest>,
    ) -> Result<Response<TogglePrettyPrintResponse>, Status> {
        let r = request.into_inner();
        let rendering = with_inspector!(self, r.inspector_id, |i| i.toggle_pretty())?;
        Ok(Response::new(TogglePrettyPrintResponse {
            rendering: Some(rendering),
        }))
    }

    async fn show_analytics(
        &self,
        request: Request<ShowAnalyticsRequest>,
    ) -> Result<Response<ShowAnalyticsResponse>, Status> {
        let r = request.into_inner();
        let (rendering, analysed, cut_off) =
            with_inspector!(self, r.inspector_id, |i| i.analytics(r.cutoff))?;
        Ok(Response::new(ShowAnalyticsResponse {
            rendering: Some(rendering),
            analysed,
            cut_off,
        }))
    }

    async fn pin_value(
        &self,
        request: Request<PinValueRequest>,
    ) -> Result<Response<PinValueResponse>, Status> {
        let note = crate::auth::audit::Note::of(&request);
        let r = request.into_inner();
        note.set("inspector", &r.inspector_id);
        let valid = r
            .name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && r.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(ApiError::invalid_field(
                "name",
                format!(
                    "{} is not a name (letters, digits, _; not starting with a digit)",
                    stepd_core::error::quote(&r.name)
                ),
            )
            .into_status());
        }
        let slot = self.daemon.inspectors.get(&r.inspector_id).or_status()?;
        let mut i = slot.lock().await;
        let name = i.current().pin(&r.name).await.or_status()?;
        let rendering = i.render().await.or_status()?;
        Ok(Response::new(PinValueResponse {
            name,
            rendering: Some(rendering),
        }))
    }

    async fn print_value(
        &self,
        request: Request<PrintValueRequest>,
    ) -> Result<Response<Self::PrintValueStream>, Status> {
        let r = request.into_inner();
        let slot = self.daemon.inspectors.get(&r.inspector_id).or_status()?;
        let text = {
            let i = slot.lock().await;
            let node = i.current();
            node.check().or_status()?;
            node.print(&i.settings().limits()).await.or_status()?
        };
        let size = match r.chunk_size {
            0 => DEFAULT_CHUNK,
            n => usize::try_from(n)
                .unwrap_or(MAX_CHUNK)
                .clamp(MIN_CHUNK, MAX_CHUNK),
        };
        let parts = inspector::chunks(&text, size);
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            let n = parts.len();
            for (k, chunk) in parts.into_iter().enumerate() {
                let message = PrintValueResponse {
                    chunk,
                    last: k + 1 == n,
                };
                if tx.send(Ok(message)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn tap_value(
        &self,
        request: Request<TapValueRequest>,
    ) -> Result<Response<TapValueResponse>, Status> {
        let r = request.into_inner();
        let slot = self.daemon.inspectors.get(&r.inspector_id).or_status()?;
        let mut i = slot.lock().await;
        let node = i.current();
        node.check().or_status()?;
        self.daemon.inspectors.tap(&i, node, i.path());
        let rendering = i.render().await.or_status()?;
        Ok(Response::new(TapValueResponse {
            rendering: Some(rendering),
        }))
    }

    async fn tap_indexed(
        &self,
        request: Request<TapIndexedRequest>,
    ) -> Result<Response<TapIndexedResponse>, Status> {
        let r = request.into_inner();
        let slot = self.daemon.inspectors.get(&r.inspector_id).or_status()?;
        let mut i = slot.lock().await;
        let (child, _) = i.child(u64::from(r.idx)).await.or_status()?;
        let path = format!("{}{}", i.path(), child.key.segment());
        self.daemon.inspectors.tap(&i, child.node, path);
        let rendering = i.render().await.or_status()?;
        Ok(Response::new(TapIndexedResponse {
            rendering: Some(rendering),
        }))
    }

    async fn clear(
        &self,
        request: Request<ClearRequest>,
    ) -> Result<Response<ClearResponse>, Status> {
        let r = request.into_inner();
        self.daemon.inspectors.clear(&r.inspector_id).or_status()?;
        Ok(Response::new(ClearResponse {}))
    }
}

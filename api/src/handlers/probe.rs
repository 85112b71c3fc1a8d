//! `stepd.v1.ProbeService`: the first message must be Hello; the rest of the
//! stream belongs to the probe's session actor.

use std::{sync::Arc, time::Duration};
use stepd_rpc::status::IntoStatus as _;
use stepd_rpc::status::OrStatus as _;

use stepd_proto::v1::{
    ConnectRequest, ConnectResponse, connect_request::Message, probe_service_server::ProbeService,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::daemon::Daemon;
use stepd_core::error::ApiError;

/// How long a probe may take to say Hello.
const HELLO_DEADLINE: Duration = Duration::from_secs(10);
/// Messages queued for a probe; a probe that does not read them is gone.
const PROBE_QUEUE: usize = 256;

/// Handler of ProbeService.
pub struct ProbeApi {
    daemon: Arc<Daemon>,
}

impl ProbeApi {
    /// A handler over the daemon.
    pub fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
    }
}

#[tonic::async_trait]
impl ProbeService for ProbeApi {
    type ConnectStream = ReceiverStream<Result<ConnectResponse, Status>>;

    async fn connect(
        &self,
        request: Request<Streaming<ConnectRequest>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let (who, note) = (
            crate::auth::identity(&request),
            crate::auth::audit::Note::of(&request),
        );
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(HELLO_DEADLINE, inbound.message())
            .await
            .map_err(|_| ApiError::invalid_field("hello", "the probe did not say Hello in time"))
            .or_status()??;
        let Some(ConnectRequest {
            message: Some(Message::Hello(hello)),
        }) = first
        else {
            return Err(
                ApiError::invalid_field("hello", "the first message must be Hello").into_status(),
            );
        };
        stepd_core::limits::hello(&hello).or_status()?;
        let (out, rx) = mpsc::channel(PROBE_QUEUE);
        // A malformed message ends the stream with a status saying so, not
        // with the OK that means the daemon went away.
        let refusals = out.clone();
        let inbound = tokio_stream::StreamExt::map(inbound, move |message| {
            if let Err(status) = &message
                && crate::malformed::is_decode_failure(status)
            {
                let _ = refusals.try_send(Err(crate::malformed::refusal(status)));
            }
            message
        });
        let daemon = &self.daemon;
        let session_id = stepd_probe::start(
            daemon.context.clone(),
            daemon.probe_settings,
            &daemon.sessions,
            hello,
            &who.name,
            out,
            inbound,
        )
        .or_status()?;
        note.set("session", session_id);
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

//! `stepd.v1.ProbeService`: not in this version yet; Connect answers
//! UNIMPLEMENTED with reason NOT_IMPLEMENTED.

use stepd_proto::v1::{ConnectRequest, ConnectResponse, probe_service_server::ProbeService};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::error::ApiError;

/// Handler of ProbeService.
#[derive(Default)]
pub struct ProbeApi;

#[tonic::async_trait]
impl ProbeService for ProbeApi {
    type ConnectStream = ReceiverStream<Result<ConnectResponse, Status>>;

    async fn connect(
        &self,
        _: Request<Streaming<ConnectRequest>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        Err(ApiError::not_implemented(
            "ProbeService.Connect",
            "probe sessions for instrumented programs",
        )
        .into())
    }
}

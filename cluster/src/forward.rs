//! Forwarding: a unary call about a session (or a pause) another replica
//! runs is sent on to that replica as it came, under this replica's
//! credentials and with the caller's identity in two headers, and the
//! owner's answer — success or error — goes back unchanged. The owner
//! enforces the caller's role again and records the caller, not the
//! replica.
//!
//! The layer sits inside authentication, so the caller is known and
//! allowed here first. It reads only the first field of the request
//! (every session-scoped request has `session_id = 1`, every inspector
//! request `inspector_id = 1`, whose id names the replica holding it;
//! SendDebugInput has `input.key`), and only for the methods in
//! [`target_of`].

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};
use stepd_rpc::status::IntoStatus as _;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use stepd_proto::v1::{
    DebugInput, SendDebugInputRequest, SendDebugInputResponse,
    session_service_client::SessionServiceClient,
};
use tonic::{
    Status,
    body::Body,
    codegen::http::{Request, Response},
    metadata::MetadataMap,
};

use super::{Cluster, Peer};
use stepd_core::error::{ApiError, ApiResult};
use stepd_core::identity::Identity;

/// Adds [`ForwardService`] in front of the routes; `None` (one daemon)
/// passes every request straight through.
#[derive(Clone)]
pub struct ForwardLayer {
    /// The cluster, on PostgreSQL.
    pub cluster: Option<Arc<Cluster>>,
    /// The largest request accepted (a forwarded one is read whole).
    pub max_bytes: usize,
}

impl<S> tower::Layer<S> for ForwardLayer {
    type Service = ForwardService<S>;

    fn layer(&self, inner: S) -> ForwardService<S> {
        ForwardService {
            inner,
            cluster: self.cluster.clone(),
            max_bytes: self.max_bytes,
        }
    }
}

/// See [`ForwardLayer`].
#[derive(Clone)]
pub struct ForwardService<S> {
    inner: S,
    cluster: Option<Arc<Cluster>>,
    max_bytes: usize,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

/// What a request is about.
enum Target {
    Session(String),
    Pause(String),
    Inspector(String),
}

/// The first field of a session-scoped or inspector request: the id it
/// is about.
#[derive(Clone, PartialEq, prost::Message)]
struct FirstField {
    #[prost(string, tag = "1")]
    id: String,
}

/// Reads what a request message is about.
type Find = fn(&[u8]) -> Option<Target>;

/// The methods that are forwarded, and how to find what each is about.
fn target_of(path: &str) -> Option<Find> {
    fn session(message: &[u8]) -> Option<Target> {
        let first: FirstField = prost::Message::decode(message).ok()?;
        (!first.id.is_empty()).then_some(Target::Session(first.id))
    }
    fn pause(message: &[u8]) -> Option<Target> {
        let request: SendDebugInputRequest = prost::Message::decode(message).ok()?;
        Some(Target::Pause(request.input?.key))
    }
    fn inspector(message: &[u8]) -> Option<Target> {
        // Every inspector request but Inspect has `inspector_id = 1`.
        let first: FirstField = prost::Message::decode(message).ok()?;
        Some(Target::Inspector(first.id))
    }
    if let Some(method) = path.strip_prefix("/stepd.v1.InspectorService/") {
        return Some(if method == "Inspect" {
            session
        } else {
            inspector
        });
    }
    let method = path.strip_prefix("/stepd.v1.SessionService/")?;
    match method {
        "SendDebugInput" => Some(pause),
        "Disconnect" | "GetSession" | "Continue" | "Step" | "Pause" | "ListThreads"
        | "GetStackTrace" | "ListScopes" | "ListVariables" | "SetVariable" | "Evaluate"
        | "ReadOutput" | "ListPauses" => Some(session),
        _ => None,
    }
}

impl<S> tower::Service<Request<Body>> for ForwardService<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Response<Body>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let (Some(cluster), Some(target_of)) = (&self.cluster, target_of(request.uri().path()))
        else {
            return Box::pin(self.inner.call(request));
        };
        let cluster = cluster.clone();
        let max_bytes = self.max_bytes;
        // The ready service is taken; its clone waits for the next call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let bytes = match Limited::new(body, max_bytes.saturating_add(5))
                .collect()
                .await
            {
                Ok(collected) => collected.to_bytes(),
                Err(err) => return Ok(unreadable(&*err, max_bytes).into_http()),
            };
            let owner = message(&bytes)
                .and_then(target_of)
                .and_then(|target| match target {
                    Target::Session(id) => cluster.owner_of_session(&id),
                    Target::Pause(key) => cluster.owner_of_pause(&key),
                    Target::Inspector(id) => cluster.owner_of_inspector(&id),
                });
            let identity = parts.extensions.get::<Arc<Identity>>().cloned();
            let request = Request::from_parts(parts, Body::new(Full::new(bytes)));
            match (owner, identity) {
                (Some(peer), Some(who)) => Ok(forward(&cluster, &peer, &who, request).await),
                _ => inner.call(request).await,
            }
        })
    }
}

/// The refusal of a request whose body could not be read whole: over the
/// message limit (as tonic refuses it on one daemon), or broken off.
fn unreadable(err: &(dyn std::error::Error + 'static), max_bytes: usize) -> Status {
    if err.is::<http_body_util::LengthLimitError>() {
        return ApiError::new(
            stepd_proto::v1::ErrorReason::LimitExceeded,
            format!("the request is larger than the {max_bytes} bytes --max-message-bytes allows"),
        )
        .with("limit", "max_message_bytes")
        .with("max", max_bytes.to_string())
        .into_status();
    }
    Status::cancelled(format!("the request broke off: {err}"))
}

/// The message of an uncompressed one-message gRPC body.
fn message(body: &Bytes) -> Option<&[u8]> {
    let (header, rest) = body.split_at_checked(5)?;
    let length = usize::try_from(u32::from_be_bytes(header[1..5].try_into().ok()?)).ok()?;
    (header[0] == 0 && rest.len() == length).then_some(rest)
}

async fn forward(
    cluster: &Cluster,
    peer: &Peer,
    who: &Identity,
    mut request: Request<Body>,
) -> Response<Body> {
    let channel = match cluster.peers.channel(peer) {
        Ok(channel) => channel,
        Err(err) => return stepd_rpc::status::status(err).into_http(),
    };
    let headers = request.headers_mut();
    headers.remove("authorization");
    headers.extend(cluster.peers.headers(Some(who)));
    stepd_rpc::propagate_rpc(headers);
    use tower::ServiceExt;
    match channel.oneshot(request).await {
        Ok(response) => response.map(Body::new),
        Err(err) => stepd_rpc::status::status(unreachable(peer, &err.to_string())).into_http(),
    }
}

fn unreachable(peer: &Peer, why: &str) -> ApiError {
    ApiError::new(
        stepd_proto::v1::ErrorReason::ReplicaUnavailable,
        format!(
            "the session runs on replica {} at {}, which did not answer: {why}",
            peer.id, peer.address
        ),
    )
    .with("replica", stepd_core::error::clip(&peer.id))
}

impl Cluster {
    /// Answers a pause another replica holds (a DebugInput on a Subscribe
    /// stream here), as `who`.
    pub async fn answer_elsewhere(
        &self,
        peer: &Peer,
        input: DebugInput,
        who: &Identity,
    ) -> ApiResult<SendDebugInputResponse> {
        let mut request = tonic::Request::new(SendDebugInputRequest { input: Some(input) });
        let mut headers = self.peers.headers(Some(who));
        stepd_rpc::propagate_rpc(&mut headers);
        *request.metadata_mut() = MetadataMap::from_headers(headers);
        SessionServiceClient::new(self.peers.channel(peer)?)
            .send_debug_input(request)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| match stepd_rpc::status::reason_of(&status) {
                stepd_proto::v1::ErrorReason::Unspecified => unreachable(peer, status.message()),
                _ => stepd_rpc::status::error_of(&status),
            })
    }
}

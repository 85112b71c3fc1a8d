//! `stepd.v1.EventService`.
//!
//! Served by hand rather than through the generated server: a Subscribe
//! stream sends events already encoded, each once for every stream that
//! sends it (`events::wire`), as HTTP/2 body chunks; tonic's encoder would
//! encode every message again into each stream's own buffer.

use std::{
    convert::Infallible,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};
use stepd_rpc::status::OrStatus as _;

use bytes::Bytes;
use http_body::Frame;
use stepd_proto::{
    codec::LeanCodec,
    v1::{SubscribeRequest, SubscribeResponse},
};
use tokio::sync::mpsc;
use tokio_util::sync::ReusableBoxFuture;
use tonic::{
    Request, Status, Streaming, body::Body, codec::Codec, codegen::http, server::NamedService,
};

use super::subscription::Subscriber;
use crate::daemon::Daemon;

/// Bytes of messages a stream hands its HTTP/2 stream that are not yet
/// written out; more wait in the stream's own queue, counted there. Enough
/// to keep a reading client's connection busy; for one that does not read,
/// what sits outside the queue, beside at most one larger message.
const TRANSPORT_WINDOW: usize = 64 * 1024;

/// The route of the one method.
const SUBSCRIBE: &str = "/stepd.v1.EventService/Subscribe";

/// EventService, served.
#[derive(Clone)]
pub struct EventApi {
    daemon: Arc<Daemon>,
}

impl EventApi {
    /// A handler over the daemon.
    pub fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
    }

    async fn subscribe(
        &self,
        request: Request<Streaming<SubscribeRequest>>,
    ) -> Result<SubscribeBody, Status> {
        let who = crate::auth::identity(&request);
        // A peer replica's relay takes only the sessions this one runs;
        // only an admin (as peers authenticate) may ask for that.
        let relay = request.metadata().contains_key(stepd_cluster::RELAY);
        if relay {
            crate::auth::roles::peer_replica(
                &who,
                "relaying a replica's own sessions (x-stepd-relay)",
            )
            .or_status()?;
        }
        let slots = if relay {
            &self.daemon.relays
        } else {
            &self.daemon.subscribers
        };
        let slot = slots.take(&who.name).or_status()?;
        let client_name = super::client_name(&request);
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::unbounded_channel();
        let config = &self.daemon.config;
        let subscriber = Subscriber {
            bus: self.daemon.bus.clone(),
            only_own: self
                .daemon
                .cluster
                .as_ref()
                .filter(|_| relay)
                .map(stepd_cluster::Cluster::own),
            answer: {
                let daemon = self.daemon.clone();
                // A DebugInput on the stream is a call of its own, answered
                // as SendDebugInput is (the client's name only in the
                // audit line).
                Arc::new(move |input, client: String| {
                    let daemon = daemon.clone();
                    let who = who.clone();
                    Box::pin(async move {
                        let key = input.key.clone();
                        let result = daemon
                            .answer_as(&who, input, "debug_input.")
                            .await
                            .map(|_| ());
                        crate::auth::audit::write(
                            Some(&who),
                            "stepd.v1.EventService/Subscribe:DebugInput",
                            &format!("pause={}", stepd_core::error::clip(&key)),
                            &client,
                            result.as_ref().map_or_else(
                                |e| stepd_rpc::status::tonic_code(e.code()),
                                |()| tonic::Code::Ok,
                            ),
                        );
                        result
                    })
                })
            },
            // A peer's relay outlasts the start of a shutdown: it ends once
            // this replica's sessions did, with their ends.
            shutdown: match self.daemon.cluster.as_ref().filter(|_| relay) {
                Some(cluster) => cluster.relays_end(),
                None => self.daemon.shutdown.clone(),
            },
            heartbeat: config.heartbeat_interval,
            client_name,
            buffer_events: config.subscriber_buffer,
            buffer_bytes: config.subscriber_buffer_bytes,
            part_bytes: stepd_core::limits::page_bytes(config.max_message_bytes),
            max_message_bytes: config.max_message_bytes,
            transport_window: TRANSPORT_WINDOW,
            // The stream's slot is held until it and what it handed to
            // HTTP/2 are gone, so streams that were ended but whose client
            // never reads cannot pile up past the caps.
            memory: self.daemon.subscriber_memory.stream(slot),
        };
        let drained = {
            let memory = subscriber.memory.clone();
            ReusableBoxFuture::new(async move { memory.room(1).await })
        };
        tokio::spawn(subscriber.run(inbound, tx));
        Ok(SubscribeBody {
            rx,
            end: None,
            drained,
            done: false,
        })
    }

    /// Serves one HTTP/2 request of the service.
    async fn serve(self, request: http::Request<Body>) -> http::Response<Body> {
        if request.uri().path() != SUBSCRIBE {
            return Status::unimplemented("").into_http();
        }
        // The daemon accepts no compressed messages, as tonic's server
        // without compression configured.
        if let Some(encoding) = request.headers().get("grpc-encoding")
            && encoding != "identity"
        {
            return Status::unimplemented(format!(
                "Content is compressed with `{}` which isn't supported",
                String::from_utf8_lossy(encoding.as_bytes())
            ))
            .into_http();
        }
        let max = self.daemon.config.max_message_bytes;
        let decoder = LeanCodec::<SubscribeResponse, SubscribeRequest>::default().decoder();
        let request = request.map(|body| Streaming::new_request(decoder, body, None, Some(max)));
        match self.subscribe(Request::from_http(request)).await {
            Ok(body) => {
                let mut response = http::Response::new(Body::new(body));
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/grpc"),
                );
                response
            }
            Err(status) => status.into_http(),
        }
    }
}

impl NamedService for EventApi {
    const NAME: &'static str = "stepd.v1.EventService";
}

impl tower::Service<http::Request<Body>> for EventApi {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let api = self.clone();
        Box::pin(async move { Ok(api.serve(request).await) })
    }
}

/// The response body of one Subscribe stream: the encoded messages its task
/// hands over, as they come, then its status as trailers (OK when the task
/// ended without one: the daemon shut down).
///
/// The trailers wait until HTTP/2 has written out every message before
/// them. A response whose end is queued behind data its client does not
/// read would be complete to hyper, and the stream would outlive it in h2
/// alone; this way it stays open until the client reads or leaves, like
/// any other stream, and its memory is counted until then.
pub struct SubscribeBody {
    rx: mpsc::UnboundedReceiver<Result<Bytes, Status>>,
    end: Option<Status>,
    /// Completes when nothing handed over waits to be written out.
    drained: ReusableBoxFuture<'static, ()>,
    done: bool,
}

impl http_body::Body for SubscribeBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.end.is_none() {
            let end = match self.rx.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(message))) => {
                    return Poll::Ready(Some(Ok(Frame::data(message))));
                }
                Poll::Ready(Some(Err(status))) => status,
                Poll::Ready(None) => Status::ok(""),
            };
            self.end = Some(end);
        }
        if self.drained.poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.done = true;
        let status = self.end.take().unwrap_or_else(|| Status::ok(""));
        let mut trailers = http::HeaderMap::new();
        if let Err(unsendable) = status.add_header(&mut trailers) {
            trailers.clear();
            let _ = unsendable.add_header(&mut trailers);
        }
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

//! `stepd.v1.EventService`.

use std::sync::Arc;

use stepd_proto::v1::{SubscribeRequest, SubscribeResponse, event_service_server::EventService};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::{daemon::Daemon, events::Subscriber};

/// Events handed to a client's HTTP/2 stream and not yet taken by it. The
/// subscriber holds the rest in its own queue, bounded in bytes, so this is
/// kept small: what sits here is outside that bound.
const STREAM_QUEUE: usize = 2;

/// Handler of EventService.
pub struct EventApi {
    daemon: Arc<Daemon>,
}

impl EventApi {
    /// A handler over the daemon.
    pub fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
    }
}

#[tonic::async_trait]
impl EventService for EventApi {
    type SubscribeStream = ReceiverStream<Result<SubscribeResponse, Status>>;

    async fn subscribe(
        &self,
        request: Request<Streaming<SubscribeRequest>>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let who = crate::auth::identity(&request);
        // A peer replica's relay takes only the sessions this one runs;
        // only an admin (as peers authenticate) may ask for that.
        let relay = request.metadata().contains_key(crate::cluster::RELAY);
        if relay {
            crate::auth::roles::peer_replica(
                &who,
                "relaying a replica's own sessions (x-stepd-relay)",
            )?;
        }
        let slot = self.daemon.subscribers.take(&who.name)?;
        let client_name = super::client_name(&request);
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let subscriber = Subscriber {
            bus: self.daemon.bus.clone(),
            only_own: self
                .daemon
                .cluster
                .as_ref()
                .filter(|_| relay)
                .map(crate::cluster::Cluster::own),
            answer: {
                let pauses = self.daemon.pauses.clone();
                let cluster = self.daemon.cluster.clone();
                // A DebugInput on the stream is a call of its own: the same
                // role rule as SendDebugInput, `by` the authenticated
                // identity (the client's name only in the audit line).
                Arc::new(move |input, client: String| {
                    let pauses = pauses.clone();
                    let who = who.clone();
                    let cluster = cluster.clone();
                    Box::pin(async move {
                        let key = input.key.clone();
                        let result = match crate::auth::roles::answer_pause(&who)
                            .and_then(|()| crate::limits::debug_input(&input, "debug_input."))
                        {
                            Ok(()) => match cluster
                                .as_ref()
                                .and_then(|c| Some((c, c.owner_of_pause(&input.key)?)))
                            {
                                Some((cluster, peer)) => {
                                    cluster.answer_elsewhere(&peer, input, &who).await
                                }
                                None => pauses.answer(input, who.name.clone()).await.map(|_| ()),
                            },
                            Err(err) => Err(err),
                        };
                        crate::auth::audit::write(
                            Some(&who),
                            "stepd.v1.EventService/Subscribe:DebugInput",
                            &format!("pause={}", crate::error::clip(&key)),
                            &client,
                            result
                                .as_ref()
                                .map_or_else(|e| e.code(), |()| tonic::Code::Ok),
                        );
                        result
                    })
                })
            },
            shutdown: self.daemon.shutdown.clone(),
            heartbeat: self.daemon.config.heartbeat_interval,
            client_name,
            buffer_events: self.daemon.config.subscriber_buffer,
            buffer_bytes: self.daemon.config.subscriber_buffer_bytes,
            part_bytes: crate::limits::page_bytes(self.daemon.config.max_message_bytes),
        };
        tokio::spawn(async move {
            let _slot = slot;
            subscriber.run(inbound, tx).await;
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

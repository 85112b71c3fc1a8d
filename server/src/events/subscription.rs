//! One Subscribe stream: reads the client's Watch / DebugInput / Heartbeat
//! messages and writes events, resynchronising when the client falls behind.

use std::{future::Future, pin::Pin, sync::Arc, time::Duration};

use stepd_proto::v1::{
    DebugInput, Event, HeartbeatEvent, SubscribeRequest, SubscribeResponse, Watch, event::Payload,
    subscribe_request::Message,
};
use tokio::{
    sync::{broadcast, mpsc},
    time::{Instant, sleep_until},
};
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::{EventBus, Filter, Start};
use crate::{
    error::{ApiError, ApiResult},
    time::now_timestamp,
};

/// Where a stream's debug inputs go: the sessions' pauses, handed in from
/// above so events never reach up into sessions.
pub type Answerer = Arc<
    dyn Fn(DebugInput, String) -> Pin<Box<dyn Future<Output = ApiResult<()>> + Send>> + Send + Sync,
>;

/// Debug inputs of one stream waiting for their answers at once; more are
/// refused, so one client cannot pile up work.
const INPUTS_IN_FLIGHT: usize = 64;

/// Everything a Subscribe stream needs from the daemon.
pub struct Subscriber {
    /// Where events come from.
    pub bus: Arc<EventBus>,
    /// Where debug inputs go.
    pub answer: Answerer,
    /// Ends the stream on daemon shutdown.
    pub shutdown: CancellationToken,
    /// Quiet time after which a heartbeat is sent.
    pub heartbeat: Duration,
    /// Default name of this client in `pause_resolved.by`.
    pub client_name: String,
}

type Out = mpsc::Sender<Result<SubscribeResponse, Status>>;

/// The writing half: sends to the client unless it left or the daemon stops.
struct Outbox {
    out: Out,
    shutdown: CancellationToken,
    last_sent: Instant,
}

impl Outbox {
    /// Sends one event; false when the stream is over.
    async fn send(&mut self, event: Event) -> bool {
        let message = Ok(SubscribeResponse { event: Some(event) });
        let sent = tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => false,
            r = self.out.send(message) => r.is_ok(),
        };
        self.last_sent = Instant::now();
        sent
    }
}

/// The last seq a snapshot covers.
fn snapshot_seq(event: &Event) -> u64 {
    match &event.payload {
        Some(Payload::Snapshot(s)) => s.seq,
        _ => 0,
    }
}

async fn next_live(
    rx: &mut Option<broadcast::Receiver<Arc<Event>>>,
) -> Result<Arc<Event>, broadcast::error::RecvError> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Subscriber {
    /// Runs the stream until the client leaves or the daemon shuts down.
    pub async fn run<S>(self, mut inbound: S, out: Out)
    where
        S: Stream<Item = Result<SubscribeRequest, Status>> + Unpin,
    {
        let mut outbox = Outbox {
            out,
            shutdown: self.shutdown.clone(),
            last_sent: Instant::now(),
        };
        let mut filter = Filter::default();
        let mut live: Option<broadcast::Receiver<Arc<Event>>> = None;
        // Highest seq this stream has accounted for (delivered or filtered out).
        let mut cursor = 0u64;
        let mut client_name = self.client_name.clone();
        // A client may half-close its side (grpcurl does at the end of its
        // input) and still want events, so only stop reading, not writing.
        let mut reading = true;
        // Answers run beside the stream (an EVAL may wait on the program), and
        // their failures come back here to be written as `error` events.
        let (failures_tx, mut failures) = mpsc::unbounded_channel::<Event>();
        let in_flight = Arc::new(tokio::sync::Semaphore::new(INPUTS_IN_FLIGHT));
        loop {
            let heartbeat_at = outbox.last_sent + self.heartbeat;
            let open = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => false,
                () = outbox.out.closed() => false,
                message = inbound.next(), if reading => match message {
                    Some(Ok(SubscribeRequest { message: Some(Message::Watch(watch)) })) => {
                        if !watch.client_name.is_empty() {
                            client_name.clone_from(&watch.client_name);
                        }
                        filter = Filter::from_watch(&watch);
                        let (start, rx) = self.start(&filter, &watch);
                        live = Some(rx);
                        self.send_start(&mut outbox, start, &mut cursor, watch.resume_after_seq).await
                    }
                    Some(Ok(SubscribeRequest { message: Some(Message::DebugInput(input)) })) => {
                        let key = input.key.clone();
                        let by = if input.client_name.is_empty() { client_name.clone() } else { input.client_name.clone() };
                        let failures_tx = failures_tx.clone();
                        match in_flight.clone().try_acquire_owned() {
                            Ok(permit) => {
                                let answering = (self.answer)(input, by);
                                tokio::spawn(async move {
                                    if let Err(err) = answering.await {
                                        let _ = failures_tx.send(local(Payload::Error(err.to_stream_error(&key))));
                                    }
                                    drop(permit);
                                });
                            }
                            Err(_) => {
                                let err = ApiError::new(
                                    stepd_proto::v1::ErrorReason::LimitExceeded,
                                    format!("{INPUTS_IN_FLIGHT} debug inputs of this stream are still being answered"),
                                )
                                .with("limit", "inputs_in_flight");
                                let _ = failures_tx.send(local(Payload::Error(err.to_stream_error(&key))));
                            }
                        }
                        true
                    }
                    Some(Ok(_)) => true,
                    Some(Err(status)) => {
                        tracing::debug!(%status, "subscriber stream failed");
                        // Ending with OK would read as a daemon shutdown; a
                        // malformed message ends the stream saying so.
                        if crate::malformed::is_decode_failure(&status) {
                            let _ = outbox.out.send(Err(crate::malformed::refusal(&status))).await;
                        }
                        false
                    }
                    None => {
                        reading = false;
                        true
                    }
                },
                Some(failure) = failures.recv() => outbox.send(failure).await,
                received = next_live(&mut live) => match received {
                    Ok(event) => {
                        if event.seq <= cursor {
                            true
                        } else {
                            cursor = event.seq;
                            !filter.admits(&event) || outbox.send(Event::clone(&event)).await
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::info!(missed, client = %client_name, "subscriber lagged; resynchronising");
                        let (gap, snapshot, rx) = self.bus.resync(&filter, cursor);
                        live = Some(rx);
                        cursor = snapshot_seq(&snapshot);
                        outbox.send(gap).await && outbox.send(snapshot).await
                    }
                    Err(broadcast::error::RecvError::Closed) => false,
                },
                () = sleep_until(heartbeat_at) => {
                    let last_seq = self.bus.last_seq();
                    outbox.send(local(Payload::Heartbeat(HeartbeatEvent { last_seq }))).await
                }
            };
            if !open {
                return;
            }
        }
    }

    fn start(&self, filter: &Filter, watch: &Watch) -> (Start, broadcast::Receiver<Arc<Event>>) {
        let resume = (watch.resume_after_seq > 0).then_some(watch.resume_after_seq);
        self.bus
            .subscribe(filter, resume, &watch.resume_instance_id)
    }

    async fn send_start(
        &self,
        outbox: &mut Outbox,
        start: Start,
        cursor: &mut u64,
        resume_after: u64,
    ) -> bool {
        match start {
            Start::Snapshot(snapshot) => {
                *cursor = snapshot_seq(&snapshot);
                outbox.send(*snapshot).await
            }
            Start::Replay(missed) => {
                *cursor = resume_after;
                for event in missed {
                    *cursor = event.seq;
                    if !outbox.send(Event::clone(&event)).await {
                        return false;
                    }
                }
                true
            }
            Start::Resync { gap, snapshot } => {
                *cursor = snapshot_seq(&snapshot);
                outbox.send(*gap).await && outbox.send(*snapshot).await
            }
        }
    }
}

/// A stream-local event (not numbered, never replayed).
fn local(payload: Payload) -> Event {
    Event {
        seq: 0,
        session_id: String::new(),
        time: Some(now_timestamp()),
        payload: Some(payload),
    }
}
